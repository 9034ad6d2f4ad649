/*
 * Fork-join thread pool. A run is published by bumping `generation` (release); workers that
 * see the new generation run their share and bump `n_done`. The caller waits by spinning on
 * n_done. Workers that saw no work for SPIN_ITERS polls sleep on `wake` (the caller broadcasts
 * under `mu` after bumping the generation, so no wake-up is lost).
 */
#include "core/pool.h"

#include "core/alloc.h"
#include "core/error.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

enum { SPIN_ITERS = 1 << 16 };

struct worker {
    struct tl_pool *pool; // borrowed
    int ith;
    pthread_t thread;
};

struct tl_pool {
    int n_threads;
    struct worker *workers; // owned, n_threads - 1
    tl_pool_fn fn;          // current run; written before generation is bumped
    void *arg;
    atomic_uint generation;
    atomic_int n_done;
    atomic_bool stop;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    int n_sleeping; // guarded by mu
};

static void *worker_main(void *p)
{
    struct worker *w = p;
    struct tl_pool *pool = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned gen = atomic_load_explicit(&pool->generation, memory_order_acquire);
        for (int i = 0; gen == seen && i < SPIN_ITERS; i++) {
            cpu_relax();
            gen = atomic_load_explicit(&pool->generation, memory_order_acquire);
        }
        if (gen == seen) {
            pthread_mutex_lock(&pool->mu);
            pool->n_sleeping++;
            while ((gen = atomic_load_explicit(&pool->generation, memory_order_acquire)) == seen)
                pthread_cond_wait(&pool->wake, &pool->mu);
            pool->n_sleeping--;
            pthread_mutex_unlock(&pool->mu);
        }
        seen = gen;
        if (atomic_load_explicit(&pool->stop, memory_order_acquire)) break;
        pool->fn(pool->arg, w->ith, pool->n_threads);
        atomic_fetch_add_explicit(&pool->n_done, 1, memory_order_release);
    }
    return NULL;
}

static void publish(struct tl_pool *pool)
{
    atomic_fetch_add_explicit(&pool->generation, 1, memory_order_release);
    pthread_mutex_lock(&pool->mu);
    if (pool->n_sleeping) pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);
}

struct tl_pool *tl_pool_create(int n_threads)
{
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    struct tl_pool *pool = tl_calloc_array(1, sizeof(*pool));
    if (!pool) goto fail;
    pool->n_threads = n_threads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->wake, NULL);
    if (n_threads > 1) {
        pool->workers = tl_calloc_array((size_t)n_threads - 1, sizeof(*pool->workers));
        if (!pool->workers) goto fail_pool;
        for (int i = 0; i < n_threads - 1; i++) {
            pool->workers[i].pool = pool;
            pool->workers[i].ith = i + 1;
            if (pthread_create(&pool->workers[i].thread, NULL, worker_main, &pool->workers[i])) {
                pool->n_threads = i + 1; // workers 0..i-1 exist: stop and join them
                tl_pool_destroy(pool);
                tl__errorf(TL_ERR_NOMEM, "cannot start thread %d of %d", i + 1, n_threads);
                return NULL;
            }
        }
    }
    return pool;
fail_pool:
    free(pool);
fail:
    tl__errorf(TL_ERR_NOMEM, "out of memory creating a pool of %d threads", n_threads);
    return NULL;
}

void tl_pool_destroy(struct tl_pool *pool)
{
    if (!pool) return;
    atomic_store_explicit(&pool->stop, true, memory_order_release);
    publish(pool);
    for (int i = 0; i < pool->n_threads - 1; i++) pthread_join(pool->workers[i].thread, NULL);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->wake);
    free(pool->workers);
    free(pool);
}

int tl_pool_size(const struct tl_pool *pool)
{
    return pool ? pool->n_threads : 1;
}

void tl_pool_run(struct tl_pool *pool, tl_pool_fn fn, void *arg)
{
    if (!pool || pool->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->arg = arg;
    atomic_store_explicit(&pool->n_done, 0, memory_order_relaxed);
    publish(pool);
    fn(arg, 0, pool->n_threads);
    while (atomic_load_explicit(&pool->n_done, memory_order_acquire) < pool->n_threads - 1)
        cpu_relax();
}
