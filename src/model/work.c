/*
 * Work accounting of one forward pass, from the shapes alone (see tl_model_step_work in
 * model.h): what tl_forward_run computes and reads for a batch, counted the way utilization is
 * reported against the machine's ceilings (kernels/ceilings.h).
 *
 * Counting rules (docs/server.md, "Utilization"):
 *   - matmul: 2 * n_in * n_out per token per matrix (a multiply-add is 2 ops). Quantized
 *     weights (Q8_0, the 4/5/6-bit and K types) are multiplied in int8 against quantized
 *     activations, so they count as int8 ops; F32/F16/BF16 weights as f32 FLOPs. Every layer
 *     matrix runs on all n_tok tokens; the output projection only on the n_out rows sampled.
 *   - attention: per token, layer and query head, 2 * head_dim * n_ctx for the scores and as
 *     much again for the weighted sum of V, n_ctx = pos + 1; f32 FLOPs. Softmax, norms, RoPE
 *     and SwiGLU are not counted (a few ops per element, noise next to the matmuls).
 *   - bytes read: every layer matrix once per step (as stored: n_out * row_bytes), the output
 *     matrix when any logits are wanted, one embedding row per token; and K plus V of each
 *     token's context in every layer (n_ctx * n_kv_head rows of tl_kv_row_bytes each, twice).
 *     Activations and the K/V written are not counted (they live in cache).
 *
 * Thread model: a pure function of the model (immutable) and the batch.
 */
#include "model/model.h"

#include <string.h>

static bool counts_as_int8(enum tl_dtype t)
{
    return t != TL_DTYPE_F32 && t != TL_DTYPE_F16 && t != TL_DTYPE_BF16;
}

// Adds one matrix multiplied with n_tok tokens.
static void add_matmul(struct tl_step_work *w, const struct tl_weight *m, int64_t n_tok)
{
    double ops = 2.0 * (double)m->n_in * (double)m->n_out * (double)n_tok;
    if (counts_as_int8(m->type))
        w->int8_ops += ops;
    else
        w->flops += ops;
    w->weight_bytes += (double)m->n_out * (double)m->row_bytes;
}

void tl_model_step_work(const struct tl_model *m, enum tl_dtype kv_type, const struct tl_batch *b,
                        struct tl_step_work *out)
{
    memset(out, 0, sizeof(*out));
    const struct tl_hparams *hp = &m->hp;
    if (b->n_tok <= 0) return;
    for (int il = 0; il < hp->n_layer; il++) {
        const struct tl_layer *L = &m->layers[il];
        const struct tl_weight *ws[] = {&L->wq,     &L->wk,   &L->wv,    &L->wo,
                                        &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < 7; i++)
            add_matmul(out, ws[i], b->n_tok);
    }
    if (b->n_out > 0) add_matmul(out, &m->output, b->n_out);
    out->weight_bytes += (double)b->n_tok * (double)m->tok_embd.row_bytes;

    double ctx_sum = 0; // positions attended to, over the batch's tokens
    for (int64_t t = 0; t < b->n_tok; t++)
        ctx_sum += (double)b->pos[t] + 1;
    out->flops += 4.0 * hp->n_head * hp->head_dim * ctx_sum * hp->n_layer;
    out->kv_bytes += 2.0 * (double)tl_kv_row_bytes(kv_type, hp->head_dim) * hp->n_head_kv *
                     ctx_sum * hp->n_layer;
}
