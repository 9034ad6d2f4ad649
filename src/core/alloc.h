/*
 * Allocation helpers: overflow-checked array allocation, cache-aligned allocation, and a fault
 * injection hook for tests (fail the Nth allocation from now). Every allocation of untrusted
 * size in the project goes through these so that a huge count fails cleanly instead of wrapping.
 */
#ifndef TL_CORE_ALLOC_H
#define TL_CORE_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// a*b into *out; false on overflow.
static inline bool tl_mul_size(size_t a, size_t b, size_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}
// a+b into *out; false on overflow.
static inline bool tl_add_size(size_t a, size_t b, size_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

// malloc/calloc/realloc of n elements of `size` bytes; NULL on overflow or failure (and when a
// fault is injected). Free with free().
void *tl_malloc(size_t size);
void *tl_malloc_array(size_t n, size_t size);
void *tl_calloc_array(size_t n, size_t size);
void *tl_realloc_array(void *p, size_t n, size_t size);
char *tl_strndup(const char *s, size_t n);

// 64-byte aligned allocation (SIMD loads, no false sharing). Free with tl_aligned_free.
void *tl_aligned_alloc(size_t size);
void tl_aligned_free(void *p);
// As tl_aligned_alloc, for big arrays streamed every step (the KV pool, packed weights): from
// 4 MiB on, aligned to 2 MiB and advised as transparent huge pages (MADV_HUGEPAGE; Linux's
// default THP mode is "madvise", so without the advice they get 4 KiB pages). Free with
// tl_aligned_free.
void *tl_aligned_alloc_large(size_t size);

// Test hook: the nth allocation from now (1 = the next one) fails; 0 disables.
void tl_alloc_fail_after(long n);

// Grows *buf (of *cap elements of `size` bytes) to hold at least `need` elements, doubling.
// Returns false (leaving *buf intact) on overflow or allocation failure.
bool tl_grow(void **buf, size_t *cap, size_t need, size_t size);

#endif
