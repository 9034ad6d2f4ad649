/*
 * Internal to src/model: the mixture-of-experts FFN of a batched step (moe.c), used by
 * forward.c for layers with n_expert > 0 (qwen3moe, Mixtral-style llama).
 */
#ifndef TL_MODEL_MOE_H
#define TL_MODEL_MOE_H

#include "model/model.h"

// Scratch for MoE FFNs over up to max_tok tokens with `pool`'s thread count; NULL (error set)
// when memory is short. The model must have n_expert > 0.
struct tl_moe;
struct tl_moe *tl__moe_create(const struct tl_model *m, int64_t max_tok, struct tl_pool *pool);
void tl__moe_destroy(struct tl_moe *moe); // NULL is a no-op

// out (n, n_embd) = the MoE FFN of layer L on the normed rows x (n, n_embd), n <= max_tok.
// Each token's row is bit-identical whatever the other rows are.
void tl__moe_ffn(struct tl_moe *moe, const struct tl_layer *L, const float *x, int64_t n,
                 float *out);

#endif
