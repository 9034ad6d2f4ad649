/*
 * The compile-time limit (TL_GRAMMAR_COMPILE_MAX_MS, tl_grammar_set_compile_limit_ms): a
 * per-thread deadline that tl_grammar_compile starts and the parsers, generators and checks
 * poll (tl__gcompile_over) from their loops.
 *
 * A leaf of src/grammar (core's clock and error only), so that the parsers and the builder can
 * poll the deadline without depending on the compiler that calls them.
 *
 * Thread model: the limit is one atomic; the deadline is per thread (a nested compile on the
 * same thread runs under its caller's deadline).
 */
#include "grammar/grammar_impl.h"

#include "core/clock.h"
#include "core/error.h"

static _Atomic int limit_ms = TL_GRAMMAR_COMPILE_MAX_MS;
static _Thread_local int64_t deadline_us; // 0: not timing
static _Thread_local unsigned over_ticks;
static _Thread_local bool over;

void tl_grammar_set_compile_limit_ms(int ms)
{
    limit_ms = ms < 1 ? 1 : ms;
}

static tl_status over_error(void)
{
    return tl__errorf(TL_ERR_INVALID_ARG,
                      "grammar: compiling took longer than %d ms (the limit): the grammar or "
                      "schema is too large or too complex",
                      (int)limit_ms);
}

bool tl__gcompile_over(void)
{
    if (!deadline_us) return false;
    if (over) return true;
    if ((++over_ticks & 63) != 0) return false;
    if (tl_time_us() < deadline_us) return false;
    over = true;
    over_error();
    return true;
}

bool tl__gcompile_begin(void)
{
    if (deadline_us) return false;
    deadline_us = tl_time_us() + (int64_t)limit_ms * 1000;
    over = false;
    over_ticks = 0;
    return true;
}

tl_status tl__gcompile_end(bool outer, tl_status rc)
{
    if (rc && over) rc = over_error(); // whatever failed after the deadline, it is the reason
    if (outer) deadline_us = 0;
    return rc;
}
