/*
 * The parallel driver of the Q4_0 .. Q6_K matmul (quants.h) and of IQ4_NL, IQ4_XS, MXFP4
 * (cb4.h): tl__qx_matmul and tl__qx_matmul_multi quantize the activations once per call into the
 * work buffer (struct tl__qa_chunk rows, then for Q4_K/Q5_K/Q6_K their tl__kq_aux rows), then
 * split the output rows of all the weights over the pool and hand them to the ISA's kernel for
 * the weight's type and layout (file rows, the 16-row groups of kquant_pack.c, or the codebook
 * kernels of cb4.h); tl__qx_ref_matmul, the whole scalar reference on one thread, which the
 * tests compare every ISA and layout to; and the scalar table tl__qx_ops_scalar. This file is
 * the top of the quant files: it calls quants.c, kquant_pack.c and cb4.c, and none calls it.
 *
 * Determinism: threads split output rows only (in units of the kernel's row tile, or of a
 * packed group), and activations are quantized per token, so no output depends on the thread
 * count or the batch.
 *
 * Thread model: called from one thread at a time per pool; the workers write disjoint rows.
 */
#include "kernels/quants.h"
#include "kernels/cb4.h"

#include "core/error.h"

// Bytes of the activations of one token: the quantized row, then (K-quants with a fixed
// order) its aux entries.
static size_t act_row_bytes(const struct tl_weight *w)
{
    size_t b = tl__qa_row_bytes(w->n_in);
    if (tl__kq_packable(w->type))
        b += (size_t)tl__kq_aux_stride(w->n_in) * sizeof(struct tl__kq_aux);
    return b;
}

size_t tl__qx_work_bytes(const struct tl_weight *w, int64_t n_tok)
{
    if (n_tok <= 0) return 0;
    return (size_t)n_tok * act_row_bytes(w);
}

// The scalar table: the reference kernels of quants.c (file rows), kquant_pack.c (packed
// K-quants) and cb4.c (codebook types), assembled here so that none of them calls another's.
static int scalar_row_align(enum tl_dtype type)
{
    (void)type;
    return 1;
}

const struct tl__qx_ops tl__qx_ops_scalar = {
    .row_align = scalar_row_align,
    .quantize = tl__qa_quantize_ref,
    .matmul_rows = tl__qx_ref_matmul_rows,
    .matmul_packed_rows = tl__kq_scalar_packed_rows,
    .matmul_cb4_rows = tl__cb4_ref_rows,
};

static const struct tl__qx_ops *qx_ops_for(const struct tl__kernel_ops *o)
{
#if defined(__x86_64__)
    if (o == &tl__ops_avx512) return &tl__qx_ops_avx512;
    if (o == &tl__ops_avx2) return &tl__qx_ops_avx2;
#endif
    (void)o;
    return &tl__qx_ops_scalar;
}

// The work buffer holds n_tok quantized rows (xa), then n_tok aux rows for the K-quants.
struct qa_job {
    const struct tl__qx_ops *q;
    const float *x;
    int64_t n_in, n_tok;
    struct tl__qx_mm *mm;
};

static void qa_worker(void *arg, int ith, int nth)
{
    struct qa_job *j = arg;
    int64_t t0, t1;
    tl_pool_range(j->n_tok, 1, ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) {
        struct tl__qa_chunk *xa = (struct tl__qa_chunk *)j->mm->xa + t * j->mm->xa_stride;
        j->q->quantize(j->x + t * j->n_in, j->n_in, xa);
        if (j->mm->aux)
            tl__kq_aux_row(xa, j->n_in / 32,
                           (struct tl__kq_aux *)j->mm->aux + t * j->mm->aux_stride);
    }
}

// Fills *m for a matmul of n_tok tokens into y (work as for tl_matmul; with_aux: the aux rows
// follow the quantized rows); quantizing is left to the caller.
static void mm_setup(const struct tl_weight *w, int64_t n_tok, void *work, float *y, bool with_aux,
                     struct tl__qx_mm *m)
{
    const int64_t xa_stride = (int64_t)(tl__qa_row_bytes(w->n_in) / sizeof(struct tl__qa_chunk));
    *m = (struct tl__qx_mm){.w = w,
                            .tr = tl__qx_traits(w->type),
                            .xa = work,
                            .xa_stride = xa_stride,
                            .n_tok = n_tok,
                            .y = y};
    if (with_aux) {
        m->aux =
            (const struct tl__kq_aux *)((char *)work + (size_t)n_tok * tl__qa_row_bytes(w->n_in));
        m->aux_stride = tl__kq_aux_stride(w->n_in);
    }
}

static void quantize_acts(const struct tl__qx_ops *q, const struct tl_weight *w, const float *x,
                          int64_t n_tok, void *work, float *y, struct tl__qx_mm *m)
{
    mm_setup(w, n_tok, work, y, tl__kq_packable(w->type), m);
    struct qa_job j = {q, x, w->n_in, n_tok, m};
    qa_worker(&j, 0, 1);
}

// Threads split the weights' rows as kernels.c does (tl__unit_split).
struct qx_job {
    const struct tl__qx_ops *q;
    struct tl__qx_mm mm[TL_MATMUL_MULTI_MAX];
    struct tl__unit_split split;
};

static void qx_worker(void *arg, int ith, int nth)
{
    struct qx_job *j = arg;
    int64_t r0, r1;
    for (int i = 0; i < j->split.n_w; i++) {
        if (!tl__unit_split_rows(&j->split, i, ith, nth, &r0, &r1)) continue;
        if (j->mm[i].tr->cb4)
            j->q->matmul_cb4_rows(&j->mm[i], r0, r1);
        else if (j->mm[i].w->layout == TL_WEIGHT_PACKED)
            j->q->matmul_packed_rows(&j->mm[i], r0, r1);
        else
            j->q->matmul_rows(&j->mm[i], r0, r1);
    }
}

void tl__qx_matmul_multi(struct tl_pool *pool, const struct tl__kernel_ops *o, int n_w,
                         const struct tl_weight *const *w, const float *x, int64_t n_tok,
                         float *const *y, void *work)
{
    TL_ASSERT(n_w >= 1 && n_w <= TL_MATMUL_MULTI_MAX && work && ((uintptr_t)work & 63) == 0);
    bool with_aux = false;
    for (int i = 0; i < n_w; i++) {
        const struct tl__qx_traits *tr = tl__qx_traits(w[i]->type);
        TL_ASSERT(tr && w[i]->n_in % tr->blk == 0 && w[i]->n_in == w[0]->n_in);
        TL_ASSERT(w[i]->layout != TL_WEIGHT_PACKED || tl__kq_packable(w[i]->type));
        with_aux = with_aux || tl__kq_packable(w[i]->type);
    }
    const struct tl__qx_ops *q = qx_ops_for(o);
    struct qx_job j = {.q = q};
    mm_setup(w[0], n_tok, work, y[0], with_aux, &j.mm[0]);
    struct qa_job qa = {q, x, w[0]->n_in, n_tok, &j.mm[0]};
    // A fork-join costs a few microseconds: only worth it for big batches.
    if (n_tok * w[0]->n_in >= (1 << 16))
        tl_pool_run(pool, qa_worker, &qa);
    else
        qa_worker(&qa, 0, 1);
    int64_t units = 0;
    for (int i = 0; i < n_w; i++) {
        j.mm[i] = j.mm[0];
        j.mm[i].w = w[i], j.mm[i].tr = tl__qx_traits(w[i]->type), j.mm[i].y = y[i];
        const int64_t align = w[i]->layout == TL_WEIGHT_PACKED ? TL__KQ_ROWS
                              : tl__cb4_type(w[i]->type)       ? TL__CB4_ROWS
                                                               : q->row_align(w[i]->type);
        units = tl__unit_split_add(&j.split, w[i]->n_out, align);
    }
    if (units > 0) tl_pool_run(pool, qx_worker, &j);
}

void tl__qx_matmul(struct tl_pool *pool, const struct tl__kernel_ops *o, const struct tl_weight *w,
                   const float *x, int64_t n_tok, float *y, void *work)
{
    tl__qx_matmul_multi(pool, o, 1, &w, x, n_tok, &y, work);
}

void tl__qx_ref_matmul(const struct tl_weight *w, const float *x, int64_t n_tok, float *y,
                       void *work)
{
    const struct tl__qx_traits *tr = tl__qx_traits(w->type);
    TL_ASSERT(tr && w->n_in % tr->blk == 0);
    struct tl__qx_mm m;
    quantize_acts(&tl__qx_ops_scalar, w, x, n_tok, work, y, &m);
    tl__qx_ref_matmul_rows(&m, 0, w->n_out);
}
