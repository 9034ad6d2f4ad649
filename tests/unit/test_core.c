/* Tests for src/core: UTF-8 helpers, dtype table, allocation guards, the thread pool. */
#include "tl_test.h"

#include "core/alloc.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/pool.h"
#include "core/utf8.h"

#include <math.h>
#include <stdatomic.h>

static void test_utf8_decode_encode_roundtrip(void **state)
{
    (void)state;
    const uint32_t cps[] = {0x24, 0xA2, 0x939, 0x20AC, 0xD55C, 0x10348, 0x10FFFF};
    for (size_t i = 0; i < sizeof(cps) / sizeof(cps[0]); i++) {
        char buf[4];
        uint32_t back = 0;
        int n = tl_utf8_encode(cps[i], buf);
        assert_true(n >= 1);
        assert_int_equal(tl_utf8_decode(buf, (size_t)n, &back), n);
        assert_int_equal(back, cps[i]);
    }
    char tmp[4];
    assert_int_equal(tl_utf8_encode(0xD800, tmp), 0);
    assert_int_equal(tl_utf8_encode(0x110000, tmp), 0);
}

static void test_utf8_rejects_invalid(void **state)
{
    (void)state;
    assert_false(tl_utf8_is_valid("\xC0\xAF", 2));         // overlong '/'
    assert_false(tl_utf8_is_valid("\xED\xA0\x80", 3));     // surrogate
    assert_false(tl_utf8_is_valid("\xF4\x90\x80\x80", 4)); // > U+10FFFF
    assert_false(tl_utf8_is_valid("\x80", 1));
    assert_false(tl_utf8_is_valid("\xE2\x82", 2)); // truncated
    assert_true(tl_utf8_is_valid("h\xC3\xA9llo \xE2\x82\xAC", 10));
}

static void test_utf8_complete_len_holds_back_partial(void **state)
{
    (void)state;
    const char *euro = "ab\xE2\x82\xAC"; // "ab€"
    assert_int_equal(tl_utf8_complete_len(euro, 5), 5);
    assert_int_equal(tl_utf8_complete_len(euro, 4), 2);
    assert_int_equal(tl_utf8_complete_len(euro, 3), 2);
    assert_int_equal(tl_utf8_complete_len(euro, 2), 2);
    assert_int_equal(tl_utf8_complete_len("a\x80", 2), 2); // invalid byte is not held back
    assert_int_equal(tl_utf8_complete_len("\xF0\x9F\x98", 3), 0);
}

static void test_dtype_table(void **state)
{
    (void)state;
    size_t bytes;
    assert_true(tl_dtype_row_bytes(TL_DTYPE_Q8_0, 64, &bytes));
    assert_int_equal(bytes, 68);
    assert_false(tl_dtype_row_bytes(TL_DTYPE_Q8_0, 33, &bytes));
    assert_true(tl_dtype_row_bytes(TL_DTYPE_Q4_K, 512, &bytes));
    assert_int_equal(bytes, 288);
    assert_null(tl_dtype_info(4)); // removed from ggml
    assert_null(tl_dtype_info(1000));
    enum tl_dtype t;
    assert_true(tl_dtype_from_name("bf16", &t));
    assert_int_equal(t, TL_DTYPE_BF16);
    assert_false(tl_dtype_row_bytes(TL_DTYPE_F32, INT64_MAX, &bytes));
}

static void test_alloc_overflow_and_injection(void **state)
{
    (void)state;
    assert_null(tl_malloc_array(SIZE_MAX / 2, 4));
    tl_alloc_fail_after(2);
    void *a = tl_malloc(8);
    void *b = tl_malloc(8);
    void *c = tl_malloc(8);
    assert_non_null(a);
    assert_null(b);
    assert_non_null(c);
    free(a);
    free(c);
}

struct pool_arg {
    int64_t n;
    atomic_int *hits; // (n)
    atomic_int calls;
};

static void pool_fn(void *p, int ith, int nth)
{
    struct pool_arg *a = p;
    int64_t b, e;
    tl_pool_range(a->n, 4, ith, nth, &b, &e);
    for (int64_t i = b; i < e; i++) atomic_fetch_add(&a->hits[i], 1);
    atomic_fetch_add(&a->calls, 1);
}

static void test_pool_covers_each_item_once(void **state)
{
    (void)state;
    for (int nt = 1; nt <= 4; nt++) {
        struct tl_pool *pool = tl_pool_create(nt);
        assert_non_null(pool);
        for (int64_t n = 0; n < 70; n += 7) {
            atomic_int hits[70];
            for (int i = 0; i < 70; i++) atomic_init(&hits[i], 0);
            struct pool_arg a = {.n = n, .hits = hits};
            atomic_init(&a.calls, 0);
            for (int rep = 0; rep < 3; rep++) tl_pool_run(pool, pool_fn, &a);
            assert_int_equal(atomic_load(&a.calls), 3 * nt);
            for (int64_t i = 0; i < n; i++) assert_int_equal(atomic_load(&hits[i]), 3);
        }
        tl_pool_destroy(pool);
    }
}

static void test_error_message(void **state)
{
    (void)state;
    tl_status st = tl__errorf(TL_ERR_FORMAT, "bad magic %d", 7);
    assert_int_equal(st, TL_ERR_FORMAT);
    tl__error_prefix(st, "x.gguf");
    assert_string_equal(tl_last_error(), "x.gguf: bad magic 7");
}

TL_TEST_MAIN(cmocka_unit_test(test_utf8_decode_encode_roundtrip),
             cmocka_unit_test(test_utf8_rejects_invalid),
             cmocka_unit_test(test_utf8_complete_len_holds_back_partial),
             cmocka_unit_test(test_dtype_table), cmocka_unit_test(test_alloc_overflow_and_injection),
             cmocka_unit_test(test_pool_covers_each_item_once),
             cmocka_unit_test(test_error_message))
