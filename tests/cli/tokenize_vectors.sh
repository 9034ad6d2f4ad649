#!/bin/sh
# tokenloom tokenize against llama.cpp's published tokenizer test vectors: for every
# $TL_SHARED/vocab/*.gguf with .inp/.out files, `tokenize --file X.inp` must print exactly X.out.
# Also checks the stdin mode on the TinyStories vocabulary (GGUF and llama2.c forms) against
# the prompt ids of models/PROVENANCE.md. Prints TAP.
BIN=${TL_BIN:-build/tokenloom}
SHARED=${TL_SHARED:-../shared}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

set -- "$SHARED"/vocab/*.gguf
n=0
for f in "$@"; do [ -f "$f.inp" ] && [ -f "$f.out" ] && n=$((n + 1)); done
echo "1..$((n + 5))"
i=0
for f in "$@"; do
    [ -f "$f.inp" ] && [ -f "$f.out" ] || continue
    i=$((i + 1))
    name=$(basename "$f" .gguf)
    if "$BIN" tokenize -m "$f" --file "$f.inp" >"$tmp/out" 2>"$tmp/err" && cmp -s "$tmp/out" "$f.out"; then
        echo "ok $i - $name: $(wc -l <"$f.out") strings match"
    else
        echo "not ok $i - $name"
        cat "$tmp/err" | sed 's/^/# /'
        diff "$tmp/out" "$f.out" | head -n 10 | sed 's/^/# /'
    fi
done

check() { # name expected command...
    i=$((i + 1))
    name=$1 want=$2
    shift 2
    got=$("$@" 2>"$tmp/err")
    if [ "$got" = "$want" ]; then
        echo "ok $i - $name"
    else
        echo "not ok $i - $name: got '$got', want '$want'"
        sed 's/^/# /' "$tmp/err"
    fi
}
M=$SHARED/models
check "stories260K.gguf: Once upon a time" "1 403 407 261 378" \
    sh -c "printf 'Once upon a time' | '$BIN' tokenize -m '$M/stories260K.gguf'"
check "tok512.bin gives the same ids" "1 403 407 261 378" \
    sh -c "printf 'Once upon a time' | '$BIN' tokenize -m '$M/tok512.bin'"
check "--no-bos" "403 407 261 378" \
    sh -c "printf 'Once upon a time' | '$BIN' tokenize --no-bos -m '$M/stories260K.gguf'"
check "--parse-special turns <s> into BOS" "1 1 403" \
    sh -c "printf '<s>Once' | '$BIN' tokenize --parse-special -m '$M/stories260K.gguf'"
i=$((i + 1))
if "$BIN" tokenize -m "$tmp/missing.gguf" </dev/null >/dev/null 2>"$tmp/err"; then
    echo "not ok $i - a missing model fails"
elif grep -q "missing.gguf" "$tmp/err"; then
    echo "ok $i - a missing model fails with a message naming it"
else
    echo "not ok $i - error message does not name the file"; sed 's/^/# /' "$tmp/err"
fi
