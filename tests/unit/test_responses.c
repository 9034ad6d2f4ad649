/*
 * Tests for src/server/responses.c and responses_stream.c / responses_reply.c, the pure parts of
 * /v1/responses: the translation of a Responses body into the chat body an OpenAI client would
 * write (expected bodies written by hand from the two APIs' references), the 400s / 404 naming
 * their field, previous_response_id over the store (depth limit included), and the stream's
 * events: their order and sequence numbers, and the final Response built from them equal to
 * the one responses_reply.c builds from the same answer as a whole chat completion.
 */
#include "tl_test.h"

#include "server/responses.h"
#include "server/state.h"

static struct tl_server srv;

static void setup_srv(void)
{
    memset(&srv, 0, sizeof(srv));
    srv.model_name = "m";
    srv.resp_store = tl_resp_store_create(10, 1 << 20, INT64_MAX / 4);
}

static json_t *load(const char *text)
{
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);
    if (!j) fail_msg("bad test JSON: %s: %s", e.text, text);
    return j;
}

// Translates body; on success checks the chat body equals want (JSON text).
static void translates_to(const char *body, const char *want)
{
    json_t *b = load(body), *chat = NULL, *ctx = NULL;
    struct tl_oai_error err;
    if (!tl_srv_resp_translate(&srv, b, &chat, &ctx, &err))
        fail_msg("refused: %s (%s)", err.message, err.param);
    json_t *w = load(want);
    char *got = json_dumps(chat, JSON_SORT_KEYS | JSON_COMPACT);
    char *exp = json_dumps(w, JSON_SORT_KEYS | JSON_COMPACT);
    if (strcmp(got, exp)) fail_msg("chat body\n got  %s\n want %s", got, exp);
    free(got);
    free(exp);
    json_decref(w);
    json_decref(b);
    json_decref(chat);
    json_decref(ctx);
}

static void refused(const char *body, int status, const char *param)
{
    json_t *b = load(body), *chat = NULL, *ctx = NULL;
    struct tl_oai_error err;
    if (tl_srv_resp_translate(&srv, b, &chat, &ctx, &err)) fail_msg("accepted: %s", body);
    assert_null(chat);
    assert_null(ctx);
    assert_int_equal(err.http_status, status);
    if (strcmp(err.param, param)) fail_msg("param '%s', want '%s' (%s)", err.param, param, body);
    json_decref(b);
}

static void test_translate_text_and_items(void **state)
{
    (void)state;
    setup_srv();
    translates_to("{\"model\":\"m\",\"input\":\"Hi\",\"instructions\":\"Be kind\","
                  "\"max_output_tokens\":5,\"temperature\":0.5,\"top_p\":0.9,\"stream\":true}",
                  "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"Be kind\"},"
                  "{\"role\":\"user\",\"content\":\"Hi\"}],\"max_completion_tokens\":5,"
                  "\"temperature\":0.5,\"top_p\":0.9,\"stream\":true}");
    // Parts joined by newlines; an output message, then two calls join it; two outputs.
    translates_to(
        "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"a\"},"
        "{\"type\":\"input_text\",\"text\":\"b\"}]},"
        "{\"type\":\"message\",\"role\":\"assistant\",\"id\":\"msg_1\",\"status\":\"completed\","
        "\"content\":[{\"type\":\"output_text\",\"text\":\"Let me see\",\"annotations\":[]}]},"
        "{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[]},"
        "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"f\",\"arguments\":\"{}\"},"
        "{\"type\":\"function_call\",\"call_id\":\"c2\",\"name\":\"g\",\"arguments\":\"{\\\"x\\\":"
        "1}\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"1\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"c2\",\"output\":\"2\"},"
        "{\"role\":\"developer\",\"content\":\"d\"}]}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\nb\"},"
        "{\"role\":\"assistant\",\"content\":\"Let me see\",\"tool_calls\":["
        "{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}},"
        "{\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":"
        "\"{\\\"x\\\":1}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"1\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c2\",\"content\":\"2\"},"
        "{\"role\":\"developer\",\"content\":\"d\"}]}");
    // Flat function tools wrapped; a named tool_choice; json_schema into response_format.
    translates_to(
        "{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"description\":\"D\","
        "\"parameters\":{\"type\":\"object\"},\"strict\":true}],"
        "\"tool_choice\":{\"type\":\"function\",\"name\":\"f\"},\"parallel_tool_calls\":false,"
        "\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"n\",\"schema\":"
        "{\"type\":\"object\"},\"strict\":true}}}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\","
        "\"function\":{\"name\":\"f\",\"description\":\"D\",\"parameters\":{\"type\":\"object\"},"
        "\"strict\":true}}],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}},"
        "\"parallel_tool_calls\":false,\"response_format\":{\"type\":\"json_schema\","
        "\"json_schema\":{\"name\":\"n\",\"schema\":{\"type\":\"object\"},\"strict\":true}}}");
    translates_to("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_object\"}},"
                  "\"tool_choice\":\"none\",\"store\":false,\"metadata\":{\"k\":\"v\"},"
                  "\"include\":[],\"truncation\":\"disabled\",\"reasoning\":{}}",
                  "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"none\","
                  "\"response_format\":{\"type\":\"json_object\"}}");
    tl_resp_store_destroy(srv.resp_store);
}

static void test_translate_refusals(void **state)
{
    (void)state;
    setup_srv();
    refused("{\"input\":\"x\",\"tools\":[{\"type\":\"web_search_preview\"}]}", 400, "tools[0]");
    refused("{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\"},"
            "{\"type\":\"computer_use_preview\"}]}",
            400, "tools[1]");
    refused("{\"input\":\"x\",\"tools\":[{\"type\":\"function\"}]}", 400, "tools[0]");
    refused("{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"x\":1}]}", 400,
            "tools[0]");
    refused("{\"input\":\"x\",\"seed\":1}", 400, "seed");
    refused("{\"input\":\"x\",\"stop\":\"a\"}", 400, "stop");
    refused("{\"input\":\"x\",\"include\":[\"file_search_call.results\"]}", 400, "include");
    refused("{\"input\":\"x\",\"background\":true}", 400, "background");
    refused("{\"input\":\"x\",\"reasoning\":{\"effort\":\"low\"}}", 400, "reasoning.effort");
    refused("{\"input\":\"x\",\"reasoning\":{\"summary\":\"auto\"}}", 400, "reasoning.summary");
    refused("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"yaml\"}}}", 400, "text.format.type");
    refused("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\"}}}", 400,
            "text.format.schema");
    refused("{\"input\":\"x\",\"text\":{\"verbosity\":\"low\"}}", 400, "text.verbosity");
    refused("{\"input\":\"x\",\"max_output_tokens\":0}", 400, "max_output_tokens");
    refused("{\"input\":\"x\",\"store\":\"yes\"}", 400, "store");
    refused("{\"input\":\"x\",\"instructions\":5}", 400, "instructions");
    refused("{\"input\":\"x\",\"tool_choice\":{\"type\":\"file_search\"}}", 400, "tool_choice");
    refused("{}", 400, "input");
    refused("{\"input\":[]}", 400, "input");
    refused("{\"input\":5}", 400, "input");
    refused("{\"input\":[\"x\"]}", 400, "input[0]");
    refused("{\"input\":[{\"role\":\"tool\",\"content\":\"x\"}]}", 400, "input[0]");
    refused("{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\"}]}]}", 400,
            "input[0].content[0]");
    refused("{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":\"1\"}]}",
            400, "input[0]");
    refused("{\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\"}]}", 400,
            "input[0]");
    refused("{\"input\":[{\"type\":\"item_reference\",\"id\":\"x\"}]}", 400, "input[0]");
    refused("{\"input\":\"x\",\"previous_response_id\":\"resp_none\"}", 404,
            "previous_response_id");
    refused("{\"input\":\"x\",\"previous_response_id\":7}", 400, "previous_response_id");
    tl_resp_store_destroy(srv.resp_store);
}

static void test_previous_response(void **state)
{
    (void)state;
    setup_srv();
    json_t *resp = load("{\"id\":\"resp_a\"}");
    json_t *conv = load("[{\"role\":\"user\",\"content\":\"Hi\"},{\"type\":\"message\",\"role\":"
                        "\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Yo\"}]},"
                        "{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\","
                        "\"arguments\":\"{}\"}]");
    assert_true(tl_resp_store_put(srv.resp_store, "resp_a", resp, conv, 3, 0));
    assert_true(tl_resp_store_put(srv.resp_store, "resp_deep", resp, conv, TL_RESP_MAX_DEPTH, 0));
    translates_to(
        "{\"previous_response_id\":\"resp_a\",\"instructions\":\"I\",\"input\":[{\"type\":"
        "\"function_call_output\",\"call_id\":\"c\",\"output\":\"r\"}]}",
        "{\"messages\":[{\"role\":\"system\",\"content\":\"I\"},{\"role\":\"user\",\"content\":"
        "\"Hi\"},{\"role\":\"assistant\",\"content\":\"Yo\",\"tool_calls\":[{\"id\":\"c\",\"type\":"
        "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\","
        "\"tool_call_id\":\"c\",\"content\":\"r\"}]}");
    // The context: depth + 1, the conversation without the instructions.
    json_t *b = load("{\"previous_response_id\":\"resp_a\",\"input\":\"more\"}"), *chat, *ctx;
    struct tl_oai_error err;
    assert_true(tl_srv_resp_translate(&srv, b, &chat, &ctx, &err));
    assert_int_equal(json_integer_value(json_object_get(ctx, "depth")), 4);
    assert_int_equal(json_array_size(json_object_get(ctx, "conversation")), 4);
    json_decref(b);
    json_decref(chat);
    json_decref(ctx);
    refused("{\"previous_response_id\":\"resp_deep\",\"input\":\"x\"}", 400,
            "previous_response_id");
    json_decref(resp);
    json_decref(conv);
    tl_resp_store_destroy(srv.resp_store);
}

// The chunk of one chat delta (JSON text of the delta), with a finish reason or not.
static json_t *chunk(const char *delta, const char *finish)
{
    char buf[600];
    snprintf(buf, sizeof(buf),
             "{\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":%s,"
             "\"finish_reason\":%s}]}",
             delta, finish ? finish : "null");
    return load(buf);
}

static void strip_ids(json_t *output)
{
    for (size_t i = 0; i < json_array_size(output); i++)
        json_object_del(json_array_get(output, i), "id");
}

static void test_stream_events(void **state)
{
    (void)state;
    json_t *ctx = load("{\"id\":\"resp_s\",\"model\":\"m\",\"created_at\":1}");
    struct tl_resp_stream *st = tl_resp_stream_create(ctx);
    const char *deltas[] = {
        "{\"role\":\"assistant\",\"content\":\"\"}",
        "{\"reasoning_content\":\"th\"}",
        "{\"reasoning_content\":\"ink\"}",
        "{\"content\":\"Hel\"}",
        "{\"content\":\"lo\"}",
        "{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":"
        "{\"name\":\"f\",\"arguments\":\"\"}}]}",
        "{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"a\\\":1}\"}}]}",
    };
    json_t *all = json_array();
    for (size_t i = 0; i < sizeof(deltas) / sizeof(deltas[0]); i++) {
        json_t *evs = tl_resp_stream_chunk(st, chunk(deltas[i], NULL));
        assert_non_null(evs);
        json_array_extend(all, evs);
        json_decref(evs);
    }
    json_t *evs = tl_resp_stream_chunk(st, chunk("{}", "\"tool_calls\""));
    json_array_extend(all, evs);
    json_decref(evs);
    json_t *final = NULL;
    evs = tl_resp_stream_end(st, 10, 7, 2, &final);
    assert_non_null(evs);
    json_array_extend(all, evs);
    json_decref(evs);
    static const char *const want[] = {
        "response.created", "response.in_progress",
        // reasoning
        "response.output_item.added", "response.content_part.added",
        "response.reasoning_text.delta", "response.reasoning_text.delta",
        "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
        // message
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done",
        // call
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done", "response.completed"};
    assert_int_equal(json_array_size(all), sizeof(want) / sizeof(want[0]));
    for (size_t i = 0; i < json_array_size(all); i++) {
        json_t *ev = json_array_get(all, i);
        assert_string_equal(json_string_value(json_object_get(ev, "type")), want[i]);
        assert_int_equal(json_integer_value(json_object_get(ev, "sequence_number")), (int64_t)i);
    }
    assert_string_equal(json_string_value(json_object_get(json_array_get(all, 13), "text")),
                        "Hello");
    assert_string_equal(json_string_value(json_object_get(json_array_get(all, 18), "arguments")),
                        "{\"a\":1}");
    // The final Response equals the one built from the whole chat completion (ids aside).
    json_t *completion = load(
        "{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"Hello\","
        "\"reasoning_content\":\"think\",\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
        "\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}}]},\"finish_reason\":"
        "\"tool_calls\"}],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":7,"
        "\"prompt_tokens_details\":{\"cached_tokens\":2}}}");
    json_t *whole = tl_srv_resp_from_chat(ctx, completion);
    assert_non_null(whole);
    strip_ids(json_object_get(whole, "output"));
    json_t *fin = json_deep_copy(final);
    strip_ids(json_object_get(fin, "output"));
    char *a = json_dumps(fin, JSON_SORT_KEYS | JSON_COMPACT);
    char *b = json_dumps(whole, JSON_SORT_KEYS | JSON_COMPACT);
    if (strcmp(a, b)) fail_msg("stream final\n %s\nwhole\n %s", a, b);
    assert_string_equal(json_string_value(json_object_get(final, "status")), "completed");
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(final, "usage"), "total_tokens")), 17);
    free(a);
    free(b);
    json_decref(fin);
    json_decref(whole);
    json_decref(completion);
    json_decref(final);
    json_decref(all);
    tl_resp_stream_destroy(st);
    json_decref(ctx);
}

// A reply cut by the length limit with no text: one empty message, status incomplete.
static void test_stream_incomplete_empty(void **state)
{
    (void)state;
    json_t *ctx = load("{\"id\":\"resp_s\"}");
    struct tl_resp_stream *st = tl_resp_stream_create(ctx);
    json_decref(tl_resp_stream_chunk(st, chunk("{\"role\":\"assistant\",\"content\":\"\"}", NULL)));
    json_decref(tl_resp_stream_chunk(st, chunk("{}", "\"length\"")));
    json_t *final = NULL;
    json_t *evs = tl_resp_stream_end(st, 3, 4, 0, &final);
    assert_string_equal(json_string_value(json_object_get(final, "status")), "incomplete");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(final, "incomplete_details"), "reason")),
        "max_output_tokens");
    json_t *out = json_object_get(final, "output");
    assert_int_equal(json_array_size(out), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(out, 0), "status")),
                        "incomplete");
    json_t *last = json_array_get(evs, json_array_size(evs) - 1);
    assert_string_equal(json_string_value(json_object_get(last, "type")), "response.incomplete");
    json_decref(evs);
    json_decref(final);
    tl_resp_stream_destroy(st);
    json_decref(ctx);
}

TL_TEST_MAIN(cmocka_unit_test(test_translate_text_and_items),
             cmocka_unit_test(test_translate_refusals), cmocka_unit_test(test_previous_response),
             cmocka_unit_test(test_stream_events), cmocka_unit_test(test_stream_incomplete_empty))
