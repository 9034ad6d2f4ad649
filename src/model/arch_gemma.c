/*
 * Google Gemma 2 (`gemma2`), as HF's modeling_gemma2 defines it and llama.cpp converts and runs
 * it:
 *   - embeddings multiplied by sqrt(n_embd) (HF's normalizer, hidden_size ** 0.5);
 *   - RMSNorm everywhere with HF's (1 + weight): llama.cpp's converter (Gemma2Model) adds 1 to
 *     every *norm.weight when it writes the GGUF, so the file holds 1 + w and the plain
 *     x / rms * weight of the other families is the same arithmetic;
 *   - four norms per layer: attn_norm before attention, post_attention_norm on its output before
 *     the residual add, ffn_norm before the FFN, post_ffw_norm on its output;
 *   - GeGLU FFN: down(gelu_tanh(gate(x)) * up(x)) (hidden_activation gelu_pytorch_tanh);
 *   - attention logits soft-capped, cap * tanh(s / cap), s = q.k * scale
 *     (gemma2.attn_logit_softcapping, HF attn_logit_softcapping 50), and the final logits too
 *     (gemma2.final_logit_softcapping, HF final_logit_softcapping 30); both keys optional, as in
 *     llama.cpp (absent: that cap is off);
 *   - sliding-window attention (gemma2.attention.sliding_window, 4096 in the releases) on the
 *     even layers, global attention on the odd ones (HF: sliding unless layer_idx % 2;
 *     llama.cpp: set_swa_pattern(2));
 *   - query scale: HF's query_pre_attn_scalar ** -0.5. The GGUF has no key for it; llama.cpp
 *     uses 1 / sqrt(n_embd / n_head) for the 27B (query_pre_attn_scalar 144) and
 *     1 / sqrt(key_length) otherwise (2B and 9B: 256 = head_dim). This follows llama.cpp's
 *     general rule, 1 / sqrt(head_dim), the default of every family here;
 *   - RoPE: NEOX pairs (rotate_half; the converter does not permute Q/K), base 10000;
 *   - tied output (no output.weight).
 * A window of 0 is refused (an error naming the key), as are negative caps.
 *
 * Gemma 3 (`gemma3`, HF modeling_gemma3) is Gemma 2 with:
 *   - per-head RMSNorm of Q and K (attn_q_norm / attn_k_norm, also stored as 1 + w) after the
 *     projections, before RoPE;
 *   - no soft-capping (its configs set both caps to None; the keys are read if present);
 *   - five sliding layers to one global: HF is_sliding = (layer_idx + 1) % 6 != 0, llama.cpp
 *     set_swa_pattern(6) (il % 6 < 5), the same layers;
 *   - a RoPE base of its own for the sliding layers, 10000 and unscaled (HF rope_local_base_freq;
 *     llama.cpp hard-codes rope_freq_base_train_swa = 10000, scale 1, and reads
 *     gemma3.rope.freq_base_swa when a file has it), rope.freq_base (1e6) and any linear
 *     rope scaling for the global layers.
 */
#include "model/arch.h"

#include "core/error.h"

#include <math.h>

static tl_status gemma_hparams(const struct tl_arch_keys *k, struct tl_hparams *hp, int pattern)
{
    tl_status rc = tl__arch_u32_req(k, "attention.sliding_window", &hp->n_swa);
    if (rc) return rc;
    if (hp->n_swa <= 0)
        return tl__errorf(TL_ERR_FORMAT, "%s: key %s.attention.sliding_window is %d, expected > 0",
                          k->path, k->prefix, hp->n_swa);
    hp->swa_pattern = pattern;
    tl__arch_f32_opt(k, "attn_logit_softcapping", &hp->attn_softcap);
    tl__arch_f32_opt(k, "final_logit_softcapping", &hp->final_softcap);
    const float v[2] = {hp->attn_softcap, hp->final_softcap};
    static const char *const names[2] = {"attn_logit_softcapping", "final_logit_softcapping"};
    for (int i = 0; i < 2; i++)
        if (!isfinite(v[i]) || v[i] < 0)
            return tl__errorf(TL_ERR_FORMAT, "%s: key %s.%s is %g, expected >= 0", k->path,
                              k->prefix, names[i], (double)v[i]);
    hp->embd_scale = sqrtf((float)hp->n_embd);
    hp->ffn_gelu = true;
    return TL_OK;
}

static tl_status gemma2_hparams(const struct tl_arch_keys *k, struct tl_hparams *hp)
{
    return gemma_hparams(k, hp, 2);
}

static tl_status gemma3_hparams(const struct tl_arch_keys *k, struct tl_hparams *hp)
{
    hp->rope_freq_base_swa = 10000.0f;
    tl__arch_f32_opt(k, "rope.freq_base_swa", &hp->rope_freq_base_swa);
    if (!isfinite(hp->rope_freq_base_swa) || hp->rope_freq_base_swa <= 0)
        return tl__errorf(TL_ERR_FORMAT, "%s: key %s.rope.freq_base_swa is %g, expected > 0",
                          k->path, k->prefix, (double)hp->rope_freq_base_swa);
    return gemma_hparams(k, hp, 6);
}

const struct tl_arch_desc tl__arch_gemma2 = {
    .arch = TL_ARCH_GEMMA2,
    .name = "gemma2",
    .rope_mode = TL_ROPE_NEOX,
    .rms_eps = 1e-6f,
    .post_norms = true,
    .read_hparams = gemma2_hparams,
};

const struct tl_arch_desc tl__arch_gemma3 = {
    .arch = TL_ARCH_GEMMA3,
    .name = "gemma3",
    .rope_mode = TL_ROPE_NEOX,
    .rms_eps = 1e-6f,
    .qk_norm = true,
    .post_norms = true,
    .read_hparams = gemma3_hparams,
};
