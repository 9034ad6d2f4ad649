/*
 * The Qwen families: `qwen2` (Qwen2, Qwen2.5) and `qwen3` (dense Qwen3). llama.cpp's converter
 * does not permute their Q/K rows; RoPE rotates halves (x[i], x[i + d/2]), TL_ROPE_NEOX.
 *
 * qwen2 has q/k/v biases (required). qwen3 has none, and instead normalizes each head of Q and
 * of K with its own RMSNorm (attn_q_norm / attn_k_norm, head_dim weights shared by all heads)
 * before RoPE; its head_dim is attention.key_length (128 in every Qwen3), which need not be
 * n_embd / n_head.
 *
 * qwen3moe (Qwen3-30B-A3B, -235B-A22B) is qwen3's attention with a sparse MoE FFN in every
 * layer: a router (ffn_gate_inp, [n_embd, n_expert]), the softmax of its logits, the top
 * expert_used_count of them renormalized to sum 1 (HF's norm_topk_prob, which every released
 * config sets and llama.cpp hard-codes), and expert SwiGLU FFNs stacked in ffn_{gate,up}_exps
 * [n_embd, n_ff_exp, n_expert] and ffn_down_exps [n_ff_exp, n_embd, n_expert]. n_ff_exp is
 * expert_feed_forward_length, else feed_forward_length / expert_used_count (llama.cpp's
 * fallback).
 */
#include "model/arch.h"

const struct tl_arch_desc tl__arch_qwen2 = {
    .arch = TL_ARCH_QWEN2,
    .name = "qwen2",
    .rope_mode = TL_ROPE_NEOX,
    .rms_eps = 1e-6f,
    .attn_bias = true,
};

const struct tl_arch_desc tl__arch_qwen3 = {
    .arch = TL_ARCH_QWEN3,
    .name = "qwen3",
    .rope_mode = TL_ROPE_NEOX,
    .rms_eps = 1e-6f,
    .qk_norm = true,
};

static tl_status qwen3moe_hparams(const struct tl_arch_keys *k, struct tl_hparams *hp)
{
    tl_status rc = tl__arch_read_experts(k, TL_EXPERTS_REQUIRED, hp);
    if (rc) return rc;
    hp->n_ff_exp = hp->n_ff / hp->n_expert_used;
    tl__arch_u32_opt(k, "expert_feed_forward_length", &hp->n_ff_exp);
    return TL_OK;
}

const struct tl_arch_desc tl__arch_qwen3moe = {
    .arch = TL_ARCH_QWEN3MOE,
    .name = "qwen3moe",
    .rope_mode = TL_ROPE_NEOX,
    .rms_eps = 1e-6f,
    .qk_norm = true,
    .experts = TL_EXPERTS_REQUIRED,
    .read_hparams = qwen3moe_hparams,
};
