/*
 * A compiled grammar's lifetime: the reference count every holder (the LRU, the compile
 * worker's jobs, each matcher) takes and drops; the last drop frees the grammar with its mask
 * caches.
 *
 * A leaf of src/grammar (it needs only mask_cache.c, which needs nothing of the grammar's), so
 * that the builder, the compiler and the matcher can all hold grammars without calling each
 * other.
 *
 * Thread model: ref and unref are atomic; any thread may drop the last reference once no other
 * holder uses the grammar.
 */
#include "grammar/grammar_impl.h"

#include <stdlib.h>

struct tl_grammar *tl_grammar_ref(struct tl_grammar *g)
{
    if (g) atomic_fetch_add(&g->refs, 1);
    return g;
}

void tl_grammar_unref(struct tl_grammar *g)
{
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    tl__gmask_cache_free(g->cache);
    pthread_mutex_destroy(&g->mu);
    free(g->elems);
    free(g->alt_start);
    free(g->rule_alt0);
    free(g->sets);
    free(g);
}
