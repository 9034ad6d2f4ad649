#!/usr/bin/env python3
"""Each model family's forward pass against its NumPy reference (reference.py, written from the
Hugging Face model definitions), on small random-weight GGUFs that `tokenloom mkmodel --arch`
writes with llama.cpp's keys and tensor names. Prints TAP.

Per case and per kernel ISA this CPU has (scalar, avx2, avx512), with the engine's logits from
tests/models/dump_logits (the real batched forward pass):
  - every position's logits within TOL of the reference: max |engine - ref| over the vocabulary,
    relative to that position's max |ref| (f32 engine, f64 reference; measured ~1e-6);
  - greedy choices equal: the argmax of every position is the reference's;
  - batch invariance: the prompt as one chunk and token by token inside a batch with another
    sequence give bit-identical logits;
and with 8 threads instead of 2 the same bits again.
And once per case, the negative controls: the reference with one conversion or family fact
wrong (the Q/K permutation, q/k norms, NoPE layers, granite's multipliers) must miss the engine
by more than CONTROL_MIN, which proves the case exercises that fact.

Weights are N(0, 0.1^2) (--weight-std 0.1; granite 0.3), not mkmodel's default 0.02, so that
attention is sharp enough for RoPE and the attention scale to move the logits well past the
tolerance."""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402
from gguf_reader import GGUF, write_gguf  # noqa: E402

BUILD = os.environ.get("BUILD", "build")
BIN = os.environ.get("TL_BIN", f"{BUILD}/tokenloom")
DUMP = f"{BUILD}/tests/models/dump_logits"
SHARED = os.environ.get("TL_SHARED", "../shared")
TOKENS = [1, 403, 407, 261, 378, 432, 383, 286, 17, 511, 0, 376, 42, 300]
TOL = 1e-4
CONTROL_MIN = 1e-2
ISAS = ["scalar", "avx2", "avx512"]
SHAPE = ["--dim", "64", "--heads", "4", "--kv-heads", "2", "--ff", "96", "--layers", "3"]

# name, mkmodel arguments, negative controls (reference knobs)
CASES = [
    ("llama", ["--arch", "llama"] + SHAPE, ["wrong_permutation"]),
    ("qwen2", ["--arch", "qwen2"] + SHAPE, ["wrong_permutation", "no_bias"]),
    ("qwen3", ["--arch", "qwen3", "--head-dim", "32"] + SHAPE,
     ["wrong_permutation", "no_qk_norm", "qk_norm_weights_ignored"]),
    ("qwen3-bf16", ["--arch", "qwen3", "--type", "bf16"] + SHAPE, ["no_qk_norm"]),
    # granite's attention multiplier (1/64) flattens attention: stronger weights keep RoPE visible
    ("granite", ["--arch", "granite", "--weight-std", "0.3"] + SHAPE,
     ["wrong_permutation", "no_embedding_multiplier", "no_residual_multiplier",
      "no_attention_multiplier", "no_logits_scaling"]),
    ("smollm3", ["--arch", "smollm3"] + SHAPE[:-1] + ["8"], ["wrong_permutation",
                                                         "rope_every_layer"]),
    # granite with rope.scaling.finetuned = false (set by rewriting the file): no RoPE at all
    ("granite-nope", ["--arch", "granite", "--weight-std", "0.3"] + SHAPE, ["rope_every_layer"]),
    # Phi-3: fused qkv and gate+up, NEOX; the control takes the halves of gate_up the wrong way
    ("phi3", ["--arch", "phi3"] + SHAPE, ["wrong_permutation", "swapped_gate_up"]),
    # Llama 3.1's "llama3" RoPE scaling (rope_freqs.weight), factor 8 over an original context
    # of 16 so that most of the 16-wide heads' frequencies are scaled at these positions
    ("llama-rope3", ["--arch", "llama", "--rope-llama3", "8,16"] + SHAPE, ["no_rope_scaling"]),
    # Mixtral-style: llama with llama.expert_count (2 of 8 experts, as Mixtral 8x7B)
    ("llama-moe", ["--arch", "llama", "--experts", "8", "--experts-used", "2"] + SHAPE,
     ["wrong_permutation", "no_topk_renorm"]),
    # Qwen3-30B-A3B's routing (8 of 128 experts) scaled down: 4 of 16, expert width 32
    ("qwen3moe", ["--arch", "qwen3moe", "--experts", "16", "--experts-used", "4",
                  "--expert-ff", "32"] + SHAPE, ["no_qk_norm", "no_topk_renorm"]),
    # Q8_0 experts (packed, int8 kernels): the engine quantizes activations to 8 bits, hence
    # TOL_Q8 (measured 1.8e-2); the reference reads the same dequantized weights
    ("qwen3moe-q8_0", ["--arch", "qwen3moe", "--type", "q8_0", "--experts", "16",
                       "--experts-used", "4", "--expert-ff", "32"] + SHAPE, ["no_topk_renorm"]),
    # Gemma 2: window 5 on layers 0 and 2 (of 3) over 14 tokens, soft-caps small enough to bite
    # (attention 2, final 5); norms near 1 in the file (1 + w), so adding HF's 1 twice shows
    ("gemma2", ["--arch", "gemma2", "--sliding-window", "5", "--softcap", "2,5"] + SHAPE,
     ["wrong_permutation", "norm_plus_one_twice", "no_embd_normalizer", "no_attn_softcap",
      "no_final_softcap", "no_sliding_window", "silu_not_gelu"]),
    # Gemma 3: 7 layers (0-4 and 6 slide with window 5 and RoPE base 10000, 5 is global with
    # base 1e6), q/k norms stored as 1 + w; no soft-capping
    ("gemma3", ["--arch", "gemma3", "--sliding-window", "5"] + SHAPE[:-1] + ["7"],
     ["wrong_permutation", "norm_plus_one_twice", "no_qk_norm", "no_sliding_window",
      "global_rope_base_everywhere"]),
]
TOL_Q8 = 5e-2
# What the reference is told that the GGUF does not say (HF config values).
REF_ARGS = {"llama-rope3": dict(rope_scaling=dict(factor=8.0, low_freq_factor=1.0,
                                                  high_freq_factor=4.0, old_context_len=16))}

n = 0
failures = 0


def result(ok, name, *notes):
    global n, failures
    n += 1
    print(f"{'ok' if ok else 'not ok'} {n} - {name}")
    for line in notes:
        if line:
            print(f"# {line}")
    if not ok:
        failures += 1


def rel_err(a, b):
    return float(np.max(np.max(np.abs(a - b), axis=1) / np.max(np.abs(b), axis=1)))


def engine_logits(path, isa, n_vocab, threads=2):
    out = path + f".{isa}.f32"
    p = subprocess.run([DUMP, path, out, isa] + [str(t) for t in TOKENS], capture_output=True,
                       text=True, env=dict(os.environ, TL_DUMP_THREADS=str(threads)))
    if p.returncode == 3:
        return None, None, "not on this CPU"
    if p.returncode != 0:
        return None, None, p.stderr.strip()
    a = np.fromfile(out, dtype=np.float32).reshape(2, len(TOKENS), n_vocab)
    os.unlink(out)
    return a[0], a[1], None


def run_case(tmp, name, args, controls):
    path = os.path.join(tmp, f"{name}.gguf")
    tok = os.path.join(SHARED, "models", "stories260K.gguf")
    std = [] if "--weight-std" in args else ["--weight-std", "0.1"]
    p = subprocess.run([BIN, "mkmodel", "-o", path, "--seed", "7", "--tokenizer-from", tok] + std +
                       args, capture_output=True, text=True)
    result(p.returncode == 0, f"{name}: mkmodel {' '.join(args)}", p.stderr.strip())
    if p.returncode:
        return
    if name == "granite-nope":
        g = GGUF(path)
        write_gguf(path, g, set_keys={"granite.rope.scaling.finetuned": ("bool", False)})
    tol = TOL_Q8 if "q8_0" in args else TOL
    ties = []
    ref_args = REF_ARGS.get(name, {})
    ref = reference.forward(path, TOKENS, ties=ties, **ref_args)
    if ties and tol == TOL:
        gap = min(ties)
        result(gap > 1e-4, f"{name}: no near-tie in the routing (an f32/f64 difference could "
               "pick another expert)", f"smallest gap {gap:.2e}")
    chunk_any = None
    if tol != TOL:  # quantized activations: a near-tie may pick another expert than the f64 one
        print(f"# {name}: tolerance {tol:g}; smallest routing gap {min(ties or [1.0]):.2e}")
    for isa in ISAS:
        chunk, single, err = engine_logits(path, isa, ref.shape[1])
        if err == "not on this CPU":
            print(f"# {name} [{isa}]: skipped, not on this CPU")
            continue
        if err:
            result(False, f"{name} [{isa}]: engine runs", err)
            continue
        chunk_any = chunk
        e = rel_err(chunk, ref)
        result(e <= tol, f"{name} [{isa}]: logits of {len(TOKENS)} positions within {tol:g} of "
               f"the reference", f"max relative error {e:.2e}")
        ok = bool(np.all(np.argmax(chunk, axis=1) == np.argmax(ref, axis=1)))
        result(ok, f"{name} [{isa}]: greedy choice of every position equals the reference's")
        result(np.array_equal(chunk, single), f"{name} [{isa}]: one chunk == token by token in a "
               "noisy batch, bit for bit")
    if chunk_any is None:
        return
    # Another thread count (MoE: 8 threads > the experts a token uses, so single-token steps take
    # the pooled path instead of sharing experts out among the threads): the same bits.
    chunk8, single8, err = engine_logits(path, "default", ref.shape[1], threads=8)
    result(err is None and np.array_equal(chunk8, chunk_any) and np.array_equal(single8, chunk_any),
           f"{name}: 8 threads == 2 threads, bit for bit", err or "")
    for knob in controls:
        miss = rel_err(chunk_any, reference.forward(path, TOKENS, knobs=(knob,), **ref_args))
        result(miss >= CONTROL_MIN, f"{name}: control '{knob}' misses the engine",
               f"by {miss:.2e}")


def main():
    for need in (BIN, DUMP):
        if not os.access(need, os.X_OK):
            print("1..1")
            print(f"not ok 1 - {need} is missing (make all {DUMP})")
            return 1
    with tempfile.TemporaryDirectory() as tmp:
        for name, args, controls in CASES:
            run_case(tmp, name, args, controls)
    print(f"1..{n}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
