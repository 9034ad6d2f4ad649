#!/bin/sh
# What the dashboard page costs a loaded server: `tokenloom bench` at 32 clients with the page
# closed, with the page open in headless Chromium (polling /stats every second), and with ten
# simulated pages (a node loop fetching /stats ten times a second: the server-side cost alone,
# ten times over). The modes are interleaved, REPEATS rounds each, on one server; each bench
# run uses a new seed so no prompt is in the prefix cache. Prints one line per run and then, per
# mode, median output tok/s, TTFT p50 and ITL p50 with their spread (min..max) and the ratio of
# the medians to the page-closed runs.
#
#   sh bench/dashboard_cost.sh [MODEL] [REPEATS]
#
# MODEL defaults to /tmp/m110-q8.gguf (made with `tokenloom mkmodel --size 110M --type q8_0`
# when missing). Needs build/tokenloom, node, and playwright-core from tests/dashboard
# (`cd tests/dashboard && npm ci`) plus /usr/bin/chromium for the page mode. Env: THREADS
# (engine threads, default 2), CLIENTS (32), REQUESTS (128).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/build/tokenloom
MODEL=${1:-/tmp/m110-q8.gguf}
REPEATS=${2:-3}
THREADS=${THREADS:-2}
CLIENTS=${CLIENTS:-32}
REQUESTS=${REQUESTS:-128}
TMP=$(mktemp -d)
SERVER=""
HELPER=""
cleanup() {
    [ -n "$HELPER" ] && kill "$HELPER" 2>/dev/null
    [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

[ -x "$BIN" ] || { echo "build first: make -j2" >&2; exit 2; }
if [ ! -f "$MODEL" ]; then
    echo "making $MODEL" >&2
    "$BIN" mkmodel --size 110M --type q8_0 -o "$MODEL" >&2
fi
if [ ! -d "$ROOT/tests/dashboard/node_modules/playwright-core" ]; then
    echo "needs playwright-core: (cd tests/dashboard && npm ci)" >&2
    exit 2
fi

"$BIN" serve -m "$MODEL" --port 0 --threads "$THREADS" >"$TMP/server.log" 2>&1 &
SERVER=$!
URL=""
i=0
while [ $i -lt 600 ] && [ -z "$URL" ]; do
    port=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$TMP/server.log" | head -n 1)
    [ -n "$port" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = 200 ] &&
        URL=http://127.0.0.1:$port
    sleep 0.1
    i=$((i + 1))
done
[ -n "$URL" ] || { cat "$TMP/server.log" >&2; exit 1; }

# The page: Chromium with /dashboard open until killed (the same launch as the browser test).
cat >"$TMP/page.mjs" <<'EOF'
const { chromium } = await import(process.env.TL_PW_CORE);
const b = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true,
  handleSIGTERM: false, handleSIGINT: false,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'] });
const p = await b.newPage();
await p.goto(process.argv[2] + '/dashboard');
process.on('SIGTERM', async () => {
  const polls = await p.evaluate(() => window.tlDashboard.polls);
  console.error('page polls: ' + polls);
  await b.close();
  process.exit(0);
});
console.log('ready');
setInterval(() => {}, 1000);
EOF
export TL_PW_CORE=$ROOT/tests/dashboard/node_modules/playwright-core/index.mjs
# Ten pages' worth of polling without a browser: /stats every 100 ms, each reply parsed.
cat >"$TMP/poll.mjs" <<'EOF'
let n = 0;
setInterval(async () => { await (await fetch(process.argv[2] + '/stats')).json(); n++; }, 100);
process.on('SIGTERM', () => { console.error('polls: ' + n); process.exit(0); });
EOF

run() { # run MODE SEED
    mode=$1 seed=$2
    case $mode in
    page) : >"$TMP/ready"
          node "$TMP/page.mjs" "$URL" >"$TMP/ready" 2>>"$TMP/helper.log" &
          HELPER=$!
          i=0 # the page is loaded and polling before the load starts
          while [ $i -lt 600 ] && ! grep -q ready "$TMP/ready"; do sleep 0.1; i=$((i + 1)); done
          sleep 2 ;;
    poll10) node "$TMP/poll.mjs" "$URL" 2>>"$TMP/helper.log" & HELPER=$!; sleep 1 ;;
    esac
    "$BIN" bench --url "$URL" --concurrency "$CLIENTS" --requests "$REQUESTS" \
        --prompt-len 64-192 --output-len 32-96 --seed "$seed" --json >"$TMP/$mode.$seed.json"
    if [ -n "$HELPER" ]; then kill "$HELPER"; wait "$HELPER" 2>/dev/null || true; HELPER=""; fi
    python3 - "$mode" "$seed" "$TMP/$mode.$seed.json" <<'EOF' | tee -a "$TMP/rows"
import json, sys
mode, seed, path = sys.argv[1:]
r = json.load(open(path))
print(mode, seed, r["output_throughput"], r["p50_ttft_ms"], r["p50_itl_ms"], r["failed"])
EOF
}

# The server-side price of one poll, without the noise of a loaded machine: the event-loop
# thread's CPU time (the main thread, /proc/PID/task/PID/stat utime + stime) over N requests
# on one keep-alive connection to an idle server, for /stats and, for scale, /metrics.
python3 - "$URL" "$SERVER" <<'EOF'
import http.client, os, sys, time
url, pid = sys.argv[1], sys.argv[2]
host, port = url.split("//")[1].split(":")
tick = os.sysconf("SC_CLK_TCK")
def loop_cpu():
    f = open("/proc/%s/task/%s/stat" % (pid, pid)).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick
for path in ("/stats", "/metrics"):
    c = http.client.HTTPConnection(host, int(port))
    n, size = 5000, 0
    c0, t0 = loop_cpu(), time.monotonic()
    for _ in range(n):
        c.request("GET", path)
        size = len(c.getresponse().read())
    c1, t1 = loop_cpu(), time.monotonic()
    print("%-8s %d requests: event-loop CPU %.1f us each, wall %.1f us each, %d bytes" % (
        path, n, (c1 - c0) / n * 1e6, (t1 - t0) / n * 1e6, size))
EOF

echo "mode seed output_tok_s ttft_p50_ms itl_p50_ms failed"
seed=5000
r=0
while [ $r -lt "$REPEATS" ]; do
    for mode in closed page poll10; do
        seed=$((seed + 1))
        run $mode $seed
    done
    r=$((r + 1))
done
cat "$TMP/helper.log" >&2
python3 - "$TMP/rows" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
by = {}
for mode, _, tps, ttft, itl, _ in rows:
    by.setdefault(mode, []).append((float(tps), float(ttft), float(itl)))
base = [statistics.median(c) for c in zip(*by["closed"])]
print("\nmode     runs  tok/s median (min..max)  ratio  TTFT p50 ms (min..max)  ITL p50 ms (min..max)")
for mode, v in by.items():
    cols = list(zip(*v))
    med = [statistics.median(c) for c in cols]
    print("%-7s %5d  %7.1f (%6.1f..%6.1f)  %5.3f  %7.1f (%6.1f..%6.1f)  %6.2f (%5.2f..%5.2f)" % (
        mode, len(v), med[0], min(cols[0]), max(cols[0]), med[0] / base[0],
        med[1], min(cols[1]), max(cols[1]), med[2], min(cols[2]), max(cols[2])))
EOF
