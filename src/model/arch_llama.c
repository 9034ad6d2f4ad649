/*
 * The Llama family as llama.cpp's converter writes it: `llama` (Llama 1/2/3, Mistral,
 * TinyLlama, SmolLM 1/2, stories) and `smollm3`. Q and K rows are permuted by the converter
 * for llama.cpp's "normal" RoPE, which rotates adjacent pairs (TL_ROPE_NORMAL); attention
 * biases are optional.
 *
 * smollm3 is llama with no RoPE on every 4th layer (layers il with (il + 1) % 4 == 0: HF's
 * no_rope_layer_interval). There is no GGUF key for it: llama.cpp sets n_no_rope_layer_step = 4
 * for the architecture, and so do we.
 *
 * A llama file with llama.expert_count > 0 is a Mixtral-style mixture of experts: the same
 * router and stacked experts as qwen3moe (ffn_gate_inp, ffn_{gate,up,down}_exps), softmax
 * gating, top expert_used_count renormalized (HF Mixtral: softmax, topk, divided by the sum),
 * each expert feed_forward_length wide (llama.cpp's n_ff for llama experts).
 */
#include "model/arch.h"

static tl_status llama_hparams(const struct tl_arch_keys *k, struct tl_hparams *hp)
{
    tl_status rc = tl__arch_read_experts(k, TL_EXPERTS_OPTIONAL, hp);
    hp->n_ff_exp = hp->n_expert > 0 ? hp->n_ff : 0;
    return rc;
}

const struct tl_arch_desc tl__arch_llama = {
    .arch = TL_ARCH_LLAMA,
    .name = "llama",
    .rope_mode = TL_ROPE_NORMAL,
    .rms_eps = 1e-5f,
    .experts = TL_EXPERTS_OPTIONAL,
    .read_hparams = llama_hparams,
};

static tl_status smollm3_hparams(const struct tl_arch_keys *k, struct tl_hparams *hp)
{
    (void)k;
    hp->no_rope_step = 4;
    return TL_OK;
}

const struct tl_arch_desc tl__arch_smollm3 = {
    .arch = TL_ARCH_SMOLLM3,
    .name = "smollm3",
    .rope_mode = TL_ROPE_NORMAL,
    .rms_eps = 1e-6f,
    .read_hparams = smollm3_hparams,
};
