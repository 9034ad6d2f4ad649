/*
 * The Qwen families: `qwen2` (Qwen2, Qwen2.5) and `qwen3` (dense Qwen3). llama.cpp's converter
 * does not permute their Q/K rows; RoPE rotates halves (x[i], x[i + d/2]), TL_ROPE_NEOX.
 *
 * qwen2 has q/k/v biases (required). qwen3 has none, and instead normalizes each head of Q and
 * of K with its own RMSNorm (attn_q_norm / attn_k_norm, head_dim weights shared by all heads)
 * before RoPE; its head_dim is attention.key_length (128 in every Qwen3), which need not be
 * n_embd / n_head.
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
