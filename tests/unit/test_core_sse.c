/*
 * Tests for src/core/sse.c: framing of single- and multi-line payloads, and the parser
 * against the line rules of the event-stream format (CR/LF/CRLF line ends, CRLF split across
 * reads, comments, the optional space after the colon, events without data), fed byte by byte
 * and all at once.
 */
#include "tl_test.h"

#include "core/sse.h"

struct got {
    char ev[8][64];
    int n;
};

static bool on_event(void *user, const char *data, size_t len)
{
    struct got *g = user;
    if (g->n < 8) snprintf(g->ev[g->n], sizeof(g->ev[0]), "%.*s", (int)len, data);
    g->n++;
    return true;
}

static void feed_all_ways(const char *stream, struct got *whole)
{
    struct tl_sse_parser p;
    struct got bytewise = {0};
    memset(whole, 0, sizeof(*whole));
    tl_sse_parser_init(&p);
    assert_true(tl_sse_feed(&p, stream, strlen(stream), on_event, whole));
    tl_sse_parser_free(&p);
    tl_sse_parser_init(&p);
    for (size_t i = 0; stream[i]; i++)
        assert_true(tl_sse_feed(&p, stream + i, 1, on_event, &bytewise));
    tl_sse_parser_free(&p);
    assert_int_equal(bytewise.n, whole->n);
    for (int i = 0; i < whole->n && i < 8; i++)
        assert_string_equal(bytewise.ev[i], whole->ev[i]);
}

static void test_format(void **state)
{
    (void)state;
    struct tl_sb sb;
    tl_sb_init(&sb);
    tl_sse_format(&sb, "{\"a\":1}", 7);
    assert_string_equal(sb.buf, "data: {\"a\":1}\n\n");
    sb.len = 0;
    tl_sse_format(&sb, "x\ny\r\nz", 6);
    assert_string_equal(sb.buf, "data: x\ndata: y\ndata: z\n\n");
    sb.len = 0;
    tl_sse_format(&sb, "[DONE]", 6);
    assert_string_equal(sb.buf, "data: [DONE]\n\n");
    tl_sb_free(&sb);
}

static void test_parse_rules(void **state)
{
    (void)state;
    struct got g;
    feed_all_ways(": comment\r\ndata: one\r\n\r\ndata:two\ndata:  three\n\nevent: x\n\n"
                  "data\rdata: last\r\r",
                  &g);
    assert_int_equal(g.n, 3);
    assert_string_equal(g.ev[0], "one");
    assert_string_equal(g.ev[1], "two\n three");
    assert_string_equal(g.ev[2], "\nlast");
}

static void test_roundtrip(void **state)
{
    (void)state;
    const char *payloads[] = {"{\"choices\":[]}", "", "a\nb", "[DONE]", "trailing\n"};
    struct tl_sb sb;
    tl_sb_init(&sb);
    for (size_t i = 0; i < 5; i++)
        tl_sse_format(&sb, payloads[i], strlen(payloads[i]));
    struct got g;
    feed_all_ways(sb.buf, &g);
    assert_int_equal(g.n, 5);
    for (int i = 0; i < 5; i++)
        assert_string_equal(g.ev[i], payloads[i]);
    tl_sb_free(&sb);
}

static bool stop_at_first(void *user, const char *data, size_t len)
{
    (void)data;
    (void)len;
    (*(int *)user)++;
    return false;
}

static void test_callback_can_stop(void **state)
{
    (void)state;
    struct tl_sse_parser p;
    int calls = 0;
    tl_sse_parser_init(&p);
    assert_false(tl_sse_feed(&p, "data: a\n\ndata: b\n\n", 18, stop_at_first, &calls));
    assert_int_equal(calls, 1);
    tl_sse_parser_free(&p);
}

TL_TEST_MAIN(cmocka_unit_test(test_format), cmocka_unit_test(test_parse_rules),
             cmocka_unit_test(test_roundtrip), cmocka_unit_test(test_callback_can_stop))
