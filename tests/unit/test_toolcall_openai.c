/*
 * Request fields of the tool-calling and "implemented or refused" work (src/server/
 * openai_fields.c through tl_oai_parse): every OpenAI field tokenloom does not implement is a
 * 400 whose param names it (its neutral value passes), logit_bias is parsed into the sampling
 * parameters, tools / functions / tool_choice / parallel_tool_calls, tool messages and
 * assistant tool_calls are validated.
 */
#include "tl_test.h"

#include "server/openai.h"

static const struct tl_oai_limits lim = {.n_vocab = 512};

static bool parse(enum tl_oai_kind k, const char *body, struct tl_oai_params *p,
                  struct tl_oai_error *e)
{
    memset(e, 0, sizeof(*e));
    return tl_oai_parse(k, body, strlen(body), &lim, p, e);
}

static void expect_bad(enum tl_oai_kind k, const char *body, const char *param)
{
    struct tl_oai_params p;
    struct tl_oai_error e;
    if (parse(k, body, &p, &e)) fail_msg("accepted: %s", body);
    assert_int_equal(e.http_status, 400);
    assert_string_equal(e.type, "invalid_request_error");
    if (strcmp(e.param, param)) fail_msg("param '%s', want '%s' (%s)", e.param, param, e.message);
    if (!strstr(e.message, param)) fail_msg("message '%s' lacks '%s'", e.message, param);
}

static void expect_ok(enum tl_oai_kind k, const char *body)
{
    struct tl_oai_params p;
    struct tl_oai_error e;
    if (!parse(k, body, &p, &e)) fail_msg("refused (%s: %s): %s", e.param, e.message, body);
    tl_oai_params_free(&p);
}

#define CHAT(extra) "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]" extra "}"
#define COMPL(extra) "{\"prompt\":\"hi\"" extra "}"
#define TOOLS                                                                                      \
    ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"    \
    "{\"type\":\"object\"}}}]"

static void test_refused_fields_name_param(void **state)
{
    static const struct {
        const char *key, *bad, *neutral; // neutral NULL: no neutral value
        unsigned kinds;                  // 1 completions, 2 chat
    } cases[] = {
        {"response_format", "{\"type\":\"bogus\"}", "{\"type\":\"text\"}", 3},
        {"best_of", "2", "1", 3},
        {"suffix", "\"end\"", "\"\"", 1},
        {"audio", "{\"voice\":\"x\"}", NULL, 2},
        {"modalities", "[\"text\",\"audio\"]", "[\"text\"]", 2},
        {"prediction", "{\"type\":\"content\",\"content\":\"x\"}", NULL, 2},
        {"web_search_options", "{}", NULL, 2},
        {"reasoning_effort", "\"low\"", NULL, 2},
        {"service_tier", "\"flex\"", "\"auto\"", 3},
        {"store", "true", "false", 2},
        {"metadata", "{\"a\":\"b\"}", NULL, 2},
    };
    char body[512];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        for (unsigned k = 1; k <= 2; k++) {
            if (!(cases[i].kinds & k)) continue;
            enum tl_oai_kind kind = k == 2 ? TL_OAI_CHAT : TL_OAI_COMPLETION;
            const char *fmt = k == 2 ? CHAT(",\"%s\":%s") : COMPL(",\"%s\":%s");
            snprintf(body, sizeof(body), fmt, cases[i].key, cases[i].bad);
            expect_bad(kind, body, cases[i].key);
            snprintf(body, sizeof(body), fmt, cases[i].key, "null");
            expect_ok(kind, body);
            if (cases[i].neutral) {
                snprintf(body, sizeof(body), fmt, cases[i].key, cases[i].neutral);
                expect_ok(kind, body);
            }
        }
    }
    expect_bad(TL_OAI_CHAT, CHAT(",\"response_format\":{\"type\":\"bogus\"}"), "response_format");
    expect_bad(TL_OAI_CHAT, CHAT(",\"response_format\":\"json\""), "response_format");
    expect_ok(TL_OAI_CHAT, CHAT(",\"user\":\"u-1\"")); // an identifier: nothing to implement
}

static void test_logit_bias(void **state)
{
    struct tl_oai_params p;
    struct tl_oai_error e;
    assert_true(
        parse(TL_OAI_COMPLETION, COMPL(",\"logit_bias\":{\"5\":-100,\"511\":2.5}"), &p, &e));
    assert_int_equal(p.sampling.n_logit_bias, 2);
    assert_int_equal(p.sampling.logit_bias[0].token, 5);
    assert_true(p.sampling.logit_bias[0].bias == -100.0f);
    assert_int_equal(p.sampling.logit_bias[1].token, 511);
    assert_true(p.sampling.logit_bias[1].bias == 2.5f);
    tl_oai_params_free(&p);
    assert_true(parse(TL_OAI_CHAT, CHAT(",\"logit_bias\":{\"7\":1}"), &p, &e));
    assert_int_equal(p.sampling.n_logit_bias, 1);
    tl_oai_params_free(&p);
    expect_ok(TL_OAI_CHAT, CHAT(",\"logit_bias\":{}"));
    expect_ok(TL_OAI_CHAT, CHAT(",\"logit_bias\":null"));
    expect_bad(TL_OAI_CHAT, CHAT(",\"logit_bias\":{\"512\":1}"), "logit_bias");
    expect_bad(TL_OAI_CHAT, CHAT(",\"logit_bias\":{\"-1\":1}"), "logit_bias");
    expect_bad(TL_OAI_CHAT, CHAT(",\"logit_bias\":{\"a\":1}"), "logit_bias");
    expect_bad(TL_OAI_CHAT, CHAT(",\"logit_bias\":{\"\":1}"), "logit_bias");
    expect_bad(TL_OAI_CHAT, CHAT(",\"logit_bias\":{\"1\":100.5}"), "logit_bias");
    expect_bad(TL_OAI_CHAT, CHAT(",\"logit_bias\":{\"1\":\"2\"}"), "logit_bias");
    expect_bad(TL_OAI_CHAT, CHAT(",\"logit_bias\":[1]"), "logit_bias");
}

static void test_tools_and_tool_choice(void **state)
{
    struct tl_oai_params p;
    struct tl_oai_error e;
    assert_true(parse(TL_OAI_CHAT, CHAT(TOOLS), &p, &e));
    assert_int_equal(p.n_tool_names, 1);
    assert_string_equal(p.tool_names[0], "get_weather");
    assert_true(p.tool_choice_auto);
    assert_true(p.parallel_tool_calls);
    tl_oai_params_free(&p);
    // legacy functions become tools of type function
    assert_true(parse(TL_OAI_CHAT,
                      CHAT(",\"functions\":[{\"name\":\"f1\",\"description\":\"d\"}],"
                           "\"function_call\":\"auto\""),
                      &p, &e));
    assert_int_equal(p.n_tool_names, 1);
    assert_string_equal(p.tool_names[0], "f1");
    tl_oai_params_free(&p);
    assert_true(parse(TL_OAI_CHAT,
                      CHAT(TOOLS ",\"tool_choice\":\"none\","
                                 "\"parallel_tool_calls\":false"),
                      &p, &e));
    assert_false(p.tool_choice_auto);
    assert_false(p.parallel_tool_calls);
    tl_oai_params_free(&p);
    expect_ok(TL_OAI_CHAT, CHAT(",\"tools\":[]"));
    // A forced call (constrained to the tool-call syntax by the server: tests/grammar).
    assert_true(parse(TL_OAI_CHAT, CHAT(TOOLS ",\"tool_choice\":\"required\""), &p, &e));
    assert_true(p.tool_forced && p.tool_choice_auto);
    assert_null(p.tool_forced_name);
    tl_oai_params_free(&p);
    assert_true(parse(TL_OAI_CHAT,
                      CHAT(TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{"
                                 "\"name\":\"get_weather\"}}"),
                      &p, &e));
    assert_true(p.tool_forced);
    assert_string_equal(p.tool_forced_name, "get_weather");
    tl_oai_params_free(&p);
    expect_bad(TL_OAI_CHAT,
               CHAT(TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":"
                          "\"other\"}}"),
               "tool_choice");
    expect_bad(TL_OAI_CHAT, CHAT(",\"tool_choice\":\"required\""), "tool_choice");
    expect_bad(TL_OAI_CHAT, CHAT(TOOLS ",\"tool_choice\":\"sometimes\""), "tool_choice");
    expect_bad(TL_OAI_CHAT, CHAT(TOOLS ",\"tool_choice\":{\"type\":\"web\"}"), "tool_choice");
    expect_bad(TL_OAI_CHAT, CHAT(",\"tool_choice\":\"auto\""), "tool_choice");
    assert_true(parse(TL_OAI_CHAT,
                      CHAT(",\"functions\":[{\"name\":\"f\"}],\"function_call\":{\"name\":\"f\"}"),
                      &p, &e)); // the legacy form of a named function
    assert_string_equal(p.tool_forced_name, "f");
    tl_oai_params_free(&p);
    expect_bad(TL_OAI_CHAT,
               CHAT(",\"functions\":[{\"name\":\"f\"}],\"function_call\":{\"name\":"
                    "\"g\"}"),
               "function_call");
    expect_bad(TL_OAI_CHAT, CHAT(TOOLS ",\"parallel_tool_calls\":1"), "parallel_tool_calls");
    expect_bad(TL_OAI_CHAT, CHAT(",\"tools\":{}"), "tools");
    expect_bad(TL_OAI_CHAT, CHAT(",\"tools\":[{\"type\":\"code\"}]"), "tools[0].type");
    expect_bad(TL_OAI_CHAT, CHAT(",\"tools\":[{\"type\":\"function\"}]"), "tools[0].function");
    expect_bad(TL_OAI_CHAT,
               CHAT(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a "
                    "b\"}}]"),
               "tools[0].function.name");
    expect_bad(TL_OAI_CHAT,
               CHAT(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\","
                    "\"parameters\":[]}}]"),
               "tools[0].function.parameters");
    expect_bad(TL_OAI_CHAT,
               CHAT(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\","
                    "\"strict\":true}}]"),
               "tools[0].function.strict");
    expect_bad(TL_OAI_CHAT, CHAT(TOOLS ",\"functions\":[{\"name\":\"f\"}]"), "functions");
    expect_bad(TL_OAI_CHAT,
               CHAT(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}},{\"type\":"
                    "\"function\",\"function\":{\"name\":\"a\"}}]"),
               "tools[1].function");
}

static void test_tool_messages(void **state)
{
    struct tl_oai_params p;
    struct tl_oai_error e;
    const char *body =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"},{\"role\":\"assistant\","
        "\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":"
        "{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]}]" TOOLS "}";
    assert_true(parse(TL_OAI_CHAT, body, &p, &e));
    assert_int_equal(p.n_msgs, 2);
    tl_oai_params_free(&p);
    const char *with_result =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"w\"},{\"role\":\"assistant\","
        "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":"
        "\"get_weather\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"c1\","
        "\"content\":\"sunny\"}]" TOOLS "}";
    assert_true(parse(TL_OAI_CHAT, with_result, &p, &e));
    assert_int_equal(p.n_msgs, 3);
    tl_oai_params_free(&p);
    expect_bad(TL_OAI_CHAT, "{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}",
               "messages[0].tool_call_id");
    expect_bad(TL_OAI_CHAT,
               "{\"messages\":[{\"role\":\"tool\",\"tool_call_id\":5,\"content\":\"x\"}]}",
               "messages[0].tool_call_id");
    expect_bad(TL_OAI_CHAT,
               "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"1\",\"type\":"
               "\"function\",\"function\":{\"name\":\"f\",\"arguments\":{}}}]}]}",
               "messages[0].tool_calls[0]");
    expect_bad(TL_OAI_CHAT,
               "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"type\":\"function\","
               "\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}]}",
               "messages[0].tool_calls[0]");
    expect_bad(TL_OAI_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":{}}]}",
               "messages[0].tool_calls");
    expect_bad(TL_OAI_CHAT,
               "{\"messages\":[{\"role\":\"assistant\",\"function_call\":{\"name\":\"f\"}}]}",
               "messages[0].function_call");
    expect_bad(TL_OAI_CHAT, "{\"messages\":[{\"role\":\"function\",\"content\":\"x\"}]}",
               "messages[0].role");
}

TL_TEST_MAIN(cmocka_unit_test(test_refused_fields_name_param), cmocka_unit_test(test_logit_bias),
             cmocka_unit_test(test_tools_and_tool_choice), cmocka_unit_test(test_tool_messages))
