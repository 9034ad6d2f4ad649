#!/bin/sh
# `tokenloom info` on bad GGUF files: each must exit 1 with exactly one line on stderr naming the
# file and the problem (and nothing on stdout); and on stories260K.gguf it must print the numbers
# PROVENANCE.md and llama.cpp give for that model. Prints TAP.
BIN=${TL_BIN:-build/tokenloom}
SHARED=${TL_SHARED:-../shared}
MODEL=$SHARED/models/stories260K.gguf
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }

echo "1..17"

# expect_bad NAME FILE NEEDLE: exit 1, stdout empty, one stderr line containing FILE and NEEDLE.
expect_bad() {
    name=$1 file=$2 needle=$3
    "$BIN" info -m "$file" >"$d/out" 2>"$d/err"
    rc=$?
    lines=$(wc -l <"$d/err" | tr -d ' ')
    if [ "$rc" -eq 1 ] && [ "$lines" -eq 1 ] && [ ! -s "$d/out" ] &&
        grep -qF "$file: " "$d/err" && grep -qF "$needle" "$d/err"; then
        ok "$name"
    else
        notok "$name" "exit $rc, $lines stderr lines: $(cat "$d/err")"
    fi
}

: >"$d/empty.gguf"
expect_bad "empty file" "$d/empty.gguf" "empty file"

head -c 1000 "$MODEL" >"$d/truncated.gguf"
expect_bad "truncated in the metadata" "$d/truncated.gguf" "truncated"

head -c 3 "$MODEL" >"$d/tiny.gguf"
expect_bad "3-byte file" "$d/tiny.gguf" "truncated"

printf 'GGML\003\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000' \
    >"$d/magic.gguf"
expect_bad "bad magic" "$d/magic.gguf" "bad magic"

printf 'GGUF\001\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000' \
    >"$d/v1.gguf"
expect_bad "version 1" "$d/v1.gguf" "unsupported GGUF version 1"

# All of the header and tensor table, but the last tensor's data cut short.
size=$(wc -c <"$MODEL" | tr -d ' ')
head -c $((size - 100)) "$MODEL" >"$d/past_end.gguf"
expect_bad "tensor past end" "$d/past_end.gguf" "extends past the end of the file"

expect_bad "nonexistent path" "$d/no-such-model.gguf" "cannot open"
expect_bad "directory" "$d" "not a regular file"

# The good file.
if "$BIN" info -m "$MODEL" >"$d/info" 2>"$d/err" && [ ! -s "$d/err" ]; then
    ok "info on stories260K.gguf exits 0 silently on stderr"
else
    notok "info on stories260K.gguf exits 0 silently on stderr" "$(cat "$d/err")"
fi
# check LABEL VALUE: the line for LABEL holds exactly VALUE.
check() {
    got=$(sed -n "s/^$1   *//p" "$d/info")
    if [ "$got" = "$2" ]; then ok "info: $1 = $2"; else notok "info: $1 = $2" "got '$got'"; fi
}
check "architecture" "llama"
check "block count" "5"
check "embedding length" "64"
check "head count kv" "4"
check "feed-forward length" "172"
check "tensor types" "F32 x 48"
check "parameters" "292800 (292.8K)"
check "vocabulary size" "512"
