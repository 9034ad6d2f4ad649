#!/usr/bin/env python3
"""Bad model files of the new families: each edit of a good `tokenloom mkmodel --arch` file
(written back by gguf_reader.write_gguf, which copies everything else byte for byte) must make
`tokenloom generate` exit 1 with exactly one stderr line that names the file and the key or
tensor at fault, never a crash; 80 seeded random edits (keys set to odd values, keys and tensors
dropped, tensors re-shaped) must never crash either. And `tokenloom info` shows each family's
own hyperparameters (head size, granite's multipliers) as the file holds them. Prints TAP."""
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_reader import GGUF, write_gguf  # noqa: E402

BUILD = os.environ.get("BUILD", "build")
BIN = os.environ.get("TL_BIN", f"{BUILD}/tokenloom")
SHARED = os.environ.get("TL_SHARED", "../shared")
SHAPE = ["--dim", "64", "--heads", "4", "--kv-heads", "2", "--ff", "96", "--layers", "2"]
SUPPORTED = "(supported: llama, qwen2, qwen3, qwen3moe, granite, smollm3, phi3, bert, gemma2, gemma3)"
MOE = ["--experts", "8", "--experts-used", "2", "--expert-ff", "32"]

# name, base arch, write_gguf edits, text the one error line must hold
CASES = [
    ("gemma2 with a window of 0", "gemma2",
     dict(set_keys={"gemma2.attention.sliding_window": ("u32", 0)}),
     "key gemma2.attention.sliding_window is 0, expected > 0"),
    ("gemma2 without a window", "gemma2", dict(drop_keys=["gemma2.attention.sliding_window"]),
     "missing or invalid key gemma2.attention.sliding_window"),
    ("gemma2 negative attention soft-cap", "gemma2",
     dict(set_keys={"gemma2.attn_logit_softcapping": ("f32", -50.0)}),
     "key gemma2.attn_logit_softcapping is -50, expected >= 0"),
    ("gemma2 without a post-FFN norm", "gemma2", dict(drop_tensors=["blk.1.post_ffw_norm.weight"]),
     "missing tensor blk.1.post_ffw_norm.weight"),
    ("gemma3 local RoPE base 0", "gemma3",
     dict(set_keys={"gemma3.rope.freq_base_swa": ("f32", 0.0)}),
     "key gemma3.rope.freq_base_swa is 0, expected > 0"),
    ("gemma3 without a q norm", "gemma3", dict(drop_tensors=["blk.0.attn_q_norm.weight"]),
     "missing tensor blk.0.attn_q_norm.weight"),
    ("gemma2 post-attention norm of the wrong size", "gemma2",
     dict(reshape={"blk.0.post_attention_norm.weight": [8]}),
     "tensor blk.0.post_attention_norm.weight has 8 elements, expected 64"),
    ("qwen3 without a k norm", "qwen3", dict(drop_tensors=["blk.1.attn_k_norm.weight"]),
     "missing tensor blk.1.attn_k_norm.weight"),
    ("qwen3 q norm of the wrong size", "qwen3", dict(reshape={"blk.0.attn_q_norm.weight": [8]}),
     "tensor blk.0.attn_q_norm.weight has 8 elements, expected 16"),
    ("qwen3 with experts", "qwen3", dict(set_keys={"qwen3.expert_count": ("u32", 8)}),
     "qwen3.expert_count 8"),
    ("granite without logit_scale", "granite", dict(drop_keys=["granite.logit_scale"]),
     "missing or invalid key granite.logit_scale"),
    ("granite logit_scale 0", "granite", dict(set_keys={"granite.logit_scale": ("f32", 0.0)}),
     "granite.logit_scale is 0, expected > 0"),
    ("granite negative residual_scale", "granite",
     dict(set_keys={"granite.residual_scale": ("f32", -1.0)}),
     "granite.residual_scale is -1, expected >= 0"),
    ("granite logit_scale of the wrong type", "granite",
     dict(set_keys={"granite.logit_scale": ("str", "8")}),
     "missing or invalid key granite.logit_scale"),
    ("an attention output bias", "smollm3",
     dict(rename={"blk.0.attn_q.weight": "blk.0.attn_output.bias"}),
     "tensor blk.0.attn_output.bias is not supported for architecture smollm3"),
    ("qwen3moe with 0 experts", "qwen3moe", dict(set_keys={"qwen3moe.expert_count": ("u32", 0)}),
     "key qwen3moe.expert_count is 0, expected 1..4096"),
    ("qwen3moe using more experts than it has", "qwen3moe",
     dict(set_keys={"qwen3moe.expert_used_count": ("u32", 9)}),
     "key qwen3moe.expert_used_count is 9, expected 1..expert_count (8)"),
    ("qwen3moe without expert_used_count", "qwen3moe",
     dict(drop_keys=["qwen3moe.expert_used_count"]),
     "missing or invalid key qwen3moe.expert_used_count"),
    ("qwen3moe without up experts", "qwen3moe", dict(drop_tensors=["blk.1.ffn_up_exps.weight"]),
     "missing tensor blk.1.ffn_up_exps.weight"),
    ("qwen3moe experts stacked 4 deep", "qwen3moe",
     dict(reshape={"blk.0.ffn_down_exps.weight": [32, 64, 4]}),
     "tensor blk.0.ffn_down_exps.weight has shape [32, 64, 4], expected 3 dimensions with 8 "
     "experts"),
    ("qwen3moe router of the wrong shape", "qwen3moe",
     dict(reshape={"blk.0.ffn_gate_inp.weight": [64, 4]}),
     "tensor blk.0.ffn_gate_inp.weight has shape [64, 4], expected [64, 8]"),
    ("a router in a dense model", "smollm3",
     dict(rename={"blk.1.attn_q.weight": "blk.1.ffn_gate_inp.weight"}),
     "tensor blk.1.ffn_gate_inp.weight is not supported for architecture smollm3"),
    ("rope_freqs of the wrong size", "llama-rope3", dict(reshape={"rope_freqs.weight": [4]}),
     "tensor rope_freqs.weight has 4 elements, expected 8"),
    ("a rope_freqs divisor of 0", "llama-rope3",
     dict(rename={"rope_freqs.weight": "x"}, add_zeros={"rope_freqs.weight": [8]}),
     "rope_freqs.weight[0] is 0, expected > 0"),
    ("LongRoPE factors", "llama-rope3",
     dict(rename={"rope_freqs.weight": "rope_factors_long.weight"}),
     "tensor rope_factors_long.weight (LongRoPE) is not supported"),
    ("phi3 attn_qkv of the wrong height", "phi3",
     dict(reshape={"blk.1.attn_qkv.weight": [64, 96]}),
     "tensor blk.1.attn_qkv.weight has 96 rows, expected 128"),
    ("phi3 ffn_up of n_ff rows only", "phi3", dict(reshape={"blk.0.ffn_up.weight": [64, 96]}),
     "tensor blk.0.ffn_up.weight has 96 rows, expected 192"),
    ("an unsupported architecture", "qwen3",
     dict(set_keys={"general.architecture": ("str", "mamba")}),
     f"architecture 'mamba' is not supported {SUPPORTED}"),
]

# arch, `tokenloom info` label, value
INFO = [
    ("qwen3", "key length", "16"),
    ("qwen3", "architecture", "qwen3"),
    ("granite", "embedding scale", "12"),
    ("granite", "residual scale", "0.22"),
    ("granite", "attention scale", "0.015625"),
    ("granite", "logit scale", "8"),
    ("smollm3", "architecture", "smollm3"),
    ("qwen3moe", "expert count", "8"),
    ("qwen3moe", "experts used", "2"),
    ("gemma2", "sliding window", "4096"),
    ("gemma2", "attention soft-cap", "50"),
    ("gemma2", "final soft-cap", "30"),
]


def main():
    n = 0
    failed = 0

    def result(ok, name, note=""):
        nonlocal n, failed
        n += 1
        print(f"{'ok' if ok else 'not ok'} {n} - {name}")
        if note and not ok:
            print(f"# {note}")
        failed += not ok

    tok = os.path.join(SHARED, "models", "stories260K.gguf")
    with tempfile.TemporaryDirectory() as tmp:
        base = {}
        for arch in ("qwen3", "granite", "smollm3", "qwen3moe", "llama-rope3", "phi3", "gemma2",
                     "gemma3"):
            path = os.path.join(tmp, f"{arch}.gguf")
            extra = {"qwen3moe": MOE, "llama-rope3": ["--rope-llama3", "8"]}.get(arch, [])
            p = subprocess.run([BIN, "mkmodel", "-o", path, "--arch", arch.split("-")[0],
                                "--tokenizer-from", tok] + SHAPE + extra,
                               capture_output=True, text=True)
            result(p.returncode == 0, f"mkmodel --arch {arch}", p.stderr.strip())
            base[arch] = GGUF(path)
            g = subprocess.run([BIN, "generate", "-m", path, "-p", "Once", "-n", "4", "--temp",
                                "0"], capture_output=True, text=True)
            result(g.returncode == 0, f"generate runs on the {arch} file", g.stderr.strip())
            info = subprocess.run([BIN, "info", "-m", path], capture_output=True, text=True)
            for a, label, value in INFO:
                if a != arch:
                    continue
                got = [ln[22:].strip() for ln in info.stdout.splitlines()
                       if ln.startswith(label + " ") and ln[:22].strip() == label]
                result(got == [value], f"info of the {arch} file: {label} = {value}", f"got {got}")
        for name, arch, edits, needle in CASES:
            path = os.path.join(tmp, "bad.gguf")
            write_gguf(path, base[arch], **edits)
            p = subprocess.run([BIN, "generate", "-m", path, "-p", "Once", "-n", "1"],
                               capture_output=True, text=True)
            lines = p.stderr.strip().splitlines()
            ok = (p.returncode == 1 and len(lines) == 1 and f"{path}: " in lines[0]
                  and needle in lines[0])
            result(ok, f"{name}: one clear error", f"exit {p.returncode}: {p.stderr.strip()}")
        # mkmodel's own refusals: exit 2 and one line saying what is wrong.
        for args, needle in [
            (["--arch", "mamba"], "unknown --arch 'mamba' (llama, qwen2, qwen3, qwen3moe"),
            (["--arch", "qwen2", "--experts", "4"], "--experts applies to --arch llama and "
             "qwen3moe"),
            (["--arch", "qwen3moe", "--experts", "2", "--experts-used", "3"],
             "--experts-used 3 is more than --experts 2"),
            (["--arch", "qwen3", "--dim", "64", "--heads", "4", "--head-dim", "15"],
             "the head size even"),
        ]:
            p = subprocess.run([BIN, "mkmodel", "-o", os.path.join(tmp, "x.gguf"),
                                "--tokenizer-from", tok] + args, capture_output=True, text=True)
            lines = p.stderr.strip().splitlines()
            result(p.returncode == 2 and len(lines) == 1 and needle in lines[0],
                   f"mkmodel {' '.join(args)}: exit 2, one line", f"exit {p.returncode}: "
                   f"{p.stderr.strip()}")
        # Random edits of the qwen3moe and gemma2 files (seeded): every hyperparameter key set
        # to a random u32 (0, 1, small, huge) or, for f32 keys (gemma2's soft-caps, rope and
        # eps), a random float (0, negative, NaN, inf), keys and tensors dropped, tensors
        # re-shaped. Each run must end with exit 0, or exit 1 and one error line (log lines
        # aside), never a signal.
        for arch, seed in (("qwen3moe", 20), ("gemma2", 21)):
            rng = random.Random(seed)
            src = base[arch]
            keys = [k for k, (vt, _) in src.raw_kv.items() if k.startswith(arch + ".") and vt == 4]
            fkeys = [k for k, (vt, _) in src.raw_kv.items()
                     if k.startswith(arch + ".") and vt == 6]
            names = list(src.tensors)
            crashes = []
            for i in range(80):
                kind = rng.randrange(5 if fkeys else 4)
                edits = {}
                if kind == 0:
                    v = rng.choice([0, 1, 2, 3, 7, 33, 4097, 65536, 2**31 - 1, 2**32 - 1])
                    edits["set_keys"] = {rng.choice(keys): ("u32", v)}
                elif kind == 1:
                    edits["drop_keys"] = rng.sample(keys + fkeys, rng.randint(1, 3))
                elif kind == 2:
                    edits["drop_tensors"] = rng.sample(names, rng.randint(1, 3))
                elif kind == 3:
                    name = rng.choice(names)
                    ne = list(src.tensors[name][0])
                    ne[rng.randrange(len(ne))] = rng.choice([1, 2, 7, 16, 33, 64])
                    edits["reshape"] = {name: ne}
                else:
                    v = rng.choice([0.0, -1.0, 1e-30, 1e30, float("nan"), float("inf")])
                    edits["set_keys"] = {rng.choice(fkeys): ("f32", v)}
                path = os.path.join(tmp, "fuzz.gguf")
                write_gguf(path, src, **edits)
                p = subprocess.run([BIN, "generate", "-m", path, "-p", "Once", "-n", "2"],
                                   capture_output=True, text=True)
                errors = [ln for ln in p.stderr.splitlines()
                          if ln.startswith("tokenloom generate:")]
                if p.returncode not in (0, 1) or (p.returncode == 1 and len(errors) != 1):
                    crashes.append(f"{edits}: exit {p.returncode}: {p.stderr.strip()[-200:]}")
            result(not crashes, f"80 random edits of a {arch} file: exit 0 or one error line, "
                   "never a crash", "; ".join(crashes[:3]))
    print(f"1..{n}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
