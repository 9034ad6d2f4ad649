#!/bin/sh
# Installs the Debian packages tokenloom needs to build and test. Idempotent: installs only what
# is missing. Run as root (CI does); as another user it prints the one apt-get line to run.
set -eu
PKGS="build-essential pkg-config libpcre2-dev libcmocka-dev libevent-dev libjansson-dev curl jq"
# tests/chat/oracle.py: Jinja2 is the reference renderer for chat templates.
PKGS="$PKGS python3 python3-jinja2"
# The gRPC front: gRPC's C core and protobuf-c (C code generated from proto/ at build time).
PKGS="$PKGS libgrpc-dev libprotobuf-c-dev protobuf-c-compiler"
# tests/grpc: a Python client on Debian's grpcio, stubs generated at test time.
PKGS="$PKGS python3-grpcio python3-grpc-tools"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# tests/http runs the openai npm client: Debian's nodejs/npm unless a node is already there.
command -v node >/dev/null 2>&1 || missing="$missing nodejs"
command -v npm >/dev/null 2>&1 || missing="$missing npm"
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "tokenloom: missing Debian packages. Run as root:" >&2
    echo "  apt-get install -y$missing" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq || true
apt-get install -y -qq --no-install-recommends $missing
