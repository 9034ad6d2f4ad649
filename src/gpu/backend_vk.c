/*
 * The device engine backend (backend.h): the llama/qwen2 forward pass of src/model/forward.c
 * recorded from the device kernels (gpu_ops.h) as ONE recording per step.
 *
 * Load: the device is opened and every weight is uploaded once, in its own type and file row
 * layout (tok_embd, the norms, q/k/v/o, gate/up/down, the qwen2 biases, output; a tied output
 * shares the embedding's buffer). Anything the device kernels do not take is refused here with
 * one line naming it (a weight type, a repacked weight, head_dim > 256), never at the first step.
 * kv_alloc (the engine's block count) makes one K and one V pool per layer in device memory in
 * the CPU's block layout; prepare makes the step's activations and the RoPE table for max_ctx
 * positions.
 *
 * A step: the token ids, positions, the token table (position + block-table offset per token,
 * then the block tables of the batch's sequences) and the output rows are uploaded; then
 * embedding lookup, per layer RMSNorm, Q/K/V (+bias), RoPE, KV store, paged attention, output
 * projection, residual, RMSNorm, gate/up, SwiGLU, down, residual; the output rows are gathered,
 * normed and projected to the vocabulary; only those logits are downloaded. One submission, one
 * wait. The order of operations is forward.c's, so K/V are read back from the pool and a token's
 * logits depend on nothing else in the batch (every kernel reduces in a fixed order).
 *
 * The tokenizer and detokenizer are the CPU model backend's (backend_model.c), wrapped.
 * Ownership: the context owns the device, its buffers and the wrapped CPU backend's context.
 */
#include "gpu/backend.h"

#include "gpu/gpu_ops.h"

#include "core/alloc.h"
#include "core/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dev_weight {
    enum tl_dtype type;
    int64_t n_in, n_out;
    tl_gpu_buffer *buf; // owned unless `shared`
    bool shared;
};

struct dev_layer {
    tl_gpu_buffer *attn_norm, *ffn_norm, *bq, *bk, *bv; // bias NULL when absent
    struct dev_weight wq, wk, wv, wo, wg, wu, wd;
    struct tl_gpu_kv kv; // pools owned
};

struct vk_backend {
    struct tl_engine_backend cpu; // the model backend: tokenizer and detokenizer only
    const struct tl_model *m;     // borrowed
    tl_gpu_device *d;             // owned
    tl_gpu_rec *rec;              // owned
    struct dev_weight tok_embd, output;
    tl_gpu_buffer *output_norm;
    struct dev_layer *layers; // (n_layer)
    size_t weight_bytes, kv_bytes;
    enum tl_dtype kv_type;
    int32_t block_size;
    int64_t n_blocks;
    int64_t max_tok, max_ctx, max_meta;
    tl_gpu_buffer *x, *xn, *q, *k, *v, *att, *o, *g, *u, *xo, *logits, *rope;
    tl_gpu_buffer *tok, *pos, *meta, *out_idx;
    int32_t *h_meta;   // (max_meta)
    int32_t *h_seq_nb; // (max_tok) blocks of each sequence's table this step, then its offset
};

static tl_status buf(struct vk_backend *g, size_t bytes, tl_gpu_buffer **out)
{
    return tl_gpu_buffer_create(g->d, bytes ? bytes : 4, out);
}

// The file rows of a weight: the model repacks its matmul weights for the CPU kernels at load
// (model.c), so those are read again from the GGUF mapping (a tied output: the embedding's rows,
// which stay in file layout). NULL when there are none (a llama.c checkpoint).
static const void *file_rows(const struct vk_backend *g, const char *name, int il,
                             const struct tl_weight *w)
{
    if (w->layout == TL_WEIGHT_ROWS) return w->data;
    const struct tl_model *m = g->m;
    if (!m->gguf) return NULL;
    char full[96];
    if (il >= 0)
        snprintf(full, sizeof(full), "blk.%d.%s.weight", il, name);
    else
        snprintf(full, sizeof(full), "%s.weight", name);
    const struct tl_gguf_tensor *t = tl_gguf_find_tensor(m->gguf, full);
    if (!t && il < 0 && !strcmp(name, "output") && m->tok_embd.layout == TL_WEIGHT_ROWS &&
        m->tok_embd.type == w->type)
        return m->tok_embd.data;
    if (!t || t->type != w->type || t->ne[0] != w->n_in || t->ne[1] != w->n_out ||
        t->n_bytes < (size_t)w->n_out * w->row_bytes)
        return NULL;
    return t->data;
}

// Uploads a weight matrix in its own type and file row layout (padded as the matmul shaders
// need).
static tl_status upload_weight(struct vk_backend *g, const char *name, int il,
                               const struct tl_weight *w, struct dev_weight *out)
{
    out->type = w->type, out->n_in = w->n_in, out->n_out = w->n_out;
    const void *rows = file_rows(g, name, il, w);
    if (!rows)
        return tl__errorf(TL_ERR_UNSUPPORTED,
                          "%s: weight %s: the device backend reads repacked weights from a GGUF "
                          "file only (not a llama2.c checkpoint)",
                          tl_gpu_device_name(g->d), name);
    if (!tl_gpu_matmul_supported(w->type))
        return tl__errorf(TL_ERR_UNSUPPORTED,
                          "%s: weight type %s (%s) is not supported by the device kernels "
                          "(F32, F16, BF16, Q8_0, Q4_K, Q5_K, Q6_K)",
                          tl_gpu_device_name(g->d), tl_dtype_name(w->type), name);
    size_t bytes = tl_gpu_matmul_weight_bytes(w->type, w->n_in, w->n_out);
    size_t file = (size_t)w->n_out * w->row_bytes;
    if (!bytes || bytes < file)
        return tl__errorf(TL_ERR_UNSUPPORTED,
                          "%s: weight %s of %lld x %lld %s: shape not supported",
                          tl_gpu_device_name(g->d), name, (long long)w->n_out, (long long)w->n_in,
                          tl_dtype_name(w->type));
    char *host = tl_malloc(bytes);
    if (!host) return tl__errorf(TL_ERR_NOMEM, "out of memory staging weight %s", name);
    memcpy(host, rows, file);
    memset(host + file, 0, bytes - file);
    tl_status st = buf(g, bytes, &out->buf);
    if (!st) st = tl_gpu_buffer_write(out->buf, 0, host, bytes);
    free(host);
    if (!st) g->weight_bytes += bytes;
    return st;
}

static tl_status upload_f32(struct vk_backend *g, const float *src, int64_t n, tl_gpu_buffer **out)
{
    tl_status st = buf(g, (size_t)n * 4, out);
    if (!st) st = tl_gpu_buffer_write(*out, 0, src, (size_t)n * 4);
    if (!st) g->weight_bytes += (size_t)n * 4;
    return st;
}

static void free_weight(struct dev_weight *w)
{
    if (!w->shared) tl_gpu_buffer_destroy(w->buf);
    w->buf = NULL;
}

static void free_scratch(struct vk_backend *g)
{
    tl_gpu_buffer *all[] = {g->x, g->xn, g->q,      g->k,    g->v,   g->att, g->o,    g->g,
                            g->u, g->xo, g->logits, g->rope, g->tok, g->pos, g->meta, g->out_idx};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        tl_gpu_buffer_destroy(all[i]);
    g->x = g->xn = g->q = g->k = g->v = g->att = g->o = g->g = g->u = g->xo = g->logits = NULL;
    g->rope = g->tok = g->pos = g->meta = g->out_idx = NULL;
}

static void vb_destroy(void *ctx)
{
    struct vk_backend *g = ctx;
    if (!g) return;
    free_scratch(g);
    if (g->layers) {
        for (int il = 0; il < g->m->hp.n_layer; il++) {
            struct dev_layer *L = &g->layers[il];
            tl_gpu_buffer *bs[] = {L->attn_norm, L->ffn_norm, L->bq,  L->bk,
                                   L->bv,        L->kv.k,     L->kv.v};
            for (size_t i = 0; i < sizeof(bs) / sizeof(bs[0]); i++)
                tl_gpu_buffer_destroy(bs[i]);
            struct dev_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->wg, &L->wu, &L->wd};
            for (int i = 0; i < 7; i++)
                free_weight(ws[i]);
        }
        free(g->layers);
    }
    free_weight(&g->output);
    free_weight(&g->tok_embd);
    tl_gpu_buffer_destroy(g->output_norm);
    tl_gpu_rec_destroy(g->rec);
    tl_gpu_device_destroy(g->d);
    free(g->h_meta);
    free(g->h_seq_nb);
    if (g->cpu.destroy) g->cpu.destroy(g->cpu.ctx);
    free(g);
}

// ---- the KV pool and the step's scratch -----------------------------------------------------

static size_t vb_kv_block_bytes(void *ctx, int32_t block_size, enum tl_dtype type)
{
    struct vk_backend *g = ctx;
    const struct tl_hparams *hp = &g->m->hp;
    size_t one = tl_gpu_kv_pool_bytes(type, 1, block_size, hp->n_head_kv, hp->head_dim);
    return one * 2 * (size_t)hp->n_layer;
}

static tl_status vb_kv_alloc(void *ctx, int64_t n_blocks, int32_t block_size, enum tl_dtype type)
{
    struct vk_backend *g = ctx;
    const struct tl_hparams *hp = &g->m->hp;
    size_t bytes = tl_gpu_kv_pool_bytes(type, n_blocks, block_size, hp->n_head_kv, hp->head_dim);
    if (!bytes)
        return tl__errorf(TL_ERR_UNSUPPORTED,
                          "%s: KV cache of %s with head_dim %d is not supported by the device "
                          "(F32, F16 with head_dim even, Q8_0 with head_dim a multiple of 32)",
                          tl_gpu_device_name(g->d), tl_dtype_name(type), hp->head_dim);
    g->kv_type = type, g->block_size = block_size, g->n_blocks = n_blocks;
    for (int il = 0; il < hp->n_layer; il++) {
        struct tl_gpu_kv *kv = &g->layers[il].kv;
        *kv = (struct tl_gpu_kv){.type = type,
                                 .block_size = block_size,
                                 .n_kv_head = hp->n_head_kv,
                                 .head_dim = hp->head_dim,
                                 .n_blocks = n_blocks};
        tl_status st = buf(g, bytes, &kv->k);
        if (!st) st = buf(g, bytes, &kv->v);
        if (st) return tl__error_prefix(st, "KV pool");
        g->kv_bytes += 2 * bytes;
    }
    return TL_OK;
}

static tl_status vb_prepare(void *ctx, int64_t max_tok, int64_t max_ctx, int32_t n_threads)
{
    (void)n_threads;
    struct vk_backend *g = ctx;
    const struct tl_hparams *hp = &g->m->hp;
    if (!g->block_size)
        return tl__errorf(TL_ERR_STATE, "device backend: prepare before the KV pool");
    g->max_tok = max_tok, g->max_ctx = max_ctx;
    int64_t nb = (max_ctx + g->block_size - 1) / g->block_size;
    g->max_meta = 2 * max_tok + max_tok * nb;
    size_t n = (size_t)max_tok, e = (size_t)hp->n_embd;
    size_t qd = (size_t)hp->n_head * hp->head_dim, kvd = (size_t)hp->n_head_kv * hp->head_dim;
    size_t ff = (size_t)hp->n_ff;
    tl_status st;
    if ((st = buf(g, tl_gpu_matmul_weight_bytes(TL_DTYPE_F32, hp->n_embd, max_tok), &g->x)) ||
        (st = buf(g, n * e * 4, &g->xn)) || (st = buf(g, n * qd * 4, &g->q)) ||
        (st = buf(g, n * kvd * 4, &g->k)) || (st = buf(g, n * kvd * 4, &g->v)) ||
        (st = buf(g, n * qd * 4, &g->att)) || (st = buf(g, n * e * 4, &g->o)) ||
        (st = buf(g, n * ff * 4, &g->g)) || (st = buf(g, n * ff * 4, &g->u)) ||
        (st = buf(g, n * e * 4, &g->xo)) ||
        (st = buf(g, n * (size_t)hp->n_vocab * 4, &g->logits)) || (st = buf(g, n * 4, &g->tok)) ||
        (st = buf(g, n * 4, &g->pos)) || (st = buf(g, n * 4, &g->out_idx)) ||
        (st = buf(g, (size_t)g->max_meta * 4, &g->meta)))
        return tl__error_prefix(st, "device step buffers");
    size_t table = (size_t)max_ctx * (size_t)hp->head_dim;
    float *cs = tl_malloc_array(table, sizeof(float));
    g->h_meta = tl_malloc_array((size_t)g->max_meta, sizeof(int32_t));
    g->h_seq_nb = tl_malloc_array(2 * n, sizeof(int32_t));
    if (!cs || !g->h_meta || !g->h_seq_nb) {
        free(cs);
        return tl__errorf(TL_ERR_NOMEM, "device backend: out of memory");
    }
    tl_gpu_rope_table_fill(cs, max_ctx, hp->head_dim, hp->rope_freq_base, hp->rope_freq_scale);
    st = upload_f32(g, cs, (int64_t)table, &g->rope);
    g->weight_bytes -= table * 4; // a table, not a weight
    free(cs);
    return st;
}

// ---- the step -------------------------------------------------------------------------------

// The shared batch check, plus what the device's per-sequence tables need: sequence indices
// below max_tok.
static tl_status check_batch(const struct vk_backend *g, const struct tl_batch *b)
{
    tl_status st = tl_batch_check(b, g->m->hp.n_vocab, g->max_tok, g->max_ctx);
    if (st) return st;
    for (int64_t t = 0; t < b->n_tok; t++)
        if (b->seq[t] < 0 || b->seq[t] >= g->max_tok)
            return tl__errorf(TL_ERR_INVALID_ARG, "sequence index %d out of range", b->seq[t]);
    return TL_OK;
}

// Builds the token table (gpu_ops.h): {position, table offset} per token, then the block table
// of each sequence in the batch up to the block of its last position. Returns its length.
static int64_t build_meta(struct vk_backend *g, const struct tl_batch *b)
{
    int32_t *nb = g->h_seq_nb, *off = g->h_seq_nb + g->max_tok, *meta = g->h_meta;
    int32_t n_seq = 0;
    for (int64_t t = 0; t < b->n_tok; t++)
        if (b->seq[t] + 1 > n_seq) n_seq = b->seq[t] + 1;
    for (int32_t s = 0; s < n_seq; s++)
        nb[s] = 0;
    for (int64_t t = 0; t < b->n_tok; t++) {
        int32_t need = b->pos[t] / g->block_size + 1;
        if (need > nb[b->seq[t]]) nb[b->seq[t]] = need;
    }
    int64_t n = 2 * b->n_tok;
    for (int32_t s = 0; s < n_seq; s++) {
        off[s] = (int32_t)n;
        if (nb[s]) memcpy(meta + n, b->block_tables[s], (size_t)nb[s] * sizeof(int32_t));
        n += nb[s];
    }
    for (int64_t t = 0; t < b->n_tok; t++)
        meta[2 * t] = b->pos[t], meta[2 * t + 1] = off[b->seq[t]];
    return n;
}

static tl_status mm(tl_gpu_rec *r, const struct dev_weight *w, tl_gpu_buffer *x, int64_t n,
                    tl_gpu_buffer *y)
{
    return tl_gpu_matmul(r, w->type, w->buf, w->n_in, w->n_out, x, n, y);
}

static tl_status record_layer(struct vk_backend *g, const struct dev_layer *L, int64_t n,
                              int64_t n_meta)
{
    const struct tl_hparams *hp = &g->m->hp;
    tl_gpu_rec *r = g->rec;
    int64_t e = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim;
    int64_t kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    float scale = 1.0f / sqrtf((float)hp->head_dim);
    tl_status st;
    if ((st = tl_gpu_rmsnorm(r, g->x, L->attn_norm, g->xn, e, n, hp->rms_eps)) ||
        (st = mm(r, &L->wq, g->xn, n, g->q)) || (st = mm(r, &L->wk, g->xn, n, g->k)) ||
        (st = mm(r, &L->wv, g->xn, n, g->v)) ||
        (L->bq && (st = tl_gpu_add_bias(r, g->q, L->bq, qd, n))) ||
        (L->bk && (st = tl_gpu_add_bias(r, g->k, L->bk, kvd, n))) ||
        (L->bv && (st = tl_gpu_add_bias(r, g->v, L->bv, kvd, n))) ||
        (st = tl_gpu_rope(r, g->q, n, hp->n_head, hp->head_dim, hp->rope_mode, g->pos, g->rope,
                          g->max_ctx)) ||
        (st = tl_gpu_rope(r, g->k, n, hp->n_head_kv, hp->head_dim, hp->rope_mode, g->pos, g->rope,
                          g->max_ctx)) ||
        (st = tl_gpu_kv_store(r, &L->kv, g->k, g->v, n, g->meta, n_meta)) ||
        (st = tl_gpu_attention(r, &L->kv, g->q, n, hp->n_head, scale, g->meta, n_meta, g->att)) ||
        (st = mm(r, &L->wo, g->att, n, g->o)) ||
        (st = tl_gpu_eltwise(r, TL_GPU_ADD, g->x, g->o, g->x, n * e)) ||
        (st = tl_gpu_rmsnorm(r, g->x, L->ffn_norm, g->xn, e, n, hp->rms_eps)) ||
        (st = mm(r, &L->wg, g->xn, n, g->g)) || (st = mm(r, &L->wu, g->xn, n, g->u)) ||
        (st = tl_gpu_eltwise(r, TL_GPU_SWIGLU, g->g, g->u, g->g, n * hp->n_ff)) ||
        (st = mm(r, &L->wd, g->g, n, g->o)) ||
        (st = tl_gpu_eltwise(r, TL_GPU_ADD, g->x, g->o, g->x, n * e)))
        return st;
    return TL_OK;
}

static tl_status vb_forward(void *ctx, const struct tl_batch *b, const struct tl_kv_pages *kv,
                            float *logits)
{
    (void)kv; // the host keeps no K/V (n_layer 0): the pools are the device's
    struct vk_backend *g = ctx;
    const struct tl_hparams *hp = &g->m->hp;
    tl_status st = check_batch(g, b);
    if (st) return st;
    int64_t n = b->n_tok, n_meta = build_meta(g, b);
    tl_gpu_rec *r = g->rec;
    if ((st = tl_gpu_rec_upload(r, g->tok, 0, b->token, (size_t)n * 4)) ||
        (st = tl_gpu_rec_upload(r, g->pos, 0, b->pos, (size_t)n * 4)) ||
        (st = tl_gpu_rec_upload(r, g->meta, 0, g->h_meta, (size_t)n_meta * 4)) ||
        (b->n_out &&
         (st = tl_gpu_rec_upload(r, g->out_idx, 0, b->out_idx, (size_t)b->n_out * 4))) ||
        (st = tl_gpu_get_rows(r, g->tok_embd.type, g->tok_embd.buf, hp->n_embd, hp->n_vocab, g->tok,
                              n, g->x)))
        goto out;
    for (int il = 0; il < hp->n_layer; il++)
        if ((st = record_layer(g, &g->layers[il], n, n_meta))) goto out;
    if (b->n_out && ((st = tl_gpu_get_rows(r, TL_DTYPE_F32, g->x, hp->n_embd, n, g->out_idx,
                                           b->n_out, g->xo)) ||
                     (st = tl_gpu_rmsnorm(r, g->xo, g->output_norm, g->xn, hp->n_embd, b->n_out,
                                          hp->rms_eps)) ||
                     (st = mm(r, &g->output, g->xn, b->n_out, g->logits)) ||
                     (st = tl_gpu_rec_download(r, g->logits, 0, logits,
                                               (size_t)b->n_out * (size_t)hp->n_vocab * 4))))
        goto out;
out:
    // run() also reports a sticky recording error, and empties the recorder either way
    {
        tl_status run = tl_gpu_rec_run(r);
        return st ? st : run;
    }
}

static void vb_device_stats(void *ctx, struct tl_engine_stats *st)
{
    struct vk_backend *g = ctx;
    struct tl_gpu_stats s;
    tl_gpu_device_stats(g->d, &s);
    st->gpu_submits_total = (int64_t)s.n_submits;
    st->gpu_waits_total = (int64_t)s.n_waits;
    st->gpu_dispatches_total = (int64_t)s.n_dispatches;
    st->gpu_upload_bytes_total = (int64_t)s.upload_bytes;
    st->gpu_download_bytes_total = (int64_t)s.download_bytes;
    st->gpu_busy_ns_total = s.timed ? (int64_t)s.busy_ns : 0;
    for (int p = 0; p < 4 && p < TL_GPU_PHASE_COUNT; p++)
        st->gpu_phase_ns_total[p] = s.timed ? (int64_t)s.phase_ns[p] : 0;
    st->gpu_weight_bytes = (int64_t)g->weight_bytes;
    st->gpu_kv_bytes = (int64_t)g->kv_bytes;
}

static void vb_step_work(void *ctx, const struct tl_batch *b, const struct tl_kv_pages *kv,
                         struct tl_step_work *out)
{
    (void)kv;
    struct vk_backend *g = ctx;
    tl_model_step_work(g->m, g->kv_type, b, out);
}

// ---- the CPU backend's tokenizer and detokenizer ---------------------------------------------

static tl_status vb_tokenize(void *ctx, const char *text, size_t len, bool add_special,
                             bool parse_special, int32_t **ids, int64_t *n_ids)
{
    struct vk_backend *g = ctx;
    return g->cpu.tokenize(g->cpu.ctx, text, len, add_special, parse_special, ids, n_ids);
}

static bool vb_is_eog(void *ctx, int32_t id)
{
    struct vk_backend *g = ctx;
    return g->cpu.is_eog(g->cpu.ctx, id);
}

static int vb_token_bytes(void *ctx, int32_t id, char *out, int cap)
{
    struct vk_backend *g = ctx;
    return g->cpu.token_bytes(g->cpu.ctx, id, out, cap);
}

static void vb_detok_init(void *ctx, void *state, bool render_special)
{
    struct vk_backend *g = ctx;
    g->cpu.detok_init(g->cpu.ctx, state, render_special);
}

static tl_status vb_detok_push(void *ctx, void *state, int32_t id, char **out, size_t *len,
                               size_t *cap)
{
    struct vk_backend *g = ctx;
    return g->cpu.detok_push(g->cpu.ctx, state, id, out, len, cap);
}

static tl_status vb_detok_flush(void *ctx, void *state, char **out, size_t *len, size_t *cap)
{
    struct vk_backend *g = ctx;
    return g->cpu.detok_flush(g->cpu.ctx, state, out, len, cap);
}

// ---- creation -------------------------------------------------------------------------------

static tl_status upload_model(struct vk_backend *g)
{
    const struct tl_model *m = g->m;
    const struct tl_hparams *hp = &m->hp;
    const char *dev = tl_gpu_device_name(g->d);
    if (hp->arch != TL_ARCH_LLAMA && hp->arch != TL_ARCH_QWEN2) {
        struct tl_gguf_str a = {0, ""};
        if (m->gguf) tl_gguf_get_str(m->gguf, "general.architecture", &a);
        return tl__errorf(TL_ERR_UNSUPPORTED,
                          "%s: architecture '%.*s' is not supported on the device yet (llama, "
                          "qwen2)",
                          dev, (int)(a.len < 64 ? a.len : 64), a.ptr);
    }
    if (hp->head_dim > 256 || hp->head_dim % 2)
        return tl__errorf(TL_ERR_UNSUPPORTED,
                          "%s: head_dim %d is not supported by the device attention (even, <= 256)",
                          dev, hp->head_dim);
    // Llama 3.1+ RoPE frequency factors change the rotation (the CPU reads them since the
    // model-families work); the device table does not take them yet.
    if (m->gguf && tl_gguf_find_tensor(m->gguf, "rope_freqs.weight"))
        return tl__errorf(TL_ERR_UNSUPPORTED,
                          "%s: RoPE frequency factors (rope_freqs.weight, Llama 3.1 scaling) are "
                          "not supported on the device yet",
                          dev);
    if (hp->rope_mode != TL_ROPE_NORMAL && hp->rope_mode != TL_ROPE_NEOX)
        return tl__errorf(TL_ERR_UNSUPPORTED, "%s: RoPE mode %d is not supported on the device",
                          dev, (int)hp->rope_mode);
    tl_status st;
    if ((st = upload_weight(g, "token_embd", -1, &m->tok_embd, &g->tok_embd))) return st;
    if (file_rows(g, "output", -1, &m->output) == file_rows(g, "token_embd", -1, &m->tok_embd))
        g->output = g->tok_embd, g->output.shared = true;
    else if ((st = upload_weight(g, "output", -1, &m->output, &g->output)))
        return st;
    if ((st = upload_f32(g, m->output_norm, hp->n_embd, &g->output_norm))) return st;
    g->layers = tl_calloc_array((size_t)hp->n_layer, sizeof(*g->layers));
    if (!g->layers) return tl__errorf(TL_ERR_NOMEM, "device backend: out of memory");
    int64_t qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    for (int il = 0; il < hp->n_layer; il++) {
        const struct tl_layer *L = &m->layers[il];
        struct dev_layer *D = &g->layers[il];
        if ((st = upload_f32(g, L->attn_norm, hp->n_embd, &D->attn_norm)) ||
            (st = upload_f32(g, L->ffn_norm, hp->n_embd, &D->ffn_norm)) ||
            (L->bq && (st = upload_f32(g, L->bq, qd, &D->bq))) ||
            (L->bk && (st = upload_f32(g, L->bk, kvd, &D->bk))) ||
            (L->bv && (st = upload_f32(g, L->bv, kvd, &D->bv))) ||
            (st = upload_weight(g, "attn_q", il, &L->wq, &D->wq)) ||
            (st = upload_weight(g, "attn_k", il, &L->wk, &D->wk)) ||
            (st = upload_weight(g, "attn_v", il, &L->wv, &D->wv)) ||
            (st = upload_weight(g, "attn_output", il, &L->wo, &D->wo)) ||
            (st = upload_weight(g, "ffn_gate", il, &L->w_gate, &D->wg)) ||
            (st = upload_weight(g, "ffn_up", il, &L->w_up, &D->wu)) ||
            (st = upload_weight(g, "ffn_down", il, &L->w_down, &D->wd)))
            return st;
    }
    return TL_OK;
}

tl_status tl_gpu_engine_backend(const tl_model *m, const char *device, struct tl_engine_backend *be)
{
    struct vk_backend *g = tl_calloc_array(1, sizeof(*g));
    if (!g) return tl__errorf(TL_ERR_NOMEM, "device backend: out of memory");
    g->m = m;
    tl_status st = tl__engine_backend_model(m, &g->cpu);
    if (st) {
        free(g);
        return st;
    }
    if ((st = tl_gpu_device_open(device, &g->d)) || (st = tl_gpu_rec_create(g->d, &g->rec)) ||
        (st = upload_model(g))) {
        vb_destroy(g);
        return st;
    }
    const struct tl_hparams *hp = &m->hp;
    *be = (struct tl_engine_backend){
        .ctx = g,
        .n_vocab = hp->n_vocab,
        .n_ctx = hp->n_ctx_train,
        .n_layer = 0, // the host keeps block accounting only; K/V live on the device
        .n_kv_head = hp->n_head_kv,
        .head_dim = hp->head_dim,
        .prepare = vb_prepare,
        .forward = vb_forward,
        .step_work = vb_step_work,
        .tokenize = vb_tokenize,
        .is_eog = vb_is_eog,
        .token_bytes = vb_token_bytes,
        .detok_bytes = g->cpu.detok_bytes,
        .detok_init = vb_detok_init,
        .detok_push = vb_detok_push,
        .detok_flush = vb_detok_flush,
        .kv_block_bytes = vb_kv_block_bytes,
        .kv_alloc = vb_kv_alloc,
        .device_stats = vb_device_stats,
        .pool = NULL,
        .destroy = vb_destroy,
    };
    return TL_OK;
}

tl_gpu_device *tl_gpu_engine_backend_device(void *ctx)
{
    return ((struct vk_backend *)ctx)->d;
}

size_t tl_gpu_engine_backend_weight_bytes(void *ctx)
{
    return ((struct vk_backend *)ctx)->weight_bytes;
}
