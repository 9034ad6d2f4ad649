/*
 * Sampler: see sampler.h for the semantics.
 *
 * Design. The raw logits are never modified: penalties and temperature work on a copy. Tokens
 * are ranked by (value desc, id asc), so every ordering is total and the result is the same on
 * every machine. Top-k is a bounded heap (O(V log k)); top-p without top-k would need a full
 * sort of the vocabulary, so it first ranks only the best 64 candidates and widens (x8) until
 * their mass reaches top_p -- almost always the first try. min-p needs no order. The final draw
 * walks the kept candidates in rank order (or id order when nothing needed ranking) against
 * u * total mass, with sums in double and a fixed order. Log-probabilities are computed from the
 * raw logits (as OpenAI reports them), independent of the sampling parameters.
 *
 * Thread model: a tl_sampler is one thread's scratch; the functions are re-entrant otherwise.
 */
#include "engine/sampler.h"

#include "core/alloc.h"
#include "core/error.h"

#include <math.h>
#include <string.h>

// ---- RNG ------------------------------------------------------------------------------------

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void tl_rng_seed(struct tl_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
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
    return TL_OK;
}

// ---- scratch --------------------------------------------------------------------------------

struct tl_sampler {
    int32_t n_vocab;
    float *val;     // owned, (n_vocab): penalized, temperature-scaled logits
    float *prob;    // owned, (n_vocab): unnormalized probabilities of candidates, by position
    int32_t *cand;  // owned, (n_vocab): candidate ids
    int32_t *rank;  // owned, (n_vocab): ranked ids, best first
    int32_t *heap;  // owned, (n_vocab)
    int32_t *count; // owned, (n_vocab): zero between calls
};

struct tl_sampler *tl_sampler_create(int32_t n_vocab)
{
    if (n_vocab < 1) {
        tl__errorf(TL_ERR_INVALID_ARG, "sampler: vocabulary size %d", n_vocab);
        return NULL;
    }
    struct tl_sampler *s = tl_malloc(sizeof(*s));
    if (!s) goto out_nomem;
    s->n_vocab = n_vocab;
    size_t n = (size_t)n_vocab;
    s->val = tl_malloc_array(n, sizeof(float));
    s->prob = tl_malloc_array(n, sizeof(float));
    s->cand = tl_malloc_array(n, sizeof(int32_t));
    s->rank = tl_malloc_array(n, sizeof(int32_t));
    s->heap = tl_malloc_array(n, sizeof(int32_t));
    s->count = tl_calloc_array(n, sizeof(int32_t));
    if (!s->val || !s->prob || !s->cand || !s->rank || !s->heap || !s->count) {
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
    free(s->cand);
    free(s->rank);
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

// ---- sampling -------------------------------------------------------------------------------

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

void tl_sampler_sample(struct tl_sampler *s, const float *logits, const struct tl_sampling *p,
                       const int32_t *tokens, int64_t n_prompt, int64_t n_tokens,
                       struct tl_rng *rng, struct tl_sample_result *out)
{
    const int32_t nv = s->n_vocab;
    float *v = s->val;

    // Log-softmax normalizer of the raw logits (NaN counts as -inf).
    float mx = -INFINITY;
    for (int32_t i = 0; i < nv; i++) {
        float x = logits[i];
        v[i] = isnan(x) ? -INFINITY : x;
        if (v[i] > mx) mx = v[i];
    }
    double sum = 0;
    if (mx > -INFINITY)
        for (int32_t i = 0; i < nv; i++)
            sum += exp((double)v[i] - (double)mx);
    const double lse = mx > -INFINITY ? (double)mx + log(sum) : 0.0;

    out->n_top = 0;
    if (p->n_logprobs > 0) {
        int32_t top[TL_SAMPLER_MAX_LOGPROBS];
        int64_t k = select_top(v, NULL, nv, p->n_logprobs, s->heap, top);
        for (int64_t i = 0; i < k; i++) {
            out->top[i].id = top[i];
            out->top[i].logprob = (float)((double)v[top[i]] - lse);
        }
        out->n_top = (int32_t)k;
    }

    apply_penalties(s, p, tokens, n_prompt, n_tokens);

    int32_t chosen = 0;
    if (p->temperature == 0.0f || p->top_k == 1) {
        for (int32_t i = 1; i < nv; i++)
            if (v[i] > v[chosen]) chosen = i;
        goto done;
    }

    // Temperature, then the candidate set: top-k ranked, or everything in id order.
    float inv_t = 1.0f / p->temperature;
    for (int32_t i = 0; i < nv; i++)
        v[i] *= inv_t;
    int32_t *cand;
    int64_t n_cand;
    bool ranked = false;
    if (p->top_k > 0 && p->top_k < nv) {
        n_cand = select_top(v, NULL, nv, p->top_k, s->heap, s->rank);
        cand = s->rank;
        ranked = true;
    } else {
        for (int32_t i = 0; i < nv; i++)
            s->cand[i] = i;
        cand = s->cand;
        n_cand = nv;
    }
    float cmax = -INFINITY;
    for (int64_t i = 0; i < n_cand; i++)
        if (v[cand[i]] > cmax) cmax = v[cand[i]];
    if (cmax == -INFINITY) { // every candidate impossible: fall back to the first
        chosen = cand[0];
        goto done;
    }
    double total = 0;
    for (int64_t i = 0; i < n_cand; i++)
        total += (double)expf(v[cand[i]] - cmax);

    if (p->top_p < 1.0f) {
        double want = (double)p->top_p * total;
        if (!ranked) {
            // Rank only as many of the best as needed to reach the mass: 64, 512, ... all.
            for (int64_t k = 64;; k *= 8) {
                int64_t kk = select_top(v, cand, n_cand, k, s->heap, s->rank), i = 0;
                double acc = 0;
                for (; i < kk && acc < want; i++)
                    acc += (double)expf(v[s->rank[i]] - cmax);
                if (acc >= want || kk == n_cand) {
                    n_cand = kk;
                    break;
                }
            }
            cand = s->rank;
            ranked = true;
        }
        double acc = 0;
        for (int64_t i = 0; i < n_cand; i++) {
            acc += (double)expf(v[cand[i]] - cmax);
            if (acc >= want) {
                n_cand = i + 1;
                break;
            }
        }
    }

    // Unnormalized probabilities (best candidate = 1), min-p filter, then one draw.
    double kept = 0;
    int64_t m = 0;
    float floor_p = p->min_p;
    for (int64_t i = 0; i < n_cand; i++) {
        float pr = expf(v[cand[i]] - cmax);
        if (floor_p > 0 && pr < floor_p) continue;
        cand[m] = cand[i];
        s->prob[m++] = pr;
        kept += (double)pr;
    }
    double u = tl_rng_uniform(rng) * kept, acc = 0;
    chosen = cand[m - 1]; // rounding can leave u just past the last sum
    for (int64_t i = 0; i < m; i++) {
        acc += (double)s->prob[i];
        if (u < acc) {
            chosen = cand[i];
            break;
        }
    }

done:
    out->token = chosen;
    out->logprob = (float)((double)(isnan(logits[chosen]) ? -INFINITY : logits[chosen]) - lse);
}
