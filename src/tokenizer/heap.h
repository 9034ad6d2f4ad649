/*
 * A typed binary min-heap for the merge encoders (bpe.c, spm.c), written once.
 *
 * TL__HEAP_DEFINE(NAME, T, BEFORE) defines, as file-local statics:
 *   struct NAME { T *v; size_t n, cap; }      // v owned (free(h.v)); zero-initialise to start
 *   bool NAME_push(struct NAME *h, T x)      // false when out of memory, h unchanged
 *   T NAME_pop(struct NAME *h)               // the element for which BEFORE holds first; n > 0
 * where BEFORE(const T *a, const T *b) says a pops before b (ties must be broken by the caller's
 * order so that encoding is deterministic). Single-threaded: each heap belongs to one call.
 */
#ifndef TL_TOKENIZER_HEAP_H
#define TL_TOKENIZER_HEAP_H

#include "core/alloc.h"

#include <stdbool.h>
#include <stddef.h>

#define TL__HEAP_DEFINE(NAME, T, BEFORE)                                                           \
    struct NAME {                                                                                  \
        T *v; /* owned */                                                                          \
        size_t n, cap;                                                                             \
    };                                                                                             \
                                                                                                   \
    static bool NAME##_push(struct NAME *h, T x)                                                   \
    {                                                                                              \
        if (!tl_grow((void **)&h->v, &h->cap, h->n + 1, sizeof(x))) return false;                  \
        size_t i = h->n++;                                                                         \
        while (i > 0) {                                                                            \
            size_t up = (i - 1) / 2;                                                               \
            if (!BEFORE(&x, &h->v[up])) break;                                                     \
            h->v[i] = h->v[up];                                                                    \
            i = up;                                                                                \
        }                                                                                          \
        h->v[i] = x;                                                                               \
        return true;                                                                               \
    }                                                                                              \
                                                                                                   \
    static T NAME##_pop(struct NAME *h)                                                            \
    {                                                                                              \
        T top = h->v[0], last = h->v[--h->n];                                                      \
        size_t i = 0;                                                                              \
        for (;;) {                                                                                 \
            size_t c = 2 * i + 1;                                                                  \
            if (c >= h->n) break;                                                                  \
            if (c + 1 < h->n && BEFORE(&h->v[c + 1], &h->v[c])) c++;                               \
            if (!BEFORE(&h->v[c], &last)) break;                                                   \
            h->v[i] = h->v[c];                                                                     \
            i = c;                                                                                 \
        }                                                                                          \
        if (h->n) h->v[i] = last;                                                                  \
        return top;                                                                                \
    }

#endif
