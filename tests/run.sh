#!/bin/sh
# Runs every test and prints "N passed, N failed". Each test program speaks TAP ("ok N - name",
# "not ok N - name", a plan "1..N"): the unit binaries in $BUILD/tests (cmocka in TAP mode) and
# the script tests tests/cli/*.sh, tests/http/run.sh, tests/grpc/run.sh, tests/python/run.sh
# (pytest as TAP), tests/grammar/run.sh, tests/tokenizer/test_*.py, tests/models/run.sh,
# tests/chat/e2e_tokenize.py,
# tests/dashboard/test_dashboard.py and tests/deploy/test_*.py. A program that dies before
# finishing its plan counts its missing tests as failed. TL_TEST_ONLY="substring ..." limits
# which programs run (a program runs when its name contains any of the space-separated
# substrings); TL_TEST_SKIP="name ..." leaves programs out by exact name.
BUILD=${BUILD:-build}
export TL_SHARED=${TL_SHARED:-$(cd "$(dirname "$0")/../.." && pwd)/shared}
export CMOCKA_MESSAGE_OUTPUT=TAP
export TL_BIN=${TL_BIN:-$BUILD/tokenloom}
pass=0; fail=0; failed_names=""
log=$(mktemp); trap 'rm -f "$log"' EXIT
run_one() {
    name=$1; shift
    if [ -n "${TL_TEST_ONLY:-}" ]; then
        wanted=0
        for sub in $TL_TEST_ONLY; do case "$name" in *"$sub"*) wanted=1 ;; esac; done
        [ "$wanted" -eq 1 ] || return
    fi
    # TL_TEST_SKIP="name ...": programs left out by exact name (the sanitizer tier's exceptions).
    for skip in ${TL_TEST_SKIP:-}; do
        if [ "$name" = "$skip" ]; then
            echo "$name: skipped (TL_TEST_SKIP)"
            return
        fi
    done
    "$@" >"$log" 2>&1
    rc=$?
    # A TAP skip ("ok N # SKIP", or cmocka's "not ok N # SKIP") counts as passed, as it says.
    sk=$(grep -c '^not ok [0-9]* *# SKIP' "$log")
    p=$(($(grep -c '^ok ' "$log") + sk)); f=$(($(grep -c '^not ok ' "$log") - sk))
    plan=$(sed -n 's/^1\.\.\([0-9][0-9]*\).*/\1/p' "$log" | head -n 1)
    missing=0
    if [ -n "$plan" ] && [ $((p + f)) -lt "$plan" ]; then missing=$((plan - p - f)); fi
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && [ "$missing" -eq 0 ]; then missing=1; fi
    pass=$((pass + p)); fail=$((fail + f + missing))
    if [ $((f + missing)) -gt 0 ]; then
        failed_names="$failed_names $name"
        echo "---- $name (exit $rc): $p passed, $((f + missing)) failed"
        grep -v '^ok ' "$log" | tail -n 40
    else
        if [ "$sk" -gt 0 ]; then echo "$name: $p passed ($sk skipped)"; else echo "$name: $p passed"; fi
    fi
}
for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    case "$t" in *.d) continue ;; esac
    run_one "$(basename "$t")" "$t"
done
for t in tests/cli/*.sh; do
    [ -f "$t" ] || continue
    run_one "$(basename "$t")" sh "$t"
done
if [ -f tests/http/run.sh ]; then run_one http sh tests/http/run.sh; fi
if [ -f tests/grpc/run.sh ]; then run_one grpc sh tests/grpc/run.sh; fi
# The Python binding needs $BUILD/libtokenloom.so, which `make test` builds except in the
# sanitizer tiers (an ASan library cannot be loaded into python3).
if [ -f tests/python/run.sh ] && [ -f "$BUILD/libtokenloom.so" ]; then
    run_one python sh tests/python/run.sh
fi
if [ -f tests/grammar/run.sh ]; then run_one grammar sh tests/grammar/run.sh; fi
# Tokenizers against oracles written in Python (WordPiece: tests/tokenizer/test_wordpiece.py).
for t in tests/tokenizer/test_*.py; do
    [ -f "$t" ] || continue
    run_one "$(basename "$t")" python3 "$t"
done
# Model families against NumPy references written from the HF model definitions.
for t in families bad_files bert; do
    if [ -f "tests/models/test_$t.py" ]; then run_one "models_$t" sh tests/models/run.sh "$t"; fi
done
# ... and through the engine, over the Python binding (needs $BUILD/libtokenloom.so, as above).
if [ -f tests/models/test_engine_families.py ] && [ -f "$BUILD/libtokenloom.so" ]; then
    run_one models_engine_families sh tests/models/run.sh engine_families
fi
# Chat templates end to end: a server per real template vs Jinja2 (tests/chat/oracle.py).
if [ -f tests/chat/e2e_tokenize.py ]; then run_one chat_e2e python3 tests/chat/e2e_tokenize.py; fi
# The dashboard page and GET /stats, with the page in headless Chromium (playwright-core).
if [ -f tests/dashboard/test_dashboard.py ]; then
    run_one dashboard python3 tests/dashboard/test_dashboard.py
fi
for t in tests/deploy/test_*.py; do
    [ -f "$t" ] || continue
    run_one "$(basename "$t")" python3 "$t"
done
[ -n "$failed_names" ] && echo "failed:$failed_names"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
