/*
 * IBM Granite 3 (`granite`): the Llama block (Q/K permuted by the converter, "normal" RoPE)
 * with four multipliers, as HF's modeling_granite applies them and llama.cpp's converter names
 * them:
 *   granite.embedding_scale   embeddings multiplied by it     (HF embedding_multiplier)
 *   granite.residual_scale    each sublayer's output multiplied by it before the residual add
 *                             (HF residual_multiplier)
 *   granite.attention.scale   the softmax scale of q.k instead of 1/sqrt(head_dim)
 *                             (HF attention_multiplier)
 *   granite.logit_scale       logits divided by it            (HF logits_scaling)
 * logit_scale is required (llama.cpp requires it too); the others are optional, and 0 means
 * "not applied" as in llama.cpp. granite.rope.scaling.finetuned = false turns RoPE off in every
 * layer (llama.cpp's switch for NoPE Granite variants; absent means on).
 */
#include "model/arch.h"

#include "core/error.h"

#include <math.h>

static tl_status granite_hparams(const struct tl_arch_keys *k, struct tl_hparams *hp)
{
    tl_status rc = tl__arch_f32_req(k, "logit_scale", &hp->logit_scale);
    if (rc) return rc;
    tl__arch_f32_opt(k, "embedding_scale", &hp->embd_scale);
    tl__arch_f32_opt(k, "residual_scale", &hp->residual_scale);
    tl__arch_f32_opt(k, "attention.scale", &hp->attn_scale);
    if (!isfinite(hp->logit_scale) || hp->logit_scale <= 0)
        return tl__errorf(TL_ERR_FORMAT, "%s: key %s.logit_scale is %g, expected > 0", k->path,
                          k->prefix, (double)hp->logit_scale);
    const float v[3] = {hp->embd_scale, hp->residual_scale, hp->attn_scale};
    static const char *const names[3] = {"embedding_scale", "residual_scale", "attention.scale"};
    for (int i = 0; i < 3; i++)
        if (!isfinite(v[i]) || v[i] < 0)
            return tl__errorf(TL_ERR_FORMAT, "%s: key %s.%s is %g, expected >= 0", k->path,
                              k->prefix, names[i], (double)v[i]);
    bool rope_on = true;
    tl__arch_bool_opt(k, "rope.scaling.finetuned", &rope_on);
    if (!rope_on) hp->no_rope_step = 1;
    return TL_OK;
}

const struct tl_arch_desc tl__arch_granite = {
    .arch = TL_ARCH_GRANITE,
    .name = "granite",
    .rope_mode = TL_ROPE_NORMAL,
    .rms_eps = 1e-5f,
    .read_hparams = granite_hparams,
};
