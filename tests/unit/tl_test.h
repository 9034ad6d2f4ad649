/*
 * Shared test helpers over cmocka. Every unit test binary runs its group through TL_TEST_MAIN,
 * which honours TL_TEST_FILTER (a glob such as "*utf8*") to run single tests by name, and
 * prints TAP when CMOCKA_MESSAGE_OUTPUT=TAP (tests/run.sh sets it).
 *
 * Test data comes from the shared folder: $TL_SHARED (tests/run.sh sets it to ../shared of the
 * checkout), e.g. tl_test_shared("models/stories260K.gguf").
 */
#ifndef TL_TEST_H
#define TL_TEST_H

// clang-format off
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
// clang-format on

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/hash.h"

// Reproducible random numbers (xorshift64*, the same on every run and platform). A file picks its
// own start by defining TL_TEST_RNG_SEED before including this header.
#ifndef TL_TEST_RNG_SEED
#define TL_TEST_RNG_SEED 0x9E3779B97F4A7C15ull
#endif
static inline uint32_t tl_test_rnd_u32(void)
{
    static uint64_t s = TL_TEST_RNG_SEED;
    return (uint32_t)(tl_xorshift64s(&s) >> 32);
}

// Uniform in [-1, 1).
static inline float tl_test_rnd_f(void)
{
    return (float)((double)tl_test_rnd_u32() / 2147483648.0 - 1.0);
}

// Path of a file in the shared test-data folder (static buffer; copy it to keep two).
static inline const char *tl_test_shared(const char *rel)
{
    static char buf[4096];
    const char *root = getenv("TL_SHARED");
    snprintf(buf, sizeof(buf), "%s/%s", root && *root ? root : "../shared", rel);
    return buf;
}

// A fresh temporary file path for this test binary (caller unlinks it).
static inline const char *tl_test_tmpfile(const char *tag)
{
    static char buf[256];
    static int counter;
    snprintf(buf, sizeof(buf), "/tmp/tl_test_%d_%d_%s", (int)getpid(), counter++, tag);
    return buf;
}

// Float comparison with a message naming the index.
#define TL_ASSERT_NEAR(a, b, tol, idx)                                                             \
    do {                                                                                           \
        double a_ = (a), b_ = (b);                                                                 \
        if (!(fabs(a_ - b_) <= (tol))) fail_msg("index %lld: %.9g vs %.9g (tol %g)",               \
                                                (long long)(idx), a_, b_, (double)(tol));          \
    } while (0)

#define TL_TEST_MAIN(...)                                                                          \
    int main(void)                                                                                 \
    {                                                                                              \
        const struct CMUnitTest tests_[] = {__VA_ARGS__};                                          \
        const char *filter_ = getenv("TL_TEST_FILTER");                                            \
        if (filter_ && *filter_) cmocka_set_test_filter(filter_);                                 \
        return cmocka_run_group_tests(tests_, NULL, NULL);                                         \
    }

#endif
