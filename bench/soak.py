#!/usr/bin/env python3
"""Soak benchmark: a long run of mixed traffic against one `tokenloom serve`, sampling its
resident memory, open descriptors and KV blocks in use every few seconds (docs/deploy.md,
bench/README.md). Not a test: it prints a table and writes the samples as JSON.

  python3 bench/soak.py --minutes 15 [--workers 6] [--interval 5] [--out bench/out/soak.json]
                        [--bin build/tokenloom] [--model ../shared/models/stories260K.gguf]
                        [--serve-env NAME=VALUE ...] [--url http://HOST:PORT --pid PID]

The traffic mix, chosen per request from a seeded generator: streams; n > 1; stop strings;
logprobs; chat; abrupt disconnects (a stream read for a few bytes, then the socket closed);
bad requests (malformed JSON, wrong types, unknown model); and, every 20 s, an overload burst of
64 concurrent requests against a small queue (--max-queued-requests 16), which must partly
answer 429. Every answer is checked against what its kind allows; anything else (a 5xx, a 200
without [DONE], a bad request accepted) counts as an error.

At the end the load stops, the server must return to idle (no requests running, KV usage 0,
descriptors back to the count at the first sample), and the memory curve is summarised:
RSS after warm-up (the first --warmup minutes are excluded), its growth per minute (least
squares), and the last-minus-first difference in percent.
"""

import argparse
import http.client
import json
import os
import re
import random
import socket
import subprocess
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

STORIES = ["Once upon a time", "The little dog", "Lily and Tom went to the park", "One day",
           "There was a big red ball", "Tim had a toy car"]


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.errors = []

    def add(self, kind, outcome, error=None):
        with self.lock:
            k = "%s:%s" % (kind, outcome)
            self.counts[k] = self.counts.get(k, 0) + 1
            if error and len(self.errors) < 50:
                self.errors.append("%s: %s" % (kind, error))

    def total(self):
        with self.lock:
            return sum(self.counts.values())

    def n_errors(self):
        with self.lock:
            return sum(v for k, v in self.counts.items() if k.endswith(":ERROR"))


def request(host, port, method, path, body, timeout=60, read_limit=None):
    """(status, body bytes). read_limit: read that many bytes, then close abruptly."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if read_limit is not None:
            data = resp.read(read_limit)
            # An abrupt close: RST instead of a polite FIN where possible.
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            conn.sock.close()
            return resp.status, data
        return resp.status, resp.read()
    finally:
        conn.close()


def stream_ok(data, n=1):
    events = [ln[6:] for ln in data.decode(errors="replace").split("\n") if ln.startswith("data: ")]
    if not events or events[-1] != "[DONE]":
        return False
    fin = {c["index"] for e in events[:-1] for c in json.loads(e).get("choices", [])
           if c.get("finish_reason")}
    return len(fin) == n


def one(rng, host, port, stats):
    """Sends one request of a randomly chosen kind and checks the answer."""
    kind = rng.choices(["stream", "n", "stop", "logprobs", "chat", "disconnect", "bad", "plain"],
                       [20, 10, 10, 10, 15, 10, 10, 15])[0]
    prompt = rng.choice(STORIES)
    mt = rng.randint(4, 48)
    try:
        if kind == "bad":
            body = rng.choice([b"{not json", b'{"prompt": 5}', b'{"prompt":"x","max_tokens":-3}',
                               b'{"prompt":"x","model":"nope"}', b'[]',
                               b'{"messages":[{"role":"wizard","content":"x"}]}'])
            path = "/v1/chat/completions" if b"messages" in body else "/v1/completions"
            st, data = request(host, port, "POST", path, body)
            ok = st in (400, 404) and b'"error"' in data
            stats.add(kind, "ok" if ok else "ERROR", None if ok else "status %d %s" % (st, data[:100]))
            return
        if kind == "chat":
            p = {"messages": [{"role": "system", "content": "You tell short stories."},
                              {"role": "user", "content": prompt}], "max_tokens": mt,
                 "stream": rng.random() < 0.5}
            path = "/v1/chat/completions"
        else:
            p = {"prompt": prompt, "max_tokens": mt, "temperature": rng.choice([0, 0.8, 1.0])}
            path = "/v1/completions"
            if kind in ("stream", "disconnect"):
                p["stream"] = True
                if kind == "disconnect":
                    p["max_tokens"] = 400
                    p["ignore_eos"] = True
            elif kind == "n":
                p["n"] = rng.randint(2, 4)
                p["stream"] = rng.random() < 0.5
            elif kind == "stop":
                p["stop"] = [rng.choice([".", " the", "\n", "girl"])]
            elif kind == "logprobs":
                p["logprobs"] = rng.randint(1, 5)
                p["echo"] = rng.random() < 0.3
        body = json.dumps(p).encode()
        if kind == "disconnect":
            st, data = request(host, port, "POST", path, body, read_limit=rng.randint(50, 600))
            outcome = "ok" if st == 200 else "429" if st == 429 else "ERROR"
            stats.add(kind, outcome, None if outcome != "ERROR" else "status %d" % st)
            return
        st, data = request(host, port, "POST", path, body)
        if st == 429:
            stats.add(kind, "429")
            return
        if st != 200:
            stats.add(kind, "ERROR", "status %d %s" % (st, data[:120]))
            return
        if p.get("stream"):
            ok = stream_ok(data, p.get("n", 1))
        else:
            j = json.loads(data)
            ok = len(j["choices"]) == p.get("n", 1) and all(c.get("finish_reason") for c in j["choices"])
        stats.add(kind, "ok" if ok else "ERROR", None if ok else data[-200:])
    except (OSError, http.client.HTTPException, ValueError) as e:
        stats.add(kind, "ERROR", "%s: %s" % (type(e).__name__, e))


def burst(host, port, stats, n=64):
    """n concurrent requests at once: with a queue of 16 some must get 429, none a 5xx."""
    res = []

    def go():
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 32, "n": 2}).encode()
        try:
            res.append(request(host, port, "POST", "/v1/completions", body)[0])
        except (OSError, http.client.HTTPException) as e:
            res.append(str(e))
    ts = [threading.Thread(target=go) for _ in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    for r in res:
        stats.add("burst", "ok" if r == 200 else "429" if r == 429 else "ERROR",
                  None if r in (200, 429) else "burst: %s" % r)


def metrics(host, port):
    st, data = request(host, port, "GET", "/metrics", None, timeout=10)
    out = {}
    for line in data.decode().splitlines():
        parts = line.split()
        if len(parts) == 2 and not line.startswith("#"):
            # every tokenloom series carries model_name: key the one-label ones by bare name
            out[re.sub(r'\{model_name="[^"]*"\}$', "", parts[0])] = float(parts[1])
    return out


def proc_sample(pid):
    with open("/proc/%d/status" % pid) as f:
        rss = next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:"))
    return rss, len(os.listdir("/proc/%d/fd" % pid))


def slope(xs, ys):
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=15)
    ap.add_argument("--warmup", type=float, default=2, help="minutes left out of the RSS fit")
    ap.add_argument("--workers", type=int, default=6)
    ap.add_argument("--interval", type=float, default=5)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "tokenloom"))
    ap.add_argument("--model", default=os.path.join(ROOT, "..", "shared", "models",
                                                    "stories260K.gguf"))
    ap.add_argument("--serve-env", action="append", default=[],
                    help="NAME=VALUE for the server's environment (e.g. MALLOC_ARENA_MAX=2)")
    ap.add_argument("--url", help="use this running server instead (needs --pid)")
    ap.add_argument("--pid", type=int)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out", "soak.json"))
    args = ap.parse_args()

    server = None
    if args.url:
        host, port = args.url.split("//")[1].split(":")
        port, pid = int(port), args.pid
    else:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        host = "127.0.0.1"
        env = dict(os.environ, TOKENLOOM_LOG="warn")
        env.update(kv.split("=", 1) for kv in args.serve_env)
        server = subprocess.Popen([args.bin, "serve", "-m", args.model, "--port", str(port),
                                   "--max-queued-requests", "16", "-t", "1"], env=env)
        pid = server.pid
        for _ in range(300):
            try:
                if request(host, port, "GET", "/health", None, timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)

    stats = Stats()
    stop = threading.Event()

    def worker(i):
        rng = random.Random(1000 + i)
        while not stop.is_set():
            one(rng, host, port, stats)

    def burster():
        while not stop.wait(20):
            burst(host, port, stats)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.workers)]
    threads.append(threading.Thread(target=burster))
    t0 = time.monotonic()
    for t in threads:
        t.start()
    samples = []
    print("%7s %10s %6s %8s %9s %7s" % ("t_s", "rss_kb", "fds", "kv_used", "requests", "errors"))
    try:
        while time.monotonic() - t0 < args.minutes * 60:
            time.sleep(args.interval)
            m = metrics(host, port)
            rss, fds = proc_sample(pid)
            kv_used = m.get("tokenloom:kv_cache_blocks", 0) * m.get(
                "tokenloom:kv_cache_usage_perc", 0)
            s = {"t": round(time.monotonic() - t0, 1), "rss_kb": rss, "fds": fds,
                 "kv_used": round(kv_used), "requests": stats.total(), "errors": stats.n_errors()}
            samples.append(s)
            print("%7.0f %10d %6d %8d %9d %7d" % (s["t"], rss, fds, s["kv_used"], s["requests"],
                                                  s["errors"]), flush=True)
    finally:
        stop.set()
        for t in threads:
            t.join(180)
    # Back to idle?
    idle = None
    for _ in range(100):
        m = metrics(host, port)
        if m.get("tokenloom:num_requests_running") == 0 and m.get("tokenloom:kv_cache_usage_perc") == 0:
            idle = m
            break
        time.sleep(0.1)
    rss_end, fds_end = proc_sample(pid)
    warm = [s for s in samples if s["t"] >= args.warmup * 60] or samples
    xs, ys = [s["t"] / 60 for s in warm], [s["rss_kb"] for s in warm]
    per_min = slope(xs, ys)
    summary = {
        "minutes": args.minutes, "requests": stats.total(), "errors": stats.n_errors(),
        "rate_per_min": round(stats.total() / (samples[-1]["t"] / 60)) if samples else 0,
        "counts": stats.counts, "error_examples": stats.errors[:10],
        "rss_kb_first_after_warmup": ys[0] if ys else None, "rss_kb_last": ys[-1] if ys else None,
        "rss_kb_min": min(ys) if ys else None, "rss_kb_max": max(ys) if ys else None,
        "rss_growth_kb_per_min": round(per_min, 2),
        "rss_change_pct_after_warmup": round(100.0 * (ys[-1] - ys[0]) / ys[0], 3) if ys else None,
        "fds_first": samples[0]["fds"] if samples else None, "fds_end_idle": fds_end,
        "idle_at_end": idle is not None, "rss_kb_end_idle": rss_end,
        "serve_env": args.serve_env,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"summary": summary, "samples": samples}, f, indent=1)
    print(json.dumps(summary, indent=1))
    if server:
        server.terminate()
        server.wait(60)
    return 0 if summary["errors"] == 0 and summary["idle_at_end"] else 1


if __name__ == "__main__":
    sys.exit(main())
