#!/bin/sh
# End-to-end tests of `tokenloom serve` on loopback, printed as TAP.
#
# Starts its own servers (stories260K, each on a free port chosen by the kernel via --port 0)
# and kills them on exit, even on failure. Then:
#   - every case file in cases/*.case (one request, expected status, headers, jq assertions on
#     the JSON body or on the parsed SSE events; format in cases/README),
#   - scripted checks: seeds, malformed input, disconnect -> cancel -> KV back to idle, graceful
#     shutdown on SIGTERM,
#   - node scripts with the official `openai` and `@anthropic-ai/sdk` npm packages (installed
#     from package-lock.json with `npm ci` when node_modules is missing): client tests, the
#     Responses API (responses_client.mjs), 32 concurrent streams vs the same requests one at a time, an overload burst against
#     --max-queued-requests, and abusive clients (slowloris, partial bodies, garbage); the
#     Anthropic Messages API also on stories260K copies carrying Qwen2.5's template (hermes tool
#     calls) and DeepSeek R1's (reasoning), made with tests/chat/gguf_set_template.py.
# Needs curl, jq, node and python3; $TL_BIN (tokenloom binary) and $TL_SHARED (shared data
# folder).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TL_BIN=${TL_BIN:-$ROOT/build/tokenloom}
case "$TL_BIN" in /*) ;; *) TL_BIN=$ROOT/$TL_BIN ;; esac
TL_SHARED=${TL_SHARED:-$(cd "$ROOT/.." && pwd)/shared}
MODEL=${TL_HTTP_MODEL:-$TL_SHARED/models/stories260K.gguf}
TMP=$(mktemp -d)
PIDS=""
n=0
failed=0

cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null; done
    sleep 0.3
    for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() {
    n=$((n + 1)); failed=$((failed + 1))
    echo "not ok $n - $1"
    if [ -n "${2:-}" ]; then printf '%s\n' "$2" | head -c 2000 | sed 's/^/# /'; echo; fi
}
finish() { echo "1..$n"; [ "$failed" -eq 0 ]; exit $?; }

for tool in curl jq node; do
    if ! command -v $tool >/dev/null 2>&1; then
        notok "tool $tool is installed (scripts/install-deps.sh)"; finish
    fi
done

# start_server NAME [serve flags]: starts a server, waits until /health is 200, sets URL_NAME
# and PID_NAME. $TL_HTTP_DEVICE (e.g. vulkan:0) runs every server on that device (the Vulkan
# tier of issue 19).
start_server() {
    name=$1; shift
    log=$TMP/$name.log
    : >"$log"
    "$TL_BIN" serve -m "$MODEL" --port 0 ${TL_HTTP_DEVICE:+--device "$TL_HTTP_DEVICE"} "$@" >"$log" 2>&1 &
    pid=$!
    PIDS="$PIDS $pid"
    eval "PID_$name=$pid"
    port=""
    i=0
    while [ $i -lt 100 ]; do
        port=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$log" | head -n 1)
        [ -n "$port" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1; i=$((i + 1))
    done
    if [ -z "$port" ]; then notok "server $name starts" "$(cat "$log")"; return 1; fi
    url=http://127.0.0.1:$port
    eval "URL_$name=$url"
    i=0
    while [ $i -lt 300 ]; do
        code=$(curl -s -o /dev/null -w '%{http_code}' "$url/health")
        [ "$code" = 200 ] && { ok "server $name starts and turns healthy"; return 0; }
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1; i=$((i + 1))
    done
    notok "server $name starts and turns healthy" "$(cat "$log")"
    return 1
}

start_server main --max-queued-requests 64 || finish
start_server auth --api-key sekrit --max-body-bytes 512 || finish

# ---- case files ------------------------------------------------------------------------------

# run_case FILE: one TAP line.
run_case() {
    f=$1
    cname=$(basename "$f" .case)
    server=main; method=GET; path=/; status=200; sse=no
    : >"$TMP/hdrs"; : >"$TMP/jq"; : >"$TMP/ssejq"; : >"$TMP/hashdr"; : >"$TMP/contains"
    : >"$TMP/body"
    while IFS= read -r line || [ -n "$line" ]; do
        case "$line" in '#'* | '') continue ;; esac
        key=${line%%:*}; val=${line#*: }
        case "$key" in
        name) cname="$cname: $val" ;;
        server) server=$val ;;
        request) method=${val%% *}; path=${val#* } ;;
        header) printf '%s\n' "$val" >>"$TMP/hdrs" ;;
        body) printf '%s' "$val" >"$TMP/body" ;;
        body-printf) printf "$val" >"$TMP/body" ;;
        status) status=$val ;;
        jq) printf '%s\n' "$val" >>"$TMP/jq" ;;
        sse) sse=$val ;;
        sse-jq) printf '%s\n' "$val" >>"$TMP/ssejq" ;;
        has-header) printf '%s\n' "$val" >>"$TMP/hashdr" ;;
        contains) printf '%s\n' "$val" >>"$TMP/contains" ;;
        *) notok "$cname" "unknown key '$key' in $f"; return ;;
        esac
    done <"$f"
    eval "url=\$URL_$server"
    set -- -s -o "$TMP/out" -D "$TMP/outh" -w '%{http_code}' -X "$method" --max-time 60
    while IFS= read -r h; do set -- "$@" -H "$h"; done <"$TMP/hdrs"
    [ -s "$TMP/body" ] && set -- "$@" -H 'Content-Type: application/json' --data-binary @"$TMP/body"
    got=$(curl "$@" "$url$path")
    why=""
    [ "$got" = "$status" ] || why="status $got, want $status"
    while IFS= read -r h; do
        grep -qi "^$h:" "$TMP/outh" || why="$why; no header $h"
    done <"$TMP/hashdr"
    while IFS= read -r c; do
        grep -qF -- "$c" "$TMP/out" || why="$why; body lacks '$c'"
    done <"$TMP/contains"
    while IFS= read -r e; do
        jq -e "$e" "$TMP/out" >/dev/null 2>&1 || why="$why; false: $e"
    done <"$TMP/jq"
    if [ "$sse" = yes ]; then
        # Framing: only "data: ..." lines, each event ended by a blank line, [DONE] last.
        bad=$(awk 'BEGIN { want_data = 1 }
            { sub(/\r$/, "") }
            want_data && /^data: / { want_data = 0; last = $0; next }
            !want_data && /^$/ { want_data = 1; next }
            { print "bad line " NR ": " $0; exit }
            END { if (last != "data: [DONE]") print "last event is not [DONE]: " last;
                  if (!want_data) print "stream does not end with a blank line" }' "$TMP/out")
        [ -z "$bad" ] || why="$why; $bad"
        sed -n 's/^data: //p' "$TMP/out" | grep -v '^\[DONE\]$' >"$TMP/events"
        while IFS= read -r e; do
            jq -e -s "$e" "$TMP/events" >/dev/null 2>&1 || why="$why; false on events: $e"
        done <"$TMP/ssejq"
    fi
    if [ -z "$why" ]; then ok "$cname"; else notok "$cname" "$why
$(head -c 1500 "$TMP/out")"; fi
}

for f in "$HERE"/cases/*.case; do run_case "$f"; done

# ---- scripted checks -------------------------------------------------------------------------

post() { # post URL PATH JSON -> body on stdout
    curl -s --max-time 60 -H 'Content-Type: application/json' --data-binary "$3" "$1$2"
}

# Seeds: the same seed gives the same sample, another seed (almost surely) another.
a=$(post "$URL_main" /v1/completions '{"prompt":"Once","max_tokens":24,"temperature":1,"seed":42,"ignore_eos":true}' | jq -r '.choices[0].text')
b=$(post "$URL_main" /v1/completions '{"prompt":"Once","max_tokens":24,"temperature":1,"seed":42,"ignore_eos":true}' | jq -r '.choices[0].text')
c=$(post "$URL_main" /v1/completions '{"prompt":"Once","max_tokens":24,"temperature":1,"seed":43,"ignore_eos":true}' | jq -r '.choices[0].text')
if [ -n "$a" ] && [ "$a" != null ] && [ "$a" = "$b" ] && [ "$a" != "$c" ]; then ok "seed: same seed same text, other seed other text"
else notok "seed: same seed same text, other seed other text" "a=$a b=$b c=$c"; fi

# n > 1 with a seed: choice i uses seed + i, so choice 1 of seed 42 equals choice 0 of seed 43.
d=$(post "$URL_main" /v1/completions '{"prompt":"Once","max_tokens":24,"temperature":1,"seed":42,"n":2,"ignore_eos":true}' | jq -r '.choices[1].text')
if [ "$d" = "$c" ]; then ok "n=2 with seed S samples seeds S and S+1"
else notok "n=2 with seed S samples seeds S and S+1" "choice1=$d seed43=$c"; fi

# Deeply nested JSON is a 400, not a crash.
awk 'BEGIN { printf "{\"prompt\":\"x\",\"a\":"; for (i = 0; i < 50000; i++) printf "["; for (i = 0; i < 50000; i++) printf "]"; printf "}" }' >"$TMP/deep.json"
code=$(curl -s -o "$TMP/deep.out" -w '%{http_code}' --data-binary @"$TMP/deep.json" "$URL_main/v1/completions")
if [ "$code" = 400 ] && jq -e '.error.type == "invalid_request_error"' "$TMP/deep.out" >/dev/null; then ok "deeply nested JSON gives 400"
else notok "deeply nested JSON gives 400" "status $code"; fi

# A prompt far longer than the context is refused before it is tokenized.
awk 'BEGIN { printf "{\"prompt\":\""; for (i = 0; i < 40000; i++) printf "Once upon a time "; printf "\"}" }' >"$TMP/long.json"
code=$(curl -s -o "$TMP/long.out" -w '%{http_code}' --data-binary @"$TMP/long.json" "$URL_main/v1/completions")
if [ "$code" = 400 ] && jq -e '.error.code == "context_length_exceeded"' "$TMP/long.out" >/dev/null; then ok "a 680 KB prompt gives 400 context_length_exceeded"
else notok "a 680 KB prompt gives 400 context_length_exceeded" "status $code $(head -c 300 "$TMP/long.out")"; fi

# Random bytes as a body: 400 each time, server stays healthy.
i=0; bad=""
while [ $i -lt 20 ]; do
    head -c 300 /dev/urandom >"$TMP/rnd"
    code=$(curl -s -o /dev/null -w '%{http_code}' --data-binary @"$TMP/rnd" "$URL_main/v1/chat/completions")
    [ "$code" = 400 ] || bad="$bad $code"
    i=$((i + 1))
done
if [ -z "$bad" ]; then ok "random bodies give 400"; else notok "random bodies give 400" "$bad"; fi

metric() { # metric URL NAME -> value (of the series labelled only with model_name)
    curl -s "$1/metrics" | awk -v m="tokenloom:$2" '{ n = $1; sub(/\{model_name="[^"]*"\}$/, "", n) } n == m { print $2 }'
}

# Disconnect: a client reading a long stream goes away; its request is cancelled and the KV
# cache returns to idle.
aborts0=$(curl -s "$URL_main/metrics" | sed -n 's/^tokenloom:request_success_total{finished_reason="abort",model_name="[^"]*"} //p')
curl -sN --max-time 30 -H 'Content-Type: application/json' \
    --data-binary '{"prompt":"Once upon a time","max_tokens":1800,"ignore_eos":true,"stream":true,"n":4}' \
    "$URL_main/v1/completions" 2>/dev/null | head -c 400 >/dev/null
i=0; idle=no
while [ $i -lt 100 ]; do
    run=$(metric "$URL_main" num_requests_running)
    kv=$(metric "$URL_main" kv_cache_usage_perc)
    if [ "$run" = 0 ] && [ "$kv" = 0 ]; then idle=yes; break; fi
    sleep 0.1; i=$((i + 1))
done
aborts1=$(curl -s "$URL_main/metrics" | sed -n 's/^tokenloom:request_success_total{finished_reason="abort",model_name="[^"]*"} //p')
gone=$(metric "$URL_main" client_disconnects_total)
if [ "$idle" = yes ] && [ "${aborts1:-0}" -gt "${aborts0:-0}" ] && [ "${gone:-0}" -ge 1 ]; then
    ok "disconnect mid-stream cancels; KV usage back to 0"
else
    notok "disconnect mid-stream cancels; KV usage back to 0" "running=$run kv=$kv aborts $aborts0 -> $aborts1 disconnects=$gone"
fi

# tokenloom bench against the server: every request completes with exact token counts.
"$TL_BIN" bench --url "$URL_main" --concurrency 4 --requests 12 --prompt-len 8-40 --output-len 24 --json >"$TMP/bench.json" 2>"$TMP/bench.err"
if jq -e '.completed == 12 and .failed == 0 and .output_tokens == 288 and .p99_ttft_ms > 0 and .request_throughput > 0' "$TMP/bench.json" >/dev/null 2>&1; then
    ok "tokenloom bench: 12 streamed requests, exact token counts, latency percentiles"
else
    notok "tokenloom bench: 12 streamed requests, exact token counts, latency percentiles" "$(cat "$TMP/bench.json" "$TMP/bench.err")"
fi
"$TL_BIN" bench --url "$URL_main" --rate 50 --requests 10 --output-len 4-8 --chat --json >"$TMP/bench2.json" 2>"$TMP/bench.err"
if jq -e '.completed == 10 and .failed == 0' "$TMP/bench2.json" >/dev/null 2>&1; then
    ok "tokenloom bench: Poisson arrivals on the chat endpoint"
else
    notok "tokenloom bench: Poisson arrivals on the chat endpoint" "$(cat "$TMP/bench2.json" "$TMP/bench.err")"
fi

# ---- node: the openai package ------------------------------------------------------------------

if [ ! -d "$HERE/node_modules/openai" ] || [ ! -d "$HERE/node_modules/@anthropic-ai/sdk" ]; then
    (cd "$HERE" && npm ci --no-audit --no-fund >"$TMP/npm.log" 2>&1) ||
        (cd "$HERE" && npm install --no-audit --no-fund >>"$TMP/npm.log" 2>&1)
fi
if [ -d "$HERE/node_modules/openai" ] && [ -d "$HERE/node_modules/@anthropic-ai/sdk" ]; then
    ok "npm installs the openai and @anthropic-ai/sdk packages"
else notok "npm installs the openai and @anthropic-ai/sdk packages" "$(tail -n 20 "$TMP/npm.log")"; fi

# Node scripts print "ok NAME" / "not ok NAME" lines (and "# ..." diagnostics); renumber them.
run_node() {
    script=$1; shift
    node "$HERE/$script" "$@" >"$TMP/node.out" 2>&1
    rc=$?
    seen=0
    while IFS= read -r line; do
        case "$line" in
        "ok "*) ok "${line#ok }"; seen=$((seen + 1)) ;;
        "not ok "*) notok "${line#not ok }"; seen=$((seen + 1)) ;;
        "#"*) echo "$line" ;;
        esac
    done <"$TMP/node.out"
    if [ $rc -ne 0 ] && [ $seen -eq 0 ]; then notok "$script runs" "$(tail -n 30 "$TMP/node.out")"; fi
}

run_node openai_client.mjs "$URL_main"
run_node responses_client.mjs "$URL_main"
run_node concurrency.mjs "$URL_main"

# The Anthropic Messages API: on main and auth, and on copies with tool-call and reasoning
# templates.
URL_hermes=-; URL_r1=- # "-": the script skips that part (and the start already failed here)
for pair in hermes:Qwen-Qwen2.5-7B-Instruct r1:llama-cpp-deepseek-r1; do
    tname=${pair%%:*}
    if python3 "$ROOT/tests/chat/gguf_set_template.py" "$MODEL" \
            "$TL_SHARED/templates/${pair#*:}.jinja" "$TMP/$tname.gguf" >"$TMP/mk.log" 2>&1; then
        saved_model=$MODEL; MODEL=$TMP/$tname.gguf
        start_server "$tname"
        MODEL=$saved_model
    else
        notok "$tname: model copy with the template" "$(cat "$TMP/mk.log")"
    fi
done
run_node anthropic_client.mjs "$URL_main" "$URL_auth" "$URL_hermes" "$URL_r1"

start_server abuse --http-timeout 2 && run_node abuse.mjs "$URL_abuse" 2

# The /v1/responses store's count bound: with --responses-store 2 the oldest of three goes (404
# naming it, for GET and for previous_response_id); the two newest stay.
if start_server rstore --responses-store 2; then
    ids=""
    for i in 1 2 3; do
        ids="$ids $(post "$URL_rstore" /v1/responses '{"input":"Hi","max_output_tokens":2}' | jq -r .id)"
    done
    set -- $ids
    c1=$(curl -s -o "$TMP/r1" -w '%{http_code}' "$URL_rstore/v1/responses/$1")
    c2=$(curl -s -o /dev/null -w '%{http_code}' "$URL_rstore/v1/responses/$2")
    c3=$(curl -s -o /dev/null -w '%{http_code}' "$URL_rstore/v1/responses/$3")
    p1=$(post "$URL_rstore" /v1/responses '{"input":"x","max_output_tokens":2,"previous_response_id":"'"$1"'"}' | jq -r '.error.param')
    if [ "$c1 $c2 $c3 $p1" = "404 200 200 previous_response_id" ] && grep -q "$1" "$TMP/r1"; then
        ok "--responses-store 2: the oldest of three is evicted (404 naming it), the newest kept"
    else
        notok "--responses-store 2: the oldest of three is evicted (404 naming it), the newest kept" "$c1 $c2 $c3 $p1 $(cat "$TMP/r1")"
    fi
    kill "$PID_rstore"; wait "$PID_rstore" 2>/dev/null
fi

start_server busy --max-queued-requests 4 --max-batch-size 1 && run_node overload.mjs "$URL_busy" 4

# ---- graceful shutdown -------------------------------------------------------------------------

if start_server drain --shutdown-timeout 120; then
    curl -sN --max-time 150 -H 'Content-Type: application/json' \
        --data-binary '{"prompt":"Once upon a time","max_tokens":300,"ignore_eos":true,"stream":true,"n":4}' \
        "$URL_drain/v1/completions" >"$TMP/drain.out" 2>/dev/null &
    cpid=$!
    i=0
    while [ $i -lt 100 ] && [ ! -s "$TMP/drain.out" ]; do sleep 0.05; i=$((i + 1)); done
    kill -TERM "$PID_drain"
    wait "$PID_drain"; src=$?
    wait "$cpid"
    last=$(grep -v '^$' "$TMP/drain.out" | tail -n 1)
    nfin=$(sed -n 's/^data: //p' "$TMP/drain.out" | grep -v DONE | jq -s '[.[] | .choices[]? | select(.finish_reason == "length")] | length')
    if [ "$src" = 0 ] && [ "$last" = "data: [DONE]" ] && [ "$nfin" = 4 ]; then
        ok "SIGTERM lets the in-flight stream finish, then exits 0"
    else
        notok "SIGTERM lets the in-flight stream finish, then exits 0" "exit=$src last=$last finished=$nfin"
    fi
fi

# ---- every server exits cleanly on SIGTERM, with no sanitizer report in its log ------------------

bad=""
for name in main auth hermes r1 abuse busy; do
    eval "pid=\${PID_$name:-}"
    [ -n "$pid" ] || continue
    kill -TERM "$pid" 2>/dev/null
    wait "$pid"; rc=$?
    [ "$rc" = 0 ] || bad="$bad $name:exit=$rc"
done
if grep -l -E "AddressSanitizer|LeakSanitizer|runtime error:|ThreadSanitizer" "$TMP"/*.log >/dev/null 2>&1; then
    bad="$bad sanitizer: $(grep -h -A3 -E 'AddressSanitizer|LeakSanitizer|runtime error:|ThreadSanitizer' "$TMP"/*.log | head -n 20)"
fi
if [ -z "$bad" ]; then ok "servers exit 0 on SIGTERM; logs free of sanitizer reports"
else notok "servers exit 0 on SIGTERM; logs free of sanitizer reports" "$bad"; fi

finish
