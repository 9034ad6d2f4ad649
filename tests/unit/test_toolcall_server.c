/*
 * Tool calls, reasoning and the refused/implemented OpenAI fields through the whole HTTP layer,
 * against the scripted fake engine of server_harness.h (the model "writes" fake_script). For
 * each syntax the non-streaming reply must hold the expected message, and the stream, folded
 * as the OpenAI SDKs fold deltas, must give the same message, whatever the bytes per token.
 * The real model and a real template are exercised by tests/http.
 */
#include "server_harness.h"

#include "core/sse.h"

struct events {
    json_t *ev[512];
    int n;
    bool done;
};

static bool collect(void *user, const char *data, size_t len)
{
    struct events *g = user;
    if (len == 6 && !memcmp(data, "[DONE]", 6)) {
        g->done = true;
        return true;
    }
    assert_false(g->done);
    assert_true(g->n < 512);
    g->ev[g->n++] = json_loadb(data, len, 0, NULL);
    return true;
}

static void append_str(json_t *o, const char *key, json_t *piece)
{
    const char *have = json_string_value(json_object_get(o, key));
    char *joined = NULL;
    assert_true(asprintf(&joined, "%s%s", have ? have : "", json_string_value(piece)) >= 0);
    json_object_set_new(o, key, json_string(joined));
    free(joined);
}

// Folds a chat stream into {"message", "finish_reason"}; checks the delta rules on the way.
static json_t *fold_stream(const struct events *g)
{
    json_t *msg = json_object(), *finish = json_null();
    json_t *calls = json_array();
    for (int i = 0; i < g->n; i++) {
        json_t *c = json_array_get(json_object_get(g->ev[i], "choices"), 0);
        json_t *d = json_object_get(c, "delta");
        assert_true(json_is_object(d));
        if (json_is_string(json_object_get(c, "finish_reason"))) {
            assert_true(i == g->n - 1); // the finish reason comes last
            finish = json_object_get(c, "finish_reason");
        }
        const char *key;
        json_t *v;
        json_object_foreach(d, key, v)
        {
            if (!strcmp(key, "role")) {
                assert_int_equal(i, 0);
                json_object_set(msg, "role", v);
            } else if (!strcmp(key, "tool_calls")) {
                json_t *tc = json_array_get(v, 0);
                size_t index = (size_t)json_integer_value(json_object_get(tc, "index"));
                json_t *fn = json_object_get(tc, "function");
                if (index == json_array_size(calls)) { // a call's first delta
                    assert_non_null(json_object_get(tc, "id"));
                    assert_string_equal(json_string_value(json_object_get(tc, "type")), "function");
                    json_array_append_new(calls,
                                          json_pack("{s:O, s:s, s:{s:O, s:O}}", "id",
                                                    json_object_get(tc, "id"), "type", "function",
                                                    "function", "name", json_object_get(fn, "name"),
                                                    "arguments", json_object_get(fn, "arguments")));
                } else {
                    assert_true(index + 1 == json_array_size(calls));
                    append_str(json_object_get(json_array_get(calls, index), "function"),
                               "arguments", json_object_get(fn, "arguments"));
                }
            } else {
                append_str(msg, key, v);
            }
        }
    }
    if (json_array_size(calls)) json_object_set(msg, "tool_calls", calls);
    // The role chunk carries content "" (before anything is known); beside calls and no text
    // the whole message says null.
    const char *content = json_string_value(json_object_get(msg, "content"));
    if (!content || (!*content && json_array_size(calls)))
        json_object_set_new(msg, "content", json_array_size(calls) ? json_null() : json_string(""));
    json_decref(calls);
    return json_pack("{s:o, s:O}", "message", msg, "finish_reason", finish);
}

static json_t *chat(const char *body_fmt, const char *extra, bool stream, int *status)
{
    char body[4096];
    snprintf(body, sizeof(body), body_fmt, extra, stream ? ",\"stream\":true" : "");
    struct resp r;
    request(s_port, "POST", "/v1/chat/completions", body, NULL, &r);
    *status = r.status;
    json_t *out;
    if (!stream || r.status != 200) {
        json_t *j = body_json(&r);
        json_t *c = json_array_get(json_object_get(j, "choices"), 0);
        out = c ? json_pack("{s:O, s:O}", "message", json_object_get(c, "message"), "finish_reason",
                            json_object_get(c, "finish_reason"))
                : json_incref(j);
        json_decref(j);
    } else {
        struct tl_sse_parser p;
        struct events g = {0};
        tl_sse_parser_init(&p);
        assert_true(tl_sse_feed(&p, r.body, r.body_len, collect, &g));
        tl_sse_parser_free(&p);
        assert_true(g.done);
        out = fold_stream(&g);
        for (int i = 0; i < g.n; i++)
            json_decref(g.ev[i]);
    }
    resp_free(&r);
    return out;
}

#define BODY "{\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"}],\"seed\":1%s%s}"
#define TOOLS                                                                                      \
    ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"    \
    "{\"type\":\"object\"}}},{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}]"

// The whole reply, then streams at 1, 2 and 5 bytes per token, must all equal `want`
// (message + finish_reason; tool call ids are compared for shape, not value).
static void expect_reply(const char *extra, const char *want_json)
{
    json_t *want = json_loads(want_json, 0, NULL);
    assert_non_null(want);
    for (int mode = 0; mode < 4; mode++) {
        fake_script_piece = mode == 0 ? 1 : mode == 1 ? 1 : mode == 2 ? 2 : 5;
        int status;
        json_t *got = chat(BODY, extra, mode > 0, &status);
        assert_int_equal(status, 200);
        json_t *calls = json_object_get(json_object_get(got, "message"), "tool_calls");
        for (size_t i = 0; calls && i < json_array_size(calls); i++) {
            json_t *c = json_array_get(calls, i);
            assert_true(json_string_length(json_object_get(c, "id")) >= 9);
            json_object_del(c, "id");
        }
        if (!json_equal(got, want)) {
            char *a = json_dumps(got, JSON_SORT_KEYS), *b = json_dumps(want, JSON_SORT_KEYS);
            fail_msg("mode %d (%s): got %s, want %s", mode, mode ? "stream" : "whole", a, b);
        }
        json_decref(got);
    }
    fake_script_piece = 1;
    json_decref(want);
}

// A ChatML template that also mentions Hermes' <tool_call> and <think> (as Qwen3's does).
static const char qwen_like[] =
    "{# <tool_call> <think> #}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

static struct running *start_with(const char *tmpl)
{
    fake_template = tmpl;
    s_max_seq_len = 1024;
    struct running *sv = start(NULL, 0, 0);
    s_port = tl_server_port(sv->s);
    assert_true(wait_until(server_healthy, 5000));
    return sv;
}

static void finish_server(struct running *sv)
{
    assert_int_equal(stop(sv), 0);
    fake_script = NULL;
    fake_template = NULL;
    s_max_seq_len = 0;
}

static void test_hermes_calls_and_reasoning(void **state)
{
    struct running *sv = start_with(qwen_like);
    fake_script = "<think>User wants weather.</think>\n\nLet me check.\n<tool_call>\n{\"name\": "
                  "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
                  "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
    expect_reply(TOOLS,
                 "{\"message\": {\"role\": \"assistant\", \"content\": \"Let me check.\", "
                 "\"reasoning_content\": \"User wants weather.\", \"tool_calls\": [{\"type\": "
                 "\"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": "
                 "\"{\\\"city\\\":\\\"Paris\\\"}\"}}, {\"type\": \"function\", \"function\": "
                 "{\"name\": \"get_time\", \"arguments\": \"{}\"}}]}, \"finish_reason\": "
                 "\"tool_calls\"}");
    assert_true(fe.last_render_special); // call markers may be control tokens
    // parallel_tool_calls false: the first call only
    expect_reply(TOOLS ",\"parallel_tool_calls\":false",
                 "{\"message\": {\"role\": \"assistant\", \"content\": \"Let me check.\", "
                 "\"reasoning_content\": \"User wants weather.\", \"tool_calls\": [{\"type\": "
                 "\"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": "
                 "\"{\\\"city\\\":\\\"Paris\\\"}\"}}]}, \"finish_reason\": \"tool_calls\"}");
    // No tools, or tool_choice none: the calls stay text (reasoning is still split out).
    const char *as_text =
        "{\"message\": {\"role\": \"assistant\", \"content\": \"Let me check.\\n<tool_call>\\n"
        "{\\\"name\\\": \\\"get_weather\\\", \\\"arguments\\\": {\\\"city\\\": \\\"Paris\\\"}}\\n"
        "</tool_call>\\n<tool_call>\\n{\\\"name\\\": \\\"get_time\\\", \\\"arguments\\\": {}}\\n"
        "</tool_call>\", \"reasoning_content\": \"User wants weather.\"}, \"finish_reason\": "
        "\"stop\"}";
    expect_reply("", as_text);
    assert_false(fe.last_render_special);
    expect_reply(TOOLS ",\"tool_choice\":\"none\"", as_text);
    // A call of a function that was not offered, and broken JSON: content, 200.
    fake_script = "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>";
    expect_reply(TOOLS, "{\"message\": {\"role\": \"assistant\", \"content\": \"<tool_call>"
                        "{\\\"name\\\": \\\"rm_rf\\\", \\\"arguments\\\": {}}</tool_call>\"}, "
                        "\"finish_reason\": \"stop\"}");
    fake_script = "<tool_call>{\"name\": \"get_time\", \"arguments\": {</tool_call>";
    expect_reply(TOOLS, "{\"message\": {\"role\": \"assistant\", \"content\": \"<tool_call>"
                        "{\\\"name\\\": \\\"get_time\\\", \\\"arguments\\\": {</tool_call>\"}, "
                        "\"finish_reason\": \"stop\"}");
    finish_server(sv);
}

// The other syntaxes, each with the template marker that selects it (the shared templates'
// own detection is in test_toolcall.c).
static void test_other_syntaxes(void **state)
{
    static const struct {
        const char *tmpl, *script;
    } cases[] = {
        {"<|im_start|>{# [TOOL_CALLS] #}",
         "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}]"},
        {"<|im_start|>{# <|start_header_id|> \"parameters\" #}",
         "{\"name\": \"get_time\", \"parameters\": {\"tz\": \"UTC\"}}"},
        {"<|im_start|>{# <|start_header_id|> <function= #}",
         "<function=get_time>{\"tz\": \"UTC\"}</function>"},
        {"<|im_start|>{# functools[ #}", " functools[{\"name\": \"get_time\", \"arguments\": "
                                         "{\"tz\": \"UTC\"}}]"},
        {"<|im_start|>{# <|START_ACTION|> #}",
         "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"get_time\", \"parameters\": "
         "{\"tz\": \"UTC\"}}]<|END_ACTION|>"},
        {"<|im_start|>", "{\"tool_call\": {\"name\": \"get_time\", \"arguments\": {\"tz\": "
                         "\"UTC\"}}}"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct running *sv = start_with(cases[i].tmpl);
        fake_script = cases[i].script;
        expect_reply(TOOLS, "{\"message\": {\"role\": \"assistant\", \"content\": null, "
                            "\"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": "
                            "\"get_time\", \"arguments\": \"{\\\"tz\\\":\\\"UTC\\\"}\"}}]}, "
                            "\"finish_reason\": \"tool_calls\"}");
        finish_server(sv);
    }
}

static void test_fields_refused_or_implemented(void **state)
{
    struct running *sv = start_with(NULL);
    expect_error(s_port, "POST", "/v1/chat/completions",
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":"
                 "{\"type\":\"bogus\"}}",
                 NULL, 400, "response_format");
    expect_error(s_port, "POST", "/v1/chat/completions",
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]" TOOLS
                 ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":"
                 "\"not_offered\"}}}",
                 NULL, 400, "tool_choice");
    expect_error(s_port, "POST", "/v1/completions", "{\"prompt\":\"x\",\"best_of\":3}", NULL, 400,
                 "best_of");
    expect_error(s_port, "POST", "/v1/completions", "{\"prompt\":\"x\",\"suffix\":\"y\"}", NULL,
                 400, "suffix");
    expect_error(s_port, "POST", "/v1/completions", "{\"prompt\":\"\"}", NULL, 400, "prompt");
    expect_error(s_port, "POST", "/v1/completions", "{\"prompt\":\"x\",\"logit_bias\":{\"300\":1}}",
                 NULL, 400, "logit_bias");
    struct resp r;
    request(s_port, "POST", "/v1/completions",
            "{\"prompt\":\"x\",\"max_tokens\":2,\"logit_bias\":{\"5\":-100,\"7\":3}}", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(fe.last_n_logit_bias, 2); // reached the engine
    resp_free(&r);
    finish_server(sv);
}

TL_TEST_MAIN(cmocka_unit_test(test_hermes_calls_and_reasoning),
             cmocka_unit_test(test_other_syntaxes),
             cmocka_unit_test(test_fields_refused_or_implemented))
