/*
 * Kernel dispatch and the parallel drivers of the public ops.
 *
 * Design: one `struct tl__kernel_ops` table per ISA (ref.c, x86/avx2_ops.c, x86/avx512_ops.c).
 * The first op picks the best table the CPU supports (or the one named by $TL_ISA) once per
 * process; tl_kernels_force_isa swaps it between ops (tests, benchmarks). This file owns what
 * every ISA shares: splitting rows and (token, head) pairs -- or (token, range of KV heads)
 * when the ISA reads each chunk of K/V once for all their query heads -- over the pool,
 * quantizing the activations of a Q8_0 matmul (or interleaving them for packed float weights)
 * once per call into the work buffer, and carving work buffers.
 *
 * Determinism: threads only ever split output rows (matmul) or query heads (attention); each
 * output element is computed start-to-finish by one thread with the ISA's fixed per-element
 * order, so results do not depend on the thread count or the batch.
 *
 * Thread model: the op table pointer is an atomic set once (or by force_isa, which must not
 * race with running ops). The ops are called from one thread at a time per pool.
 */
#include "kernels/kernels_impl.h"
#include "kernels/quants.h"

#include "core/error.h"
#include "core/log.h"

#include <pthread.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

// ---- ISA selection ----------------------------------------------------------------------------

static _Atomic(const struct tl__kernel_ops *) g_ops;

#if defined(__x86_64__)
// F16C from CPUID (clang's __builtin_cpu_supports does not know "f16c").
static bool cpu_has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif

static const struct tl__kernel_ops *ops_by_name(const char *name)
{
    if (!strcmp(name, "scalar")) return &tl__ops_scalar;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (!strcmp(name, "avx2")) {
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c())
            return &tl__ops_avx2;
        return NULL;
    }
    if (!strcmp(name, "avx512")) {
        if (ops_by_name("avx2") && __builtin_cpu_supports("avx512f") &&
            __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
            __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni"))
            return &tl__ops_avx512;
        return NULL;
    }
#endif
    return NULL;
}

static void ops_init(void)
{
    const struct tl__kernel_ops *o = NULL;
    const char *env = getenv("TL_ISA");
    if (env && *env) {
        o = ops_by_name(env);
        if (!o) TL_LOGW("TL_ISA=%s is unknown or not supported by this CPU; ignored", env);
    }
    if (!o) o = ops_by_name("avx512");
    if (!o) o = ops_by_name("avx2");
    if (!o) o = &tl__ops_scalar;
    const struct tl__kernel_ops *expected = NULL;
    atomic_compare_exchange_strong(&g_ops, &expected, o);
}

static inline const struct tl__kernel_ops *ops(void)
{
    const struct tl__kernel_ops *o = atomic_load_explicit(&g_ops, memory_order_acquire);
    if (o) return o;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, ops_init);
    return atomic_load_explicit(&g_ops, memory_order_acquire);
}

const char *tl_kernels_isa(void)
{
    return ops()->name;
}

bool tl_kernels_force_isa(const char *isa)
{
    const struct tl__kernel_ops *o = isa ? ops_by_name(isa) : NULL;
    if (!o) return false;
    ops(); // run the one-time init first so it cannot overwrite the forced choice later
    atomic_store_explicit(&g_ops, o, memory_order_release);
    return true;
}

// ---- matmul -----------------------------------------------------------------------------------

size_t tl_matmul_work_bytes(const struct tl_weight *w, int64_t n_tok)
{
    if (tl__qx_supported(w->type)) return tl__qx_work_bytes(w, n_tok); // Q4_0..Q6_K: quants.c
    if (w->type == TL_DTYPE_Q8_0 && n_tok > 0) return (size_t)n_tok * tl__xq_row_bytes(w->n_in);
    // packed floats: the interleaved activation copy, room for any ISA's tile width
    if (w->layout == TL_WEIGHT_PACKED && n_tok > 1)
        return (size_t)(n_tok + TL__X_TILE_MAX - 1) * (size_t)w->n_in * sizeof(float);
    return 0;
}

struct interleave_job {
    const float *x;
    int64_t n_in, n_tok;
    int tile;
    float *dst;
};

// Copies token tiles of the activations into the interleaved layout of kernels_impl.h.
static void interleave_worker(void *arg, int ith, int nth)
{
    struct interleave_job *j = arg;
    const int W = j->tile;
    int64_t b0, b1;
    tl_pool_range((j->n_tok + W - 1) / W, 1, ith, nth, &b0, &b1);
    for (int64_t b = b0; b < b1; b++) {
        float *dst = j->dst + b * W * j->n_in;
        const float *src = j->x + b * W * j->n_in;
        int nt = j->n_tok - b * W < W ? (int)(j->n_tok - b * W) : W;
        // sequential writes, nt sequential read streams
        for (int64_t k = 0; k < j->n_in; k++)
            for (int u = 0; u < nt; u++)
                dst[k * W + u] = src[u * j->n_in + k];
    }
}

struct quant_job {
    const struct tl__kernel_ops *o;
    const float *x;
    int64_t n_in, n_tok;
    char *xq;
    size_t stride;
};

static void quant_worker(void *arg, int ith, int nth)
{
    struct quant_job *j = arg;
    int64_t t0, t1;
    tl_pool_range(j->n_tok, 1, ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; t++)
        j->o->quantize_x(j->x + t * j->n_in, j->n_in, j->xq + t * j->stride);
}

// Prepares the activations of a matmul with w as its ISA reads them: quantized to Q8_0 (Q8_0
// weights) or interleaved in token tiles (packed float weights, several tokens) in `work`, or
// the rows as given.
static void mm_prepare_x(struct tl_pool *pool, const struct tl__kernel_ops *o,
                         const struct tl_weight *w, const float *x, int64_t n_tok, void *work,
                         struct tl__mm *mm)
{
    *mm = (struct tl__mm){.w = w, .x = x, .n_tok = n_tok};
    if (w->type != TL_DTYPE_Q8_0 && w->layout == TL_WEIGHT_PACKED && n_tok > 1 && o->x_tile) {
        TL_ASSERT(work && ((uintptr_t)work & 63) == 0 && o->x_tile <= TL__X_TILE_MAX);
        struct interleave_job c = {x, w->n_in, n_tok, o->x_tile, work};
        if (n_tok * w->n_in >= (1 << 18))
            tl_pool_run(pool, interleave_worker, &c);
        else
            interleave_worker(&c, 0, 1);
        mm->x = work;
        mm->x_tile = o->x_tile;
    }
    if (w->type == TL_DTYPE_Q8_0) {
        TL_ASSERT(w->n_in % TL_QK8_0 == 0 && work && ((uintptr_t)work & 63) == 0);
        struct quant_job q = {o, x, w->n_in, n_tok, work, tl__xq_row_bytes(w->n_in)};
        // A fork-join costs a few microseconds: only worth it for big batches.
        if (n_tok * w->n_in >= (1 << 16))
            tl_pool_run(pool, quant_worker, &q);
        else
            quant_worker(&q, 0, 1);
        mm->xq = work;
        mm->xq_stride = q.stride;
    }
}

// Which activations mm_prepare_x makes for w: weights of the same kind can share them.
static int x_kind(const struct tl__kernel_ops *o, const struct tl_weight *w, int64_t n_tok)
{
    if (w->type == TL_DTYPE_Q8_0) return 1;
    if (w->layout == TL_WEIGHT_PACKED && n_tok > 1 && o->x_tile) return 2;
    return 0;
}

struct mm_job {
    const struct tl__kernel_ops *o;
    struct tl__mm mm[TL_MATMUL_MULTI_MAX];
    struct tl__unit_split split;
};

static void mm_worker(void *arg, int ith, int nth)
{
    struct mm_job *j = arg;
    int64_t r0, r1;
    for (int i = 0; i < j->split.n_w; i++)
        if (tl__unit_split_rows(&j->split, i, ith, nth, &r0, &r1))
            j->o->matmul_rows(&j->mm[i], r0, r1);
}

void tl_matmul_multi(struct tl_pool *pool, int n_w, const struct tl_weight *const *w,
                     const float *x, int64_t n_tok, float *const *y, void *work)
{
    TL_ASSERT(n_w >= 1 && n_w <= TL_MATMUL_MULTI_MAX && n_tok >= 0);
    if (n_tok == 0) return;
    const struct tl__kernel_ops *o = ops();
    bool shared = true, all_qx = true;
    for (int i = 0; i < n_w; i++)
        all_qx = all_qx && tl__qx_supported(w[i]->type);
    if (all_qx) { // Q4_0..Q6_K: quants.c shares the quantized activations the same way
        tl__qx_matmul_multi(pool, o, n_w, w, x, n_tok, y, work);
        return;
    }
    for (int i = 0; i < n_w; i++) {
        TL_ASSERT(tl_kernels_weight_supported(w[i]->type));
        TL_ASSERT(w[i]->n_in > 0 && w[i]->n_out >= 0 && w[i]->n_in == w[0]->n_in);
        shared = shared && !tl__qx_supported(w[i]->type) &&
                 x_kind(o, w[i], n_tok) == x_kind(o, w[0], n_tok);
    }
    if (!shared) { // weights that need different activations: one after the other
        for (int i = 0; i < n_w; i++)
            tl_matmul(pool, w[i], x, n_tok, y[i], work);
        return;
    }
    struct mm_job j = {.o = o};
    mm_prepare_x(pool, o, w[0], x, n_tok, work, &j.mm[0]);
    int64_t units = 0;
    for (int i = 0; i < n_w; i++) {
        j.mm[i] = j.mm[0];
        j.mm[i].w = w[i];
        j.mm[i].y = y[i];
        // packed weights come in groups of TL__QP_ROWS rows: a thread takes whole groups
        units = tl__unit_split_add(&j.split, w[i]->n_out,
                                   w[i]->layout == TL_WEIGHT_PACKED ? TL__QP_ROWS
                                                                    : o->row_align(w[i]->type));
    }
    if (units > 0) tl_pool_run(pool, mm_worker, &j);
}

void tl_matmul(struct tl_pool *pool, const struct tl_weight *w, const float *x, int64_t n_tok,
               float *y, void *work)
{
    TL_ASSERT(tl_kernels_weight_supported(w->type));
    TL_ASSERT(n_tok >= 0 && w->n_in > 0 && w->n_out >= 0);
    if (n_tok == 0 || w->n_out == 0) return;
    if (tl__qx_supported(w->type)) { // Q4_0..Q6_K: quants.c
        tl__qx_matmul(pool, ops(), w, x, n_tok, y, work);
        return;
    }
    tl_matmul_multi(pool, 1, &w, x, n_tok, &y, work);
}

// ---- row-wise ops -----------------------------------------------------------------------------

void tl_rmsnorm(const float *x, const float *w, float eps, int64_t n, float *y)
{
    ops()->rmsnorm(x, w, eps, n, y);
}

// RoPE is identical on every ISA: the reference arithmetic, with what it recomputes cached per
// thread -- the frequencies of the last (freq_base, head_dim), and the cos/sin table of the last
// (position, freq_scale), since a token's q and k are rotated one after the other. pow, cos and
// sin were ~5% of a prefill.
enum { ROPE_MAX_HALF = 256 };
static _Thread_local struct {
    float base, scale;
    int head_dim; // 0: nothing cached
    int64_t pos;
    int have_pos;
    double freq[ROPE_MAX_HALF];
    float c[ROPE_MAX_HALF], s[ROPE_MAX_HALF];
} rope_cache;

void tl_rope(float *x, int n_heads, int head_dim, int64_t pos, float freq_base, float freq_scale,
             enum tl_rope_mode mode)
{
    const int half = head_dim / 2;
    if (half > ROPE_MAX_HALF || half < 1) {
        tl__ref_rope(x, n_heads, head_dim, pos, freq_base, freq_scale, mode);
        return;
    }
    if (rope_cache.head_dim != head_dim || memcmp(&rope_cache.base, &freq_base, sizeof(float))) {
        for (int i = 0; i < half; i++)
            rope_cache.freq[i] = tl__rope_freq(freq_base, head_dim, i);
        rope_cache.base = freq_base;
        rope_cache.head_dim = head_dim;
        rope_cache.have_pos = 0;
    }
    if (!rope_cache.have_pos || rope_cache.pos != pos ||
        memcmp(&rope_cache.scale, &freq_scale, sizeof(float))) {
        tl__rope_table(pos, freq_scale, rope_cache.freq, half, rope_cache.c, rope_cache.s);
        rope_cache.pos = pos;
        rope_cache.scale = freq_scale;
        rope_cache.have_pos = 1;
    }
    tl__rope_apply(x, n_heads, head_dim, rope_cache.c, rope_cache.s, mode);
}

void tl_swiglu(const float *gate, const float *up, float *out, int64_t n)
{
    ops()->swiglu(gate, up, out, n);
}

void tl_add(float *y, const float *x, int64_t n)
{
    ops()->add(y, x, n);
}

void tl_softmax(float *x, int64_t n)
{
    ops()->softmax(x, n);
}

void tl_exp_sub(const float *x, float m, float *out, int64_t n)
{
    ops()->exp_sub(x, m, out, n);
}

// ---- KV cache and attention -------------------------------------------------------------------

// The KV Q8_0 layout is the GGUF block, byte for byte.
_Static_assert(sizeof(struct tl_block_q8_0) == 34, "Q8_0 block");

bool tl_kv_type_supported(enum tl_dtype type, int head_dim)
{
    if (head_dim < 1) return false;
    return type == TL_DTYPE_F32 || type == TL_DTYPE_F16 ||
           (type == TL_DTYPE_Q8_0 && head_dim % TL_QK8_0 == 0);
}

size_t tl_kv_row_bytes(enum tl_dtype type, int head_dim)
{
    if (!tl_kv_type_supported(type, head_dim)) return 0;
    return tl__kv_elem_bytes(type, (size_t)head_dim);
}

void tl_kv_store(const struct tl_kv_layer *kv, const int32_t *block_table, int64_t pos,
                 const float *k, const float *v)
{
    int64_t n = (int64_t)kv->n_kv_head * kv->head_dim;
    // The heads of one position are contiguous within a slot.
    size_t base = tl__kv_index(kv, block_table, pos, 0);
    if (kv->type == TL_DTYPE_Q8_0) {
        // base is a multiple of head_dim, hence of 32: the row starts at a Q8_0 block, and
        // no block straddles two heads, so one call quantizes every head of the position
        TL_ASSERT(kv->head_dim % TL_QK8_0 == 0);
        struct tl_block_q8_0 *kd = (struct tl_block_q8_0 *)kv->k + base / TL_QK8_0;
        struct tl_block_q8_0 *vd = (struct tl_block_q8_0 *)kv->v + base / TL_QK8_0;
        const struct tl__kernel_ops *o = ops();
        if (o->quantize_q8_0) {
            // the same bytes as tl_quantize_row, whose scalar roundf was ~8% of a decode step
            o->quantize_q8_0(k, kd, n);
            o->quantize_q8_0(v, vd, n);
        } else {
            bool ok = tl_quantize_row(TL_DTYPE_Q8_0, k, kd, n);
            ok = ok && tl_quantize_row(TL_DTYPE_Q8_0, v, vd, n);
            TL_ASSERT(ok);
        }
    } else if (kv->type == TL_DTYPE_F16) {
        uint16_t *kd = (uint16_t *)kv->k + base, *vd = (uint16_t *)kv->v + base;
        const struct tl__kernel_ops *o = ops();
        if (o->f32_to_f16) {
            o->f32_to_f16(k, kd, n);
            o->f32_to_f16(v, vd, n);
        } else {
            for (int64_t i = 0; i < n; i++) {
                kd[i] = tl_f32_to_fp16(k[i]);
                vd[i] = tl_f32_to_fp16(v[i]);
            }
        }
    } else {
        TL_ASSERT(kv->type == TL_DTYPE_F32);
        memcpy((float *)kv->k + base, k, (size_t)n * 4);
        memcpy((float *)kv->v + base, v, (size_t)n * 4);
    }
}

static inline size_t align64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

static size_t attn_thread_bytes(int64_t max_ctx, int head_dim)
{
    return align64((size_t)max_ctx * 4) + align64((size_t)head_dim * 4);
}

size_t tl_attention_work_bytes(int n_threads, int64_t max_ctx, int head_dim)
{
    if (n_threads < 1) n_threads = 1;
    if (max_ctx < 1) max_ctx = 1;
    return (size_t)n_threads * attn_thread_bytes(max_ctx, head_dim);
}

struct attn_job {
    const struct tl__kernel_ops *o;
    const struct tl_kv_layer *kv;
    const float *q;
    const struct tl_attn_query *queries;
    int64_t n_tok;
    int n_head, group, n_ranges;
    float scale, softcap;
    int64_t window;
    float *out;
    char *work;
    size_t thread_bytes, scores_bytes;
};

// Units of (range of KV heads, token) for ISAs whose attn_kv reads each chunk of K/V rows once
// for all the query heads of the range and for a run of tokens of one sequence: a thread takes
// consecutive units and passes runs of consecutive positions of one sequence (a prefill) to one
// call, up to what attn_kv's accumulators hold.
static void attn_kv_worker(void *arg, int ith, int nth)
{
    struct attn_job *j = arg;
    const int n_kv = j->kv->n_kv_head, R = j->n_ranges;
    const size_t stride = (size_t)j->n_head * j->kv->head_dim;
    const int pairs = j->o->attn_kv_pairs(j->kv->head_dim);
    int64_t u0, u1;
    tl_pool_range(j->n_tok * R, 1, ith, nth, &u0, &u1);
    for (int64_t u = u0; u < u1;) {
        const int r = (int)(u / j->n_tok);
        const int64_t t = u % j->n_tok;
        const int kvh0 = r * n_kv / R, n_kvh = (r + 1) * n_kv / R - kvh0;
        const int max_q = pairs / (n_kvh * j->group);
        const struct tl_attn_query *qt = &j->queries[t];
        int n = 1;
        while (n < max_q && u + n < u1 && t + n < j->n_tok &&
               qt[n].block_table == qt->block_table && qt[n].n_ctx == qt->n_ctx + n)
            n++;
        j->o->attn_kv(j->kv, qt->block_table, qt->n_ctx, n, kvh0, n_kvh, j->group,
                      j->q + (size_t)t * stride, stride, j->scale, j->window, j->softcap,
                      j->out + (size_t)t * stride);
        u += n;
    }
}

static void attn_worker(void *arg, int ith, int nth)
{
    struct attn_job *j = arg;
    int hd = j->kv->head_dim;
    float *scores = (float *)(j->work + (size_t)ith * j->thread_bytes);
    float *acc = (float *)((char *)scores + j->scores_bytes);
    int64_t p0, p1;
    tl_pool_range(j->n_tok * j->n_head, 1, ith, nth, &p0, &p1);
    for (int64_t p = p0; p < p1; p++) {
        int64_t t = p / j->n_head;
        int h = (int)(p % j->n_head);
        size_t off = ((size_t)t * j->n_head + h) * hd;
        int64_t n_ctx = j->queries[t].n_ctx;
        j->o->attn_head(j->kv, j->queries[t].block_table, tl__attn_lo(n_ctx, j->window), n_ctx,
                        h / j->group, j->q + off, j->scale, j->softcap, j->out + off, scores, acc);
    }
}

void tl_attention(struct tl_pool *pool, const struct tl_kv_layer *kv, const float *q,
                  const struct tl_attn_query *queries, int64_t n_tok, int n_head, float scale,
                  float *out, void *work)
{
    tl_attention_opt(pool, kv, q, queries, n_tok, n_head, scale, NULL, out, work);
}

void tl_attention_opt(struct tl_pool *pool, const struct tl_kv_layer *kv, const float *q,
                      const struct tl_attn_query *queries, int64_t n_tok, int n_head, float scale,
                      const struct tl_attn_opts *opts, float *out, void *work)
{
    static const struct tl_attn_opts none;
    if (!opts) opts = &none;
    TL_ASSERT(opts->window >= 0 && opts->softcap >= 0.f);
    TL_ASSERT(kv->n_kv_head > 0 && n_head % kv->n_kv_head == 0);
    TL_ASSERT(tl_kv_type_supported(kv->type, kv->head_dim));
    TL_ASSERT(work && ((uintptr_t)work & 63) == 0);
    if (n_tok <= 0) return;
    int64_t max_ctx = 1;
    for (int64_t t = 0; t < n_tok; t++) {
        TL_ASSERT(queries[t].n_ctx >= 1);
        if (queries[t].n_ctx > max_ctx) max_ctx = queries[t].n_ctx;
    }
    struct attn_job j = {
        .o = ops(),
        .kv = kv,
        .q = q,
        .queries = queries,
        .n_tok = n_tok,
        .n_head = n_head,
        .group = n_head / kv->n_kv_head,
        .scale = scale,
        .softcap = opts->softcap,
        .window = opts->window,
        .out = out,
        .work = work,
        .thread_bytes = attn_thread_bytes(max_ctx, kv->head_dim),
        .scores_bytes = align64((size_t)max_ctx * 4),
    };
    // attn_kv: as few KV-head ranges as its accumulators allow for one token, more when there
    // are few tokens so that every thread gets several units
    int pairs = j.o->attn_kv ? j.o->attn_kv_pairs(kv->head_dim) : 0;
    if (pairs >= j.group) {
        const int n_kv = kv->n_kv_head, per = pairs / j.group;
        int r = (n_kv + per - 1) / per;
        int64_t want = (4 * (int64_t)tl_pool_size(pool) + n_tok - 1) / n_tok;
        if (want > r) r = want > n_kv ? n_kv : (int)want;
        j.n_ranges = r;
        tl_pool_run(pool, attn_kv_worker, &j);
    } else {
        tl_pool_run(pool, attn_worker, &j);
    }
}
