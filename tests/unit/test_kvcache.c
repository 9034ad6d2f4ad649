/* Tests for src/engine/kvcache: block pool, refcounts, prefix table, LRU eviction, invariants. */
#include "tl_test.h"

#include "core/error.h"
#include "engine/kvcache.h"

static struct tl_kv_cache *make(int64_t n_blocks, int32_t bs)
{
    struct tl_kv_cache_config c = {.n_blocks = n_blocks, .block_size = bs, .type = TL_DTYPE_F16};
    struct tl_kv_cache *kv = tl_kv_cache_create(&c);
    assert_non_null(kv);
    return kv;
}

static void check(const struct tl_kv_cache *kv, const int32_t *refs)
{
    if (tl_kv_cache_check(kv, refs)) fail_msg("%s", tl_last_error());
    struct tl_kv_counts c;
    tl_kv_cache_counts(kv, &c);
    assert_int_equal(c.n_free + c.n_used + c.n_cached, tl_kv_cache_n_blocks(kv));
}

static void test_alloc_until_empty_and_release(void **state)
{
    (void)state;
    struct tl_kv_cache *kv = make(8, 4);
    int32_t refs[8] = {0}, got[8];
    for (int i = 0; i < 8; i++) {
        got[i] = tl_kv_block_alloc(kv);
        assert_true(got[i] >= 0 && got[i] < 8);
        refs[got[i]]++;
        check(kv, refs);
    }
    assert_int_equal(tl_kv_block_alloc(kv), -1);
    assert_int_equal(tl_kv_cache_n_available(kv), 0);
    for (int i = 0; i < 8; i++)
        for (int j = i + 1; j < 8; j++)
            assert_int_not_equal(got[i], got[j]);
    tl_kv_block_ref(kv, got[3]);
    refs[got[3]]++;
    tl_kv_block_release(kv, got[3]);
    refs[got[3]]--;
    check(kv, refs);
    assert_int_equal(tl_kv_block_alloc(kv), -1); // still held once
    for (int i = 0; i < 8; i++) {
        tl_kv_block_release(kv, got[i]);
        refs[got[i]]--;
        check(kv, refs);
    }
    struct tl_kv_counts c;
    tl_kv_cache_counts(kv, &c);
    assert_int_equal(c.n_free, 8);
    tl_kv_cache_destroy(kv);
}

static void test_hash_properties(void **state)
{
    (void)state;
    int32_t a[4] = {1, 2, 3, 4}, b[4] = {2, 1, 3, 4}, c[4] = {1, 2, 3, 5};
    uint64_t ha = tl_kv_block_hash(0, a, 4);
    assert_true(ha == tl_kv_block_hash(0, a, 4)); // deterministic
    assert_true(ha != tl_kv_block_hash(0, b, 4)); // order matters
    assert_true(ha != tl_kv_block_hash(0, c, 4));
    assert_true(ha != tl_kv_block_hash(1, a, 4)); // parent matters
    assert_true(ha != tl_kv_block_hash(0, a, 3)); // length matters
    assert_true(ha != 0);
    // No collisions among many near-identical single-token-difference blocks and chains.
    enum { N = 20000 };
    uint64_t *hs = malloc(N * sizeof(*hs));
    for (int i = 0; i < N; i++) {
        int32_t t[16] = {0};
        t[i % 16] = i;
        hs[i] = tl_kv_block_hash((uint64_t)(i / 16), t, 16);
    }
    for (int i = 0; i < N; i++)
        for (int j = i + 1; j < N; j++)
            if (hs[i] == hs[j]) fail_msg("collision between %d and %d", i, j);
    free(hs);
}

static void test_prefix_hit_miss_and_collision(void **state)
{
    (void)state;
    struct tl_kv_cache *kv = make(6, 4);
    int32_t refs[6] = {0};
    int32_t t0[4] = {10, 11, 12, 13}, t1[4] = {14, 15, 16, 17}, other[4] = {10, 11, 12, 99};
    uint64_t h0 = tl_kv_block_hash(0, t0, 4), h1 = tl_kv_block_hash(h0, t1, 4);
    int32_t b0 = tl_kv_block_alloc(kv), b1 = tl_kv_block_alloc(kv);
    refs[b0]++, refs[b1]++;
    assert_true(tl_kv_prefix_publish(kv, b0, h0, 0, t0));
    assert_true(tl_kv_prefix_publish(kv, b1, h1, h0, t1));
    check(kv, refs);
    // A second block with the same key is not entered.
    int32_t dup = tl_kv_block_alloc(kv);
    refs[dup]++;
    assert_false(tl_kv_prefix_publish(kv, dup, h0, 0, t0));
    tl_kv_block_release(kv, dup);
    refs[dup]--;
    check(kv, refs); // dup went back to the free stack, not to the cache
    // Hits on used blocks take references.
    assert_int_equal(tl_kv_prefix_find(kv, h0, 0, t0), b0);
    refs[b0]++;
    assert_int_equal(tl_kv_block_refcount(kv, b0), 2);
    // Misses: other tokens, other parent, and a forged collision (same key, other tokens).
    assert_int_equal(tl_kv_prefix_find(kv, tl_kv_block_hash(0, other, 4), 0, other), -1);
    assert_int_equal(tl_kv_prefix_find(kv, h1, 12345, t1), -1);
    assert_int_equal(tl_kv_prefix_find(kv, h0, 0, other), -1);
    check(kv, refs);
    // Released to zero -> cached, still findable, counts as available.
    for (int i = 0; i < 2; i++)
        tl_kv_block_release(kv, b0), refs[b0]--;
    tl_kv_block_release(kv, b1), refs[b1]--;
    struct tl_kv_counts c;
    tl_kv_cache_counts(kv, &c);
    assert_int_equal(c.n_cached, 2);
    assert_int_equal(c.n_used, 0);
    assert_int_equal(tl_kv_cache_n_available(kv), 6);
    check(kv, refs);
    assert_int_equal(tl_kv_prefix_find(kv, h1, h0, t1), b1);
    refs[b1]++;
    tl_kv_cache_counts(kv, &c);
    assert_int_equal(c.n_cached, 1);
    check(kv, refs);
    tl_kv_block_release(kv, b1), refs[b1]--;
    tl_kv_prefix_clear(kv);
    tl_kv_cache_counts(kv, &c);
    assert_int_equal(c.n_free, 6);
    assert_int_equal(tl_kv_prefix_find(kv, h0, 0, t0), -1);
    check(kv, refs);
    tl_kv_cache_destroy(kv);
}

static void test_lru_eviction_order(void **state)
{
    (void)state;
    struct tl_kv_cache *kv = make(4, 2);
    int32_t refs[4] = {0}, b[4];
    uint64_t h[4];
    int32_t toks[4][2];
    for (int i = 0; i < 4; i++) {
        toks[i][0] = i;
        toks[i][1] = 100 + i;
        h[i] = tl_kv_block_hash(0, toks[i], 2);
        b[i] = tl_kv_block_alloc(kv);
        assert_true(tl_kv_prefix_publish(kv, b[i], h[i], 0, toks[i]));
    }
    // Release order 2, 0, 3, 1: that is the eviction order. Touch 0 again (find + release)
    // so it moves to the most recently used end: order becomes 2, 3, 1, 0.
    int order[4] = {2, 0, 3, 1};
    for (int i = 0; i < 4; i++)
        tl_kv_block_release(kv, b[order[i]]);
    assert_int_equal(tl_kv_prefix_find(kv, h[0], 0, toks[0]), b[0]);
    tl_kv_block_release(kv, b[0]);
    check(kv, refs);
    int expect[4] = {2, 3, 1, 0};
    for (int i = 0; i < 4; i++) {
        int32_t got = tl_kv_block_alloc(kv);
        assert_int_equal(got, b[expect[i]]);
        refs[got]++;
        // The evicted block is gone from the table; the others are still there.
        assert_int_equal(tl_kv_prefix_find(kv, h[expect[i]], 0, toks[expect[i]]), -1);
        check(kv, refs);
    }
    struct tl_kv_counts c;
    tl_kv_cache_counts(kv, &c);
    assert_int_equal(c.n_evicted, 4);
    for (int i = 0; i < 4; i++)
        tl_kv_block_release(kv, i);
    tl_kv_cache_destroy(kv);
}

// Random sequences that grow, share prefixes, publish and end; invariants checked every step.
static void test_random_sequences_keep_invariants(void **state)
{
    (void)state;
    enum { NB = 24, BS = 2, NSEQ = 6, MAXB = 8 };
    struct tl_kv_cache *kv = make(NB, BS);
    int32_t refs[NB] = {0};
    struct {
        int32_t table[MAXB];
        uint64_t keys[MAXB];
        int n;
    } seq[NSEQ] = {{{0}, {0}, 0}};
    uint64_t rng = 12345;
    for (int it = 0; it < 5000; it++) {
        uint64_t r = tl_xorshift64s(&rng);
        int s = (int)((r >> 33) % NSEQ), op = (int)((r >> 20) % 4);
        // Tokens of block j of any sequence are a function of j only -> lots of sharing.
        int32_t toks[BS] = {(int32_t)seq[s].n, (int32_t)(r >> 60) & 1};
        if (op < 3 && seq[s].n < MAXB) {
            int j = seq[s].n;
            uint64_t parent = j ? seq[s].keys[j - 1] : 0, key = tl_kv_block_hash(parent, toks, BS);
            int32_t b = tl_kv_prefix_find(kv, key, parent, toks);
            if (b < 0) {
                b = tl_kv_block_alloc(kv);
                if (b < 0) continue; // pool full: this sequence waits
                tl_kv_prefix_publish(kv, b, key, parent, toks);
            }
            refs[b]++;
            seq[s].table[j] = b;
            seq[s].keys[j] = key;
            seq[s].n++;
        } else {
            while (seq[s].n > 0) {
                int32_t b = seq[s].table[--seq[s].n];
                tl_kv_block_release(kv, b);
                refs[b]--;
            }
        }
        check(kv, refs);
        // Distinct sequences never share a block unless their keys agree.
        for (int a = 0; a < NSEQ; a++)
            for (int c = a + 1; c < NSEQ; c++)
                for (int j = 0; j < seq[a].n && j < seq[c].n; j++)
                    if (seq[a].table[j] == seq[c].table[j])
                        assert_true(seq[a].keys[j] == seq[c].keys[j]);
    }
    for (int s = 0; s < NSEQ; s++)
        while (seq[s].n > 0) {
            int32_t b = seq[s].table[--seq[s].n];
            tl_kv_block_release(kv, b);
            refs[b]--;
        }
    check(kv, refs);
    struct tl_kv_counts c;
    tl_kv_cache_counts(kv, &c);
    assert_int_equal(c.n_used, 0);
    tl_kv_cache_destroy(kv);
}

static void test_memory_layout(void **state)
{
    (void)state;
    struct tl_kv_cache_config c = {.n_blocks = 5,
                                   .block_size = 4,
                                   .n_layer = 3,
                                   .n_kv_head = 2,
                                   .head_dim = 8,
                                   .type = TL_DTYPE_F32};
    assert_int_equal(tl_kv_cache_block_bytes(&c), 3 * 2 * 4 * 2 * 8 * 4);
    struct tl_kv_cache *kv = tl_kv_cache_create(&c);
    assert_non_null(kv);
    const struct tl_kv_pages *p = tl_kv_cache_pages(kv);
    assert_int_equal(p->n_layer, 3);
    size_t pool = 5 * 4 * 2 * 8 * sizeof(float);
    for (int l = 0; l < 3; l++) {
        assert_int_equal(p->layers[l].block_size, 4);
        assert_int_equal(p->layers[l].type, TL_DTYPE_F32);
        // K and V pools of all layers are disjoint and whole: write every element.
        memset(p->layers[l].k, l * 2 + 1, pool);
        memset(p->layers[l].v, l * 2 + 2, pool);
    }
    for (int l = 0; l < 3; l++) {
        assert_int_equal(((unsigned char *)p->layers[l].k)[pool - 1], l * 2 + 1);
        assert_int_equal(((unsigned char *)p->layers[l].v)[0], l * 2 + 2);
    }
    tl_kv_cache_destroy(kv);
    c.type = TL_DTYPE_F16;
    assert_int_equal(tl_kv_cache_block_bytes(&c), 3 * 2 * 4 * 2 * 8 * 2);
}

static void test_bad_config(void **state)
{
    (void)state;
    struct tl_kv_cache_config c = {.n_blocks = 0, .block_size = 16, .type = TL_DTYPE_F16};
    assert_null(tl_kv_cache_create(&c));
    assert_non_null(strstr(tl_last_error(), "kv cache"));
    c.n_blocks = 4;
    c.block_size = 0;
    assert_null(tl_kv_cache_create(&c));
    c.block_size = 16;
    c.type = TL_DTYPE_Q4_0; // not a KV type
    assert_null(tl_kv_cache_create(&c));
    c.type = TL_DTYPE_Q8_0; // a KV type, but only for heads of a multiple of 32 values
    c.n_layer = 1, c.n_kv_head = 1, c.head_dim = 8;
    assert_null(tl_kv_cache_create(&c));
    c.type = TL_DTYPE_F16;
    c.n_layer = 1;
    c.n_kv_head = 1 << 30;
    c.head_dim = 1 << 30;
    c.n_blocks = 1000;
    assert_null(tl_kv_cache_create(&c)); // overflow, not a crash
    tl_kv_cache_destroy(NULL);
}

TL_TEST_MAIN(cmocka_unit_test(test_alloc_until_empty_and_release),
             cmocka_unit_test(test_hash_properties),
             cmocka_unit_test(test_prefix_hit_miss_and_collision),
             cmocka_unit_test(test_lru_eviction_order),
             cmocka_unit_test(test_random_sequences_keep_invariants),
             cmocka_unit_test(test_memory_layout), cmocka_unit_test(test_bad_config))
