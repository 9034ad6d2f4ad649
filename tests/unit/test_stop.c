/* Tests for src/engine/stop: stop strings across pieces, hold-back, against a brute force. */
#include "tl_test.h"

#include "core/error.h"
#include "engine/stop.h"

static char *tl_test_strndup_(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

// Feeds pieces one by one like the engine does; returns the released text (malloc'd) and
// whether a stop string ended it. Checks that every release extends the previous one.
static char *stream(const char *const *stops, int n_stops, const char *const *pieces, int n_pieces,
                    bool *stopped)
{
    struct tl_stop_set s;
    assert_int_equal(tl_stop_set_init(&s, stops, n_stops), TL_OK);
    char text[4096] = "";
    size_t len = 0, released = 0;
    *stopped = false;
    for (int i = 0; i < n_pieces && !*stopped; i++) {
        size_t pl = strlen(pieces[i]);
        memcpy(text + len, pieces[i], pl);
        len += pl;
        size_t end;
        *stopped = tl_stop_scan(&s, text, len, released, &end);
        assert_true(end >= released && end <= len);
        released = end;
    }
    if (!*stopped) released = len; // end of generation: the held-back text is released
    tl_stop_set_free(&s);
    return tl_test_strndup_(text, released);
}

static void test_split_across_pieces(void **state)
{
    (void)state;
    const char *stops[] = {"o w"};
    const char *pieces[] = {"Hel", "lo", " wo", "rld"};
    bool stopped;
    char *out = stream(stops, 1, pieces, 4, &stopped);
    assert_true(stopped);
    assert_string_equal(out, "Hell");
    free(out);
}

static void test_hold_back_then_release(void **state)
{
    (void)state;
    struct tl_stop_set s;
    const char *stops[] = {"END", "\n\n"};
    assert_int_equal(tl_stop_set_init(&s, stops, 2), TL_OK);
    size_t end;
    assert_false(tl_stop_scan(&s, "abcE", 4, 0, &end));
    assert_int_equal(end, 3); // "E" may begin "END"
    assert_false(tl_stop_scan(&s, "abcEN", 5, 3, &end));
    assert_int_equal(end, 3);
    assert_false(tl_stop_scan(&s, "abcENx", 6, 3, &end));
    assert_int_equal(end, 6); // decided: not a stop
    assert_false(tl_stop_scan(&s, "abcENx\n", 7, 6, &end));
    assert_int_equal(end, 6);
    assert_true(tl_stop_scan(&s, "abcENx\n\nmore", 12, 6, &end));
    assert_int_equal(end, 6);
    tl_stop_set_free(&s);
}

static void test_full_match_beats_partial_and_overlaps(void **state)
{
    (void)state;
    struct tl_stop_set s;
    const char *stops[] = {"abcd", "bc"};
    assert_int_equal(tl_stop_set_init(&s, stops, 2), TL_OK);
    size_t end;
    assert_true(tl_stop_scan(&s, "xabc", 4, 0, &end));
    assert_int_equal(end, 2);
    tl_stop_set_free(&s);
    const char *st2[] = {"aab"};
    assert_int_equal(tl_stop_set_init(&s, st2, 1), TL_OK);
    assert_true(tl_stop_scan(&s, "aaab", 4, 0, &end));
    assert_int_equal(end, 1);
    assert_false(tl_stop_scan(&s, "aaa", 3, 0, &end));
    assert_int_equal(end, 1); // "aa" may still begin "aab"
    tl_stop_set_free(&s);
    // UTF-8: a multi-byte stop string split inside a character.
    const char *st3[] = {"\xE2\x82\xAC!"}; // "€!"
    const char *pieces[] = {"price 5", "\xE2\x82", "\xAC", "! ok"};
    bool stopped;
    char *out = stream(st3, 1, pieces, 4, &stopped);
    assert_true(stopped);
    assert_string_equal(out, "price 5");
    free(out);
}

// Brute force: after each piece, the first stop occurrence in the whole text so far.
static char *reference(const char *const *stops, int n_stops, const char *const *pieces,
                       int n_pieces, bool *stopped)
{
    char text[4096] = "";
    size_t len = 0;
    for (int i = 0; i < n_pieces; i++) {
        size_t pl = strlen(pieces[i]);
        memcpy(text + len, pieces[i], pl);
        len += pl;
        text[len] = '\0';
        for (size_t p = 0; p < len; p++)
            for (int k = 0; k < n_stops; k++)
                if (!strncmp(text + p, stops[k], strlen(stops[k]))) {
                    *stopped = true;
                    return tl_test_strndup_(text, p);
                }
    }
    *stopped = false;
    return tl_test_strndup_(text, len);
}

static void test_random_against_brute_force(void **state)
{
    (void)state;
    uint64_t x = 2024;
#define RND(n) ((int)((tl_xorshift64s(&x) >> 33) % (uint64_t)(n)))
    for (int iter = 0; iter < 3000; iter++) {
        char stop_buf[4][8], piece_buf[24][6];
        const char *stops[4], *pieces[24];
        int n_stops = 1 + RND(4), n_pieces = 1 + RND(24);
        for (int k = 0; k < n_stops; k++) {
            int l = 1 + RND(5);
            for (int j = 0; j < l; j++)
                stop_buf[k][j] = (char)('a' + RND(3));
            stop_buf[k][l] = '\0';
            stops[k] = stop_buf[k];
        }
        for (int i = 0; i < n_pieces; i++) {
            int l = RND(5);
            for (int j = 0; j < l; j++)
                piece_buf[i][j] = (char)('a' + RND(3));
            piece_buf[i][l] = '\0';
            pieces[i] = piece_buf[i];
        }
        bool s1, s2;
        char *got = stream(stops, n_stops, pieces, n_pieces, &s1);
        char *want = reference(stops, n_stops, pieces, n_pieces, &s2);
        if (s1 != s2 || strcmp(got, want))
            fail_msg("iteration %d: got '%s' (%d), want '%s' (%d)", iter, got, s1, want, s2);
        free(got);
        free(want);
    }
#undef RND
}

static void test_bad_sets(void **state)
{
    (void)state;
    struct tl_stop_set s;
    const char *empty[] = {"ok", ""};
    assert_int_equal(tl_stop_set_init(&s, empty, 2), TL_ERR_INVALID_ARG);
    assert_non_null(strstr(tl_last_error(), "empty"));
    const char *null[] = {NULL};
    assert_int_equal(tl_stop_set_init(&s, null, 1), TL_ERR_INVALID_ARG);
    assert_int_equal(tl_stop_set_init(&s, NULL, TL_STOP_MAX_STRINGS + 1), TL_ERR_INVALID_ARG);
    char *huge = malloc(TL_STOP_MAX_BYTES + 2);
    memset(huge, 'x', TL_STOP_MAX_BYTES + 1);
    huge[TL_STOP_MAX_BYTES + 1] = '\0';
    const char *big[] = {huge};
    assert_int_equal(tl_stop_set_init(&s, big, 1), TL_ERR_INVALID_ARG);
    free(huge);
    assert_int_equal(tl_stop_set_init(&s, NULL, 0), TL_OK);
    size_t end;
    assert_false(tl_stop_scan(&s, "abc", 3, 0, &end));
    assert_int_equal(end, 3);
    tl_stop_set_free(&s);
}

TL_TEST_MAIN(cmocka_unit_test(test_split_across_pieces),
             cmocka_unit_test(test_hold_back_then_release),
             cmocka_unit_test(test_full_match_beats_partial_and_overlaps),
             cmocka_unit_test(test_random_against_brute_force), cmocka_unit_test(test_bad_sets))
