/*
 * Sampler: see sampler.h for the semantics.
 *
 * Design. The raw logits are never modified: penalties and temperature work on a copy. Tokens
 * are ranked by (value desc, id asc), so every ordering is total and the result is the same on
 * every machine. Top-k and top-p are both cuts of that ranking; instead of sorting the
 * vocabulary, tokens are binned by their distance below the best logit (bins of 1/32 nat,
 * ordered like the ranking) with each bin's count and probability mass, the bin holding the cut
 * is found by walking the bins, and only that bin's members are sorted: O(V) per token even
 * for the flat distributions of high temperatures or random models. min-p is a threshold on
 * the probability relative to the best token (again a cut of the ranking). The draw walks the
 * kept tokens in a fixed order (whole bins in id order, then the cut bin in rank order) against
 * u * total mass, sums in double in a fixed order (per block of 64 ids, then the blocks), so it
 * finds its block among n / 64 sums. Without a top-k or top-p cut nothing is binned. The
 * vocabulary-wide passes (sampler_passes.c) use SSE2 (x86-64's baseline) with identical scalar
 * twins. Log-probabilities come from the raw logits (as OpenAI reports them), independent of the
 * sampling parameters.
 *
 * Thread model: a tl_sampler is one thread's scratch; the functions are re-entrant otherwise.
 */
#include "engine/sampler.h"
#include "engine/sampler_passes.h"

#include "kernels/kernels.h"

#include "core/alloc.h"
#include "core/error.h"
#include "core/hash.h"

#include <math.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

// ---- parameters -----------------------------------------------------------------------------

tl_status tl_sampling_validate(const struct tl_sampling *p)
{
    if (!(p->temperature >= 0) || !isfinite(p->temperature))
        return tl__errorf(TL_ERR_INVALID_ARG, "temperature must be >= 0 (got %g)",
                          (double)p->temperature);
    if (p->top_k < 0)
        return tl__errorf(TL_ERR_INVALID_ARG, "top_k must be >= 0 (got %d)", p->top_k);
    if (!(p->top_p > 0 && p->top_p <= 1))
        return tl__errorf(TL_ERR_INVALID_ARG, "top_p must be in (0, 1] (got %g)", (double)p->top_p);
    if (!(p->min_p >= 0 && p->min_p <= 1))
        return tl__errorf(TL_ERR_INVALID_ARG, "min_p must be in [0, 1] (got %g)", (double)p->min_p);
    if (!(p->repetition_penalty > 0) || !isfinite(p->repetition_penalty))
        return tl__errorf(TL_ERR_INVALID_ARG, "repetition_penalty must be > 0 (got %g)",
                          (double)p->repetition_penalty);
    if (!isfinite(p->presence_penalty))
        return tl__errorf(TL_ERR_INVALID_ARG, "presence_penalty must be a finite number");
    if (!isfinite(p->frequency_penalty))
        return tl__errorf(TL_ERR_INVALID_ARG, "frequency_penalty must be a finite number");
    if (p->n_logprobs < 0 || p->n_logprobs > TL_SAMPLER_MAX_LOGPROBS)
        return tl__errorf(TL_ERR_INVALID_ARG, "logprobs must be in [0, %d] (got %d)",
                          TL_SAMPLER_MAX_LOGPROBS, p->n_logprobs);
    if (p->n_logit_bias < 0 || p->n_logit_bias > TL_MAX_LOGIT_BIAS ||
        (p->n_logit_bias && !p->logit_bias))
        return tl__errorf(TL_ERR_INVALID_ARG, "logit_bias may hold at most %d entries (got %d)",
                          TL_MAX_LOGIT_BIAS, p->n_logit_bias);
    for (int32_t i = 0; i < p->n_logit_bias; i++)
        if (!(p->logit_bias[i].bias >= -100 && p->logit_bias[i].bias <= 100))
            return tl__errorf(TL_ERR_INVALID_ARG,
                              "logit_bias of token %d must be in [-100, 100] (got %g)",
                              p->logit_bias[i].token, (double)p->logit_bias[i].bias);
    return TL_OK;
}

// ---- scratch --------------------------------------------------------------------------------

// Tokens are binned by how far below the best logit they are, in steps of 1/BIN_SCALE (after
// temperature); the last bin takes everything further down. Bins are ordered like the ranking,
// so a top-k or top-p cut falls inside one bin, and only that bin's members need sorting.
enum { N_BINS = 1024, BIN_SCALE = 32 };
// The draw sums the kept mass per block of this many ids (see draw()).
enum { DRAW_BLOCK = 64 };

struct ranked {
    float v;
    int32_t id;
};

struct tl_sampler {
    int32_t n_vocab;
    float *val;            // owned, (n_vocab): penalized, temperature-scaled logits
    float *prob;           // owned, (n_vocab): exp(val - max)
    int32_t *bin;          // owned, (n_vocab): each token's bin
    struct ranked *ranked; // owned, (n_vocab): the cut bin's members, ranked
    int32_t *heap;         // owned, (n_vocab)
    int32_t *count;        // owned, (n_vocab): zero between calls
    double *blk_mass;      // owned, (n_vocab / DRAW_BLOCK + 1): kept mass per block of ids
    int64_t bin_count[N_BINS];
    double bin_mass[N_BINS];
};

struct tl_sampler *tl_sampler_create(int32_t n_vocab)
{
    if (n_vocab < 1) {
        tl__errorf(TL_ERR_INVALID_ARG, "sampler: vocabulary size %d", n_vocab);
        return NULL;
    }
    struct tl_sampler *s = tl_malloc(sizeof(*s));
    if (!s) goto out_nomem;
    memset(s, 0, sizeof(*s));
    s->n_vocab = n_vocab;
    size_t n = (size_t)n_vocab;
    s->val = tl_malloc_array(n, sizeof(float));
    s->prob = tl_malloc_array(n, sizeof(float));
    s->bin = tl_malloc_array(n, sizeof(int32_t));
    s->ranked = tl_malloc_array(n, sizeof(struct ranked));
    s->heap = tl_malloc_array(n, sizeof(int32_t));
    s->count = tl_calloc_array(n, sizeof(int32_t));
    s->blk_mass = tl_malloc_array(n / DRAW_BLOCK + 1, sizeof(double));
    if (!s->val || !s->prob || !s->bin || !s->ranked || !s->heap || !s->count || !s->blk_mass) {
        tl_sampler_destroy(s);
        goto out_nomem;
    }
    return s;
out_nomem:
    tl__errorf(TL_ERR_NOMEM, "sampler: out of memory");
    return NULL;
}

void tl_sampler_destroy(struct tl_sampler *s)
{
    if (!s) return;
    free(s->val);
    free(s->prob);
    free(s->bin);
    free(s->ranked);
    free(s->heap);
    free(s->count);
    free(s->blk_mass);
    free(s);
}

// ---- ranking --------------------------------------------------------------------------------

// a ranks before b: larger value, then smaller id.
static inline bool better(const float *v, int32_t a, int32_t b)
{
    return v[a] > v[b] || (v[a] == v[b] && a < b);
}

// Min-heap by rank (root = worst kept).
static void sift_down(const float *v, int32_t *h, int64_t n, int64_t i)
{
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && better(v, h[w], h[l])) w = l;
        if (r < n && better(v, h[w], h[r])) w = r;
        if (w == i) return;
        int32_t t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

static void sift_up(const float *v, int32_t *h, int64_t i)
{
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (!better(v, h[p], h[i])) return;
        int32_t t = h[i];
        h[i] = h[p];
        h[p] = t;
        i = p;
    }
}

// The best k of ids cand[0..n) (or 0..n-1 when cand is NULL) by value, best first, into out.
// Returns how many (min(k, n)).
static int64_t select_top(const float *v, const int32_t *cand, int64_t n, int64_t k, int32_t *heap,
                          int32_t *out)
{
    if (k > n) k = n;
    if (k <= 0) return 0;
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t id = cand ? cand[i] : (int32_t)i;
        if (m < k) {
            heap[m] = id;
            sift_up(v, heap, m++);
        } else if (better(v, id, heap[0])) {
            heap[0] = id;
            sift_down(v, heap, m, 0);
        }
    }
    for (int64_t i = m - 1; i >= 0; i--) { // pop the worst into the back
        out[i] = heap[0];
        heap[0] = heap[i];
        sift_down(v, heap, i, 0);
    }
    return m;
}

static void apply_penalties(struct tl_sampler *s, const struct tl_sampling *p,
                            const int32_t *tokens, int64_t n_prompt, int64_t n_tokens)
{
    float *v = s->val;
    int32_t *count = s->count, nv = s->n_vocab;
    if (p->repetition_penalty != 1.0f) {
        float rp = p->repetition_penalty;
        for (int64_t i = 0; i < n_tokens; i++) {
            int32_t t = tokens[i];
            if (t < 0 || t >= nv || count[t]) continue;
            count[t] = 1;
            v[t] = v[t] > 0 ? v[t] / rp : v[t] * rp;
        }
        for (int64_t i = 0; i < n_tokens; i++)
            if (tokens[i] >= 0 && tokens[i] < nv) count[tokens[i]] = 0;
    }
    if (p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f) {
        for (int64_t i = n_prompt; i < n_tokens; i++)
            if (tokens[i] >= 0 && tokens[i] < nv) count[tokens[i]]++;
        for (int64_t i = n_prompt; i < n_tokens; i++) {
            int32_t t = tokens[i];
            if (t < 0 || t >= nv || !count[t]) continue;
            v[t] -= (float)count[t] * p->frequency_penalty + p->presence_penalty;
            count[t] = 0;
        }
    }
}

// ---- normalizers and cuts -------------------------------------------------------------------

// bin[i] = the bin of v[i] below cmax (see N_BINS), with every bin's count and mass. The mass
// goes to two interleaved histograms (even, odd ids; summed at the end) so that runs of one bin
// do not chain every add on the previous one's store.
static void fill_bins(struct tl_sampler *s, const float *v, float cmax)
{
    const int32_t nv = s->n_vocab;
    int32_t *bin = s->bin, i = 0;
#if defined(__SSE2__)
    const __m128 c4 = _mm_set1_ps(cmax), lim = _mm_set1_ps((float)N_BINS / BIN_SCALE);
    const __m128 sc = _mm_set1_ps((float)BIN_SCALE);
    const __m128i last = _mm_set1_epi32(N_BINS - 1);
    for (; i + 4 <= nv; i += 4) {
        __m128 d = _mm_sub_ps(c4, _mm_loadu_ps(v + i)); // >= 0, +inf for impossible tokens
        __m128i in = _mm_castps_si128(_mm_cmplt_ps(d, lim));
        __m128i b = _mm_cvttps_epi32(_mm_mul_ps(d, sc));
        b = _mm_or_si128(_mm_and_si128(in, b), _mm_andnot_si128(in, last));
        _mm_storeu_si128((__m128i *)(bin + i), b);
    }
#endif
    for (; i < nv; i++) {
        float d = cmax - v[i];
        bin[i] = d < (float)N_BINS / BIN_SCALE ? (int32_t)(d * BIN_SCALE) : N_BINS - 1;
    }
    int32_t cnt[2][N_BINS];
    double mass[2][N_BINS];
    memset(cnt, 0, sizeof(cnt));
    memset(mass, 0, sizeof(mass));
    for (i = 0; i + 2 <= nv; i += 2) {
        cnt[0][bin[i]]++;
        mass[0][bin[i]] += (double)s->prob[i];
        cnt[1][bin[i + 1]]++;
        mass[1][bin[i + 1]] += (double)s->prob[i + 1];
    }
    if (i < nv) {
        cnt[0][bin[i]]++;
        mass[0][bin[i]] += (double)s->prob[i];
    }
    for (int b = 0; b < N_BINS; b++) {
        s->bin_count[b] = cnt[0][b] + cnt[1][b];
        s->bin_mass[b] = mass[0][b] + mass[1][b];
    }
}

static int cmp_ranked(const void *a, const void *b)
{
    const struct ranked *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

// Gathers the members of bin b into s->ranked, best first. Returns how many.
static int64_t rank_bin(struct tl_sampler *s, int32_t b)
{
    int64_t m = 0;
    int32_t i = 0;
#if defined(__SSE2__)
    const __m128i b4 = _mm_set1_epi32(b);
    for (; i + 4 <= s->n_vocab; i += 4) {
        __m128i eq = _mm_cmpeq_epi32(_mm_loadu_si128((const __m128i *)(s->bin + i)), b4);
        for (int hit = _mm_movemask_ps(_mm_castsi128_ps(eq)); hit; hit &= hit - 1) {
            int32_t id = i + __builtin_ctz((unsigned)hit);
            s->ranked[m++] = (struct ranked){s->val[id], id};
        }
    }
#endif
    for (; i < s->n_vocab; i++)
        if (s->bin[i] == b) s->ranked[m++] = (struct ranked){s->val[i], i};
    qsort(s->ranked, (size_t)m, sizeof(*s->ranked), cmp_ranked);
    return m;
}

// The kept set of the ranking after top-k and top-p: every token of the bins before *cut_bin,
// plus s->ranked[0..*n_cut) of bin *cut_bin (*cut_bin == N_BINS: everything).
static void find_cut(struct tl_sampler *s, const struct tl_sampling *p, int32_t *cut_bin,
                     int64_t *n_cut)
{
    const int32_t nv = s->n_vocab;
    int32_t bk = N_BINS, ranked_bin = -1;
    int64_t take = 0;
    double z = 0;
    if (p->top_k > 0 && p->top_k < nv) {
        int64_t cum = 0;
        for (int32_t b = 0; b < N_BINS; b++) {
            if (cum + s->bin_count[b] >= p->top_k) {
                bk = b;
                take = p->top_k - cum;
                break;
            }
            cum += s->bin_count[b];
            z += s->bin_mass[b];
        }
        rank_bin(s, bk);
        ranked_bin = bk;
        for (int64_t j = 0; j < take; j++)
            z += (double)s->prob[s->ranked[j].id];
    } else {
        for (int32_t b = 0; b < N_BINS; b++)
            z += s->bin_mass[b];
    }
    *cut_bin = bk;
    *n_cut = take;
    if (p->top_p >= 1.0f) return;

    // Top-p over the top-k set: the smallest ranked prefix whose mass reaches top_p * z.
    double want = (double)p->top_p * z, acc = 0;
    for (int32_t b = 0; b < N_BINS && b <= bk; b++) {
        if (b < bk && acc + s->bin_mass[b] < want) {
            acc += s->bin_mass[b];
            continue;
        }
        int64_t m = take;
        if (b < bk || ranked_bin != bk) {
            int64_t n_in_bin = rank_bin(s, b);
            ranked_bin = b;
            if (b < bk) m = n_in_bin;
        }
        for (int64_t j = 0; j < m; j++) {
            acc += (double)s->prob[s->ranked[j].id];
            if (acc >= want) {
                *cut_bin = b;
                *n_cut = j + 1;
                return;
            }
        }
        // Rounding: the members' sum fell short of the bin's mass; go on to the next bin.
    }
}

// ---- log-probabilities ----------------------------------------------------------------------

// The log-softmax normalizer of the raw logits: copies them into s->val (NaN counts as -inf)
// and returns log(sum(exp(logits))), or 0 when every logit is -inf.
static double log_normalizer(struct tl_sampler *s, const float *logits)
{
    const int32_t nv = s->n_vocab;
    float *v = s->val, mx = tl__copy_sanitize_max(logits, v, nv);
    return mx > -INFINITY ? (double)mx + log(tl__exp_sum(v, mx, s->prob, nv)) : 0.0;
}

// The n_top best tokens of s->val (after log_normalizer) with their log-probabilities, best
// first; returns how many.
static int32_t top_logprobs(struct tl_sampler *s, double lse, int32_t n_top,
                            struct tl_token_logprob *top)
{
    if (n_top <= 0) return 0;
    if (n_top > TL_SAMPLER_MAX_LOGPROBS) n_top = TL_SAMPLER_MAX_LOGPROBS;
    int32_t ids[TL_SAMPLER_MAX_LOGPROBS];
    int64_t k = select_top(s->val, NULL, s->n_vocab, n_top, s->heap, ids);
    for (int64_t i = 0; i < k; i++) {
        top[i].id = ids[i];
        top[i].logprob = (float)((double)s->val[ids[i]] - lse);
    }
    return (int32_t)k;
}

// The log-probability of token under the raw logits (whose normalizer is lse).
static float token_logprob(const float *logits, int32_t token, double lse)
{
    float x = logits[token];
    return (float)((double)(isnan(x) ? -INFINITY : x) - lse);
}

void tl_sampler_logprobs(struct tl_sampler *s, const float *logits, int32_t token, int32_t n_top,
                         struct tl_sample_result *out)
{
    TL_ASSERT(token >= 0 && token < s->n_vocab);
    const double lse = log_normalizer(s, logits);
    out->token = token;
    out->n_top = top_logprobs(s, lse, n_top, out->top);
    out->logprob = token_logprob(logits, token, lse);
}

// ---- the draw ----------------------------------------------------------------------------------
//
// The kept set: tokens of the bins before cut_bin (every token when cut_bin < 0) with a
// probability (relative to the best token) of at least floor_p (min-p) and above 0, then the
// first n_cut members of s->ranked (the cut bin, in rank order). The draw is u * (their total
// mass) against the running sum in that order: whole bins in id order, then the ranked members.
// Kept masses are summed per block of DRAW_BLOCK ids (four fixed lanes, the same in the SSE2 and
// scalar code) and the block sums in order, so the draw finds its block among n / 64 sums and
// walks only that block's ids.

// Kept mass of block [i0, i1): lane j takes ids i0 + 4k + j, then (l0 + l1) + (l2 + l3).
static double block_mass(const struct tl_sampler *s, int32_t i0, int32_t i1, int32_t cut_bin,
                         float floor_p)
{
    double l[4] = {0};
    int32_t i = i0;
#if defined(__SSE2__)
    const __m128i cb = _mm_set1_epi32(cut_bin < 0 ? N_BINS : cut_bin);
    const __m128 fl = _mm_set1_ps(floor_p), zero = _mm_setzero_ps();
    __m128d a01 = _mm_setzero_pd(), a23 = a01;
    for (; i + 4 <= i1; i += 4) {
        __m128 pr = _mm_loadu_ps(s->prob + i);
        __m128 keep = _mm_and_ps(_mm_cmpge_ps(pr, fl), _mm_cmpgt_ps(pr, zero));
        if (cut_bin >= 0)
            keep = _mm_and_ps(keep, _mm_castsi128_ps(_mm_cmplt_epi32(
                                        _mm_loadu_si128((const __m128i *)(s->bin + i)), cb)));
        pr = _mm_and_ps(pr, keep);
        a01 = _mm_add_pd(a01, _mm_cvtps_pd(pr));
        a23 = _mm_add_pd(a23, _mm_cvtps_pd(_mm_movehl_ps(pr, pr)));
    }
    _mm_storeu_pd(l, a01);
    _mm_storeu_pd(l + 2, a23);
#endif
    for (; i < i1; i++) {
        float pr = s->prob[i];
        bool keep = pr >= floor_p && pr > 0 && (cut_bin < 0 || s->bin[i] < cut_bin);
        l[(i - i0) & 3] += keep ? (double)pr : 0.0;
    }
    return (l[0] + l[1]) + (l[2] + l[3]);
}

// Draws a token of the kept set with u in [0, 1); `fallback` when the set is empty.
static int32_t draw(struct tl_sampler *s, int32_t cut_bin, int64_t n_cut, float floor_p, double u,
                    int32_t fallback)
{
    const int32_t nv = s->n_vocab, n_blk = (nv + DRAW_BLOCK - 1) / DRAW_BLOCK;
    double total = 0;
    for (int32_t k = 0; k < n_blk; k++) {
        int32_t i0 = k * DRAW_BLOCK, i1 = i0 + DRAW_BLOCK < nv ? i0 + DRAW_BLOCK : nv;
        s->blk_mass[k] = block_mass(s, i0, i1, cut_bin, floor_p);
        total += s->blk_mass[k];
    }
    for (int64_t j = 0; j < n_cut; j++) {
        float pr = s->prob[s->ranked[j].id];
        if (pr >= floor_p && pr > 0) total += (double)pr;
    }
    u *= total;
    double acc = 0;
    int32_t last = fallback;
    for (int32_t k = 0; k < n_blk; k++) {
        if (!(u < acc + s->blk_mass[k])) {
            acc += s->blk_mass[k];
            continue;
        }
        // the draw is in this block: walk its ids (rounding may leave the walk just short of
        // the block's sum: then its last kept id)
        int32_t i0 = k * DRAW_BLOCK, i1 = i0 + DRAW_BLOCK < nv ? i0 + DRAW_BLOCK : nv;
        for (int32_t i = i0; i < i1; i++) {
            float pr = s->prob[i];
            if (!(pr >= floor_p && pr > 0 && (cut_bin < 0 || s->bin[i] < cut_bin))) continue;
            acc += (double)pr;
            last = i;
            if (u < acc) return i;
        }
        return last;
    }
    for (int64_t j = 0; j < n_cut; j++) {
        int32_t id = s->ranked[j].id;
        float pr = s->prob[id];
        if (!(pr >= floor_p && pr > 0)) continue;
        acc += (double)pr;
        last = id;
        if (u < acc) return id;
    }
    return last; // empty set, or rounding left u just past the last sum
}

// ---- sampling -------------------------------------------------------------------------------

void tl_sampler_sample(struct tl_sampler *s, const float *logits, const struct tl_sampling *p,
                       const int32_t *tokens, int64_t n_prompt, int64_t n_tokens,
                       struct tl_rng *rng, struct tl_sample_result *out)
{
    tl_sampler_sample_masked(s, logits, p, tokens, n_prompt, n_tokens, rng, NULL, out);
}

void tl_sampler_sample_masked(struct tl_sampler *s, const float *logits,
                              const struct tl_sampling *p, const int32_t *tokens, int64_t n_prompt,
                              int64_t n_tokens, struct tl_rng *rng, const uint64_t *allowed,
                              struct tl_sample_result *out)
{
    const int32_t nv = s->n_vocab;
    float *v = s->val;

    // Log-probabilities of the raw logits first: s->val then holds their NaN-free copy.
    const double lse = log_normalizer(s, logits);
    out->n_top = top_logprobs(s, lse, p->n_logprobs, out->top);

    apply_penalties(s, p, tokens, n_prompt, n_tokens);
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        int32_t t = p->logit_bias[i].token;
        if (t >= 0 && t < nv) v[t] += p->logit_bias[i].bias;
    }

    int32_t chosen = 0;
    if (allowed) { // disallowed tokens get probability 0 (the first allowed one is the fallback)
        chosen = -1;
        for (int32_t i = 0; i < nv; i++)
            if (!((allowed[i >> 6] >> (i & 63)) & 1))
                v[i] = -INFINITY;
            else if (chosen < 0)
                chosen = i;
        if (chosen < 0) chosen = 0;
    }
    if (p->temperature == 0.0f || p->top_k == 1) {
        // the best value, the lowest id among equals; all -inf: the fallback stays
        float m = tl__max_of(v, nv);
        if (m > -INFINITY) chosen = tl__first_equal(v, m, nv);
        goto done;
    }

    // Temperature; probabilities relative to the best token; bins (only when there is a cut).
    float cmax = tl__scale_max(v, 1.0f / p->temperature, nv);
    if (cmax == -INFINITY) goto done; // nothing possible: token 0
    tl_exp_sub(v, cmax, s->prob, nv);
    int32_t cut_bin = N_BINS;
    int64_t n_cut = 0;
    const bool cut = (p->top_k > 0 && p->top_k < nv) || p->top_p < 1.0f;
    if (cut) {
        fill_bins(s, v, cmax);
        find_cut(s, p, &cut_bin, &n_cut);
    }
    chosen = draw(s, cut ? cut_bin : -1, n_cut, p->min_p, tl_rng_uniform(rng), chosen);

done:
    out->token = chosen;
    out->logprob = token_logprob(logits, chosen, lse);
}
