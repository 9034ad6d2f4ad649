#!/bin/sh
# One of the model-family tests (tests/models/test_NAME.py: families, bad_files, engine_families)
# as a TAP program for tests/run.sh, with a python3 that has NumPy (Debian's python3-numpy).
cd "$(dirname "$0")/../.." || exit 1
py=""
for c in python3 /usr/bin/python3; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c "import numpy" 2>/dev/null; then py=$c; break; fi
done
if [ -z "$py" ]; then
    echo "1..1"
    echo "not ok 1 - python3 with NumPy (Debian python3-numpy) is not installed"
    exit 1
fi
exec "$py" "tests/models/test_$1.py"
