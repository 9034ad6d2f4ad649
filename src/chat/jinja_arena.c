/*
 * The Jinja engine's memory: the arena every parse and render allocates from (see jinja_impl.h
 * for who owns which arena). Allocation is a bump pointer over malloc'ed chunks; an allocation
 * past the arena's limit, or a failed malloc, writes the message to the arena's error buffer and
 * longjmps to the entry point, so callers never check for NULL.
 *
 * Chunks of finished arenas are cached per thread and reused (see below). Not thread-safe per
 * arena; distinct arenas are independent, and the chunk cache is per thread.
 */
#include "chat/jinja_impl.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- arena

struct jarena_chunk {
    struct jarena_chunk *next;
    size_t size, used;
    _Alignas(16) char data[];
};

void tl__jarena_init(struct jarena *a, size_t max_bytes)
{
    memset(a, 0, sizeof(*a));
    a->max_bytes = max_bytes;
}

// Chunks of finished arenas are kept per thread (up to 16 MiB) and reused by the next parse or
// render on that thread: fresh memory costs a page fault per 4 KiB, which measured as most of a
// render's time on a virtual machine.
// The cache is a pthread key so that a thread's chunks are freed when it exits.
#define CHUNK_CACHE_MAX ((size_t)16 << 20)
struct chunk_cache {
    struct jarena_chunk *head;
    size_t bytes;
};
static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;

static void cache_destroy(void *p)
{
    struct chunk_cache *cc = p;
    while (cc->head) {
        struct jarena_chunk *next = cc->head->next;
        free(cc->head);
        cc->head = next;
    }
    free(cc);
}

static void cache_key_create(void)
{
    if (pthread_key_create(&cache_key, cache_destroy)) abort();
}

static struct chunk_cache *thread_cache(void)
{
    pthread_once(&cache_once, cache_key_create);
    struct chunk_cache *cc = pthread_getspecific(cache_key);
    if (!cc && (cc = calloc(1, sizeof(*cc))) && pthread_setspecific(cache_key, cc)) {
        free(cc);
        cc = NULL;
    }
    return cc;
}

// A cached chunk of at least `need` bytes and at most 4x that, or NULL.
static struct jarena_chunk *cache_take(size_t need)
{
    struct chunk_cache *cc = thread_cache();
    for (struct jarena_chunk **pp = cc ? &cc->head : NULL; pp && *pp; pp = &(*pp)->next) {
        if ((*pp)->size >= need && (*pp)->size / 4 <= need) {
            struct jarena_chunk *c = *pp;
            *pp = c->next;
            cc->bytes -= c->size;
            return c;
        }
    }
    return NULL;
}

// Keeps c for reuse when the cache has room; frees it otherwise.
static void cache_put(struct jarena_chunk *c)
{
    struct chunk_cache *cc = thread_cache();
    if (cc && cc->bytes + c->size <= CHUNK_CACHE_MAX) {
        c->next = cc->head;
        cc->head = c;
        cc->bytes += c->size;
    } else {
        free(c);
    }
}

void tl__jarena_free(struct jarena *a)
{
    struct jarena_chunk *c = a->head;
    while (c) {
        struct jarena_chunk *next = c->next;
        cache_put(c);
        c = next;
    }
    a->head = NULL;
    a->used_bytes = 0;
}

void *tl__jarena_alloc_raw(struct jarena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    struct jarena_chunk *c = a->head;
    if (!c || c->size - c->used < n) {
        // Chunks grow with the arena (a quarter of what it holds, 32 KiB .. 4 MiB), so a big
        // render makes few allocations.
        size_t step = a->used_bytes / 4;
        step = step < 32768 ? 32768 : step > ((size_t)4 << 20) ? ((size_t)4 << 20) : step;
        size_t size = n > step ? n : step;
        struct jarena_chunk *cached = n <= ((size_t)1 << 40) ? cache_take(size) : NULL;
        if (cached) size = cached->size;
        if (n > ((size_t)1 << 40) || a->used_bytes + size > a->max_bytes ||
            !(c = cached ? cached : malloc(sizeof(*c) + size))) {
            if (cached) cache_put(cached);
            if (a->err && a->err_size)
                snprintf(a->err, a->err_size, "template used more than %zu bytes of memory",
                         a->max_bytes);
            longjmp(*a->on_fail, 1);
        }
        c->size = size;
        c->used = 0;
        a->used_bytes += size;
        if (a->head && n > step) { // a big block: keep filling the current chunk afterwards
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = a->head;
            a->head = c;
        }
    }
    void *p = c->data + c->used;
    c->used += n;
    return p;
}

void *tl__jarena_alloc(struct jarena *a, size_t n)
{
    void *p = tl__jarena_alloc_raw(a, n);
    memset(p, 0, n);
    return p;
}
