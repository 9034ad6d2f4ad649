/*
 * tl_hmap (see hashmap.h): open addressing, linear probing, load at most 1/2, backward-shift
 * deletion.
 *
 * Why this shape: every table in the project maps a small key (an id, a pair of ids, a string's
 * hash) to a small value, is read far more than written, and is at most a few hundred thousand
 * entries; one flat array of 16-byte slots makes a hit one cache miss and keeps the code short.
 * The home slot of a key is the top bits of key * 2^64/phi (tl__hmap_home in hashmap.h).
 *
 * Deletion shifts later members of the cluster back into the hole whenever their home slot is
 * not cyclically within (hole, k], so every entry stays reachable from its home without
 * tombstones: the invariant is "no empty slot between an entry's home and its slot".
 *
 * Threads: none of its own; see hashmap.h.
 */
#include "core/hashmap.h"

#include "core/alloc.h"
#include "core/error.h"
#include "core/hash.h"

#include <stdlib.h>
#include <string.h>

#define MIN_CAP 16

static inline size_t home_slot(uint64_t key, size_t cap)
{
    return tl__hmap_home(key, cap);
}

void tl_hmap_init(struct tl_hmap *m)
{
    m->slots = NULL;
    m->cap = 0;
    m->n = 0;
}

void tl_hmap_free(struct tl_hmap *m)
{
    if (!m) return;
    free(m->slots);
    tl_hmap_init(m);
}

// Clearing costs a pass over the slots; a table that once grew big but now holds few entries
// (a big walk, then many small ones) would pay it in full every time, so past
// TL_HMAP_SHRINK_CAP slots a table under 1/16 full gives its slots back instead (it regrows on
// demand).
void tl__hmap_clear_slow(struct tl_hmap *m)
{
    if (m->cap > TL_HMAP_SHRINK_CAP && m->n * 16 < m->cap) {
        tl_hmap_free(m);
        return;
    }
    if (!m->n) return;
    memset(m->slots, 0, m->cap * sizeof(*m->slots));
    m->n = 0;
}

// Rehashes every entry into a new array of ncap slots (a power of two > 2 * n).
static tl_status rehash(struct tl_hmap *m, size_t ncap)
{
    struct tl_hmap_slot *slots = tl_calloc_array(ncap, sizeof(*slots));
    if (!slots) return tl__errorf(TL_ERR_NOMEM, "hash table: out of memory for %zu slots", ncap);
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].key) continue;
        size_t j = home_slot(m->slots[i].key, ncap);
        while (slots[j].key)
            j = (j + 1) & (ncap - 1);
        slots[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = slots;
    m->cap = ncap;
    return TL_OK;
}

tl_status tl_hmap_reserve(struct tl_hmap *m, size_t n)
{
    size_t need;
    if (!tl_mul_size(n, 2, &need) || need > SIZE_MAX / 4)
        return tl__errorf(TL_ERR_NOMEM, "hash table: %zu entries is too many", n);
    size_t cap = m->cap ? m->cap : MIN_CAP;
    while (cap < need)
        cap *= 2;
    return cap == m->cap ? TL_OK : rehash(m, cap);
}

static tl_status insert(struct tl_hmap *m, uint64_t key, uint64_t val, bool replace)
{
    if (!key) return tl__errorf(TL_ERR_INVALID_ARG, "hash table: key 0 is reserved");
    if (replace && m->cap) {
        for (size_t j = home_slot(key, m->cap); m->slots[j].key; j = (j + 1) & (m->cap - 1)) {
            if (m->slots[j].key == key) {
                m->slots[j].val = val;
                return TL_OK;
            }
        }
    }
    if ((m->n + 1) * 2 > m->cap) {
        tl_status rc = tl_hmap_reserve(m, m->n + 1 > m->cap ? m->n + 1 : m->cap);
        if (rc) return rc;
    }
    size_t j = home_slot(key, m->cap);
    while (m->slots[j].key)
        j = (j + 1) & (m->cap - 1);
    m->slots[j].key = key;
    m->slots[j].val = val;
    m->n++;
    return TL_OK;
}

tl_status tl_hmap_put(struct tl_hmap *m, uint64_t key, uint64_t val)
{
    return insert(m, key, val, true);
}

tl_status tl__hmap_add_slow(struct tl_hmap *m, uint64_t key, uint64_t val)
{
    return insert(m, key, val, false);
}

bool tl_hmap_del(struct tl_hmap *m, uint64_t key)
{
    size_t cursor = 0, hole = tl__hmap_find(m, key, &cursor);
    if (hole == SIZE_MAX) return false;
    size_t mask = m->cap - 1;
    for (size_t k = (hole + 1) & mask; m->slots[k].key; k = (k + 1) & mask) {
        size_t home = home_slot(m->slots[k].key, m->cap);
        // The entry at k may stay when its home lies cyclically in (hole, k].
        bool stays = hole <= k ? (home > hole && home <= k) : (home > hole || home <= k);
        if (stays) continue;
        m->slots[hole] = m->slots[k];
        hole = k;
    }
    m->slots[hole].key = 0;
    m->slots[hole].val = 0;
    m->n--;
    return true;
}
