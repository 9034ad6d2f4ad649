#!/usr/bin/env python3
"""/metrics against an independent count, printed as TAP.

Two `tokenloom serve` processes, one on the shared F32 stories260K model and one on a Q8_0
model `tokenloom mkmodel` makes into a temporary folder, each get one known request (a prompt
of n token ids, m tokens generated with ignore_eos). The counters tokenloom:engine_ops_total and
tokenloom:engine_bytes_read_total must grow by exactly what the model's shapes say, computed
here from the GGUF file's own tensor table (a small reader below, not tokenloom's):

  - a single request runs one prefill step (n tokens, one logits row) and m - 1 decode steps,
    so n + m - 1 tokens go through every layer matrix and m rows through the output matrix;
  - each matmul is 2 * n_in * n_out ops per token: int8 ops for Q8_0 weights, f32 FLOPs for
    F32 weights; attention is 4 * n_head * head_dim * n_ctx FLOPs per token and layer, with
    n_ctx = position + 1;
  - each step reads every layer matrix once (n_out rows of its row bytes), the output matrix
    and one embedding row per token; attention reads K and V (F16: 2 * head_dim bytes per KV
    head) of every position of each token's context in every layer.

The same scrape must label every tokenloom series with model_name, export tokenloom:build_info
(version, revision, isa) and tokenloom:cache_config_info, the process_* metrics, and (with
ceilings measured into a private cache folder) the utilization and machine_* gauges; with
--no-ceilings those gauges are absent. A corrupt cache file is measured again and rewritten.
"""

import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploylib as dl  # noqa: E402

tap = dl.Tap()

# ---- a minimal GGUF reader: metadata and the tensor table ------------------------------------

GGUF_F32, GGUF_F16, GGUF_Q8_0 = 0, 1, 8
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
          12: "d"}


def read_gguf(path):
    with open(path, "rb") as f:
        data = f.read()
    off = 0

    def take(fmt):
        nonlocal off
        v = struct.unpack_from("<" + fmt, data, off)
        off += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal off
        n = take("Q")
        s = data[off:off + n].decode()
        off += n
        return s

    def value(t):
        if t in SCALAR:
            return take(SCALAR[t])
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        raise ValueError("gguf value type %d" % t)

    assert data[:4] == b"GGUF"
    off = 4
    take("I")  # version
    n_tensors, n_kv = take("Q"), take("Q")
    meta = {}
    for _ in range(n_kv):
        k = string()
        meta[k] = value(take("I"))
    tensors = {}
    for _ in range(n_tensors):
        name = string()
        dims = [take("Q") for _ in range(take("I"))]
        ttype = take("I")
        take("Q")  # offset
        tensors[name] = (dims, ttype)
    return meta, tensors


def row_bytes(ttype, n):
    return {GGUF_F32: 4 * n, GGUF_F16: 2 * n, GGUF_Q8_0: 34 * n // 32}[ttype]


def expected_work(path, n, m):
    """(int8 ops, f32 FLOPs, weight bytes, KV bytes) of one request: n prompt tokens, m made."""
    meta, tensors = read_gguf(path)
    arch = meta["general.architecture"]
    n_layer = meta[arch + ".block_count"]
    n_embd = meta[arch + ".embedding_length"]
    n_head = meta[arch + ".attention.head_count"]
    n_head_kv = meta.get(arch + ".attention.head_count_kv", n_head)
    head_dim = n_embd // n_head
    fed = n + m - 1  # tokens through the layers
    ctx_sum = fed * (fed + 1) // 2  # positions 0..fed-1 attend to pos + 1 each
    int8 = flops = wbytes = 0

    def matmul(name, tokens, steps):
        nonlocal int8, flops, wbytes
        (n_in, n_out), ttype = tensors[name]
        ops = 2 * n_in * n_out * tokens
        if ttype == GGUF_Q8_0:
            int8 += ops
        else:
            flops += ops
        wbytes += steps * n_out * row_bytes(ttype, n_in)

    for il in range(n_layer):
        for w in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"):
            matmul("blk.%d.%s.weight" % (il, w), fed, m)
    matmul("output.weight" if "output.weight" in tensors else "token_embd.weight", m, m)
    (emb_in, _), emb_type = tensors["token_embd.weight"]
    wbytes += fed * row_bytes(emb_type, emb_in)
    flops += 4 * n_head * head_dim * ctx_sum * n_layer
    kv = 2 * (2 * head_dim) * n_head_kv * ctx_sum * n_layer
    return int8, flops, wbytes, kv


# ---- the server side ---------------------------------------------------------------------------

def scrape(url):
    status, body = dl.http_get(url + "/metrics")
    return body.decode() if status == 200 else ""


def sample(text, series):
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def start(tmp, model, name, flags, cache):
    port = dl.free_port()
    log = open(os.path.join(tmp, name + ".log"), "wb")
    env = dict(os.environ, XDG_CACHE_HOME=cache, TOKENLOOM_LOG="info")
    proc = subprocess.Popen([dl.TL_BIN, "serve", "-m", model, "--port", str(port), "-t", "1"] +
                            flags, stdout=log, stderr=subprocess.STDOUT, env=env)
    log.close()
    url = "http://127.0.0.1:%d" % port
    end = time.monotonic() + 60
    while time.monotonic() < end and proc.poll() is None:
        if dl.http_get(url + "/health", timeout=2)[0] == 200:
            return proc, url
        time.sleep(0.1)
    return proc, None


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def check_exposition(text, model_name, with_ceilings, what):
    bad = [ln for ln in text.splitlines()
           if ln.startswith(("tokenloom:", "vllm:"))
           and 'model_name="%s"' % model_name not in ln.split(" ")[0]]
    tap.check(text and not bad, "%s: every tokenloom:/vllm: series has model_name" % what,
              "\n".join(bad[:10]))
    m = re.search(r'^tokenloom:build_info\{version="([^"]+)",revision="([^"]+)",isa="([^"]+)",'
                  r'model_name="[^"]*"\} 1$', text, re.M)
    tap.check(m and m.group(3) in ("scalar", "avx2", "avx512"),
              "%s: tokenloom:build_info{version,revision,isa}" % what, m and m.groups())
    tap.check(re.search(r'^tokenloom:cache_config_info\{block_size="16",num_blocks="[1-9][0-9]*",'
                        r'kv_type="f16",model_name="[^"]*"\} 1$', text, re.M),
              "%s: tokenloom:cache_config_info{block_size,num_blocks,kv_type}" % what)
    proc_names = ["process_resident_memory_bytes", "process_virtual_memory_bytes",
                  "process_cpu_seconds_total", "process_open_fds", "process_max_fds",
                  "process_start_time_seconds"]
    missing = [p for p in proc_names if sample(text, p) is None]
    start_s = sample(text, "process_start_time_seconds") or 0
    tap.check(not missing and abs(start_s - time.time()) < 600,
              "%s: process_* metrics (start time %.0f)" % (what, start_s), missing)
    gauges = ["tokenloom:compute_utilization", "tokenloom:memory_bandwidth_utilization",
              "tokenloom:machine_peak_int8_ops_per_second",
              "tokenloom:machine_peak_fp32_flops_per_second",
              "tokenloom:machine_memory_read_bytes_per_second"]
    present = [g for g in gauges if sample(text, '%s{model_name="%s"}' % (g, model_name))
               is not None]
    if with_ceilings:
        peaks = [sample(text, '%s{model_name="%s"}' % (g, model_name)) for g in gauges[2:]]
        tap.check(present == gauges and all(p and p > 0 for p in peaks),
                  "%s: utilization and machine ceiling gauges present, peaks > 0" % what,
                  present)
    else:
        tap.check(not present, "%s --no-ceilings: no utilization or machine_* gauges" % what,
                  present)
    tap.check(sample(text, 'tokenloom:engine_busy_ratio{model_name="%s"}' % model_name)
              is not None, "%s: tokenloom:engine_busy_ratio present" % what)


def check_work(url, model, model_name, what):
    before = scrape(url)
    prompt = [1] + [(7 * i) % 200 + 20 for i in range(19)]  # 20 token ids
    body = json.dumps({"model": model_name, "prompt": prompt, "max_tokens": 12,
                       "ignore_eos": True, "temperature": 0})
    res = dl.post(url, "/v1/completions", json.loads(body))
    # The reply can leave before the engine publishes its last step's counters (they are
    # published at the end of the step that delivered it): wait (bounded) for that step.
    steps_series = 'tokenloom:engine_steps_total{model_name="%s"}' % model_name
    end = time.monotonic() + 10
    while True:
        after = scrape(url)
        if (not res.ok or time.monotonic() > end or
                sample(after, steps_series) - sample(before, steps_series) >= res.tokens):
            break
        time.sleep(0.05)
    if not tap.check(res.ok, "%s: the request succeeds" % what, res):
        return
    n, m = len(prompt), res.tokens
    want = dict(zip(("int8", "fp32", "weights", "kv"), expected_work(model, n, m)))
    series = {"int8": 'tokenloom:engine_ops_total{kind="int8",model_name="%s"}',
              "fp32": 'tokenloom:engine_ops_total{kind="fp32",model_name="%s"}',
              "weights": 'tokenloom:engine_bytes_read_total{kind="weights",model_name="%s"}',
              "kv": 'tokenloom:engine_bytes_read_total{kind="kv",model_name="%s"}'}
    got = {k: sample(after, s % model_name) - sample(before, s % model_name)
           for k, s in series.items()}
    steps = (sample(after, 'tokenloom:engine_steps_total{model_name="%s"}' % model_name) -
             sample(before, 'tokenloom:engine_steps_total{model_name="%s"}' % model_name))
    tap.note("%s: n=%d m=%d steps=%d want %s got %s" % (what, n, m, steps, want, got))
    tap.check(steps == m, "%s: one prefill step and m - 1 decode steps" % what, steps)
    for k in series:
        tap.check(abs(got[k] - want[k]) <= 1e-9 * max(1, want[k]),
                  "%s: %s grew by the shapes' count (%g)" % (what, k, want[k]),
                  "got %g" % got[k])
    dec = 'tokenloom:batch_decode_tokens_per_step_sum{model_name="%s"}' % model_name
    pre = 'tokenloom:batch_prefill_tokens_per_step_sum{model_name="%s"}' % model_name
    tap.check(sample(after, dec) - sample(before, dec) == m - 1 and
              sample(after, pre) - sample(before, pre) == n,
              "%s: batch histograms: %d decode tokens, %d prefill tokens" % (what, m - 1, n))


def check_stats(url, model_name, with_ceilings, what):
    """GET /stats (the dashboard's JSON) carries the same work counters and ceilings as
    /metrics on a quiet server, and the window's ratios only when the ceilings exist."""
    status, body = dl.http_get(url + "/stats")
    text = scrape(url)
    st = json.loads(body) if status == 200 else {}
    c, u = st.get("counters", {}), st.get("utilization", {})
    mn = 'model_name="%s"' % model_name
    pairs = [(c.get("int8_ops"), sample(text, 'tokenloom:engine_ops_total{kind="int8",%s}' % mn)),
             (c.get("fp32_flops"), sample(text, 'tokenloom:engine_ops_total{kind="fp32",%s}' % mn)),
             (c.get("kv_bytes_read"),
              sample(text, 'tokenloom:engine_bytes_read_total{kind="kv",%s}' % mn)),
             (c.get("decode_tokens"),
              sample(text, 'tokenloom:batch_decode_tokens_per_step_sum{%s}' % mn)),
             (c.get("step_sequences"),
              sample(text, 'tokenloom:batch_sequences_per_step_sum{%s}' % mn))]
    if with_ceilings:
        pairs.append((u.get("peak_int8_ops_per_s"),
                      sample(text, 'tokenloom:machine_peak_int8_ops_per_second{%s}' % mn)))
    tap.check(status == 200 and all(a is not None and a == b for a, b in pairs),
              "%s: /stats work counters and ceilings equal /metrics'" % what, pairs)
    has = "compute_ratio" in u and "memory_bandwidth_ratio" in u
    tap.check(has == with_ceilings and 0 <= u.get("busy_window_ratio", -1) <= 1,
              "%s: /stats utilization ratios %s" % (what, "present" if with_ceilings else
                                                     "absent without ceilings"), u)


def check_cache(tmp, model):
    """A corrupt ceilings cache file is ignored, measured again and rewritten."""
    cache = os.path.join(tmp, "cache-corrupt")
    proc, url = start(tmp, model, "corrupt1", [], cache)
    stop(proc)
    files = os.listdir(os.path.join(cache, "tokenloom")) if url else []
    if not tap.check(len(files) == 1, "ceilings cache: one file written", files):
        return
    path = os.path.join(cache, "tokenloom", files[0])
    good = open(path).read()
    tap.check(good.startswith("tokenloom ceilings v1\n") and "threads=1\n" in good,
              "ceilings cache: the file names its machine key", good)
    with open(path, "w") as f:
        f.write("tokenloom ceilings v1\ncpu=x\nint8_ops_per_s=banana\n")
    proc, url = start(tmp, model, "corrupt2", [], cache)
    text = scrape(url) if url else ""
    stop(proc)
    log = open(os.path.join(tmp, "corrupt2.log")).read()
    tap.check("(measured in" in log and "machine_peak_int8_ops_per_second" in text,
              "ceilings cache: a corrupt file is measured again", log[-1500:])
    tap.check(open(path).read().startswith("tokenloom ceilings v1\ncpu="),
              "ceilings cache: and rewritten whole")


def main():
    tmp = tempfile.mkdtemp(prefix="tl-metrics-work-")
    procs = []
    try:
        q8 = os.path.join(tmp, "tiny-q8.gguf")
        p = subprocess.run([dl.TL_BIN, "mkmodel", "--size", "260K", "--type", "q8_0", "--ff",
                            "192", "-o", q8], capture_output=True, text=True)
        if not tap.check(p.returncode == 0, "mkmodel makes a Q8_0 260K model", p.stderr):
            tap.finish()
        cache = os.path.join(tmp, "cache")
        for model, name, flags, ceil in ((dl.MODEL, "stories260K", [], True),
                                         (q8, "tiny-q8", ["--no-ceilings"], False)):
            what = "%s (%s)" % (name, "F32" if ceil else "Q8_0")
            proc, url = start(tmp, model, name, flags, cache)
            procs.append(proc)
            if not tap.check(url is not None, "%s: server starts" % what,
                             open(os.path.join(tmp, name + ".log")).read()[-1500:]):
                continue
            check_work(url, model, name, what)
            time.sleep(1.2)  # a window sample after the request
            check_exposition(scrape(url), name, ceil, what)
            check_stats(url, name, ceil, what)
            stop(proc)
        check_cache(tmp, dl.MODEL)
    finally:
        for proc in procs:
            stop(proc)
        subprocess.run(["rm", "-rf", tmp])
    tap.finish()


if __name__ == "__main__":
    main()
