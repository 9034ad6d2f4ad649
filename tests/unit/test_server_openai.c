/*
 * Tests for src/server/openai.c: request validation (each bad field gives a 400 naming it),
 * prompt shapes, the status -> HTTP mapping, and the exact JSON shapes of responses and chunks
 * as the OpenAI API reference defines them.
 */
#include "tl_test.h"

#include "server/openai.h"

#include <math.h>

static const struct tl_oai_limits lim = {.n_vocab = 512};

static bool parse(enum tl_oai_kind k, const char *body, struct tl_oai_params *p,
                  struct tl_oai_error *e)
{
    memset(e, 0, sizeof(*e));
    return tl_oai_parse(k, body, strlen(body), &lim, p, e);
}

// Expects a 400 whose param is `param` (NULL: no param).
static void expect_bad(enum tl_oai_kind k, const char *body, const char *param)
{
    struct tl_oai_params p;
    struct tl_oai_error e;
    if (parse(k, body, &p, &e)) fail_msg("accepted: %s", body);
    assert_int_equal(e.http_status, 400);
    assert_string_equal(e.type, "invalid_request_error");
    assert_string_equal(e.param, param ? param : "");
    assert_true(strlen(e.message) > 0);
    if (param && !strstr(e.message, param)) fail_msg("message '%s' lacks '%s'", e.message, param);
}

static void test_completion_defaults(void **state)
{
    (void)state;
    struct tl_oai_params p;
    struct tl_oai_error e;
    assert_true(parse(TL_OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"Once\"}", &p, &e));
    assert_string_equal(p.model, "m");
    assert_int_equal(p.n_prompts, 1);
    assert_int_equal(p.prompts[0].text_len, 4);
    assert_memory_equal(p.prompts[0].text, "Once", 4);
    assert_int_equal(p.max_tokens, 0);
    assert_int_equal(p.n, 1);
    assert_false(p.stream);
    assert_false(p.seed_set);
    assert_true(p.sampling.temperature == 1.0f);
    assert_true(p.sampling.top_p == 1.0f);
    tl_oai_params_free(&p);
}

static void test_completion_all_fields(void **state)
{
    (void)state;
    struct tl_oai_params p;
    struct tl_oai_error e;
    const char *body =
        "{\"prompt\":[[1,2,3],[4]],\"max_tokens\":7,\"temperature\":0,\"top_p\":0.5,"
        "\"top_k\":-1,\"min_p\":0.1,\"n\":3,\"stop\":[\"\\n\",\"\",\"end\"],\"seed\":-5,"
        "\"presence_penalty\":1.5,\"frequency_penalty\":-1,\"repetition_penalty\":1.1,"
        "\"logprobs\":2,\"echo\":true,\"stream\":true,\"stream_options\":{\"include_usage\":"
        "true},\"ignore_eos\":true,\"priority\":-3,\"timeout\":1.5,\"user\":\"x\"}";
    assert_true(parse(TL_OAI_COMPLETION, body, &p, &e));
    assert_int_equal(p.n_prompts, 2);
    assert_int_equal(p.prompts[0].n_tokens, 3);
    assert_int_equal(p.prompts[0].tokens[2], 3);
    assert_int_equal(p.prompts[1].n_tokens, 1);
    assert_null(p.prompts[1].text);
    assert_int_equal(p.max_tokens, 7);
    assert_true(p.sampling.temperature == 0.0f);
    assert_int_equal(p.sampling.top_k, 0);
    assert_int_equal(p.n, 3);
    assert_int_equal(p.n_stop, 2); // the empty string is dropped
    assert_string_equal(p.stop[1], "end");
    assert_true(p.seed_set);
    assert_true(p.sampling.seed == (uint64_t)-5);
    assert_true(p.logprobs);
    assert_int_equal(p.top_logprobs, 2);
    assert_int_equal(p.sampling.n_logprobs, 2);
    assert_true(p.echo && p.stream && p.include_usage && p.ignore_eos);
    assert_int_equal(p.priority, -3);
    assert_int_equal(p.timeout_ms, 1500);
    tl_oai_params_free(&p);
}

static void test_prompt_shapes(void **state)
{
    (void)state;
    struct tl_oai_params p;
    struct tl_oai_error e;
    assert_true(parse(TL_OAI_COMPLETION, "{\"prompt\":[\"a\",\"bc\"]}", &p, &e));
    assert_int_equal(p.n_prompts, 2);
    assert_int_equal(p.prompts[1].text_len, 2);
    tl_oai_params_free(&p);
    assert_true(parse(TL_OAI_COMPLETION, "{\"prompt\":[5,6]}", &p, &e));
    assert_int_equal(p.n_prompts, 1);
    assert_int_equal(p.prompts[0].n_tokens, 2);
    tl_oai_params_free(&p);
    // NUL inside a prompt is kept with its length.
    assert_true(parse(TL_OAI_COMPLETION, "{\"prompt\":\"a\\u0000b\"}", &p, &e));
    assert_int_equal(p.prompts[0].text_len, 3);
    tl_oai_params_free(&p);
    expect_bad(TL_OAI_COMPLETION, "{}", "prompt");
    expect_bad(TL_OAI_COMPLETION, "{\"prompt\":[]}", "prompt");
    expect_bad(TL_OAI_COMPLETION, "{\"prompt\":[[]]}", "prompt");
    expect_bad(TL_OAI_COMPLETION, "{\"prompt\":[1,\"a\"]}", "prompt");
    expect_bad(TL_OAI_COMPLETION, "{\"prompt\":[\"a\",[1]]}", "prompt");
    expect_bad(TL_OAI_COMPLETION, "{\"prompt\":[512]}", "prompt"); // >= n_vocab
    expect_bad(TL_OAI_COMPLETION, "{\"prompt\":[-1]}", "prompt");
    expect_bad(TL_OAI_COMPLETION, "{\"prompt\":42}", "prompt");
    expect_bad(TL_OAI_COMPLETION, "{\"prompt\":{\"a\":1}}", "prompt");
}

static void test_field_types_and_ranges(void **state)
{
    (void)state;
    const struct {
        const char *field, *value;
    } cases[] = {
        {"max_tokens", "0"},
        {"max_tokens", "1.5"},
        {"max_tokens", "\"3\""},
        {"max_tokens", "3000000000"},
        {"temperature", "-0.1"},
        {"temperature", "2.5"},
        {"temperature", "\"hot\""},
        {"top_p", "0"},
        {"top_p", "1.01"},
        {"top_k", "-2"},
        {"min_p", "2"},
        {"n", "0"},
        {"n", "65"},
        {"seed", "1.5"},
        {"presence_penalty", "3"},
        {"frequency_penalty", "-3"},
        {"repetition_penalty", "0"},
        {"logprobs", "21"},
        {"logprobs", "true"},
        {"echo", "1"},
        {"stream", "\"yes\""},
        {"stop", "5"},
        {"stop", "[\"a\",\"b\",\"c\",\"d\",\"e\"]"},
        {"stop", "[1]"},
        {"ignore_eos", "0"},
        {"priority", "1e3"},
        {"timeout", "0"},
        {"timeout", "\"1\""},
        {"model", "7"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char body[256];
        snprintf(body, sizeof(body), "{\"prompt\":\"x\",\"%s\":%s}", cases[i].field,
                 cases[i].value);
        expect_bad(TL_OAI_COMPLETION, body, cases[i].field);
    }
    expect_bad(TL_OAI_COMPLETION, "{\"prompt\":\"x\",\"stream_options\":{\"include_usage\":true}}",
               "stream_options");
    expect_bad(TL_OAI_COMPLETION,
               "{\"prompt\":\"x\",\"stream\":true,\"stream_options\":{\"include_usage\":1}}",
               "stream_options.include_usage");
    expect_bad(TL_OAI_COMPLETION, "{\"prompt\":[\"a\",\"b\",\"c\"],\"n\":50}", "n");
    // null means "default" for every optional field.
    struct tl_oai_params p;
    struct tl_oai_error e;
    assert_true(parse(TL_OAI_COMPLETION,
                      "{\"prompt\":\"x\",\"max_tokens\":null,\"temperature\":null,\"stop\":null,"
                      "\"n\":null,\"seed\":null,\"logprobs\":null}",
                      &p, &e));
    assert_false(p.logprobs);
    tl_oai_params_free(&p);
}

static void test_malformed_bodies(void **state)
{
    (void)state;
    expect_bad(TL_OAI_COMPLETION, "", NULL);
    expect_bad(TL_OAI_COMPLETION, "{\"prompt\":", NULL);
    expect_bad(TL_OAI_COMPLETION, "[1,2]", NULL);
    expect_bad(TL_OAI_COMPLETION, "{\"prompt\":\"\xff\xfe\"}", NULL); // invalid UTF-8
    expect_bad(TL_OAI_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":1e999}", NULL);
    expect_bad(TL_OAI_COMPLETION, "{\"prompt\":\"x\",\"seed\":123456789012345678901234567890}",
               NULL);
    // Nesting far deeper than the parser's limit is rejected, not a stack overflow.
    size_t depth = 100000;
    char *deep = malloc(depth * 2 + 32);
    strcpy(deep, "{\"prompt\":\"x\",\"a\":");
    size_t n = strlen(deep);
    memset(deep + n, '[', depth);
    memset(deep + n + depth, ']', depth);
    strcpy(deep + n + 2 * depth, "}");
    struct tl_oai_params p;
    struct tl_oai_error e;
    assert_false(tl_oai_parse(TL_OAI_COMPLETION, deep, strlen(deep), &lim, &p, &e));
    assert_int_equal(e.http_status, 400);
    free(deep);
}

static void test_chat_messages(void **state)
{
    (void)state;
    struct tl_oai_params p;
    struct tl_oai_error e;
    assert_true(parse(TL_OAI_CHAT,
                      "{\"messages\":[{\"role\":\"developer\",\"content\":\"be brief\"},"
                      "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                      "{\"type\":\"text\",\"text\":\"b\"}]},{\"role\":\"assistant\","
                      "\"content\":null}],\"max_tokens\":5,\"max_completion_tokens\":9,"
                      "\"logprobs\":true,\"top_logprobs\":3}",
                      &p, &e));
    assert_int_equal(p.n_msgs, 3);
    assert_int_equal(p.msgs[0].role, TL_CHAT_SYSTEM);
    assert_int_equal(p.msgs[1].role, TL_CHAT_USER);
    assert_int_equal(p.msgs[1].content_len, 3);
    assert_memory_equal(p.msgs[1].content, "a\nb", 3);
    assert_int_equal(p.msgs[2].content_len, 0);
    assert_int_equal(p.max_tokens, 9); // max_completion_tokens wins
    assert_true(p.logprobs);
    assert_int_equal(p.top_logprobs, 3);
    tl_oai_params_free(&p);
    expect_bad(TL_OAI_CHAT, "{}", "messages");
    expect_bad(TL_OAI_CHAT, "{\"messages\":[]}", "messages");
    expect_bad(TL_OAI_CHAT, "{\"messages\":\"hi\"}", "messages");
    expect_bad(TL_OAI_CHAT, "{\"messages\":[1]}", "messages[0]");
    expect_bad(TL_OAI_CHAT, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}",
               "messages[0].role");
    expect_bad(TL_OAI_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", "messages[0].role");
    expect_bad(TL_OAI_CHAT, "{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content");
    expect_bad(TL_OAI_CHAT,
               "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}",
               "messages[0].content[0]");
    expect_bad(TL_OAI_CHAT,
               "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}",
               "top_logprobs");
    expect_bad(TL_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":3}",
               "logprobs");
    expect_bad(TL_OAI_CHAT,
               "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
               "\"max_completion_tokens\":0}",
               "max_completion_tokens");
}

static void test_status_mapping(void **state)
{
    (void)state;
    const struct {
        tl_status st;
        int http;
    } m[] = {{TL_ERR_INVALID_ARG, 400}, {TL_ERR_TOO_LONG, 400}, {TL_ERR_UNSUPPORTED, 400},
             {TL_ERR_NOT_FOUND, 404},   {TL_ERR_FULL, 429},     {TL_ERR_NOMEM, 503},
             {TL_ERR_STATE, 503},       {TL_ERR_IO, 500},       {TL_ERR_FORMAT, 500}};
    for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
        struct tl_oai_error e;
        tl_oai_error_from_status(&e, m[i].st, "why");
        assert_int_equal(e.http_status, m[i].http);
        assert_string_equal(e.message, "why");
    }
}

static void test_error_json_shape(void **state)
{
    (void)state;
    struct tl_oai_error e;
    tl_oai_error_set(&e, 404, "invalid_request_error", "model_not_found", "model",
                     "The model '%s' does not exist", "gpt");
    json_t *j = tl_oai_error_json(&e);
    char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(s, "{\"error\":{\"code\":\"model_not_found\",\"message\":\"The model "
                           "'gpt' does not exist\",\"param\":\"model\",\"type\":"
                           "\"invalid_request_error\"}}");
    free(s);
    json_decref(j);
    tl_oai_error_set(&e, 500, "server_error", NULL, NULL, "x");
    j = tl_oai_error_json(&e);
    s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(s, "{\"error\":{\"code\":null,\"message\":\"x\",\"param\":null,\"type\":"
                           "\"server_error\"}}");
    free(s);
    json_decref(j);
}

static char *dump(json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(4));
    json_decref(j);
    return s;
}

static void test_response_shapes(void **state)
{
    (void)state;
    char *s = dump(tl_oai_envelope("cmpl-1", "text_completion", 7, "m",
                                   json_pack("[o]", tl_oai_text_choice(0, "hi", 2, NULL, "stop"))));
    assert_string_equal(s, "{\"choices\":[{\"finish_reason\":\"stop\",\"index\":0,\"logprobs\":"
                           "null,\"text\":\"hi\"}],\"created\":7,\"id\":\"cmpl-1\",\"model\":"
                           "\"m\",\"object\":\"text_completion\"}");
    free(s);
    s = dump(tl_oai_chat_delta(1, true, "", 0, NULL, NULL));
    assert_string_equal(s, "{\"delta\":{\"content\":\"\",\"role\":\"assistant\"},"
                           "\"finish_reason\":null,\"index\":1,\"logprobs\":null}");
    free(s);
    s = dump(tl_oai_chat_delta(0, false, NULL, 0, NULL, "length"));
    assert_string_equal(s, "{\"delta\":{},\"finish_reason\":\"length\",\"index\":0,"
                           "\"logprobs\":null}");
    free(s);
    s = dump(tl_oai_chat_choice(0, "yo", 2, NULL, "stop"));
    assert_string_equal(s, "{\"finish_reason\":\"stop\",\"index\":0,\"logprobs\":null,"
                           "\"message\":{\"content\":\"yo\",\"role\":\"assistant\"}}");
    free(s);
    s = dump(tl_oai_usage_json(5, 3, 2));
    assert_string_equal(s, "{\"completion_tokens\":3,\"prompt_tokens\":5,"
                           "\"prompt_tokens_details\":{\"cached_tokens\":2},\"total_tokens\":8}");
    free(s);
    assert_string_equal(tl_oai_finish_str(TL_FINISH_LENGTH), "length");
    assert_string_equal(tl_oai_finish_str(TL_FINISH_CANCELLED), "abort");
}

static void test_invalid_utf8_output_is_replaced(void **state)
{
    (void)state;
    json_t *j = tl_oai_string("a\xE2\x82", 3); // a truncated euro sign
    assert_string_equal(json_string_value(j), "a\xEF\xBF\xBD\xEF\xBF\xBD");
    json_decref(j);
    j = tl_oai_string("\xC3\xA9", 2);
    assert_string_equal(json_string_value(j), "\xC3\xA9");
    json_decref(j);
}

static void test_logprobs_shapes(void **state)
{
    (void)state;
    struct tl_token_logprob top[2] = {{10, -0.25f}, {11, -1.5f}};
    const char *tt[2] = {" a", " b"};
    size_t tl[2] = {2, 2};
    struct tl_oai_logprobs lp;
    assert_true(tl_oai_logprobs_init(&lp, TL_OAI_COMPLETION, 4));
    assert_true(tl_oai_logprobs_add(&lp, " a", 2, -0.25f, top, tt, tl, 2));
    assert_true(tl_oai_logprobs_add(&lp, "!", 1, NAN, NULL, NULL, NULL, 0));
    char *s = dump(tl_oai_logprobs_take(&lp));
    assert_string_equal(s, "{\"text_offset\":[4,6],\"token_logprobs\":[-0.25,null],\"tokens\":"
                           "[\" a\",\"!\"],\"top_logprobs\":[{\" a\":-0.25,\" b\":-1.5},null]}");
    free(s);
    assert_true(tl_oai_logprobs_init(&lp, TL_OAI_CHAT, 0));
    assert_true(tl_oai_logprobs_add(&lp, "\xC3", 1, -INFINITY, top, tt, tl, 1));
    s = dump(tl_oai_logprobs_take(&lp));
    assert_string_equal(s, "{\"content\":[{\"bytes\":[195],\"logprob\":-9999.0,\"token\":"
                           "\"\xEF\xBF\xBD\",\"top_logprobs\":[{\"bytes\":[32,97],\"logprob\":"
                           "-0.25,\"token\":\" a\"}]}],\"refusal\":null}");
    free(s);
    tl_oai_logprobs_free(&lp);
}

// Random byte flips, truncations and insertions of valid bodies: every result is either a
// parsed request or a 400 with a message; nothing crashes (run under ASan in `make check`).
static void test_mutated_bodies(void **state)
{
    (void)state;
    const char *seeds[] = {
        "{\"prompt\":[\"a\",\"b\"],\"max_tokens\":5,\"stop\":[\"x\"],\"logprobs\":2,"
        "\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
        "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
        "\"hi\"}]}],\"top_logprobs\":1,\"logprobs\":true,\"n\":2}",
        "{\"prompt\":[[1,2],[3]],\"seed\":-1,\"temperature\":0.5,\"timeout\":2}",
    };
    uint64_t rng = 0x1234567;
    char buf[512];
    for (int iter = 0; iter < 20000; iter++) {
        const char *seed = seeds[iter % 3];
        size_t n = strlen(seed);
        memcpy(buf, seed, n);
        int edits = 1 + (int)(iter % 4);
        for (int e = 0; e < edits; e++) {
            uint64_t r = tl_xorshift64s(&rng);
            size_t at = (size_t)(r % n);
            switch ((r >> 32) % 3) {
            case 0:
                buf[at] = (char)(r >> 40);
                break; // flip a byte
            case 1:
                n = at;
                break; // truncate
            default:   // duplicate a byte
                if (n + 1 < sizeof(buf)) {
                    memmove(buf + at + 1, buf + at, n - at);
                    n++;
                }
                break;
            }
            if (n == 0) break;
        }
        struct tl_oai_params p;
        struct tl_oai_error e;
        memset(&e, 0, sizeof(e));
        enum tl_oai_kind k = iter % 3 == 1 ? TL_OAI_CHAT : TL_OAI_COMPLETION;
        if (tl_oai_parse(k, buf, n, &lim, &p, &e)) {
            tl_oai_params_free(&p);
        } else {
            assert_int_equal(e.http_status, 400);
            assert_true(e.message[0] != '\0');
        }
    }
}

// JSON strings may hold NUL: a role, content-part type or model that only starts with a
// valid name is not that name.
static void test_nul_in_names(void **state)
{
    (void)state;
    expect_bad(TL_OAI_CHAT, "{\"messages\":[{\"role\":\"user\\u0000x\",\"content\":\"hi\"}]}",
               "messages[0].role");
    expect_bad(TL_OAI_CHAT, "{\"messages\":[{\"role\":\"system\\u0000\",\"content\":\"hi\"}]}",
               "messages[0].role");
    expect_bad(TL_OAI_CHAT,
               "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\\u0000image\","
               "\"text\":\"hi\"}]}]}",
               "messages[0].content[0]");
    expect_bad(TL_OAI_COMPLETION, "{\"prompt\":\"x\",\"model\":\"m\\u0000other\"}", "model");
    struct tl_oai_params p;
    struct tl_oai_error e;
    // NUL inside content is carried with its length.
    assert_true(parse(TL_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}",
                      &p, &e));
    assert_int_equal(p.msgs[0].content_len, 3);
    tl_oai_params_free(&p);
}

TL_TEST_MAIN(cmocka_unit_test(test_completion_defaults),
             cmocka_unit_test(test_completion_all_fields), cmocka_unit_test(test_prompt_shapes),
             cmocka_unit_test(test_field_types_and_ranges), cmocka_unit_test(test_malformed_bodies),
             cmocka_unit_test(test_chat_messages), cmocka_unit_test(test_status_mapping),
             cmocka_unit_test(test_error_json_shape), cmocka_unit_test(test_response_shapes),
             cmocka_unit_test(test_invalid_utf8_output_is_replaced),
             cmocka_unit_test(test_logprobs_shapes), cmocka_unit_test(test_mutated_bodies),
             cmocka_unit_test(test_nul_in_names))
