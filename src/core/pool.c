/*
 * Fork-join thread pool. A run is published by bumping `generation` (release); workers that
 * see the new generation run their share and bump `n_done`; the caller runs share 0 and then
 * waits for n_done to reach n_threads - 1.
 *
 * Waiting is spin-then-sleep on both sides. Ops of a forward pass follow each other within
 * microseconds, so a short spin catches the next op without a system call. But these machines
 * are shared: when another process holds the other core, a spinning thread only burns the time
 * slice the thread it waits for needs (measured: 2 threads spinning unboundedly ran 10x slower
 * than 1 thread under load). So after SPIN_ITERS polls a worker sleeps on `wake` and the caller
 * sleeps on `done`; whoever completes the condition signals under `mu` when the other side has
 * announced that it sleeps (seq_cst flags, so either the waiter sees the condition or the
 * signaller sees the waiter).
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

// About 20-100 us of polling depending on the CPU's pause latency.
enum { SPIN_ITERS = 2000 };

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
    atomic_int n_sleeping;       // workers asleep (or about to sleep) on wake
    atomic_bool caller_sleeping; // the caller is asleep (or about to sleep) on done
    pthread_mutex_t mu;
    pthread_cond_t wake; // workers wait here for a new generation
    pthread_cond_t done; // the caller waits here for n_done
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
            atomic_fetch_add(&pool->n_sleeping, 1);
            while ((gen = atomic_load(&pool->generation)) == seen)
                pthread_cond_wait(&pool->wake, &pool->mu);
            atomic_fetch_sub(&pool->n_sleeping, 1);
            pthread_mutex_unlock(&pool->mu);
        }
        seen = gen;
        if (atomic_load_explicit(&pool->stop, memory_order_acquire)) break;
        pool->fn(pool->arg, w->ith, pool->n_threads);
        if (atomic_fetch_add(&pool->n_done, 1) + 1 == pool->n_threads - 1 &&
            atomic_load(&pool->caller_sleeping)) {
            pthread_mutex_lock(&pool->mu);
            pthread_cond_signal(&pool->done);
            pthread_mutex_unlock(&pool->mu);
        }
    }
    return NULL;
}

static void publish(struct tl_pool *pool)
{
    atomic_fetch_add(&pool->generation, 1);
    if (atomic_load(&pool->n_sleeping)) {
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->wake);
        pthread_mutex_unlock(&pool->mu);
    }
}

static void wait_done(struct tl_pool *pool)
{
    int target = pool->n_threads - 1;
    for (int i = 0; i < SPIN_ITERS; i++) {
        if (atomic_load_explicit(&pool->n_done, memory_order_acquire) == target) return;
        cpu_relax();
    }
    pthread_mutex_lock(&pool->mu);
    atomic_store(&pool->caller_sleeping, true);
    while (atomic_load(&pool->n_done) != target)
        pthread_cond_wait(&pool->done, &pool->mu);
    atomic_store(&pool->caller_sleeping, false);
    pthread_mutex_unlock(&pool->mu);
}

struct tl_pool *tl_pool_create(int n_threads)
{
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    struct tl_pool *pool = tl_calloc_array(1, sizeof(*pool));
    if (!pool) goto out_nomem;
    pool->n_threads = n_threads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->done, NULL);
    if (n_threads > 1) {
        pool->workers = tl_calloc_array((size_t)n_threads - 1, sizeof(*pool->workers));
        if (!pool->workers) goto out_free_pool;
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
out_free_pool:
    free(pool);
out_nomem:
    tl__errorf(TL_ERR_NOMEM, "out of memory creating a pool of %d threads", n_threads);
    return NULL;
}

void tl_pool_destroy(struct tl_pool *pool)
{
    if (!pool) return;
    atomic_store(&pool->stop, true);
    atomic_fetch_add(&pool->generation, 1);
    pthread_mutex_lock(&pool->mu);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < pool->n_threads - 1; i++)
        pthread_join(pool->workers[i].thread, NULL);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->wake);
    pthread_cond_destroy(&pool->done);
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
    wait_done(pool);
}
