"""The dashboard page and GET /stats of `tokenloom serve`, end to end, printed as TAP.

Two servers on stories260K (one plain, one with --api-key). Checks:
  - /stats: its shape against a JSON Schema (jsonschema, an independent validator); the engine
    configuration as the flags set it; counters, gauges and latency histograms equal to what
    /metrics says for a quiet server; its p50/p90/p99 equal to Prometheus's
    histogram_quantile() definition applied here to /metrics' cumulative buckets; counters
    that never go back while load runs; the key (401 without it, 200 with it);
  - the page: / and /dashboard serve it as text/html with a Content-Security-Policy that allows
    this origin only, no-store, no data in it; HEAD; other paths keep their JSON 404;
  - in headless Chromium (browser.mjs, playwright-core from npm, `npm ci`): no console errors,
    no failed requests, no request to any other host, the charts change under load, the key
    flow; screenshots go to $TL_TEST_OUT/dashboard/ (default build/test-output/dashboard/).
Environment: TL_BIN, TL_SHARED as tests/run.sh sets them.
"""

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "deploy"))
import deploylib  # noqa: E402  (Tap, Replica, free_port, http_get)

import jsonschema  # noqa: E402

KEY = "dash-secret-key"
OUT = os.path.join(os.environ.get("TL_TEST_OUT") or os.path.join(
    deploylib.ROOT, os.environ.get("BUILD", "build"), "test-output"), "dashboard")

HIST = {
    "type": "object",
    "required": ["count", "sum", "p50", "p90", "p99", "le", "counts"],
    "properties": {
        "count": {"type": "integer", "minimum": 0},
        "sum": {"type": "number", "minimum": 0},
        "p50": {"type": ["number", "null"]},
        "p90": {"type": ["number", "null"]},
        "p99": {"type": ["number", "null"]},
        "le": {"type": "array", "items": {"type": "number"}, "minItems": 1},
        "counts": {"type": "array", "items": {"type": "integer", "minimum": 0}},
    },
}
COUNT = {"type": "integer", "minimum": 0}
SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["object", "time", "started", "uptime_s", "state", "model", "engine", "counters",
                 "gauges", "utilization", "latency"],
    "properties": {
        "object": {"const": "tokenloom.stats"},
        "time": {"type": "number"},
        "uptime_s": {"type": "number", "minimum": 0},
        "state": {"enum": ["loading", "ready", "draining", "failed"]},
        "model": {"type": "object", "required": ["id", "file", "arch", "weight_type", "n_params",
                                                 "n_vocab", "n_ctx_train", "n_layer", "n_embd"]},
        "engine": {
            "type": "object",
            "required": ["threads", "isa", "kv_type", "kv_block_size", "kv_blocks",
                         "max_batch_size", "max_tokens_per_step", "max_seq_len", "prefix_caching"],
            "properties": {"isa": {"enum": ["scalar", "avx2", "avx512"]},
                           "kv_type": {"enum": ["f16", "f32", "q8_0"]},
                           "prefix_caching": {"type": "boolean"}},
        },
        "counters": {
            "type": "object",
            "required": ["prompt_tokens", "generation_tokens", "requests_finished", "steps",
                         "step_seconds", "step_tokens", "prefix_cache_queries",
                         "prefix_cache_hits", "preemptions", "client_disconnects"],
            "properties": {
                "requests_finished": {
                    "type": "object", "additionalProperties": COUNT,
                    "required": ["stop", "length", "abort", "timeout", "error"]},
                "step_seconds": {"type": "number", "minimum": 0},
            },
            "additionalProperties": {"type": ["number", "object"]},
        },
        "gauges": {"type": "object", "additionalProperties": COUNT,
                   "required": ["running", "waiting", "kv_blocks_used", "kv_blocks_cached",
                                "kv_blocks_free", "kv_blocks_total"]},
        "utilization": {"type": "object", "additionalProperties": {"type": "number"}},
        "latency": {"type": "object", "required": ["ttft", "itl", "queue", "e2e"],
                    "additionalProperties": HIST},
    },
}


def get(url, key=None, method="GET"):
    """(status, headers dict lower-cased, body bytes)."""
    req = urllib.request.Request(url, method=method)
    if key:
        req.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def stats(url, key=None):
    status, _, body = get(url + "/stats", key)
    return json.loads(body) if status == 200 else None


def parse_metrics(text):
    """{(name, frozenset(labels)): value} from the Prometheus text format; the model_name label
    every tokenloom series carries (one model per server) is left out of the key."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, value = line.rsplit(" ", 1)
        labels = frozenset()
        if "{" in head:
            name, rest = head.split("{", 1)
            labels = frozenset(tuple(p.split("=", 1)[0:1]) + (p.split("=", 1)[1].strip('"'),)
                               for p in rest.rstrip("}").split(",")
                               if p and not p.startswith("model_name="))
        else:
            name = head
        out[(name, labels)] = float(value)
    return out


def prom_buckets(m, name):
    """[(le, cumulative count)] of one histogram, +Inf last, in order."""
    rows = []
    for (n, labels), v in m.items():
        if n == "tokenloom:" + name + "_bucket":
            le = dict(labels)["le"]
            rows.append((math.inf if le == "+Inf" else float(le), v))
    return sorted(rows)


def histogram_quantile(q, buckets):
    """Prometheus's histogram_quantile() (promql/quantile.go's bucketQuantile), restated."""
    if not buckets or buckets[-1][1] == 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    b = next(i for i, (_, c) in enumerate(buckets) if c >= rank)
    if buckets[b][0] == math.inf:
        return buckets[-2][0]
    start, below = (0.0, 0.0) if b == 0 else (buckets[b - 1][0], buckets[b - 1][1])
    if b == 0 and buckets[0][0] <= 0:
        return buckets[0][0]
    count = buckets[b][1] - below
    return start + (buckets[b][0] - start) * ((rank - below) / count)


def complete(url, n, key=None, max_tokens=24):
    for i in range(n):
        req = urllib.request.Request(
            url + "/v1/completions", method="POST",
            data=json.dumps({"prompt": "Once upon a time %d" % i, "max_tokens": max_tokens,
                             "seed": i}).encode(),
            headers={"Content-Type": "application/json"})
        if key:
            req.add_header("Authorization", "Bearer " + key)
        urllib.request.urlopen(req, timeout=30).read()


def check_stats(tap, url):
    s0 = stats(url)
    if not tap.check(s0 is not None, "GET /stats answers 200 JSON"):
        return
    try:
        jsonschema.validate(s0, SCHEMA)
        tap.check(True, "/stats matches its JSON Schema")
    except jsonschema.ValidationError as e:
        tap.check(False, "/stats matches its JSON Schema", str(e)[:1500])
    e = s0["engine"]
    tap.check((e["threads"], e["max_batch_size"], e["kv_block_size"], e["kv_type"],
               e["max_tokens_per_step"], e["max_seq_len"]) == (1, 12, 32, "f32", 256, 1024),
              "engine configuration as the flags set it", json.dumps(e))
    tap.check(s0["model"]["id"] == "stories260K" and s0["state"] == "ready",
              "model id and state", json.dumps(s0["model"]))
    idle = s0["latency"]["ttft"]
    tap.check(s0["counters"]["generation_tokens"] == 0 and idle["count"] == 0
              and idle["p50"] is None, "a fresh server: zero counters, no percentiles (null)")

    complete(url, 12)
    time.sleep(0.3)
    s1 = stats(url)
    status, _, body = get(url + "/metrics")
    s2 = stats(url)
    m = parse_metrics(body.decode())
    # Quiet: nothing ran between the two /stats, so /metrics (between them) saw the same.
    quiet = s1["counters"] == s2["counters"] and s1["gauges"] == s2["gauges"]
    tap.check(quiet, "a quiet server gives the same counters on two polls")

    def mv(name, **labels):
        return m.get(("tokenloom:" + name, frozenset(labels.items())))

    c, g = s2["counters"], s2["gauges"]
    pairs = [
        (c["prompt_tokens"], mv("prompt_tokens_total")),
        (c["generation_tokens"], mv("generation_tokens_total")),
        (c["steps"], mv("engine_steps_total")),
        (c["prefix_cache_queries"], mv("prefix_cache_queries_total")),
        (c["prefix_cache_hits"], mv("prefix_cache_hits_total")),
        (c["preemptions"], mv("num_preemptions_total")),
        (c["client_disconnects"], mv("client_disconnects_total")),
        (c["step_tokens"], mv("batch_tokens_per_step_sum")),
        (g["running"], mv("num_requests_running")),
        (g["waiting"], mv("num_requests_waiting")),
        (g["kv_blocks_total"], mv("kv_cache_blocks")),
        (g["kv_blocks_free"], mv("kv_cache_blocks_free")),
        (g["kv_blocks_cached"], mv("kv_cache_blocks_cached")),
    ] + [(c["requests_finished"][r], mv("request_success_total", finished_reason=r))
         for r in ("stop", "length", "abort", "timeout", "error")]
    tap.check(all(a == b for a, b in pairs), "counters and gauges equal /metrics' samples",
              repr(pairs))
    tap.check(abs(c["step_seconds"] - mv("engine_step_seconds_total")) < 1e-6,
              "step seconds equal /metrics'")
    tap.check(c["generation_tokens"] == 12 * 24 and sum(c["requests_finished"].values()) == 12,
              "12 completions of 24 tokens counted", json.dumps(c))
    names = {"ttft": "time_to_first_token_seconds", "itl": "inter_token_latency_seconds",
             "queue": "request_queue_time_seconds", "e2e": "e2e_request_latency_seconds"}
    for k, name in names.items():
        h, pb = s2["latency"][k], prom_buckets(m, name)
        cum, acc = [], 0
        for v in h["counts"]:
            acc += v
            cum.append(acc)
        same = ([le for le, _ in pb[:-1]] == h["le"] and [v for _, v in pb] == cum
                and h["count"] == mv(name + "_count")
                and abs(h["sum"] - mv(name + "_sum")) < 1e-9)
        tap.check(same, "%s histogram equals /metrics' %s" % (k, name), json.dumps(h)[:800])
        want = [histogram_quantile(q, pb) for q in (0.5, 0.9, 0.99)]
        got = [h["p50"], h["p90"], h["p99"]]
        tap.check(all(w is not None and abs(w - x) < 1e-9 for w, x in zip(want, got)),
                  "%s p50/p90/p99 equal histogram_quantile() of /metrics' buckets" % k,
                  "want %r got %r" % (want, got))
    tap.check(s2["latency"]["itl"]["count"] == 12 * 23, "one ITL sample per token after the first")

    # Monotonic under load: poll while a thread runs requests.
    done = threading.Event()
    t = threading.Thread(target=lambda: (complete(url, 30, max_tokens=64), done.set()))
    t.start()
    polls = []
    while not done.is_set() and len(polls) < 200:
        polls.append(stats(url))
        time.sleep(0.02)
    t.join()
    polls.append(stats(url))
    bad = []
    for a, b in zip(polls, polls[1:]):
        for k, v in a["counters"].items():
            if k == "requests_finished":
                bad += [(k, r) for r in v if b["counters"][k][r] < v[r]]
            elif b["counters"][k] < v:
                bad.append(k)
        for k in a["latency"]:
            if b["latency"][k]["count"] < a["latency"][k]["count"]:
                bad.append("latency." + k)
        if b["time"] < a["time"] or b["utilization"]["busy_seconds"] < a["utilization"]["busy_seconds"]:
            bad.append("time")
        gb = b["gauges"]
        if gb["kv_blocks_used"] + gb["kv_blocks_cached"] + gb["kv_blocks_free"] != gb["kv_blocks_total"] \
                or gb["running"] > 12:
            bad.append("gauges %r" % gb)
    tap.check(len(polls) >= 3 and not bad, "counters never go back over %d polls under load"
              % len(polls), repr(bad[:10]))
    tap.check(any(p["gauges"]["running"] > 0 for p in polls), "polls saw requests running")


def check_page(tap, url):
    for path in ("/", "/dashboard"):
        status, h, body = get(url + path)
        csp = h.get("content-security-policy", "")
        tap.check(status == 200 and h.get("content-type", "").startswith("text/html")
                  and b"window.tlDashboard" in body,
                  "GET %s serves the page" % path, "%d %r" % (status, h))
        tap.check("default-src 'none'" in csp and "connect-src 'self'" in csp
                  and "http" not in csp and h.get("cache-control") == "no-store",
                  "GET %s: CSP allows this origin only, no-store" % path, csp)
    tap.check(b"http://" not in body and b"https://" not in body and b"//cdn" not in body,
              "the page names no other host")
    status, h, body = get(url + "/dashboard", method="HEAD")
    tap.check(status == 200 and body == b"" and int(h.get("content-length", "0")) > 1000,
              "HEAD /dashboard: headers only")
    status, _, body = get(url + "/dashboardx")
    tap.check(status == 404 and json.loads(body)["error"]["code"] == "not_found",
              "other paths keep the JSON 404")
    status, h, _ = get(url + "/stats", method="POST")
    tap.check(status == 405 and h.get("allow") == "GET", "POST /stats is 405")


def check_auth(tap, url):
    tap.check(get(url + "/stats")[0] == 401, "with --api-key, /stats without the key is 401")
    tap.check(get(url + "/stats", "wrong")[0] == 401, "a wrong key is 401")
    st = stats(url, KEY)
    tap.check(st is not None and st["model"]["id"] == "stories260K", "the key gets /stats")
    status, _, body = get(url + "/dashboard")
    tap.check(status == 200 and b"stories260K" not in body,
              "the page itself is public and holds no data")


def run_browser(tap, args):
    p = subprocess.run(["node", os.path.join(HERE, "browser.mjs")] + args, cwd=HERE,
                       capture_output=True, text=True, timeout=120)
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tap.check(False, "headless Chromium runs the page (%s)" % args[0],
                  p.stdout[-1500:] + p.stderr[-2500:])
        return None


def check_browser(tap, url, key_url):
    os.makedirs(OUT, exist_ok=True)
    r = run_browser(tap, ["plain", url, OUT])
    if r:
        tap.check(r["pageStatus"] == 200, "the browser loads /dashboard")
        clean = not (r["consoleErrors"] or r["pageErrors"] or r["failedRequests"]
                     or r["statusErrors"])
        tap.check(clean, "no console errors, page errors or failed requests",
                  json.dumps({k: r[k] for k in ("consoleErrors", "pageErrors", "failedRequests",
                                                "statusErrors")}))
        tap.check(not r["otherHosts"], "no request to any other host", repr(r["otherHosts"]))
        idle, loaded = r["idle"], r["loaded"]
        tap.check(idle["polls"] >= 3 and idle["errors"] == 0 and idle["maxGenTps"] == 0
                  and idle["model"] == "stories260K" and "f32" in idle["engineText"],
                  "idle: the page polls, shows model and engine, no throughput",
                  json.dumps(idle)[:1500])
        tap.check(r["load"]["done"] > 0 and r["load"]["failed"] == 0, "load ran: %r" % r["load"])
        tap.check(loaded["maxGenTps"] > 0 and loaded["maxRunning"] > 0
                  and loaded["maxTokensPerStep"] >= 1 and loaded["maxBusy"] > 0
                  and loaded["maxItlP50"] > 0,
                  "under load the series show throughput, running requests, batch size, "
                  "busy time and ITL", json.dumps(loaded)[:1500])
        changed = [c for c in ("chart-tokens", "chart-requests", "chart-batch", "chart-itl")
                   if idle["hashes"].get(c) != loaded["hashes"].get(c)]
        tap.check(len(changed) == 4, "the charts' pixels changed under load", repr(changed))
        shot = os.path.join(OUT, "dashboard.png")
        tap.check(os.path.exists(shot) and os.path.getsize(shot) > 10000,
                  "screenshot written: " + shot)
    r = run_browser(tap, ["key", key_url, KEY, OUT])
    if r:
        b, a = r.get("beforeKey", {}), r.get("afterKey", {})
        tap.check(b.get("needsKey") and b.get("keyFormVisible") and b.get("polls") == 0,
                  "with --api-key the page asks for the key", json.dumps(b)[:800])
        tap.check(a.get("polls", 0) >= 3 and not a.get("needsKey")
                  and a.get("model") == "stories260K", "with the key it polls",
                  json.dumps(a)[:800])
        # The only errors allowed: Chromium's console line for the 401 before the key.
        other = [e for e in r["consoleErrors"] if "401" not in e]
        tap.check(not other and not r["pageErrors"] and not r["failedRequests"]
                  and all(e.startswith("401 ") for e in r["statusErrors"])
                  and not r["otherHosts"], "key flow: no other error, no other host",
                  json.dumps(r)[:1500])


def main():
    tap = deploylib.Tap()
    for tool in ("node", "npm"):
        if not tap.check(shutil.which(tool), "%s is installed (scripts/install-deps.sh)" % tool):
            tap.finish()
    chromium = os.environ.get("TL_CHROMIUM", "/usr/bin/chromium")
    if not tap.check(os.access(chromium, os.X_OK), "chromium is installed at " + chromium):
        tap.finish()
    if not os.path.isdir(os.path.join(HERE, "node_modules", "playwright-core")):
        p = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=HERE,
                           capture_output=True, text=True)
        if not tap.check(p.returncode == 0, "npm ci installs playwright-core", p.stderr[-2000:]):
            tap.finish()
    tmp = tempfile.mkdtemp(prefix="tl-dash-")
    plain = deploylib.Replica(tmp, "plain", deploylib.free_port(),
                              ["--max-batch-size", "12", "--kv-block-size", "32", "--kv-type",
                               "f32", "--max-tokens-per-step", "256", "--max-seq-len", "1024"])
    keyed = deploylib.Replica(tmp, "keyed", deploylib.free_port(), ["--api-key", KEY])
    try:
        for r in (plain, keyed):
            r.start()
        ok = all(tap.check(r.wait_healthy(), "server %s turns healthy" % r.name, r.log_text())
                 for r in (plain, keyed))
        if ok:
            check_stats(tap, plain.url)
            check_page(tap, plain.url)
            check_auth(tap, keyed.url)
            check_browser(tap, plain.url, keyed.url)
    finally:
        for r in (plain, keyed):
            r.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    tap.finish()


if __name__ == "__main__":
    main()
