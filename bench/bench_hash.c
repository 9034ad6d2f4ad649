/*
 * Hash table micro-benchmark: is the KV cache's own prefix table (chains threaded through the
 * blocks, buckets = n_blocks rounded up, no allocation after creation) faster than the shared
 * tl_hmap (core/hashmap.h) for the prefix-cache lookup? And what does tl_hmap cost for a
 * vocabulary's piece index against the int32-slot index vocab.c used before it (reproduced
 * here as the baseline)?
 *
 * Prefix lookups: n blocks of 16 tokens are published; then every block is looked up once in
 * a shuffled order (hits), and as many absent keys (misses). Both sides do the same work per
 * hit: find by hash, compare parent key and the 16 tokens, take a reference.
 * Piece lookups: n random pieces of 2..12 bytes, found once each in a shuffled order.
 *
 * Each figure is the best of 5 rounds in thread CPU time (other processes on a shared machine
 * only make rounds slower), in nanoseconds per lookup.
 *
 * Usage: bench_hash [--n N]   (default: 4096 and 65536 blocks / pieces)
 */
#include "bench_common.h"
#include "core/alloc.h"
#include "core/hash.h"
#include "core/hashmap.h"
#include "engine/kvcache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BS 16
#define ROUNDS 5

static void shuffle(int32_t *a, int32_t n, uint64_t *seed)
{
    for (int32_t i = n - 1; i > 0; i--) {
        int32_t j = (int32_t)(tl_splitmix64(seed) % (uint64_t)(i + 1)), t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

// ---- prefix table --------------------------------------------------------------------------

struct prefix_data {
    int32_t n;
    int32_t *tokens;   // (n, BS)
    uint64_t *hash;    // (n) the block keys; chained: block i's parent is block i - 1
    uint64_t *missing; // (n) keys never published
    int32_t *order;    // (n) shuffled
};

static uint64_t parent_of(const struct prefix_data *d, int32_t i)
{
    return i ? d->hash[i - 1] : 0;
}

static double time_kv(const struct prefix_data *d, bool hits, int64_t *found)
{
    struct tl_kv_cache_config c = {.n_blocks = d->n, .block_size = BS, .type = TL_DTYPE_F32};
    struct tl_kv_cache *kv = tl_kv_cache_create(&c);
    if (!kv) return -1;
    for (int32_t i = 0; i < d->n; i++) { // block i holds sequence block i, kept used (ref 1)
        int32_t b = tl_kv_block_alloc(kv);
        tl_kv_prefix_publish(kv, b, d->hash[i], parent_of(d, i), d->tokens + (size_t)i * BS);
    }
    double best = 1e30;
    for (int r = 0; r < ROUNDS; r++) {
        int64_t n_found = 0;
        double t0 = thread_cpu_s();
        for (int32_t k = 0; k < d->n; k++) {
            int32_t i = d->order[k];
            uint64_t h = hits ? d->hash[i] : d->missing[i];
            n_found += tl_kv_prefix_find(kv, h, parent_of(d, i), d->tokens + (size_t)i * BS) >= 0;
        }
        double t = thread_cpu_s() - t0;
        best = t < best ? t : best;
        *found = n_found;
    }
    tl_kv_cache_destroy(kv);
    return best * 1e9 / d->n;
}

static double time_hmap_prefix(const struct prefix_data *d, bool hits, int64_t *found)
{
    struct tl_hmap m;
    tl_hmap_init(&m);
    uint64_t *parent = malloc((size_t)d->n * sizeof(*parent));
    int32_t *ref = calloc((size_t)d->n, sizeof(*ref));
    int32_t *stored = malloc((size_t)d->n * BS * sizeof(*stored)); // the cache's token copy
    if (!parent || !ref || !stored || tl_hmap_reserve(&m, (size_t)d->n)) return -1;
    for (int32_t i = 0; i < d->n; i++) {
        parent[i] = parent_of(d, i);
        memcpy(stored + (size_t)i * BS, d->tokens + (size_t)i * BS, BS * sizeof(int32_t));
        if (tl_hmap_put(&m, d->hash[i], (uint64_t)i)) return -1;
    }
    double best = 1e30;
    for (int r = 0; r < ROUNDS; r++) {
        int64_t n_found = 0;
        double t0 = thread_cpu_s();
        for (int32_t k = 0; k < d->n; k++) {
            int32_t i = d->order[k];
            uint64_t h = hits ? d->hash[i] : d->missing[i], b;
            if (!tl_hmap_get(&m, h, &b) || parent[b] != parent_of(d, i) ||
                memcmp(stored + b * BS, d->tokens + (size_t)i * BS, BS * sizeof(int32_t)))
                continue;
            ref[b]++;
            n_found++;
        }
        double t = thread_cpu_s() - t0;
        best = t < best ? t : best;
        *found = n_found;
    }
    tl_hmap_free(&m);
    free(parent);
    free(ref);
    free(stored);
    return best * 1e9 / d->n;
}

static void bench_prefix(int32_t n)
{
    struct prefix_data d = {.n = n};
    d.tokens = malloc((size_t)n * BS * sizeof(int32_t));
    d.hash = malloc((size_t)n * sizeof(uint64_t));
    d.missing = malloc((size_t)n * sizeof(uint64_t));
    d.order = malloc((size_t)n * sizeof(int32_t));
    uint64_t seed = 7;
    for (int32_t i = 0; i < n; i++) {
        for (int j = 0; j < BS; j++)
            d.tokens[(size_t)i * BS + j] = (int32_t)(tl_splitmix64(&seed) % 32000);
        d.hash[i] = tl_kv_block_hash(parent_of(&d, i), d.tokens + (size_t)i * BS, BS);
        d.missing[i] = tl_splitmix64(&seed) | 1;
        d.order[i] = i;
    }
    shuffle(d.order, n, &seed);
    int64_t f1 = 0, f2 = 0, f3 = 0, f4 = 0;
    double kv_hit = time_kv(&d, true, &f1), kv_miss = time_kv(&d, false, &f2);
    double hm_hit = time_hmap_prefix(&d, true, &f3), hm_miss = time_hmap_prefix(&d, false, &f4);
    printf("prefix %6d blocks  hit ns: kv-chains %6.1f  tl_hmap %6.1f  (%.2fx)   "
           "miss ns: kv-chains %6.1f  tl_hmap %6.1f  (%.2fx)\n",
           n, kv_hit, hm_hit, hm_hit / kv_hit, kv_miss, hm_miss, hm_miss / kv_miss);
    if (f1 != n || f3 != n || f2 != 0 || f4 != 0)
        printf("  WRONG: hits %lld/%lld, misses found %lld/%lld\n", (long long)f1, (long long)f3,
               (long long)f2, (long long)f4);
    free(d.tokens);
    free(d.hash);
    free(d.missing);
    free(d.order);
}

// ---- piece index ---------------------------------------------------------------------------

struct pieces {
    int32_t n;
    char *blob;
    uint32_t *off, *len;
};

// The former vocab.c index: int32 ids in open addressing, pieces compared through the table.
static double time_int32_index(const struct pieces *p, const int32_t *order, int64_t *found)
{
    uint64_t slots = 16;
    while (slots < (uint64_t)p->n * 2)
        slots <<= 1;
    int32_t *ix = malloc(slots * sizeof(int32_t));
    if (!ix) return -1;
    memset(ix, 0xff, slots * sizeof(int32_t));
    for (int32_t i = 0; i < p->n; i++) {
        uint64_t h = tl_hash_bytes(p->blob + p->off[i], p->len[i]) & (slots - 1);
        while (ix[h] >= 0)
            h = (h + 1) & (slots - 1);
        ix[h] = i;
    }
    double best = 1e30;
    for (int r = 0; r < ROUNDS; r++) {
        int64_t n_found = 0;
        double t0 = thread_cpu_s();
        for (int32_t k = 0; k < p->n; k++) {
            const char *s = p->blob + p->off[order[k]];
            size_t len = p->len[order[k]];
            for (uint64_t h = tl_hash_bytes(s, len) & (slots - 1);; h = (h + 1) & (slots - 1)) {
                int32_t id = ix[h];
                if (id < 0) break;
                if (p->len[id] == len && memcmp(p->blob + p->off[id], s, len) == 0) {
                    n_found++;
                    break;
                }
            }
        }
        double t = thread_cpu_s() - t0;
        best = t < best ? t : best;
        *found = n_found;
    }
    free(ix);
    return best * 1e9 / p->n;
}

static double time_hmap_index(const struct pieces *p, const int32_t *order, int64_t *found)
{
    struct tl_hmap m;
    tl_hmap_init(&m);
    if (tl_hmap_reserve(&m, (size_t)p->n)) return -1;
    for (int32_t i = 0; i < p->n; i++)
        if (tl_hmap_add(&m, tl_hash_bytes(p->blob + p->off[i], p->len[i]), (uint64_t)i)) return -1;
    double best = 1e30;
    for (int r = 0; r < ROUNDS; r++) {
        int64_t n_found = 0;
        double t0 = thread_cpu_s();
        for (int32_t k = 0; k < p->n; k++) {
            const char *s = p->blob + p->off[order[k]];
            size_t len = p->len[order[k]], cursor = 0;
            uint64_t id;
            while (tl_hmap_next(&m, tl_hash_bytes(s, len), &cursor, &id)) {
                if (p->len[id] == len && memcmp(p->blob + p->off[id], s, len) == 0) {
                    n_found++;
                    break;
                }
            }
        }
        double t = thread_cpu_s() - t0;
        best = t < best ? t : best;
        *found = n_found;
    }
    tl_hmap_free(&m);
    return best * 1e9 / p->n;
}

static void bench_pieces(int32_t n)
{
    struct pieces p = {.n = n};
    p.blob = malloc((size_t)n * 16);
    p.off = malloc((size_t)n * sizeof(uint32_t));
    p.len = malloc((size_t)n * sizeof(uint32_t));
    int32_t *order = malloc((size_t)n * sizeof(int32_t));
    uint64_t seed = 11;
    for (int32_t i = 0; i < n; i++) { // distinct: the id's bytes are part of each piece
        uint32_t len = 4 + (uint32_t)(tl_splitmix64(&seed) % 9);
        char *s = p.blob + (size_t)i * 16;
        memcpy(s, &i, 4);
        for (uint32_t j = 4; j < len; j++)
            s[j] = (char)('a' + tl_splitmix64(&seed) % 26);
        p.off[i] = (uint32_t)i * 16;
        p.len[i] = len;
        order[i] = i;
    }
    shuffle(order, n, &seed);
    int64_t f1 = 0, f2 = 0;
    double old = time_int32_index(&p, order, &f1), now = time_hmap_index(&p, order, &f2);
    printf("pieces %6d        hit ns: int32-index %6.1f  tl_hmap %6.1f  (%.2fx)\n", n, old, now,
           now / old);
    if (f1 != n || f2 != n) printf("  WRONG: found %lld / %lld\n", (long long)f1, (long long)f2);
    free(p.blob);
    free(p.off);
    free(p.len);
    free(order);
}

int main(int argc, char **argv)
{
    int32_t sizes[2] = {4096, 65536}, n_sizes = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--n") && i + 1 < argc) {
            sizes[0] = atoi(argv[++i]);
            n_sizes = 1;
            if (sizes[0] < 1 || sizes[0] > (1 << 24)) {
                fprintf(stderr, "bench_hash: --n must be in [1, 16777216]\n");
                return 2;
            }
        } else {
            fprintf(stderr, "usage: bench_hash [--n N]\n");
            return 2;
        }
    }
    for (int s = 0; s < n_sizes; s++)
        bench_prefix(sizes[s]);
    for (int s = 0; s < n_sizes; s++)
        bench_pieces(sizes[s]);
    return 0;
}
