/*
 * The Messages API through the whole HTTP layer, in-process against the scripted fake engine
 * (server_harness.h): errors in Anthropic's shape on every path under /v1/messages (and only
 * there), x-api-key, and allocation failures: for N = 1, 2, 3, ... the N-th allocation fails
 * while one Messages request runs (whole, streamed, with tools so the reply parser runs too).
 * Every answer must be the whole correct reply or a clean error: a 500/503 in Anthropic's shape
 * (or the transport's fixed out-of-memory body when not even that could be written), or a
 * stream that ends with an "error" event; never a 200 with text missing, never a crash; no
 * request is left running, and under make check LeakSanitizer checks for leaks.
 *
 * The oracle for the text is the fake engine's rule (token k of seed S is 'a' + (S + k) % 26):
 * the Messages API has no seed, so a whole reply of 3 tokens is 3 consecutive letters. A
 * scripted reply with reasoning, text and two calls (a Hermes-like template) must give the
 * blocks the chat endpoint's message holds for the same conversation, whole and folded from
 * streams of any piece size.
 */
#include "server_harness.h"

#include "core/alloc.h"
#include "core/sse.h"

// The transport's own reply when memory ran out even for the error's JSON (http.c knows no
// API's shape; it answers OpenAI's).
static const char transport_oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                                    "\"server_error\",\"param\":null,\"code\":null}}";

// Anthropic's error object with this status and error type.
static void expect_anth_error(const struct resp *r, int status, const char *type)
{
    if (r->status != status) fail_msg("status %d, want %d: %s", r->status, status, r->body);
    if (status == 500 && !strcmp(r->body, transport_oom)) return;
    json_t *j = body_json(r);
    json_t *e = json_object_get(j, "error");
    if (!json_is_string(json_object_get(j, "type")) ||
        strcmp(json_string_value(json_object_get(j, "type")), "error") || !json_is_object(e) ||
        !json_is_string(json_object_get(e, "message")) || json_object_get(e, "code") ||
        strcmp(json_string_value(json_object_get(e, "type")), type))
        fail_msg("not Anthropic's %s error object: %s", type, r->body);
    json_decref(j);
}

static void test_error_shapes(void **state)
{
    (void)state;
    struct running *sv = start("k3y", 0, 0);
    s_port = tl_server_port(sv->s);
    assert_true(wait_until(server_healthy, 5000));
    const char *body = "{\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    struct resp r;
    request(s_port, "POST", "/v1/messages", body, NULL, &r);
    expect_anth_error(&r, 401, "authentication_error");
    resp_free(&r);
    request(s_port, "POST", "/v1/messages", body, "x-api-key: nope\r\n", &r);
    expect_anth_error(&r, 401, "authentication_error");
    resp_free(&r);
    const char *key = "x-api-key: k3y\r\n";
    request(s_port, "GET", "/v1/messages", NULL, key, &r);
    expect_anth_error(&r, 405, "invalid_request_error");
    resp_free(&r);
    request(s_port, "POST", "/v1/messages/batches", body, key, &r);
    expect_anth_error(&r, 404, "not_found_error");
    resp_free(&r);
    request(s_port, "POST", "/v1/messages", "{\"model\":\"other\",\"max_tokens\":2}", key, &r);
    expect_anth_error(&r, 404, "not_found_error");
    resp_free(&r);
    request(s_port, "POST", "/v1/messages", "[1]", key, &r);
    expect_anth_error(&r, 400, "invalid_request_error");
    resp_free(&r);
    request(s_port, "POST", "/v1/messages/count_tokens",
            "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":3}", key, &r);
    expect_anth_error(&r, 400, "invalid_request_error");
    resp_free(&r);
    // Elsewhere errors keep the OpenAI shape; the Bearer key works for both.
    expect_error(s_port, "POST", "/v1/chat/completions", "{}", "Authorization: Bearer k3y\r\n", 400,
                 "messages");
    request(s_port, "POST", "/v1/messages", body, "Authorization: Bearer k3y\r\n", &r);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "type")), "message");
    json_decref(j);
    resp_free(&r);
    // count_tokens: the fake tokenizer's one token per byte of the rendered ChatML prompt.
    request(s_port, "POST", "/v1/messages/count_tokens",
            "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", key, &r);
    assert_int_equal(r.status, 200);
    j = body_json(&r);
    const char *chatml = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
    assert_int_equal(json_integer_value(json_object_get(j, "input_tokens")), strlen(chatml));
    json_decref(j);
    resp_free(&r);
    assert_int_equal(stop(sv), 0);
}

// Three consecutive letters (the fake engine's output for max_tokens 3).
static bool letters3(const char *t)
{
    if (!t || strlen(t) != 3) return false;
    for (int i = 0; i < 3; i++)
        if (t[i] < 'a' || t[i] > 'z') return false;
    return (t[1] - 'a') == (t[0] - 'a' + 1) % 26 && (t[2] - 'a') == (t[1] - 'a' + 1) % 26;
}

static bool judge_whole(const struct resp *r, long n_fail)
{
    if (r->status != 200) {
        if (r->status != 500 && r->status != 503)
            fail_msg("N=%ld: status %d: %s", n_fail, r->status, r->body);
        expect_anth_error(r, r->status, r->status == 500 ? "api_error" : "overloaded_error");
        return false;
    }
    json_t *j = body_json(r);
    json_t *content = json_object_get(j, "content");
    const char *text = json_string_value(json_object_get(json_array_get(content, 0), "text"));
    if (json_array_size(content) != 1 || !letters3(text) ||
        strcmp(json_string_value(json_object_get(j, "stop_reason")), "max_tokens") ||
        json_integer_value(json_object_get(json_object_get(j, "usage"), "output_tokens")) != 3)
        fail_msg("N=%ld: 200 that is not the whole reply: %s", n_fail, r->body);
    json_decref(j);
    return true;
}

struct stream_seen {
    char text[64];
    bool stop, error, started;
    long n_fail;
};

static bool on_sse(void *user, const char *data, size_t len)
{
    struct stream_seen *ss = user;
    json_t *j = json_loadb(data, len, 0, NULL);
    if (!j) fail_msg("N=%ld: an event is not JSON: %.*s", ss->n_fail, (int)len, data);
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!type) fail_msg("N=%ld: an event without type: %.*s", ss->n_fail, (int)len, data);
    if (!strcmp(type, "error")) ss->error = true;
    if (!strcmp(type, "message_start")) ss->started = true;
    if (!strcmp(type, "message_stop")) ss->stop = true;
    const char *t = json_string_value(json_object_get(json_object_get(j, "delta"), "text"));
    if (t) strncat(ss->text, t, sizeof(ss->text) - strlen(ss->text) - 1);
    json_decref(j);
    return true;
}

static bool judge_stream(const struct resp *r, long n_fail)
{
    if (r->status != 200) {
        expect_anth_error(r, r->status, r->status == 500 ? "api_error" : "overloaded_error");
        return false;
    }
    if (strstr(r->body, "[DONE]")) fail_msg("N=%ld: OpenAI's [DONE] in a Messages stream", n_fail);
    struct stream_seen ss = {.n_fail = n_fail};
    struct tl_sse_parser p;
    tl_sse_parser_init(&p);
    assert_true(tl_sse_feed(&p, r->body, r->body_len, on_sse, &ss));
    tl_sse_parser_free(&p);
    bool whole = ss.started && ss.stop && letters3(ss.text);
    if (!whole && !ss.error)
        fail_msg("N=%ld: a stream cut without an error event: %s", n_fail, r->body);
    return whole && !ss.error;
}

static const char *const bodies[] = {
    "{\"max_tokens\":3,\"system\":\"s\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
    "\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}]}",
    "{\"max_tokens\":3,\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
    "\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}]}",
    "{\"max_tokens\":3,\"stream\":true,\"stop_sequences\":[\"zz\"],\"messages\":[{\"role\":"
    "\"user\",\"content\":\"hi\"}]}",
};

static bool one_try(int port, int k, long n_fail)
{
    int fd = connect_to(port);
    tl_alloc_fail_after(n_fail);
    send_request(fd, "POST", "/v1/messages", bodies[k], NULL);
    struct resp r;
    read_response(fd, &r);
    tl_alloc_fail_after(0);
    close(fd);
    bool whole = k == 0 ? judge_whole(&r, n_fail) : judge_stream(&r, n_fail);
    resp_free(&r);
    if (!wait_until(engine_idle, 5000)) fail_msg("N=%ld: requests left running", n_fail);
    return whole;
}

static void test_every_allocation_failure_is_clean(void **state)
{
    (void)state;
    s_max_seq_len = 1024; // the fake model's 64 cannot hold ChatML's tool instructions
    struct running *sv = start(NULL, 0, 0);
    s_max_seq_len = 0;
    s_port = tl_server_port(sv->s);
    assert_true(wait_until(server_healthy, 5000));
    for (int k = 0; k < 3; k++) {
        long n_refused = 0, streak = 0, n;
        for (n = 1; streak < 40 && n < 5000; n++) {
            if (one_try(s_port, k, n)) {
                streak++;
            } else {
                streak = 0;
                n_refused++;
            }
        }
        print_message("# Messages request kind %d: %ld allocation points, %ld clean refusals\n", k,
                      n - 41, n_refused);
        assert_true(n < 5000);
        assert_true(n_refused > 0);
    }
    assert_int_equal(stop(sv), 0);
}

// ---- a scripted reply with reasoning, text and two calls ---------------------------------------

// A ChatML template that also mentions Hermes' <tool_call> and <think> (as Qwen3's does).
static const char qwen_like[] =
    "{# <tool_call> <think> #}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
static const char script[] =
    "<think>User wants weather.</think>\n\nLet me check.\n<tool_call>\n{\"name\": "
    "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
    "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
#define ANTH_TOOLS                                                                                 \
    "\"tools\":[{\"name\":\"get_weather\",\"input_schema\":{\"type\":\"object\"}},{\"name\":"      \
    "\"get_time\",\"input_schema\":{\"type\":\"object\"}}]"
static const char scripted_body[] = "{\"max_tokens\":200,\"messages\":[{\"role\":\"user\","
                                    "\"content\":\"weather?\"}]," ANTH_TOOLS "%s}";

// Content blocks with their ids checked ("toolu_...") and removed.
static json_t *without_ids(json_t *content)
{
    for (size_t i = 0; i < json_array_size(content); i++) {
        json_t *b = json_array_get(content, i);
        const char *id = json_string_value(json_object_get(b, "id"));
        if (json_object_get(b, "id")) {
            if (!id || strncmp(id, "toolu_", 6)) fail_msg("tool_use id '%s'", id ? id : "?");
            json_object_del(b, "id");
        }
    }
    return content;
}

struct folded {
    json_t *content; // blocks as a client assembles them from the events
    json_t *partial; // input_json_delta text per block
    char stop_reason[32];
};

static bool fold_event(void *user, const char *data, size_t len)
{
    struct folded *f = user;
    json_t *j = json_loadb(data, len, 0, NULL);
    assert_non_null(j);
    const char *type = json_string_value(json_object_get(j, "type"));
    size_t index = (size_t)json_integer_value(json_object_get(j, "index"));
    if (!strcmp(type, "content_block_start")) {
        assert_int_equal(index, json_array_size(f->content));
        json_array_append(f->content, json_object_get(j, "content_block"));
        json_array_append_new(f->partial, json_string(""));
    } else if (!strcmp(type, "content_block_delta")) {
        json_t *d = json_object_get(j, "delta"), *b = json_array_get(f->content, index);
        const char *dt = json_string_value(json_object_get(d, "type"));
        const char *key = !strcmp(dt, "text_delta")       ? "text"
                          : !strcmp(dt, "thinking_delta") ? "thinking"
                                                          : "partial_json";
        json_t *into = !strcmp(key, "partial_json") ? NULL : json_object_get(b, key);
        const char *have =
            into ? json_string_value(into) : json_string_value(json_array_get(f->partial, index));
        char buf[1024];
        snprintf(buf, sizeof(buf), "%s%s", have, json_string_value(json_object_get(d, key)));
        if (into)
            json_object_set_new(b, key, json_string(buf));
        else
            json_array_set_new(f->partial, index, json_string(buf));
    } else if (!strcmp(type, "content_block_stop")) {
        const char *pj = json_string_value(json_array_get(f->partial, index));
        if (*pj)
            json_object_set_new(json_array_get(f->content, index), "input",
                                json_loads(pj, 0, NULL));
    } else if (!strcmp(type, "message_delta")) {
        snprintf(f->stop_reason, sizeof(f->stop_reason), "%s",
                 json_string_value(json_object_get(json_object_get(j, "delta"), "stop_reason")));
    }
    json_decref(j);
    return true;
}

// The reply as Messages blocks must be the chat endpoint's message for the same conversation
// (reasoning_content, content, tool_calls), and every stream (1, 2, 5 bytes per token) must
// fold to it.
static void test_scripted_reply(void **state)
{
    (void)state;
    fake_template = qwen_like;
    fake_script = script;
    s_max_seq_len = 1024;
    struct running *sv = start(NULL, 0, 0);
    s_port = tl_server_port(sv->s);
    assert_true(wait_until(server_healthy, 5000));
    struct resp r;
    request(s_port, "POST", "/v1/chat/completions",
            "{\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"}],\"tools\":[{\"type\":"
            "\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":"
            "\"object\"}}},{\"type\":\"function\",\"function\":{\"name\":\"get_time\","
            "\"parameters\":{\"type\":\"object\"}}}]}",
            NULL, &r);
    json_t *chat = body_json(&r);
    resp_free(&r);
    json_t *msg = json_object_get(json_array_get(json_object_get(chat, "choices"), 0), "message");
    json_t *want = json_pack("[{s:s, s:O, s:s}, {s:s, s:O}]", "type", "thinking", "thinking",
                             json_object_get(msg, "reasoning_content"), "signature", "", "type",
                             "text", "text", json_object_get(msg, "content"));
    json_t *calls = json_object_get(msg, "tool_calls");
    assert_int_equal(json_array_size(calls), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *fn = json_object_get(json_array_get(calls, i), "function");
        json_array_append_new(
            want,
            json_pack("{s:s, s:O, s:o}", "type", "tool_use", "name", json_object_get(fn, "name"),
                      "input",
                      json_loads(json_string_value(json_object_get(fn, "arguments")), 0, NULL)));
    }
    json_decref(chat);
    char body[1024];
    snprintf(body, sizeof(body), scripted_body, "");
    request(s_port, "POST", "/v1/messages", body, NULL, &r);
    assert_int_equal(r.status, 200);
    json_t *m = body_json(&r);
    resp_free(&r);
    assert_string_equal(json_string_value(json_object_get(m, "stop_reason")), "tool_use");
    json_t *got = without_ids(json_object_get(m, "content"));
    if (!json_equal(got, want)) {
        char *a = json_dumps(got, JSON_SORT_KEYS), *b = json_dumps(want, JSON_SORT_KEYS);
        fail_msg("whole: got %s\nwant %s", a, b);
    }
    json_decref(m);
    snprintf(body, sizeof(body), scripted_body, ",\"stream\":true");
    for (int piece = 1; piece <= 5; piece += piece == 2 ? 3 : 1) {
        fake_script_piece = piece;
        request(s_port, "POST", "/v1/messages", body, NULL, &r);
        assert_int_equal(r.status, 200);
        struct folded f = {json_array(), json_array(), ""};
        struct tl_sse_parser p;
        tl_sse_parser_init(&p);
        assert_true(tl_sse_feed(&p, r.body, r.body_len, fold_event, &f));
        tl_sse_parser_free(&p);
        resp_free(&r);
        assert_string_equal(f.stop_reason, "tool_use");
        if (!json_equal(without_ids(f.content), want)) {
            char *a = json_dumps(f.content, JSON_SORT_KEYS), *b = json_dumps(want, JSON_SORT_KEYS);
            fail_msg("stream, %d bytes per token: got %s\nwant %s", piece, a, b);
        }
        json_decref(f.content);
        json_decref(f.partial);
    }
    fake_script_piece = 1;
    // (No allocation sweep here: src/chat/toolcall_syntax.c parses a call's JSON with
    // json_loadb, which reports a failed allocation as a syntax error, so the call then comes
    // back as text, for /v1/chat/completions as well; that parser is outside this file's reach.)
    json_decref(want);
    assert_int_equal(stop(sv), 0);
    fake_script = NULL;
    fake_template = NULL;
    s_max_seq_len = 0;
}

TL_TEST_MAIN(cmocka_unit_test(test_error_shapes),
             cmocka_unit_test(test_every_allocation_failure_is_clean),
             cmocka_unit_test(test_scripted_reply))
