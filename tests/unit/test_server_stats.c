/*
 * Tests for src/server/stats.c's tl_hist_quantile: Prometheus's histogram_quantile() on
 * histograms whose answers were worked out by hand (interpolation inside a bucket, 0 as the
 * first bucket's lower bound, empty buckets skipped, the +Inf bucket answered with the last
 * finite bound, NaN when empty), then on random histograms against a restatement of
 * Prometheus's algorithm over cumulative counts (promql's bucketQuantile: the first bucket
 * whose cumulative count reaches the rank). The /stats JSON itself is checked end to end by
 * tests/dashboard/test_dashboard.py.
 */
#include "tl_test.h"

#include "server/stats.h"

#include <math.h>

static void fill(struct tl_hist *h, const double *le, int n_le, const double *obs, int n)
{
    tl_hist_init(h, le, n_le);
    for (int i = 0; i < n; i++)
        tl_hist_observe(h, obs[i]);
}

static void test_quantile_by_hand(void **state)
{
    (void)state;
    struct tl_hist h;
    const double le[] = {1, 2, 5};
    const double obs[] = {0.5, 1, 1.5, 5, 7, 100}; // per bucket 2, 1, 1; +Inf 2
    fill(&h, le, 3, obs, 6);
    assert_true(fabs(tl_hist_quantile(&h, 0.25) - 0.75) < 1e-12); // rank 1.5 of 2 in [0, 1]
    assert_true(fabs(tl_hist_quantile(&h, 0.50) - 2.0) < 1e-12);  // rank 3: top of (1, 2]
    assert_true(fabs(tl_hist_quantile(&h, 0.60) - 3.8) < 1e-12);  // rank 3.6: 2 + 3 * 0.6
    assert_true(tl_hist_quantile(&h, 0.90) == 5.0);               // +Inf: the last bound
    assert_true(isnan(tl_hist_quantile(&h, 0.0)));
    assert_true(isnan(tl_hist_quantile(&h, 1.0)));

    const double gap[] = {0.5, 3}; // per bucket 1, 0, 1
    fill(&h, le, 3, gap, 2);
    assert_true(fabs(tl_hist_quantile(&h, 0.50) - 1.0) < 1e-12);
    assert_true(fabs(tl_hist_quantile(&h, 0.75) - 3.5) < 1e-12); // the empty (1, 2] skipped

    tl_hist_init(&h, le, 3);
    assert_true(isnan(tl_hist_quantile(&h, 0.5)));
}

// promql's bucketQuantile over cumulative counts, restated independently.
static double reference(const struct tl_hist *h, double q)
{
    double cum[TL_HIST_MAX_BUCKETS + 1], acc = 0;
    for (int i = 0; i < h->n_le; i++)
        cum[i] = acc += (double)h->count[i];
    cum[h->n_le] = acc + (double)h->n_inf;
    if (cum[h->n_le] == 0) return NAN;
    double rank = q * cum[h->n_le];
    int b = 0;
    while (cum[b] < rank)
        b++;
    if (b == h->n_le) return h->le[h->n_le - 1];
    double start = b == 0 ? 0.0 : h->le[b - 1], below = b == 0 ? 0.0 : cum[b - 1];
    return start + (h->le[b] - start) * ((rank - below) / (cum[b] - below));
}

static void test_quantile_random(void **state)
{
    (void)state;
    const double le[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0, 2.5};
    uint64_t x = 42;
    for (int round = 0; round < 2000; round++) {
        struct tl_hist h;
        tl_hist_init(&h, le, 12);
        int n = 1 + (int)(round % 50);
        for (int i = 0; i < n; i++) {
            // Log-uniform over [1e-4, 10): every bucket and +Inf get some.
            tl_hist_observe(&h, 1e-4 * pow(10.0, 5.0 * tl_xorshift64s_unit(&x)));
        }
        const double qs[] = {0.01, 0.5, 0.9, 0.99};
        for (int k = 0; k < 4; k++) {
            double got = tl_hist_quantile(&h, qs[k]), want = reference(&h, qs[k]);
            if (fabs(got - want) > 1e-12 * (1 + fabs(want)))
                fail_msg("round %d q %g: %.17g, want %.17g", round, qs[k], got, want);
        }
    }
}

TL_TEST_MAIN(cmocka_unit_test(test_quantile_by_hand), cmocka_unit_test(test_quantile_random))
