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
 * u * total mass, sums in double. Log-probabilities come from the raw logits (as OpenAI reports
 * them), independent of the sampling parameters.
 *
 * Thread model: a tl_sampler is one thread's scratch; the functions are re-entrant otherwise.
 */
#include "engine/sampler.h"

#include "kernels/kernels.h"

#include "core/alloc.h"
#include "core/error.h"
#include "core/hash.h"

#include <math.h>
#include <string.h>

// ---- RNG ------------------------------------------------------------------------------------

void tl_rng_seed(struct tl_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = tl_splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t tl_rng_next(struct tl_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double tl_rng_uniform(struct tl_rng *r)
{
    return (double)(tl_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

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
    if (!s->val || !s->prob || !s->bin || !s->ranked || !s->heap || !s->count) {
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

// prob[i] = e^(v[i] - m) for i < n (v[i] <= m; -inf gives exactly 0), with the kernels'
// vectorized exp (libm's scalar expf over a 32000-token vocabulary was ~40% of sampling);
// returns the sum, accumulated in eight fixed lanes of double (the same order every time).
static double exp_sum(const float *v, float m, float *prob, int32_t n)
{
    double lane[8] = {0};
    int32_t i = 0;
    tl_exp_sub(v, m, prob, n);
    for (i = 0; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            lane[j] += (double)prob[i + j];
    double sum = 0;
    for (; i < n; i++)
        sum += (double)prob[i];
    for (int j = 0; j < 8; j++)
        sum += lane[j];
    return sum;
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
    for (int32_t i = 0; i < s->n_vocab; i++)
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
    float *v = s->val, mx = -INFINITY;
    for (int32_t i = 0; i < nv; i++) {
        float x = logits[i];
        v[i] = isnan(x) ? -INFINITY : x;
        if (v[i] > mx) mx = v[i];
    }
    return mx > -INFINITY ? (double)mx + log(exp_sum(v, mx, s->prob, nv)) : 0.0;
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
        for (int32_t i = chosen + 1; i < nv; i++)
            if (v[i] > v[chosen]) chosen = i;
        goto done;
    }

    // Temperature; probabilities relative to the best token; bins.
    float inv_t = 1.0f / p->temperature, cmax = -INFINITY;
    for (int32_t i = 0; i < nv; i++) {
        v[i] *= inv_t;
        if (v[i] > cmax) cmax = v[i];
    }
    if (cmax == -INFINITY) goto done; // nothing possible: token 0
    memset(s->bin_count, 0, sizeof(s->bin_count));
    memset(s->bin_mass, 0, sizeof(s->bin_mass));
    exp_sum(v, cmax, s->prob, nv);
    for (int32_t i = 0; i < nv; i++) {
        float d = cmax - v[i]; // >= 0, +inf for impossible tokens
        int32_t b = d < (float)N_BINS / BIN_SCALE ? (int32_t)(d * BIN_SCALE) : N_BINS - 1;
        s->bin[i] = b;
    }
    // Impossible tokens (probability exactly 0: masked by a grammar, or -inf logits) are only
    // counted: adding their 0 to the last bin's mass changes nothing, and under a grammar mask
    // nearly the whole vocabulary is such, which made this loop one long chain of dependent
    // read-modify-writes of that one bin (half of a constrained step's sampling time).
    int64_t n_zero = 0;
    for (int32_t i = 0; i < nv; i++) {
        if (s->prob[i] == 0.0f && s->bin[i] == N_BINS - 1) {
            n_zero++;
            continue;
        }
        s->bin_count[s->bin[i]]++;
        s->bin_mass[s->bin[i]] += (double)s->prob[i];
    }
    s->bin_count[N_BINS - 1] += n_zero;
    int32_t cut_bin;
    int64_t n_cut;
    find_cut(s, p, &cut_bin, &n_cut);

    // One draw over the kept set (min-p: relative to the best token, whose prob is 1), walking
    // the whole bins in id order, then the cut bin's members in rank order.
    const float floor_p = p->min_p;
    double total = 0;
    int32_t last = -1;
    for (int32_t i = 0; i < nv; i++)
        if (s->bin[i] < cut_bin && s->prob[i] >= floor_p) total += (double)s->prob[i];
    for (int64_t j = 0; j < n_cut; j++)
        if (s->prob[s->ranked[j].id] >= floor_p) total += (double)s->prob[s->ranked[j].id];
    double u = tl_rng_uniform(rng) * total, acc = 0;
    for (int32_t i = 0; i < nv; i++) {
        if (s->bin[i] >= cut_bin || s->prob[i] < floor_p) continue;
        if (allowed && !(s->prob[i] > 0)) continue;
        acc += (double)s->prob[i];
        last = i;
        if (u < acc) {
            chosen = i;
            goto done;
        }
    }
    for (int64_t j = 0; j < n_cut; j++) {
        int32_t id = s->ranked[j].id;
        if (s->prob[id] < floor_p || (allowed && !(s->prob[id] > 0))) continue;
        acc += (double)s->prob[id];
        last = id;
        if (u < acc) {
            chosen = id;
            goto done;
        }
    }
    if (last >= 0) chosen = last; // rounding left u just past the last sum

done:
    out->token = chosen;
    out->logprob = token_logprob(logits, chosen, lse);
}
