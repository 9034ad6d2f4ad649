#!/usr/bin/env python3
"""What the utilization metrics read under load: starts `tokenloom serve` on a model, runs
`tokenloom bench` at each concurrency level, and reports per level

  - over the whole run, from the counters (tokenloom:engine_ops_total, _bytes_read_total,
    engine_step_seconds_total) and the server's ceilings gauges: compute utilization
    (int8 ops / peak int8 + f32 FLOPs / peak f32, per second), memory-bandwidth utilization,
    engine busy ratio, achieved int8 GOP/s and GB/s read;
  - the median of the 10-second gauges (tokenloom:compute_utilization,
    memory_bandwidth_utilization, engine_busy_ratio) scraped every 2 s during the run;
  - mean sequences and decode tokens per step (the batch histograms' sum / count);
  - output tokens/s as the load generator measured it.

Usage: bench/utilization.py [--model PATH] [--levels 1,64] [--requests-per-client 2]
                            [--prompt-len 64] [--output-len 64] [--threads N]
The server measures its ceilings at start (or reads ~/.cache/tokenloom); a machine that is
busy with other work gives low ceilings and noisy numbers: compare levels within one run.
"""

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
TL_BIN = os.environ.get("TL_BIN", os.path.join(ROOT, "build", "tokenloom"))


def scrape(url):
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, v = line.rsplit(" ", 1)
        name = re.sub(r',?model_name="[^"]*"', "", name).replace("{}", "")
        out[name] = float(v)
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_level(url, c, args):
    m0 = scrape(url)
    t0 = time.monotonic()
    gauges, stop = [], threading.Event()

    def poll():
        while not stop.wait(2.0):
            g = scrape(url)
            gauges.append((g.get("tokenloom:compute_utilization", -1),
                           g.get("tokenloom:memory_bandwidth_utilization", -1),
                           g.get("tokenloom:engine_busy_ratio", -1)))

    th = threading.Thread(target=poll)
    th.start()
    p = subprocess.run([TL_BIN, "bench", "--url", url, "--concurrency", str(c), "--requests",
                        str(max(args.min_requests, c * args.requests_per_client)),
                        "--prompt-len", args.prompt_len, "--output-len", args.output_len,
                        "--json"], capture_output=True, text=True)
    stop.set()
    th.join()
    dt = time.monotonic() - t0
    m1 = scrape(url)
    d = {k: m1.get(k, 0) - m0.get(k, 0) for k in m1}
    peak8 = m1.get("tokenloom:machine_peak_int8_ops_per_second", 0)
    peak32 = m1.get("tokenloom:machine_peak_fp32_flops_per_second", 0)
    peakbw = m1.get("tokenloom:machine_memory_read_bytes_per_second", 0)
    i8 = d.get('tokenloom:engine_ops_total{kind="int8"}', 0)
    f32 = d.get('tokenloom:engine_ops_total{kind="fp32"}', 0)
    rd = (d.get('tokenloom:engine_bytes_read_total{kind="weights"}', 0) +
          d.get('tokenloom:engine_bytes_read_total{kind="kv"}', 0))
    busy = d.get("tokenloom:engine_step_seconds_total", 0)
    res = json.loads(p.stdout) if p.returncode == 0 and p.stdout.strip() else {}

    def per_step(name):
        n = d.get("tokenloom:%s_count" % name, 0)
        return d.get("tokenloom:%s_sum" % name, 0) / n if n else 0

    med = [statistics.median(x[i] for x in gauges) if gauges else float("nan") for i in range(3)]
    return {
        "clients": c, "seconds": round(dt, 1),
        "output_tok_s": res.get("output_throughput", res.get("output_tokens_per_s")),
        "compute_util_run": (i8 / peak8 + f32 / peak32) / dt if peak8 and peak32 else None,
        "memory_util_run": rd / peakbw / dt if peakbw else None,
        "busy_run": busy / dt,
        "int8_gops": i8 / dt / 1e9, "fp32_gflops": f32 / dt / 1e9, "read_gbs": rd / dt / 1e9,
        "int8_gops_while_busy": i8 / busy / 1e9 if busy else 0,
        "gauge_compute_util_median": med[0], "gauge_memory_util_median": med[1],
        "gauge_busy_median": med[2],
        "seqs_per_step": per_step("batch_sequences_per_step"),
        "decode_tokens_per_step": per_step("batch_decode_tokens_per_step"),
        "peaks": {"int8_gops": peak8 / 1e9, "fp32_gflops": peak32 / 1e9, "read_gbs": peakbw / 1e9},
        "bench_error": None if p.returncode == 0 else p.stderr[-300:],
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="/tmp/m110-q8.gguf")
    ap.add_argument("--levels", default="1,64")
    ap.add_argument("--requests-per-client", type=int, default=2)
    ap.add_argument("--min-requests", type=int, default=8)
    ap.add_argument("--prompt-len", default="64")
    ap.add_argument("--output-len", default="64")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--server-log", default="", help="file for the server's log")
    args = ap.parse_args()
    port = free_port()
    url = "http://127.0.0.1:%d" % port
    cmd = [TL_BIN, "serve", "-m", args.model, "--port", str(port)]
    if args.threads:
        cmd += ["-t", str(args.threads)]
    log = open(args.server_log, "wb") if args.server_log else subprocess.DEVNULL
    srv = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                           env=dict(os.environ, TOKENLOOM_LOG="warn"))
    try:
        end = time.monotonic() + 120
        while time.monotonic() < end:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        for c in (int(x) for x in args.levels.split(",")):
            if srv.poll() is not None:
                sys.exit("the server exited with status %s" % srv.returncode)
            print(json.dumps(run_level(url, c, args)), flush=True)
    finally:
        srv.terminate()
        srv.wait(30)


if __name__ == "__main__":
    sys.exit(main())
