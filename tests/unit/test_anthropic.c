/*
 * Tests for the Anthropic Messages API adapter (src/server/anthropic.c, anthropic_reply.c): the
 * translation of Messages bodies into chat bodies, compared with the OpenAI body written by
 * hand for the same conversation (and then parsed by the chat parser, as the server does); each
 * refused input as a 400 naming its field; the error object's shape per HTTP status as
 * Anthropic's API reference lists them; the stream's event framing from chat_reply deltas;
 * mutated bodies never crash.
 */
#include "tl_test.h"

#include "server/anthropic.h"

static json_t *load(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (!j) fail_msg("bad test JSON at %d: %s", je.position, je.text);
    return j;
}

// Translates body and compares with want (an OpenAI chat body).
static void expect_chat(const char *body, bool count_only, const char *want)
{
    json_t *b = load(body), *w = load(want), *chat = NULL;
    struct tl_oai_error e;
    memset(&e, 0, sizeof(e));
    if (!tl_anth_translate(b, count_only, &chat, &e)) fail_msg("refused: %s (%s)", e.message, body);
    if (!json_equal(chat, w)) {
        char *got = json_dumps(chat, JSON_SORT_KEYS);
        char *exp = json_dumps(w, JSON_SORT_KEYS);
        fail_msg("got  %s\nwant %s", got, exp);
    }
    json_decref(b);
    json_decref(w);
    json_decref(chat);
}

// Expects a 400 whose param is `param` and whose message mentions `mention`.
static void expect_bad(const char *body, bool count_only, const char *param, const char *mention)
{
    json_t *b = load(body), *chat = NULL;
    struct tl_oai_error e;
    memset(&e, 0, sizeof(e));
    if (tl_anth_translate(b, count_only, &chat, &e)) fail_msg("accepted: %s", body);
    assert_null(chat);
    assert_int_equal(e.http_status, 400);
    assert_string_equal(e.type, "invalid_request_error");
    if (strcmp(e.param, param)) fail_msg("param '%s', want '%s' (%s)", e.param, param, body);
    if (!strstr(e.message, mention)) fail_msg("message '%s' lacks '%s'", e.message, mention);
    json_decref(b);
}

static void test_minimal(void **state)
{
    (void)state;
    expect_chat("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":"
                "\"hi\"}]}",
                false,
                "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":"
                "\"hi\"}]}");
}

// Every feature at once, against the OpenAI body an OpenAI client would send for it.
static void test_full_conversation(void **state)
{
    (void)state;
    const char *body =
        "{\"model\":\"m\",\"max_tokens\":64,\"temperature\":0.5,\"top_p\":0.9,\"top_k\":40,"
        "\"stream\":true,\"stop_sequences\":[\"END\"],\"metadata\":{\"user_id\":\"u1\"},"
        "\"thinking\":{\"type\":\"disabled\"},"
        "\"system\":[{\"type\":\"text\",\"text\":\"Be brief.\",\"cache_control\":{\"type\":"
        "\"ephemeral\"}},{\"type\":\"text\",\"text\":\"Use tools.\"}],"
        "\"tools\":[{\"name\":\"get_weather\",\"description\":\"Weather\",\"input_schema\":"
        "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}],"
        "\"tool_choice\":{\"type\":\"tool\",\"name\":\"get_weather\","
        "\"disable_parallel_tool_use\":true},"
        "\"messages\":["
        "{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"need tool\","
        "\"signature\":\"sig\"},{\"type\":\"text\",\"text\":\"Checking.\"},{\"type\":"
        "\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_weather\",\"input\":{\"city\":"
        "\"Paris\"}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\","
        "\"content\":[{\"type\":\"text\",\"text\":\"Sunny\"},{\"type\":\"text\",\"text\":"
        "\"21 C\"}]},{\"type\":\"text\",\"text\":\"And tomorrow?\"}]}]}";
    const char *want =
        "{\"model\":\"m\",\"max_tokens\":64,\"temperature\":0.5,\"top_p\":0.9,\"top_k\":40,"
        "\"stream\":true,\"stop\":[\"END\"],\"chat_template_kwargs\":{\"enable_thinking\":false},"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
        "\"description\":\"Weather\",\"parameters\":{\"type\":\"object\",\"properties\":"
        "{\"city\":{\"type\":\"string\"}}}}}],"
        "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}},"
        "\"parallel_tool_calls\":false,"
        "\"messages\":["
        "{\"role\":\"system\",\"content\":[{\"type\":\"text\",\"text\":\"Be brief.\"},{\"type\":"
        "\"text\",\"text\":\"Use tools.\"}]},"
        "{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
        "{\"role\":\"assistant\",\"content\":\"Checking.\",\"reasoning_content\":\"need tool\","
        "\"tool_calls\":[{\"id\":\"toolu_1\",\"type\":\"function\",\"function\":{\"name\":"
        "\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"toolu_1\",\"name\":\"get_weather\",\"content\":"
        "\"Sunny\\n21 C\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"And tomorrow?\"}]}]}";
    expect_chat(body, false, want);

    // The chat parser takes it as the server does: a forced call of the named function, one call
    // only, the stop string, the sampling fields.
    json_t *b = load(body), *chat;
    struct tl_oai_error e;
    assert_true(tl_anth_translate(b, false, &chat, &e));
    struct tl_oai_params p;
    struct tl_oai_limits lim = {.n_vocab = 512};
    if (!tl_oai_parse_root(TL_OAI_CHAT, chat, &lim, &p, &e)) fail_msg("%s", e.message);
    assert_int_equal(p.n_msgs, 5);
    assert_true(p.tool_forced);
    assert_string_equal(p.tool_forced_name, "get_weather");
    assert_false(p.parallel_tool_calls);
    assert_int_equal(p.n_stop, 1);
    assert_string_equal(p.stop[0], "END");
    assert_int_equal(p.max_tokens, 64);
    assert_int_equal(p.sampling.top_k, 40);
    assert_true(p.stream);
    tl_oai_params_free(&p);
    json_decref(b);
}

static void test_turns_combine_and_prefill(void **state)
{
    (void)state;
    // Consecutive user turns combine (Anthropic does); a final assistant turn is a prefill; an
    // error result says so; tool_choice any/auto/none; thinking enabled.
    expect_chat(
        "{\"max_tokens\":2000,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024},"
        "\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],"
        "\"tool_choice\":{\"type\":\"any\"},\"messages\":["
        "{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":[{\"type\":"
        "\"text\",\"text\":\"b\"}]},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\","
        "\"input\":{}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t\","
        "\"is_error\":true,\"content\":\"boom\"}]},"
        "{\"role\":\"assistant\",\"content\":\"The answer is\"}]}",
        false,
        "{\"max_tokens\":2000,\"chat_template_kwargs\":{\"enable_thinking\":true},"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":"
        "\"object\"}}}],\"tool_choice\":\"required\",\"continue_final_message\":true,"
        "\"messages\":["
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\","
        "\"text\":\"b\"}]},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"t\",\"type\":"
        "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"t\",\"name\":\"f\",\"content\":\"Error: boom\"},"
        "{\"role\":\"assistant\",\"content\":\"The answer is\"}]}");
    // output_config.format: structured output, as response_format.
    expect_chat("{\"max_tokens\":1,\"output_config\":{\"format\":{\"type\":\"json_schema\","
                "\"schema\":{\"type\":\"object\"}},\"effort\":null},\"messages\":[{\"role\":"
                "\"user\",\"content\":\"x\"}]}",
                false,
                "{\"max_tokens\":1,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
                "{\"name\":\"output\",\"schema\":{\"type\":\"object\"}}},\"messages\":[{\"role\":"
                "\"user\",\"content\":\"x\"}]}");
    expect_chat("{\"max_tokens\":1,\"tool_choice\":{\"type\":\"none\"},\"messages\":[{\"role\":"
                "\"user\",\"content\":\"x\"}]}",
                false,
                "{\"max_tokens\":1,\"tool_choice\":\"none\",\"messages\":[{\"role\":\"user\","
                "\"content\":\"x\"}]}");
    // count_tokens: no max_tokens, the prompt-shaping fields only.
    expect_chat("{\"system\":\"s\",\"thinking\":{\"type\":\"adaptive\"},\"messages\":[{\"role\":"
                "\"user\",\"content\":\"x\"}]}",
                true,
                "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\","
                "\"content\":\"x\"}]}");
}

static void test_refused(void **state)
{
    (void)state;
    const char *u = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
    char b[1024];
#define BAD(fmt, count, param, mention)                                                            \
    do {                                                                                           \
        snprintf(b, sizeof(b), fmt, u);                                                            \
        expect_bad(b, count, param, mention);                                                      \
    } while (0)
    BAD("{%s}", false, "max_tokens", "'max_tokens' is required");
    BAD("{%s,\"max_tokens\":0}", false, "max_tokens", "at least 1");
    BAD("{%s,\"max_tokens\":1.5}", false, "max_tokens", "integer");
    BAD("{%s,\"max_tokens\":5}", true, "max_tokens", "not supported");
    BAD("{%s,\"max_tokens\":5,\"frobnicate\":1}", false, "frobnicate", "not supported");
    BAD("{%s,\"max_tokens\":5,\"temperature\":1.5}", false, "temperature", "between 0 and 1");
    BAD("{%s,\"max_tokens\":5,\"top_p\":0}", false, "top_p", "greater than 0");
    BAD("{%s,\"max_tokens\":5,\"top_k\":0}", false, "top_k", "at least 1");
    BAD("{%s,\"max_tokens\":5,\"stream\":1}", false, "stream", "boolean");
    BAD("{%s,\"max_tokens\":5,\"stop_sequences\":\"x\"}", false, "stop_sequences", "list");
    BAD("{%s,\"max_tokens\":5,\"stop_sequences\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", false,
        "stop_sequences", "at most 4");
    BAD("{%s,\"max_tokens\":5,\"stop_sequences\":[\"\"]}", false, "stop_sequences", "non-empty");
    BAD("{%s,\"max_tokens\":5,\"metadata\":{\"tags\":1}}", false, "metadata.tags", "metadata.tags");
    BAD("{%s,\"max_tokens\":5,\"service_tier\":\"priority\"}", false, "service_tier", "auto");
    BAD("{%s,\"max_tokens\":5,\"container\":\"c1\"}", false, "container", "container");
    BAD("{%s,\"max_tokens\":5,\"output_config\":{\"effort\":\"high\"}}", false,
        "output_config.effort", "effort");
    BAD("{%s,\"max_tokens\":5,\"output_config\":{\"format\":{\"type\":\"text\"}}}", false,
        "output_config.format", "json_schema");
    BAD("{%s,\"max_tokens\":5,\"output_config\":{\"verbosity\":1}}", false,
        "output_config.verbosity", "verbosity");
    BAD("{%s,\"max_tokens\":5,\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],"
        "\"tool_choice\":{\"type\":\"any\"},\"output_config\":{\"format\":{\"type\":"
        "\"json_schema\",\"schema\":{}}}}",
        false, "output_config.format", "forces a call");
    BAD("{%s,\"max_tokens\":5,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":100}}", false,
        "thinking", "1024");
    BAD("{%s,\"max_tokens\":1500,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":2000}}",
        false, "thinking", "less than 'max_tokens'");
    BAD("{%s,\"max_tokens\":5,\"thinking\":{\"type\":\"between_tools\"}}", false, "thinking",
        "thinking.type");
    BAD("{%s,\"max_tokens\":5,\"tool_choice\":\"auto\"}", false, "tool_choice", "object");
    BAD("{%s,\"max_tokens\":5,\"tool_choice\":{\"type\":\"tool\",\"name\":\"nope\"}}", false,
        "tool_choice", "nope");
    BAD("{%s,\"max_tokens\":5,\"tools\":[{\"type\":\"bash_20250124\",\"name\":\"bash\"}]}", false,
        "tools[0]", "bash_20250124");
    BAD("{%s,\"max_tokens\":5,\"tools\":[{\"name\":\"a b\",\"input_schema\":{\"type\":"
        "\"object\"}}]}",
        false, "tools[0]", "name");
    BAD("{%s,\"max_tokens\":5,\"tools\":[{\"name\":\"f\"}]}", false, "tools[0]", "input_schema");
    BAD("{%s,\"max_tokens\":5,\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"},"
        "\"strict\":true}]}",
        false, "tools[0]", "strict");
    BAD("{%s,\"max_tokens\":5,\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}},"
        "{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}]}",
        false, "tools[1]", "twice");
    BAD("{%s,\"max_tokens\":5,\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"},"
        "\"defer_loading\":true}]}",
        false, "tools[0].defer_loading", "defer_loading");
#undef BAD
    const char *m = "{\"max_tokens\":5,\"messages\":%s}";
#define BADM(msgs, param, mention)                                                                 \
    do {                                                                                           \
        snprintf(b, sizeof(b), m, msgs);                                                           \
        expect_bad(b, false, param, mention);                                                      \
    } while (0)
    BADM("[]", "messages", "non-empty");
    BADM("{}", "messages", "non-empty");
    BADM("[1]", "messages[0]", "object");
    BADM("[{\"role\":\"bot\",\"content\":\"x\"}]", "messages[0].role", "user");
    BADM("[{\"role\":\"user\"}]", "messages[0].content", "required");
    BADM("[{\"role\":\"user\",\"content\":\"x\",\"name\":\"n\"}]", "messages[0].name", "name");
    BADM("[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{}}]}]",
         "messages[0].content[0]", "image blocks are not supported");
    BADM("[{\"role\":\"user\",\"content\":[{\"type\":\"document\",\"source\":{}}]}]",
         "messages[0].content[0]", "document");
    BADM("[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]", "messages[0].content[0]",
         "text");
    BADM(
        "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"x\",\"citations\":[{}]}]}]",
        "messages[0].content[0]", "citations");
    BADM("[{\"role\":\"user\",\"content\":[\"x\"]}]", "messages[0].content[0]", "block");
    BADM("[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t\"}]}]",
         "messages[0].content[0]", "no matching tool_use");
    // The result must answer the previous assistant turn, not an older one.
    BADM("[{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\","
         "\"input\":{}}]},{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\","
         "\"content\":\"y\"},{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
         "\"tool_use_id\":\"t\"}]}]",
         "messages[3].content[0]", "'t'");
    BADM("[{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\","
         "\"input\":[]}]}]",
         "messages[0].content[0]", "input");
    BADM("[{\"role\":\"assistant\",\"content\":[{\"type\":\"redacted_thinking\",\"data\":\"x\"}]}]",
         "messages[0].content[0]", "redacted_thinking");
    BADM("[{\"role\":\"assistant\",\"content\":[{\"type\":\"server_tool_use\"}]}]",
         "messages[0].content[0]", "server_tool_use");
#undef BADM
}

static void test_error_json(void **state)
{
    (void)state;
    static const struct {
        int status;
        const char *type;
    } cases[] = {{400, "invalid_request_error"},
                 {401, "authentication_error"},
                 {403, "permission_error"},
                 {404, "not_found_error"},
                 {413, "request_too_large"},
                 {429, "rate_limit_error"},
                 {500, "api_error"},
                 {503, "overloaded_error"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct tl_oai_error e;
        tl_oai_error_set(&e, cases[i].status, "x", NULL, NULL, "went \"wrong\" %d", 7);
        json_t *j = tl_anth_error_json(&e, "abc");
        json_t *want = json_pack("{s:s, s:{s:s, s:s}, s:s}", "type", "error", "error", "type",
                                 cases[i].type, "message", "went \"wrong\" 7", "request_id", "abc");
        assert_true(json_equal(j, want));
        json_decref(j);
        json_decref(want);
    }
}

// chat_reply deltas in, framed events out: blocks open and close as the kind changes.
static void test_stream_events(void **state)
{
    (void)state;
    const char *deltas[] = {
        "{\"reasoning_content\":\"hm\"}",
        "{\"reasoning_content\":\"m\"}",
        "{\"content\":\"\"}",
        "{\"content\":\"Hi\"}",
        "{\"tool_calls\":[{\"index\":0,\"id\":\"call_A1\",\"type\":\"function\",\"function\":"
        "{\"name\":\"f\",\"arguments\":\"\"}}]}",
        "{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"a\\\":1}\"}}]}",
        "{\"tool_calls\":[{\"index\":1,\"id\":\"call_B2\",\"type\":\"function\",\"function\":"
        "{\"name\":\"g\",\"arguments\":\"\"}}]}",
    };
    struct tl_anth_stream st = {0};
    struct tl_sb out;
    tl_sb_init(&out);
    for (size_t i = 0; i < sizeof(deltas) / sizeof(deltas[0]); i++) {
        json_t *d = load(deltas[i]);
        assert_true(tl_anth_stream_delta(&st, d, &out));
        json_decref(d);
    }
    tl_anth_stream_close(&st, &out);
    tl_anth_stream_close(&st, &out); // nothing open: nothing more
    const char *want =
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,"
        "\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n"
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,"
        "\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"hm\"}}\n\n"
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,"
        "\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"m\"}}\n\n"
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,"
        "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,"
        "\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n"
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n"
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,"
        "\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_A1\",\"name\":\"f\",\"input\":"
        "{}}}\n\n"
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,"
        "\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\\\":1}\"}}\n\n"
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":2}\n\n"
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":3,"
        "\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_B2\",\"name\":\"g\",\"input\":"
        "{}}}\n\n"
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":3}\n\n";
    assert_true(tl_sb_ok(&out));
    if (strcmp(out.buf, want)) fail_msg("got:\n%s", out.buf);
    tl_sb_free(&out);
    char *id = tl_anth_tool_id("abc");
    assert_string_equal(id, "toolu_abc");
    free(id);
}

// Mutated bodies: refused or translated, never a crash; a translation always parses or fails
// cleanly in the chat parser.
static void test_mutated_bodies(void **state)
{
    (void)state;
    const char *seeds[] = {
        "{\"max_tokens\":5,\"system\":[{\"type\":\"text\",\"text\":\"s\"}],\"messages\":[{\"role\":"
        "\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\","
        "\"id\":\"t\",\"name\":\"f\",\"input\":{\"a\":1}}]},{\"role\":\"user\",\"content\":"
        "[{\"type\":\"tool_result\",\"tool_use_id\":\"t\",\"content\":\"r\"}]}],\"tools\":"
        "[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}]}",
        "{\"max_tokens\":9,\"stream\":true,\"thinking\":{\"type\":\"disabled\"},\"tool_choice\":"
        "{\"type\":\"auto\"},\"tools\":[{\"name\":\"g\",\"input_schema\":{\"type\":\"object\"}}],"
        "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"x\"}]},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"t\","
        "\"signature\":\"\"}]}]}",
    };
    uint64_t rng = 0xABCDEF;
    char buf[640];
    int accepted = 0;
    for (int iter = 0; iter < 20000; iter++) {
        const char *seed = seeds[iter % 2];
        size_t n = strlen(seed);
        memcpy(buf, seed, n);
        int edits = 1 + (int)(iter % 3);
        for (int e = 0; e < edits; e++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            size_t at = (size_t)(rng % n);
            const char pool[] = "{}[]\":,0a-1tnx";
            buf[at] = (rng >> 40) % 3 ? pool[(rng >> 20) % (sizeof(pool) - 1)] : (char)(rng >> 48);
        }
        json_t *b = json_loadb(buf, n, 0, NULL);
        if (!b) continue;
        json_t *chat = NULL;
        struct tl_oai_error e;
        memset(&e, 0, sizeof(e));
        if (tl_anth_translate(b, iter % 5 == 0, &chat, &e)) {
            accepted++;
            struct tl_oai_params p;
            struct tl_oai_limits lim = {.n_vocab = 512};
            if (tl_oai_parse_root(TL_OAI_CHAT, chat, &lim, &p, &e)) tl_oai_params_free(&p);
        } else {
            assert_null(chat);
            assert_true(e.http_status == 400 && strlen(e.message) > 0);
        }
        json_decref(b);
    }
    assert_true(accepted > 0);
}

TL_TEST_MAIN(cmocka_unit_test(test_minimal), cmocka_unit_test(test_full_conversation),
             cmocka_unit_test(test_turns_combine_and_prefill), cmocka_unit_test(test_refused),
             cmocka_unit_test(test_error_json), cmocka_unit_test(test_stream_events),
             cmocka_unit_test(test_mutated_bodies))
