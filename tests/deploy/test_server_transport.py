#!/usr/bin/env python3
"""The server's transport on its own, live on loopback, printed as TAP:

  1. request ids: X-Request-Id is echoed on every route (success, errors, streams), a valid
     client id is kept, an invalid one (too long, a space, non-ASCII) is replaced by 32 hex
     digits, generated ids are unique, and the OpenAI id is "cmpl-<id>" / "chatcmpl-<id>";
  2. --log-format json: every stderr line of the run parses as JSON (Python's json module is
     the oracle), and each access line's fields match the request that was made (method, raw
     path with quotes and invalid UTF-8, status, token counts from the reply's usage, the
     client's own address and port, durations that add up); a model path with a quote, a
     newline and an invalid byte gives a failure line that still parses;
  3. bodies over --max-body-bytes: several clients sending 10 MB at once (http.client sends the
     whole body before reading, as most clients do) each read a 413 rather than a reset, with
     the API's JSON error body (libevent answers these itself; src/server/http_errors.c
     rewrites its HTML); so does a chunked body over the limit, and a malformed request gets a
     JSON 400; the 413s are counted in the metrics; the server stays healthy;
  4. drain: after SIGTERM the server still accepts connections; /health and new requests get
     503 with Retry-After and Connection: close, while the stream already running finishes
     with every token; then the process exits 0;
  5. `tokenloom bench --concurrency 1,2,4 --json FILE --report FILE`: the JSON parses, its
     numbers agree with each other (throughput = tokens / duration, p50 <= p90 <= p99) and with
     the server's own generation_tokens_total; the SVG parses as XML (xml.etree) with exactly
     one point per level in every series, carrying the JSON's values; the HTML variant parses
     and fetches nothing.

Every wait is bounded; the servers are stopped at the end, even on failure.
"""

import html.parser
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploylib as dl  # noqa: E402

tap = dl.Tap()
HEX32 = re.compile(r"^[0-9a-f]{32}$")


class Server:
    """`tokenloom serve --port 0` with its stderr in a file; the port is read from its log."""

    def __init__(self, tmp, name, flags, model=dl.MODEL):
        self.log_path = os.path.join(tmp, name + ".log")
        self.log = open(self.log_path, "wb")
        env = dict(os.environ, TOKENLOOM_LOG="info")
        self.proc = subprocess.Popen([dl.TL_BIN, "serve", "-m", model, "--port", "0", "-t", "1"]
                                     + flags, stdout=subprocess.DEVNULL, stderr=self.log, env=env)
        self.port = None

    def text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", errors="replace")

    def wait_ready(self, timeout=30):
        end = time.monotonic() + timeout
        while time.monotonic() < end and self.proc.poll() is None:
            m = re.search(r"listening on http://[^:]+:(\d+)", self.text())
            if m:
                self.port = int(m.group(1))
                if dl.http_get(self.url() + "/health", timeout=2)[0] == 200:
                    return True
            time.sleep(0.05)
        return False

    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def request(port, method, path, body=None, headers=None, timeout=60):
    """(status, headers dict (lower-case names), body bytes, the client's own (addr, port))."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        hdrs = dict(headers or {})
        data = json.dumps(body).encode() if body is not None else None
        if data is not None:
            hdrs.setdefault("Content-Type", "application/json")
            hdrs["Content-Length"] = str(len(data))
        for k, v in hdrs.items():
            conn.putheader(k, v)
        conn.endheaders(data)
        me = conn.sock.getsockname()
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read(), me
    finally:
        conn.close()


def raw_request(port, request_bytes, timeout=10):
    """Sends bytes as they are (paths no HTTP library would send); (status, headers, me)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        me = s.getsockname()
        s.sendall(request_bytes)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    status = int(head[0].split()[1])
    hdrs = {ln.split(":", 1)[0].lower(): ln.split(":", 1)[1].strip() for ln in head[1:] if ":" in ln}
    return status, hdrs, me


def sse_events(body):
    return [json.loads(ln[6:]) for ln in body.decode().split("\n")
            if ln.startswith("data: ") and ln != "data: [DONE]"]


# ---- 1 + 2: request ids and the JSON access log -------------------------------------------------

def test_ids_and_log(tmp):
    s = Server(tmp, "jsonlog", ["--log-format", "json"])
    try:
        if not tap.check(s.wait_ready(), "server with --log-format json starts", s.text()):
            return
        made = []  # (request id, what the access line must say)

        # A client id with a quote (JSON-escaped in the log and in the reply) is kept.
        cid = 'client-"42"-' + "x" * 100
        st, h, body, me = request(s.port, "POST", "/v1/completions",
                                  {"prompt": "Once", "max_tokens": 7, "ignore_eos": True},
                                  {"X-Request-Id": cid})
        j = json.loads(body)
        tap.check(st == 200 and h.get("x-request-id") == cid and j["id"] == "cmpl-" + cid,
                  "a valid client X-Request-Id is echoed and is the completion id's suffix",
                  "%s %s %s" % (st, h.get("x-request-id"), j.get("id")))
        made.append((cid, dict(method="POST", path="/v1/completions", status=200,
                               prompt_tokens=j["usage"]["prompt_tokens"],
                               completion_tokens=7, client=me, gen=True)))

        # A stream without an id: a generated one, in the header and in every chunk's id.
        st, h, body, me = request(s.port, "POST", "/v1/chat/completions",
                                  {"messages": [{"role": "user", "content": "hi"}],
                                   "max_tokens": 6, "ignore_eos": True, "stream": True,
                                   "stream_options": {"include_usage": True}})
        rid = h.get("x-request-id", "")
        ev = sse_events(body)
        usage = [e["usage"] for e in ev if e.get("usage")]
        tap.check(st == 200 and HEX32.match(rid) and ev and
                  all(e["id"] == "chatcmpl-" + rid for e in ev),
                  "a stream gets a generated 32-hex id, the suffix of every chunk's id",
                  "%s %r %s" % (st, rid, [e.get("id") for e in ev][:3]))
        made.append((rid, dict(method="POST", path="/v1/chat/completions", status=200,
                               prompt_tokens=usage[-1]["prompt_tokens"] if usage else -1,
                               completion_tokens=6, client=me, gen=True)))

        # Invalid client ids are replaced.
        bad = {"too long": "a" * 129, "a space": "a b", "non-ASCII": "caf\u00e9".encode().decode("latin-1")}
        for what, value in bad.items():
            st, h, body, me = request(s.port, "GET", "/health", headers={"X-Request-Id": value})
            got = h.get("x-request-id", "")
            tap.check(st == 200 and HEX32.match(got), "a client id with %s is replaced" % what, got)
            made.append((got, dict(method="GET", path="/health", status=200, client=me)))

        # Errors carry the id too: unknown route, wrong method, bad JSON, unknown model.
        errs = [("GET", "/nope", None, 404), ("GET", "/v1/completions", None, 405),
                ("POST", "/v1/completions", {"prompt": "x", "model": "no-such"}, 404),
                ("POST", "/v1/completions", {"prompt": "x", "max_tokens": -3}, 400)]
        ok = True
        for method, path, payload, want in errs:
            st, h, body, me = request(s.port, method, path, payload)
            rid = h.get("x-request-id", "")
            ok = ok and st == want and HEX32.match(rid) and "error" in json.loads(body)
            made.append((rid, dict(method=method, path=path, status=st, client=me)))
        tap.check(ok, "error replies (404, 405, 404 model, 400) carry a generated X-Request-Id")

        # A raw target with a quote and bytes that are not UTF-8.
        st, h, me = raw_request(s.port, b'GET /odd"path\xff\xfe?q=1 HTTP/1.1\r\nHost: x\r\n'
                                        b"Connection: close\r\n\r\n")
        rid = h.get("x-request-id", "")
        tap.check(st == 404 and HEX32.match(rid), "a path with a quote and invalid UTF-8 gets 404 "
                  "with an id", "%s %r" % (st, rid))
        made.append((rid, dict(method="GET", path='/odd"path\ufffd\ufffd?q=1', status=404,
                               client=me)))

        # Uniqueness over many requests (and across the ones above).
        ids = [request(s.port, "GET", "/health")[1].get("x-request-id") for _ in range(200)]
        ids += [m[0] for m in made if HEX32.match(m[0])]
        tap.check(len(set(ids)) == len(ids), "generated ids are unique (%d requests)" % len(ids))
    finally:
        s.stop()

    # Every line of the run parses; the access lines match what was made.
    lines = s.text().splitlines()
    objs, unparsed = [], []
    for ln in lines:
        try:
            objs.append(json.loads(ln))
        except ValueError:
            unparsed.append(ln)
    tap.check(lines and not unparsed and all(
        {"time", "level", "msg"} <= set(o) and
        re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", o["time"]) for o in objs),
        "every stderr line (%d) is one JSON object with time (ISO-8601 UTC, ms), level, msg"
        % len(lines), "\n".join(unparsed[:5]))
    by_id = {}
    for o in objs:
        if "request_id" in o:
            by_id.setdefault(o["request_id"], []).append(o)
    wrong = []
    for rid, want in made:
        got = by_id.get(rid, [])
        if len(got) != 1:
            wrong.append("%r: %d access lines" % (rid, len(got)))
            continue
        o = got[0]
        for k in ("method", "path", "status"):
            if o.get(k) != want[k]:
                wrong.append("%r: %s=%r, want %r" % (rid, k, o.get(k), want[k]))
        if o.get("client") != "%s:%d" % want["client"]:
            wrong.append("%r: client %r, want %s:%d" % ((rid, o.get("client")) + want["client"]))
        if want.get("gen"):
            for k in ("prompt_tokens", "completion_tokens"):
                if o.get(k) != want[k]:
                    wrong.append("%r: %s=%r, want %r" % (rid, k, o.get(k), want[k]))
            t = [o.get(k) for k in ("queue_ms", "ttft_ms", "total_ms")]
            if not all(isinstance(x, (int, float)) for x in t) or not 0 <= t[0] <= t[2] or \
                    not 0 < t[1] <= t[2]:
                wrong.append("%r: durations %r (queue <= total, 0 < ttft <= total)" % (rid, t))
        elif o.get("ttft_ms") is not None or o.get("queue_ms") is not None:
            wrong.append("%r: ttft/queue should be null for %s" % (rid, o.get("path")))
    tap.check(not wrong, "each request has one access line whose fields match the request "
              "(%d requests)" % len(made), "\n".join(wrong[:20]))

    # A failure message with a quote, a newline and an invalid byte stays one JSON line.
    odd = os.path.join(tmp, 'bad"model\nname\xff.gguf'.encode("latin-1").decode(
        "utf-8", errors="surrogateescape"))
    with open(odd, "wb") as f:
        f.write(b"GGUF not really a model")
    s2 = Server(tmp, "badmodel", ["--log-format", "json"], model=odd)
    try:
        rc = s2.proc.wait(30)
    except subprocess.TimeoutExpired:
        rc = None
    s2.stop()
    lines = s2.text().splitlines()
    try:
        objs = [json.loads(ln) for ln in lines]
    except ValueError:
        objs = []
    err = [o for o in objs if o.get("level") == "error" and 'bad"model\nname\ufffd' in o["msg"]]
    tap.check(rc == 1 and objs and err, "a load failure naming a path with a quote, newline and "
              "invalid byte is a valid JSON line (exit 1)", "rc=%s\n%s" % (rc, "\n".join(lines)))


# ---- 3: oversized bodies ------------------------------------------------------------------------

def send_big(port, nbytes, out, i):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", "/v1/completions", body=b"x" * nbytes,
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        out[i] = (resp.status, resp.read(), "")
    except (OSError, http.client.HTTPException) as e:
        out[i] = (0, b"", "%s: %s" % (type(e).__name__, e))
    finally:
        conn.close()


def test_big_bodies(tmp):
    s = Server(tmp, "bigbody", ["--max-body-bytes", str(1 << 20)])
    try:
        if not tap.check(s.wait_ready(), "server with --max-body-bytes 1 MiB starts", s.text()):
            return
        n = 6
        out = [None] * n
        threads = [threading.Thread(target=send_big, args=(s.port, 10 << 20, out, i))
                   for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        def api_error(data):
            try:
                return json.loads(data)["error"]
            except (ValueError, KeyError, TypeError):
                return {}
        tap.check(all(o and o[0] == 413 for o in out),
                  "%d clients sending 10 MB at once each read a 413 (no reset)" % n,
                  "\n".join(repr(o and (o[0], o[2])) for o in out))
        tap.check(all(o and api_error(o[1]).get("code") == "request_too_large" and
                      api_error(o[1]).get("type") == "invalid_request_error" for o in out),
                  "each of those 413s has the API's JSON error body",
                  "\n".join(repr(o and o[1][:200]) for o in out))

        # Chunked: evhttp lets it through to the handler's own check -> the API's JSON error.
        with socket.create_connection(("127.0.0.1", s.port), timeout=30) as c:
            c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                      b"\r\nTransfer-Encoding: chunked\r\n\r\n")
            piece = b"x" * 65536
            try:
                for _ in range(20):  # 1.25 MiB in 64 KiB chunks
                    c.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
                c.sendall(b"0\r\n\r\n")
            except OSError:
                pass
            data = b""
            try:
                while True:
                    chunk = c.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            except OSError:
                pass
        head, _, body = data.partition(b"\r\n\r\n")
        tap.check(head.startswith(b"HTTP/1.1 413") and
                  api_error(body).get("code") == "request_too_large" and
                  HEX32.search(head.decode("latin-1").lower().split("x-request-id: ")[-1][:32]),
                  "a chunked body over the limit gets the JSON 413 with an X-Request-Id",
                  data[:400])

        # A malformed header line: libevent's 400, in the API's format too.
        st, h, _ = raw_request(s.port, b"GET /health HTTP/1.1\r\nthis is no header\r\n\r\n")
        tap.check(st == 400, "a malformed request gets 400", st)
        with socket.create_connection(("127.0.0.1", s.port), timeout=10) as c:
            c.sendall(b"GET /health HTTP/1.1\r\nthis is no header\r\n\r\n")
            data = b""
            while True:
                chunk = c.recv(65536)
                if not chunk:
                    break
                data += chunk
        tap.check(api_error(data.partition(b"\r\n\r\n")[2]).get("code") == "bad_request",
                  "... with the API's JSON error body", data[:300])
        m = dl.http_get(s.url() + "/metrics")[1].decode()
        got413 = re.search(r'http_requests_total\{[^}]*code="413"[^}]*\} (\d+)', m)
        tap.check(got413 and int(got413.group(1)) == n + 1,
                  "those 413s are counted in http_requests_total{code=\"413\"}",
                  got413 and got413.group(0))

        st, _, body, _ = request(s.port, "POST", "/v1/completions",
                                 {"prompt": "Once", "max_tokens": 4})
        tap.check(dl.http_get(s.url() + "/health")[0] == 200 and st == 200,
                  "after the big bodies the server is healthy and answers", body[:200])
    finally:
        s.stop()
    tap.check(s.proc.returncode == 0, "that server exits 0 on SIGTERM", s.text()[-2000:])


# ---- 4: drain -----------------------------------------------------------------------------------

def test_drain(tmp):
    s = Server(tmp, "drain", ["--shutdown-timeout", "120"])
    if not tap.check(s.wait_ready(), "server for the drain test starts", s.text()):
        s.stop()
        return
    res = {}
    first = threading.Event()

    def stream():
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=150)
        try:
            conn.request("POST", "/v1/completions", body=json.dumps({
                "prompt": "Once upon a time", "max_tokens": 1500, "ignore_eos": True,
                "stream": True, "n": 2, "stream_options": {"include_usage": True}}),
                headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = b""
            while True:
                chunk = resp.read1(65536)
                if not chunk:
                    break
                data += chunk
                first.set()
            res["data"] = data
        except (OSError, http.client.HTTPException) as e:
            res["error"] = repr(e)
        finally:
            first.set()
            conn.close()

    t = threading.Thread(target=stream)
    t.start()
    first.wait(30)
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    try:
        hst, hh, _, _ = request(s.port, "GET", "/health", timeout=10)
        st, h, body, _ = request(s.port, "POST", "/v1/completions",
                                 {"prompt": "Once", "max_tokens": 4}, timeout=10)
        why = ""
    except OSError as e:
        hst = st = 0
        h, hh, body, why = {}, {}, b"", "%s: %s" % (type(e).__name__, e)
    running = t.is_alive()
    try:
        err = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        err = {}
    tap.check(running, "the stream is still running when the new requests are made")
    tap.check(hst == 503 and hh.get("connection", "").lower() == "close",
              "while draining, /health answers 503 with Connection: close (not refused)",
              "%s %s %s" % (hst, hh, why))
    tap.check(st == 503 and h.get("retry-after") == "1" and
              h.get("connection", "").lower() == "close" and err.get("type") == "server_error"
              and HEX32.match(h.get("x-request-id", "")),
              "while draining, a new request gets a JSON 503 with Retry-After and "
              "Connection: close", "%s %s %s %s" % (st, h, body[:200], why))
    t.join(150)
    try:
        rc = s.proc.wait(60)
    except subprocess.TimeoutExpired:
        rc = None
    s.stop()
    data = res.get("data", b"")
    ev = sse_events(data) if data else []
    usage = [e["usage"] for e in ev if e.get("usage")]
    finished = sorted(c["index"] for e in ev for c in e["choices"] if c.get("finish_reason"))
    tap.check(data.rstrip().endswith(b"data: [DONE]") and finished == [0, 1] and usage and
              usage[-1]["completion_tokens"] == 3000,
              "the in-flight stream finishes with all 2 x 1500 tokens and [DONE]",
              "%s finished=%s usage=%s" % (res.get("error", ""), finished, usage[-1:]))
    tap.check(rc == 0, "the draining server exits 0 after the stream ends", s.text()[-2000:])


# ---- 5: bench --json / --report -----------------------------------------------------------------

class HtmlScan(html.parser.HTMLParser):
    """Counts tags and collects every URL-bearing attribute (an offline page has none)."""

    def __init__(self):
        super().__init__()
        self.tags, self.urls = {}, []

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        self.urls += [v for k, v in attrs if k in ("src", "href", "xlink:href") and v]


def close(a, b, rel=2e-3, abs_=2e-3):
    return abs(a - b) <= max(abs_, rel * max(abs(a), abs(b)))


def test_bench(tmp):
    s = Server(tmp, "bench", ["--max-num-seqs", "8"])
    try:
        if not tap.check(s.wait_ready(), "server for the bench sweep starts", s.text()):
            return
        levels, n_req, out_len = [1, 2, 4], 6, 16
        jpath, spath, hpath = (os.path.join(tmp, n) for n in ("b.json", "b.svg", "b.html"))
        gen0 = dl.metric(s.url(), "tokenloom:generation_tokens_total")
        run = subprocess.run([dl.TL_BIN, "bench", "--url", s.url(), "--concurrency",
                              ",".join(map(str, levels)), "--requests", str(n_req),
                              "--prompt-len", "8-24", "--output-len", str(out_len),
                              "--json", jpath, "--report", spath],
                             capture_output=True, text=True, timeout=300)
        gen1 = dl.metric(s.url(), "tokenloom:generation_tokens_total")
        if not tap.check(run.returncode == 0, "bench sweeps 1,2,4 and exits 0",
                         run.stdout[-1500:] + run.stderr[-1500:]):
            return
        tap.check(run.stdout.count("Serving Benchmark Result") == 3,
                  "stdout has one result table per level", run.stdout[-800:])
        with open(jpath) as f:
            doc = json.load(f)
        lv = doc.get("levels", [])
        bad = []
        if [x.get("concurrency") for x in lv] != levels:
            bad.append("levels %s" % [x.get("concurrency") for x in lv])
        for x in lv:
            c = x.get("concurrency")
            if x["completed"] != n_req or x["failed"] != 0 or x["output_tokens"] != n_req * out_len:
                bad.append("c=%s counts %s/%s/%s" % (c, x["completed"], x["failed"],
                                                       x["output_tokens"]))
            d = x["duration_s"]
            if not (d > 0 and close(x["output_throughput"], x["output_tokens"] / d) and
                    close(x["request_throughput"], x["completed"] / d) and
                    close(x["total_token_throughput"],
                          (x["output_tokens"] + x["prompt_tokens"]) / d)):
                bad.append("c=%s throughputs disagree with tokens / duration" % c)
            for st in ("ttft", "itl", "e2el", "tpot"):
                p = [x["p50_%s_ms" % st], x["p90_%s_ms" % st], x["p99_%s_ms" % st]]
                if not 0 <= p[0] <= p[1] <= p[2]:
                    bad.append("c=%s %s percentiles %s" % (c, st, p))
            if not x["p50_ttft_ms"] <= x["p50_e2el_ms"]:
                bad.append("c=%s ttft above e2e" % c)
        if doc.get("requests_per_level") != n_req or doc.get("endpoint") != "/v1/completions":
            bad.append("header %s" % {k: v for k, v in doc.items() if k != "levels"})
        tap.check(not bad, "the JSON parses and its numbers agree (throughput = tokens / "
                  "duration, p50 <= p90 <= p99)", "\n".join(bad))
        tap.check(gen1 - gen0 == sum(x["output_tokens"] for x in lv) == len(levels) * n_req * out_len,
                  "the server's generation_tokens_total grew by the tokens bench reports",
                  "%s -> %s vs %s" % (gen0, gen1, [x["output_tokens"] for x in lv]))

        # The SVG: XML, one point per level in every series, values as in the JSON.
        try:
            root = ET.parse(spath).getroot()
        except ET.ParseError as e:
            tap.check(False, "the SVG report parses as XML", str(e))
            return
        ns = "{http://www.w3.org/2000/svg}"
        pts = [c for c in root.iter(ns + "circle") if c.get("class") == "point"]
        want = {"output_throughput": lambda x: x["output_throughput"]}
        for st in ("ttft", "itl", "e2el"):
            for p in ("p50", "p90", "p99"):
                want["%s_%s" % (st, p)] = (lambda k: lambda x: x[k])("%s_%s_ms" % (p, st))
        bad = []
        for series, get in want.items():
            mine = [c for c in pts if c.get("data-series") == series]
            if [int(c.get("data-concurrency")) for c in mine] != levels:
                bad.append("%s: points at %s" % (series, [c.get("data-concurrency") for c in mine]))
                continue
            for c, x in zip(mine, lv):
                if not close(float(c.get("data-value")), get(x), rel=1e-3, abs_=1.5e-3):
                    bad.append("%s c=%s: %s vs JSON %s" % (series, c.get("data-concurrency"),
                                                           c.get("data-value"), get(x)))
        refs = [e.tag for e in root.iter() if e.tag in (ns + "script", ns + "image", ns + "use")]
        tap.check(root.tag == ns + "svg" and not bad and len(pts) == len(want) * len(levels)
                  and not refs, "the SVG report parses as XML and has one point per level in "
                  "each of its %d series, with the JSON's values" % len(want),
                  "\n".join(bad) + " refs=%s n=%d" % (refs, len(pts)))

        run = subprocess.run([dl.TL_BIN, "bench", "--url", s.url(), "--concurrency", "1,3",
                              "--requests", "3", "--output-len", "8", "--report", hpath, "--json"],
                             capture_output=True, text=True, timeout=300)
        lines = [json.loads(ln) for ln in run.stdout.splitlines() if ln.startswith("{")]
        scan = HtmlScan()
        with open(hpath) as f:
            text = f.read()
        scan.feed(text)
        inner = ET.fromstring(text[text.index("<svg"):text.index("</svg>") + 6])
        npts = sum(1 for c in inner.iter("{http://www.w3.org/2000/svg}circle")
                   if c.get("class") == "point")
        tap.check(run.returncode == 0 and [x["concurrency"] for x in lines] == [1, 3] and
                  scan.tags.get("svg") == 1 and scan.tags.get("tr") == 3 and
                  not scan.tags.get("script") and not scan.urls and npts == 2 * len(want),
                  "--report x.html: an HTML page with the SVG and a table, nothing fetched; "
                  "--json alone prints one object per level",
                  "rc=%s tags=%s urls=%s points=%d\n%s" % (run.returncode, scan.tags, scan.urls,
                                                         npts, run.stderr[-500:]))
    finally:
        s.stop()


def test_bad_flags(tmp):
    """Bad values fail at once with exit 2 and one line naming the flag (nothing is run)."""
    cases = [(["serve", "--log-format", "yaml"], "--log-format"),
             (["bench", "--concurrency", "1,x"], "--concurrency"),
             (["bench", "--concurrency", "1,,2"], "--concurrency"),
             (["bench", "--concurrency", ",".join(["1"] * 65)], "--concurrency"),
             (["bench", "--json", os.path.join(tmp, "no", "such", "dir.json")], "--json"),
             (["bench", "--report", os.path.join(tmp, "no", "such", "dir.svg")], "--report")]
    bad = []
    for args, flag in cases:
        r = subprocess.run([dl.TL_BIN] + args + ["--url", "http://127.0.0.1:9"]
                           if args[0] == "bench" else [dl.TL_BIN] + args,
                           capture_output=True, text=True, timeout=30)
        err = r.stderr.strip().splitlines()
        if r.returncode != 2 or len(err) != 1 or flag not in err[0]:
            bad.append("%s: rc=%s %s" % (" ".join(args)[:60], r.returncode, err[:3]))
    tap.check(not bad, "bad --log-format / --concurrency / --json / --report values: exit 2, "
              "one line naming the flag", "\n".join(bad))


def main():
    if not os.access(dl.TL_BIN, os.X_OK):
        tap.check(False, "tokenloom binary at %s" % dl.TL_BIN)
        tap.finish()
    tmp = tempfile.mkdtemp(prefix="tl-transport-")
    try:
        test_bad_flags(tmp)
        test_ids_and_log(tmp)
        test_big_bodies(tmp)
        test_drain(tmp)
        test_bench(tmp)
    finally:
        subprocess.run(["rm", "-rf", tmp], check=False)
    tap.finish()


if __name__ == "__main__":
    main()
