/*
 * The mixture-of-experts FFN of one layer over a batched step (moe.h): route every token, group
 * the step's (token, slot) pairs by expert, run each chosen expert once over all of its tokens,
 * and sum each token's K expert outputs.
 *
 * Routing: softmax of the router logits, the K most probable experts (ties to the lower index),
 * their probabilities renormalized to sum 1 (qwen3moe's norm_topk_prob; Mixtral's softmax over
 * the top-k logits is the same thing). Grouping: a counting sort of the n * K slots by expert,
 * stable, so each expert's matrices are read once per step whatever the number of tokens routed
 * to it (single-sequence decode reads only the K chosen experts).
 *
 * Threads: when at least as many experts are active as the pool has threads (decode, and most
 * prefills), the experts are shared out among the threads, each expert computed whole by one
 * thread (gate/up, SwiGLU, down, single-threaded kernels) in its own scratch: one fork-join per
 * layer instead of two per expert, which on a loaded machine costs more than the work of a small
 * expert. With fewer active experts than threads, each expert's matmuls fan out over the pool.
 *
 * Determinism: the matmul kernels give each row the same bits whatever the other rows and the
 * thread count (threads split rows, never a reduction), each (token, slot) output is written by
 * exactly one expert, and each token sums its K outputs in its own slot order (best first): a
 * token's result does not depend on the batch or on which thread ran which expert.
 *
 * Ownership: struct tl_moe owns all its buffers; it belongs to its forward pass's thread.
 */
#include "model/moe.h"

#include "core/alloc.h"
#include "core/error.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct tl_moe {
    const struct tl_model *model; // borrowed
    struct tl_pool *pool;         // borrowed
    int n_thr;                    // the pool's threads: one scratch set each
    int64_t max_tok;
    float *router;   // (max_tok, n_expert) router logits, then probabilities
    int32_t *sel;    // (max_tok, K) chosen experts of each token, best first
    float *sel_w;    // (max_tok, K) their renormalized weights
    int32_t *order;  // (max_tok * K) slots t * K + k grouped by expert
    int32_t *start;  // (n_expert + 1) where each expert's group starts in order
    int32_t *active; // (n_expert) the experts chosen by at least one token
    float *slot_y;   // (max_tok * K, n_embd) each token's expert outputs, by slot
    // Per thread (n_thr sets): one expert's gathered input, hidden layers, output, matmul work.
    float *x, *h1, *h2, *y; // (n_thr * max_tok, n_embd / n_ff_exp / n_ff_exp / n_embd)
    char *work;             // (n_thr * work_bytes)
    size_t work_bytes;      // per thread, 64-byte multiple
    atomic_int next;        // the next entry of active[] to take (shared-out mode)
    const struct tl_layer *layer;
    const float *in; // (n, n_embd) the layer's normed input
};

static float *alloc_f32(size_t a, size_t b, size_t c)
{
    size_t n, bytes;
    if (!tl_mul_size(a, b, &n) || !tl_mul_size(n, c, &n) || !tl_mul_size(n, 4, &bytes)) return NULL;
    return tl_aligned_alloc(bytes);
}

struct tl_moe *tl__moe_create(const struct tl_model *m, int64_t max_tok, struct tl_pool *pool)
{
    const struct tl_hparams *hp = &m->hp;
    struct tl_moe *s = tl_calloc_array(1, sizeof(*s));
    if (!s) goto out_nomem;
    s->model = m, s->pool = pool, s->n_thr = tl_pool_size(pool), s->max_tok = max_tok;
    size_t n = (size_t)max_tok, k = (size_t)hp->n_expert_used, nt = (size_t)s->n_thr;
    size_t D = (size_t)hp->n_embd, F = (size_t)hp->n_ff_exp, E = (size_t)hp->n_expert;
    s->router = alloc_f32(n, E, 1);
    s->sel = tl_calloc_array(n * k, sizeof(*s->sel)); // n * k <= n * E: allocated above
    s->sel_w = alloc_f32(n, k, 1);
    s->order = tl_calloc_array(n * k, sizeof(*s->order));
    s->start = tl_calloc_array(E + 1, sizeof(*s->start));
    s->active = tl_calloc_array(E, sizeof(*s->active));
    s->slot_y = alloc_f32(n * k, D, 1);
    s->x = alloc_f32(nt, n, D);
    s->y = alloc_f32(nt, n, D);
    s->h1 = alloc_f32(nt, n, F);
    s->h2 = alloc_f32(nt, n, F);
    size_t wb = 64;
    for (int il = 0; il < hp->n_layer; il++) {
        struct tl_layer *L = &m->layers[il];                 // read only
        for (int64_t i = 4; L->n_expert > 0 && i < 8; i++) { // router; expert 0 for all
            size_t b = tl_matmul_work_bytes(tl_layer_weight(L, i), max_tok);
            wb = b > wb ? b : wb;
        }
    }
    s->work_bytes = (wb + 63) & ~(size_t)63;
    size_t all;
    s->work = tl_mul_size(nt, s->work_bytes, &all) ? tl_aligned_alloc(all) : NULL;
    if (!s->router || !s->sel || !s->sel_w || !s->order || !s->start || !s->active || !s->slot_y ||
        !s->x || !s->y || !s->h1 || !s->h2 || !s->work)
        goto out_nomem;
    return s;
out_nomem:
    tl__moe_destroy(s);
    tl__errorf(TL_ERR_NOMEM, "out of memory allocating the expert scratch for %lld tokens",
               (long long)max_tok);
    return NULL;
}

void tl__moe_destroy(struct tl_moe *s)
{
    if (!s) return;
    tl_aligned_free(s->router);
    free(s->sel);
    tl_aligned_free(s->sel_w);
    free(s->order);
    free(s->start);
    free(s->active);
    tl_aligned_free(s->slot_y);
    tl_aligned_free(s->x);
    tl_aligned_free(s->y);
    tl_aligned_free(s->h1);
    tl_aligned_free(s->h2);
    tl_aligned_free(s->work);
    free(s);
}

// ---- routing ----------------------------------------------------------------------------------

static void route(struct tl_moe *s, int64_t n)
{
    const struct tl_hparams *hp = &s->model->hp;
    int E = hp->n_expert, K = hp->n_expert_used;
    for (int64_t t = 0; t < n; t++) {
        float *p = s->router + t * E;
        int32_t *sel = s->sel + t * K;
        float *w = s->sel_w + t * K;
        tl_softmax(p, E);
        float sum = 0;
        for (int k = 0; k < K; k++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                bool taken = false;
                for (int j = 0; j < k && !taken; j++)
                    taken = sel[j] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;
            }
            sel[k] = best;
            w[k] = p[best];
            sum += p[best];
        }
        for (int k = 0; k < K; k++)
            w[k] /= sum;
    }
}

// Counting sort of the n * K slots by expert (stable); fills start[] and active[].
static int group(struct tl_moe *s, int64_t n)
{
    const struct tl_hparams *hp = &s->model->hp;
    int E = hp->n_expert, K = hp->n_expert_used, n_active = 0;
    memset(s->start, 0, sizeof(*s->start) * ((size_t)E + 1));
    for (int64_t i = 0; i < n * K; i++)
        s->start[s->sel[i] + 1]++;
    for (int e = 0; e < E; e++) {
        if (s->start[e + 1] > 0) s->active[n_active++] = e;
        s->start[e + 1] += s->start[e];
    }
    for (int64_t i = 0; i < n * K; i++)
        s->order[s->start[s->sel[i]]++] = (int32_t)i;
    for (int e = E; e > 0; e--) // start[e] is now the end of group e: shift back
        s->start[e] = s->start[e - 1];
    s->start[0] = 0;
    return n_active;
}

// ---- experts ----------------------------------------------------------------------------------

// Expert e over all its tokens, with scratch set `thr`, its matmuls over `pool` (NULL: inline).
static void run_expert(struct tl_moe *s, int e, int thr, struct tl_pool *pool)
{
    const struct tl_hparams *hp = &s->model->hp;
    const struct tl_layer *L = s->layer;
    int K = hp->n_expert_used;
    int64_t D = hp->n_embd, F = hp->n_ff_exp, off = (int64_t)thr * s->max_tok;
    float *x = s->x + off * D, *y = s->y + off * D, *h1 = s->h1 + off * F, *h2 = s->h2 + off * F;
    void *work = s->work + (size_t)thr * s->work_bytes;
    const int32_t *slots = s->order + s->start[e];
    int64_t m = s->start[e + 1] - s->start[e];
    for (int64_t i = 0; i < m; i++)
        memcpy(x + i * D, s->in + (int64_t)(slots[i] / K) * D, sizeof(float) * D);
    const struct tl_weight *gu_w[] = {&L->exp_gate[e], &L->exp_up[e]};
    float *gu_y[] = {h1, h2};
    tl_matmul_multi(pool, 2, gu_w, x, m, gu_y, work);
    for (int64_t i = 0; i < m; i++)
        tl_swiglu(h1 + i * F, h2 + i * F, h1 + i * F, F);
    tl_matmul(pool, &L->exp_down[e], h1, m, y, work);
    for (int64_t i = 0; i < m; i++)
        memcpy(s->slot_y + (int64_t)slots[i] * D, y + i * D, sizeof(float) * D);
}

static void experts_fn(void *arg, int ith, int nth)
{
    struct tl_moe *s = arg;
    (void)nth;
    for (;;) {
        int i = atomic_fetch_add(&s->next, 1);
        if (i >= s->model->hp.n_expert || s->active[i] < 0) break;
        run_expert(s, s->active[i], ith, NULL);
    }
}

void tl__moe_ffn(struct tl_moe *s, const struct tl_layer *L, const float *x, int64_t n, float *out)
{
    const struct tl_hparams *hp = &s->model->hp;
    int K = hp->n_expert_used;
    int64_t D = hp->n_embd;
    s->layer = L, s->in = x;
    tl_matmul(s->pool, &L->router, x, n, s->router, s->work);
    route(s, n);
    int n_active = group(s, n);
    if (n_active >= s->n_thr && s->n_thr > 1) {
        if (n_active < hp->n_expert) s->active[n_active] = -1; // the end of the list
        atomic_store(&s->next, 0);
        tl_pool_run(s->pool, experts_fn, s);
    } else {
        for (int i = 0; i < n_active; i++)
            run_expert(s, s->active[i], 0, s->pool);
    }
    for (int64_t t = 0; t < n; t++) {
        float *o = out + t * D;
        for (int k = 0; k < K; k++) {
            const float *y = s->slot_y + (t * K + k) * D;
            float w = s->sel_w[t * K + k];
            for (int64_t i = 0; i < D; i++)
                o[i] = k == 0 ? w * y[i] : o[i] + w * y[i];
        }
    }
}
