#!/bin/sh
# The command line as vLLM and llama.cpp users type it (issue 7): every alias sets the same
# engine setting as our spelling (checked on the engine's own "kv cache" / step-budget log lines,
# which print the values it was created with), GPU flags are refused in one clear line, an
# unknown option gets one line naming the closest flag, `tokenloom --version` reports the git
# revision and the ISA this CPU supports (read from /proc/cpuinfo), bad arguments fail before
# anything is loaded or bound, range errors print whole numbers, log lines carry a UTC
# timestamp close to `date -u`. Prints TAP.
BIN=${TL_BIN:-build/tokenloom}
SHARED=${TL_SHARED:-../shared}
MODEL=$SHARED/models/stories260K.gguf
d=$(mktemp -d)
srv_pid=""
hold_pid=""
cleanup() {
    [ -n "$srv_pid" ] && kill "$srv_pid" 2>/dev/null
    [ -n "$hold_pid" ] && kill "$hold_pid" 2>/dev/null
    rm -rf "$d"
}
trap cleanup EXIT
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }
check() { name=$1; shift; if "$@"; then ok "$name"; else notok "$name"; fi; }
lines() { wc -l <"$1" | tr -d ' '; }

echo "1..65"
export TOKENLOOM_LOG=info
echo '{"prompt": "Once", "max_tokens": 2, "temperature": 0}' >"$d/in.jsonl"

# The engine's sizing line of a batch-job run with the given flags ("" when it failed).
engine_line() {
    "$BIN" generate -m "$MODEL" --input "$d/in.jsonl" --output /dev/null -t 1 "$@" 2>&1 |
        grep -E "kv cache:|max_tokens_per_step" | sed 's/^[^ ]* //'
}
default_line=$(engine_line)
[ -n "$default_line" ] || echo "# no engine line with default flags"

# alias_same CANONICAL VALUE ALIAS...: each alias gives the canonical spelling's engine line,
# which differs from the default one.
alias_same() {
    canon=$1; val=$2; shift 2
    want=$(engine_line "$canon" "$val")
    for a in "$@"; do
        got=$(engine_line "$a" "$val")
        if [ -n "$want" ] && [ "$want" != "$default_line" ] && [ "$got" = "$want" ]; then
            ok "$a $val == $canon $val"
        else
            notok "$a $val == $canon $val" "want: $want" "got:  $got" "default: $default_line"
        fi
    done
}
alias_same --max-batch-size 3 --max-num-seqs -np --parallel
got=$(engine_line --max-num-seqs=3)
check "--max-num-seqs=3 (the = form)" [ "$got" = "$(engine_line --max-batch-size 3)" ]
alias_same --max-seq-len 64 --max-model-len -c --ctx-size
alias_same --kv-block-size 4 --block-size
alias_same --kv-type f32 --kv-cache-dtype -ctk -ctv --cache-type-k --cache-type-v
alias_same --max-tokens-per-step 3 --max-num-batched-tokens -b --batch-size
got=$(engine_line --kv-cache-dtype auto)
check "--kv-cache-dtype auto is the default f16" [ "$got" = "$default_line" ]
got=$(engine_line -ctk f32 -ctv f32)
check "-ctk f32 -ctv f32 together" [ "$got" = "$(engine_line --kv-type f32)" ]
# The seed article's spellings (issue 18): --batch_size is sequences at once, not llama.cpp's
# tokens per step (--batch-size); what tokenloom always does is accepted when asked for.
alias_same --max-batch-size 3 --batch_size --max_batch_size
alias_same --max-seq-len 64 --max_seq_length
got=$(engine_line --use_kv_cache=true --prefill_enabled=true)
check "--use_kv_cache=true --prefill_enabled=true are what it always does" [ "$got" = "$default_line" ]
got=$(engine_line -ngl 0 --no-enable-prefix-caching)
check "-ngl 0 and --no-enable-prefix-caching are accepted" [ "$got" = "$default_line" ]

# --device cpu and auto run on the CPU: the same greedy text as no flag; auto logs one info line
# saying why it did not take a GPU (here: lavapipe is a CPU device, or there is no driver).
"$BIN" generate -m "$MODEL" -p "Once" -n 6 --temp 0 -t 1 >"$d/dev_none" 2>/dev/null
"$BIN" generate -m "$MODEL" -p "Once" -n 6 --temp 0 -t 1 --device cpu >"$d/dev_cpu" 2>"$d/dev_cpu_err"
"$BIN" generate -m "$MODEL" -p "Once" -n 6 --temp 0 -t 1 --device=auto >"$d/dev_auto" 2>"$d/dev_auto_err"
check "--device cpu: same text as no flag, no device line" sh -c \
    "[ -s '$d/dev_none' ] && cmp -s '$d/dev_none' '$d/dev_cpu' && ! grep -q 'device' '$d/dev_cpu_err'"
if cmp -s "$d/dev_none" "$d/dev_auto" && [ "$(grep -c -- '--device auto: running on the CPU: ' "$d/dev_auto_err")" = 1 ] &&
    grep -Eq -- "--device auto: running on the CPU: (no GPU among|vulkan: no (loader|driver|device)|vulkan: not compiled in|vulkan:[0-9]+ is a GPU)" "$d/dev_auto_err"; then
    ok "--device=auto: same text, one line saying why it runs on the CPU"
else
    notok "--device=auto: same text, one line saying why it runs on the CPU" "$(cat "$d/dev_auto_err")"
fi
VK_ICD_FILENAMES=$d/none.json VK_DRIVER_FILES=$d/none.json "$BIN" generate -m "$MODEL" -p "Once" -n 6 \
    --temp 0 -t 1 --device auto >"$d/dev_nodrv" 2>"$d/dev_nodrv_err"
if cmp -s "$d/dev_none" "$d/dev_nodrv" &&
    grep -Eq -- "--device auto: running on the CPU: vulkan: (no driver|no device|not compiled in)" "$d/dev_nodrv_err"; then
    ok "--device auto without a Vulkan driver: falls back to the CPU, naming why"
else
    notok "--device auto without a Vulkan driver: falls back to the CPU, naming why" "$(cat "$d/dev_nodrv_err")"
fi

# usage_error NAME EXPECTED-REGEX ARGS...: exit 2, exactly one line on stderr matching the regex,
# nothing loaded, nothing bound.
usage_error() {
    name=$1; re=$2; shift 2
    "$BIN" "$@" >"$d/out" 2>"$d/err"
    rc=$?
    if [ $rc -eq 2 ] && [ "$(lines "$d/err")" = 1 ] && grep -Eq -- "$re" "$d/err" &&
        ! grep -Eq "listening|loaded|kv cache" "$d/err" && ! grep -q "serve: serve:" "$d/err"; then
        ok "$name"
    else
        notok "$name" "exit $rc" "$(head -n 5 "$d/err")"
    fi
}
usage_error "--use_kv_cache=false: the KV cache is always on" \
    "^tokenloom serve: --use_kv_cache=false: .*KV cache is always on" serve -m "$MODEL" --use_kv_cache=false
usage_error "--enable_padding: batches are never padded" "^tokenloom serve: --enable_padding: .*never padded" \
    serve -m "$MODEL" --enable_padding
usage_error "--pad_token_id: batches are never padded" "^tokenloom serve: --pad_token_id: .*never padded" \
    serve -m "$MODEL" --pad_token_id=0
usage_error "--gpu-memory-utilization points at --kv-bytes" "gpu-memory-utilization: not supported.*--kv-bytes" \
    serve -m "$MODEL" --gpu-memory-utilization 0.9
usage_error "-ngl 99 points at --device" "^tokenloom serve: -ngl 99: .*--device vulkan" serve -m "$MODEL" -ngl 99
usage_error "--n-gpu-layers in generate too" "GPU" generate -m "$MODEL" -p x --n-gpu-layers 33
# --device (issue 19): vulkan:N runs on that device (tests/cli/gpu_generate.sh); an index the
# loader does not have, or no driver, is one line at load, exit 1 (a build without Vulkan: a
# usage error saying so); a name that is not a device is refused.
load_error() {
    name=$1; re=$2; shift 2
    "$@" >"$d/out" 2>"$d/err"
    rc=$?
    if [ $rc -ne 0 ] && [ "$(lines "$d/err")" = 1 ] && grep -Eq -- "$re" "$d/err"; then
        ok "$name"
    else
        notok "$name" "exit $rc" "$(head -n 5 "$d/err")"
    fi
}
load_error "--device vulkan:7: no such device, in one line" \
    "^tokenloom generate: (vulkan:7: no such device \(the loader sees|--device vulkan:7: not supported: .*without Vulkan)" \
    "$BIN" generate -m "$MODEL" -p x --device vulkan:7
load_error "--device vulkan without a driver: one line naming it" \
    "^tokenloom generate: (vulkan: no (driver|device)|--device vulkan: not supported: .*without Vulkan)" \
    env VK_ICD_FILENAMES="$d/none.json" VK_DRIVER_FILES="$d/none.json" "$BIN" generate -m "$MODEL" -p x --device vulkan
usage_error "--device gpu is not a device" \
    "^tokenloom serve: --device: 'gpu' is not a device \(auto, cpu, vulkan or vulkan:N" \
    serve -m "$MODEL" --device gpu --port 0
usage_error "-ctk and -ctv must agree" "-ctv.*same" serve -m "$MODEL" -ctk f16 -ctv f32
usage_error "--kv-cache-dtype fp8 points at q8_0" "fp8.*q8_0" serve -m "$MODEL" --kv-cache-dtype fp8
usage_error "unknown option names the closest flag" \
    "^tokenloom serve: unknown option '--max-num-seq' \(did you mean --max-num-seqs\?\)" \
    serve -m "$MODEL" --max-num-seq 4
usage_error "unknown option in generate names the closest flag" \
    "unknown option '--temprature'.*--temperature" generate -m "$MODEL" -p x --temprature 0
usage_error "unknown option far from every flag: one line, no guess" \
    "^tokenloom serve: unknown option '--zzzzzzzz'; see tokenloom serve --help$" serve --zzzzzzzz
usage_error "unknown command: one line" "unknown command 'srve'" srve
usage_error "--chat-template foo fails before the model loads or the port binds" \
    "chat-template.*'foo'" serve -m "$MODEL" --chat-template foo --port 0
usage_error "a missing model fails before the port binds" "no-such.gguf: No such file" \
    serve -m "$d/no-such.gguf" --port 0
usage_error "--host 999.1.1.1 is one clear line" "^tokenloom serve: --host: '999.1.1.1' is not a valid" \
    serve -m "$MODEL" --host 999.1.1.1 --port 0
check "--host 999.1.1.1 does not say 'Success'" sh -c "! grep -q Success '$d/err'"
usage_error "--port range prints whole numbers" "'70000' is not an integer in \[0, 65535\]$" \
    serve -m "$MODEL" --port 70000
usage_error "--max-body-bytes range prints whole numbers" "\[1, 1099511627776\]$" \
    serve -m "$MODEL" --max-body-bytes 0
usage_error "--max-num-seqs range prints whole numbers" "--max-num-seqs: '0' is not an integer in \[1, 65536\]$" \
    serve -m "$MODEL" --max-num-seqs 0
usage_error "--max-prefill-tokens-decoding 0 is refused, naming the flag" \
    "--max-prefill-tokens-decoding: '0' is not an integer in \[1, 1048576\]$" \
    serve -m "$MODEL" --max-prefill-tokens-decoding 0 --port 0
usage_error "--prefill-tokens-per-decode -1 is refused, naming the flag" \
    "--prefill-tokens-per-decode: '-1' is not an integer in \[0, 1048576\]$" \
    serve -m "$MODEL" --prefill-tokens-per-decode -1 --port 0
usage_error "generate --seed-free range prints whole numbers" "\[1, 2147483647\]$" \
    generate -m "$MODEL" -p x -n 0

# -t above the CPU count warns (and still runs); at the CPU count it does not.
cpus=$(getconf _NPROCESSORS_ONLN)
"$BIN" generate -m "$MODEL" -p "Once" -n 2 --temp 0 -t $((cpus + 1)) >/dev/null 2>"$d/err"
rc=$?
check "-t above the CPU count warns and runs" sh -c "[ $rc -eq 0 ] && grep -q 'warning: $((cpus + 1)) threads on $cpus online CPUs' '$d/err'"
"$BIN" generate -m "$MODEL" -p "Once" -n 2 --temp 0 -t "$cpus" >/dev/null 2>"$d/err"
check "-t at the CPU count does not warn" sh -c "! grep -q warning '$d/err'"

# --version / version.
"$BIN" --version >"$d/v1" 2>&1
rc1=$?
"$BIN" version >"$d/v2" 2>&1
check "--version and version exit 0 with the same text" sh -c "[ $rc1 -eq 0 ] && cmp -s '$d/v1' '$d/v2'"
check "--version names the release" grep -Eq '^tokenloom [0-9]+\.[0-9]+\.[0-9]+$' "$d/v1"
rev=$(git rev-parse --short=7 HEAD 2>/dev/null)
if [ -n "$rev" ]; then
    check "--version names the git revision of this checkout" grep -q "^git revision: $rev" "$d/v1"
else
    ok "--version names a git revision # SKIP not a git checkout"
fi
check "--version prints the build flags" grep -q "^build flags: .*-O" "$d/v1"
flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { case " $flags " in *" $1 "*) return 0 ;; esac; return 1; }
isa=scalar
if has avx2 && has fma && has f16c; then
    isa=avx2
    if has avx512f && has avx512bw && has avx512vl && has avx512dq && has avx512_vnni; then isa=avx512; fi
fi
[ "$(uname -m)" = x86_64 ] || isa=scalar
check "--version names the ISA this CPU supports ($isa)" grep -q "^kernels: $isa " "$d/v1"

# The server with vLLM / llama.cpp spellings, and its log lines' timestamps.
"$BIN" serve -m "$MODEL" --port 0 --jinja --served-model-name tiny-story --api-key sekrit \
    --max-num-seqs 2 -c 128 -ngl 0 -t 1 >"$d/srv.log" 2>&1 &
srv_pid=$!
port=""
for _ in $(seq 1 100); do
    port=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$d/srv.log" | head -n 1)
    [ -n "$port" ] && grep -q "ready" "$d/srv.log" && break
    sleep 0.1
done
models=$(curl -s -H "Authorization: Bearer sekrit" "http://127.0.0.1:$port/v1/models")
check "serve --served-model-name sets the model id" sh -c "echo '$models' | grep -q '\"id\": *\"tiny-story\"'"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/models")
check "serve --api-key is required" [ "$code" = 401 ]
check "serve -c 128 --max-num-seqs 2 reach the engine" grep -q "for 2 sequences of 128 tokens" "$d/srv.log"
# Another server on the same port: one line, the prefix not doubled.
"$BIN" serve -m "$MODEL" --port "$port" >"$d/out" 2>"$d/err"
rc=$?
check "a port in use: exit 1, one line, no doubled prefix" \
    sh -c "[ $rc -eq 1 ] && [ \$(wc -l <'$d/err') -eq 1 ] && grep -q '^tokenloom serve: cannot listen' '$d/err' && ! grep -q 'serve: serve:' '$d/err'"
kill "$srv_pid"
wait "$srv_pid" 2>/dev/null
srv_pid=""
stamp_re='^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z tokenloom (info|warn|error|debug): '
total=$(lines "$d/srv.log")
stamped=$(grep -Ec "$stamp_re" "$d/srv.log")
check "every server log line carries a timestamp ($stamped of $total)" sh -c "[ $total -ge 4 ] && [ $stamped -eq $total ]"
first=$(head -n 1 "$d/srv.log" | cut -c1-19)
log_s=$(date -u -d "$first" +%s 2>/dev/null || echo 0)
now_s=$(date -u +%s)
check "the timestamp is UTC and close to date -u" sh -c "[ $((now_s - log_s)) -ge 0 ] && [ $((now_s - log_s)) -lt 120 ]"

# The seed article's exact command line (plus the model): port 8500, 16 sequences at once,
# read back from the engine configuration /stats reports. Skipped when 8500 is taken.
if curl -s -o /dev/null "http://127.0.0.1:8500/" 2>/dev/null; then
    n=$((n + 1)); echo "ok $n - # SKIP port 8500 is in use"
else
    "$BIN" serve --port=8500 --batch_size=16 -m "$MODEL" >"$d/seed.log" 2>&1 &
    srv_pid=$!
    for _ in $(seq 1 100); do
        grep -q "ready" "$d/seed.log" && break
        sleep 0.1
    done
    stats=$(curl -s "http://127.0.0.1:8500/stats")
    check "serve --port=8500 --batch_size=16 runs 16 sequences at once" \
        sh -c "echo '$stats' | grep -q '\"max_batch_size\": *16'"
    kill "$srv_pid"
    wait "$srv_pid" 2>/dev/null
    srv_pid=""
fi
