/*
 * The paged KV cache: one pool of fixed-size blocks allocated at start (the K and V memory of
 * every layer), per-block reference counts, and the prefix cache that lets a full block of
 * computed tokens be shared by every sequence whose tokens up to and including that block are
 * the same.
 *
 * Block states (each block is in exactly one):
 *   free    ref == 0, not in the prefix table, on the free stack;
 *   used    ref  > 0 (held by that many sequences' block tables), maybe in the prefix table;
 *   cached  ref == 0, in the prefix table and on the LRU list; reusable (evicted) when the
 *           free stack is empty.
 * free + used + cached == n_blocks at all times (tl_kv_cache_check).
 *
 * A full block is identified by hash(parent block's hash, its block_size tokens); a lookup also
 * compares the parent hash and the tokens, so a hash collision can never hand out wrong KV.
 *
 * Thread model: owned by the engine thread; no locks.
 */
#ifndef TL_ENGINE_KVCACHE_H
#define TL_ENGINE_KVCACHE_H

#include <tokenloom.h>

#include "core/dtype.h"
#include "model/model.h"

#include <stdbool.h>
#include <stdint.h>

struct tl_kv_cache_config {
    int64_t n_blocks;   // pool size in blocks (>= 1)
    int32_t block_size; // positions per block (>= 1)
    int32_t n_layer;    // 0 = no K/V memory (metadata only; tests)
    int32_t n_kv_head;
    int32_t head_dim;
    enum tl_dtype type; // TL_DTYPE_F16, TL_DTYPE_F32 or TL_DTYPE_Q8_0 (head_dim % 32 == 0)
};

struct tl_kv_cache;

// Bytes of K+V memory one block takes over all layers, from the type's row bytes
// (tl_kv_row_bytes: Q8_0 is 34 bytes per 32 values). 0 on overflow or an unsupported
// (type, head_dim).
size_t tl_kv_cache_block_bytes(const struct tl_kv_cache_config *c);

// Allocates the pool (one allocation for every layer's K and V). NULL on failure (error set).
struct tl_kv_cache *tl_kv_cache_create(const struct tl_kv_cache_config *c);
void tl_kv_cache_destroy(struct tl_kv_cache *kv); // NULL is a no-op

// The K/V pages of every layer, for the forward pass (borrowed, lives with kv).
const struct tl_kv_pages *tl_kv_cache_pages(const struct tl_kv_cache *kv);
int32_t tl_kv_cache_block_size(const struct tl_kv_cache *kv);
int64_t tl_kv_cache_n_blocks(const struct tl_kv_cache *kv);

// Blocks an allocation can still get: free plus cached (evictable) ones.
int64_t tl_kv_cache_n_available(const struct tl_kv_cache *kv);

struct tl_kv_counts {
    int64_t n_free, n_used, n_cached;
    int64_t n_evicted; // cached blocks reused for new content so far
};
void tl_kv_cache_counts(const struct tl_kv_cache *kv, struct tl_kv_counts *out);

// Takes a block for new content (ref = 1): from the free stack, else the least recently used
// cached block (which leaves the prefix table). Returns -1 when none is left.
int32_t tl_kv_block_alloc(struct tl_kv_cache *kv);
// Adds a reference to a used block.
void tl_kv_block_ref(struct tl_kv_cache *kv, int32_t b);
// Drops a reference. At zero a block in the prefix table becomes cached (most recently used
// end of the LRU list); any other block becomes free.
void tl_kv_block_release(struct tl_kv_cache *kv, int32_t b);
int32_t tl_kv_block_refcount(const struct tl_kv_cache *kv, int32_t b);

// The prefix-cache key of a full block: a 64-bit hash of the parent's key (0 for the first
// block) and the block's tokens.
uint64_t tl_kv_block_hash(uint64_t parent, const int32_t *tokens, int32_t n);

// Looks up a full block by key, checking the parent key and tokens too. On a hit takes a
// reference (a cached block becomes used) and returns it; -1 on a miss.
int32_t tl_kv_prefix_find(struct tl_kv_cache *kv, uint64_t hash, uint64_t parent,
                          const int32_t *tokens);
// Enters used block b, whose block_size positions hold the computed K/V of `tokens` after the
// prefix whose key is `parent`, into the prefix table under `hash`. Does nothing when b is
// already in the table or another block already holds that key. Returns true when b is (now)
// in the table.
bool tl_kv_prefix_publish(struct tl_kv_cache *kv, int32_t b, uint64_t hash, uint64_t parent,
                          const int32_t *tokens);
// Empties the prefix table: cached blocks become free, used ones stay used but unshared.
void tl_kv_prefix_clear(struct tl_kv_cache *kv);

// Checks every internal invariant (state counts add up, lists and table consistent); when
// expected_refs is not NULL it also compares each block's refcount with expected_refs[b].
// Returns TL_ERR_STATE with the error message naming the first broken invariant, else TL_OK.
tl_status tl_kv_cache_check(const struct tl_kv_cache *kv,
                            const int32_t *expected_refs) TL_WARN_UNUSED;

#endif
