/*
 * The `bert` family (BERT and the embedding models built on it: bge, e5, all-MiniLM), as
 * llama.cpp's converter writes it: token_embd, token_types ([n_embd, n_types]), position_embd
 * ([n_embd, context_length]: learned absolute positions), token_embd_norm.{weight,bias} (the
 * LayerNorm of their sum), and per layer attn_{q,k,v,output}.{weight,bias},
 * attn_output_norm.{weight,bias}, ffn_{up,down}.{weight,bias}, layer_output_norm.{weight,bias}
 * (post-LayerNorm: each sublayer's residual sum is normalised). Keys: the shared ones,
 * attention.layer_norm_epsilon (required, as llama.cpp requires it), attention.causal (must be
 * false: bidirectional attention), pooling_type (llama.cpp's enum, optional).
 *
 * The descriptor reads the keys; load_bert loads and checks every tensor (the decoder layout of
 * loader_gguf.c does not apply) into model->bert. The forward pass is encode.c.
 */
#include "model/arch.h"
#include "model/encode.h"
#include "model/loader.h"

#include "core/alloc.h"
#include "core/error.h"

#include <stdio.h>
#include <string.h>

static tl_status bert_hparams(const struct tl_arch_keys *k, struct tl_hparams *hp)
{
    tl_status rc = tl__arch_f32_req(k, "attention.layer_norm_epsilon", &hp->rms_eps);
    if (rc) return rc;
    if (!(hp->rms_eps > 0))
        return tl__errorf(TL_ERR_FORMAT,
                          "%s: key %s.attention.layer_norm_epsilon is %g, expected > 0", k->path,
                          k->prefix, (double)hp->rms_eps);
    bool causal = false;
    tl__arch_bool_opt(k, "attention.causal", &causal);
    if (causal)
        return tl__errorf(TL_ERR_UNSUPPORTED,
                          "%s: key %s.attention.causal is true (causal encoders are not supported)",
                          k->path, k->prefix);
    int32_t pooling = TL_POOLING_NONE;
    tl__arch_u32_opt(k, "pooling_type", &pooling);
    if (pooling < 0 || pooling > TL_POOLING_RANK)
        return tl__errorf(TL_ERR_FORMAT, "%s: key %s.pooling_type is %d, expected 0..4", k->path,
                          k->prefix, pooling);
    hp->pooling = (enum tl_pooling)pooling;
    if (hp->n_head_kv != hp->n_head || hp->head_dim * hp->n_head != hp->n_embd)
        return tl__errorf(TL_ERR_FORMAT,
                          "%s: %s needs head_count_kv = head_count and embedding_length a "
                          "multiple of head_count (got %d, %d, %d)",
                          k->path, k->prefix, hp->n_head_kv, hp->n_head, hp->n_embd);
    return TL_OK;
}

// A matrix with n_in columns and n_out rows (n_out < 0: any), its shape in the message.
static tl_status mat(struct tl_model *m, const char *name, int64_t n_in, int64_t n_out,
                     struct tl_weight *w)
{
    tl_status rc = tl__gguf_mat(m, name, true, w);
    if (rc) return rc;
    if (w->n_in != n_in || (n_out >= 0 && w->n_out != n_out))
        return tl__errorf(TL_ERR_FORMAT,
                          "%s: tensor %s has shape [%lld, %lld], expected [%lld, %lld]", m->path,
                          name, (long long)w->n_in, (long long)w->n_out, (long long)n_in,
                          (long long)(n_out >= 0 ? n_out : w->n_out));
    if (!tl_kernels_weight_supported(w->type))
        return tl__errorf(TL_ERR_UNSUPPORTED, "%s: tensor %s has type %s, which is not supported",
                          m->path, name, tl_dtype_name(w->type));
    return TL_OK;
}

// blk.<il>.<what>.weight (n_in x n_out) and its bias (n_out).
static tl_status linear(struct tl_model *m, int il, const char *what, int64_t n_in, int64_t n_out,
                        struct tl_weight *w, const float **b)
{
    char name[96];
    tl_status rc;
    snprintf(name, sizeof(name), "blk.%d.%s.weight", il, what);
    if ((rc = mat(m, name, n_in, n_out, w))) return rc;
    snprintf(name, sizeof(name), "blk.%d.%s.bias", il, what);
    return tl__gguf_vec(m, name, n_out, true, b);
}

// <prefix>.weight and <prefix>.bias of a LayerNorm over n values (prefix may hold "%d").
static tl_status layer_norm(struct tl_model *m, const char *prefix, int il, int64_t n,
                            const float **w, const float **b)
{
    char base[80], name[96];
    tl_status rc;
    snprintf(base, sizeof(base), prefix, il);
    snprintf(name, sizeof(name), "%s.weight", base);
    if ((rc = tl__gguf_vec(m, name, n, true, w))) return rc;
    snprintf(name, sizeof(name), "%s.bias", base);
    return tl__gguf_vec(m, name, n, true, b);
}

static tl_status load_bert(struct tl_model *m)
{
    const struct tl_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd, ff = hp->n_ff;
    tl_status rc;
    if (hp->n_embd <= 0 || hp->n_layer <= 0 || hp->n_ff <= 0 || hp->n_ctx_train <= 0)
        return tl__errorf(TL_ERR_FORMAT,
                          "%s: invalid hyperparameters (embd %d, layers %d, ff %d, "
                          "ctx %d)",
                          m->path, hp->n_embd, hp->n_layer, hp->n_ff, hp->n_ctx_train);
    struct tl_bert *b = tl_aligned_alloc(sizeof(*b));
    if (!b || !tl__model_own(m, b)) return tl__errorf(TL_ERR_NOMEM, "%s: out of memory", m->path);
    memset(b, 0, sizeof(*b));
    m->bert = b;
    size_t bytes;
    b->layers = tl_mul_size((size_t)hp->n_layer, sizeof(*b->layers), &bytes)
                    ? tl_aligned_alloc(bytes)
                    : NULL;
    if (!b->layers || !tl__model_own(m, b->layers))
        return tl__errorf(TL_ERR_NOMEM, "%s: out of memory", m->path);
    memset(b->layers, 0, bytes);
    if ((rc = mat(m, "token_embd.weight", d, -1, &m->tok_embd)) ||
        (rc = mat(m, "token_types.weight", d, -1, &b->type_embd)) ||
        (rc = mat(m, "position_embd.weight", d, hp->n_ctx_train, &b->pos_embd)) ||
        (rc = layer_norm(m, "token_embd_norm", 0, d, &b->embd_norm_w, &b->embd_norm_b)))
        return rc;
    if (m->tok_embd.n_out > INT32_MAX)
        return tl__errorf(TL_ERR_FORMAT, "%s: tensor token_embd.weight has too many rows", m->path);
    m->hp.n_vocab = (int32_t)m->tok_embd.n_out;
    for (int il = 0; il < hp->n_layer; il++) {
        struct tl_bert_layer *L = &b->layers[il];
        if ((rc = linear(m, il, "attn_q", d, d, &L->wq, &L->bq)) ||
            (rc = linear(m, il, "attn_k", d, d, &L->wk, &L->bk)) ||
            (rc = linear(m, il, "attn_v", d, d, &L->wv, &L->bv)) ||
            (rc = linear(m, il, "attn_output", d, d, &L->wo, &L->bo)) ||
            (rc = layer_norm(m, "blk.%d.attn_output_norm", il, d, &L->attn_norm_w,
                             &L->attn_norm_b)) ||
            (rc = linear(m, il, "ffn_up", d, ff, &L->w_up, &L->b_up)) ||
            (rc = linear(m, il, "ffn_down", ff, d, &L->w_down, &L->b_down)) ||
            (rc = layer_norm(m, "blk.%d.layer_output_norm", il, d, &L->out_norm_w, &L->out_norm_b)))
            return rc;
    }
    return TL_OK;
}

struct tl_weight *tl__bert_weight(struct tl_bert *b, int64_t i)
{
    struct tl_bert_layer *L = &b->layers[i / TL_BERT_LAYER_WEIGHTS];
    struct tl_weight *ws[TL_BERT_LAYER_WEIGHTS] = {&L->wq, &L->wk,   &L->wv,
                                                   &L->wo, &L->w_up, &L->w_down};
    return ws[i % TL_BERT_LAYER_WEIGHTS];
}

const struct tl_arch_desc tl__arch_bert = {
    .arch = TL_ARCH_BERT,
    .name = "bert",
    .rope_mode = TL_ROPE_NORMAL,
    .rms_eps = 1e-12f,
    .attn_bias = true,
    .read_hparams = bert_hparams,
    .load_encoder = load_bert,
};
