/*
 * The BERT encoder's forward pass over one sequence (HF transformers' BertModel, as llama.cpp
 * runs the `bert` GGUF), and the pooling that makes one embedding of it:
 *
 *   x = LayerNorm(token_embd[id] + position_embd[pos] + token_types[type]) (token_embd_norm)
 *   per layer:  a = softmax(q k^T / sqrt(head_dim)) v per head, over ALL positions (no mask)
 *               x = LayerNorm(x + attn_output(a))                         (attn_output_norm)
 *               x = LayerNorm(x + ffn_down(GELU(ffn_up(x))))              (layer_output_norm)
 *   pooled = mean over positions | x[0] (CLS) | x[n - 1] (last), then optionally / ||.||_2
 *
 * Every projection has its bias; GELU is the exact erf form HF's "gelu" uses; LayerNorm's
 * epsilon is attention.layer_norm_epsilon (hp.rms_eps). Matmuls go through tl_matmul (any
 * weight type the kernels read, packed at load as a decoder's are), attention's two products
 * too (f32, per head); the rest is plain C in f32 with the LayerNorm sums in double. No KV cache:
 * every token attends to every other, so an encoder sequence is one whole prefill. Scratch is
 * allocated per call.
 */
#include "model/encode.h"

#include "model/arch.h"

#include "core/alloc.h"
#include "core/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *pooling_name(enum tl_pooling p)
{
    static const char *const names[] = {"none", "mean", "cls", "last", "rank"};
    return (unsigned)p <= TL_POOLING_RANK ? names[p] : "unknown";
}

// y = LayerNorm(x) * w + b over n values (in place allowed).
static void layer_norm(const float *x, const float *w, const float *b, float eps, int64_t n,
                       float *y)
{
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; i++)
        mean += x[i];
    mean /= (double)n;
    for (int64_t i = 0; i < n; i++)
        var += (x[i] - mean) * (x[i] - mean);
    var /= (double)n;
    double inv = 1.0 / sqrt(var + (double)eps);
    for (int64_t i = 0; i < n; i++)
        y[i] = (float)((x[i] - mean) * inv) * w[i] + b[i];
}

// y[t] = W x[t] + bias for n_tok rows.
static void linear(struct tl_pool *pool, const struct tl_weight *w, const float *bias,
                   const float *x, int64_t n_tok, float *y, void *work)
{
    tl_matmul(pool, w, x, n_tok, y, work);
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < w->n_out; r++)
            y[t * w->n_out + r] += bias[r];
}

// One row of an embedding matrix (any type) added into acc.
static bool add_row(const struct tl_weight *w, int64_t row, float *tmp, float *acc)
{
    if (!tl_dequantize_row(w->type, (const char *)w->data + (size_t)row * w->row_bytes, tmp,
                           w->n_in))
        return false;
    for (int64_t i = 0; i < w->n_in; i++)
        acc[i] += tmp[i];
    return true;
}

// An f32 (rows, cols) matrix as a weight for tl_matmul.
static struct tl_weight f32_weight(const float *data, int64_t rows, int64_t cols)
{
    return (struct tl_weight){.type = TL_DTYPE_F32,
                              .n_in = cols,
                              .n_out = rows,
                              .row_bytes = (size_t)cols * sizeof(float),
                              .data = data};
}

// Bidirectional multi-head attention of n tokens: per head h, P = softmax(Q_h K_h^T / sqrt(hd))
// over all n positions, att_h = P V_h. Both products are f32 tl_matmul calls (K_h and V_h^T as
// weights; rows fan out over the pool, bits independent of the thread count); qh/kh/vt/p are
// scratch of n * d, n * d, d * n and n * n floats.
static void attention(struct tl_pool *pool, const float *q, const float *k, const float *v,
                      int64_t n, int n_head, int hd, float *qh, float *kh, float *vt, float *p,
                      float *att, void *work)
{
    const int64_t d = (int64_t)n_head * hd;
    const float scale = (float)(1.0 / sqrt((double)hd));
    for (int h = 0; h < n_head; h++) {
        for (int64_t t = 0; t < n; t++)
            for (int i = 0; i < hd; i++) {
                qh[t * hd + i] = q[t * d + (int64_t)h * hd + i] * scale;
                kh[t * hd + i] = k[t * d + (int64_t)h * hd + i];
                vt[(int64_t)i * n + t] = v[t * d + (int64_t)h * hd + i];
            }
        struct tl_weight kw = f32_weight(kh, n, hd), vw = f32_weight(vt, hd, n);
        tl_matmul(pool, &kw, qh, n, p, work); // p[t][s] = q_t . k_s * scale
        for (int64_t t = 0; t < n; t++)
            tl_softmax(p + t * n, n);
        tl_matmul(pool, &vw, p, n, qh, work); // qh[t][i] = sum_s p[t][s] v_s[i]
        for (int64_t t = 0; t < n; t++)
            memcpy(att + t * d + (int64_t)h * hd, qh + t * hd, sizeof(float) * (size_t)hd);
    }
}

static size_t max_sz(size_t a, size_t b)
{
    return a > b ? a : b;
}

tl_status tl_model_embed(const struct tl_model *m, struct tl_pool *pool, const int32_t *ids,
                         int64_t n, const struct tl_embed_opts *opts, float *out)
{
    const struct tl_hparams *hp = &m->hp;
    const char *arch = tl__arch_of(hp->arch)->name;
    if (!m->bert)
        return tl__errorf(TL_ERR_UNSUPPORTED,
                          opts->allow_decoder
                              ? "%s: pooling the hidden state of a decoder (architecture %s) is "
                                "not supported yet"
                              : "%s: architecture %s is not an embedding model",
                          m->name, arch);
    enum tl_pooling pooling = opts->pooling != TL_POOLING_NONE ? opts->pooling : hp->pooling;
    if (pooling != TL_POOLING_MEAN && pooling != TL_POOLING_CLS && pooling != TL_POOLING_LAST)
        return tl__errorf(TL_ERR_UNSUPPORTED,
                          "%s: pooling '%s' is not supported (mean, cls, last; the file's "
                          "%s.pooling_type is %s)",
                          m->name, pooling_name(pooling), arch, pooling_name(hp->pooling));
    if (n < 1 || n > hp->n_ctx_train)
        return tl__errorf(TL_ERR_INVALID_ARG, "%s: %lld tokens, expected 1..%d (context length)",
                          m->name, (long long)n, hp->n_ctx_train);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= hp->n_vocab)
            return tl__errorf(TL_ERR_INVALID_ARG, "%s: token id %d outside the vocabulary (%d)",
                              m->name, ids[i], hp->n_vocab);
    const struct tl_bert *b = m->bert;
    for (int64_t i = 0; opts->types && i < n; i++)
        if (opts->types[i] < 0 || opts->types[i] >= b->type_embd.n_out)
            return tl__errorf(TL_ERR_INVALID_ARG, "%s: token type %d outside 0..%lld", m->name,
                              opts->types[i], (long long)b->type_embd.n_out - 1);
    const int64_t d = hp->n_embd, ff = hp->n_ff;
    const float eps = hp->rms_eps;
    size_t work_bytes = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        const struct tl_bert_layer *L = &b->layers[il];
        const struct tl_weight *ws[6] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_up, &L->w_down};
        for (int i = 0; i < 6; i++)
            work_bytes = max_sz(work_bytes, tl_matmul_work_bytes(ws[i], n));
    }
    struct tl_weight kw = f32_weight(NULL, n, hp->head_dim), vw = f32_weight(NULL, hp->head_dim, n);
    work_bytes = max_sz(work_bytes, tl_matmul_work_bytes(&kw, n));
    work_bytes = max_sz(work_bytes, tl_matmul_work_bytes(&vw, n));
    // x, q, k, v, att, tmp, qh, kh, vt: n x d each; h: n x ff; p: n x n; a row of d.
    size_t floats = (size_t)n * (size_t)(9 * d + ff + n) + (size_t)d;
    float *buf = tl_aligned_alloc(floats * sizeof(float));
    void *work = tl_aligned_alloc(work_bytes ? work_bytes : 64);
    if (!buf || !work) {
        tl_aligned_free(buf);
        tl_aligned_free(work);
        return tl__errorf(TL_ERR_NOMEM, "%s: out of memory encoding %lld tokens", m->name,
                          (long long)n);
    }
    float *x = buf, *q = x + n * d, *k = q + n * d, *v = k + n * d, *att = v + n * d;
    float *tmp = att + n * d, *qh = tmp + n * d, *kh = qh + n * d, *vt = kh + n * d;
    float *h = vt + n * d, *p = h + n * ff, *row = p + n * n;
    tl_status rc = TL_OK;

    for (int64_t t = 0; t < n; t++) {
        float *xt = x + t * d;
        memset(xt, 0, sizeof(float) * (size_t)d);
        if (!add_row(&m->tok_embd, ids[t], row, xt) || !add_row(&b->pos_embd, t, row, xt) ||
            !add_row(&b->type_embd, opts->types ? opts->types[t] : 0, row, xt)) {
            rc = tl__errorf(TL_ERR_UNSUPPORTED, "%s: an embedding tensor has an unsupported type",
                            m->name);
            goto out;
        }
        layer_norm(xt, b->embd_norm_w, b->embd_norm_b, eps, d, xt);
    }
    for (int il = 0; il < hp->n_layer; il++) {
        const struct tl_bert_layer *L = &b->layers[il];
        linear(pool, &L->wq, L->bq, x, n, q, work);
        linear(pool, &L->wk, L->bk, x, n, k, work);
        linear(pool, &L->wv, L->bv, x, n, v, work);
        attention(pool, q, k, v, n, hp->n_head, hp->head_dim, qh, kh, vt, p, att, work);
        linear(pool, &L->wo, L->bo, att, n, tmp, work);
        for (int64_t t = 0; t < n; t++) {
            tl_add(tmp + t * d, x + t * d, d);
            layer_norm(tmp + t * d, L->attn_norm_w, L->attn_norm_b, eps, d, x + t * d);
        }
        linear(pool, &L->w_up, L->b_up, x, n, h, work);
        for (int64_t i = 0; i < n * ff; i++)
            h[i] = (float)(0.5 * h[i] * (1.0 + erf(h[i] * M_SQRT1_2)));
        linear(pool, &L->w_down, L->b_down, h, n, tmp, work);
        for (int64_t t = 0; t < n; t++) {
            tl_add(tmp + t * d, x + t * d, d);
            layer_norm(tmp + t * d, L->out_norm_w, L->out_norm_b, eps, d, x + t * d);
        }
    }
    for (int64_t i = 0; i < d; i++) {
        double acc = 0;
        if (pooling == TL_POOLING_MEAN) {
            for (int64_t t = 0; t < n; t++)
                acc += x[t * d + i];
            acc /= (double)n;
        } else {
            acc = x[(pooling == TL_POOLING_CLS ? 0 : n - 1) * d + i];
        }
        out[i] = (float)acc;
    }
    if (opts->normalize) {
        double ss = 0;
        for (int64_t i = 0; i < d; i++)
            ss += (double)out[i] * out[i];
        double inv = ss > 0 ? 1.0 / sqrt(ss) : 0.0;
        for (int64_t i = 0; i < d; i++)
            out[i] = (float)(out[i] * inv);
    }
out:
    tl_aligned_free(buf);
    tl_aligned_free(work);
    return rc;
}
