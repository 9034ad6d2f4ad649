/*
 * Tests for src/server/responses_store.c, the bounded store of /v1/responses: eviction of the
 * oldest entries by count and by bytes (each entry's size computed here independently: the
 * compact JSON of its response and conversation plus its id), expiry by age on get and put,
 * replacement under the same id, delete, and an entry too large to keep at all.
 */
#include "tl_test.h"

#include "server/responses.h"

// An entry of about n bytes: {"t":"xxx..."} and an empty conversation.
static json_t *blob(size_t n)
{
    char *s = malloc(n + 1);
    memset(s, 'x', n);
    s[n] = 0;
    json_t *o = json_pack("{s:s}", "t", s);
    free(s);
    return o;
}

// The size the store must count for an entry (computed without the store's code).
static size_t entry_bytes(const char *id, json_t *resp, json_t *conv)
{
    char *a = json_dumps(resp, JSON_COMPACT), *b = json_dumps(conv, JSON_COMPACT);
    size_t n = strlen(a) + strlen(b) + strlen(id);
    free(a);
    free(b);
    return n;
}

static bool has(struct tl_resp_store *st, const char *id, int64_t now)
{
    return tl_resp_store_get(st, id, now, NULL, NULL, NULL);
}

static bool put(struct tl_resp_store *st, const char *id, size_t n, int64_t now)
{
    json_t *r = blob(n), *c = json_array();
    bool ok = tl_resp_store_put(st, id, r, c, 0, now);
    json_decref(r);
    json_decref(c);
    return ok;
}

static void test_store_count_bound(void **state)
{
    (void)state;
    struct tl_resp_store *st = tl_resp_store_create(3, 1 << 20, INT64_MAX / 2);
    assert_non_null(st);
    assert_true(put(st, "a", 10, 1) && put(st, "b", 10, 2) && put(st, "c", 10, 3));
    assert_int_equal(tl_resp_store_count(st), 3);
    assert_true(put(st, "d", 10, 4)); // the oldest (a) goes
    assert_int_equal(tl_resp_store_count(st), 3);
    assert_false(has(st, "a", 5));
    assert_true(has(st, "b", 5) && has(st, "c", 5) && has(st, "d", 5));
    assert_true(put(st, "b", 10, 6)); // replacing b makes it the newest: c is next to go
    assert_int_equal(tl_resp_store_count(st), 3);
    assert_true(put(st, "e", 10, 7));
    assert_false(has(st, "c", 8));
    assert_true(has(st, "b", 8) && has(st, "d", 8) && has(st, "e", 8));
    tl_resp_store_destroy(st);
}

static void test_store_bytes_bound(void **state)
{
    (void)state;
    json_t *r = blob(100), *c = json_array();
    size_t one = entry_bytes("a", r, c);
    json_decref(r);
    json_decref(c);
    // Room for two entries of 100 x's, not three.
    struct tl_resp_store *st = tl_resp_store_create(100, 2 * one + one / 2, INT64_MAX / 2);
    assert_true(put(st, "a", 100, 1) && put(st, "b", 100, 2));
    assert_int_equal(tl_resp_store_bytes(st), 2 * one);
    assert_true(put(st, "c", 100, 3));
    assert_false(has(st, "a", 4));
    assert_true(has(st, "b", 4) && has(st, "c", 4));
    assert_int_equal(tl_resp_store_bytes(st), 2 * one);
    // An entry larger than the whole bound is not kept and evicts nothing.
    assert_false(put(st, "huge", 3 * one, 5));
    assert_false(has(st, "huge", 6));
    assert_true(has(st, "b", 6) && has(st, "c", 6));
    // One entry of twice the size pushes out both.
    assert_true(put(st, "big", 2 * one - 20, 7));
    assert_false(has(st, "b", 8) || has(st, "c", 8));
    assert_int_equal(tl_resp_store_count(st), 1);
    tl_resp_store_destroy(st);
}

static void test_store_age_bound(void **state)
{
    (void)state;
    struct tl_resp_store *st = tl_resp_store_create(100, 1 << 20, 100);
    assert_true(put(st, "a", 5, 0) && put(st, "b", 5, 50));
    assert_true(has(st, "a", 100) && has(st, "b", 100)); // exactly 100 us old: still kept
    assert_false(has(st, "a", 120));
    assert_true(has(st, "b", 120));
    assert_int_equal(tl_resp_store_count(st), 1);
    assert_true(put(st, "c", 5, 151)); // a put expires too
    assert_false(has(st, "b", 151));
    assert_int_equal(tl_resp_store_count(st), 1);
    tl_resp_store_destroy(st);
}

static void test_store_get_delete(void **state)
{
    (void)state;
    struct tl_resp_store *st = tl_resp_store_create(10, 1 << 20, 1000);
    json_t *r = json_pack("{s:s}", "id", "resp_1"), *c = json_pack("[{s:s}]", "role", "user");
    assert_true(tl_resp_store_put(st, "resp_1", r, c, 7, 0));
    json_t *gr = NULL, *gc = NULL;
    int depth = 0;
    assert_true(tl_resp_store_get(st, "resp_1", 1, &gr, &gc, &depth));
    assert_ptr_equal(gr, r);
    assert_ptr_equal(gc, c);
    assert_int_equal(depth, 7);
    json_decref(r); // the store holds its own references
    json_decref(c);
    assert_string_equal(json_string_value(json_object_get(gr, "id")), "resp_1");
    assert_false(tl_resp_store_get(st, "resp_2", 1, &gr, &gc, &depth));
    assert_true(tl_resp_store_delete(st, "resp_1"));
    assert_false(tl_resp_store_delete(st, "resp_1"));
    assert_false(has(st, "resp_1", 2));
    assert_int_equal(tl_resp_store_count(st), 0);
    assert_int_equal(tl_resp_store_bytes(st), 0);
    tl_resp_store_destroy(st);
}

TL_TEST_MAIN(cmocka_unit_test(test_store_count_bound), cmocka_unit_test(test_store_bytes_bound),
             cmocka_unit_test(test_store_age_bound), cmocka_unit_test(test_store_get_delete))
