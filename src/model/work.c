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
 *   - mixture of experts: the router as a matrix; each token's K experts (3 matmuls each); the
 *     bytes of min(n_expert, n_tok * K) experts, an upper bound of the distinct experts read.
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

// A layer's experts: each token runs K of them (K * 3 matmuls of one expert's size); at most
// min(n_expert, n_tok * K) distinct experts are read (the count the routing could reach, an
// upper bound: the shapes do not know the routing).
static void add_experts(struct tl_step_work *w, struct tl_layer *L, int K, int64_t n_tok)
{
    struct tl_step_work one = {0};
    for (int64_t i = 5; i < 8; i++) // expert 0's gate, up, down
        add_matmul(&one, tl_layer_weight(L, i), n_tok * K);
    int64_t read = n_tok * K < L->n_expert ? n_tok * K : L->n_expert;
    w->int8_ops += one.int8_ops;
    w->flops += one.flops;
    w->weight_bytes += one.weight_bytes * (double)read;
}

void tl_model_step_work(const struct tl_model *m, enum tl_dtype kv_type, const struct tl_batch *b,
                        struct tl_step_work *out)
{
    memset(out, 0, sizeof(*out));
    const struct tl_hparams *hp = &m->hp;
    if (b->n_tok <= 0) return;
    for (int il = 0; il < hp->n_layer; il++) {
        struct tl_layer *L = &m->layers[il];       // read only
        int64_t n_dense = L->n_expert > 0 ? 5 : 7; // with the router
        for (int64_t i = 0; i < n_dense; i++)
            add_matmul(out, tl_layer_weight(L, i), b->n_tok);
        if (L->n_expert > 0) add_experts(out, L, hp->n_expert_used, b->n_tok);
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
