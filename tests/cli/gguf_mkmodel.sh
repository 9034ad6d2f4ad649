#!/bin/sh
# `tokenloom mkmodel` writes a Llama-shaped random model that `tokenloom info` reads back with the
# requested shape, type and tokenizer; a fixed seed gives identical bytes; bad options exit 2.
# Prints TAP.
BIN=${TL_BIN:-build/tokenloom}
SHARED=${TL_SHARED:-../shared}
export TL_SHARED=$SHARED
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }
# check FILE LABEL VALUE: the info line for LABEL holds exactly VALUE.
check() {
    got=$(sed -n "s/^$2   *//p" "$1")
    if [ "$got" = "$3" ]; then ok "$(basename "$1"): $2 = $3"; else notok "$2 = $3" "got '$got'"; fi
}

echo "1..31"

# A small Q8_0 model with the 512-token stories vocabulary and a custom shape.
if "$BIN" mkmodel -o "$d/small.gguf" --type q8_0 --dim 64 --layers 2 --heads 4 --kv-heads 2 \
    --ff 128 --ctx 256 --seed 1 --tokenizer-from "$SHARED/models/stories260K.gguf" \
    >"$d/mk.out" 2>"$d/mk.err"; then
    ok "mkmodel q8_0 custom shape"
else
    notok "mkmodel q8_0 custom shape" "$(cat "$d/mk.err")"
fi
# 2 x (64*64*2 + 64*32*2 + 64*128*3 + 128) + 512*64*2 + 64
params=$((2 * (64 * 64 * 2 + 64 * 32 * 2 + 64 * 128 * 3 + 128) + 512 * 64 * 2 + 64))
if grep -q "parameters $params " "$d/mk.out"; then ok "mkmodel prints the parameter count"; else
    notok "mkmodel prints the parameter count" "$(cat "$d/mk.out")"; fi
"$BIN" info -m "$d/small.gguf" >"$d/small.info" 2>&1
check "$d/small.info" "architecture" "llama"
check "$d/small.info" "block count" "2"
check "$d/small.info" "embedding length" "64"
check "$d/small.info" "head count" "4"
check "$d/small.info" "head count kv" "2"
check "$d/small.info" "feed-forward length" "128"
check "$d/small.info" "context length" "256"
check "$d/small.info" "rope dimensions" "16"
check "$d/small.info" "vocab size" "512"
check "$d/small.info" "vocabulary size" "512"
check "$d/small.info" "tokenizer model" "llama"
check "$d/small.info" "file type" "7"
# norms: 2 per block + output_norm; matrices: 7 per block + token_embd + output
check "$d/small.info" "tensor types" "F32 x 5, Q8_0 x 16"
check "$d/small.info" "parameters" "$params (139.6K)"

# The tensor names and shapes llama.cpp expects.
"$BIN" info -m "$d/small.gguf" --all >"$d/small.all" 2>&1
for t in "Q8_0   \[64, 512\] .* token_embd.weight" "F32    \[64\] .* output_norm.weight" \
    "Q8_0   \[64, 512\] .* output.weight" "Q8_0   \[64, 32\] .* blk.1.attn_k.weight" \
    "Q8_0   \[128, 64\] .* blk.1.ffn_down.weight" "F32    \[64\] .* blk.0.ffn_norm.weight"; do
    if grep -q "^  $t\$" "$d/small.all"; then ok "tensor $t"; else notok "tensor $t"; fi
done

# Same seed, same bytes; another seed, other bytes.
"$BIN" mkmodel -o "$d/again.gguf" --type q8_0 --dim 64 --layers 2 --heads 4 --kv-heads 2 \
    --ff 128 --ctx 256 --seed 1 --tokenizer-from "$SHARED/models/stories260K.gguf" >/dev/null
if cmp -s "$d/small.gguf" "$d/again.gguf"; then ok "same seed gives identical files"; else
    notok "same seed gives identical files"; fi
"$BIN" mkmodel -o "$d/other.gguf" --type q8_0 --dim 64 --layers 2 --heads 4 --kv-heads 2 \
    --ff 128 --ctx 256 --seed 2 --tokenizer-from "$SHARED/models/stories260K.gguf" >/dev/null
if cmp -s "$d/small.gguf" "$d/other.gguf"; then notok "another seed gives other weights"; else
    ok "another seed gives other weights"; fi

# Default tokenizer for a non-260K size: the shared 32000-token Llama-2 vocabulary.
"$BIN" mkmodel -o "$d/bf16.gguf" --size 15M --type bf16 --dim 32 --layers 1 --heads 2 --ff 64 \
    >/dev/null 2>"$d/err"
"$BIN" info -m "$d/bf16.gguf" >"$d/bf16.info" 2>&1
check "$d/bf16.info" "vocabulary size" "32000"
check "$d/bf16.info" "tensor types" "F32 x 3, BF16 x 9"

# Bad options.
for args in "--size 7B" "--type iq3_s" "--dim 60 --heads 8" "--layers 0" ""; do
    # shellcheck disable=SC2086
    "$BIN" mkmodel $( [ -n "$args" ] && echo "-o $d/bad.gguf") $args >/dev/null 2>"$d/err"
    rc=$?
    if [ "$rc" -eq 2 ] && [ -s "$d/err" ] && [ ! -e "$d/bad.gguf" ]; then ok "mkmodel rejects '$args'"
    else notok "mkmodel rejects '$args'" "exit $rc: $(cat "$d/err")"; fi
done
