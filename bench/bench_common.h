/*
 * What the kernel benchmarks (bench_kernels, bench_quants) share: a seeded RNG for weights and
 * activations, the two clocks, the streaming-read ceiling, and the timed matmul loop. Header
 * only: each bench program is one .c file.
 */
#ifndef TL_BENCH_COMMON_H
#define TL_BENCH_COMMON_H

#include "core/clock.h"
#include "core/hash.h"
#include "core/pool.h"
#include "kernels/ceilings.h"
#include "kernels/kernels.h"

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

static uint64_t rng = 88172645463325252ull;
// Uniform in [-1, 1), from core's xorshift64*.
static inline float rnd(void)
{
    return (float)(tl_xorshift64s_unit(&rng) * 2 - 1);
}

static inline double now_s(void)
{
    return (double)tl_time_us() * 1e-6;
}

// CPU time of the calling thread: with one thread it excludes time stolen by other processes.
static inline double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// ---- streaming-read ceiling ---------------------------------------------------------------------

// GB/s of a streaming read of buf on every thread of pool (kernels/ceilings.c, shared with the
// server's utilization gauges).
static inline double stream_read_gbs(struct tl_pool *pool, const void *buf, size_t bytes)
{
    return tl_ceiling_read_bytes_per_s(pool, buf, bytes) / 1e9;
}

// ---- timed matmul -------------------------------------------------------------------------------

// Seconds per tl_matmul call of w (whose data is pointed at each of `copies` copies of its bytes
// in arena, `stride` apart, in turn, so that cold weights stay cold) with n_tok tokens: the best
// of 5 rounds of at least min_s each. Other processes on the machine only slow a round down,
// so the minimum is the most repeatable estimate. cpu_clock: time with the thread's CPU clock
// (one thread: excludes stolen time), else the wall clock.
static inline double best_matmul_s(struct tl_pool *pool, struct tl_weight *w, char *arena,
                                   size_t stride, int copies, const float *x, int64_t n_tok,
                                   float *y, void *work, bool cpu_clock, double min_s)
{
    double (*clock_fn)(void) = cpu_clock ? thread_cpu_s : now_s;
    int copy = 0;
    double per = 1e30;
    for (int round = 0; round < 5; round++) {
        int calls = 0;
        double t0 = clock_fn(), el = 0;
        do {
            w->data = arena + (size_t)copy * stride;
            copy = (copy + 1) % copies;
            tl_matmul(pool, w, x, n_tok, y, work);
            calls++;
            el = clock_fn() - t0;
        } while (el < min_s || calls < 2);
        if (el / calls < per) per = el / calls;
    }
    return per;
}

#endif
