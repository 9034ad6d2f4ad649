/*
 * A persistent thread pool for data-parallel kernels. tl_pool_run(fn) runs fn(arg, ith, nth) on
 * every thread of the pool (the caller is thread 0) and returns when all have finished, so each
 * op is one fork-join. Workers spin briefly between runs (ops follow each other within
 * microseconds during a forward pass) and then sleep on a condition variable.
 *
 * Thread model: one thread at a time calls tl_pool_run (the engine thread). Kernels split work
 * by output rows or heads with tl_pool_range, never by splitting one reduction, so results do
 * not depend on the thread count.
 */
#ifndef TL_CORE_POOL_H
#define TL_CORE_POOL_H

#include <stdint.h>

struct tl_pool;
typedef void (*tl_pool_fn)(void *arg, int ith, int nth);

// A pool of n_threads threads in all, counting the caller (n_threads - 1 workers are started).
// n_threads <= 0 means the number of online CPUs. NULL on failure (error set).
struct tl_pool *tl_pool_create(int n_threads);
void tl_pool_destroy(struct tl_pool *pool); // NULL is a no-op

// Total threads (>= 1). A NULL pool counts as 1.
int tl_pool_size(const struct tl_pool *pool);

// Runs fn(arg, ith, nth) on all nth threads; returns when every call has returned. A NULL pool
// runs fn(arg, 0, 1) inline.
void tl_pool_run(struct tl_pool *pool, tl_pool_fn fn, void *arg);

// The share [*begin, *end) of n items for thread ith of nth, in chunks aligned to `align`.
static inline void tl_pool_range(int64_t n, int64_t align, int ith, int nth, int64_t *begin,
                                 int64_t *end)
{
    int64_t n_chunks = (n + align - 1) / align;
    int64_t per = n_chunks / nth, extra = n_chunks % nth;
    int64_t c0 = ith * per + (ith < extra ? ith : extra);
    int64_t c1 = c0 + per + (ith < extra ? 1 : 0);
    *begin = c0 * align < n ? c0 * align : n;
    *end = c1 * align < n ? c1 * align : n;
}

#endif
