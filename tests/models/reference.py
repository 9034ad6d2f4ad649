"""NumPy reference forward passes of the model families, written from Hugging Face transformers'
model definitions (the spec), in float64, reading the GGUF file itself (gguf_reader.py):

  llama    modeling_llama:   RMSNorm, rotate_half RoPE, GQA causal attention, SwiGLU MLP
  qwen2    modeling_qwen2:   llama + q/k/v biases
  qwen3    modeling_qwen3:   llama + q_norm / k_norm: Qwen3RMSNorm over head_dim of each head of
                             q_proj(x).view(..., head_dim) and k_proj(x), before the rotary
  granite  modeling_granite: inputs_embeds * embedding_multiplier; attention scaling =
                             attention_multiplier; residual + out * residual_multiplier (both
                             sublayers); logits / logits_scaling
  smollm3  modeling_smollm3: llama, rotary only where no_rope_layers[i] is 1; the config's default
                             is int((i + 1) % no_rope_layer_interval != 0), interval 4
  phi3     modeling_phi3:    llama with qkv_proj (q, k, v rows in one matrix) and gate_up_proj
                             (gate, up = chunk(2)); no sliding window (llama.cpp ignores
                             Phi-3's; these sequences are shorter than any window anyway)
  llama with experts, modeling_mixtral: MixtralSparseMoeBlock routes as qwen3moe does (softmax,
                             topk, divided by their sum), experts intermediate_size wide
  gemma2   modeling_gemma2:  inputs_embeds * hidden_size ** 0.5; Gemma2RMSNorm x * (1 + weight);
                             input_layernorm -> attention -> post_attention_layernorm -> + residual,
                             pre_feedforward_layernorm -> MLP -> post_feedforward_layernorm -> +
                             residual; MLP down(gelu_pytorch_tanh(gate) * up); scores
                             q.k * query_pre_attn_scalar ** -0.5, then softcap * tanh(s / softcap);
                             sliding_window on the layers with layer_idx % 2 == 0 (masked where
                             q - k >= window); final logits softcapped the same way; tied output
  gemma3   modeling_gemma3:  gemma2 without soft-capping, with q_norm / k_norm (Gemma3RMSNorm, 1 +
                             weight) of each head before the rotary, sliding on the layers with
                             (layer_idx + 1) % sliding_window_pattern (6) != 0, whose rotary uses
                             rope_local_base_freq (10000) instead of rope_theta
  qwen3moe modeling_qwen3_moe: qwen3 attention; Qwen3MoeSparseMoeBlock: router_logits =
                             gate(x), softmax over all experts, torch.topk(top_k), divided by
                             their sum (norm_topk_prob), sum of weight * expert(x), each expert a
                             SwiGLU MLP of moe_intermediate_size

What the GGUF holds is what llama.cpp's convert_hf_to_gguf.py wrote, and the reference undoes it
rather than sharing the engine's reading of the file:
  - LlamaModel (llama, granite, smollm3) permutes the rows of q_proj / k_proj for ggml's
    adjacent-pair RoPE: permute(w, n_head) = w.reshape(n_head, 2, hd / 2, n_in).swapaxes(1, 2).
    The reference inverts it to get HF's rows and applies HF's rotate_half rotary. Qwen2Model and
    Qwen3Model do not permute (their rope is NEOX, rotate_half itself).
  - Gemma2Model adds 1 to every *norm.weight (HF's Gemma2RMSNorm multiplies by 1 + weight), so
    the reference takes HF's weight as the file's minus 1 and applies 1 + weight; it writes no
    output.weight (tied), no Q/K permutation (NEOX rope); sliding_window ->
    attention.sliding_window, attn/final_logit_softcapping -> attn_logit_softcapping /
    final_logit_softcapping. query_pre_attn_scalar has no key: the test models take HF's 2B/9B
    value, head_dim (llama.cpp's 1 / sqrt(key_length) for every Gemma 2 but the 27B).
  - Phi-3's qkv_proj and gate_up_proj are written as they are, blk.N.attn_qkv and blk.N.ffn_up
    (2 * intermediate_size rows), not permuted (NEOX rope).
  - Qwen3MoE's (and Mixtral's w1/w3/w2) experts (mlp.experts.E.{gate,up,down}_proj) are stacked
    into one tensor per projection, blk.N.ffn_{gate,up,down}_exps [n_in, n_out, n_expert]
    (numpy: (E, out, in)),
    the router mlp.gate into ffn_gate_inp; num_experts -> expert_count, num_experts_per_tok ->
    expert_used_count, moe_intermediate_size -> expert_feed_forward_length.
  - Llama 3.1's rope_scaling {"rope_type": "llama3", ...} becomes rope_freqs.weight, one
    divisor of each rotary frequency; the reference computes HF's scaled frequencies from the
    config values instead of reading that tensor.
  - config keys become <arch>.* keys: hidden_size -> embedding_length, num_hidden_layers ->
    block_count, intermediate_size -> feed_forward_length, num_attention_heads ->
    attention.head_count, num_key_value_heads -> attention.head_count_kv, head_dim ->
    attention.key_length, rms_norm_eps -> attention.layer_norm_rms_epsilon, rope_theta ->
    rope.freq_base; granite's multipliers -> embedding_scale, residual_scale, attention.scale,
    logit_scale. An absent output.weight means tie_word_embeddings.

`knobs` turns single facts off for the tests' negative controls (a reference that gets one fact
wrong must miss the engine by far more than the tolerance)."""
import numpy as np

from gguf_reader import GGUF

LLAMA_PERMUTED = ("llama", "granite", "smollm3")


def unpermute(w, n_head):
    """Inverse of the converter's permute for a (n_head * hd, n_in) weight."""
    hd = w.shape[0] // n_head
    return w.reshape(n_head, hd // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def llama3_inv_freq(inv_freq, factor, low_freq_factor, high_freq_factor, old_context_len):
    """HF's _compute_llama3_parameters (rope_type "llama3", Llama 3.1+): low frequencies divided
    by factor, high ones kept, a smooth blend between."""
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * np.pi / inv_freq
    scaled = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return np.where(medium, smoothed, scaled)


def rotary(x, pos, theta, rope_scaling=None):
    """HF apply_rotary_pos_emb on x (T, H, d) with rotate_half."""
    d = x.shape[-1]
    inv_freq = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    if rope_scaling is not None:
        inv_freq = llama3_inv_freq(inv_freq, **rope_scaling)
    freqs = np.outer(pos, inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)[:, None, :]
    rot = np.concatenate([-x[..., d // 2:], x[..., :d // 2]], axis=-1)
    return x * np.cos(emb) + rot * np.sin(emb)


def gelu_tanh(x):
    """HF's gelu_pytorch_tanh (GELUTanh)."""
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def softcap(x, cap):
    return cap * np.tanh(x / cap)


def silu(x):
    return x / (1.0 + np.exp(-x))


def moe_mlp(m, g, il, n_used, knobs, ties):
    """Qwen3MoeSparseMoeBlock on the normed rows m (T, D)."""
    t = lambda n: g.tensor(f"blk.{il}.{n}")  # noqa: E731
    logits = m @ t("ffn_gate_inp.weight").T
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    gate, up, down = t("ffn_gate_exps.weight"), t("ffn_up_exps.weight"), t("ffn_down_exps.weight")
    out = np.zeros_like(m)
    for i in range(m.shape[0]):
        top = np.argsort(-p[i], kind="stable")
        ties.append(p[i][top[n_used - 1]] - p[i][top[n_used]] if n_used < len(top) else 1.0)
        chosen = top[:n_used]
        w = p[i][chosen]
        if "no_topk_renorm" not in knobs:
            w = w / w.sum()
        for e, we in zip(chosen, w):
            h = silu(gate[e] @ m[i]) * (up[e] @ m[i])
            out[i] += we * (down[e] @ h)
    return out


def forward(path, tokens, knobs=(), ties=None, rope_scaling=None):
    """Logits (T, n_vocab) of every position of `tokens`, one sequence from position 0.
    rope_scaling: HF's rope_scaling of a "llama3" config (factor, low_freq_factor,
    high_freq_factor, old_context_len), which the GGUF holds only as rope_freqs.weight. For a
    MoE model, `ties` (a list) collects each routing's gap between the last chosen and the first
    unchosen expert's probability, so a test can tell a near-tie from a bug."""
    ties = [] if ties is None else ties
    """Logits (T, n_vocab) of every position of `tokens`, one sequence from position 0."""
    g = GGUF(path)
    arch = g.kv["general.architecture"]
    key = lambda k, default=None: g.kv.get(f"{arch}.{k}", default)  # noqa: E731
    n_embd, n_layer = key("embedding_length"), key("block_count")
    n_head = key("attention.head_count")
    n_kv = key("attention.head_count_kv", n_head)
    hd = key("attention.key_length", n_embd // n_head)
    eps = key("attention.layer_norm_rms_epsilon")
    theta = key("rope.freq_base", 10000.0)
    emb_mult = res_mult = 1.0
    scaling = hd ** -0.5
    logits_scaling = 1.0
    if arch == "granite":
        if "no_embedding_multiplier" not in knobs:
            emb_mult = key("embedding_scale", 1.0)
        if "no_residual_multiplier" not in knobs:
            res_mult = key("residual_scale", 1.0)
        if "no_attention_multiplier" not in knobs:
            scaling = key("attention.scale", scaling)
        if "no_logits_scaling" not in knobs:
            logits_scaling = key("logit_scale")
    gemma = arch in ("gemma2", "gemma3")
    if gemma:
        # the file holds 1 + w (Gemma2Model's converter); HF applies (1 + w)
        plus_one = "norm_plus_one_twice" in knobs
        norm = lambda x, w, e: rms_norm(x, 1.0 + (w if plus_one else w - 1.0), e)  # noqa: E731
        if "no_embd_normalizer" not in knobs:
            emb_mult = n_embd ** 0.5
        scaling = float(hd) ** -0.5  # query_pre_attn_scalar = head_dim (2B, 9B)
        attn_cap = key("attn_logit_softcapping", 0.0) if "no_attn_softcap" not in knobs else 0.0
        final_cap = key("final_logit_softcapping", 0.0) if "no_final_softcap" not in knobs \
            else 0.0
        window = key("attention.sliding_window") if "no_sliding_window" not in knobs else 0
    else:
        norm = rms_norm
        attn_cap = final_cap = 0.0
        window = 0
    use_rope = [True] * n_layer
    if arch == "smollm3" and "rope_every_layer" not in knobs:
        use_rope = [(i + 1) % 4 != 0 for i in range(n_layer)]
    # llama.cpp's switch for NoPE Granite variants (HF: position_embedding_type "nope")
    if arch == "granite" and not key("rope.scaling.finetuned", True) and \
            "rope_every_layer" not in knobs:
        use_rope = [False] * n_layer
    unperm = (arch in LLAMA_PERMUTED) != ("wrong_permutation" in knobs)

    T = len(tokens)
    pos = np.arange(T, dtype=np.float64)
    h = g.tensor("token_embd.weight")[tokens] * emb_mult
    causal = np.triu(np.full((T, T), -np.inf), k=1)
    for il in range(n_layer):
        t = lambda n: g.tensor(f"blk.{il}.{n}")  # noqa: E731
        if g.has(f"blk.{il}.attn_qkv.weight"):  # phi3: HF's qkv_proj, sliced q | k | v
            qkv = t("attn_qkv.weight")
            wq, wk, wv = np.split(qkv, [n_head * hd, (n_head + n_kv) * hd])
        else:
            wq, wk, wv = t("attn_q.weight"), t("attn_k.weight"), t("attn_v.weight")
        if unperm:
            wq, wk = unpermute(wq, n_head), unpermute(wk, n_kv)
        a = norm(h, t("attn_norm.weight"), eps)
        q, k, v = a @ wq.T, a @ wk.T, a @ wv.T
        if g.has(f"blk.{il}.attn_q.bias") and "no_bias" not in knobs:
            q, k, v = q + t("attn_q.bias"), k + t("attn_k.bias"), v + t("attn_v.bias")
        q, k, v = q.reshape(T, n_head, hd), k.reshape(T, n_kv, hd), v.reshape(T, n_kv, hd)
        if arch == "gemma3" and "no_qk_norm" not in knobs:
            q = norm(q, t("attn_q_norm.weight"), eps)
            k = norm(k, t("attn_k_norm.weight"), eps)
        if arch in ("qwen3", "qwen3moe") and "no_qk_norm" not in knobs:
            ones = "qk_norm_weights_ignored" in knobs
            q = rms_norm(q, 1.0 if ones else t("attn_q_norm.weight"), eps)
            k = rms_norm(k, 1.0 if ones else t("attn_k_norm.weight"), eps)
        sliding = bool(window) and (il % 2 == 0 if arch == "gemma2" else (il + 1) % 6 != 0)
        if use_rope[il]:
            rs = None if "no_rope_scaling" in knobs else rope_scaling
            th = theta
            if arch == "gemma3" and sliding and "global_rope_base_everywhere" not in knobs:
                th = 10000.0  # rope_local_base_freq
            q, k = rotary(q, pos, th, rs), rotary(k, pos, th, rs)
        rep = n_head // n_kv  # repeat_kv: query head i uses kv head i // rep
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        s = np.einsum("thd,shd->hts", q, k) * scaling
        if attn_cap:
            s = softcap(s, attn_cap)
        s = s + causal
        if sliding:  # gemma2: unless layer_idx % 2; gemma3: unless (layer_idx + 1) % 6 == 0
            qi, ki = np.arange(T)[:, None], np.arange(T)[None, :]
            s = s + np.where(qi - ki >= window, -np.inf, 0.0)
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        o = np.einsum("hts,shd->thd", p, v).reshape(T, n_head * hd)
        o = o @ t("attn_output.weight").T
        if gemma:
            o = norm(o, t("post_attention_norm.weight"), eps)
        h = h + o * res_mult
        m = norm(h, t("ffn_norm.weight"), eps)
        if key("expert_count", 0) > 0:  # qwen3moe, or llama with experts (Mixtral)
            f = moe_mlp(m, g, il, key("expert_used_count"), knobs, ties)
        elif arch == "phi3":  # Phi3MLP: gate, up = gate_up_proj(x).chunk(2); up * silu(gate)
            gate, up = np.split(m @ t("ffn_up.weight").T, 2, axis=-1)
            if "swapped_gate_up" in knobs:
                gate, up = up, gate
            f = (up * silu(gate)) @ t("ffn_down.weight").T
        elif gemma:
            act = silu if "silu_not_gelu" in knobs else gelu_tanh
            f = (act(m @ t("ffn_gate.weight").T) * (m @ t("ffn_up.weight").T)) @ \
                t("ffn_down.weight").T
            f = norm(f, t("post_ffw_norm.weight"), eps)
        else:
            f = (silu(m @ t("ffn_gate.weight").T) * (m @ t("ffn_up.weight").T)) @ \
                t("ffn_down.weight").T
        h = h + f * res_mult
    out = g.tensor("output.weight") if g.has("output.weight") else g.tensor("token_embd.weight")
    logits = (norm(h, g.tensor("output_norm.weight"), eps) @ out.T) / logits_scaling
    return softcap(logits, final_cap) if final_cap else logits
