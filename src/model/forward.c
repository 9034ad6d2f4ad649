/*
 * The batched forward pass of the Llama-shaped families (llama, qwen2, qwen3, qwen3moe, granite,
 * smollm3: see arch.h) over a flat batch.
 *
 * Design: activations are (n_tok, width) row-major matrices in scratch allocated once for
 * max_tok tokens. Each layer runs: RMSNorm -> Q/K/V matmuls (+bias) -> per-head Q/K RMSNorm
 * (qwen3) -> RoPE (unless the layer is a NoPE layer) -> store K/V of every batch token into the
 * paged cache -> attention of every token over its own sequence's blocks -> output matmul +
 * residual -> RMSNorm -> gate/up matmuls -> SwiGLU -> down matmul (or the mixture of experts of
 * moe.c) + residual; gemma2 adds soft-capped sliding-window attention (tl_attention_opt), an
 * RMSNorm of each sublayer's output before its residual add, GeGLU, and capped logits. The
 * families' multipliers (granite: embeddings, residual branches, attention scale, logits) are
 * applied only when the model has them, so a llama model runs exactly the ops it always ran. Every
 * weight matrix is multiplied with all tokens of the step at once (tl_matmul tiles them), so the
 * weights are read once per step for everyone. Logits are computed only for the rows in out_idx.
 * Scratch sizes are products taken through tl_mul_size (alloc_matrix), so the row offsets used
 * below (t * width, t < max_tok) are bounded by an allocation that succeeded.
 *
 * Determinism: every op computes a token's row from that token's inputs alone with a fixed
 * reduction order (the kernels' contract), and K/V are always read back from the cache (never
 * from the step's fresh f32 rows), so a token's logits do not depend on the batch around it, on
 * how its prompt was chunked, or on whether its prefix came from the prefix cache.
 *
 * Thread model: a tl_forward belongs to one thread (the engine's); it fans work out over the
 * pool it was created with.
 */
#include "model/model.h"

#include "model/arch.h"
#include "model/moe.h"

#include "core/alloc.h"
#include "core/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct tl_forward {
    const struct tl_model *model; // borrowed
    struct tl_pool *pool;         // borrowed
    int64_t max_tok, max_ctx;
    float *x;   // (max_tok, n_embd) residual stream
    float *xb;  // (max_tok, n_embd) normed input of a sublayer
    float *q;   // (max_tok, q_dim)
    float *k;   // (max_tok, kv_dim)
    float *v;   // (max_tok, kv_dim)
    float *att; // (max_tok, q_dim) attention output
    float *h1;  // (max_tok, n_ff) gate, then SwiGLU output
    float *h2;  // (max_tok, n_ff) up
    float *tmp; // (max_tok, n_embd) sublayer output before the residual add
    void *work; // matmul / attention work buffer
    size_t work_bytes;
    struct tl_attn_query *queries; // (max_tok)
    struct tl_moe *moe;            // mixture-of-experts scratch (moe.c); NULL for dense models
    double *rope_freq; // (head_dim / 2) base^(-2i/d) / rope_freqs[i]; NULL without rope_freqs
};

static size_t max_size(size_t a, size_t b)
{
    return a > b ? a : b;
}

// An aligned (rows, cols) f32 matrix; NULL when rows * cols * 4 overflows or memory is short.
static float *alloc_matrix(size_t rows, size_t cols)
{
    size_t n, bytes;
    if (!tl_mul_size(rows, cols, &n) || !tl_mul_size(n, sizeof(float), &bytes)) return NULL;
    return tl_aligned_alloc(bytes);
}

struct tl_forward *tl_forward_create(const struct tl_model *m, int64_t max_tok, int64_t max_ctx,
                                     struct tl_pool *pool)
{
    const struct tl_hparams *hp = &m->hp;
    if (m->bert) { // an encoder has no decoder pass: encode.c (tl_model_embed) runs it
        tl__errorf(TL_ERR_UNSUPPORTED,
                   "%s: architecture %s is an embedding model (encoder); it cannot generate text",
                   m->path, tl__arch_of(hp->arch)->name);
        return NULL;
    }
    struct tl_forward *f = tl_calloc_array(1, sizeof(*f));
    if (!f) goto out_destroy;
    f->model = m;
    f->pool = pool;
    f->max_tok = max_tok;
    f->max_ctx = max_ctx;
    size_t n = (size_t)max_tok, q_dim, kv_dim;
    if (!tl_mul_size((size_t)hp->n_head, (size_t)hp->head_dim, &q_dim) ||
        !tl_mul_size((size_t)hp->n_head_kv, (size_t)hp->head_dim, &kv_dim))
        goto out_destroy;
    f->x = alloc_matrix(n, (size_t)hp->n_embd);
    f->xb = alloc_matrix(n, (size_t)hp->n_embd);
    f->tmp = alloc_matrix(n, (size_t)hp->n_embd);
    f->q = alloc_matrix(n, q_dim);
    f->k = alloc_matrix(n, kv_dim);
    f->v = alloc_matrix(n, kv_dim);
    f->att = alloc_matrix(n, q_dim);
    size_t ff = 0; // the widest FFN hidden layer: n_ff (dense) or n_ff_exp (experts)
    for (int il = 0; il < hp->n_layer; il++)
        ff = max_size(ff, (size_t)(m->layers[il].n_expert > 0 ? hp->n_ff_exp : hp->n_ff));
    f->h1 = alloc_matrix(n, ff);
    f->h2 = alloc_matrix(n, ff);
    if (m->rope_freqs) { // head_dim / 2 <= TL_ROPE_FREQS_MAX_HALF (validated)
        f->rope_freq = tl_calloc_array((size_t)hp->head_dim / 2, sizeof(double));
        if (!f->rope_freq) goto out_destroy;
        for (int i = 0; i < hp->head_dim / 2; i++)
            f->rope_freq[i] = pow(hp->rope_freq_base, -2.0 * i / hp->head_dim) / m->rope_freqs[i];
    }
    bool moe_ok = hp->n_expert == 0 || (f->moe = tl__moe_create(m, max_tok, pool)) != NULL;
    f->queries = tl_calloc_array(n, sizeof(*f->queries));
    size_t wb = tl_attention_work_bytes(tl_pool_size(pool), max_ctx, hp->head_dim);
    const struct tl_weight *all[] = {&m->tok_embd, &m->output};
    for (int i = 0; i < 2; i++)
        wb = max_size(wb, tl_matmul_work_bytes(all[i], max_tok));
    for (int il = 0; il < hp->n_layer; il++) {
        struct tl_layer *L = &m->layers[il]; // read only; tl_layer_weight takes it mutable
        for (int64_t i = 0; i < tl_layer_n_weights(L); i++)
            wb = max_size(wb, tl_matmul_work_bytes(tl_layer_weight(L, i), max_tok));
    }
    f->work_bytes = wb;
    f->work = tl_aligned_alloc(wb);
    if (!f->x || !f->xb || !f->tmp || !f->q || !f->k || !f->v || !f->att || !f->h1 || !f->h2 ||
        !f->queries || !f->work || !moe_ok)
        goto out_destroy;
    return f;
out_destroy:
    tl_forward_destroy(f);
    tl__errorf(TL_ERR_NOMEM, "out of memory allocating forward scratch for %lld tokens",
               (long long)max_tok);
    return NULL;
}

void tl_forward_destroy(struct tl_forward *f)
{
    if (!f) return;
    tl_aligned_free(f->x);
    tl_aligned_free(f->xb);
    tl_aligned_free(f->tmp);
    tl_aligned_free(f->q);
    tl_aligned_free(f->k);
    tl_aligned_free(f->v);
    tl_aligned_free(f->att);
    tl_aligned_free(f->h1);
    tl_aligned_free(f->h2);
    tl_aligned_free(f->work);
    free(f->queries);
    tl__moe_destroy(f->moe);
    free(f->rope_freq);
    free(f);
}

// ---- row-wise phases, split over tokens ---------------------------------------------------------

enum phase { PHASE_NORM, PHASE_QKV_POST, PHASE_RESIDUAL, PHASE_SWIGLU };

struct phase_arg {
    enum phase phase;
    struct tl_forward *f;
    const struct tl_batch *b;
    const struct tl_layer *layer;
    const struct tl_kv_layer *kv;
    const float *norm_w; // PHASE_NORM
    const float *src;    // PHASE_NORM input rows
    float *dst;          // PHASE_NORM output rows
    int64_t n_rows;
};

static void add_bias(float *row, const float *bias, int64_t n)
{
    if (bias) tl_add(row, bias, n);
}

// x *= s elementwise (a multiplier of 0 or 1 means none: the caller skips the call).
static void scale_row(float *x, float s, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] *= s;
}

static bool has_scale(float s)
{
    return s != 0.0f && s != 1.0f;
}

// RoPE with per-pair frequencies freq[i] (already divided by the file's rope_freqs): theta =
// pos * freq_scale * freq[i], the pairs of `mode`, in the arithmetic of the kernels' tl_rope.
static void rope_freqs(float *x, int n_heads, int head_dim, int64_t pos, float freq_scale,
                       const double *freq, enum tl_rope_mode mode)
{
    int half = head_dim / 2;
    float c[TL_ROPE_FREQS_MAX_HALF], s[TL_ROPE_FREQS_MAX_HALF];
    double p = (double)pos * freq_scale;
    for (int i = 0; i < half; i++) {
        c[i] = (float)cos(p * freq[i]);
        s[i] = (float)sin(p * freq[i]);
    }
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * head_dim;
        for (int i = 0; i < half; i++) {
            int i0 = mode == TL_ROPE_NEOX ? i : 2 * i,
                i1 = mode == TL_ROPE_NEOX ? i + half : i0 + 1;
            float a = v[i0], b = v[i1];
            v[i0] = a * c[i] - b * s[i];
            v[i1] = a * s[i] + b * c[i];
        }
    }
}

// gate = gelu_tanh(gate) * up (gemma2's GeGLU; HF gelu_pytorch_tanh, llama.cpp ggml_gelu):
// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), scalar f32, one token's row alone.
static void geglu(float *gate, const float *up, int64_t n)
{
    const float c = 0.7978845608028654f; // sqrt(2 / pi)
    for (int64_t i = 0; i < n; i++) {
        float x = gate[i];
        gate[i] = 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x))) * up[i];
    }
}

// RMSNorm of each of n_heads heads of head_dim values, in place, with one shared weight.
static void head_norm(float *x, const float *w, int n_heads, int head_dim, float eps)
{
    for (int h = 0; h < n_heads; h++)
        tl_rmsnorm(x + (int64_t)h * head_dim, w, eps, head_dim, x + (int64_t)h * head_dim);
}

static void phase_fn(void *p, int ith, int nth)
{
    struct phase_arg *a = p;
    struct tl_forward *f = a->f;
    const struct tl_hparams *hp = &f->model->hp;
    int64_t n_embd = hp->n_embd, q_dim = (int64_t)hp->n_head * hp->head_dim;
    int64_t kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
    int64_t t0, t1;
    tl_pool_range(a->n_rows, 1, ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) {
        switch (a->phase) {
        case PHASE_NORM:
            tl_rmsnorm(a->src + t * n_embd, a->norm_w, hp->rms_eps, n_embd, a->dst + t * n_embd);
            break;
        case PHASE_QKV_POST: {
            float *q = f->q + t * q_dim, *k = f->k + t * kv_dim, *v = f->v + t * kv_dim;
            add_bias(q, a->layer->bq, q_dim);
            add_bias(k, a->layer->bk, kv_dim);
            add_bias(v, a->layer->bv, kv_dim);
            if (a->layer->q_norm)
                head_norm(q, a->layer->q_norm, hp->n_head, hp->head_dim, hp->rms_eps);
            if (a->layer->k_norm)
                head_norm(k, a->layer->k_norm, hp->n_head_kv, hp->head_dim, hp->rms_eps);
            int32_t pos = a->b->pos[t];
            if (!a->layer->no_rope && a->layer->window && hp->rope_freq_base_swa > 0) {
                // gemma3's sliding layers: their own base, no scaling
                tl_rope(q, hp->n_head, hp->head_dim, pos, hp->rope_freq_base_swa, 1.0f,
                        hp->rope_mode);
                tl_rope(k, hp->n_head_kv, hp->head_dim, pos, hp->rope_freq_base_swa, 1.0f,
                        hp->rope_mode);
            } else if (!a->layer->no_rope && f->rope_freq) {
                rope_freqs(q, hp->n_head, hp->head_dim, pos, hp->rope_freq_scale, f->rope_freq,
                           hp->rope_mode);
                rope_freqs(k, hp->n_head_kv, hp->head_dim, pos, hp->rope_freq_scale, f->rope_freq,
                           hp->rope_mode);
            } else if (!a->layer->no_rope) {
                tl_rope(q, hp->n_head, hp->head_dim, pos, hp->rope_freq_base, hp->rope_freq_scale,
                        hp->rope_mode);
                tl_rope(k, hp->n_head_kv, hp->head_dim, pos, hp->rope_freq_base,
                        hp->rope_freq_scale, hp->rope_mode);
            }
            tl_kv_store(a->kv, a->b->block_tables[a->b->seq[t]], pos, k, v);
            break;
        }
        case PHASE_RESIDUAL:
            if (has_scale(hp->residual_scale))
                scale_row(f->tmp + t * n_embd, hp->residual_scale, n_embd);
            tl_add(f->x + t * n_embd, f->tmp + t * n_embd, n_embd);
            break;
        case PHASE_SWIGLU:
            if (hp->ffn_gelu)
                geglu(f->h1 + t * hp->n_ff, f->h2 + t * hp->n_ff, hp->n_ff);
            else
                tl_swiglu(f->h1 + t * hp->n_ff, f->h2 + t * hp->n_ff, f->h1 + t * hp->n_ff,
                          hp->n_ff);
            break;
        }
    }
}

static void run_phase(struct phase_arg *a, enum phase ph, int64_t n_rows)
{
    a->phase = ph;
    a->n_rows = n_rows;
    // Tiny batches are not worth waking the workers for.
    if (n_rows < 4)
        phase_fn(a, 0, 1);
    else
        tl_pool_run(a->f->pool, phase_fn, a);
}

// ---- step profile -----------------------------------------------------------------------------

static bool g_prof_on;
static struct tl_forward_profile g_prof;

static const char *const phase_names[TL_FWD_N_PHASES] = {
    "embedding", "rmsnorm",     "q/k/v matmul",   "bias+rope+kv store",
    "attention", "wo matmul",   "residual",       "gate/up matmul",
    "swiglu",    "down matmul", "output rmsnorm", "output matmul"};

void tl_forward_profile_enable(bool on)
{
    memset(&g_prof, 0, sizeof(g_prof));
    g_prof_on = on;
}

void tl_forward_profile_get(struct tl_forward_profile *out)
{
    *out = g_prof;
}

const char *tl_forward_phase_name(enum tl_fwd_phase ph)
{
    return ph >= 0 && ph < TL_FWD_N_PHASES ? phase_names[ph] : "?";
}

struct prof_clock {
    int64_t wall, cpu;
};

static int64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void prof_start(struct prof_clock *c)
{
    if (!g_prof_on) return;
    c->wall = clock_ns(CLOCK_MONOTONIC);
    c->cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
}

// Charges the time since the previous mark to phase ph.
static void prof_mark(struct prof_clock *c, enum tl_fwd_phase ph)
{
    if (!g_prof_on) return;
    int64_t wall = clock_ns(CLOCK_MONOTONIC), cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    g_prof.wall_ns[ph] += wall - c->wall;
    g_prof.cpu_ns[ph] += cpu - c->cpu;
    c->wall = wall;
    c->cpu = cpu;
}

// ---- the pass -----------------------------------------------------------------------------------

tl_status tl_forward_run(struct tl_forward *f, const struct tl_batch *b,
                         const struct tl_kv_pages *kv, float *logits)
{
    const struct tl_model *m = f->model;
    const struct tl_hparams *hp = &m->hp;
    tl_status rc = tl_batch_check(b, hp->n_vocab, f->max_tok, f->max_ctx);
    if (rc) return rc;
    if (kv->n_layer != hp->n_layer)
        return tl__errorf(TL_ERR_INVALID_ARG, "KV pages have %d layers, the model %d", kv->n_layer,
                          hp->n_layer);
    int64_t n = b->n_tok, n_embd = hp->n_embd;
    struct prof_clock pc;
    prof_start(&pc);
    for (int64_t t = 0; t < n; t++) {
        const char *row =
            (const char *)m->tok_embd.data + (size_t)b->token[t] * m->tok_embd.row_bytes;
        tl_dequantize_row(m->tok_embd.type, row, f->x + t * n_embd, n_embd);
        if (has_scale(hp->embd_scale)) scale_row(f->x + t * n_embd, hp->embd_scale, n_embd);
        f->queries[t].block_table = b->block_tables[b->seq[t]];
        f->queries[t].n_ctx = (int64_t)b->pos[t] + 1;
    }
    prof_mark(&pc, TL_FWD_EMBED);
    struct phase_arg pa = {.f = f, .b = b};
    float scale = hp->attn_scale > 0 ? hp->attn_scale : 1.0f / sqrtf((float)hp->head_dim);
    for (int il = 0; il < hp->n_layer; il++) {
        const struct tl_layer *L = &m->layers[il];
        pa.layer = L;
        pa.kv = &kv->layers[il];
        pa.norm_w = L->attn_norm, pa.src = f->x, pa.dst = f->xb;
        run_phase(&pa, PHASE_NORM, n);
        prof_mark(&pc, TL_FWD_NORM);
        // q, k and v (then gate and up) share their input: one fork-join, one activation pass
        const struct tl_weight *qkv_w[] = {&L->wq, &L->wk, &L->wv};
        float *qkv_y[] = {f->q, f->k, f->v};
        tl_matmul_multi(f->pool, 3, qkv_w, f->xb, n, qkv_y, f->work);
        prof_mark(&pc, TL_FWD_QKV);
        run_phase(&pa, PHASE_QKV_POST, n);
        prof_mark(&pc, TL_FWD_ROPE_STORE);
        const struct tl_attn_opts opts = {.window = L->window, .softcap = hp->attn_softcap};
        tl_attention_opt(f->pool, pa.kv, f->q, f->queries, n, hp->n_head, scale, &opts, f->att,
                         f->work);
        prof_mark(&pc, TL_FWD_ATTN);
        tl_matmul(f->pool, &L->wo, f->att, n, f->tmp, f->work);
        prof_mark(&pc, TL_FWD_WO);
        if (L->attn_post_norm) { // gemma2: the sublayer output normed before the residual add
            pa.norm_w = L->attn_post_norm, pa.src = f->tmp, pa.dst = f->tmp;
            run_phase(&pa, PHASE_NORM, n);
            prof_mark(&pc, TL_FWD_NORM);
        }
        run_phase(&pa, PHASE_RESIDUAL, n);
        prof_mark(&pc, TL_FWD_RESIDUAL);

        pa.norm_w = L->ffn_norm, pa.src = f->x, pa.dst = f->xb;
        run_phase(&pa, PHASE_NORM, n);
        prof_mark(&pc, TL_FWD_NORM);
        if (L->n_expert > 0) {
            tl__moe_ffn(f->moe, L, f->xb, n, f->tmp);
            prof_mark(&pc, TL_FWD_DOWN); // the whole MoE FFN: router, experts, sum
        } else {
            const struct tl_weight *ffn_w[] = {&L->w_gate, &L->w_up};
            float *ffn_y[] = {f->h1, f->h2};
            tl_matmul_multi(f->pool, 2, ffn_w, f->xb, n, ffn_y, f->work);
            prof_mark(&pc, TL_FWD_GATE_UP);
            run_phase(&pa, PHASE_SWIGLU, n);
            prof_mark(&pc, TL_FWD_SWIGLU);
            tl_matmul(f->pool, &L->w_down, f->h1, n, f->tmp, f->work);
            prof_mark(&pc, TL_FWD_DOWN);
        }
        if (L->ffn_post_norm) {
            pa.norm_w = L->ffn_post_norm, pa.src = f->tmp, pa.dst = f->tmp;
            run_phase(&pa, PHASE_NORM, n);
            prof_mark(&pc, TL_FWD_NORM);
        }
        run_phase(&pa, PHASE_RESIDUAL, n);
        prof_mark(&pc, TL_FWD_RESIDUAL);
    }
    if (g_prof_on) g_prof.runs++, g_prof.tokens += n, g_prof.outputs += b->n_out;
    if (b->n_out == 0) return TL_OK;
    // Gather the rows to sample from, normalize, project to the vocabulary.
    for (int64_t i = 0; i < b->n_out; i++)
        memcpy(f->tmp + i * n_embd, f->x + (int64_t)b->out_idx[i] * n_embd, n_embd * sizeof(float));
    pa.norm_w = m->output_norm, pa.src = f->tmp, pa.dst = f->xb;
    run_phase(&pa, PHASE_NORM, b->n_out);
    prof_mark(&pc, TL_FWD_OUT_NORM);
    tl_matmul(f->pool, &m->output, f->xb, b->n_out, logits, f->work);
    if (has_scale(hp->logit_scale))
        for (int64_t i = 0; i < b->n_out * hp->n_vocab; i++)
            logits[i] /= hp->logit_scale;
    if (hp->final_softcap > 0) // gemma2: cap * tanh(logits / cap)
        for (int64_t i = 0; i < b->n_out * hp->n_vocab; i++)
            logits[i] = hp->final_softcap * tanhf(logits[i] / hp->final_softcap);
    prof_mark(&pc, TL_FWD_OUTPUT);
    return TL_OK;
}
