/*
 * Tests for src/core/hash.h and src/core/hashmap.c: the helpers against published vectors, and
 * the table against an oracle (a plain array searched linearly) over long random runs of
 * put/add/get/del, with the table's own invariant checked after every operation: n equals the
 * number of full slots, and no empty slot lies between an entry's home and its slot.
 */
#include "tl_test.h"

#include "core/alloc.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/hashmap.h"

static void test_hash_published_vectors(void **state)
{
    (void)state;
    uint64_t s = 0; // splitmix64 from seed 0 (Vigna's reference splitmix64.c)
    assert_true(tl_splitmix64(&s) == 0xe220a8397b1dcdafull);
    assert_true(tl_splitmix64(&s) == 0x6e789e6aa1b965f4ull);
    assert_true(tl_splitmix64(&s) == 0x06c45d188009454full);
    // FNV-1a 64 test vectors (Fowler, Noll, Vo).
    uint64_t x = 1; // xorshift64* from state 1 (Vigna's definition, computed in python3)
    assert_true(tl_xorshift64s(&x) == 0x47e4ce4b896cdd1dull);
    assert_true(tl_xorshift64s(&x) == 0xabcfa6a8e079651dull);
    assert_true(tl_xorshift64s(&x) == 0xb9d10d8feb731f57ull);

    assert_true(tl_fnv1a64("", 0) == 0xcbf29ce484222325ull);
    assert_true(tl_fnv1a64("a", 1) == 0xaf63dc4c8601ec8cull);
    assert_true(tl_fnv1a64("foobar", 6) == 0x85944171f73967e8ull);
    assert_true(tl_fnv1a64_more(tl_fnv1a64("foo", 3), "bar", 3) == 0x85944171f73967e8ull);
    assert_true(tl_hash_bytes("foobar", 6) == tl_mix64(0x85944171f73967e8ull));
    assert_true(tl_mix64(0) == 0); // so tl_hash_bytes must (and does) avoid 0 itself

    // Word-wise FNV-1a over words below 256 is byte-wise FNV-1a over those bytes: the same
    // published vectors, one word per byte.
    const uint32_t foobar[] = {'f', 'o', 'o', 'b', 'a', 'r'};
    assert_true(tl_fnv1a64_u32(TL_FNV64_OFFSET, foobar, 0) == 0xcbf29ce484222325ull);
    assert_true(tl_fnv1a64_u32(TL_FNV64_OFFSET, foobar + 4, 1) == 0xaf63dc4c8601ec8cull);
    assert_true(tl_fnv1a64_u32(TL_FNV64_OFFSET, foobar, 6) == 0x85944171f73967e8ull);
    // Continuing a hash is hashing the concatenation.
    assert_true(tl_fnv1a64_u32(tl_fnv1a64_u32(TL_FNV64_OFFSET, foobar, 2), foobar + 2, 4) ==
                0x85944171f73967e8ull);
    // A word's upper bytes count: 'f' + 256 is another key.
    const uint32_t f256 = 'f' + 256;
    assert_true(tl_fnv1a64_u32(TL_FNV64_OFFSET, &f256, 1) !=
                tl_fnv1a64_u32(TL_FNV64_OFFSET, foobar, 1));
    assert_true(tl_hash_u32s(foobar, 6, 0) == 0x85944171f73967e8ull);
    assert_true(tl_hash_u32s(foobar, 6, 1) != tl_hash_u32s(foobar, 6, 0)); // the salt counts
}

// The table's invariant, by brute force over the slot array.
static void check_invariant(const struct tl_hmap *m)
{
    size_t full = 0;
    for (size_t i = 0; i < m->cap; i++) {
        uint64_t key = m->slots[i].key;
        if (!key) continue;
        full++;
        for (size_t j = tl__hmap_home(key, m->cap); j != i; j = (j + 1) & (m->cap - 1))
            if (!m->slots[j].key) fail_msg("slot %zu: empty slot %zu before it", i, j);
    }
    assert_int_equal(full, m->n);
    assert_true(m->n * 2 <= m->cap || m->cap == 0);
}

struct oracle {
    uint64_t key[4096], val[4096];
    size_t n;
};

static size_t oracle_find(const struct oracle *o, uint64_t key)
{
    for (size_t i = 0; i < o->n; i++)
        if (o->key[i] == key) return i;
    return SIZE_MAX;
}

// Random put/get/del against the oracle. Keys come from `pool` (n_pool of them), so the same
// keys are reinserted and deleted many times.
static void random_ops(const uint64_t *pool, size_t n_pool, uint64_t seed, int n_ops)
{
    struct tl_hmap m;
    tl_hmap_init(&m);
    static struct oracle o;
    o.n = 0;
    for (int op = 0; op < n_ops; op++) {
        uint64_t r = tl_splitmix64(&seed), key = pool[r % n_pool];
        uint64_t val = tl_splitmix64(&seed);
        size_t at = oracle_find(&o, key);
        switch ((r >> 32) % 4) {
        case 0:
        case 1: // put
            assert_int_equal(tl_hmap_put(&m, key, val), TL_OK);
            if (at == SIZE_MAX) at = o.n++;
            o.key[at] = key;
            o.val[at] = val;
            break;
        case 2: { // del
            bool had = tl_hmap_del(&m, key);
            assert_int_equal(had, at != SIZE_MAX);
            if (had) {
                o.n--;
                o.key[at] = o.key[o.n];
                o.val[at] = o.val[o.n];
            }
            break;
        }
        default: { // get
            uint64_t got = 0;
            bool found = tl_hmap_get(&m, key, &got);
            assert_int_equal(found, at != SIZE_MAX);
            if (found) assert_true(got == o.val[at]);
        }
        }
        assert_int_equal(m.n, o.n);
        if (op % 97 == 0 || n_pool < 64) check_invariant(&m);
    }
    check_invariant(&m);
    for (size_t i = 0; i < o.n; i++) { // every survivor, and nothing else from the pool
        uint64_t got = 0;
        assert_true(tl_hmap_get(&m, o.key[i], &got) && got == o.val[i]);
    }
    for (size_t i = 0; i < n_pool; i++)
        assert_int_equal(tl_hmap_get(&m, pool[i], NULL), oracle_find(&o, pool[i]) != SIZE_MAX);
    tl_hmap_free(&m);
    assert_null(m.slots);
}

static void test_hmap_random_ops_match_linear_scan(void **state)
{
    (void)state;
    static uint64_t pool[2000];
    uint64_t s = 42;
    for (size_t i = 0; i < 2000; i++)
        pool[i] = tl_splitmix64(&s) | 1; // random keys (never 0)
    random_ops(pool, 2000, 1, 60000);
    for (size_t i = 0; i < 2000; i++)
        pool[i] = i + 1; // dense ids, as the engine's request ids
    random_ops(pool, 2000, 2, 60000);
    random_ops(pool, 10, 3, 20000); // a tiny table: grows once, then churns
}

// Keys that all share one home slot at the minimum capacity (16), some with home 15 so their
// cluster wraps around the end of the array: the deletion's cyclic "stays" test is exercised.
static void test_hmap_colliding_keys_and_wraparound(void **state)
{
    (void)state;
    uint64_t pool[14];
    size_t n = 0;
    for (uint64_t k = 1; n < 14; k++) {
        size_t home = (size_t)tl_mix64(k) & 15;
        if ((n < 7 && home == 15) || (n >= 7 && home == 0)) pool[n++] = k;
    }
    random_ops(pool, 7, 4, 5000);     // one home: all 7 collide at cap 16
    random_ops(pool, 14, 5, 20000);   // homes 15 and 0: a wrapped cluster (cap 16 until 8)
    random_ops(pool + 4, 6, 6, 5000); // straddling both
}

static void test_hmap_multi_entries(void **state)
{
    (void)state;
    struct tl_hmap m;
    tl_hmap_init(&m);
    size_t cursor = 0;
    uint64_t v;
    assert_false(tl_hmap_get(&m, 7, &v)); // empty table
    assert_false(tl_hmap_next(&m, 7, &cursor, &v));
    for (uint64_t i = 0; i < 5; i++)
        assert_int_equal(tl_hmap_add(&m, 7, 100 + i), TL_OK);
    for (uint64_t k = 8; k < 40; k++) // grows the table with the duplicates in it
        assert_int_equal(tl_hmap_add(&m, k, k), TL_OK);
    unsigned seen = 0;
    cursor = 0;
    while (tl_hmap_next(&m, 7, &cursor, &v)) {
        assert_true(v >= 100 && v < 105 && !(seen & (1u << (v - 100))));
        seen |= 1u << (v - 100);
    }
    assert_int_equal(seen, 0x1f);
    assert_true(tl_hmap_del(&m, 7));
    int left = 0;
    cursor = 0;
    while (tl_hmap_next(&m, 7, &cursor, &v))
        left++;
    assert_int_equal(left, 4);
    assert_int_equal(m.n, 4 + 32);
    check_invariant(&m);
    tl_hmap_free(&m);
}

// Clearing keeps the slots, empties the table, and the table works again afterwards.
static void test_hmap_clear(void **state)
{
    (void)state;
    struct tl_hmap m;
    tl_hmap_init(&m);
    tl_hmap_clear(&m); // an empty, unallocated table
    assert_null(m.slots);
    for (int round = 0; round < 3; round++) {
        for (uint64_t k = 1; k <= 100; k++)
            assert_int_equal(tl_hmap_add(&m, k * 7919, k + (uint64_t)round), TL_OK);
        assert_int_equal(m.n, 100);
        size_t cap = m.cap;
        tl_hmap_clear(&m);
        assert_int_equal(m.n, 0);
        assert_int_equal(m.cap, cap);
        check_invariant(&m);
        for (uint64_t k = 1; k <= 100; k++)
            assert_false(tl_hmap_get(&m, k * 7919, NULL));
        assert_int_equal(tl_hmap_put(&m, 5, 50), TL_OK); // usable without reallocating
        assert_int_equal(m.cap, cap);
        uint64_t v = 0;
        assert_true(tl_hmap_get(&m, 5, &v) && v == 50);
        tl_hmap_clear(&m);
    }
    // A big table holding few entries gives its slots back; one still well used keeps them.
    for (uint64_t k = 1; k <= 2000; k++)
        assert_int_equal(tl_hmap_put(&m, k, k), TL_OK);
    size_t big = m.cap;
    assert_true(big > 1024);
    tl_hmap_clear(&m);
    assert_int_equal(m.cap, big); // it held 2000 of 4096
    for (uint64_t k = 1; k <= 10; k++)
        assert_int_equal(tl_hmap_put(&m, k, k), TL_OK);
    tl_hmap_clear(&m);
    assert_int_equal(m.n, 0);
    assert_int_equal(m.cap, 0); // 10 of 4096: freed
    assert_null(m.slots);
    assert_false(tl_hmap_get(&m, 3, NULL));
    assert_int_equal(tl_hmap_put(&m, 3, 30), TL_OK); // and usable again
    assert_true(tl_hmap_get(&m, 3, NULL));
    tl_hmap_free(&m);
}

static void test_hmap_bad_input_and_alloc_failure(void **state)
{
    (void)state;
    struct tl_hmap m;
    tl_hmap_init(&m);
    assert_int_equal(tl_hmap_put(&m, 0, 1), TL_ERR_INVALID_ARG);
    assert_non_null(strstr(tl_last_error(), "key 0"));
    assert_false(tl_hmap_get(&m, 0, NULL));
    assert_false(tl_hmap_del(&m, 0));
    assert_false(tl_hmap_del(&m, 5));
    for (uint64_t k = 1; k <= 8; k++) // exactly full at cap 16
        assert_int_equal(tl_hmap_put(&m, k, k * 10), TL_OK);
    assert_int_equal(m.cap, 16);
    tl_alloc_fail_after(1);
    assert_int_equal(tl_hmap_put(&m, 9, 90), TL_ERR_NOMEM); // growing fails
    tl_alloc_fail_after(0);
    assert_int_equal(m.n, 8); // unchanged and still whole
    for (uint64_t k = 1; k <= 8; k++) {
        uint64_t v = 0;
        assert_true(tl_hmap_get(&m, k, &v) && v == k * 10);
    }
    assert_int_equal(tl_hmap_put(&m, 3, 33), TL_OK); // replacing never allocates
    assert_int_equal(tl_hmap_reserve(&m, 1000), TL_OK);
    assert_int_equal(m.cap, 2048);
    assert_int_equal(tl_hmap_reserve(&m, SIZE_MAX / 2), TL_ERR_NOMEM);
    uint64_t v = 0;
    assert_true(tl_hmap_get(&m, 3, &v) && v == 33);
    check_invariant(&m);
    tl_hmap_free(&m);
    tl_hmap_free(NULL);
}

TL_TEST_MAIN(cmocka_unit_test(test_hash_published_vectors),
             cmocka_unit_test(test_hmap_random_ops_match_linear_scan),
             cmocka_unit_test(test_hmap_colliding_keys_and_wraparound),
             cmocka_unit_test(test_hmap_multi_entries), cmocka_unit_test(test_hmap_clear),
             cmocka_unit_test(test_hmap_bad_input_and_alloc_failure))
