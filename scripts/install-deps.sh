#!/bin/sh
# Installs the Debian packages tokenloom needs. Idempotent: installs only what is missing. Run as
# root (CI does); as another user it prints the one apt-get line to run.
#   sh scripts/install-deps.sh build   what `make` / `make run` need (compiler, libraries)
#   sh scripts/install-deps.sh test    the build set plus what `make test` needs (cmocka, curl,
#                                      jq, pytest, node for the OpenAI client tests)
#   sh scripts/install-deps.sh         both (the same as test)
#   TL_DEPS=build sh scripts/install-deps.sh   the same as `build` (deploy/Dockerfile's build stage)
set -eu
SET=${1:-${TL_DEPS:-test}}
BUILD_PKGS="build-essential pkg-config libpcre2-dev libevent-dev libjansson-dev"
TEST_PKGS="libcmocka-dev curl jq python3 python3-pytest python3-venv"
# tests/chat/oracle.py: Jinja2 is the reference renderer for chat templates.
TEST_PKGS="$TEST_PKGS python3-jinja2"
# tests/models: NumPy reference forward passes of the model families.
TEST_PKGS="$TEST_PKGS python3-numpy"
# The gRPC front: gRPC's C core and protobuf-c (C code generated from proto/ at build time).
BUILD_PKGS="$BUILD_PKGS libgrpc-dev libprotobuf-c-dev protobuf-c-compiler"
# tests/grpc: a Python client on Debian's grpcio, stubs generated at test time.
TEST_PKGS="$TEST_PKGS python3-grpcio python3-grpc-tools"
# The Vulkan backend (src/gpu): headers and the GLSL-to-SPIR-V compiler to build it; Mesa's
# lavapipe (a Vulkan device on the CPU) and vulkaninfo so `make test` runs the Vulkan tier.
BUILD_PKGS="$BUILD_PKGS libvulkan-dev glslc"
TEST_PKGS="$TEST_PKGS mesa-vulkan-drivers vulkan-tools"
case "$SET" in
build) PKGS=$BUILD_PKGS ;;
test | all) PKGS="$BUILD_PKGS $TEST_PKGS" ;;
*)
    echo "usage: $0 [build|test]" >&2
    exit 2
    ;;
esac
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ "$SET" != build ]; then
    # tests/http runs the openai npm client: Debian's nodejs/npm unless a node is already there.
    command -v node >/dev/null 2>&1 || missing="$missing nodejs"
    command -v npm >/dev/null 2>&1 || missing="$missing npm"
    # tests/deploy: the nginx gateway, Prometheus and promtool, kubectl (kustomize).
    command -v nginx >/dev/null 2>&1 || missing="$missing nginx"
    command -v prometheus >/dev/null 2>&1 || missing="$missing prometheus"
    command -v kubectl >/dev/null 2>&1 || missing="$missing kubernetes-client"
    # tests/dashboard: the dashboard page in headless Chromium (driven by npm playwright-core).
    command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
fi
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "tokenloom: missing Debian packages. Run as root:" >&2
    echo "  apt-get install -y$missing" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq || true
apt-get install -y -qq --no-install-recommends $missing
