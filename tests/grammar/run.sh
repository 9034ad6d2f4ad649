#!/bin/sh
# Structured-output oracle tests (TAP): tests/grammar/oracle.py against `tokenloom serve` on the
# shared models, validating replies with python3-jsonschema and hand-written acceptors.
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TL_BIN=${TL_BIN:-$ROOT/build/tokenloom}
case "$TL_BIN" in /*) ;; *) TL_BIN=$ROOT/$TL_BIN ;; esac
TL_SHARED=${TL_SHARED:-$(cd "$ROOT/.." && pwd)/shared}
exec python3 "$HERE/oracle.py" "$TL_BIN" "$TL_SHARED"
