#!/usr/bin/env python3
"""End-to-end tests of the gRPC front (`tokenloom serve --grpc-port`), printed as TAP.

A real client: python3-grpcio with stubs generated from proto/grpc_service.proto at test time
(tests/grpc/run.sh puts them on PYTHONPATH). The oracle for generated text is the same request
over the OpenAI HTTP API of the same server (greedy: the same tokens). Servers run on free
ports chosen by the kernel and are killed on exit.
"""
import json
import os
import re
import signal
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import grpc
import grpc_service_pb2 as pb
import grpc_service_pb2_grpc as rpc

TL_BIN = os.environ["TL_BIN"]
MODEL = os.environ["TL_MODEL"]
N = 0
FAILED = 0
SERVERS = []


def ok(cond, name, detail=""):
    global N, FAILED
    N += 1
    if cond:
        print(f"ok {N} - {name}", flush=True)
    else:
        FAILED += 1
        print(f"not ok {N} - {name}", flush=True)
        for line in str(detail).splitlines()[:20]:
            print(f"# {line}", flush=True)


class Server:
    def __init__(self, *extra):
        self.log = open(os.devnull, "w")
        self.proc = subprocess.Popen(
            [TL_BIN, "serve", "-m", MODEL, "--port", "0", "--grpc-port", "0", *extra],
            stderr=subprocess.PIPE, text=True)
        SERVERS.append(self)
        self.http = self.grpc = None
        deadline = time.time() + 30
        self.lines = []
        while time.time() < deadline and (self.http is None or self.grpc is None):
            line = self.proc.stderr.readline()
            if not line:
                break
            self.lines.append(line)
            m = re.search(r"gRPC \(Open Inference Protocol\) on [^:]+:(\d+)", line)
            if m:
                self.grpc = int(m.group(1))
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                self.http = int(m.group(1))
        if self.http is None or self.grpc is None:
            raise RuntimeError("server did not start: " + "".join(self.lines))
        # Keep draining stderr so the server never blocks on a full pipe.
        threading.Thread(target=self._drain, daemon=True).start()
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.grpc}")
        self.stub = rpc.GRPCInferenceServiceStub(self.channel)
        self.md = None
        for _ in range(300):
            try:
                if self.stub.ServerReady(pb.ServerReadyRequest(), metadata=self.md_for(extra)).ready:
                    break
            except grpc.RpcError:
                pass
            time.sleep(0.05)

    @staticmethod
    def md_for(extra):
        if "--api-key" in extra:
            return (("authorization", "Bearer " + extra[extra.index("--api-key") + 1]),)
        return None

    def _drain(self):
        for line in self.proc.stderr:
            self.lines.append(line)

    def http_post(self, path, body, headers=None):
        req = urllib.request.Request(f"http://127.0.0.1:{self.http}{path}",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json", **(headers or {})})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/metrics", timeout=30) as r:
            return r.read().decode()

    def metric(self, name):
        m = re.search(r"^tokenloom:" + re.escape(name) + r"(?:\{[^}]*\})? ([0-9.eE+-]+)$",
                      self.metrics(), re.M)
        return float(m.group(1)) if m else None

    def wait_idle(self, timeout=10):
        end = time.time() + timeout
        while time.time() < end:
            if self.metric("num_requests_running") == 0 and self.metric("num_requests_waiting") == 0 \
                    and self.metric("kv_cache_usage_perc") == 0:
                return True
            time.sleep(0.05)
        return False

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


# ---- request builders -------------------------------------------------------------------------

def t_bytes(name, *vals, shape=None):
    t = pb.ModelInferRequest.InferInputTensor(name=name, datatype="BYTES",
                                              shape=shape or [len(vals)])
    t.contents.bytes_contents.extend(v.encode() if isinstance(v, str) else v for v in vals)
    return t


def t_int32(name, v):
    t = pb.ModelInferRequest.InferInputTensor(name=name, datatype="INT32", shape=[1])
    t.contents.int_contents.append(v)
    return t


def t_fp32(name, v):
    t = pb.ModelInferRequest.InferInputTensor(name=name, datatype="FP32", shape=[1])
    t.contents.fp32_contents.append(v)
    return t


def t_bool(name, v):
    t = pb.ModelInferRequest.InferInputTensor(name=name, datatype="BOOL", shape=[1])
    t.contents.bool_contents.append(v)
    return t


def infer_req(model, prompt, max_tokens=24, stream=None, extra=(), rid=""):
    inputs = [t_bytes("text_input", prompt), t_int32("max_tokens", max_tokens),
              t_fp32("temperature", 0.0)]
    if stream is not None:
        inputs.append(t_bool("stream", stream))
    inputs.extend(extra)
    return pb.ModelInferRequest(model_name=model, id=rid, inputs=inputs)


def text_of(resp):
    """text_output from raw_output_contents (4-byte little-endian length + bytes)."""
    i = [o.name for o in resp.outputs].index("text_output")
    raw = resp.raw_output_contents[i]
    (n,) = struct.unpack("<I", raw[:4])
    assert len(raw) == 4 + n
    return raw[4:].decode()


def param(resp, key):
    p = resp.parameters[key]
    which = p.WhichOneof("parameter_choice")
    return getattr(p, which) if which else None


def code_of(fn):
    try:
        fn()
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        return e.code(), e.details()


def collect_stream(stub, reqs, md=None, timeout=120):
    """Sends reqs on one ModelStreamInfer stream; returns the responses."""
    return list(stub.ModelStreamInfer(iter(reqs), metadata=md, timeout=timeout))


# ---- tests --------------------------------------------------------------------------------------

def test_rpcs(s, model):
    st = s.stub
    ok(st.ServerLive(pb.ServerLiveRequest()).live is True, "ServerLive: live")
    ok(st.ServerReady(pb.ServerReadyRequest()).ready is True, "ServerReady: ready")
    ok(st.ModelReady(pb.ModelReadyRequest(name=model)).ready is True, "ModelReady: ready")
    c, d = code_of(lambda: st.ModelReady(pb.ModelReadyRequest(name="nope")))
    ok(c == grpc.StatusCode.NOT_FOUND and "nope" in d, "ModelReady of an unknown model: NOT_FOUND", d)
    m = st.ServerMetadata(pb.ServerMetadataRequest())
    ok(m.name == "tokenloom" and "model_stream_infer" in m.extensions, "ServerMetadata", m)
    mm = st.ModelMetadata(pb.ModelMetadataRequest(name=model))
    ins = {t.name: t.datatype for t in mm.inputs}
    want = {"text_input": "BYTES", "stream": "BOOL", "max_tokens": "INT32", "temperature": "FP32",
            "top_p": "FP32", "top_k": "INT32", "seed": "UINT64", "stop": "BYTES",
            "ignore_eos": "BOOL", "sampling_parameters": "BYTES"}
    ok(mm.name == model and ins == want and [(o.name, o.datatype) for o in mm.outputs] ==
       [("text_output", "BYTES")], "ModelMetadata describes exactly the LLM tensors", mm)
    c, _ = code_of(lambda: st.ModelMetadata(pb.ModelMetadataRequest(name=model, version="7")))
    ok(c == grpc.StatusCode.NOT_FOUND, "ModelMetadata of an unknown version: NOT_FOUND")
    unknown = s.channel.unary_unary("/inference.GRPCInferenceService/RepositoryIndex",
                                    request_serializer=lambda b: b,
                                    response_deserializer=lambda b: b)
    c, _ = code_of(lambda: unknown(b""))
    ok(c == grpc.StatusCode.UNIMPLEMENTED, "an RPC tokenloom does not serve: UNIMPLEMENTED")


PROMPTS = ["Once upon a time", "The little dog", "Lily and Ben went to the park", "One day, a cat"]


def http_ref(s, model, prompt, max_tokens=24):
    r = s.http_post("/v1/completions", {"model": model, "prompt": prompt,
                                        "max_tokens": max_tokens, "temperature": 0})
    return r["choices"][0]["text"], r["usage"], r["choices"][0]["finish_reason"]


def test_generation(s, model, refs):
    st = s.stub
    for p in PROMPTS[:2]:
        text, usage, finish = refs[p]
        r = st.ModelInfer(infer_req(model, p, rid="req-7"), timeout=60)
        ok(text_of(r) == text and r.id == "req-7" and r.model_name == model,
           f"ModelInfer greedy == OpenAI HTTP ({p!r})", f"{text_of(r)!r} vs {text!r}")
        ok(param(r, "completion_tokens") == usage["completion_tokens"] and
           param(r, "prompt_tokens") == usage["prompt_tokens"] and
           param(r, "finish_reason") == finish, "ModelInfer token counts and finish reason == HTTP",
           r.parameters)
        rs = collect_stream(st, [infer_req(model, p, stream=True)])
        finals = [param(x.infer_response, "triton_final_response") for x in rs]
        deltas = "".join(text_of(x.infer_response) for x in rs)
        ok(deltas == text and finals[-1] is True and not any(finals[:-1]) and len(rs) > 2 and
           all(not x.error_message for x in rs),
           f"ModelStreamInfer deltas == HTTP text, last flagged final ({p!r})",
           f"{deltas!r} vs {text!r}, finals {finals}")
        last = rs[-1].infer_response
        ok(len(rs) - 1 <= param(last, "completion_tokens") and
           param(last, "completion_tokens") == usage["completion_tokens"],
           "stream: at most one response per generated token (per engine step)", len(rs))
    # The same request in raw_input_contents form (as tritonclient sends it).
    p = PROMPTS[0]
    raw = pb.ModelInferRequest(model_name=model)
    for name, dt, data in (("text_input", "BYTES", struct.pack("<I", len(p)) + p.encode()),
                           ("max_tokens", "INT32", struct.pack("<i", 24)),
                           ("temperature", "FP32", struct.pack("<f", 0.0))):
        raw.inputs.add(name=name, datatype=dt, shape=[1])
        raw.raw_input_contents.append(data)
    ok(text_of(st.ModelInfer(raw, timeout=60)) == refs[p][0], "raw_input_contents form == HTTP")
    sp = pb.ModelInferRequest(model_name=model, inputs=[
        t_bytes("text_input", p),
        t_bytes("sampling_parameters", json.dumps({"max_tokens": 24, "temperature": 0}))])
    ok(text_of(st.ModelInfer(sp, timeout=60)) == refs[p][0], "sampling_parameters JSON form == HTTP")
    # Seeded sampling is reproducible, and the same as HTTP with the same seed.
    samp = [t_bytes("text_input", p), t_int32("max_tokens", 20), t_fp32("temperature", 1.0),
            t_fp32("top_p", 0.9)]
    seed = pb.ModelInferRequest.InferInputTensor(name="seed", datatype="UINT64", shape=[1])
    seed.contents.uint64_contents.append(1234)
    a = text_of(st.ModelInfer(pb.ModelInferRequest(model_name=model, inputs=samp + [seed])))
    h = s.http_post("/v1/completions", {"model": model, "prompt": p, "max_tokens": 20,
                                        "temperature": 1.0, "top_p": 0.9, "seed": 1234})
    ok(a == h["choices"][0]["text"], "seeded sampling == HTTP with the same seed",
       f"{a!r} vs {h['choices'][0]['text']!r}")
    # Stop strings end the text before the stop.
    full = refs[p][0]
    if len(full) > 12:
        stop = full[6:10]
        r = st.ModelInfer(infer_req(model, p, extra=[t_bytes("stop", stop)]))
        ok(text_of(r) == full[:full.index(stop)] and param(r, "finish_reason") == "stop",
           "stop tensor ends the text before the stop string", f"{text_of(r)!r} stop {stop!r}")
    # Several requests on one stream, answered with their ids.
    reqs = [infer_req(model, q, stream=True, rid=f"r{i}") for i, q in enumerate(PROMPTS)]
    rs = collect_stream(st, reqs)
    by_id = {}
    for x in rs:
        by_id.setdefault(x.infer_response.id, []).append(x.infer_response)
    ok(all("".join(text_of(y) for y in by_id.get(f"r{i}", [])) == refs[q][0]
           for i, q in enumerate(PROMPTS)), "4 requests on one stream: each id's deltas == HTTP")


def test_concurrent(s, model, refs):
    results = [None] * 32
    errors = []

    def one(i):
        p = PROMPTS[i % len(PROMPTS)]
        try:
            rs = collect_stream(s.stub, [infer_req(model, p, stream=True)])
            results[i] = "".join(text_of(x.infer_response) for x in rs)
        except grpc.RpcError as e:
            errors.append(str(e))

    th = [threading.Thread(target=one, args=(i,)) for i in range(32)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    good = sum(results[i] == refs[PROMPTS[i % len(PROMPTS)]][0] for i in range(32))
    ok(good == 32 and not errors, "32 concurrent streams: every text == its HTTP reference",
       f"{good}/32 {errors[:2]}")
    ok(s.wait_idle(), "after 32 streams: engine idle, KV free")


def hist_counts(text):
    """{histogram name: (count, sum)} of the tokenloom histograms in a /metrics text."""
    out = {}
    for name, kind, v in re.findall(r"^tokenloom:(\w+)_(count|sum)(?:\{[^}]*\})? (\S+)$", text, re.M):
        c, sm = out.get(name, (None, None))
        out[name] = (float(v), sm) if kind == "count" else (c, float(v))
    return out


def test_latency_metrics(s, model):
    """gRPC generations are in the latency histograms; the oracle is the responses' counts."""
    before = hist_counts(s.metrics())
    stats0 = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{s.http}/stats", timeout=30).read())
    usage = []
    for i, p in enumerate(PROMPTS):
        if i % 2:
            r = s.stub.ModelInfer(infer_req(model, p, max_tokens=12), timeout=60)
        else:
            r = collect_stream(s.stub, [infer_req(model, p, max_tokens=12, stream=True)])[-1]
            r = r.infer_response
        usage.append((param(r, "prompt_tokens"), param(r, "completion_tokens")))
    after = hist_counts(s.metrics())
    stats1 = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{s.http}/stats", timeout=30).read())

    def delta(name, i):
        return after[name][i] - before[name][i]

    n = len(PROMPTS)
    ok(all(delta(h, 0) == n for h in ("e2e_request_latency_seconds", "request_queue_time_seconds",
                                       "time_to_first_token_seconds")),
       "gRPC requests counted in the e2e, queue and TTFT histograms",
       {h: delta(h, 0) for h in after})
    ok(delta("request_prompt_tokens", 1) == sum(u[0] for u in usage) and
       delta("request_generation_tokens", 1) == sum(u[1] for u in usage),
       "prompt / generation token histograms sum the gRPC responses' counts", usage)
    ok(delta("inter_token_latency_seconds", 0) == sum(u[1] - 1 for u in usage) and
       delta("inter_token_latency_seconds", 1) > 0,
       "ITL histogram: one gap per gRPC token after the first",
       (delta("inter_token_latency_seconds", 0), usage))
    lat0, lat1 = stats0["latency"], stats1["latency"]
    ok(all(lat1[k]["count"] - lat0[k]["count"] == n for k in ("ttft", "queue", "e2e")) and
       lat1["itl"]["count"] - lat0["itl"]["count"] == sum(u[1] - 1 for u in usage),
       "/stats latencies count the gRPC requests as /metrics does",
       {k: lat1[k]["count"] - lat0[k]["count"] for k in lat1})


def test_stalled_client(s, model, refs):
    """A gRPC client that stops reading stalls neither front: HTTP and other gRPC calls are
    served meanwhile (default --max-unsent-bytes, so the stalled call stays open)."""
    ch = grpc.insecure_channel(f"127.0.0.1:{s.grpc}", options=[
        ("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 1024)])
    stub = rpc.GRPCInferenceServiceStub(ch)
    gen0 = s.metric("generation_tokens_total")
    reqs = [infer_req(model, PROMPTS[i % 4], max_tokens=300, stream=True,
                      extra=[t_bool("ignore_eos", True)]) for i in range(8)]
    stalled = stub.ModelStreamInfer(iter(reqs), timeout=120)
    next(stalled)  # one response read, then none
    end = time.time() + 30
    while time.time() < end and s.metric("generation_tokens_total") - gen0 < 8 * 300:
        time.sleep(0.05)
    made = s.metric("generation_tokens_total") - gen0
    p = PROMPTS[2]
    t0 = time.time()
    h = http_ref(s, model, p)
    g = text_of(s.stub.ModelInfer(infer_req(model, p), timeout=30))
    ok(made >= 8 * 300 and h[0] == refs[p][0] and g == refs[p][0] and time.time() - t0 < 30,
       "a stalled gRPC reader: its requests still generate, HTTP and gRPC calls are served",
       f"generated {made}, {h[0]!r} / {g!r} vs {refs[p][0]!r}")
    stalled.cancel()
    ok(s.wait_idle(), "the stalled call cancelled: KV back to idle")
    ch.close()


def long_req(model, prompt="Once upon a time", n=400, stream=None):
    return infer_req(model, prompt, max_tokens=n, stream=stream, extra=[t_bool("ignore_eos", True)])


def test_cancel_deadline(s, model):
    gen = s.stub.ModelStreamInfer(iter([long_req(model, stream=True)]), timeout=60)
    got = []
    for x in gen:
        got.append(x)
        if len(got) == 3:
            break
    running = s.metric("num_requests_running")
    gen.cancel()
    ok(len(got) == 3 and running == 1, "stream running before the cancel", f"{len(got)} {running}")
    ok(s.wait_idle(), "cancel mid-stream: request ended, KV back to idle")
    t0 = time.time()
    # 400 tokens of stories260K take ~50 ms on an idle 2-core machine: a 10 ms deadline passes
    # mid-generation (0.05 s did not always: the reply could finish first).
    c, d = code_of(lambda: s.stub.ModelInfer(long_req(model, n=400), timeout=0.01))
    ok(c == grpc.StatusCode.DEADLINE_EXCEEDED, "a passed deadline: DEADLINE_EXCEEDED", f"{c} {d}")
    ok(s.wait_idle() and time.time() - t0 < 10, "after the deadline: KV back to idle")


def test_bad_input(s, model):
    st = s.stub
    cases = [
        ("wrong datatype", pb.ModelInferRequest(model_name=model, inputs=[
            t_bytes("text_input", "hi"), t_fp32("max_tokens", 3.0)]), "max_tokens"),
        ("missing text_input", pb.ModelInferRequest(model_name=model, inputs=[
            t_int32("max_tokens", 3)]), "text_input"),
        ("shape mismatch", pb.ModelInferRequest(model_name=model, inputs=[
            t_bytes("text_input", "hi", shape=[2])]), "shape"),
        ("unknown input", pb.ModelInferRequest(model_name=model, inputs=[
            t_bytes("text_input", "hi"), t_int32("beams", 3)]), "beams"),
        ("max_tokens 0", infer_req(model, "hi", max_tokens=0), "max_tokens"),
        ("temperature NaN", pb.ModelInferRequest(model_name=model, inputs=[
            t_bytes("text_input", "hi"), t_fp32("temperature", float("nan"))]), "temperature"),
        ("bad sampling_parameters", pb.ModelInferRequest(model_name=model, inputs=[
            t_bytes("text_input", "hi"), t_bytes("sampling_parameters", "{not json")]),
         "sampling_parameters"),
        ("context overflow", infer_req(model, "hi", max_tokens=100000), "context"),
    ]
    raw_bad = pb.ModelInferRequest(model_name=model)
    raw_bad.inputs.add(name="text_input", datatype="BYTES", shape=[1])
    raw_bad.raw_input_contents.append(struct.pack("<I", 99) + b"short")
    cases.append(("raw BYTES length past the end", raw_bad, "text_input"))
    for name, req, word in cases:
        c, d = code_of(lambda: st.ModelInfer(req, timeout=30))
        ok(c == grpc.StatusCode.INVALID_ARGUMENT and word in d, f"bad input ({name}): "
           "INVALID_ARGUMENT naming it", f"{c} {d}")
    c, d = code_of(lambda: st.ModelInfer(infer_req("other-model", "hi")))
    ok(c == grpc.StatusCode.NOT_FOUND, "unknown model: NOT_FOUND", d)
    garbage = s.channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                                    request_serializer=lambda b: b,
                                    response_deserializer=lambda b: b)
    c, d = code_of(lambda: garbage(b"\x0a\xff\xff\xff\xff\x0f"))
    ok(c == grpc.StatusCode.INVALID_ARGUMENT, "malformed protobuf: INVALID_ARGUMENT", d)
    # In a stream, a bad request gets an in-band error and the stream goes on.
    rs = collect_stream(st, [pb.ModelInferRequest(model_name=model, inputs=[t_int32("max_tokens", 3)]),
                             infer_req(model, PROMPTS[0], stream=True, max_tokens=4)])
    ok(rs[0].error_message.startswith("INVALID_ARGUMENT") and "text_input" in rs[0].error_message
       and param(rs[-1].infer_response, "triton_final_response") is True,
       "stream: a bad request is an in-band error, the next one is served", rs[:1])
    ok(st.ServerLive(pb.ServerLiveRequest()).live, "alive after the bad inputs")


def http_call(s, method, path, body=None, headers=None):
    """(status, parsed JSON or raw text) of one HTTP request."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{s.http}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            status, raw = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read().decode()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw


def sse_events(raw):
    return [json.loads(l[6:]) for l in raw.splitlines() if l.startswith("data: ")]


def test_http_v2(s, model, refs):
    """The protocol's HTTP side on the OpenAI server, against the gRPC answers and /v1."""
    st, b = http_call(s, "GET", "/v2/health/live")
    ok(st == 200 and b == {"live": True}, "HTTP GET /v2/health/live", b)
    st, b = http_call(s, "GET", "/v2/health/ready")
    ok(st == 200 and b == {"ready": True}, "HTTP GET /v2/health/ready", b)
    st, b = http_call(s, "GET", f"/v2/models/{model}/ready")
    ok(st == 200 and b["ready"] is True, "HTTP GET /v2/models/NAME/ready", b)
    st, b = http_call(s, "GET", f"/v2/models/{model}")
    mm = s.stub.ModelMetadata(pb.ModelMetadataRequest(name=model))
    ok(st == 200 and [(t["name"], t["datatype"]) for t in b["inputs"]] ==
       [(t.name, t.datatype) for t in mm.inputs] and b["outputs"][0]["name"] == "text_output",
       "HTTP GET /v2/models/NAME == gRPC ModelMetadata", b)
    st, b = http_call(s, "GET", "/v2/models/nope")
    ok(st == 404, "HTTP /v2/models of an unknown model: 404", b)
    p = PROMPTS[1]
    st, b = http_call(s, "POST", f"/v2/models/{model}/generate",
                      {"text_input": p, "parameters": {"max_tokens": 24, "temperature": 0}})
    ok(st == 200 and b["text_output"] == refs[p][0] and
       b["completion_tokens"] == refs[p][1]["completion_tokens"],
       "HTTP generate == /v1/completions (greedy)", b)
    st, raw = http_call(s, "POST", f"/v2/models/{model}/generate_stream",
                        {"text_input": p, "max_tokens": 24, "temperature": 0})
    ev = sse_events(raw) if isinstance(raw, str) else []
    ok(st == 200 and len(ev) > 2 and "".join(e["text_output"] for e in ev) == refs[p][0] and
       ev[-1].get("finish_reason") == refs[p][2] and "finish_reason" not in ev[0],
       "HTTP generate_stream: SSE deltas == /v1/completions text, last with finish_reason", raw)
    st, b = http_call(s, "POST", f"/v2/models/{model}/generate",
                      {"text_input": p, "parameters": {"beams": 2}})
    ok(st == 400 and "beams" in json.dumps(b), "HTTP generate with an unknown field: 400", b)
    st, b = http_call(s, "POST", f"/v2/models/{model}/generate", {"max_tokens": 2})
    ok(st == 400 and "text_input" in json.dumps(b), "HTTP generate without text_input: 400", b)
    st, b = http_call(s, "POST", f"/v2/models/{model}/generate",
                      {"text_input": p, "temperature": 9})
    ok(st == 400 and "temperature" in json.dumps(b), "HTTP generate with temperature 9: 400", b)
    st, b = http_call(s, "GET", f"/v2/models/{model}/generate")
    ok(st == 405, "HTTP GET on generate: 405", b)


def health_check(s, service=b"", md=None):
    """grpc.health.v1.Health/Check with the request encoded by hand from the health protocol
    (field 1, the service name, a string); returns (code, status): the response's field 1
    varint (1 SERVING, 2 NOT_SERVING), None when the call failed."""
    req = b"\x0a" + bytes([len(service)]) + service if service else b""
    call = s.channel.unary_unary("/grpc.health.v1.Health/Check")
    try:
        raw = call(req, metadata=md, timeout=10)
    except grpc.RpcError as e:
        return e.code(), None
    if raw == b"":
        return grpc.StatusCode.OK, 0  # proto3 leaves UNKNOWN (0) out
    ok(len(raw) == 2 and raw[0] == 0x08, "health response is one varint field 1", raw)
    return grpc.StatusCode.OK, raw[1]


def test_health(s):
    ok(health_check(s) == (grpc.StatusCode.OK, 1), "Health/Check of the server: SERVING")
    ok(health_check(s, b"inference.GRPCInferenceService") == (grpc.StatusCode.OK, 1),
       "Health/Check of the inference service: SERVING")
    c, _ = health_check(s, b"no.such.Service")
    ok(c == grpc.StatusCode.NOT_FOUND, "Health/Check of another service: NOT_FOUND", c)
    watch = s.channel.unary_stream("/grpc.health.v1.Health/Watch")
    c, _ = code_of(lambda: list(watch(b"", timeout=10)))
    ok(c == grpc.StatusCode.UNIMPLEMENTED, "Health/Watch: UNIMPLEMENTED", c)


def test_limits(model):
    s = Server("--api-key", "sekret", "--max-queued-requests", "1", "--max-batch-size", "1",
               "--max-body-bytes", "65536")
    md = (("authorization", "Bearer sekret"),)
    c, d = code_of(lambda: s.stub.ModelInfer(infer_req(model, "hi", max_tokens=2)))
    ok(c == grpc.StatusCode.UNAUTHENTICATED, "no API key: UNAUTHENTICATED", d)
    c, _ = code_of(lambda: s.stub.ModelInfer(infer_req(model, "hi", max_tokens=2),
                                             metadata=(("authorization", "Bearer wrong"),)))
    ok(c == grpc.StatusCode.UNAUTHENTICATED, "wrong API key: UNAUTHENTICATED")
    ok(s.stub.ServerLive(pb.ServerLiveRequest()).live, "ServerLive needs no key")
    ok(health_check(s) == (grpc.StatusCode.OK, 1), "Health/Check needs no key")
    r = s.stub.ModelInfer(infer_req(model, "hi", max_tokens=2), metadata=md)
    ok(param(r, "completion_tokens") == 2, "right API key: served")
    st, _ = http_call(s, "POST", f"/v2/models/{model}/generate", {"text_input": "hi"})
    st2, b = http_call(s, "POST", f"/v2/models/{model}/generate",
                       {"text_input": "hi", "max_tokens": 2}, {"Authorization": "Bearer sekret"})
    st3, _ = http_call(s, "GET", "/v2/health/ready")
    ok(st == 401 and st2 == 200 and st3 == 200, "HTTP generate needs the API key, health does not",
       (st, st2, st3))
    big = infer_req(model, "x" * 100000, max_tokens=2)
    c, d = code_of(lambda: s.stub.ModelInfer(big, metadata=md))
    ok(c == grpc.StatusCode.RESOURCE_EXHAUSTED, "oversized message: RESOURCE_EXHAUSTED", f"{c} {d}")
    codes = []

    def one():
        codes.append(code_of(lambda: s.stub.ModelInfer(long_req(model, n=150), metadata=md,
                                                        timeout=120))[0])

    th = [threading.Thread(target=one) for _ in range(6)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    ok(grpc.StatusCode.RESOURCE_EXHAUSTED in codes and grpc.StatusCode.OK in codes,
       "full queue: RESOURCE_EXHAUSTED for some, the others served", codes)
    ok(s.wait_idle(), "after the burst: KV back to idle")
    m = s.metrics()
    ok(re.search(r'tokenloom:grpc_requests_total\{method="ModelInfer",code="RESOURCE_EXHAUSTED",model_name="[^"]*"\} [1-9]', m)
       and re.search(r'tokenloom:grpc_requests_total\{method="ModelInfer",code="UNAUTHENTICATED",model_name="[^"]*"\} 2', m),
       "/metrics counts gRPC calls by method and code")
    s.stop()


def test_unsent(model):
    """--max-unsent-bytes: a stream whose client stops reading is cancelled; the server lives on.

    The client keeps its HTTP/2 windows small (no BDP probing, 1 KB lookahead) so the responses
    it does not read pile up in the server's per-call queue rather than in its own buffers.
    """
    cap = 65536
    s = Server("--max-unsent-bytes", str(cap))
    ch = grpc.insecure_channel(f"127.0.0.1:{s.grpc}", options=[
        ("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 1024)])
    stub = rpc.GRPCInferenceServiceStub(ch)
    # 16 requests x 1000 tokens x ~150 bytes per response: far more than cap + the windows.
    reqs = [infer_req(model, PROMPTS[i % 4], max_tokens=1000, stream=True, rid="u" * 100,
                      extra=[t_bool("ignore_eos", True)]) for i in range(16)]
    call = stub.ModelStreamInfer(iter(reqs), timeout=120)
    end = time.time() + 60
    while time.time() < end and not any("unread" in l for l in s.lines):
        time.sleep(0.05)
    warned = [l for l in s.lines if "unread" in l]
    n, code, detail = 0, grpc.StatusCode.OK, ""
    try:
        for _ in call:  # what got through before the cancel, then the status
            n += 1
    except grpc.RpcError as e:
        code, detail = e.code(), e.details()
    ok(warned and code == grpc.StatusCode.RESOURCE_EXHAUSTED and "max-unsent-bytes" in detail
       and n < 16 * 1000, "a stream whose client stops reading ends RESOURCE_EXHAUSTED",
       f"{code} {detail} after {n} responses; {warned}")
    ok(s.wait_idle(), "after the slow client: its requests cancelled, KV back to idle")
    gen = s.metric("generation_tokens_total")
    ok(gen is not None and gen < 16 * 1000, "the cancelled requests stopped generating", gen)
    ok(re.search(r'tokenloom:grpc_requests_total\{method="ModelStreamInfer",'
                 r'code="RESOURCE_EXHAUSTED",model_name="[^"]*"\} 1', s.metrics()),
       "/metrics counts the slow stream as RESOURCE_EXHAUSTED")
    rs = collect_stream(s.stub, [infer_req(model, PROMPTS[0], stream=True, max_tokens=8)])
    ok(rs and param(rs[-1].infer_response, "triton_final_response") is True,
       "the server serves the next stream normally")
    ch.close()
    s.stop()


def test_sigterm(model):
    """SIGTERM while streams run: they finish, new work is refused, the process exits 0."""
    s = Server()
    md = None
    outs = [None] * 3
    first = [threading.Event() for _ in outs]

    def stream(i):
        try:
            rs = []
            for x in s.stub.ModelStreamInfer(iter([long_req(model, n=400, stream=True)]),
                                             metadata=md, timeout=120):
                rs.append(x)
                first[i].set()
            outs[i] = rs[-1].infer_response if not rs[-1].error_message else rs[-1].error_message
        except grpc.RpcError as e:
            outs[i] = e
        first[i].set()

    th = [threading.Thread(target=stream, args=(i,)) for i in range(len(outs))]
    for t in th:
        t.start()
    for e in first:
        e.wait(30)
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.05)
    c, d = code_of(lambda: s.stub.ModelInfer(infer_req(model, "hi", max_tokens=2), metadata=md,
                                             timeout=10))
    hc = health_check(s)
    ok(hc[0] != grpc.StatusCode.OK or hc[1] == 2, "SIGTERM: Health/Check is no longer SERVING", hc)
    for t in th:
        t.join()
    ok(all(isinstance(f, pb.ModelInferResponse) and
           param(f, "triton_final_response") is True and param(f, "completion_tokens") == 400
           for f in outs), "SIGTERM: the running streams finish whole", outs)
    ok(c == grpc.StatusCode.UNAVAILABLE, "SIGTERM: a new request gets UNAVAILABLE", f"{c} {d}")
    try:
        rc = s.proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        rc = None
    time.sleep(0.2)  # the stderr reader catches up
    ok(rc == 0, "SIGTERM: the server exits 0", f"rc {rc}\n" + "".join(s.lines[-40:]))
    s.stop()


def main():
    s = Server()
    model = s.http_post("/v1/completions", {"prompt": "a", "max_tokens": 1})["model"]
    refs = {p: http_ref(s, model, p) for p in PROMPTS}
    try:
        test_rpcs(s, model)
        test_health(s)
        test_generation(s, model, refs)
        test_concurrent(s, model, refs)
        test_latency_metrics(s, model)
        test_stalled_client(s, model, refs)
        test_http_v2(s, model, refs)
        test_cancel_deadline(s, model)
        test_bad_input(s, model)
        test_limits(model)
        test_unsent(model)
        test_sigterm(model)
    except Exception as e:  # a crash counts as a failure, with its reason
        import traceback
        ok(False, "test script raised", traceback.format_exc())
    finally:
        for srv in SERVERS:
            srv.stop()
    print(f"1..{N}")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
