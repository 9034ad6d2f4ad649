/* Tests for src/engine/sampler: RNG vectors, greedy, log-probabilities, the filters, penalties. */
#include "tl_test.h"

#include "core/error.h"
#include "engine/sampler.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdlib.h>

static struct tl_sampling params(float temp)
{
    struct tl_sampling p;
    tl_sampling_default(&p);
    p.temperature = temp;
    return p;
}

static void test_rng_vectors(void **state)
{
    (void)state;
    // splitmix64 from 0 gives the published first outputs; they become the xoshiro state.
    struct tl_rng r;
    tl_rng_seed(&r, 0);
    assert_true(r.s[0] == 0xe220a8397b1dcdafull);
    assert_true(r.s[1] == 0x6e789e6aa1b965f4ull);
    assert_true(r.s[2] == 0x06c45d188009454full);
    assert_true(r.s[3] == 0xf88bb8a8724c81ecull);
    // xoshiro256** from state {1, 2, 3, 4}: outputs worked out by hand from the definition
    // (result = rotl(s1 * 5, 7) * 9): 2*5=10 -> 1280 -> 11520; then s1 = 0 -> 0; then
    // s1 = 262149 -> 1310745 << 7 = 167775360 -> 1509978240.
    struct tl_rng x = {{1, 2, 3, 4}};
    assert_true(tl_rng_next(&x) == 11520);
    assert_true(tl_rng_next(&x) == 0);
    assert_true(tl_rng_next(&x) == 1509978240ull);
    for (int i = 0; i < 1000; i++) {
        double u = tl_rng_uniform(&r);
        assert_true(u >= 0.0 && u < 1.0);
    }
}

static void test_greedy_ties_and_no_draw(void **state)
{
    (void)state;
    struct tl_sampler *s = tl_sampler_create(6);
    float logits[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, -3.0f};
    struct tl_sampling p = params(0);
    struct tl_rng r, before;
    tl_rng_seed(&r, 7);
    before = r;
    struct tl_sample_result res;
    tl_sampler_sample(s, logits, &p, NULL, 0, 0, &r, &res);
    assert_int_equal(res.token, 1); // tie with 3: lowest id
    assert_memory_equal(&r, &before, sizeof(r));
    p.temperature = 0.7f;
    p.top_k = 1; // top_k 1 is greedy too
    tl_sampler_sample(s, logits, &p, NULL, 0, 0, &r, &res);
    assert_int_equal(res.token, 1);
    tl_sampler_destroy(s);
}

static void test_logprobs_match_scalar_log_softmax(void **state)
{
    (void)state;
    enum { V = 300 };
    float logits[V];
    uint64_t x = 99;
    for (int i = 0; i < V; i++) {
        logits[i] = (float)((double)(tl_xorshift64s(&x) >> 40) / (double)(1 << 24) * 20.0 - 10.0);
    }
    double mx = -1e30, sum = 0;
    for (int i = 0; i < V; i++)
        mx = fmax(mx, logits[i]);
    for (int i = 0; i < V; i++)
        sum += exp(logits[i] - mx);
    struct tl_sampler *s = tl_sampler_create(V);
    struct tl_sampling p = params(0.8f);
    p.n_logprobs = 5;
    p.repetition_penalty = 3.0f; // penalties must not change the reported logprobs
    int32_t hist[3] = {4, 5, 6};
    struct tl_rng r;
    tl_rng_seed(&r, 1);
    struct tl_sample_result res;
    tl_sampler_sample(s, logits, &p, hist, 3, 3, &r, &res);
    TL_ASSERT_NEAR(res.logprob, logits[res.token] - mx - log(sum), 1e-4, res.token);
    assert_int_equal(res.n_top, 5);
    for (int k = 0; k < 5; k++) {
        // The k-th best by a plain count of how many are larger.
        int32_t id = res.top[k].id, larger = 0;
        for (int i = 0; i < V; i++)
            larger += logits[i] > logits[id];
        assert_int_equal(larger, k);
        TL_ASSERT_NEAR(res.top[k].logprob, logits[id] - mx - log(sum), 1e-4, k);
    }
    tl_sampler_destroy(s);
}

// Empirical frequencies of n draws against expected probabilities.
static void check_freq(const float *logits, int V, const struct tl_sampling *p,
                       const double *expect, int n)
{
    struct tl_sampler *s = tl_sampler_create(V);
    struct tl_rng r;
    tl_rng_seed(&r, 42);
    int counts[64] = {0};
    for (int i = 0; i < n; i++) {
        struct tl_sample_result res;
        tl_sampler_sample(s, logits, p, NULL, 0, 0, &r, &res);
        assert_true(res.token >= 0 && res.token < V);
        counts[res.token]++;
    }
    for (int i = 0; i < V; i++) {
        double f = (double)counts[i] / n, sd = sqrt(expect[i] * (1 - expect[i]) / n);
        if (expect[i] == 0)
            assert_int_equal(counts[i], 0);
        else
            TL_ASSERT_NEAR(f, expect[i], 5 * sd + 1e-9, i);
    }
    tl_sampler_destroy(s);
}

static void test_distribution_temperature_topk_topp_minp(void **state)
{
    (void)state;
    const double pr[4] = {0.5, 0.3, 0.15, 0.05};
    float logits[4];
    for (int i = 0; i < 4; i++)
        logits[i] = (float)log(pr[i]);
    struct tl_sampling p = params(1.0f);
    check_freq(logits, 4, &p, pr, 200000);
    // Temperature 2: p_i proportional to sqrt(pr_i).
    double t2[4], z = 0;
    for (int i = 0; i < 4; i++)
        z += t2[i] = sqrt(pr[i]);
    for (int i = 0; i < 4; i++)
        t2[i] /= z;
    p.temperature = 2.0f;
    check_freq(logits, 4, &p, t2, 200000);
    p.temperature = 1.0f;
    // top-k 2: renormalized over the best two.
    p.top_k = 2;
    const double k2[4] = {0.625, 0.375, 0, 0};
    check_freq(logits, 4, &p, k2, 100000);
    p.top_k = 0;
    // top-p 0.79: 0.5 + 0.3 reaches it -> {0, 1}; 0.85 -> {0, 1, 2}.
    p.top_p = 0.79f;
    check_freq(logits, 4, &p, k2, 100000);
    p.top_p = 0.85f;
    const double p3[4] = {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0};
    check_freq(logits, 4, &p, p3, 100000);
    p.top_p = 1.0f;
    // min-p 0.2: threshold 0.2 * 0.5 = 0.1 drops only the 0.05 token.
    p.min_p = 0.2f;
    check_freq(logits, 4, &p, p3, 100000);
}

static void test_topp_wide_vocabulary(void **state)
{
    (void)state;
    // 2000 equal logits: top-p 0.5 must keep exactly ids 0..999 (ties rank by id), which
    // needs the candidate window widened past its first 64 and 512.
    enum { V = 2000 };
    static float logits[V];
    struct tl_sampler *s = tl_sampler_create(V);
    struct tl_sampling p = params(1.0f);
    p.top_p = 0.5f;
    struct tl_rng r;
    tl_rng_seed(&r, 3);
    int lo = V, hi = -1;
    for (int i = 0; i < 20000; i++) {
        struct tl_sample_result res;
        tl_sampler_sample(s, logits, &p, NULL, 0, 0, &r, &res);
        if (res.token < lo) lo = res.token;
        if (res.token > hi) hi = res.token;
    }
    assert_true(lo < 10);
    assert_true(hi >= 990 && hi <= 999);
    tl_sampler_destroy(s);
}

static int32_t greedy(const float *logits, int V, const struct tl_sampling *p, const int32_t *t,
                      int64_t n_prompt, int64_t n)
{
    struct tl_sampler *s = tl_sampler_create(V);
    struct tl_rng r;
    tl_rng_seed(&r, 0);
    struct tl_sample_result res;
    tl_sampler_sample(s, logits, p, t, n_prompt, n, &r, &res);
    tl_sampler_destroy(s);
    return res.token;
}

static void test_penalties(void **state)
{
    (void)state;
    struct tl_sampling p = params(0);
    // Repetition (over prompt and output): a positive logit is divided: 3/2 = 1.5 < 2.
    float a[2] = {3.0f, 2.0f};
    int32_t prompt0[1] = {0};
    p.repetition_penalty = 2.0f;
    assert_int_equal(greedy(a, 2, &p, prompt0, 1, 1), 1);
    p.repetition_penalty = 1.4f; // 3/1.4 = 2.14 > 2
    assert_int_equal(greedy(a, 2, &p, prompt0, 1, 1), 0);
    // A negative logit is multiplied: -1 * 2 = -2 < -1.5 (dividing would give -0.5).
    float b[2] = {-1.0f, -1.5f};
    p.repetition_penalty = 2.0f;
    assert_int_equal(greedy(b, 2, &p, prompt0, 1, 1), 1);
    // Repeated occurrences are penalized once: 3 -> 1.5, not 0.75 (still below 2 either way,
    // so compare against 1.4 where 0.75 would lose but 1.5 wins).
    float c[2] = {3.0f, 1.4f};
    int32_t rep[4] = {0, 0, 0, 0};
    assert_int_equal(greedy(c, 2, &p, rep, 2, 4), 0);
    p.repetition_penalty = 1.0f;

    // Presence (output only): 5 - 0.6 = 4.4 < 4.5; 5 - 0.4 = 4.6 > 4.5.
    float d[3] = {5.0f, 4.5f, 0.0f};
    int32_t gen1[2] = {2, 0}; // prompt {2}, generated {0}
    p.presence_penalty = 0.6f;
    assert_int_equal(greedy(d, 3, &p, gen1, 1, 2), 1);
    p.presence_penalty = 0.4f;
    assert_int_equal(greedy(d, 3, &p, gen1, 1, 2), 0);
    // A prompt token is not penalized by presence.
    p.presence_penalty = 10.0f;
    assert_int_equal(greedy(d, 3, &p, gen1, 2, 2), 0);
    p.presence_penalty = 0.0f;
    // Frequency: 3 occurrences * 0.2 = 0.6 -> 4.4 < 4.5; 2 occurrences -> 4.6.
    int32_t gen3[3] = {0, 0, 0};
    p.frequency_penalty = 0.2f;
    assert_int_equal(greedy(d, 3, &p, gen3, 0, 3), 1);
    assert_int_equal(greedy(d, 3, &p, gen3, 0, 2), 0);
    // Negative presence rewards: 4.5 + 1 > 5.
    int32_t gen_b[1] = {1};
    p.frequency_penalty = 0.0f;
    p.presence_penalty = -1.0f;
    assert_int_equal(greedy(d, 3, &p, gen_b, 0, 1), 1);
}

static void test_same_seed_same_tokens(void **state)
{
    (void)state;
    enum { V = 50 };
    float logits[V];
    for (int i = 0; i < V; i++)
        logits[i] = (float)sin(i * 0.7) * 2;
    struct tl_sampler *s = tl_sampler_create(V);
    struct tl_sampling p = params(1.0f);
    p.top_p = 0.9f;
    p.min_p = 0.01f;
    int32_t out[3][64];
    uint64_t seeds[3] = {5, 5, 6};
    for (int k = 0; k < 3; k++) {
        struct tl_rng r;
        tl_rng_seed(&r, seeds[k]);
        for (int i = 0; i < 64; i++) {
            struct tl_sample_result res;
            tl_sampler_sample(s, logits, &p, NULL, 0, 0, &r, &res);
            out[k][i] = res.token;
        }
    }
    assert_memory_equal(out[0], out[1], sizeof(out[0]));
    assert_memory_not_equal(out[0], out[2], sizeof(out[0]));
    tl_sampler_destroy(s);
}

static void test_nan_and_inf_logits(void **state)
{
    (void)state;
    float logits[4] = {NAN, -INFINITY, 1.0f, NAN};
    struct tl_sampler *s = tl_sampler_create(4);
    struct tl_sampling p = params(1.0f);
    p.n_logprobs = 4;
    struct tl_rng r;
    tl_rng_seed(&r, 1);
    for (int i = 0; i < 100; i++) {
        struct tl_sample_result res;
        tl_sampler_sample(s, logits, &p, NULL, 0, 0, &r, &res);
        assert_int_equal(res.token, 2);
        TL_ASSERT_NEAR(res.logprob, 0.0, 1e-6, i);
    }
    float none[4] = {-INFINITY, -INFINITY, NAN, -INFINITY};
    struct tl_sample_result res;
    tl_sampler_sample(s, none, &p, NULL, 0, 0, &r, &res); // must not crash
    assert_true(res.token >= 0 && res.token < 4);
    tl_sampler_destroy(s);
}

static void test_validate(void **state)
{
    (void)state;
    struct tl_sampling p = params(1.0f);
    assert_int_equal(tl_sampling_validate(&p), TL_OK);
    p.temperature = -1;
    assert_int_equal(tl_sampling_validate(&p), TL_ERR_INVALID_ARG);
    assert_non_null(strstr(tl_last_error(), "temperature"));
    p = params(1.0f);
    p.top_p = 0;
    assert_int_equal(tl_sampling_validate(&p), TL_ERR_INVALID_ARG);
    assert_non_null(strstr(tl_last_error(), "top_p"));
    p = params(1.0f);
    p.min_p = 1.5f;
    assert_int_equal(tl_sampling_validate(&p), TL_ERR_INVALID_ARG);
    p = params(1.0f);
    p.repetition_penalty = 0;
    assert_int_equal(tl_sampling_validate(&p), TL_ERR_INVALID_ARG);
    p = params(1.0f);
    p.n_logprobs = 21;
    assert_int_equal(tl_sampling_validate(&p), TL_ERR_INVALID_ARG);
    p = params(1.0f);
    p.frequency_penalty = NAN;
    assert_int_equal(tl_sampling_validate(&p), TL_ERR_INVALID_ARG);
    p = params(1.0f);
    p.top_k = -2;
    assert_int_equal(tl_sampling_validate(&p), TL_ERR_INVALID_ARG);
    assert_null(tl_sampler_create(0));
}

// logit_bias: the distribution is softmax(logits + bias) (computed here independently), greedy
// follows the biased argmax, -100 bans a token, and reported logprobs stay the raw ones.
static void test_logit_bias(void **state)
{
    (void)state;
    const double pr[4] = {0.5, 0.3, 0.15, 0.05};
    float logits[4];
    for (int i = 0; i < 4; i++)
        logits[i] = (float)log(pr[i]);
    const struct tl_logit_bias bias[2] = {{3, 2.0f}, {0, -100.0f}};
    struct tl_sampling p = params(1.0f);
    p.logit_bias = bias;
    p.n_logit_bias = 2;
    assert_int_equal(tl_sampling_validate(&p), TL_OK);
    double want[4], z = 0;
    for (int i = 0; i < 4; i++) {
        double b = i == 3 ? 2.0 : i == 0 ? -100.0 : 0.0;
        z += want[i] = exp(log(pr[i]) + b);
    }
    for (int i = 0; i < 4; i++)
        want[i] /= z;
    check_freq(logits, 4, &p, want, 200000);

    struct tl_sampler *s = tl_sampler_create(4);
    struct tl_rng r;
    tl_rng_seed(&r, 1);
    struct tl_sample_result res;
    p.temperature = 0;
    p.n_logprobs = 1;
    tl_sampler_sample(s, logits, &p, NULL, 0, 0, &r, &res);
    assert_int_equal(res.token, 3); // 0 banned; 3: 0.05 * e^2 = 0.369 beats 1 (0.3)
    p.n_logit_bias = 1;             // only +2 on token 3: 0.369 < 0.5, token 0 wins
    tl_sampler_sample(s, logits, &p, NULL, 0, 0, &r, &res);
    assert_int_equal(res.token, 0);
    const struct tl_logit_bias up[1] = {{2, 1.5f}}; // 0.15 * e^1.5 = 0.672 > 0.5
    p.logit_bias = up;
    tl_sampler_sample(s, logits, &p, NULL, 0, 0, &r, &res);
    assert_int_equal(res.token, 2);
    TL_ASSERT_NEAR(res.logprob, log(0.15), 1e-5, 2); // the raw logprob
    assert_int_equal(res.top[0].id, 0);
    tl_sampler_destroy(s);

    const struct tl_logit_bias bad[1] = {{1, 100.5f}};
    p.logit_bias = bad;
    assert_int_equal(tl_sampling_validate(&p), TL_ERR_INVALID_ARG);
    assert_non_null(strstr(tl_last_error(), "logit_bias"));
    p.n_logit_bias = TL_MAX_LOGIT_BIAS + 1;
    assert_int_equal(tl_sampling_validate(&p), TL_ERR_INVALID_ARG);
}

// ---- the draw against a sequential reference --------------------------------------------------

enum { REF_V = 1037 }; // not a multiple of the sampler's 64-id blocks nor of its 4-wide passes
static float ref_v[REF_V];

static int cmp_rank(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (ref_v[x] != ref_v[y]) return ref_v[x] > ref_v[y] ? -1 : 1;
    return (x > y) - (x < y);
}

// The sampler's draw written the plain way: the kept tokens in the sampler's order (whole bins
// of 1/32 nat in id order, then the top-k cut bin's members in rank order), one sequential sum,
// the first token whose running sum passes u * total. No top-p (its cut is rounding-sensitive).
static int32_t ref_draw(const float *logits, const struct tl_sampling *p, double u)
{
    static float prob[REF_V];
    static int32_t bin[REF_V], order[REF_V], rank[REF_V];
    float inv_t = 1.0f / p->temperature, cmax = -INFINITY;
    for (int i = 0; i < REF_V; i++) {
        ref_v[i] = logits[i] * inv_t;
        cmax = ref_v[i] > cmax ? ref_v[i] : cmax;
    }
    tl_exp_sub(ref_v, cmax, prob, REF_V);
    for (int i = 0; i < REF_V; i++) {
        float d = cmax - ref_v[i];
        bin[i] = d < 32.0f ? (int32_t)(d * 32) : 1023;
        rank[i] = i;
    }
    int n = 0;
    if (p->top_k > 0 && p->top_k < REF_V) {
        qsort(rank, REF_V, sizeof(rank[0]), cmp_rank);
        int32_t cb = bin[rank[p->top_k - 1]];
        for (int i = 0; i < REF_V; i++)
            if (bin[i] < cb) order[n++] = i;
        for (int j = 0; j < p->top_k; j++)
            if (bin[rank[j]] == cb) order[n++] = rank[j];
    } else {
        for (int i = 0; i < REF_V; i++)
            order[n++] = i;
    }
    double total = 0, acc = 0;
    int32_t last = -1;
    for (int j = 0; j < n; j++)
        if (prob[order[j]] >= p->min_p && prob[order[j]] > 0) total += (double)prob[order[j]];
    u *= total;
    for (int j = 0; j < n; j++) {
        float pr = prob[order[j]];
        if (!(pr >= p->min_p && pr > 0)) continue;
        acc += (double)pr;
        last = order[j];
        if (u < acc) return order[j];
    }
    return last;
}

static void test_draw_matches_sequential_reference(void **state)
{
    (void)state;
    static float logits[REF_V];
    struct tl_sampler *s = tl_sampler_create(REF_V);
    assert_non_null(s);
    const struct {
        float temp, min_p;
        int32_t top_k;
    } cases[] = {
        {1.0f, 0, 0}, {0.8f, 0.05f, 0}, {0.7f, 0, 40}, {1.3f, 0.01f, 300}, {2.0f, 0, 1036}};
    uint64_t x = 12345;
    int n_checked = 0, seen_high = 0;
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        struct tl_sampling p = params(cases[c].temp);
        p.min_p = cases[c].min_p;
        p.top_k = cases[c].top_k;
        struct tl_rng r;
        tl_rng_seed(&r, 99 + c);
        for (int it = 0; it < 60; it++) {
            float spread = it % 3 == 0 ? 1.0f : it % 3 == 1 ? 4.0f : 12.0f;
            for (int i = 0; i < REF_V; i++) {
                logits[i] = spread * ((float)(tl_xorshift64s(&x) >> 40) / 16777216.0f - 0.5f);
            }
            struct tl_rng copy = r;
            double u = tl_rng_uniform(&copy);
            struct tl_sample_result res;
            tl_sampler_sample(s, logits, &p, NULL, 0, 0, &r, &res);
            assert_int_equal(res.token, ref_draw(logits, &p, u));
            assert_memory_equal(&r, &copy, sizeof(r)); // one draw consumed
            seen_high += res.token >= 1024;            // the last, partial block is reachable
            n_checked++;
        }
    }
    assert_int_equal(n_checked, 300);
    assert_true(seen_high > 0);
    tl_sampler_destroy(s);
}

TL_TEST_MAIN(cmocka_unit_test(test_rng_vectors), cmocka_unit_test(test_greedy_ties_and_no_draw),
             cmocka_unit_test(test_logprobs_match_scalar_log_softmax),
             cmocka_unit_test(test_distribution_temperature_topk_topp_minp),
             cmocka_unit_test(test_topp_wide_vocabulary), cmocka_unit_test(test_penalties),
             cmocka_unit_test(test_same_seed_same_tokens),
             cmocka_unit_test(test_nan_and_inf_logits), cmocka_unit_test(test_validate),
             cmocka_unit_test(test_logit_bias),
             cmocka_unit_test(test_draw_matches_sequential_reference))
