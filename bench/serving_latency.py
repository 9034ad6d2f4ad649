#!/usr/bin/env python3
"""Serving latency matrix: scheduler policies x client counts, measured with `tokenloom bench`.

For each round, for each policy (a name and the engine flags that select it) one server is
started; for each client count one `tokenloom bench --json` run loads it (streaming completions,
fixed prompt and output lengths, a fresh seed per run so no prompt is in the prefix cache).
The server's Prometheus histogram `request_queue_time_seconds` (submission to first scheduled)
is read before and after each run and its quantiles estimated from the difference, bucket by
bucket with linear interpolation as Prometheus' histogram_quantile does (buckets 40, 60, 80,
100, 250 ms: good enough to tell 30 from 120 ms, not 45 from 55).

Policies are interleaved within each round, so their rows are measured minutes apart under the
same machine load; compare ratios within one run. Prints one table per round and a summary
(median over rounds) at the end; --json writes every row.

Usage:
  python3 bench/serving_latency.py -m /tmp/m110-q8.gguf --clients 8,32,64 --rounds 2 \
      --policy 'before=--sched-policy fcfs' --policy 'after='
  # another build as a policy: NAME@BINARY=FLAGS
  python3 bench/serving_latency.py -m /tmp/m110-q8.gguf --policy 'old@/tmp/before/build/tokenloom=' \
      --policy 'new='
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def queue_buckets(port):
    """Cumulative (le, count) pairs of the queue-time histogram."""
    text = get(f"http://127.0.0.1:{port}/metrics")
    out = []
    # other labels (model_name) may come before le
    for m in re.finditer(r'request_queue_time_seconds_bucket\{(?:[^}]*,)?le="([^"]+)"[^}]*\} (\S+)',
                         text):
        le = float("inf") if m.group(1) == "+Inf" else float(m.group(1))
        out.append((le, float(m.group(2))))
    return out


def hist_quantile(q, before, after):
    """Quantile q of the observations added between two snapshots of a cumulative histogram."""
    cum = [(le, a - b) for (le, a), (_, b) in zip(after, before)]
    total = cum[-1][1] if cum else 0
    if total <= 0:
        return float("nan")
    rank = q * total
    prev_le, prev_c = 0.0, 0.0
    for le, c in cum:
        if c >= rank:
            if le == float("inf"):
                return prev_le
            return prev_le + (le - prev_le) * (rank - prev_c) / max(c - prev_c, 1e-9)
        prev_le, prev_c = le, c
    return prev_le


def start_server(binary, model, port, threads, flags):
    cmd = [binary, "serve", "-m", model, "--port", str(port), "--threads", str(threads)] + flags
    log = open(f"/tmp/serving_latency_{port}.log", "w")
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        if p.poll() is not None:
            sys.exit(f"server exited ({p.returncode}); see /tmp/serving_latency_{port}.log: {cmd}")
        try:
            get(f"http://127.0.0.1:{port}/health", 1)  # 503 (an exception) while loading
            return p
        except Exception:
            time.sleep(0.2)
    p.kill()
    sys.exit("server did not become ready")


def stop_server(p):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def run_bench(binary, port, clients, requests, prompt_len, output_len, seed):
    cmd = [binary, "bench", "--url", f"http://127.0.0.1:{port}", "--concurrency", str(clients),
           "--requests", str(requests), "--prompt-len", str(prompt_len),
           "--output-len", str(output_len), "--seed", str(seed), "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(f"bench failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}\n")
        return None
    return json.loads(p.stdout.strip().splitlines()[-1])


COLS = [("policy", "{:<12}"), ("clients", "{:>7}"), ("req/s", "{:>6.2f}"),
        ("out tok/s", "{:>9.0f}"), ("queue p50", "{:>9.0f}"), ("queue p90", "{:>9.0f}"),
        ("TTFT p50", "{:>8.0f}"), ("TTFT p99", "{:>8.0f}"), ("ITL p50", "{:>7.1f}"),
        ("ITL p99", "{:>7.0f}"), ("failed", "{:>6}")]


def row_values(r):
    return [r["policy"], r["clients"], r["request_throughput"], r["output_throughput"],
            r["queue_p50_ms"], r["queue_p90_ms"], r["p50_ttft_ms"], r["p99_ttft_ms"],
            r["p50_itl_ms"], r["p99_itl_ms"], r["failed"]]


def print_table(rows, title):
    print(f"\n{title} (ms unless noted)")
    print("| " + " | ".join(c for c, _ in COLS) + " |")
    print("|" + "|".join("---:" if i else "---" for i in range(len(COLS))) + "|")
    for r in rows:
        print("| " + " | ".join(f.format(v).strip() for (_, f), v in zip(COLS, row_values(r)))
              + " |")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "tokenloom"))
    ap.add_argument("--clients", default="8,32,64")
    ap.add_argument("--requests-per-client", type=float, default=3.0,
                    help="requests per run = max(clients x this, --min-requests)")
    ap.add_argument("--min-requests", type=int, default=32)
    ap.add_argument("--prompt-len", default="130")
    ap.add_argument("--output-len", default="64")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--port", type=int, default=18700)
    ap.add_argument("--policy", action="append", default=[],
                    help="NAME[@BINARY]=ENGINE FLAGS (repeatable; BINARY: another build's "
                    "tokenloom to serve with, the load generator is always --binary's); "
                    "default: one policy with no flags")
    ap.add_argument("--json", help="write every row here")
    a = ap.parse_args()
    policies = []
    for p in a.policy or ["default="]:
        name, _, flags = p.partition("=")
        name, _, binary = name.partition("@")
        policies.append((name, binary or a.binary, flags.split()))
    clients = [int(c) for c in a.clients.split(",")]
    rows = []
    seed = int(time.time()) % 100000 * 100
    for rnd in range(a.rounds):
        round_rows = []
        for name, binary, flags in policies:
            srv = start_server(binary, a.model, a.port, a.threads, flags)
            try:
                for c in clients:
                    n = max(int(c * a.requests_per_client), a.min_requests)
                    seed += 1
                    before = queue_buckets(a.port)
                    r = run_bench(a.binary, a.port, c, n, a.prompt_len, a.output_len, seed)
                    after = queue_buckets(a.port)
                    if r is None:
                        continue
                    r.update(policy=name, clients=c, round=rnd + 1,
                             queue_p50_ms=hist_quantile(0.5, before, after) * 1e3,
                             queue_p90_ms=hist_quantile(0.9, before, after) * 1e3)
                    round_rows.append(r)
                    rows.append(r)
            finally:
                stop_server(srv)
        print_table(round_rows, f"round {rnd + 1}")
    if a.rounds > 1:
        summary = []
        for name, _, _ in policies:
            for c in clients:
                rs = [r for r in rows if r["policy"] == name and r["clients"] == c]
                if not rs:
                    continue
                m = {k: statistics.median(r[k] for r in rs) for k in rs[0]
                     if isinstance(rs[0][k], (int, float)) and not isinstance(rs[0][k], bool)}
                m.update(policy=name, clients=c)
                summary.append(m)
        print_table(summary, f"median of {a.rounds} rounds")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
