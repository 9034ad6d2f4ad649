#!/bin/sh
# End to end through HTTP with real chat templates: stories260K copies carrying the shared
# templates of Hermes 2 Pro, Mistral Nemo, Llama 3.1 and DeepSeek R1 (made at test time with
# tests/chat/gguf_set_template.py), served by the real binary. Each server must report the
# tool-call syntax and reasoning tag its template teaches; a chat with tools must give 200 with
# the stream, folded delta by delta, equal to the non-streamed message (greedy); forced tool
# choice is a 400; /v1/responses gives the same answer as items, whole and streamed. (stories260K never writes a call: the parsing of each syntax is covered with
# scripted output in test_toolcall*.) TAP.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TL_BIN=${TL_BIN:-$ROOT/build/tokenloom}
case "$TL_BIN" in /*) ;; *) TL_BIN=$ROOT/$TL_BIN ;; esac
TL_SHARED=${TL_SHARED:-$(cd "$ROOT/.." && pwd)/shared}
TMP=$(mktemp -d)
PID=""
n=0
failed=0
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $1"; [ -n "${2:-}" ] && printf '%s\n' "$2" | head -c 1500 | sed 's/^/# /'; }
check() { if [ "$2" = "$3" ]; then ok "$1"; else notok "$1" "got: $2
want: $3"; fi; }
for tool in curl jq python3; do
    command -v $tool >/dev/null 2>&1 || { notok "$tool is installed"; echo "1..$n"; exit 1; }
done

TOOLS='[{"type":"function","function":{"name":"get_weather","description":"Weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]'
TOOLS_FLAT='[{"type":"function","name":"get_weather","description":"Weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]'
BODY='{"messages":[{"role":"system","content":"You may call tools."},{"role":"user","content":"Weather in Paris?"}],"tools":'$TOOLS',"max_tokens":24,"temperature":0%s}'

# Folds a chat stream (SSE on stdin) into {"content","reasoning_content","tool_calls","finish"}.
fold='[.[] | select(. != "[DONE]") | fromjson | .choices[0]] |
  {content: (map(.delta.content // "") | join("")),
   reasoning_content: (map(.delta.reasoning_content // "") | join("")),
   tool_calls: ([.[] | .delta.tool_calls // [] | .[]] | length),
   finish: (map(.finish_reason // empty) | last)}'
whole='.choices[0] | {content: (.message.content // ""), reasoning_content: (.message.reasoning_content // ""),
   tool_calls: (.message.tool_calls // [] | length), finish: .finish_reason}'

serve_case() { # template file, expected syntax, expected reasoning tag (or null)
    name=$1; syntax=$2; tag=$3
    model=$TMP/$name.gguf
    if ! python3 "$ROOT/tests/chat/gguf_set_template.py" "$TL_SHARED/models/stories260K.gguf" \
            "$TL_SHARED/templates/$name.jinja" "$model" >"$TMP/mk.log" 2>&1; then
        notok "$name: model copy with the template" "$(cat "$TMP/mk.log")"; return
    fi
    "$TL_BIN" serve -m "$model" --port 0 >"$TMP/srv.log" 2>&1 &
    PID=$!
    url=""
    for i in $(seq 1 100); do
        port=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$TMP/srv.log" | head -n 1)
        if [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
            url=http://127.0.0.1:$port; break
        fi
        sleep 0.1
    done
    if [ -z "$url" ]; then notok "$name: server starts" "$(tail -5 "$TMP/srv.log")"; kill $PID; PID=""; return; fi
    m=$(curl -s "$url/v1/models" | jq -c '.data[0] | [.tool_call_syntax, .reasoning_tag]')
    check "$name: /v1/models reports syntax and reasoning tag" "$m" "[\"$syntax\",$tag]"
    w=$(curl -s "$url/v1/chat/completions" -d "$(printf "$BODY" "")")
    st=$(curl -s -o /dev/null -w '%{http_code}' "$url/v1/chat/completions" -d "$(printf "$BODY" "")")
    check "$name: chat with tools is 200" "$st" "200"
    a=$(printf '%s' "$w" | jq -c "$whole")
    b=$(curl -sN "$url/v1/chat/completions" -d "$(printf "$BODY" ',"stream":true')" |
        sed -n 's/^data: //p' | jq -R . | jq -sc "$fold")
    check "$name: the stream folds to the whole message" "$b" "$a"
    if [ "$tag" != null ]; then
        # The template's generation prompt opens <think>: a reply that never closes it is all
        # reasoning (stories260K never writes </think>).
        r=$(printf '%s' "$a" | jq -c '[(.reasoning_content | length > 0), .content]')
        check "$name: the prompt opened the reasoning block: all reasoning" "$r" '[true,""]'
    fi
    fin=$(printf '%s' "$a" | jq -r .finish)
    case "$fin" in stop|length|tool_calls) ok "$name: finish_reason $fin" ;; *) notok "$name: finish_reason" "$w" ;; esac
    # tool_choice "required": a grammar forces a call in the template's syntax (the syntaxes
    # it supports), or a 400 naming tool_choice (DeepSeek R1's)
    req='{"messages":[{"role":"user","content":"Weather in Paris?"}],"tools":'$TOOLS',"tool_choice":"required","parallel_tool_calls":false,"max_tokens":300,"temperature":1,"seed":7}'
    if [ "$syntax" = deepseek-r1 ]; then
        e=$(curl -s "$url/v1/chat/completions" -d "$req" | jq -r .error.param)
        check "$name: tool_choice required is refused for this syntax naming it" "$e" "tool_choice"
    else
        f=$(curl -s "$url/v1/chat/completions" -d "$req" | jq -c "$whole" | jq -r '"\(.finish) \(.tool_calls)"')
        case "$f" in "tool_calls 1"|"length 0") ok "$name: tool_choice required forces a call ($f)" ;;
            *) notok "$name: tool_choice required forces a call" "$f" ;; esac
    fi
    # /v1/responses on the same template: the same answer as reasoning / message /
    # function_call items, whole and folded from the stream's events.
    rbody='{"input":[{"role":"system","content":"You may call tools."},{"role":"user","content":"Weather in Paris?"}],"tools":'$TOOLS_FLAT',"max_output_tokens":24,"temperature":0%s}'
    ritems='{content: ([.output[] | select(.type == "message") | .content[].text] | join("")),
       reasoning_content: ([.output[] | select(.type == "reasoning") | .content[].text] | join("")),
       tool_calls: ([.output[] | select(.type == "function_call")] | length)}'
    rfold='{content: ([.[] | select(.type == "response.output_text.delta") | .delta] | join("")),
       reasoning_content: ([.[] | select(.type == "response.reasoning_text.delta") | .delta] | join("")),
       tool_calls: ([.[] | select(.type == "response.output_item.added" and .item.type == "function_call")] | length)}'
    want=$(printf '%s' "$a" | jq -c '{content, reasoning_content, tool_calls}')
    rw=$(curl -s "$url/v1/responses" -d "$(printf "$rbody" "")" | jq -c "$ritems")
    check "$name: /v1/responses items equal the chat message" "$rw" "$want"
    rs=$(curl -sN "$url/v1/responses" -d "$(printf "$rbody" ',"stream":true')" | sed -n 's/^data: //p' | jq -sc "$rfold")
    check "$name: /v1/responses stream events fold to the same" "$rs" "$want"
    if [ "$syntax" != deepseek-r1 ]; then # a forced call: the same arguments on both paths
        creq='{"messages":[{"role":"user","content":"Weather in Paris?"}],"tools":'$TOOLS',"tool_choice":"required","parallel_tool_calls":false,"max_tokens":300,"temperature":0}'
        rreq='{"input":"Weather in Paris?","tools":'$TOOLS_FLAT',"tool_choice":"required","parallel_tool_calls":false,"max_output_tokens":300,"temperature":0}'
        ca=$(curl -s "$url/v1/chat/completions" -d "$creq" | jq -c '[.choices[0].message.tool_calls[]? | [.function.name, .function.arguments]]')
        ra=$(curl -s "$url/v1/responses" -d "$rreq" | jq -c '[.output[] | select(.type == "function_call") | [.name, .arguments]]')
        [ "$ca" = "[]" ] && ca="(no call made: the test proves nothing)"
        check "$name: /v1/responses forced call equals the chat call" "$ra" "$ca"
    fi
    kill $PID; wait $PID 2>/dev/null; PID=""
}

serve_case NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use hermes null
serve_case mistralai-Mistral-Nemo-Instruct-2407 mistral null
serve_case meta-llama-Llama-3.1-8B-Instruct llama3 null
serve_case deepseek-ai-DeepSeek-R1-Distill-Qwen-32B deepseek-r1 '"<think>"'
echo "1..$n"
[ "$failed" -eq 0 ]
