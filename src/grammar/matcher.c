/*
 * The grammar matcher: a request's parse state over a compiled grammar, one deduplicated set of
 * pushdown stacks (gset.c), advanced byte by byte as tokens are accepted. The masks of allowed
 * tokens are mask.c's.
 *
 * Thread model: a matcher belongs to one thread at a time; the grammar is shared read-only.
 */
#include "grammar/grammar_impl.h"

#include "core/alloc.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

struct tl_gmatcher *tl_gmatcher_create(struct tl_grammar *g)
{
    struct tl_gmatcher *m = tl_malloc(sizeof(*m));
    if (!m) goto nomem;
    memset(m, 0, sizeof(*m));
    m->scratch = tl_malloc_array(GSET_MAX_DEPTH + 1, sizeof(uint32_t));
    if (!m->scratch) {
        free(m);
        goto nomem;
    }
    m->g = tl_grammar_ref(g);
    tl__gset_start(g, &m->cur, m->scratch);
    return m;
nomem:
    tl__errorf(TL_ERR_NOMEM, "grammar: out of memory for a matcher");
    return NULL;
}

void tl_gmatcher_destroy(struct tl_gmatcher *m)
{
    if (!m) return;
    tl__gset_free(&m->cur);
    tl__gset_free(&m->tmp[0]);
    tl__gset_free(&m->tmp[1]);
    tl__gset_free(&m->one);
    for (size_t i = 0; i < m->n_levels; i++)
        tl__gset_free(&m->levels[i]);
    free(m->levels);
    tl__gmemo_free(m->memo);
    free(m->scratch);
    tl_grammar_unref(m->g);
    free(m);
}

bool tl_gmatcher_accept_bytes(struct tl_gmatcher *m, const char *bytes, size_t len)
{
    if (!len) return true;
    const struct gset *from = &m->cur;
    int k = 0;
    for (size_t i = 0; i < len; i++) {
        tl__gset_advance(m->g, from, (unsigned char)bytes[i], &m->tmp[k], m->scratch);
        if (!m->tmp[k].n && !(i + 1 == len && m->tmp[k].ended)) return false;
        from = &m->tmp[k];
        k ^= 1;
    }
    struct gset t = m->cur;
    m->cur = m->tmp[k ^ 1];
    m->tmp[k ^ 1] = t;
    return true;
}

bool tl_gmatcher_can_end(const struct tl_gmatcher *m)
{
    return m->cur.ended;
}
