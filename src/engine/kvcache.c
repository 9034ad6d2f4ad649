/*
 * Paged KV cache: block pool, reference counts, prefix table and LRU (see kvcache.h).
 *
 * Design. The K/V memory of all layers is one 64-byte aligned allocation made at creation and
 * sliced per layer (K then V). Block metadata lives in a parallel array. Free blocks sit on a
 * stack (LIFO keeps recently touched memory warm). The prefix table is a power-of-two bucket
 * array of chains threaded through the blocks (hash_next), sized to twice the pool so chains
 * stay short; the LRU list of cached blocks is a doubly linked list threaded through the blocks
 * too, so no operation allocates after creation. Eviction takes the LRU head; a block released
 * to zero goes to the tail. Callers release a sequence's blocks from last to first, so that the
 * tail of a prefix is evicted before its head (a head without its tail is still useful; the
 * reverse is not).
 *
 * The prefix table is deliberately not the shared tl_hmap (core/hashmap.h): chaining through
 * the blocks never allocates and keeps no second structure in step with the block states, and
 * bench/bench_hash.c measured it faster where it matters: misses 1.3-1.5x faster at 65536
 * blocks in 6 of 7 runs (1.8-2.5x at 16384), hits 1.1-1.8x faster at 65536 in 6 of 7 runs. A
 * tl_hmap is 0.7-0.9x on hits in small pools (4096-16384 blocks), where both take 7-20 ns.
 *
 * Invariants: every block is in exactly one of the states free/used/cached of kvcache.h; a
 * block is in the prefix table iff `hashed`; cached == (ref == 0 && hashed) == on the LRU list;
 * free == (ref == 0 && !hashed) == on the free stack. tl_kv_cache_check verifies all of them.
 *
 * Thread model: one owner thread (the engine's); nothing here locks.
 */
#include "engine/kvcache.h"

#include "core/alloc.h"
#include "core/error.h"
#include "core/hash.h"
#include "kernels/kernels.h"

#include <string.h>

struct kv_block {
    int32_t ref;       // sequences holding it
    int32_t hash_next; // next block in the same bucket, -1 ends
    int32_t lru_prev;  // LRU neighbours while cached, -1 ends
    int32_t lru_next;
    bool hashed;     // in the prefix table
    uint64_t hash;   // key while hashed
    uint64_t parent; // parent's key while hashed
};

struct tl_kv_cache {
    struct tl_kv_cache_config cfg;
    struct kv_block *blocks; // owned, (n_blocks)
    int32_t *tokens;         // owned, (n_blocks, block_size): tokens of hashed blocks
    int32_t *free_stack;     // owned, (n_blocks)
    int64_t n_free;
    int64_t n_cached;
    int64_t n_evicted;
    int32_t lru_head, lru_tail; // least / most recently used cached block, -1 when none
    int32_t *buckets;           // owned, (bucket_mask + 1), -1 = empty
    uint64_t bucket_mask;
    void *mem;                  // owned (tl_aligned_alloc_large): all K/V memory
    struct tl_kv_layer *layers; // owned, (n_layer); k/v point into mem
    struct tl_kv_pages pages;
};

size_t tl_kv_cache_block_bytes(const struct tl_kv_cache_config *c)
{
    // one (position, head) row: head_dim f32/f16 values, or head_dim / 32 Q8_0 blocks
    size_t row = tl_kv_row_bytes(c->type, c->head_dim), b;
    if (!row) return 0;
    if (!tl_mul_size((size_t)c->block_size, (size_t)c->n_kv_head, &b)) return 0;
    if (!tl_mul_size(b, row * 2, &b)) return 0;
    if (!tl_mul_size(b, (size_t)c->n_layer, &b)) return 0;
    return b;
}

struct tl_kv_cache *tl_kv_cache_create(const struct tl_kv_cache_config *c)
{
    if (c->n_blocks < 1 || c->n_blocks > INT32_MAX - 1 || c->block_size < 1 || c->n_layer < 0 ||
        (c->n_layer > 0 && (c->n_kv_head < 1 || c->head_dim < 1)) ||
        (c->type != TL_DTYPE_F16 && c->type != TL_DTYPE_F32 && c->type != TL_DTYPE_Q8_0)) {
        tl__errorf(TL_ERR_INVALID_ARG,
                   "kv cache: bad shape (blocks %lld, block size %d, layers %d, kv heads %d, "
                   "head dim %d)",
                   (long long)c->n_blocks, c->block_size, c->n_layer, c->n_kv_head, c->head_dim);
        return NULL;
    }
    if (c->n_layer > 0 && !tl_kv_type_supported(c->type, c->head_dim)) {
        tl__errorf(TL_ERR_INVALID_ARG,
                   "kv cache: type %s needs head_dim a multiple of %d; the model's head_dim "
                   "is %d",
                   tl_dtype_name(c->type), TL_QK8_0, c->head_dim);
        return NULL;
    }
    size_t total = 0;
    if (c->n_layer > 0) {
        size_t per_block = tl_kv_cache_block_bytes(c);
        if (!per_block || !tl_mul_size(per_block, (size_t)c->n_blocks, &total)) {
            tl__errorf(TL_ERR_TOO_LONG, "kv cache: %lld blocks overflow the address space",
                       (long long)c->n_blocks);
            return NULL;
        }
    }
    struct tl_kv_cache *kv = tl_malloc(sizeof(*kv));
    if (!kv) goto out_nomem;
    memset(kv, 0, sizeof(*kv));
    kv->cfg = *c;
    kv->lru_head = kv->lru_tail = -1;
    size_t nb = (size_t)c->n_blocks;
    kv->blocks = tl_calloc_array(nb, sizeof(*kv->blocks));
    kv->tokens = tl_malloc_array(nb, (size_t)c->block_size * sizeof(int32_t));
    kv->free_stack = tl_malloc_array(nb, sizeof(int32_t));
    uint64_t n_buckets = 16;
    while (n_buckets < 2 * (uint64_t)nb)
        n_buckets *= 2;
    kv->bucket_mask = n_buckets - 1;
    kv->buckets = tl_malloc_array(n_buckets, sizeof(int32_t));
    if (!kv->blocks || !kv->tokens || !kv->free_stack || !kv->buckets) goto out_nomem;
    for (uint64_t i = 0; i < n_buckets; i++)
        kv->buckets[i] = -1;
    // Stack order: block 0 on top, so allocation order is 0, 1, 2, ... on a fresh pool.
    for (int64_t i = 0; i < c->n_blocks; i++) {
        kv->free_stack[i] = (int32_t)(c->n_blocks - 1 - i);
        kv->blocks[i].hash_next = kv->blocks[i].lru_prev = kv->blocks[i].lru_next = -1;
    }
    kv->n_free = c->n_blocks;

    if (c->n_layer > 0) {
        kv->mem = tl_aligned_alloc_large(total); // huge pages: a step walks hundreds of MB
        kv->layers = tl_calloc_array((size_t)c->n_layer, sizeof(*kv->layers));
        if (!kv->mem || !kv->layers) {
            tl__errorf(TL_ERR_NOMEM, "kv cache: cannot allocate %.1f MiB for %lld blocks",
                       (double)total / (1024.0 * 1024.0), (long long)c->n_blocks);
            goto out_destroy;
        }
        size_t half = total / (size_t)c->n_layer / 2; // one layer's K (or V) pool
        for (int32_t l = 0; l < c->n_layer; l++) {
            struct tl_kv_layer *L = &kv->layers[l];
            L->type = c->type;
            L->block_size = c->block_size;
            L->n_kv_head = c->n_kv_head;
            L->head_dim = c->head_dim;
            L->k = (char *)kv->mem + (size_t)l * 2 * half;
            L->v = (char *)kv->mem + ((size_t)l * 2 + 1) * half;
        }
    }
    kv->pages.n_layer = c->n_layer;
    kv->pages.layers = kv->layers;
    return kv;

out_nomem:
    tl__errorf(TL_ERR_NOMEM, "kv cache: out of memory for block tables");
out_destroy:
    tl_kv_cache_destroy(kv);
    return NULL;
}

void tl_kv_cache_destroy(struct tl_kv_cache *kv)
{
    if (!kv) return;
    free(kv->blocks);
    free(kv->tokens);
    free(kv->free_stack);
    free(kv->buckets);
    free(kv->layers);
    tl_aligned_free(kv->mem);
    free(kv);
}

const struct tl_kv_pages *tl_kv_cache_pages(const struct tl_kv_cache *kv)
{
    return &kv->pages;
}

int32_t tl_kv_cache_block_size(const struct tl_kv_cache *kv)
{
    return kv->cfg.block_size;
}

int64_t tl_kv_cache_n_blocks(const struct tl_kv_cache *kv)
{
    return kv->cfg.n_blocks;
}

int64_t tl_kv_cache_n_available(const struct tl_kv_cache *kv)
{
    return kv->n_free + kv->n_cached;
}

void tl_kv_cache_counts(const struct tl_kv_cache *kv, struct tl_kv_counts *out)
{
    out->n_free = kv->n_free;
    out->n_cached = kv->n_cached;
    out->n_used = kv->cfg.n_blocks - kv->n_free - kv->n_cached;
    out->n_evicted = kv->n_evicted;
}

// ---- LRU list and prefix table -------------------------------------------------------------

static void lru_remove(struct tl_kv_cache *kv, int32_t b)
{
    struct kv_block *k = &kv->blocks[b];
    if (k->lru_prev >= 0)
        kv->blocks[k->lru_prev].lru_next = k->lru_next;
    else
        kv->lru_head = k->lru_next;
    if (k->lru_next >= 0)
        kv->blocks[k->lru_next].lru_prev = k->lru_prev;
    else
        kv->lru_tail = k->lru_prev;
    k->lru_prev = k->lru_next = -1;
    kv->n_cached--;
}

static void lru_push_tail(struct tl_kv_cache *kv, int32_t b)
{
    struct kv_block *k = &kv->blocks[b];
    k->lru_prev = kv->lru_tail;
    k->lru_next = -1;
    if (kv->lru_tail >= 0)
        kv->blocks[kv->lru_tail].lru_next = b;
    else
        kv->lru_head = b;
    kv->lru_tail = b;
    kv->n_cached++;
}

static void table_remove(struct tl_kv_cache *kv, int32_t b)
{
    struct kv_block *k = &kv->blocks[b];
    int32_t *link = &kv->buckets[k->hash & kv->bucket_mask];
    while (*link != b) {
        TL_ASSERT(*link >= 0);
        link = &kv->blocks[*link].hash_next;
    }
    *link = k->hash_next;
    k->hash_next = -1;
    k->hashed = false;
}

static const int32_t *block_tokens(const struct tl_kv_cache *kv, int32_t b)
{
    return kv->tokens + (size_t)b * (size_t)kv->cfg.block_size;
}

// ---- blocks ---------------------------------------------------------------------------------

int32_t tl_kv_block_alloc(struct tl_kv_cache *kv)
{
    int32_t b;
    if (kv->n_free > 0) {
        b = kv->free_stack[--kv->n_free];
    } else if (kv->lru_head >= 0) {
        b = kv->lru_head;
        lru_remove(kv, b);
        table_remove(kv, b);
        kv->n_evicted++;
    } else {
        return -1;
    }
    TL_ASSERT(kv->blocks[b].ref == 0 && !kv->blocks[b].hashed);
    kv->blocks[b].ref = 1;
    return b;
}

void tl_kv_block_ref(struct tl_kv_cache *kv, int32_t b)
{
    TL_ASSERT(b >= 0 && b < kv->cfg.n_blocks && kv->blocks[b].ref > 0);
    kv->blocks[b].ref++;
}

void tl_kv_block_release(struct tl_kv_cache *kv, int32_t b)
{
    TL_ASSERT(b >= 0 && b < kv->cfg.n_blocks && kv->blocks[b].ref > 0);
    struct kv_block *k = &kv->blocks[b];
    if (--k->ref > 0) return;
    if (k->hashed)
        lru_push_tail(kv, b);
    else
        kv->free_stack[kv->n_free++] = b;
}

int32_t tl_kv_block_refcount(const struct tl_kv_cache *kv, int32_t b)
{
    TL_ASSERT(b >= 0 && b < kv->cfg.n_blocks);
    return kv->blocks[b].ref;
}

// ---- prefix cache ---------------------------------------------------------------------------

// 64x64 -> 128-bit multiply folded to 64 bits: every input bit reaches every output bit.
static inline uint64_t fold_mul(uint64_t a, uint64_t b)
{
    __uint128_t r = (__uint128_t)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

uint64_t tl_kv_block_hash(uint64_t parent, const int32_t *tokens, int32_t n)
{
    // Odd constants (digits of pi and e); each 64-bit word of input (two tokens) is mixed with
    // a full-width multiply, and the length and parent key are absorbed as well. A final
    // avalanche keeps 0 (the "no parent" key) from ever being produced in practice.
    const uint64_t k0 = 0x243f6a8885a308d3ull, k1 = 0x13198a2e03707345ull,
                   k2 = 0xa4093822299f31d1ull, k3 = 0xb7e151628aed2a6bull;
    uint64_t h = fold_mul(parent ^ k0, (uint64_t)n ^ k1);
    int32_t i = 0;
    for (; i + 1 < n; i += 2) {
        uint64_t w = (uint64_t)(uint32_t)tokens[i] | ((uint64_t)(uint32_t)tokens[i + 1] << 32);
        h = fold_mul(h ^ k2, w ^ k3) + k0;
    }
    if (i < n) h = fold_mul(h ^ k2, (uint64_t)(uint32_t)tokens[i] ^ k1) + k0;
    h ^= h >> 31;
    h *= TL_GOLDEN64;
    h ^= h >> 29;
    return h ? h : 1;
}

int32_t tl_kv_prefix_find(struct tl_kv_cache *kv, uint64_t hash, uint64_t parent,
                          const int32_t *tokens)
{
    size_t bytes = (size_t)kv->cfg.block_size * sizeof(int32_t);
    for (int32_t b = kv->buckets[hash & kv->bucket_mask]; b >= 0; b = kv->blocks[b].hash_next) {
        struct kv_block *k = &kv->blocks[b];
        if (k->hash != hash || k->parent != parent) continue;
        if (memcmp(block_tokens(kv, b), tokens, bytes) != 0) continue;
        if (k->ref == 0) lru_remove(kv, b);
        k->ref++;
        return b;
    }
    return -1;
}

bool tl_kv_prefix_publish(struct tl_kv_cache *kv, int32_t b, uint64_t hash, uint64_t parent,
                          const int32_t *tokens)
{
    TL_ASSERT(b >= 0 && b < kv->cfg.n_blocks && kv->blocks[b].ref > 0);
    struct kv_block *k = &kv->blocks[b];
    if (k->hashed) return k->hash == hash && k->parent == parent;
    uint64_t bucket = hash & kv->bucket_mask;
    for (int32_t o = kv->buckets[bucket]; o >= 0; o = kv->blocks[o].hash_next)
        if (kv->blocks[o].hash == hash) return false; // someone else computed it first
    memcpy(kv->tokens + (size_t)b * (size_t)kv->cfg.block_size, tokens,
           (size_t)kv->cfg.block_size * sizeof(int32_t));
    k->hash = hash;
    k->parent = parent;
    k->hashed = true;
    k->hash_next = kv->buckets[bucket];
    kv->buckets[bucket] = b;
    return true;
}

void tl_kv_prefix_clear(struct tl_kv_cache *kv)
{
    for (int64_t i = 0; i < kv->cfg.n_blocks; i++) {
        struct kv_block *k = &kv->blocks[i];
        if (!k->hashed) continue;
        if (k->ref == 0) {
            lru_remove(kv, (int32_t)i);
            kv->free_stack[kv->n_free++] = (int32_t)i;
        }
        k->hashed = false;
        k->hash_next = -1;
    }
    for (uint64_t i = 0; i <= kv->bucket_mask; i++)
        kv->buckets[i] = -1;
}

// ---- invariants -----------------------------------------------------------------------------

tl_status tl_kv_cache_check(const struct tl_kv_cache *kv, const int32_t *expected_refs)
{
    int64_t n = kv->cfg.n_blocks, n_free = 0, n_cached = 0, n_hashed = 0;
    for (int64_t i = 0; i < n; i++) {
        const struct kv_block *k = &kv->blocks[i];
        if (k->ref < 0) {
            tl__errorf(TL_ERR_STATE, "kv check: block %lld has refcount %d", (long long)i, k->ref);
            return TL_ERR_STATE;
        }
        if (expected_refs && k->ref != expected_refs[i]) {
            tl__errorf(TL_ERR_STATE, "kv check: block %lld has refcount %d, holders say %d",
                       (long long)i, k->ref, expected_refs[i]);
            return TL_ERR_STATE;
        }
        if (k->ref == 0 && !k->hashed) n_free++;
        if (k->ref == 0 && k->hashed) n_cached++;
        if (k->hashed) n_hashed++;
    }
    if (n_free != kv->n_free || n_cached != kv->n_cached) {
        tl__errorf(TL_ERR_STATE, "kv check: counted %lld free / %lld cached, recorded %lld / %lld",
                   (long long)n_free, (long long)n_cached, (long long)kv->n_free,
                   (long long)kv->n_cached);
        return TL_ERR_STATE;
    }
    // The free stack holds exactly the free blocks, once each.
    unsigned char *seen = tl_calloc_array((size_t)n, 1);
    if (!seen) {
        tl__errorf(TL_ERR_NOMEM, "kv check: out of memory");
        return TL_ERR_STATE;
    }
    for (int64_t i = 0; i < kv->n_free; i++) {
        int32_t b = kv->free_stack[i];
        if (b < 0 || b >= n || kv->blocks[b].ref != 0 || kv->blocks[b].hashed || seen[b]) {
            tl__errorf(TL_ERR_STATE,
                       "kv check: free stack entry %lld (block %d) is not free "
                       "or is there twice",
                       (long long)i, b);
            free(seen);
            return TL_ERR_STATE;
        }
        seen[b] = 1;
    }
    free(seen);
    // The LRU list holds exactly the cached blocks, linked both ways.
    int64_t n_lru = 0;
    int32_t prev = -1;
    for (int32_t b = kv->lru_head; b >= 0; b = kv->blocks[b].lru_next) {
        if (++n_lru > n || kv->blocks[b].ref != 0 || !kv->blocks[b].hashed ||
            kv->blocks[b].lru_prev != prev) {
            tl__errorf(TL_ERR_STATE, "kv check: LRU list broken at block %d", b);
            return TL_ERR_STATE;
        }
        prev = b;
    }
    if (n_lru != n_cached || prev != kv->lru_tail) {
        tl__errorf(TL_ERR_STATE, "kv check: LRU list has %lld blocks, %lld are cached",
                   (long long)n_lru, (long long)n_cached);
        return TL_ERR_STATE;
    }
    // The table holds exactly the hashed blocks, each in its own bucket, keys unique.
    int64_t n_table = 0;
    for (uint64_t bk = 0; bk <= kv->bucket_mask; bk++)
        for (int32_t b = kv->buckets[bk]; b >= 0; b = kv->blocks[b].hash_next) {
            if (++n_table > n || !kv->blocks[b].hashed ||
                (kv->blocks[b].hash & kv->bucket_mask) != bk) {
                tl__errorf(TL_ERR_STATE, "kv check: prefix table broken at block %d", b);
                return TL_ERR_STATE;
            }
            for (int32_t o = kv->blocks[b].hash_next; o >= 0; o = kv->blocks[o].hash_next)
                if (kv->blocks[o].hash == kv->blocks[b].hash) {
                    tl__errorf(TL_ERR_STATE, "kv check: key held by blocks %d and %d", b, o);
                    return TL_ERR_STATE;
                }
        }
    if (n_table != n_hashed) {
        tl__errorf(TL_ERR_STATE, "kv check: table has %lld blocks, %lld are hashed",
                   (long long)n_table, (long long)n_hashed);
        return TL_ERR_STATE;
    }
    return TL_OK;
}
