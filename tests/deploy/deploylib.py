"""Helpers for the deployment tests (tests/deploy/test_*.py): TAP output, free loopback ports,
`tokenloom serve` replicas, an nginx gateway rendered from deploy/nginx, and small HTTP
clients that record what happened to each request.

Everything runs on 127.0.0.1 in a temporary folder; every process started here is stopped by
Cluster.close() (called from the tests' `finally`), so a failing test leaves nothing behind.
Environment: TL_BIN (tokenloom binary), TL_SHARED (shared data folder), as tests/run.sh sets.
"""

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
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _abs(path):
    return path if os.path.isabs(path) else os.path.join(ROOT, path)


TL_BIN = _abs(os.environ.get("TL_BIN", "build/tokenloom"))
TL_SHARED = _abs(os.environ.get("TL_SHARED", os.path.join(ROOT, "..", "shared")))
MODEL = os.path.join(TL_SHARED, "models", "stories260K.gguf")


class Tap:
    """Prints TAP lines; the plan goes last (tests/run.sh accepts it there)."""

    def __init__(self):
        self.n = 0
        self.failed = 0

    def check(self, cond, name, detail=""):
        self.n += 1
        if cond:
            print("ok %d - %s" % (self.n, name), flush=True)
        else:
            self.failed += 1
            print("not ok %d - %s" % (self.n, name), flush=True)
            for line in str(detail).splitlines()[:40]:
                print("# " + line, flush=True)
        return cond

    def note(self, text):
        for line in str(text).splitlines():
            print("# " + line, flush=True)

    def finish(self):
        print("1..%d" % self.n, flush=True)
        sys.exit(1 if self.failed else 0)


def free_port():
    """A loopback port that was free a moment ago (the kernel's choice)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=5):
    """(status, body bytes); status 0 when the connection fails."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (OSError, http.client.HTTPException):
        return 0, b""


def metric(base_url, name):
    """The value of the sample of /metrics named `name` whose only label is model_name (every
    tokenloom series carries it), or None."""
    status, body = http_get(base_url + "/metrics")
    if status != 200:
        return None
    for line in body.decode().splitlines():
        parts = line.split()
        if len(parts) == 2 and re.sub(r'\{model_name="(?:[^"\\]|\\.)*"\}$', "", parts[0]) == name:
            return float(parts[1])
    return None


class Replica:
    """One `tokenloom serve` on a fixed port (so it can restart where the gateway expects it)."""

    def __init__(self, tmp, name, port, flags):
        self.tmp, self.name, self.port, self.flags = tmp, name, port, flags
        self.url = "http://127.0.0.1:%d" % port
        self.addr = "127.0.0.1:%d" % port
        self.proc = None
        self.starts = 0

    def start(self):
        self.starts += 1
        log = open(os.path.join(self.tmp, "%s.%d.log" % (self.name, self.starts)), "wb")
        cmd = [TL_BIN, "serve", "-m", MODEL, "--port", str(self.port), "-t", "1"] + self.flags
        env = dict(os.environ, TOKENLOOM_LOG="warn")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()

    def log_text(self):
        path = os.path.join(self.tmp, "%s.%d.log" % (self.name, self.starts))
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")

    def wait_healthy(self, timeout=30):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                return False
            if http_get(self.url + "/health", timeout=2)[0] == 200:
                return True
            time.sleep(0.05)
        return False

    def signal(self, sig):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait_exit(self, timeout=60):
        """The exit status, or None if it is still running after `timeout` seconds."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            if self.wait_exit(5) is None:
                self.proc.kill()
                self.proc.wait()


class Gateway:
    """nginx rendered from deploy/nginx/nginx.conf.in, in the foreground, under tmp/nginx."""

    def __init__(self, tmp, replicas, extra=()):
        self.prefix = os.path.join(tmp, "nginx")
        os.makedirs(self.prefix, exist_ok=True)
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        conf = subprocess.run(
            ["sh", os.path.join(ROOT, "deploy", "nginx", "render.sh"), "--prefix", self.prefix,
             "--listen", "127.0.0.1:%d" % self.port, "--workers", "1"]
            + [a for r in replicas for a in ("--replica", r.addr)] + list(extra),
            check=True, capture_output=True, text=True).stdout
        self.conf = os.path.join(self.prefix, "nginx.conf")
        with open(self.conf, "w") as f:
            f.write(conf)
        # As root, nginx's workers run as nobody: they must be able to enter the prefix.
        os.chmod(tmp, 0o755)
        for d, _, _ in os.walk(self.prefix):
            os.chmod(d, 0o777)
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            ["nginx", "-p", self.prefix, "-c", self.conf, "-e", "stderr"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.prefix, "stderr"), "wb"))
        end = time.monotonic() + 10
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                return False
            if http_get(self.url + "/gateway/health", timeout=1)[0] == 200:
                return True
            time.sleep(0.05)
        return False

    def errors(self):
        out = ""
        for name in ("stderr", "error.log"):
            p = os.path.join(self.prefix, name)
            if os.path.exists(p):
                with open(p, "rb") as f:
                    out += f.read().decode(errors="replace")
        return out

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # graceful: finish what runs
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Result:
    """What happened to one request: when it started and ended, who answered, how it ended."""

    __slots__ = ("t_start", "t_headers", "t_end", "status", "upstream", "ok", "why", "body",
                 "tokens", "stream")

    def __init__(self):
        self.t_start = time.monotonic()
        self.t_headers = self.t_end = None
        self.status = 0
        self.upstream = None
        self.ok = False
        self.why = ""
        self.body = None
        self.tokens = 0
        self.stream = False

    def __repr__(self):
        return "<%s %s up=%s %.3f..%s %s>" % (
            "ok" if self.ok else "FAIL", self.status, self.upstream, self.t_start,
            "%.3f" % self.t_end if self.t_end else "-", self.why)


def post(base_url, path, payload, headers=None, timeout=60, res=None):
    """POSTs JSON and checks the answer in full. For a stream: every event parses, the last is
    [DONE], each choice has a finish_reason, and the usage chunk's completion_tokens equals the
    number of token chunks. Fills and returns `res` (a new Result if None); never raises."""
    res = res or Result()
    res.stream = bool(payload.get("stream"))
    host, port = base_url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        body = json.dumps(payload).encode()
        hdrs = {"Content-Type": "application/json"}
        hdrs.update(headers or {})
        conn.request("POST", path, body=body, headers=hdrs)
        resp = conn.getresponse()
        res.t_headers = time.monotonic()
        res.status = resp.status
        up = resp.getheader("X-Tokenloom-Upstream")
        res.upstream = up.split(",")[-1].strip() if up else None
        data = resp.read()
        res.t_end = time.monotonic()
        if resp.status != 200:
            res.why = "status %d: %s" % (resp.status, data[:200])
            try:
                res.body = json.loads(data)
            except ValueError:
                pass
            return res
        if not res.stream:
            res.body = json.loads(data)
            res.tokens = res.body["usage"]["completion_tokens"]
            res.ok = all(c.get("finish_reason") for c in res.body["choices"])
            if not res.ok:
                res.why = "choice without finish_reason"
            return res
        events = [ln[6:] for ln in data.decode().split("\n") if ln.startswith("data: ")]
        if not events or events[-1] != "[DONE]":
            res.why = "stream does not end with [DONE]"
            return res
        chunks = [json.loads(e) for e in events[:-1]]
        finished = {c["index"] for ch in chunks for c in ch["choices"] if c.get("finish_reason")}
        n_token_chunks = sum(1 for ch in chunks for c in ch["choices"]
                             if c.get("text") or (c.get("delta") or {}).get("content"))
        usage = [ch["usage"] for ch in chunks if ch.get("usage")]
        res.tokens = usage[-1]["completion_tokens"] if usage else n_token_chunks
        res.body = chunks
        if len(finished) != payload.get("n", 1):
            res.why = "choices finished: %s" % sorted(finished)
        elif usage and n_token_chunks > res.tokens:
            res.why = "%d token chunks, usage says %d" % (n_token_chunks, res.tokens)
        else:
            res.ok = True
        return res
    except (OSError, http.client.HTTPException, ValueError, KeyError) as e:
        res.why = "%s: %s" % (type(e).__name__, e)
        return res
    finally:
        if res.t_end is None:
            res.t_end = time.monotonic()
        conn.close()


class Load:
    """`workers` threads sending requests through `base_url` one after another until stop(),
    or until `max_requests` in all: a bounded loop that always ends."""

    def __init__(self, base_url, workers, make_payload, max_requests=100000, headers=None):
        self.base_url, self.make_payload = base_url, make_payload
        self.max_requests, self.headers = max_requests, headers
        self.results = []
        self.inflight = set()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.count = 0
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True)
                        for i in range(workers)]

    def _run(self, wid):
        while not self.stopping.is_set():
            with self.lock:
                if self.count >= self.max_requests:
                    return
                k = self.count
                self.count += 1
            path, payload = self.make_payload(k)
            r = Result()
            with self.lock:
                self.inflight.add(r)
            post(self.base_url, path, payload, self.headers, res=r)
            with self.lock:
                self.inflight.discard(r)
                self.results.append(r)

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def stop(self, timeout=90):
        self.stopping.set()
        return self.join(timeout)

    def join(self, timeout=90):
        end = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, end - time.monotonic()))
        return not any(t.is_alive() for t in self.threads)

    def snapshot(self):
        """The finished requests."""
        with self.lock:
            return list(self.results)

    def running(self):
        """The requests in flight (their upstream is set once the headers came)."""
        with self.lock:
            return list(self.inflight)


class Cluster:
    """N replicas (with the given serve flags) and optionally a gateway, in one temp folder."""

    def __init__(self, n, flags=(), gateway=True, gateway_extra=()):
        self.tmp = tempfile.mkdtemp(prefix="tl-deploy-")
        self.replicas = [Replica(self.tmp, "r%d" % i, free_port(), list(flags)) for i in range(n)]
        self.gateway = Gateway(self.tmp, self.replicas, gateway_extra) if gateway else None

    def start(self):
        for r in self.replicas:
            r.start()
        bad = [r.name for r in self.replicas if not r.wait_healthy()]
        if bad:
            return "replicas not healthy: %s\n%s" % (bad, self.replicas[0].log_text())
        if self.gateway and not self.gateway.start():
            return "nginx did not start:\n" + self.gateway.errors()
        return ""

    def by_addr(self, addr):
        return next((r for r in self.replicas if r.addr == addr), None)

    def close(self):
        if self.gateway:
            self.gateway.stop()
        for r in self.replicas:
            r.stop()
        subprocess.run(["rm", "-rf", self.tmp], check=False)
