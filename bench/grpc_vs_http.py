#!/usr/bin/env python3
"""Streaming throughput through the gRPC front vs the OpenAI HTTP API of the same server.

Starts `tokenloom serve --grpc-port=0` on a model, then runs the same closed-loop load over
each protocol in alternating rounds: C clients, each streaming R requests one after another
(a fixed prompt, max_tokens N with ignore_eos, so every request generates exactly N tokens).
HTTP: POST /v1/completions with "stream": true (SSE); gRPC: one ModelStreamInfer call per
request with stream=true. Reports per protocol and round: wall time, output tokens/s,
requests/s, TTFT p50, the mean gap between streamed chunks, and the CPU time spent per 1000
output tokens by the server, by its front's thread alone (the HTTP loop is the main thread,
the gRPC front's thread is named tl-grpc) and by this client process (from /proc and
os.times: which side costs more). The engine's compute pool spin-waits between steps, so the
server total grows with whatever CPU the clients leave free; the front thread's time is the
protocol's own cost. Compare ratios within one run.

--grpc-mode call (default) opens one ModelStreamInfer call per request from a thread per
client; --grpc-mode stream keeps one call per client open and sends its requests on it one
after another, as tritonclient's start_stream / async_stream_infer does; --grpc-mode aio runs
the clients as coroutines on grpc.aio, one call per request (grpcio's threaded API costs the
client about 2.5x the CPU per token of http.client, its asyncio API about the same).

    python3 bench/grpc_vs_http.py --model /tmp/m110.gguf --clients 32 --requests 2 --max-tokens 64

Needs python3-grpcio and python3-grpc-tools (stubs are generated into a temp folder).
"""
import argparse
import http.client
import json
import os
import re
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def gen_stubs():
    d = tempfile.mkdtemp()
    subprocess.check_call([sys.executable, "-m", "grpc_tools.protoc", "-I" + ROOT + "/proto",
                           "--python_out=" + d, "--grpc_python_out=" + d,
                           ROOT + "/proto/grpc_service.proto"])
    sys.path.insert(0, d)


def start_server(binary, model, extra):
    p = subprocess.Popen([binary, "serve", "-m", model, "--port", "0", "--grpc-port", "0", *extra],
                         stderr=subprocess.PIPE, text=True)
    hp = gp = None
    while hp is None or gp is None:
        line = p.stderr.readline()
        if not line:
            raise SystemExit("server failed to start")
        m = re.search(r"gRPC \(Open Inference Protocol\) on [^:]+:(\d+)", line)
        gp = int(m.group(1)) if m else gp
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        hp = int(m.group(1)) if m else hp
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    return p, hp, gp


def http_one(port, prompt, n):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = json.dumps({"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True,
                       "stream": True})
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    times = []
    finish = None
    for line in r:
        if line.startswith(b"data: ") and not line.startswith(b"data: [DONE]"):
            ev = json.loads(line[6:])
            ch = ev["choices"][0]
            if ch.get("text"):
                times.append(time.perf_counter())
            finish = ch.get("finish_reason") or finish
    c.close()
    return t0, times, finish == "length"


def grpc_req(pb, model, prompt, n):
    T = pb.ModelInferRequest.InferInputTensor
    return pb.ModelInferRequest(model_name=model, inputs=[
        T(name="text_input", datatype="BYTES", shape=[1],
          contents=pb.InferTensorContents(bytes_contents=[prompt.encode()])),
        T(name="max_tokens", datatype="INT32", shape=[1], contents=pb.InferTensorContents(int_contents=[n])),
        T(name="temperature", datatype="FP32", shape=[1], contents=pb.InferTensorContents(fp32_contents=[0])),
        T(name="ignore_eos", datatype="BOOL", shape=[1], contents=pb.InferTensorContents(bool_contents=[True])),
        T(name="stream", datatype="BOOL", shape=[1], contents=pb.InferTensorContents(bool_contents=[True]))])


def grpc_one(stub, pb, model, prompt, n):
    req = grpc_req(pb, model, prompt, n)
    t0 = time.perf_counter()
    times = []
    last = None
    for r in stub.ModelStreamInfer(iter([req]), timeout=600):
        raw = r.infer_response.raw_output_contents[0]
        if struct.unpack("<I", raw[:4])[0]:
            times.append(time.perf_counter())
        last = r.infer_response
    ok = last is not None and last.parameters["completion_tokens"].int64_param == n
    return t0, times, ok


def grpc_stream_client(stub, pb, model, prompt, n, requests):
    """One ModelStreamInfer call carrying `requests` requests, each sent when the previous one's
    final response came back; returns one (t0, chunk times, ok) per request."""
    import queue
    nxt = queue.Queue()

    def reqs():
        while True:
            r = nxt.get()
            if r is None:
                return
            yield r

    out = []
    t0 = time.perf_counter()
    times = []
    nxt.put(grpc_req(pb, model, prompt, n))
    for r in stub.ModelStreamInfer(reqs(), timeout=600):
        ir = r.infer_response
        if struct.unpack("<I", ir.raw_output_contents[0][:4])[0]:
            times.append(time.perf_counter())
        if ir.parameters["triton_final_response"].bool_param:
            out.append((t0, times, ir.parameters["completion_tokens"].int64_param == n))
            if len(out) == requests:
                nxt.put(None)
            else:
                t0, times = time.perf_counter(), []
                nxt.put(grpc_req(pb, model, prompt, n))
    return out


def cpu_s(path):
    """User + system CPU seconds of a process or thread (Linux /proc/.../stat)."""
    with open(path + "/stat") as f:
        v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")


def front_task(pid, kind):
    """The /proc path of the thread that runs a front: the HTTP loop is the main thread, the
    gRPC front's thread is named tl-grpc."""
    if kind == "http":
        return f"/proc/{pid}/task/{pid}"
    for t in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{t}/comm") as f:
            if f.read().strip() == "tl-grpc":
                return f"/proc/{pid}/task/{t}"
    return None


def grpc_aio_all(port, pb, rpc, model, prompt, n, clients, requests):
    """All clients as coroutines of one asyncio loop on grpc.aio (no thread per call): each
    opens one ModelStreamInfer call per request, as grpc_one does."""
    import asyncio
    import grpc

    async def main():
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = rpc.GRPCInferenceServiceStub(ch)
            out = []

            async def client():
                for _ in range(requests):
                    req = grpc_req(pb, model, prompt, n)
                    t0, times, last = time.perf_counter(), [], None
                    async for r in stub.ModelStreamInfer(iter([req]), timeout=600):
                        if struct.unpack("<I", r.infer_response.raw_output_contents[0][:4])[0]:
                            times.append(time.perf_counter())
                        last = r.infer_response
                    out.append((t0, times, last is not None and
                                last.parameters["completion_tokens"].int64_param == n))

            await asyncio.gather(*[client() for _ in range(clients)])
            return out

    return asyncio.run(main())


def run(kind, fn, clients, requests, n, server_pid, per_client=None, all_clients=None):
    results = []
    lock = threading.Lock()

    def client():
        if per_client:
            rs = per_client()
            with lock:
                results.extend(rs)
            return
        for _ in range(requests):
            r = fn()
            with lock:
                results.append(r)

    front = front_task(server_pid, kind)
    srv0, me0 = cpu_s(f"/proc/{server_pid}"), os.times()
    fr0 = cpu_s(front) if front else 0
    t0 = time.perf_counter()
    if all_clients:
        results = all_clients()
    else:
        th = [threading.Thread(target=client) for _ in range(clients)]
        for t in th:
            t.start()
        for t in th:
            t.join()
    wall = time.perf_counter() - t0
    srv = cpu_s(f"/proc/{server_pid}") - srv0
    fr = cpu_s(front) - fr0 if front else float("nan")
    me1 = os.times()
    me = (me1.user - me0.user) + (me1.system - me0.system)
    ktok = len(results) * n / 1000
    ttft = [r[1][0] - r[0] for r in results if r[1]]
    gaps = [b - a for r in results for a, b in zip(r[1], r[1][1:])]
    bad = sum(not r[2] for r in results)
    return {"protocol": kind, "wall_s": wall, "tok_s": len(results) * n / wall,
            "req_s": len(results) / wall, "ttft_p50_ms": 1e3 * statistics.median(ttft),
            "chunk_gap_mean_ms": 1e3 * statistics.mean(gaps) if gaps else 0, "failed": bad,
            "server_cpu_ms_per_ktok": 1e3 * srv / ktok, "front_cpu_ms_per_ktok": 1e3 * fr / ktok,
            "client_cpu_ms_per_ktok": 1e3 * me / ktok}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/tokenloom"))
    ap.add_argument("--model", default=os.path.join(ROOT, "../shared/models/stories260K.gguf"))
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=2, help="per client, one after another")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2, help="alternating HTTP / gRPC rounds")
    ap.add_argument("--prompt", default="Once upon a time, there was a little girl named Lily.")
    ap.add_argument("--grpc-mode", choices=("call", "stream", "aio"), default="call",
                    help="one ModelStreamInfer call per request (threads), one per client "
                         "(threads), or one per request on grpc.aio (one asyncio loop)")
    ap.add_argument("--json", action="store_true")
    a, extra = ap.parse_known_args()
    gen_stubs()
    import grpc
    import grpc_service_pb2 as pb
    import grpc_service_pb2_grpc as rpc
    proc, hp, gp = start_server(a.bin, a.model, extra)
    try:
        stub = rpc.GRPCInferenceServiceStub(grpc.insecure_channel(f"127.0.0.1:{gp}"))
        while not stub.ServerReady(pb.ServerReadyRequest()).ready:
            time.sleep(0.1)
        c = http.client.HTTPConnection("127.0.0.1", hp)
        c.request("GET", "/v1/models")
        model = json.loads(c.getresponse().read())["data"][0]["id"]
        http_one(hp, a.prompt, 4)  # warm-up both paths
        grpc_one(stub, pb, model, a.prompt, 4)
        rows = []
        for rnd in range(a.rounds):
            for kind in ("http", "grpc"):
                fn = (lambda: http_one(hp, a.prompt, a.max_tokens)) if kind == "http" else \
                     (lambda: grpc_one(stub, pb, model, a.prompt, a.max_tokens))
                per = (lambda: grpc_stream_client(stub, pb, model, a.prompt, a.max_tokens,
                                                  a.requests)) \
                    if kind == "grpc" and a.grpc_mode == "stream" else None
                every = (lambda: grpc_aio_all(gp, pb, rpc, model, a.prompt, a.max_tokens,
                                              a.clients, a.requests)) \
                    if kind == "grpc" and a.grpc_mode == "aio" else None
                row = run(kind, fn, a.clients, a.requests, a.max_tokens, proc.pid, per, every)
                row["round"] = rnd + 1
                rows.append(row)
                if not a.json:
                    print(f"round {rnd + 1} {kind:4s}: {row['wall_s']:.2f} s, {row['tok_s']:.1f} "
                          f"tok/s, {row['req_s']:.2f} req/s, TTFT p50 {row['ttft_p50_ms']:.0f} ms, "
                          f"chunk gap {row['chunk_gap_mean_ms']:.1f} ms, failed {row['failed']}, "
                          f"CPU ms/ktok server {row['server_cpu_ms_per_ktok']:.0f} (front thread "
                          f"{row['front_cpu_ms_per_ktok']:.0f}) client "
                          f"{row['client_cpu_ms_per_ktok']:.0f}",
                          flush=True)
        h = statistics.mean(r["tok_s"] for r in rows if r["protocol"] == "http")
        g = statistics.mean(r["tok_s"] for r in rows if r["protocol"] == "grpc")
        for kind in ("http", "grpc"):
            mean = lambda key: statistics.mean(r[key] for r in rows if r["protocol"] == kind)
            if not a.json:
                print(f"mean CPU ms per 1000 tokens, {kind}: server "
                      f"{mean('server_cpu_ms_per_ktok'):.0f} (its front thread "
                      f"{mean('front_cpu_ms_per_ktok'):.0f}), client "
                      f"{mean('client_cpu_ms_per_ktok'):.0f}")
        if a.json:
            print(json.dumps({"rows": rows, "grpc_over_http": g / h}))
        else:
            print(f"mean output tok/s: http {h:.1f}, grpc {g:.1f}, grpc/http {g / h:.3f}")
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
