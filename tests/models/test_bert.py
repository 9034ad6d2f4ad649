#!/usr/bin/env python3
"""The `bert` encoder (embedding models) against a NumPy reference written from Hugging Face
transformers' modeling_bert.py (BertEmbeddings, BertSelfAttention, BertSelfOutput,
BertIntermediate, BertOutput: post-LayerNorm, exact erf GELU, bidirectional attention with an
all-ones mask, learned absolute positions, token type 0) plus sentence-transformers' pooling
(mean over tokens, CLS = the first token, last token) and L2 normalisation. The reference reads
the GGUF itself (gguf_reader.py) in float64; the engine side is tests/models/dump_embed.c
(tl_model_embed).

Random-weight files from `tokenloom mkmodel --arch bert` (its built-in WordPiece vocabulary).
Checked (F32 files; F16 within TOL too, Q8_0 within 2e-2, measured 5e-3 .. 8e-3): every input and
pooling within TOL = 1e-5 (max abs difference of the normalised
vectors, relative to the largest element for raw ones; measured <= 9e-7), unnormalised too;
negative controls (the reference without token types, without positions, with a causal mask,
without the LayerNorm biases: misses of 8e-2 .. 0.2; with tanh GELU instead of erf: 4.4e-5, ~90x
the engine's worst error) miss the engine by more than 4 x TOL, so each fact is exercised; bad inputs and bad files give one clear error line.
Prints TAP."""
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_reader import GGUF, write_gguf  # noqa: E402

BUILD = os.environ.get("BUILD", "build")
BIN = os.environ.get("TL_BIN", f"{BUILD}/tokenloom")
DUMP = f"{BUILD}/tests/models/dump_embed"
SHARED = os.environ.get("TL_SHARED", "../shared")
CTX = 48
SHAPE = ["--dim", "64", "--heads", "4", "--ff", "128", "--layers", "3", "--ctx", str(CTX),
         "--weight-std", "0.3"]
TOL = 1e-5
POOL = {"mean": 1, "cls": 2, "last": 3}


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_erf(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def reference(g, ids, pooling, normalize, ctl=None, types=None):
    """BertModel's last_hidden_state, pooled. ctl: a negative control (a fact left out).
    types: each token's type (None: all 0)."""
    t = g.tensor
    eps = g.kv["bert.attention.layer_norm_epsilon"]
    n_head = g.kv["bert.attention.head_count"]
    n = len(ids)
    x = t("token_embd.weight")[ids]
    if ctl != "no_pos":
        x = x + t("position_embd.weight")[:n]
    if ctl != "no_types":
        x = x + t("token_types.weight")[types if types is not None else 0]
    nb = ctl == "no_ln_bias"
    x = layer_norm(x, t("token_embd_norm.weight"), 0 if nb else t("token_embd_norm.bias"), eps)
    d = x.shape[1]
    hd = d // n_head
    for il in range(g.kv["bert.block_count"]):
        def lin(name, h):
            return h @ t(f"blk.{il}.{name}.weight").T + t(f"blk.{il}.{name}.bias")
        q, k, v = (lin(nm, x).reshape(n, n_head, hd).transpose(1, 0, 2)
                   for nm in ("attn_q", "attn_k", "attn_v"))
        s = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
        if ctl == "causal":
            s = s + np.triu(np.full((n, n), -np.inf), 1)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        a = (p @ v).transpose(1, 0, 2).reshape(n, d)
        x = layer_norm(x + lin("attn_output", a), t(f"blk.{il}.attn_output_norm.weight"),
                       0 if nb else t(f"blk.{il}.attn_output_norm.bias"), eps)
        h = (gelu_tanh if ctl == "gelu_tanh" else gelu_erf)(lin("ffn_up", x))
        x = layer_norm(x + lin("ffn_down", h), t(f"blk.{il}.layer_output_norm.weight"),
                       0 if nb else t(f"blk.{il}.layer_output_norm.bias"), eps)
    e = {1: x.mean(0), 2: x[0], 3: x[-1]}[pooling]
    return e / np.linalg.norm(e) if normalize else e


def engine(path, ids, pooling, normalize, tmp):
    out = os.path.join(tmp, "e.f32")
    p = subprocess.run([DUMP, path, out, pooling, "1" if normalize else "0"]
                       + [str(i) for i in ids], capture_output=True, text=True)
    if p.returncode != 0:
        return None, p.stderr.strip()
    return np.fromfile(out, np.float32).astype(np.float64), ""


def main():
    n = 0
    failed = 0

    def result(ok, name, note=""):
        nonlocal n, failed
        n += 1
        print(f"{'ok' if ok else 'not ok'} {n} - {name}")
        if note:
            print(f"# {note}")
        failed += not ok

    rng = np.random.default_rng(21)
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for pool in ("mean", "cls", "last"):
            path = os.path.join(tmp, f"bert-{pool}.gguf")
            p = subprocess.run([BIN, "mkmodel", "-o", path, "--arch", "bert", "--pooling", pool,
                                "--seed", str(7 + len(files))] + SHAPE,
                               capture_output=True, text=True)
            result(p.returncode == 0, f"mkmodel --arch bert --pooling {pool}", p.stderr.strip())
            files[pool] = path
        g = GGUF(files["mean"])
        vocab = g.kv["tokenizer.ggml.tokens"]
        result(g.kv["tokenizer.ggml.model"] == "bert" and
               [vocab[i] for i in (0, 100, 101, 102, 103)] ==
               ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] and
               g.kv["bert.attention.causal"] is False and g.kv["bert.pooling_type"] == 1,
               "the file: WordPiece vocab with BERT's special ids, causal false, pooling mean")
        info = subprocess.run([BIN, "info", "-m", files["cls"]], capture_output=True, text=True)
        rows = {ln[:22].strip(): ln[22:].strip() for ln in info.stdout.splitlines()}
        result(rows.get("architecture") == "bert" and rows.get("pooling type") == "2" and
               rows.get("causal attention") == "false" and rows.get("layer norm eps") == "1e-12",
               "tokenloom info shows bert's pooling type, causal flag and LayerNorm epsilon",
               str({k: rows.get(k) for k in ("pooling type", "causal attention", "layer norm eps")}))
        n_vocab = len(vocab)
        inputs = [[101], [101, 102], [101, 110, 120, 130, 102]]
        inputs += [[101] + list(rng.integers(104, n_vocab, size=k)) + [102] for k in (9, 20)]
        inputs += [list(rng.integers(0, n_vocab, size=CTX))]
        worst = 0.0
        for pool, path in files.items():
            gp = GGUF(path)
            for ids in inputs:
                for mode, normalize in (("file", True), (pool, False)):
                    ref = reference(gp, ids, POOL[pool], normalize)
                    got, err = engine(path, ids, mode, normalize, tmp)
                    diff = float(np.max(np.abs(got - ref))) if got is not None else math.inf
                    scale = 1.0 if normalize else float(np.max(np.abs(ref)))
                    worst = max(worst, diff / scale)
                    result(diff <= TOL * scale,
                           f"{pool} pooling ({mode}, {'normalised' if normalize else 'raw'}), "
                           f"{len(ids)} tokens: within {TOL}", err or f"max diff {diff:.3g}")
        print(f"# worst relative difference {worst:.3g} (tolerance {TOL})")
        # Other weight types: F16 (exact in the reference; the engine's f32 sums) and Q8_0
        # (the engine quantizes activations to 8 bits, hence the looser bound).
        for wtype, tol in (("f16", TOL), ("q8_0", 2e-2)):
            path = os.path.join(tmp, f"bert-{wtype}.gguf")
            p = subprocess.run([BIN, "mkmodel", "-o", path, "--arch", "bert", "--type", wtype]
                               + SHAPE, capture_output=True, text=True)
            gt = GGUF(path)
            for ids in inputs[2:5]:
                got, err = engine(path, ids, "file", True, tmp)
                diff = (float(np.max(np.abs(got - reference(gt, ids, 1, True))))
                        if got is not None else math.inf)
                result(p.returncode == 0 and diff <= tol,
                       f"{wtype} weights, {len(ids)} tokens: within {tol}",
                       err or p.stderr.strip() or f"max diff {diff:.3g}")
        # Another pooling than the file's, asked for by name.
        ids = inputs[3]
        got, err = engine(files["mean"], ids, "cls", True, tmp)
        ref = reference(g, ids, 2, True)
        result(got is not None and np.max(np.abs(got - ref)) <= TOL,
               "cls pooling asked for on a mean-pooling file", err)
        # Token types: a cross-encoder's pair, [CLS] a [SEP] as type 0, b [SEP] as type 1.
        ids, types = inputs[4], [0] * 8 + [1] * (len(inputs[4]) - 8)
        out = os.path.join(tmp, "t.f32")
        p = subprocess.run([DUMP, files["cls"], out, "file", "1"]
                           + [f"{i}/{ty}" for i, ty in zip(ids, types)],
                           capture_output=True, text=True)
        got = np.fromfile(out, np.float32) if p.returncode == 0 else None
        ref = reference(GGUF(files["cls"]), ids, 2, True, types=types)
        diff = float(np.max(np.abs(got - ref))) if got is not None else math.inf
        miss = float(np.max(np.abs(ref - reference(GGUF(files["cls"]), ids, 2, True))))
        result(diff <= TOL and miss > 4 * TOL,
               "token types 0 and 1 (a sentence pair): within TOL, and type 1 matters",
               p.stderr.strip() or f"max diff {diff:.3g}, all-0 types differ by {miss:.3g}")
        # `tokenloom embed`: the text's WordPiece ids ([CLS] ... [SEP], from `tokenloom tokenize`)
        # through the same pass, printed as JSON.
        text = "Hello world, the quick brown fox jumps over the lazy dog!"
        tk = subprocess.run([BIN, "tokenize", "-m", files["mean"]], input=text,
                            capture_output=True, text=True)
        tids = [int(x) for x in tk.stdout.split()]
        for args, pool, normalize in (([], 1, True), (["--pooling", "cls", "--no-normalize"], 2,
                                                      False)):
            p = subprocess.run([BIN, "embed", "-m", files["mean"]] + args, input=text,
                               capture_output=True, text=True)
            try:
                got = np.array(json.loads(p.stdout))
                ref = reference(g, tids, pool, normalize)
                diff = float(np.max(np.abs(got - ref))) / (1 if normalize else np.max(np.abs(ref)))
            except ValueError:
                diff = math.inf
            result(len(tids) > 4 and tids[0] == 101 and tids[-1] == 102 and diff <= TOL,
                   f"tokenloom embed {' '.join(args)}: [CLS] ... [SEP] ids, within TOL",
                   p.stderr.strip() or f"ids {tids}, max diff {diff:.3g}")
        p = subprocess.run([BIN, "embed", "-m", os.path.join(SHARED, "models", "stories260K.gguf")],
                           input="hi", capture_output=True, text=True)
        result(p.returncode == 1 and p.stderr.strip().endswith("is not an embedding model"),
               "tokenloom embed on a decoder: not an embedding model", p.stderr.strip())
        # The thread count does not change a bit (tl_matmul's contract; the rest is serial).
        for path in (files["mean"], os.path.join(tmp, "bert-q8_0.gguf")):
            outs = []
            for th in ("1", "3"):
                out = os.path.join(tmp, f"th{th}.f32")
                subprocess.run([DUMP, path, out, "file", "1"] + [str(i) for i in inputs[5]],
                               env=dict(os.environ, TL_DUMP_THREADS=th))
                outs.append(open(out, "rb").read() if os.path.exists(out) else b"")
            result(outs[0] == outs[1] and len(outs[0]) == 4 * 64,
                   f"{os.path.basename(path)}: 1 and 3 threads give the same bits")
        ids = inputs[3]
        # Negative controls: each fact left out of the reference misses the engine by far.
        got, _ = engine(files["mean"], ids, "file", True, tmp)
        for ctl in ("no_types", "no_pos", "causal", "gelu_tanh", "no_ln_bias"):
            miss = float(np.max(np.abs(got - reference(g, ids, 1, True, ctl))))
            result(miss > 4 * TOL, f"control: the reference {ctl} misses the engine",
                   f"by {miss:.3g}")
        # Bad inputs: one line, exit 1.
        for what, args, needle in [
            ("too long", ["file", "1"] + ["101"] * (CTX + 1), f"{CTX + 1} tokens, expected 1..{CTX}"),
            ("an id outside the vocabulary", ["file", "1", "101", str(n_vocab)],
             f"token id {n_vocab} outside the vocabulary"),
            ("token type 2", ["file", "1", "101", "105/2"], "token type 2 outside 0..1"),
        ]:
            p = subprocess.run([DUMP, files["mean"], os.path.join(tmp, "x.f32")] + args,
                               capture_output=True, text=True)
            lines = p.stderr.strip().splitlines()
            result(p.returncode == 1 and len(lines) == 1 and needle in lines[0],
                   f"{what}: one clear error", p.stderr.strip())
        decoder = os.path.join(SHARED, "models", "stories260K.gguf")
        p = subprocess.run([DUMP, decoder, os.path.join(tmp, "x.f32"), "file", "1", "1", "2"],
                           capture_output=True, text=True)
        result(p.returncode == 1 and "architecture llama is not an embedding model" in p.stderr,
               "a decoder asked for embeddings: not an embedding model", p.stderr.strip())
        p = subprocess.run([BIN, "generate", "-m", files["mean"], "-p", "hello", "-n", "2"],
                           capture_output=True, text=True)
        result(p.returncode == 1 and "bert is an embedding model" in p.stderr,
               "generate on a bert file: refused, naming the architecture", p.stderr.strip())
        # Bad files.
        for name, edits, needle in [
            ("without a layer's ffn_up bias", dict(drop_tensors=["blk.1.ffn_up.bias"]),
             "missing tensor blk.1.ffn_up.bias"),
            ("without token_types", dict(drop_tensors=["token_types.weight"]),
             "missing tensor token_types.weight"),
            ("position_embd shorter than the context",
             dict(reshape={"position_embd.weight": [64, CTX // 2]}),
             f"tensor position_embd.weight has shape [64, {CTX // 2}], expected [64, {CTX}]"),
            ("attn_q of the wrong shape", dict(reshape={"blk.2.attn_q.weight": [64, 32]}),
             "tensor blk.2.attn_q.weight has shape [64, 32], expected [64, 64]"),
            ("a LayerNorm bias of the wrong size",
             dict(reshape={"blk.0.layer_output_norm.bias": [32]}),
             "tensor blk.0.layer_output_norm.bias has 32 elements, expected 64"),
            ("without layer_norm_epsilon", dict(drop_keys=["bert.attention.layer_norm_epsilon"]),
             "missing or invalid key bert.attention.layer_norm_epsilon"),
            ("causal", dict(set_keys={"bert.attention.causal": ("bool", True)}),
             "key bert.attention.causal is true"),
            ("pooling_type 9", dict(set_keys={"bert.pooling_type": ("u32", 9)}),
             "key bert.pooling_type is 9, expected 0..4"),
        ]:
            path = os.path.join(tmp, "bad.gguf")
            write_gguf(path, g, **edits)
            p = subprocess.run([DUMP, path, os.path.join(tmp, "x.f32"), "file", "1", "101"],
                               capture_output=True, text=True)
            lines = p.stderr.strip().splitlines()
            result(p.returncode == 1 and len(lines) == 1 and f"{path}: " in lines[0]
                   and needle in lines[0], f"bad file {name}: one clear error", p.stderr.strip())
        for pooling, needle in (("0", "pooling 'none' is not supported"),
                                ("4", "pooling 'rank' is not supported")):
            path = os.path.join(tmp, "pool.gguf")
            write_gguf(path, g, set_keys={"bert.pooling_type": ("u32", int(pooling))})
            p = subprocess.run([DUMP, path, os.path.join(tmp, "x.f32"), "file", "1", "101"],
                               capture_output=True, text=True)
            result(p.returncode == 1 and needle in p.stderr,
                   f"pooling_type {pooling} without an override: refused", p.stderr.strip())
    print(f"1..{n}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
