/*
 * The OpenAI shapes of parsed replies (src/server/chat_reply.c): the non-streaming message
 * (content null beside tool_calls, reasoning_content, finish_reason "tool_calls") and the
 * streaming deltas (a call's first delta has index, id, type, name and empty arguments, the
 * next its arguments). Oracle: the streamed deltas, folded together the way OpenAI's client
 * libraries accumulate them, must give exactly the non-streaming message, for every syntax's
 * sample reply cut into pieces of every size from 1 to 7 bytes.
 */
#include "tl_test.h"

#include "server/chat_reply.h"

#include <jansson.h>

static const char *const names[] = {"get_weather", "get_time"};

static struct tl_toolcall_config cfg(enum tl_tool_syntax s)
{
    struct tl_toolcall_config c = {.syntax = s,
                                   .parse_calls = true,
                                   .tool_names = names,
                                   .n_tool_names = 2,
                                   .reasoning = {"<think>", "</think>"},
                                   .id_seed = 7};
    return c;
}

// Folds deltas into a message as the OpenAI SDKs do: strings appended, tool_calls merged by
// index (id, type, name set once; arguments appended).
static void fold(json_t *msg, json_t *delta)
{
    const char *key;
    json_t *v;
    json_object_foreach (delta, key, v) {
        if (!strcmp(key, "tool_calls")) {
            json_t *calls = json_object_get(msg, "tool_calls");
            if (!calls) {
                calls = json_array();
                json_object_set_new(msg, "tool_calls", calls);
            }
            size_t i;
            json_t *d;
            json_array_foreach (v, i, d) {
                size_t index = (size_t)json_integer_value(json_object_get(d, "index"));
                assert_true(json_is_integer(json_object_get(d, "index")));
                json_t *fn = json_object_get(d, "function");
                if (index == json_array_size(calls)) {
                    // the first delta of a call: everything but the arguments' rest
                    assert_non_null(json_object_get(d, "id"));
                    assert_string_equal(json_string_value(json_object_get(d, "type")), "function");
                    assert_non_null(json_object_get(fn, "name"));
                    json_array_append_new(
                        calls, json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", json_object_get(d, "id"),
                                         "type", "function", "function", "name",
                                         json_object_get(fn, "name"), "arguments",
                                         json_object_get(fn, "arguments")));
                    continue;
                }
                assert_true(index < json_array_size(calls));
                assert_null(json_object_get(d, "id")); // later deltas carry arguments only
                json_t *have = json_object_get(json_array_get(calls, index), "function");
                char *joined = NULL;
                assert_true(asprintf(&joined, "%s%s",
                                     json_string_value(json_object_get(have, "arguments")),
                                     json_string_value(json_object_get(fn, "arguments"))) > 0);
                json_object_set_new(have, "arguments", json_string(joined));
                free(joined);
            }
            continue;
        }
        json_t *have = json_object_get(msg, key);
        char *joined = NULL;
        assert_true(asprintf(&joined, "%s%s", have ? json_string_value(have) : "",
                             json_string_value(v)) >= 0);
        json_object_set_new(msg, key, json_string(joined));
        free(joined);
    }
}

// Parses reply whole (non-streaming) and streamed in pieces of `piece` bytes; checks that the
// folded stream equals the message; returns the message (new reference).
static json_t *both_ways(enum tl_tool_syntax s, const char *reply, int piece, const char **finish)
{
    struct tl_toolcall_config c = cfg(s);
    struct tl_srv_chat_reply whole, stream;
    assert_true(tl_srv_chat_reply_init(&whole, &c, false, false));
    assert_true(tl_srv_chat_reply_feed(&whole, reply, strlen(reply)));
    assert_true(tl_srv_chat_reply_finish(&whole));
    json_t *msg = tl_srv_chat_reply_message(&whole);
    *finish = tl_srv_chat_reply_finish_str(&whole, "stop");

    assert_true(tl_srv_chat_reply_init(&stream, &c, true, false));
    json_t *folded = json_pack("{s:s}", "role", "assistant");
    size_t len = strlen(reply);
    for (size_t at = 0; at <= len; at += (size_t)piece) {
        size_t n = len - at < (size_t)piece ? len - at : (size_t)piece;
        if (n) assert_true(tl_srv_chat_reply_feed(&stream, reply + at, n));
        if (at + (size_t)piece > len) assert_true(tl_srv_chat_reply_finish(&stream));
        json_t *ds = tl_srv_chat_reply_take_deltas(&stream);
        size_t i;
        json_t *d;
        json_array_foreach (ds, i, d)
            fold(folded, d);
        json_decref(ds);
    }
    if (!json_object_get(folded, "content"))
        json_object_set_new(folded, "content", json_is_null(json_object_get(msg, "content"))
                                                   ? json_null()
                                                   : json_string(""));
    if (!json_equal(folded, msg)) {
        char *a = json_dumps(folded, JSON_SORT_KEYS), *b = json_dumps(msg, JSON_SORT_KEYS);
        fail_msg("pieces of %d: streamed %s vs message %s", piece, a, b);
    }
    assert_string_equal(tl_srv_chat_reply_finish_str(&stream, "stop"), *finish);
    json_decref(folded);
    tl_srv_chat_reply_free(&whole);
    tl_srv_chat_reply_free(&stream);
    return msg;
}

static const struct {
    enum tl_tool_syntax syntax;
    const char *reply;
    const char *content; // NULL: null
    const char *reasoning; // NULL: absent
    int n_calls;
} samples[] = {
    {TL_TOOL_HERMES,
     "<think>Weather.</think>Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
     "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>{\"name\": \"get_time\", \"arguments\": "
     "{}}</tool_call>",
     "Checking.", "Weather.", 2},
    {TL_TOOL_MISTRAL, "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}]",
     NULL, NULL, 1},
    {TL_TOOL_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}", NULL,
     NULL, 1},
    {TL_TOOL_FUNCTIONARY_V32, "all\nSure.>>>get_time\n{}", "Sure.", NULL, 1},
    {TL_TOOL_HERMES, "<tool_call>{\"name\": \"rm\", \"arguments\": {}}</tool_call>",
     "<tool_call>{\"name\": \"rm\", \"arguments\": {}}</tool_call>", NULL, 0},
    {TL_TOOL_GENERIC, "Just text, no calls.", "Just text, no calls.", NULL, 0},
};

static void test_stream_folds_to_message(void **state)
{
    for (size_t k = 0; k < sizeof(samples) / sizeof(samples[0]); k++) {
        for (int piece = 1; piece <= 7; piece++) {
            const char *finish;
            json_t *msg = both_ways(samples[k].syntax, samples[k].reply, piece, &finish);
            assert_string_equal(json_string_value(json_object_get(msg, "role")), "assistant");
            json_t *content = json_object_get(msg, "content");
            if (samples[k].content)
                assert_string_equal(json_string_value(content), samples[k].content);
            else
                assert_true(json_is_null(content));
            json_t *r = json_object_get(msg, "reasoning_content");
            if (samples[k].reasoning)
                assert_string_equal(json_string_value(r), samples[k].reasoning);
            else
                assert_null(r);
            json_t *calls = json_object_get(msg, "tool_calls");
            assert_int_equal(calls ? json_array_size(calls) : 0, samples[k].n_calls);
            assert_string_equal(finish, samples[k].n_calls ? "tool_calls" : "stop");
            for (size_t i = 0; calls && i < json_array_size(calls); i++) {
                json_t *c = json_array_get(calls, i);
                assert_string_equal(json_string_value(json_object_get(c, "type")), "function");
                assert_true(json_string_length(json_object_get(c, "id")) > 0);
                json_t *args = json_object_get(json_object_get(c, "function"), "arguments");
                assert_true(json_is_string(args));
                json_t *parsed = json_loads(json_string_value(args), 0, NULL);
                assert_true(json_is_object(parsed)); // arguments: JSON text of an object
                json_decref(parsed);
            }
            json_decref(msg);
        }
    }
}

static void test_single_call_and_length(void **state)
{
    struct tl_toolcall_config c = cfg(TL_TOOL_HERMES);
    struct tl_srv_chat_reply r;
    assert_true(tl_srv_chat_reply_init(&r, &c, false, true)); // parallel_tool_calls false
    const char *two = "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>"
                      "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call>";
    assert_true(tl_srv_chat_reply_feed(&r, two, strlen(two)));
    assert_true(tl_srv_chat_reply_finish(&r));
    json_t *m = tl_srv_chat_reply_message(&r);
    json_t *calls = json_object_get(m, "tool_calls");
    assert_int_equal(json_array_size(calls), 1);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(json_array_get(calls, 0), "function"),
                                          "name")),
        "get_time");
    // a call cut off by max_tokens keeps finish_reason "length"
    assert_string_equal(tl_srv_chat_reply_finish_str(&r, "length"), "length");
    json_decref(m);
    tl_srv_chat_reply_free(&r);
}

TL_TEST_MAIN(cmocka_unit_test(test_stream_folds_to_message),
             cmocka_unit_test(test_single_call_and_length))
