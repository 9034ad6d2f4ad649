#!/bin/sh
# The gRPC front's end-to-end tests (TAP): generates the Python stubs from proto/ into a temp
# folder with Debian's grpc_tools, then runs grpc_client_test.py against real servers on
# stories260K (free ports). Needs python3-grpcio and python3-grpc-tools.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TL_BIN=${TL_BIN:-$ROOT/build/tokenloom}
case "$TL_BIN" in /*) ;; *) TL_BIN=$ROOT/$TL_BIN ;; esac
TL_SHARED=${TL_SHARED:-$(cd "$ROOT/.." && pwd)/shared}
# Debian's interpreter: a python3 earlier in PATH (pyenv, venv) may lack python3-grpcio.
PY=${TL_PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || PY=python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
if ! "$PY" -m grpc_tools.protoc -I"$ROOT/proto" --python_out="$TMP" --grpc_python_out="$TMP" \
    "$ROOT/proto/grpc_service.proto"; then
    echo "1..1"
    echo "not ok 1 - generate the Python stubs (python3-grpc-tools installed?)"
    exit 1
fi
PYTHONPATH="$TMP" TL_BIN="$TL_BIN" TL_MODEL="${TL_GRPC_MODEL:-$TL_SHARED/models/stories260K.gguf}" \
    "$PY" "$HERE/grpc_client_test.py" "$@"
