#!/bin/sh
# `tokenloom generate` end to end on stories260K: greedy output equals the reference text of
# PROVENANCE.md; a seed reproduces; stop strings; engine flags; the JSONL batch job (order, bad
# lines, exit codes, agreement with single mode); usage errors. Prints TAP.
BIN=${TL_BIN:-build/tokenloom}
SHARED=${TL_SHARED:-../shared}
MODEL=$SHARED/models/stories260K.gguf
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }
check() { name=$1; shift; if "$@"; then ok "$name"; else notok "$name"; fi; }

echo "1..20"
export TOKENLOOM_LOG=warn

# The reference: the first fenced block after "## Reference output", minus the prompt, and the
# number of greedy tokens it holds (all_ids minus BOS and the 4 prompt tokens).
awk '/^## Reference output/{f=1} f&&/^```$/{if(inb){exit}else{inb=1;next}} inb{print}' \
    "$SHARED/models/PROVENANCE.md" >"$d/ref_full"
n_ids=$(grep 'all_ids \[' "$SHARED/models/PROVENANCE.md" | tr ',' '\n' | wc -l)
n_gen=$((n_ids - 5))
printf '%s\n' "$(sed '1s/^Once upon a time//' "$d/ref_full")" >"$d/ref"

"$BIN" generate -m "$MODEL" -p "Once upon a time" --temp 0 -n "$n_gen" -t 1 >"$d/g1" 2>"$d/e1"
rc=$?
if [ $rc -eq 0 ] && cmp -s "$d/g1" "$d/ref"; then ok "greedy continuation equals the reference"
else notok "greedy continuation equals the reference" "exit $rc" "$(head -c 300 "$d/g1")"; fi
check "stderr reports prompt and generation tokens/s" \
    grep -q "prompt: 5 tokens.*tok/s.*generation: $n_gen tokens.*tok/s" "$d/e1"

"$BIN" generate -m "$MODEL" -p "Once upon a time" --temp 0 -n "$n_gen" --kv-type f32 \
    --kv-block-size 4 --max-tokens-per-step 2 --no-prefix-cache -t 2 >"$d/g2" 2>/dev/null
check "same greedy output with f32 KV, block size 4, 2-token steps, 2 threads" cmp -s "$d/g2" "$d/ref"

"$BIN" generate -m "$MODEL" -p "Lily" -n 60 --seed 42 -t 1 >"$d/s1" 2>/dev/null
"$BIN" generate -m "$MODEL" -p "Lily" -n 60 --seed 42 -t 1 >"$d/s2" 2>/dev/null
"$BIN" generate -m "$MODEL" -p "Lily" -n 60 --seed 43 -t 1 >"$d/s3" 2>/dev/null
check "the same seed gives the same text" cmp -s "$d/s1" "$d/s2"
check "another seed gives another text" sh -c "! cmp -s '$d/s1' '$d/s3'"
check "sampled text is not empty" test -s "$d/s1"

"$BIN" generate -m "$MODEL" -p "Once upon a time" --temp 0 -n 50 --stop "named L" -t 1 \
    >"$d/st" 2>"$d/ste"
check "a stop string ends the text before it" \
    sh -c "[ \"\$(cat '$d/st')\" = ', there was a little girl ' ]"
check "finish reason stop is reported" grep -q "finish: stop" "$d/ste"

# ---- batch job ---------------------------------------------------------------------------------
cat >"$d/in.jsonl" <<'JSONL'
{"id": "greedy", "prompt": "Once upon a time", "max_tokens": 30, "temperature": 0}
{"id": "sampled", "prompt": "Lily and", "max_tokens": 10, "seed": 3, "top_p": 0.9}
this is not json

{"id": "badtype", "prompt": "The dog", "max_tokens": "ten"}
{"id": "toolong", "prompt": "Tom", "max_tokens": 100000}
{"id": "stopped", "prompt": "Once upon a time", "max_tokens": 30, "temperature": 0, "stop": ["girl", "zzz"]}
{"id": 17, "prompt": [1, 403, 407], "max_tokens": 5, "temperature": 0, "priority": -1}
{"prompt": "x", "unknown_field": 1}
JSONL
"$BIN" generate -m "$MODEL" --input "$d/in.jsonl" --output "$d/out.jsonl" -t 1 2>"$d/be"
rc=$?
check "a batch with bad lines exits 1" test $rc -eq 1
check "one output line per request (blank lines skipped)" test "$(wc -l <"$d/out.jsonl")" -eq 8
ids=$(sed 's/^{"id":\([^,]*\),.*/\1/' "$d/out.jsonl" | tr '\n' ' ')
check "results are in input order" test "$ids" = '"greedy" "sampled" 3 "badtype" "toolong" "stopped" 17 9 '
check "bad JSON is an error line naming the line" \
    grep -q '^{"id":3,"line":3,"error":"invalid JSON' "$d/out.jsonl"
check "a wrong field type is an error line" \
    grep -q '"id":"badtype","line":5,"error":"'"'"'max_tokens'"'"' must be an integer"' "$d/out.jsonl"
check "too long is an error line" grep -q '"id":"toolong","line":6,"error":".*maximum sequence length' "$d/out.jsonl"
check "stderr names the file and line of each bad line" \
    sh -c "[ \$(grep -c 'in.jsonl:[3569]: ' '$d/be') -eq 4 ]"
"$BIN" generate -m "$MODEL" -p "Once upon a time" --temp 0 -n 30 -t 1 >"$d/g30" 2>/dev/null
want=$(head -c -1 "$d/g30" | sed ':a;N;$!ba;s/\n/\\n/g')
check "batch greedy text equals single-mode text" \
    grep -qF "{\"id\":\"greedy\",\"text\":\"$want\",\"prompt_tokens\":5,\"completion_tokens\":30" "$d/out.jsonl"
check "stop strings in the batch job" \
    grep -q '"id":"stopped","text":", there was a little ",.*"finish_reason":"stop"' "$d/out.jsonl"
check "result lines carry timings" grep -q '"ttft_ms":[0-9.]*,"total_ms":[0-9.]*' "$d/out.jsonl"

grep -v -e 'not json' -e badtype -e toolong -e unknown_field "$d/in.jsonl" >"$d/good.jsonl"
"$BIN" generate -m "$MODEL" --input "$d/good.jsonl" --output - -t 1 >"$d/good.out" 2>/dev/null
rc=$?
check "a clean batch exits 0 and writes to stdout" sh -c "[ $rc -eq 0 ] && [ \$(wc -l <'$d/good.out') -eq 4 ]"

"$BIN" generate -m "$MODEL" -p hi --bogus >/dev/null 2>&1
rc1=$?
"$BIN" generate -m "$MODEL" -p hi --top-p 7 >/dev/null 2>&1
rc2=$?
"$BIN" generate -m "$MODEL" >/dev/null 2>&1
rc3=$?
"$BIN" generate -m "$d/missing.gguf" -p hi >/dev/null 2>"$d/me"
rc4=$?
check "usage errors exit 2, a missing model exits 1" \
    sh -c "[ $rc1 -eq 2 ] && [ $rc2 -eq 2 ] && [ $rc3 -eq 2 ] && [ $rc4 -eq 1 ] && grep -q missing.gguf '$d/me'"
