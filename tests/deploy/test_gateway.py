#!/usr/bin/env python3
"""The nginx gateway (deploy/nginx) in front of three `tokenloom serve` replicas, live on
loopback, printed as TAP. Through the gateway:

  1. streaming load reaches every replica (the gateway's X-Tokenloom-Upstream header and each
     replica's own generation_tokens_total counter agree on who did the work);
  2. affinity: turn 2 of a conversation with the same X-Session-ID lands on the replica of turn
     1 and finds its whole turn-1 prompt in the prefix cache (cached_tokens); the same turn sent
     to another replica finds nothing (the control that shows the check can fail);
  3. kill -9 of one replica under streaming load: only streams running on it fail, cleanly (an
     error status or a cut stream, never a hang), and every request started after the kill
     succeeds;
  4. a rolling restart (SIGTERM each replica, wait for its exit, restart it on the same port,
     wait until healthy) under steady load of streams and plain completions: zero failures;
  5. a 64 MiB body gets the gateway's 413, read in full by the client (no broken pipe).

Every loop is bounded; all processes are stopped at the end, even on failure.
"""

import collections
import http.client
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploylib as dl  # noqa: E402

tap = dl.Tap()


def stream_payload(max_tokens):
    def make(k):
        return "/v1/completions", {
            "prompt": "Once upon a time", "max_tokens": max_tokens, "stream": True,
            "ignore_eos": True, "temperature": 1, "seed": k,
            "stream_options": {"include_usage": True}}
    return make


def share(results):
    return dict(collections.Counter(r.upstream for r in results))


def test_spread(c):
    tokens0 = {r.addr: dl.metric(r.url, "tokenloom:generation_tokens_total") for r in c.replicas}
    load = dl.Load(c.gateway.url, 6, stream_payload(48), max_requests=36).start()
    done = load.join(120)
    res = load.snapshot()
    bad = [r for r in res if not r.ok]
    tap.check(done and len(res) == 36 and not bad, "36 streams through the gateway all succeed",
              "done=%s n=%d bad=%s" % (done, len(res), bad[:5]))
    per = share(res)
    tap.note("per-replica share of 36 streams: %s" % per)
    tap.check(set(per) == {r.addr for r in c.replicas},
              "streaming load reaches all 3 replicas (X-Tokenloom-Upstream)", per)
    # Independent oracle: each replica's own counter grew by the tokens of the streams the
    # gateway says it served.
    want = collections.Counter()
    for r in res:
        want[r.upstream] += r.tokens
    grew = {r.addr: dl.metric(r.url, "tokenloom:generation_tokens_total") - tokens0[r.addr]
            for r in c.replicas}
    tap.check(all(grew[a] == want[a] for a in grew) and sum(want.values()) == 36 * 48,
              "each replica's generation_tokens_total grew by the tokens of its streams",
              "counters %s, streams %s" % (grew, dict(want)))


def chat(session, turn, reply=None, headers=None):
    # The session's name comes first, so no KV block of one session's prompt can match
    # another's (the chat template's own prefix is shorter than one 16-token block).
    system = ("%s is the name of the cat. You are its storyteller. Tell gentle stories about "
              "it, who lives by the sea and loves the morning sun. " % session) * 4
    msgs = [{"role": "system", "content": system},
            {"role": "user", "content": "Tell me about the cat %s." % session}]
    if turn == 2:
        msgs += [{"role": "assistant", "content": reply},
                 {"role": "user", "content": "And what did the cat do next?"}]
    return {"messages": msgs, "max_tokens": 12, "temperature": 0}


def cached(res):
    usage = (res.body or {}).get("usage") or {}
    return (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)


def test_affinity(c):
    hits, same, where, lines = 0, 0, {}, []
    sessions = ["sess-%d" % i for i in range(8)]
    for s in sessions:
        h = {"X-Session-ID": s}
        r1 = dl.post(c.gateway.url, "/v1/chat/completions", chat(s, 1), h)
        if not r1.ok:
            lines.append("%s turn 1: %s" % (s, r1.why))
            continue
        reply = r1.body["choices"][0]["message"]["content"]
        r2 = dl.post(c.gateway.url, "/v1/chat/completions", chat(s, 2, reply), h)
        if not r2.ok:
            lines.append("%s turn 2: %s" % (s, r2.why))
            continue
        p1 = r1.body["usage"]["prompt_tokens"]
        where[s] = r1.upstream
        same += r2.upstream == r1.upstream
        # Turn 2 starts with turn 1's whole prompt: every full KV block of it must be a hit.
        if cached(r2) >= p1 - p1 % 16 > 0:
            hits += 1
        lines.append("%s: %s -> %s, turn-1 prompt %d, turn-2 cached %d" % (
            s, r1.upstream, r2.upstream, p1, cached(r2)))
    tap.note("affinity: %d/%d second turns on the same replica, %d/%d with the turn-1 prompt "
             "cached; sessions per replica %s" % (same, len(sessions), hits, len(sessions),
                                                  dict(collections.Counter(where.values()))))
    tap.check(same == len(sessions), "affinity: every second turn lands on the first turn's "
              "replica", "\n".join(lines))
    tap.check(hits == len(sessions), "affinity: every second turn reports its turn-1 prompt "
              "as cached_tokens", "\n".join(lines))
    tap.check(len(set(where.values())) >= 2, "affinity: sessions spread over several replicas",
              where)
    # Control: the same second turn sent straight to a replica that never saw the session.
    s = sessions[0]
    other = next(r for r in c.replicas if r.addr != where.get(s))
    r1 = dl.post(c.gateway.url, "/v1/chat/completions", chat(s, 1), {"X-Session-ID": s})
    reply = r1.body["choices"][0]["message"]["content"] if r1.ok else ""
    r2 = dl.post(other.url, "/v1/chat/completions", chat(s, 2, reply))
    p1 = r1.body["usage"]["prompt_tokens"] if r1.ok else 0
    # Only the chat template's opening (one block with this model's small vocabulary) can match.
    tap.note("control: turn 2 on a replica without the session: cached %d of a %d-token turn-1 "
             "prompt" % (cached(r2), p1))
    tap.check(r2.ok and cached(r2) < p1 - p1 % 16 - 16,
              "control: that turn on another replica does not find the turn-1 prompt cached",
              "%s cached=%s of %d" % (r2, cached(r2), p1))


def test_kill(c):
    victim = c.replicas[1]
    killed = []
    long_stream, short_stream = stream_payload(1500), stream_payload(100)

    def make(k):  # long streams until the kill (to be cut), then short ones (to be counted)
        return short_stream(k) if killed else long_stream(k)
    load = dl.Load(c.gateway.url, 6, make, max_requests=400).start()
    # Kill once the victim is generating for at least two streams (its own gauge says so) and
    # their headers came back through the gateway.
    end = time.monotonic() + 30
    while time.monotonic() < end:
        on = [r for r in load.running() if r.upstream == victim.addr and r.t_headers]
        if len(on) >= 2 and dl.metric(victim.url, "tokenloom:num_requests_running") >= 2:
            break
        time.sleep(0.01)
    victim.signal(signal.SIGKILL)
    t_kill = time.monotonic()
    killed.append(t_kill)
    victim.wait_exit(10)
    # Keep the load going until 12 requests started after the kill have finished (bounded).
    end = time.monotonic() + 60
    while time.monotonic() < end:
        if sum(r.t_start > t_kill for r in load.snapshot()) >= 12:
            break
        time.sleep(0.1)
    finished = load.stop(120)
    res = load.snapshot()
    after = [r for r in res if r.t_start > t_kill]
    failed = [r for r in res if not r.ok]
    # Streams answering from the victim when it died: headers from it before, end after.
    on_victim = [r for r in failed
                 if r.upstream == victim.addr and r.t_headers and r.t_headers < t_kill < r.t_end]
    unclean = [r for r in failed if r.t_end - r.t_start > 60]
    tap.note("kill -9: %d requests (%d started after the kill), %d failed, all of them streams "
             "that were running on the killed replica: %s" % (
                 len(res), len(after), len(failed), len(on_victim) == len(failed)))
    tap.check(finished, "load after kill -9 ends by itself (no hung request)")
    tap.check(1 <= len(failed) == len(on_victim),
              "kill -9: streams running on the killed replica are cut, no others fail",
              "\n".join(repr(r) for r in failed if r not in on_victim))
    tap.check(not unclean and all(r.why for r in failed),
              "kill -9: those fail cleanly (cut stream or error status, within the timeout)",
              "\n".join(repr(r) for r in failed))
    tap.check(len(after) >= 12 and all(r.ok for r in after),
              "kill -9: every request started after the kill succeeds",
              "%d after; bad: %s" % (len(after), [r for r in after if not r.ok][:5]))
    victim.start()
    tap.check(victim.wait_healthy(), "killed replica restarts and turns healthy")


def test_rolling(c):
    def make(k):
        if k % 2:
            return stream_payload(256)(k)
        return "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 256,
                                   "ignore_eos": True, "temperature": 1, "seed": k}
    load = dl.Load(c.gateway.url, 6, make, max_requests=5000).start()
    time.sleep(1)
    codes, steps = [], []
    for r in c.replicas:
        t0 = time.monotonic()
        r.signal(signal.SIGTERM)
        rc = r.wait_exit(60)
        codes.append(rc)
        t1 = time.monotonic()
        r.start()
        healthy = r.wait_healthy()
        steps.append("%s: exit %s after %.2f s, healthy %s after %.2f s" % (
            r.name, rc, t1 - t0, healthy, time.monotonic() - t1))
        # nginx keeps a failed replica out for --fail-timeout (2 s here); if all were marked at
        # once it would have none left (502). Operators wait as long; so does the test.
        time.sleep(2.5)
    finished = load.stop(120)
    res = load.snapshot()
    failed = [r for r in res if not r.ok]
    tap.note("rolling restart: %d requests (%d streams), %d failed; per-replica share %s" % (
        len(res), sum(r.stream for r in res), len(failed), share(res)))
    tap.note("\n".join(steps))
    # The gateway's side (access log): tries that met a stopping or starting replica and were
    # sent on to another one ("503, 200"; "502, 200" for a refused connection).
    with open(os.path.join(c.gateway.prefix, "access.log")) as f:
        retried = collections.Counter(
            ln.split("upstream_status=")[1].split(" session")[0] for ln in f
            if "upstream_status=" in ln and "," in ln.split("upstream_status=")[1])
    tap.note("requests the gateway moved to another replica, by upstream statuses: %s" %
             dict(retried))
    tap.check(finished, "rolling restart: the load ends by itself")
    tap.check(codes == [0, 0, 0], "rolling restart: each replica exits 0 on SIGTERM", codes)
    tap.check(len(res) >= 30 and not failed,
              "rolling restart under steady load: zero failed requests",
              "%d requests\n%s" % (len(res), "\n".join(repr(r) for r in failed[:20])))


def test_big_body(c):
    """64 MiB against the gateway's 8 MiB limit: http.client sends it all, then reads a 413."""
    conn = http.client.HTTPConnection("127.0.0.1", c.gateway.port, timeout=60)
    try:
        conn.request("POST", "/v1/completions", body=b"x" * (64 << 20),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        status = resp.status
        resp.read()
        why = ""
    except (OSError, http.client.HTTPException) as e:
        status, why = 0, "%s: %s" % (type(e).__name__, e)
    finally:
        conn.close()
    tap.check(status == 413, "a 64 MiB body through the gateway gets 413, not a reset", why)


def main():
    if not os.access(dl.TL_BIN, os.X_OK):
        tap.check(False, "tokenloom binary at %s" % dl.TL_BIN)
        tap.finish()
    c = dl.Cluster(3, flags=["--shutdown-timeout", "60", "--max-queued-requests", "256"],
                   gateway_extra=["--fail-timeout", "2s"])
    try:
        why = c.start()
        if not tap.check(not why, "3 replicas and the nginx gateway start on loopback", why):
            tap.finish()
        for t in (test_spread, test_affinity, test_kill, test_rolling, test_big_body):
            t(c)
        errs = [ln for ln in c.gateway.errors().splitlines() if "[emerg]" in ln or "[alert]" in ln]
        tap.check(not errs, "nginx logged no emergency or alert", "\n".join(errs[:10]))
    finally:
        c.close()
    tap.finish()


if __name__ == "__main__":
    main()
