/*
 * Tests for the statistics of src/loadgen/bench.c: percentiles against numpy's default (linear)
 * interpolation worked by hand, length-distribution parsing and draws, and the exponential
 * inter-arrival generator's mean and variance (a Poisson process has exponential gaps with
 * variance mean^2).
 */
#include "tl_test.h"

#include "loadgen/bench.h"

#include <math.h>

static void test_percentile_linear(void **state)
{
    (void)state;
    double v[] = {4, 1, 3, 2}; // sorted: 1 2 3 4
    // numpy.percentile([1,2,3,4], p): rank = p/100 * 3
    TL_ASSERT_NEAR(tl_bench_percentile(v, 4, 50), 2.5, 1e-12, 50);
    TL_ASSERT_NEAR(tl_bench_percentile(v, 4, 90), 3.7, 1e-12, 90);
    TL_ASSERT_NEAR(tl_bench_percentile(v, 4, 99), 3.97, 1e-12, 99);
    TL_ASSERT_NEAR(tl_bench_percentile(v, 4, 0), 1.0, 1e-12, 0);
    TL_ASSERT_NEAR(tl_bench_percentile(v, 4, 100), 4.0, 1e-12, 100);
    double one[] = {7};
    TL_ASSERT_NEAR(tl_bench_percentile(one, 1, 99), 7.0, 1e-12, 1);
    assert_true(isnan(tl_bench_percentile(one, 0, 50)));
}

static void test_dist_parse(void **state)
{
    (void)state;
    struct tl_bench_dist d;
    assert_true(tl_bench_dist_parse("32", &d));
    assert_int_equal(d.kind, TL_DIST_FIXED);
    assert_true(tl_bench_dist_parse("16-64", &d));
    assert_int_equal(d.kind, TL_DIST_UNIFORM);
    assert_true(d.a == 16 && d.b == 64);
    assert_true(tl_bench_dist_parse("exp:100", &d));
    assert_int_equal(d.kind, TL_DIST_EXP);
    const char *bad[] = {"", "0", "-5", "64-16", "x", "3-", "exp:", "exp:0", "1e99", "5x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (tl_bench_dist_parse(bad[i], &d)) fail_msg("accepted '%s'", bad[i]);
}

static void test_dist_draws(void **state)
{
    (void)state;
    uint64_t rng = 12345;
    struct tl_bench_dist u;
    assert_true(tl_bench_dist_parse("10-13", &u));
    int seen[4] = {0};
    for (int i = 0; i < 4000; i++) {
        int64_t x = tl_bench_dist_draw(&u, &rng);
        assert_true(x >= 10 && x <= 13);
        seen[x - 10]++;
    }
    for (int i = 0; i < 4; i++)
        assert_true(seen[i] > 800 && seen[i] < 1200); // ~1000 each
    struct tl_bench_dist f;
    assert_true(tl_bench_dist_parse("7", &f));
    assert_int_equal(tl_bench_dist_draw(&f, &rng), 7);
    struct tl_bench_dist e;
    assert_true(tl_bench_dist_parse("exp:1", &e));
    for (int i = 0; i < 1000; i++)
        assert_true(tl_bench_dist_draw(&e, &rng) >= 1);
}

static void test_exponential_gaps(void **state)
{
    (void)state;
    uint64_t rng = 99;
    const int n = 200000;
    double sum = 0, sum2 = 0;
    for (int i = 0; i < n; i++) {
        double x = tl_bench_exp(&rng, 0.25);
        assert_true(x >= 0);
        sum += x;
        sum2 += x * x;
    }
    double mean = sum / n, var = sum2 / n - mean * mean;
    TL_ASSERT_NEAR(mean, 0.25, 0.005, 0); // standard error 0.25/sqrt(n) = 0.00056
    TL_ASSERT_NEAR(var, 0.0625, 0.003, 1);
    for (int i = 0; i < 1000; i++) {
        double u = tl_bench_uniform(&rng);
        assert_true(u >= 0 && u < 1);
    }
}

TL_TEST_MAIN(cmocka_unit_test(test_percentile_linear), cmocka_unit_test(test_dist_parse),
             cmocka_unit_test(test_dist_draws), cmocka_unit_test(test_exponential_gaps))
