/*
 * The per-grammar mask cache (see mask.c): for each vocabulary a grammar is used with, a table
 * from the top CTX_FRAMES frames of a stack to its entry (accepted tokens, uncertain subtrees).
 * The table is a tl_hmap keyed by the frames' word-wise FNV-1a hash (tl_hash_u32s) with the
 * entry's address as value; equal hashes are told apart by comparing the frames.
 *
 * A leaf of src/grammar (core only): grammar_ref.c frees the caches with the grammar, mask.c
 * fills them.
 *
 * Thread model: the caller holds g->mu around tl__gmask_cache_for, _find and _insert (and
 * _count takes it); entries are immutable once inserted and freed only with the grammar.
 */
#include "grammar/grammar_impl.h"

#include "core/alloc.h"

#include <stdlib.h>
#include <string.h>

#define CACHE_MAX_BYTES ((size_t)16 << 20) // per grammar and vocabulary
#define CACHE_MAX_VOCABS 4                 // vocabularies a grammar keeps caches for

void tl__gentry_free(struct gentry *e)
{
    if (!e) return;
    free(e->bits);
    free(e->unc);
    free(e);
}

void tl__gmask_cache_free(struct gmask_cache *c)
{
    while (c) {
        struct gmask_cache *next = c->next;
        for (size_t i = 0; i < c->index.cap; i++)
            if (c->index.slots[i].key)
                tl__gentry_free((struct gentry *)(uintptr_t)c->index.slots[i].val);
        tl_hmap_free(&c->index);
        free(c);
        c = next;
    }
}

// The grammar's cache for vocabulary vocab_uid, created on first use (g->mu held). NULL when the
// grammar already has caches for CACHE_MAX_VOCABS other vocabularies (masks are then computed
// without caching: entries handed out are never freed before the grammar, so a cache is never
// replaced) or on allocation failure.
struct gmask_cache *tl__gmask_cache_for(struct tl_grammar *g, uint64_t vocab_uid)
{
    int n = 0;
    for (struct gmask_cache *c = g->cache; c; c = c->next, n++)
        if (c->vocab_uid == vocab_uid) return c;
    if (n >= CACHE_MAX_VOCABS) return NULL;
    struct gmask_cache *c = tl_malloc(sizeof(*c));
    if (!c) return NULL;
    memset(c, 0, sizeof(*c));
    c->vocab_uid = vocab_uid;
    c->next = g->cache;
    g->cache = c;
    return c;
}

// Nonzero; the key's frames, its length and whether it is the whole stack.
static inline uint64_t key_hash(const uint32_t *k, size_t n, bool full)
{
    return tl_hash_u32s(k, n, n * 2 + full);
}

struct gentry *tl__gmask_cache_find(struct gmask_cache *c, const uint32_t *k, size_t n, bool full)
{
    uint64_t p;
    for (size_t cursor = 0; tl_hmap_next(&c->index, key_hash(k, n, full), &cursor, &p);) {
        struct gentry *e = (struct gentry *)(uintptr_t)p;
        if (e->n_key == n && e->full == full && !memcmp(e->key, k, n * sizeof(uint32_t))) return e;
    }
    return NULL;
}

bool tl__gmask_cache_insert(struct gmask_cache *c, struct gentry *e, size_t bytes)
{
    if (c->bytes + bytes > CACHE_MAX_BYTES) return false;
    if (tl_hmap_add(&c->index, key_hash(e->key, e->n_key, e->full), (uintptr_t)e)) return false;
    c->bytes += bytes;
    return true;
}

size_t tl__gmask_cache_count(struct tl_grammar *g, uint64_t vocab_uid)
{
    size_t n = 0;
    pthread_mutex_lock(&g->mu);
    for (struct gmask_cache *c = g->cache; c; c = c->next)
        if (c->vocab_uid == vocab_uid) n = c->index.n;
    pthread_mutex_unlock(&g->mu);
    return n;
}
