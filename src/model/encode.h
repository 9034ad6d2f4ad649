/*
 * Encoders (embedding models): the BERT weights arch_bert.c loads and the forward pass encode.c
 * runs over one token sequence, giving one pooled vector. The server's /v1/embeddings calls
 * tl_model_embed; the decoder pass (forward.c) refuses these models.
 *
 * Thread model: tl_model_embed reads the model only (thread-safe); its scratch is per call, and
 * its matmuls fan out over the given pool (NULL: the calling thread).
 */
#ifndef TL_MODEL_ENCODE_H
#define TL_MODEL_ENCODE_H

#include "model/model.h"

struct tl_bert_layer {
    struct tl_weight wq, wk, wv, wo;        // (n_embd, n_embd) each
    const float *bq, *bk, *bv, *bo;         // (n_embd)
    const float *attn_norm_w, *attn_norm_b; // attn_output_norm: LayerNorm after attention
    struct tl_weight w_up;                  // (n_ff rows, n_embd)
    struct tl_weight w_down;                // (n_embd rows, n_ff)
    const float *b_up, *b_down;             // (n_ff), (n_embd)
    const float *out_norm_w, *out_norm_b;   // layer_output_norm: LayerNorm after the FFN
};

struct tl_bert {
    struct tl_weight pos_embd;              // position_embd: (n_ctx_train rows, n_embd)
    struct tl_weight type_embd;             // token_types: (n_types rows, n_embd); type 0 used
    const float *embd_norm_w, *embd_norm_b; // token_embd_norm: LayerNorm of the embedding sum
    struct tl_bert_layer *layers;           // (n_layer), in model->owned
};

// The matrices of an encoder's layers, for packing (model.c): layer i / 6's q, k, v, output,
// up, down.
#define TL_BERT_LAYER_WEIGHTS 6
struct tl_weight *tl__bert_weight(struct tl_bert *b, int64_t i);

struct tl_embed_opts {
    enum tl_pooling pooling; // TL_POOLING_NONE: the file's <arch>.pooling_type
    bool normalize;          // L2-normalise the pooled vector
    bool allow_decoder;      // pool a decoder's final hidden state (--embeddings); not yet done
    const int32_t *types;    // (n) token type of each token (a cross-encoder's second segment
                             // is 1), or NULL: all 0
};

// Runs the encoder over ids[0..n) (one sequence, positions 0..n-1, token types opts->types or 0)
// and writes the
// pooled vector of n_embd floats to out. Errors (one line, naming the model): a decoder model
// (TL_ERR_UNSUPPORTED naming its architecture: it is not an embedding model), n outside
// 1..context_length, an id outside the vocabulary or a type outside token_types
// (TL_ERR_INVALID_ARG), no usable pooling
// (none or rank: TL_ERR_UNSUPPORTED), out of memory.
tl_status tl_model_embed(const struct tl_model *m, struct tl_pool *pool, const int32_t *ids,
                         int64_t n, const struct tl_embed_opts *opts, float *out) TL_WARN_UNUSED;

#endif
