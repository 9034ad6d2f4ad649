#!/usr/bin/env python3
"""Prometheus for real, printed as TAP: Debian's `prometheus` on loopback scrapes two
`tokenloom serve` replicas (config generated into a temporary folder, scrape every second),
the test sends a little load, and then asks Prometheus' HTTP query API:

  - both targets are up;
  - sum(tokenloom:generation_tokens_total) equals the completion tokens the responses reported
    (and each replica's share equals what was sent to it);
  - sum(tokenloom:num_requests_running) is back to 0;
  - every query of the Grafana dashboard (deploy/grafana/tokenloom.json) is valid PromQL
    (`promtool check rules` on them as recording rules), names only metrics /metrics exports,
    and answers with data from the live Prometheus.

`promtool check metrics` must be clean on each replica's /metrics, idle and after load (but for
the naming advice listed in ALLOWED_LINTS), and the vLLM-named gauges the inference gateway's
endpoint picker reads must carry the same values as tokenloom's own. A server whose model is
still loading (its model path is a FIFO nobody writes yet) answers /health and /v1/models 503.
"""

import json
import os
import re
import tempfile
import subprocess
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploylib as dl  # noqa: E402

tap = dl.Tap()


def query(prom_url, q):
    """The instant vector of `q` as {instance: value}, or None when the query fails."""
    status, body = dl.http_get(prom_url + "/api/v1/query?" + urllib.parse.urlencode({"query": q}))
    if status != 200:
        return None
    data = json.loads(body)
    if data.get("status") != "success":
        return None
    return {r["metric"].get("instance", ""): float(r["value"][1]) for r in data["data"]["result"]}


# promtool's naming lint that tokenloom breaks on purpose, as vLLM does: the "prefix:name"
# form (the names dashboards, the HPA rule and the inference gateway's picker query). Anything
# else promtool says is a failure (a "_total" on a gauge or histogram included).
ALLOWED_LINTS = ("metric names should not contain ':'",)


def promtool(replica):
    """(clean, output) of `promtool check metrics` on the replica's /metrics, plus the bucket
    bounds promtool does not look at: each histogram's finite `le` bounds strictly increase and
    are real bounds (not an integer type's maximum standing in for +Inf)."""
    status, body = dl.http_get(replica.url + "/metrics")
    if status != 200:
        return False, "GET /metrics: %d" % status
    p = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True)
    out = (p.stdout + p.stderr).decode(errors="replace")
    problems = []
    for line in out.splitlines():
        if any(line.endswith(a) for a in ALLOWED_LINTS):
            continue
        problems.append(line)
    last = {}
    for line in body.decode().splitlines():
        if "_bucket{" not in line or 'le="' not in line:
            continue
        name = line.split("{")[0]
        le = line.split('le="')[1].split('"')[0]
        if le == "+Inf":
            last.pop(name, None)
            continue
        v = float(le)
        if v >= 2.0 ** 53 or (name in last and v <= last[name]):
            problems.append("bad bucket bound: " + line)
        last[name] = v
    # Exit 3 means "lint problems" (all of them allowed if none is left above); anything else
    # non-zero is a parse error.
    if p.returncode not in (0, 3):
        problems.append("promtool exit %d: %s" % (p.returncode, out[-500:]))
    return not problems, "\n".join(problems)


def start_prometheus(tmp, replicas):
    port = dl.free_port()
    conf = os.path.join(tmp, "prometheus.yml")
    with open(conf, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                "scrape_configs:\n  - job_name: tokenloom\n    static_configs:\n"
                "      - targets: [%s]\n" % ", ".join("'%s'" % r.addr for r in replicas))
    log = open(os.path.join(tmp, "prometheus.log"), "wb")
    proc = subprocess.Popen(
        ["prometheus", "--config.file=" + conf, "--storage.tsdb.path=" + os.path.join(tmp, "tsdb"),
         "--web.listen-address=127.0.0.1:%d" % port, "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT)
    log.close()
    url = "http://127.0.0.1:%d" % port
    end = time.monotonic() + 30
    while time.monotonic() < end and proc.poll() is None:
        if dl.http_get(url + "/-/ready", timeout=1)[0] == 200:
            return proc, url
        time.sleep(0.1)
    return proc, None


def dashboard_queries():
    with open(os.path.join(dl.ROOT, "deploy", "grafana", "tokenloom.json")) as f:
        dash = json.load(f)
    return [(p["title"], t["expr"]) for p in dash["panels"] for t in p["targets"]]


def check_dashboard(tmp, prom_url, replica):
    queries = dashboard_queries()
    rules = os.path.join(tmp, "dashboard_rules.yml")
    with open(rules, "w") as f:
        f.write("groups:\n  - name: dashboard\n    rules:\n")
        for i, (_, expr) in enumerate(queries):
            f.write("      - record: dashboard:q%d\n        expr: %s\n" % (i, json.dumps(expr)))
    p = subprocess.run(["promtool", "check", "rules", rules], capture_output=True, text=True)
    tap.check(p.returncode == 0 and len(queries) >= 10,
              "Grafana dashboard: its %d queries are valid PromQL (promtool check rules)" %
              len(queries), p.stdout + p.stderr)
    exported = set()
    for line in dl.http_get(replica.url + "/metrics")[1].decode().splitlines():
        if line and not line.startswith("#"):
            exported.add(line.split("{")[0].split(" ")[0])
    used = {m for _, e in queries for m in re.findall(r"tokenloom:[a-z0-9_]+", e)}
    tap.check(used and used <= exported, "Grafana dashboard: every metric it uses is exported",
              sorted(used - exported))
    # rate() needs two samples of a series inside its window: on a loaded machine the scrapes
    # after the load may lag, so ask again (bounded) until every query has data.
    end = time.monotonic() + 30
    while True:
        empty = []
        for title, expr in queries:
            status, body = dl.http_get(prom_url + "/api/v1/query?" +
                                       urllib.parse.urlencode({"query": expr}))
            data = json.loads(body) if status == 200 else {}
            if data.get("status") != "success" or not data["data"]["result"]:
                empty.append("%s: %s -> %d %s" % (title, expr, status, body[:200]))
        if not empty or time.monotonic() > end:
            break
        time.sleep(1)
    tap.check(not empty, "Grafana dashboard: every query answers with data after the load",
              "\n".join(empty))


def check_vllm_names(replica):
    """The picker's gauges under vLLM's names equal tokenloom's (one scrape, so one snapshot)."""
    status, body = dl.http_get(replica.url + "/metrics")
    vals = {}
    for line in body.decode().splitlines():
        if not line.startswith("#") and " " in line:
            name, v = line.rsplit(" ", 1)
            vals[name] = float(v)
    # the served id (every series carries it): the model file's stem here
    mn = 'model_name="%s"' % os.path.splitext(os.path.basename(dl.MODEL))[0]
    want = {"vllm:num_requests_waiting{%s}" % mn: vals.get("tokenloom:num_requests_waiting{%s}" % mn),
            "vllm:num_requests_running{%s}" % mn: vals.get("tokenloom:num_requests_running{%s}" % mn),
            "vllm:kv_cache_usage_perc{%s}" % mn: vals.get("tokenloom:kv_cache_usage_perc{%s}" % mn),
            'vllm:cache_config_info{block_size="16",num_gpu_blocks="%d",%s}' % (
                int(vals.get("tokenloom:kv_cache_blocks{%s}" % mn, -1)), mn): 1.0}
    got = {k: vals.get(k) for k in want}
    return got == want and None not in want.values(), "want %s\ngot %s" % (want, got)


def check_loading():
    """A server stuck loading (its model is a FIFO with no writer) answers 503 on /health and
    /v1/models; once the FIFO closes empty the load fails and the server exits."""
    tmp = tempfile.mkdtemp(prefix="tl-loading-")
    fifo = os.path.join(tmp, "model.gguf")
    os.mkfifo(fifo)
    port = dl.free_port()
    proc = subprocess.Popen([dl.TL_BIN, "serve", "-m", fifo, "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = "http://127.0.0.1:%d" % port
    try:
        health = models = 0
        end = time.monotonic() + 10
        while time.monotonic() < end and health == 0:
            health, hbody = dl.http_get(url + "/health")
            time.sleep(0.05)
        models, mbody = dl.http_get(url + "/v1/models")
        tap.check(health == 503 and b"loading" in hbody and models == 503,
                  "while the model loads: /health 503 loading, /v1/models 503",
                  "health %d %s, models %d %s" % (health, hbody[:100], models, mbody[:200]))
    finally:
        with open(fifo, "wb"):
            pass  # unblocks the loader: an empty FIFO is no model
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        os.unlink(fifo)
        os.rmdir(tmp)


def main():
    for tool in ("prometheus", "promtool"):
        if subprocess.run(["sh", "-c", "command -v " + tool], capture_output=True).returncode:
            tap.check(False, "%s is installed (scripts/install-deps.sh)" % tool)
            tap.finish()
    c = dl.Cluster(2, gateway=False)
    prom = None
    try:
        why = c.start()
        if not tap.check(not why, "2 replicas start", why):
            tap.finish()
        for r in c.replicas:
            clean, out = promtool(r)
            tap.check(clean, "promtool check metrics is clean on idle %s" % r.name, out)
        same, detail = check_vllm_names(c.replicas[0])
        tap.check(same, "vLLM-named gauges (the endpoint picker's) equal tokenloom's", detail)
        prom, prom_url = start_prometheus(c.tmp, c.replicas)
        if not tap.check(prom_url is not None, "prometheus starts on loopback",
                         open(os.path.join(c.tmp, "prometheus.log")).read()[-2000:]):
            tap.finish()

        # Load: streams, n > 1, chat and plain completions, split over the two replicas.
        sent = {r.addr: 0 for r in c.replicas}
        bad = []
        for k in range(24):
            r = c.replicas[k % 2]
            if k % 3 == 0:
                path, p = "/v1/chat/completions", {
                    "messages": [{"role": "user", "content": "Tell a story %d" % k}],
                    "max_tokens": 20 + k, "temperature": 1, "seed": k}
            else:
                path, p = "/v1/completions", {
                    "prompt": "Once upon a time", "max_tokens": 10 + k, "n": 1 + k % 3,
                    "temperature": 1, "seed": k, "stream": k % 2 == 1,
                    "stream_options": {"include_usage": True} if k % 2 else None}
                if p["stream_options"] is None:
                    del p["stream_options"]
            res = dl.post(r.url, path, p)
            if not res.ok:
                bad.append(res)
            sent[r.addr] += res.tokens
        total = sum(sent.values())
        tap.check(not bad and total > 0, "24 requests (streams, n > 1, chat) all succeed",
                  "%s" % bad[:3])

        # Wait until Prometheus has scraped the final values (bounded).
        got = None
        end = time.monotonic() + 30
        while time.monotonic() < end:
            got = query(prom_url, "sum(tokenloom:generation_tokens_total)")
            if got and list(got.values())[0] == total:
                break
            time.sleep(0.5)
        tap.note("tokens generated: %d (per replica %s); Prometheus says %s" % (total, sent, got))
        up = query(prom_url, 'up{job="tokenloom"}')
        tap.check(up and sorted(up) == sorted(sent) and all(v == 1 for v in up.values()),
                  "Prometheus: both replicas are up targets", up)
        tap.check(got and list(got.values())[0] == total,
                  "Prometheus: sum(tokenloom:generation_tokens_total) equals the tokens generated",
                  "want %d, got %s" % (total, got))
        per = query(prom_url, "tokenloom:generation_tokens_total")
        tap.check(per == {a: float(v) for a, v in sent.items()},
                  "Prometheus: each replica's counter equals the tokens it generated",
                  "want %s, got %s" % (sent, per))
        running = query(prom_url, "sum(tokenloom:num_requests_running)")
        tap.check(running and list(running.values())[0] == 0,
                  "Prometheus: sum(tokenloom:num_requests_running) is 0 after the load", running)
        for r in c.replicas:
            clean, out = promtool(r)
            tap.check(clean, "promtool check metrics is clean on %s after load" % r.name, out)
        check_dashboard(c.tmp, prom_url, c.replicas[0])
        check_loading()
    finally:
        if prom and prom.poll() is None:
            prom.terminate()
            try:
                prom.wait(10)
            except subprocess.TimeoutExpired:
                prom.kill()
                prom.wait()
        c.close()
    tap.finish()


if __name__ == "__main__":
    main()
