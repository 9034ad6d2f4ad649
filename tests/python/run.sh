#!/bin/sh
# The Python binding's tests (pytest) as one TAP program for tests/run.sh: picks a python3 that
# has pytest (Debian's python3-pytest), points the package at $BUILD/libtokenloom.so and writes
# pytest's per-test outcomes as TAP (conftest.py), then pytest's own summary as comments.
BUILD=${BUILD:-build}
cd "$(dirname "$0")/../.." || exit 1
py=""
for c in python3 /usr/bin/python3; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c "import pytest" 2>/dev/null; then py=$c; break; fi
done
if [ -z "$py" ]; then
    echo "1..1"
    echo "not ok 1 - python3 with pytest (Debian python3-pytest) is not installed"
    exit 1
fi
if [ ! -f "$BUILD/libtokenloom.so" ]; then
    echo "1..1"
    echo "not ok 1 - $BUILD/libtokenloom.so is missing (make shlib)"
    exit 1
fi
tap=$(mktemp)
trap 'rm -f "$tap"' EXIT
TOKENLOOM_LIB=$(pwd)/$BUILD/libtokenloom.so TL_TAP_OUT=$tap TOKENLOOM_LOG=warn \
    "$py" -m pytest -q -p no:cacheprovider tests/python >"$tap.log" 2>&1
rc=$?
cat "$tap"
sed 's/^/# /' "$tap.log" | tail -n 40
rm -f "$tap.log"
exit $rc
