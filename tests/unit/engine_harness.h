/*
 * Shared scaffolding of the engine tests that run a real model (test_engine_model,
 * test_engine_logprobs, test_engine_kvq8): create an engine or fail the test, step it until
 * every request is done while checking the engine's invariants after each step, and a small
 * seeded RNG for random companion requests (each test file keeps its own state, so the
 * random requests of one file do not depend on the order the others run in).
 */
#ifndef TL_ENGINE_HARNESS_H
#define TL_ENGINE_HARNESS_H

#include "tl_test.h"

#include "engine/engine_impl.h"

#include <tokenloom.h>

static inline tl_engine *harness_engine(const tl_model *m, const struct tl_engine_config *c)
{
    tl_engine *e = NULL;
    if (tl_engine_create(m, c, &e)) fail_msg("create: %s", tl_last_error());
    return e;
}

// Steps e until nothing is pending, checking the KV/block invariants after every step.
static inline void harness_run_all(tl_engine *e)
{
    int64_t n = 1;
    while (n > 0) {
        if (tl_engine_step(e, &n)) fail_msg("step: %s", tl_last_error());
        if (tl__engine_check(e)) fail_msg("%s", tl_last_error());
    }
}

// A number in [0, n) from the project's xorshift64* (core/hash.h) with state *s (never 0).
static inline uint32_t harness_rnd(uint64_t *s, uint32_t n)
{
    return (uint32_t)(tl_xorshift64s(s) >> 32) % n;
}

#endif
