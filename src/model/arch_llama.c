/*
 * The Llama family as llama.cpp's converter writes it: `llama` (Llama 1/2/3, Mistral,
 * TinyLlama, SmolLM 1/2, stories) and `smollm3`. Q and K rows are permuted by the converter
 * for llama.cpp's "normal" RoPE, which rotates adjacent pairs (TL_ROPE_NORMAL); attention
 * biases are optional.
 *
 * smollm3 is llama with no RoPE on every 4th layer (layers il with (il + 1) % 4 == 0: HF's
 * no_rope_layer_interval). There is no GGUF key for it: llama.cpp sets n_no_rope_layer_step = 4
 * for the architecture, and so do we.
 */
#include "model/arch.h"

const struct tl_arch_desc tl__arch_llama = {
    .arch = TL_ARCH_LLAMA,
    .name = "llama",
    .rope_mode = TL_ROPE_NORMAL,
    .rms_eps = 1e-5f,
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
