/*
 * A short deterministic run of the request-parser fuzzer (tests/fuzz/fuzz_openai.c) in
 * `make test`: 20000 mutated bodies per seed for three fixed seeds, each parsed as a completions
 * and a chat request, with every invariant the fuzzer checks. The long runs (millions of
 * bodies, under ASan) are done with the standalone driver; see the header of fuzz_openai.c.
 */
#include "tl_test.h"

#define TL_FUZZ_NO_MAIN
#include "../fuzz/fuzz_openai.c"

static void test_fuzz_request_parser(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 3; seed++) {
        long accepted = 0;
        assert_int_equal(fuzz_openai_run(seed, 20000, &accepted), 0);
        // The mutations must leave some bodies valid, or the accepted-path checks test nothing.
        assert_true(accepted > 500);
    }
}

TL_TEST_MAIN(cmocka_unit_test(test_fuzz_request_parser))
