/*
 * The mask walk's memo (mask.c's walk over the vocabulary trie).
 *
 * Many trie paths lead to the same stack set (inside a JSON string, every plain character
 * does), so a walk interns the sets it meets and memoizes (set, byte) -> set: most nodes then
 * cost one lookup instead of an advance. The first MEMO_ROW_SETS sets of a walk get a dense
 * row of 256 transitions (one load per node, the common case: a walk meets a few dozen sets);
 * later ones, and every set of a small walk (where clearing rows would cost more than it
 * saves), use the hash table. The memo lives for one walk; it belongs to the
 * matcher (one thread at a time).
 *
 * Tables: interned sets are found by content (tl_hmap keyed by the set's word-wise FNV-1a
 * hash, ids as values); transitions past the dense rows are a tl_hmap from (id, byte). Both
 * are cleared per walk (tl_hmap_clear: nothing to do when empty, else one pass over the slots;
 * a table that grew big in an earlier walk is given back rather than cleared in full).
 *
 * Why the rows are not a tl_hmap too (the one exception to core's one table, listed in
 * docs/ARCHITECTURE.md): they are an array indexed by (set id, byte), no hashing at all, read
 * inline by the walk for each of the trie's ~57000 nodes on a cache miss: one load where a table
 * costs a hash, a probe and a key compare, and filled a whole byte class at a time.
 *
 * Thread model: a memo belongs to its matcher (one thread at a time).
 */
#include "grammar/grammar_impl.h"

#include "core/alloc.h"

#include <stdlib.h>
#include <string.h>

void tl__gmemo_free(struct gmemo *mm)
{
    if (!mm) return;
    for (size_t i = 0; i < mm->cap; i++)
        tl__gset_free(&mm->sets[i]);
    free(mm->sets);
    tl_hmap_free(&mm->set_index);
    tl_hmap_free(&mm->tr);
    free(mm->rows);
    tl__gset_free(&mm->tmp);
    free(mm);
}

void tl__gmemo_reset(struct gmemo *mm)
{
    mm->n = 0;
    tl_hmap_clear(&mm->set_index);
    tl_hmap_clear(&mm->tr);
}

// Nonzero; equal sets hash equal (the stacks' words, their offsets, the flags).
static uint64_t set_hash(const struct gset *s)
{
    uint64_t h = TL_FNV64_OFFSET ^ (s->n * 4 + (uint64_t)s->ended * 2 + s->overflow);
    h = tl_fnv1a64_u32(h, s->data, s->n_data);
    if (s->n) h = tl_fnv1a64_u32(h, s->off, s->n + 1);
    return h ? h : 1; // not mixed: see tl_hash_u32s
}

static bool set_equal(const struct gset *a, const struct gset *b)
{
    if (a->n != b->n || a->ended != b->ended || a->overflow != b->overflow ||
        a->n_data != b->n_data)
        return false;
    if (!a->n) return true;
    return !memcmp(a->data, b->data, a->n_data * sizeof(uint32_t)) &&
           !memcmp(a->off, b->off, (a->n + 1) * sizeof(uint32_t));
}

// The id of a set equal to s (a copy is interned if new); UINT32_MAX on allocation failure.
uint32_t tl__gmemo_intern(struct gmemo *mm, const struct gset *s)
{
    uint64_t h = set_hash(s), id;
    for (size_t cursor = 0; tl_hmap_next(&mm->set_index, h, &cursor, &id);)
        if (set_equal(&mm->sets[id], s)) return (uint32_t)id;
    if (mm->n == mm->cap) {
        size_t nc = mm->cap ? mm->cap * 2 : 64;
        struct gset *ns = tl_realloc_array(mm->sets, nc, sizeof(*ns));
        if (!ns) return UINT32_MAX;
        memset(ns + mm->cap, 0, (nc - mm->cap) * sizeof(*ns));
        mm->sets = ns;
        mm->cap = nc;
    }
    if (!tl__gset_copy(&mm->sets[mm->n], s)) return UINT32_MAX;
    if (mm->use_rows && mm->n < MEMO_ROW_SETS) {
        if (mm->n >= mm->n_rows) {
            size_t nr = mm->n_rows ? mm->n_rows * 2 : 16;
            uint32_t *r = tl_realloc_array(mm->rows, nr * 256, sizeof(uint32_t));
            if (!r) return UINT32_MAX;
            mm->rows = r;
            mm->n_rows = nr;
        }
        memset(mm->rows + mm->n * 256, 0, 256 * sizeof(uint32_t));
    }
    if (tl_hmap_add(&mm->set_index, h, mm->n)) return UINT32_MAX;
    return (uint32_t)mm->n++;
}

// Bytes that the tops of s's stacks accept exactly as they accept byte lead to the same set
// (advancing tests the byte only against the tops): fills their row entries with val too, so
// a set costs one advance per byte class instead of one per byte. Sets of more than 64 stacks
// are left to the per-byte path.
static void fill_byte_class(const struct tl_grammar *g, const struct gset *s, unsigned byte,
                            uint32_t *row, uint32_t val)
{
    if (s->n > 64) return;
    const struct gbyteset *tops[64];
    uint64_t want = 0;
    for (size_t i = 0; i < s->n; i++) {
        tops[i] = &g->sets[GE_ARG(g->elems[s->data[s->off[i + 1] - 1]])];
        want |= (uint64_t)gbyteset_has(tops[i], byte) << i;
    }
    for (unsigned b = 0; b < 256; b++) {
        if (row[b]) continue;
        uint64_t got = 0;
        for (size_t i = 0; i < s->n; i++)
            got |= (uint64_t)gbyteset_has(tops[i], b) << i;
        if (got == want) row[b] = val;
    }
}

// The id of set id after byte; UINT32_MAX on allocation failure.
uint32_t tl__gmemo_transition(struct tl_gmatcher *m, struct gmemo *mm, uint32_t id, unsigned byte)
{
    if (mm->use_rows && id < MEMO_ROW_SETS) {
        if (mm->rows[(size_t)id * 256 + byte]) return mm->rows[(size_t)id * 256 + byte] - 1;
        tl__gset_advance(m->g, &mm->sets[id], byte, &mm->tmp, m->scratch);
        uint32_t to = tl__gmemo_intern(mm, &mm->tmp);
        if (to == UINT32_MAX) return to;
        uint32_t *row = mm->rows + (size_t)id * 256; // after intern: it may move the rows
        row[byte] = to + 1;
        fill_byte_class(m->g, &mm->sets[id], byte, row, to + 1);
        return to;
    }
    uint64_t key = ((uint64_t)id << 8 | byte) + 1, to;
    if (tl_hmap_get(&mm->tr, key, &to)) return (uint32_t)to;
    tl__gset_advance(m->g, &mm->sets[id], byte, &mm->tmp, m->scratch);
    to = tl__gmemo_intern(mm, &mm->tmp);
    // Absent (just looked up): add, which is put without the search for an entry to replace.
    if (to == UINT32_MAX || tl_hmap_add(&mm->tr, key, to)) return UINT32_MAX;
    return (uint32_t)to;
}
