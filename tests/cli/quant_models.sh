#!/bin/sh
# End to end over the weight types: `tokenloom mkmodel --type T` writes a small random Llama
# model (dims multiples of 256, so every matrix takes the K-quant blocks) of each type (BF16,
# Q8_0, Q4_0..Q5_1, the K-quants, IQ4_NL, IQ4_XS, MXFP4) and the Q4_K_M / Q5_K_M mixes;
# `tokenloom info` reads the types back; `tokenloom generate` runs it greedily, and the
# continuation is identical with another thread count, KV block size and prefill chunking (the
# kernels' determinism contract), on each ISA the CPU has. Prints TAP.
BIN=${TL_BIN:-build/tokenloom}
SHARED=${TL_SHARED:-../shared}
export TL_SHARED=$SHARED
export TOKENLOOM_LOG=warn
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }

types="bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k q4_k_m q5_k_m iq4_nl iq4_xs mxfp4"
isas="scalar"
grep -q ' avx2 ' /proc/cpuinfo 2>/dev/null && isas="$isas avx2"
grep -q ' avx512_vnni ' /proc/cpuinfo 2>/dev/null && grep -q ' avx512bw ' /proc/cpuinfo && isas="$isas avx512"
n_isa=$(echo $isas | wc -w)
n_types=$(echo $types | wc -w)
echo "1..$((n_types * 3 + n_types * n_isa + 2))"

PROMPT="Once upon a time"
for t in $types; do
    m="$d/$t.gguf"
    if "$BIN" mkmodel -o "$m" --type "$t" --dim 256 --layers 2 --heads 4 --kv-heads 2 --ff 512 \
        --seed 7 --tokenizer-from "$SHARED/models/stories260K.gguf" >"$d/mk.out" 2>"$d/mk.err"; then
        ok "mkmodel --type $t"
    else
        notok "mkmodel --type $t" "$(cat "$d/mk.err")"
        continue
    fi
    # the matrices are of the requested type (mixes: Q6_K beside the base type), norms F32
    base=$(echo "$t" | sed 's/_m$//' | tr a-z A-Z)
    types_line=$("$BIN" info -m "$m" 2>/dev/null | sed -n 's/^tensor types  *//p')
    case "$t" in
    # Q6_K: output, and attn_v/ffn_down of layer 1 (of 2: the last eighth gets more bits)
    *_m) want="F32 x 5, $base x 13, Q6_K x 3" ;;
    *) want="F32 x 5, $base x 16" ;;
    esac
    if [ "$types_line" = "$want" ]; then ok "$t: tensor types $want"; else
        notok "$t: tensor types $want" "got '$types_line'"; fi
    # greedy output is produced
    "$BIN" generate -m "$m" -p "$PROMPT" --temp 0 -n 24 -t 1 >"$d/$t.g1" 2>"$d/$t.e1"
    rc=$?
    if [ $rc -eq 0 ] && [ -s "$d/$t.g1" ]; then ok "$t: generate"; else
        notok "$t: generate" "exit $rc" "$(tail -n 3 "$d/$t.e1")"; fi
    for isa in $isas; do
        TL_ISA=$isa "$BIN" generate -m "$m" -p "$PROMPT" --temp 0 -n 24 -t 1 >"$d/a" 2>/dev/null
        TL_ISA=$isa "$BIN" generate -m "$m" -p "$PROMPT" --temp 0 -n 24 -t 2 --kv-block-size 4 \
            --max-tokens-per-step 3 --no-prefix-cache >"$d/b" 2>/dev/null
        if [ -s "$d/a" ] && cmp -s "$d/a" "$d/b"; then
            ok "$t $isa: same greedy text with 2 threads, KV blocks of 4, 3-token steps"
        else
            notok "$t $isa: same greedy text with 2 threads, KV blocks of 4, 3-token steps" \
                "1 thread: $(head -c 120 "$d/a")" "2 threads: $(head -c 120 "$d/b")"
        fi
    done
done

# A batch of requests (JSONL): each one's text equals its single run (other sequences beside it
# change the batch shape of every matmul).
m="$d/q4_k_m.gguf"
: >"$d/in.jsonl"
for p in "Once upon a time" "The cat" "Lily saw a big" "One day"; do
    printf '{"prompt": "%s", "max_tokens": 16, "temperature": 0}\n' "$p" >>"$d/in.jsonl"
done
"$BIN" generate -m "$m" --input "$d/in.jsonl" --output "$d/out.jsonl" -t 2 >/dev/null 2>&1
"$BIN" generate -m "$m" -p "Lily saw a big" --temp 0 -n 16 -t 1 >"$d/single" 2>/dev/null
lines=$(wc -l <"$d/out.jsonl" 2>/dev/null)
if [ "${lines:-0}" -eq 4 ]; then ok "q4_k_m: batch job answers every request"; else
    notok "q4_k_m: batch job answers every request" "$(head -c 300 "$d/out.jsonl")"; fi
# the third line's text, JSON-unescaped enough for a byte comparison of plain text
got=$(sed -n 3p "$d/out.jsonl" | sed 's/.*"text": *"\(\([^"\\]\|\\.\)*\)".*/\1/')
want=$(sed 's/\\/\\\\/g; s/"/\\"/g' "$d/single" | awk 'BEGIN{ORS="\\n"} {print}' | sed 's/\\n$//')
if [ -n "$got" ] && [ "$got" = "$want" ]; then ok "q4_k_m: batched text equals the single run"
else notok "q4_k_m: batched text equals the single run" "batch:  $got" "single: $want"; fi
