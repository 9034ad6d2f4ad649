/*
 * Stack sets, the grammar matcher's state: a request's parse state is a set of pushdown stacks
 * over the compiled grammar (every stack's top is a byte set to read next; below it the return
 * addresses), kept deduplicated so ambiguity does not multiply them. Reading a byte keeps the
 * stacks whose top accepts it and expands each successor until it again reads a byte: a rule
 * call pushes its return address (not when the call is the last element of its alternative: a
 * tail call, so right recursion such as x* keeps the stack flat), the end of an alternative
 * pops. Termination is guaranteed by the builder's left-recursion check; bounds on stacks,
 * depth and expansion work (GSET_MAX_*) turn pathological grammars into an incomplete set that
 * is reported, never a hang.
 *
 * A leaf of src/grammar: it reads a compiled grammar's elements and needs nothing else of the
 * grammar's files (the matcher, the mask walk and the compiler's start check all use it).
 *
 * Thread model: a set belongs to one thread at a time; the grammar is shared read-only.
 */
#include "grammar/grammar_impl.h"

#include "core/alloc.h"

#include <stdlib.h>
#include <string.h>

#define EXPAND_MAX_WORK 50000

void tl__gset_clear(struct gset *s)
{
    s->n = 0;
    s->n_data = 0;
    s->ended = false;
    s->overflow = false;
    tl_hmap_clear(&s->index);
}

void tl__gset_free(struct gset *s)
{
    free(s->data);
    free(s->off);
    tl_hmap_free(&s->index);
    memset(s, 0, sizeof(*s));
}

static inline uint64_t stack_hash(const uint32_t *f, size_t n)
{
    return tl_hash_u32s(f, n, n);
}

// Indexes every stack of s (after a copy, which leaves the index empty). False on failure.
static bool reindex(struct gset *s)
{
    tl_hmap_clear(&s->index);
    if (tl_hmap_reserve(&s->index, s->n + 1)) return false;
    for (size_t i = 0; i < s->n; i++)
        if (tl_hmap_add(&s->index, stack_hash(s->data + s->off[i], s->off[i + 1] - s->off[i]), i))
            return false;
    return true;
}

// Adds stack f[0..n) unless present; false on allocation failure or past the bound.
static bool gset_add(struct gset *s, const uint32_t *f, size_t n)
{
    if (s->n + 1 > GSET_MAX_STACKS) {
        s->overflow = true;
        return false;
    }
    if (s->index.n != s->n && !reindex(s)) {
        s->overflow = true;
        return false;
    }
    uint64_t h = stack_hash(f, n), i;
    for (size_t cursor = 0; tl_hmap_next(&s->index, h, &cursor, &i);) {
        size_t len = s->off[i + 1] - s->off[i];
        if (len == n && !memcmp(s->data + s->off[i], f, n * sizeof(uint32_t))) return true;
    }
    if (!tl_grow((void **)&s->data, &s->cap_data, s->n_data + n, sizeof(uint32_t)) ||
        !tl_grow((void **)&s->off, &s->cap_off, s->n + 2, sizeof(uint32_t)) ||
        tl_hmap_add(&s->index, h, s->n)) {
        s->overflow = true;
        return false;
    }
    if (s->n == 0) s->off[0] = 0;
    memcpy(s->data + s->n_data, f, n * sizeof(uint32_t));
    s->n_data += n;
    s->off[s->n + 1] = (uint32_t)s->n_data;
    s->n++;
    return true;
}

// A plain copy: the stacks are distinct already, so dst's index is left empty and built only
// if a stack is ever added to dst (the memo's interned sets never get one).
bool tl__gset_copy(struct gset *dst, const struct gset *src)
{
    tl__gset_clear(dst);
    if (src->n && (!tl_grow((void **)&dst->data, &dst->cap_data, src->n_data, sizeof(uint32_t)) ||
                   !tl_grow((void **)&dst->off, &dst->cap_off, src->n + 1, sizeof(uint32_t))))
        return false;
    if (src->n) {
        memcpy(dst->data, src->data, src->n_data * sizeof(uint32_t));
        memcpy(dst->off, src->off, (src->n + 1) * sizeof(uint32_t));
    }
    dst->n = src->n;
    dst->n_data = src->n_data;
    dst->ended = src->ended;
    dst->overflow = src->overflow;
    return true;
}

struct expander {
    const struct tl_grammar *g;
    struct gset *out;
    uint32_t *stk; // (GSET_MAX_DEPTH + 1)
    long work;
};

// Expands the frame at pos with return addresses stk[0..depth) until every path reads a byte.
static void expand(struct expander *x, size_t depth, uint32_t pos)
{
    if (++x->work > EXPAND_MAX_WORK) {
        x->out->overflow = true;
        return;
    }
    const struct tl_grammar *g = x->g;
    uint32_t e = g->elems[pos];
    switch (GE_KIND(e)) {
    case GE_END:
        if (depth == 0) {
            x->out->ended = true;
            return;
        }
        expand(x, depth - 1, x->stk[depth - 1]);
        return;
    case GE_BYTES: {
        uint32_t saved = x->stk[depth]; // a frame an enclosing path may still pop to
        x->stk[depth] = pos;
        gset_add(x->out, x->stk, depth + 1);
        x->stk[depth] = saved;
        return;
    }
    default: {
        uint32_t r = GE_ARG(e), ret = pos + 1;
        bool tail = GE_KIND(g->elems[ret]) == GE_END;
        uint32_t saved = 0;
        if (!tail) {
            if (depth >= GSET_MAX_DEPTH) {
                x->out->overflow = true;
                return;
            }
            saved = x->stk[depth];
            x->stk[depth] = ret;
        }
        for (uint32_t a = g->rule_alt0[r]; a < g->rule_alt0[r + 1]; a++)
            expand(x, tail ? depth : depth + 1, g->alt_start[a]);
        if (!tail) x->stk[depth] = saved;
        return;
    }
    }
}

void tl__gset_start(const struct tl_grammar *g, struct gset *out, uint32_t *scratch)
{
    tl__gset_clear(out);
    struct expander x = {g, out, scratch, 0};
    for (uint32_t a = g->rule_alt0[g->root]; a < g->rule_alt0[g->root + 1]; a++)
        expand(&x, 0, g->alt_start[a]);
}

void tl__gset_advance(const struct tl_grammar *g, const struct gset *in, unsigned byte,
                      struct gset *out, uint32_t *scratch)
{
    tl__gset_clear(out);
    out->overflow = in->overflow;
    struct expander x = {g, out, scratch, 0};
    for (size_t i = 0; i < in->n; i++) {
        const uint32_t *f = in->data + in->off[i];
        size_t n = in->off[i + 1] - in->off[i];
        uint32_t top = f[n - 1];
        if (!gbyteset_has(&g->sets[GE_ARG(g->elems[top])], byte)) continue;
        memcpy(scratch, f, (n - 1) * sizeof(uint32_t));
        expand(&x, n - 1, top + 1);
    }
}

void tl__gset_from_stack(const struct tl_grammar *g, const uint32_t *frames, size_t n,
                         struct gset *out)
{
    (void)g;
    tl__gset_clear(out);
    gset_add(out, frames, n);
}
