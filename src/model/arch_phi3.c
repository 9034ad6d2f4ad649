/*
 * Microsoft Phi-3 / Phi-4 (`phi3`), as llama.cpp's converter writes it: the Llama block with
 * q, k and v in one matrix (blk.N.attn_qkv, rows q then k then v; some files have attn_q/k/v
 * instead) and the gate and up projections in one ffn_up of 2 * n_ff rows (gate first: HF's
 * gate_up_proj, `gate, up = chunk(2)`), not permuted, NEOX RoPE. The loader splits both into
 * row views, so the forward pass is llama's.
 *
 * Not supported: LongRoPE (rope_factors_long/short.weight, Phi-3-*-128k and Phi-4-mini; refused
 * by name), partial RoPE (refused by the loader). phi3.attention.sliding_window is ignored, as
 * llama.cpp does ("Phi SWA is currently disabled"): positions beyond the window attend to the
 * whole context.
 */
#include "model/arch.h"

#include "core/log.h"

static tl_status phi3_hparams(const struct tl_arch_keys *k, struct tl_hparams *hp)
{
    int32_t window = 0;
    tl__arch_u32_opt(k, "attention.sliding_window", &window);
    if (window > 0 && window < hp->n_ctx_train)
        TL_LOGW("%s: %s.attention.sliding_window %d is ignored (as llama.cpp does): positions past "
                "it attend to the whole context",
                k->path, k->prefix, window);
    return TL_OK;
}

const struct tl_arch_desc tl__arch_phi3 = {
    .arch = TL_ARCH_PHI3,
    .name = "phi3",
    .rope_mode = TL_ROPE_NEOX,
    .rms_eps = 1e-5f,
    .fused = true,
    .read_hparams = phi3_hparams,
};
