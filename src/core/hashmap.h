/*
 * tl_hmap: the project's one hash table, from 64-bit keys to 64-bit values. Open addressing
 * with linear probing over one array of {key, value} slots, kept at most half full, and
 * backward-shift deletion (no tombstones, so lookups never slow down after many deletions).
 *
 * Keys. Key 0 marks an empty slot and cannot be stored. Integer keys go in as they are (the
 * table picks a slot by Fibonacci hashing, so sequential ids spread out). String keys go
 * in as tl_hash_bytes(str) (never 0) with the value naming the caller's entry; because two
 * strings may share a hash, such tables insert with tl_hmap_add and look up with tl_hmap_next,
 * comparing the caller's own string for each entry of that hash (see vocab.c and gguf.c).
 *
 * Users: the engine's request-id map, the GGUF key and tensor-name indexes, the vocabulary's
 * piece index and BPE merge table, and the grammar's tables (rule names, the parse-stack sets'
 * dedupe index, the mask walk's interned sets and transitions, the mask cache). The KV cache's
 * prefix table is not one (it chains through the blocks themselves and never allocates;
 * bench/bench_hash.c measures both).
 *
 * Sets: a set of integers is a table whose values go unused; a set of contents (interning
 * stacks, sets of stacks) keys each entry by its content's hash (tl_hash_u32s, tl_hash_bytes)
 * with the entry's index as value, added with tl_hmap_add and found with tl_hmap_next plus the
 * caller's own comparison, exactly as for strings.
 *
 * Ownership and threads: the caller owns the struct (tl_hmap_init / tl_hmap_free); the table
 * owns its slot array. Not synchronized: one writer, or any number of readers of a table that
 * no longer changes.
 */
#ifndef TL_CORE_HASHMAP_H
#define TL_CORE_HASHMAP_H

#include <tokenloom.h>

#include "core/hash.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// tl_hmap_clear gives back the slots of a table bigger than this that is under 1/16 full.
#define TL_HMAP_SHRINK_CAP 1024

struct tl_hmap_slot {
    uint64_t key; // 0 = empty
    uint64_t val;
};

struct tl_hmap {
    struct tl_hmap_slot *slots; // owned; cap entries, NULL while cap == 0
    size_t cap;                 // 0 or a power of two >= 16
    size_t n;                   // entries stored (n * 2 <= cap)
};

// An empty table; allocates nothing. (A zero-filled struct tl_hmap is an empty table too.)
void tl_hmap_init(struct tl_hmap *m);
// Frees the slots and leaves an empty table (init state). NULL is a no-op.
void tl_hmap_free(struct tl_hmap *m);

// Empties the table (for a table refilled many times, e.g. once per walk): nothing to do when
// already empty, else one pass over the slots, which it keeps; except that a table of more than
// 1024 slots holding under 1/16 of that frees them (so a table that grew big once does not make
// every later small round pay for its size).
static inline void tl_hmap_clear(struct tl_hmap *m);

// Makes room for n entries in all, so that the next inserts up to n do not allocate.
tl_status tl_hmap_reserve(struct tl_hmap *m, size_t n) TL_WARN_UNUSED;

// Sets key's value, inserting the key if absent. TL_ERR_INVALID_ARG for key 0, TL_ERR_NOMEM when
// growing fails (the table is unchanged then).
tl_status tl_hmap_put(struct tl_hmap *m, uint64_t key, uint64_t val) TL_WARN_UNUSED;

// Inserts another entry for key even when key is present (for string tables keyed by hash).
// Inline while no growth is needed (the grammar's stack sets add on their hot path).
static inline tl_status tl_hmap_add(struct tl_hmap *m, uint64_t key, uint64_t val) TL_WARN_UNUSED;

// True when key is present; *val (if not NULL) gets its value (the first one for added keys).
static inline bool tl_hmap_get(const struct tl_hmap *m, uint64_t key, uint64_t *val);

// Walks the entries of key: start with *cursor = 0; each call that returns true sets *val to
// the next entry's value. The table must not change during the walk.
static inline bool tl_hmap_next(const struct tl_hmap *m, uint64_t key, size_t *cursor,
                                uint64_t *val);

// Removes one entry of key (the first); true when there was one.
bool tl_hmap_del(struct tl_hmap *m, uint64_t key);

// ---- inline lookups (they are on the tokenizer's hot path) -----------------------------------

// Home slot of key in a table of cap slots: Fibonacci hashing, the top log2(cap) bits of
// key * 2^64/phi. One multiply; every bit of the key reaches the top bits, so sequential ids
// spread out, and already-mixed string hashes lose nothing.
static inline size_t tl__hmap_home(uint64_t key, size_t cap)
{
    return (size_t)((key * TL_GOLDEN64) >> (64 - __builtin_ctzll((unsigned long long)cap)));
}

// Slot of the first entry of key at or after probe step *cursor (advancing *cursor past it),
// or SIZE_MAX when there is none.
static inline size_t tl__hmap_find(const struct tl_hmap *m, uint64_t key, size_t *cursor)
{
    if (!m->cap || !key) return SIZE_MAX;
    size_t mask = m->cap - 1, home = tl__hmap_home(key, m->cap);
    for (size_t step = *cursor; step <= mask; step++) {
        const struct tl_hmap_slot *s = &m->slots[(home + step) & mask];
        if (s->key == key) {
            *cursor = step + 1;
            return (home + step) & mask;
        }
        if (!s->key) break;
    }
    *cursor = m->cap;
    return SIZE_MAX;
}

// tl_hmap_clear's path for a table with entries or many slots.
void tl__hmap_clear_slow(struct tl_hmap *m);

// Inline for the common case, an empty table of few slots (a stack set cleared per byte).
static inline void tl_hmap_clear(struct tl_hmap *m)
{
    if (m->n || m->cap > TL_HMAP_SHRINK_CAP) tl__hmap_clear_slow(m);
}

// tl_hmap_add's path that grows the table or reports key 0.
tl_status tl__hmap_add_slow(struct tl_hmap *m, uint64_t key, uint64_t val) TL_WARN_UNUSED;

static inline tl_status tl_hmap_add(struct tl_hmap *m, uint64_t key, uint64_t val)
{
    if (!key || (m->n + 1) * 2 > m->cap) return tl__hmap_add_slow(m, key, val);
    size_t mask = m->cap - 1, j = tl__hmap_home(key, m->cap);
    while (m->slots[j].key)
        j = (j + 1) & mask;
    m->slots[j].key = key;
    m->slots[j].val = val;
    m->n++;
    return TL_OK;
}

static inline bool tl_hmap_get(const struct tl_hmap *m, uint64_t key, uint64_t *val)
{
    size_t cursor = 0, j = tl__hmap_find(m, key, &cursor);
    if (j == SIZE_MAX) return false;
    if (val) *val = m->slots[j].val;
    return true;
}

static inline bool tl_hmap_next(const struct tl_hmap *m, uint64_t key, size_t *cursor,
                                uint64_t *val)
{
    size_t j = tl__hmap_find(m, key, cursor);
    if (j == SIZE_MAX) return false;
    *val = m->slots[j].val;
    return true;
}

#endif
