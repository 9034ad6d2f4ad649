/*
 * Tool-call and reasoning parsing of scripted model replies (src/chat/toolcall*.c,
 * reasoning.c), one case per syntax of the shared templates. Oracle: the content, reasoning
 * and calls each reply stands for, written out by hand from the syntax the template teaches;
 * arguments are compared as JSON values. Every reply is also fed split at every byte (two
 * pieces) and one byte at a time, and must give exactly what one piece gives.
 */
#include "tl_test.h"

#include "chat/toolcall.h"
#include "core/error.h"

#include <ctype.h>
#include <jansson.h>

struct result {
    char content[4096];
    size_t n_content;
    char reasoning[4096];
    size_t n_reasoning;
    char calls[8][3][512]; // id, name, arguments
    int n_calls;
    int n_events;
};

static void on_event(void *user, const struct tl_toolcall_event *ev)
{
    struct result *r = user;
    r->n_events++;
    if (ev->kind == TL_TOOLCALL_CALL) {
        assert_int_equal(ev->index, r->n_calls);
        assert_true(r->n_calls < 8);
        snprintf(r->calls[r->n_calls][0], 512, "%s", ev->call->id);
        snprintf(r->calls[r->n_calls][1], 512, "%s", ev->call->name);
        snprintf(r->calls[r->n_calls][2], 512, "%s", ev->call->arguments);
        r->n_calls++;
        return;
    }
    assert_true(ev->len > 0);
    char *dst = ev->kind == TL_TOOLCALL_CONTENT ? r->content : r->reasoning;
    size_t *n = ev->kind == TL_TOOLCALL_CONTENT ? &r->n_content : &r->n_reasoning;
    assert_true(*n + ev->len < 4096);
    memcpy(dst + *n, ev->text, ev->len);
    *n += ev->len;
    dst[*n] = 0;
}

// Runs text through a parser cut at the given points (sorted, n_cuts of them; -1: every byte).
static void run_cuts(const struct tl_toolcall_config *cfg, const char *text, const size_t *cuts,
                     int n_cuts, struct result *r)
{
    memset(r, 0, sizeof(*r));
    tl_toolcall_parser *p = tl_toolcall_parser_create(cfg, on_event, r);
    assert_non_null(p);
    size_t len = strlen(text), at = 0;
    if (n_cuts < 0) {
        for (size_t i = 0; i < len; i++)
            assert_int_equal(tl_toolcall_parser_feed(p, text + i, 1), TL_OK);
    } else {
        for (int i = 0; i <= n_cuts; i++) {
            size_t end = i < n_cuts ? cuts[i] : len;
            assert_int_equal(tl_toolcall_parser_feed(p, text + at, end - at), TL_OK);
            at = end;
        }
    }
    assert_int_equal(tl_toolcall_parser_finish(p), TL_OK);
    assert_int_equal(tl_toolcall_parser_n_calls(p), r->n_calls);
    tl_toolcall_parser_destroy(p);
}

static void same_result(const struct result *a, const struct result *b, const char *what)
{
    if (strcmp(a->content, b->content) || strcmp(a->reasoning, b->reasoning) ||
        a->n_calls != b->n_calls)
        fail_msg("%s: content '%s' vs '%s', reasoning '%s' vs '%s', calls %d vs %d", what,
                 a->content, b->content, a->reasoning, b->reasoning, a->n_calls, b->n_calls);
    for (int i = 0; i < a->n_calls; i++)
        for (int k = 0; k < 3; k++)
            assert_string_equal(a->calls[i][k], b->calls[i][k]);
}

struct expect_call {
    const char *name;
    const char *args; // JSON text of the expected object
};

// Parses text whole, split in two at every byte and byte by byte; checks the expectation.
static void check(const struct tl_toolcall_config *cfg, const char *text, const char *content,
                  const char *reasoning, const struct expect_call *calls, int n_calls)
{
    struct result whole, part;
    run_cuts(cfg, text, NULL, 0, &whole);
    if (strcmp(whole.content, content))
        fail_msg("content: got '%s', want '%s' (reply '%s')", whole.content, content, text);
    assert_string_equal(whole.reasoning, reasoning);
    if (whole.n_calls != n_calls)
        fail_msg("calls: got %d, want %d (reply '%s', content '%s')", whole.n_calls, n_calls, text,
                 whole.content);
    for (int i = 0; i < n_calls; i++) {
        assert_string_equal(whole.calls[i][1], calls[i].name);
        json_t *got = json_loads(whole.calls[i][2], 0, NULL);
        json_t *want = json_loads(calls[i].args, 0, NULL);
        assert_non_null(got);
        assert_non_null(want);
        if (!json_equal(got, want))
            fail_msg("call %d arguments: got %s, want %s", i, whole.calls[i][2], calls[i].args);
        json_decref(got);
        json_decref(want);
        assert_true(strlen(whole.calls[i][0]) > 0);
        for (int j = 0; j < i; j++)
            assert_string_not_equal(whole.calls[i][0], whole.calls[j][0]);
    }
    size_t len = strlen(text);
    for (size_t cut = 1; cut < len; cut++) {
        run_cuts(cfg, text, &cut, 1, &part);
        char what[64];
        snprintf(what, sizeof(what), "cut at %zu", cut);
        same_result(&whole, &part, what);
    }
    run_cuts(cfg, text, NULL, -1, &part);
    same_result(&whole, &part, "byte by byte");
}

static const char *const tools[] = {"get_weather", "get_time", "python", "brave_search"};

static struct tl_toolcall_config config(enum tl_tool_syntax s)
{
    struct tl_toolcall_config c = {
        .syntax = s, .parse_calls = true, .tool_names = tools, .n_tool_names = 4, .id_seed = 42};
    return c;
}

static const struct expect_call paris = {"get_weather", "{\"city\": \"Paris\"}"};
static const struct expect_call tokyo = {"get_time", "{\"tz\": \"Asia/Tokyo\", \"h24\": true}"};

// ---- detection --------------------------------------------------------------------------------

static char *read_template(const char *name)
{
    char rel[256];
    snprintf(rel, sizeof(rel), "templates/%s", name);
    FILE *f = fopen(tl_test_shared(rel), "rb");
    assert_non_null(f);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

static void test_detect_shared_templates(void **state)
{
    static const struct {
        const char *file;
        enum tl_tool_syntax syntax;
        const char *think_open;
    } cases[] = {
        {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", TL_TOOL_HERMES, NULL},
        {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", TL_TOOL_HERMES, NULL},
        {"Qwen-Qwen2.5-7B-Instruct.jinja", TL_TOOL_HERMES, NULL},
        {"meta-llama-Llama-3.1-8B-Instruct.jinja", TL_TOOL_LLAMA3, NULL},
        {"meta-llama-Llama-3.2-3B-Instruct.jinja", TL_TOOL_LLAMA3, NULL},
        {"meta-llama-Llama-3.3-70B-Instruct.jinja", TL_TOOL_LLAMA3, NULL},
        {"mistralai-Mistral-Nemo-Instruct-2407.jinja", TL_TOOL_MISTRAL, NULL},
        {"CohereForAI-c4ai-command-r-plus-tool_use.jinja", TL_TOOL_COMMAND_R, NULL},
        {"CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", TL_TOOL_COMMAND_R7B,
         "<|START_THINKING|>"},
        {"meetkai-functionary-medium-v3.1.jinja", TL_TOOL_FUNCTIONARY_V31, NULL},
        {"meetkai-functionary-medium-v3.2.jinja", TL_TOOL_FUNCTIONARY_V32, NULL},
        {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", TL_TOOL_DEEPSEEK_R1, "<think>"},
        {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", TL_TOOL_DEEPSEEK_R1, "<think>"},
        {"llama-cpp-deepseek-r1.jinja", TL_TOOL_DEEPSEEK_R1, "<think>"},
        {"fireworks-ai-llama-3-firefunction-v2.jinja", TL_TOOL_FIREFUNCTION_V2, NULL},
        {"google-gemma-2-2b-it.jinja", TL_TOOL_GENERIC, NULL},
        {"microsoft-Phi-3.5-mini-instruct.jinja", TL_TOOL_GENERIC, NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *t = read_template(cases[i].file);
        enum tl_tool_syntax got = tl_tool_syntax_detect(t);
        if (got != cases[i].syntax)
            fail_msg("%s: detected %s, want %s", cases[i].file, tl_tool_syntax_name(got),
                     tl_tool_syntax_name(cases[i].syntax));
        struct tl_reasoning_tags r = tl_reasoning_detect(t);
        if (cases[i].think_open)
            assert_string_equal(r.open, cases[i].think_open);
        else
            assert_null(r.open);
    }
    assert_int_equal(tl_tool_syntax_detect(NULL), TL_TOOL_GENERIC);
    for (int s = 0; s < TL_TOOL_SYNTAX_COUNT; s++) {
        enum tl_tool_syntax back;
        assert_true(tl_tool_syntax_from_name(tl_tool_syntax_name(s), &back));
        assert_int_equal(back, s);
    }
    enum tl_tool_syntax dummy;
    assert_false(tl_tool_syntax_from_name("bogus", &dummy));
}

// ---- syntaxes ---------------------------------------------------------------------------------

static void test_hermes(void **state)
{
    struct tl_toolcall_config c = config(TL_TOOL_HERMES);
    const struct expect_call two[] = {paris, tokyo};
    check(&c,
          "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
          "</tool_call>",
          "", "", &paris, 1);
    check(&c,
          "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
          "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": "
          "{\"tz\": \"Asia/Tokyo\", \"h24\": true}}\n</tool_call>\n",
          "Let me check.", "", two, 2);
    // no closing tag before the end of the reply: still a call
    check(&c, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}", "",
          "", &paris, 1);
    // arguments given as a JSON string
    check(&c,
          "<tool_call>{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": "
          "\\\"Paris\\\"}\"}</tool_call>",
          "", "", &paris, 1);
    // plain text with a lone '<' and a tag-like word stays content, whitespace included
    check(&c, "a < b and <tool> is not <tool_cal either\n",
          "a < b and <tool> is not <tool_cal "
          "either\n",
          "", NULL, 0);
}

static void test_malformed_calls_are_content(void **state)
{
    struct tl_toolcall_config c = config(TL_TOOL_HERMES);
    const char *broken = "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                         "}</tool_call>";
    check(&c, broken, broken, "", NULL, 0);
    const char *unknown = "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>";
    check(&c, unknown, unknown, "", NULL, 0);
    const char *not_object = "<tool_call>{\"name\": \"get_weather\", \"arguments\": "
                             "[1]}</tool_call>";
    check(&c, not_object, not_object, "", NULL, 0);
    // a bad call between good ones: the good ones are calls, the bad one content
    check(&c,
          "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"
          "</tool_call><tool_call>oops</tool_call>",
          "<tool_call>oops</tool_call>", "", &paris, 1);
    struct tl_toolcall_config m = config(TL_TOOL_MISTRAL);
    check(&m, "[TOOL_CALLS] not json", "[TOOL_CALLS] not json", "", NULL, 0);
    check(&m, "[TOOL_CALLS][{\"name\": \"get_weather\"", "[TOOL_CALLS][{\"name\": \"get_weather\"",
          "", NULL, 0);
    struct tl_toolcall_config l = config(TL_TOOL_LLAMA3);
    check(&l, "{\"answer\": 42}", "{\"answer\": 42}", "", NULL, 0);
}

static void test_llama3(void **state)
{
    struct tl_toolcall_config c = config(TL_TOOL_LLAMA3);
    check(&c, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "", "", &paris,
          1);
    check(&c,
          "\n {\"type\": \"function\", \"name\": \"get_weather\", \"parameters\": {\"city\": "
          "\"Paris\"}}",
          "", "", &paris, 1);
    // JSON after prose is not a call (Llama 3 calls are the whole reply)
    check(&c, "Sure: {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
          "Sure: {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "", NULL, 0);
    const struct expect_call search = {"brave_search", "{\"query\": \"a, b\", \"n\": 3}"};
    check(&c, "<|python_tag|>brave_search.call(query=\"a, b\", n=3)", "", "", &search, 1);
    const struct expect_call code = {"python", "{\"code\": \"print(1 + 1)\"}"};
    check(&c, "<|python_tag|>print(1 + 1)", "", "", &code, 1);
    const struct expect_call two[] = {paris, tokyo};
    check(&c,
          "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; "
          "{\"name\": \"get_time\", \"parameters\": {\"tz\": \"Asia/Tokyo\", \"h24\": true}}",
          "", "", two, 2);
}

static void test_mistral(void **state)
{
    struct tl_toolcall_config c = config(TL_TOOL_MISTRAL);
    const struct expect_call two[] = {paris, tokyo};
    check(&c,
          "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": "
          "\"abcDEF123\"}, {\"name\": \"get_time\", \"arguments\": {\"tz\": \"Asia/Tokyo\", "
          "\"h24\": true}}]",
          "", "", two, 2);
    struct result r;
    run_cuts(&c,
             "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {}, \"id\": \"abcDEF123\"}, "
             "{\"name\": \"get_time\", \"arguments\": {}}]",
             NULL, 0, &r);
    assert_int_equal(r.n_calls, 2);
    assert_string_equal(r.calls[0][0], "abcDEF123"); // the model's id is kept
    assert_int_equal(strlen(r.calls[1][0]), 9);      // Mistral's templates need 9 characters
    for (int k = 0; k < 9; k++) // ... letters and digits ([a-zA-Z0-9]{9})
        assert_true(isalnum((unsigned char)r.calls[1][0][k]));
    assert_string_equal(r.calls[0][2], "{}");
}

static void test_command_r(void **state)
{
    struct tl_toolcall_config c = config(TL_TOOL_COMMAND_R);
    const struct expect_call two[] = {paris, tokyo};
    check(&c,
          "Action: ```json\n[\n    {\n        \"tool_name\": \"get_weather\",\n        "
          "\"parameters\": {\"city\": \"Paris\"}\n    },\n    {\"tool_name\": \"get_time\", "
          "\"parameters\": {\"tz\": \"Asia/Tokyo\", \"h24\": true}}\n]\n```",
          "", "", two, 2);
    struct tl_toolcall_config r7 = config(TL_TOOL_COMMAND_R7B);
    r7.reasoning = (struct tl_reasoning_tags){"<|START_THINKING|>", "<|END_THINKING|>"};
    check(&r7,
          "<|START_THINKING|>I will look up the weather.<|END_THINKING|><|START_ACTION|>[\n    "
          "{\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": {\"city\": "
          "\"Paris\"}}\n]<|END_ACTION|>",
          "", "I will look up the weather.", &paris, 1);
    check(&r7, "<|START_RESPONSE|>It is sunny.<|END_RESPONSE|>", "It is sunny.", "", NULL, 0);
}

static void test_functionary(void **state)
{
    struct tl_toolcall_config c = config(TL_TOOL_FUNCTIONARY_V31);
    const struct expect_call two[] = {paris, tokyo};
    check(&c,
          "<function=get_weather>{\"city\": \"Paris\"}</function><function=get_time>{\"tz\": "
          "\"Asia/Tokyo\", \"h24\": true}</function>",
          "", "", two, 2);
    const struct expect_call code = {"python", "{\"code\": \"import os\\nprint(2)\"}"};
    check(&c, "Running it.<|python_tag|>import os\nprint(2)", "Running it.", "", &code, 1);

    struct tl_toolcall_config v2 = config(TL_TOOL_FUNCTIONARY_V32);
    check(&v2, "all\nHello there", "Hello there", "", NULL, 0);
    check(&v2,
          "all\nLet me look.>>>get_weather\n{\"city\": \"Paris\"}>>>get_time\n{\"tz\": "
          "\"Asia/Tokyo\", \"h24\": true}",
          "Let me look.", "", two, 2);
    check(&v2, "python\nprint(3)", "", "",
          &(struct expect_call){"python", "{\"code\": \"print(3)\"}"}, 1);
    // a recipient nobody offered: content, without the '>>>' the prompt wrote
    check(&v2, "launch\n{}", "launch\n{}", "", NULL, 0);
    // no tools offered: the recipient line of text still goes, calls stay text
    v2.parse_calls = false;
    assert_true(tl_tool_syntax_always_parsed(TL_TOOL_FUNCTIONARY_V32));
    assert_false(tl_tool_syntax_always_parsed(TL_TOOL_HERMES));
    check(&v2, "all\nHello there", "Hello there", "", NULL, 0);
    check(&v2, "get_time\n{\"tz\": \"UTC\"}", "get_time\n{\"tz\": \"UTC\"}", "", NULL, 0);
}

#define DS(x) "<\xef\xbd\x9ctool\xe2\x96\x81" x "\xef\xbd\x9c>"

static void test_deepseek_r1(void **state)
{
    struct tl_toolcall_config c = config(TL_TOOL_DEEPSEEK_R1);
    c.reasoning = (struct tl_reasoning_tags){"<think>", "</think>"};
    c.reasoning_start_inside = true; // the template's prompt ends in "<think>\n"
    const struct expect_call two[] = {paris, tokyo};
    check(
        &c,
        "The user wants weather.\n</think>\n\n" DS("calls\xe2\x96\x81"
                                                   "begin")
            DS("call\xe2\x96\x81"
               "begin") "function" DS("sep") "get_weather\n```json\n{\"city\": "
                                             "\"Paris\"}\n```" DS(
                                                 "call\xe2\x96\x81"
                                                 "end") "\n" DS("call\xe2\x96\x81"
                                                                "begin") "function" DS("sep") "get_"
                                                                                              "time"
                                                                                              "\n``"
                                                                                              "`jso"
                                                                                              "n\n{"
                                                                                              "\"tz"
                                                                                              "\": "
                                                                                              "\"As"
                                                                                              "ia/"
                                                                                              "Toky"
                                                                                              "o\","
                                                                                              " \"h"
                                                                                              "24\""
                                                                                              ": "
                                                                                              "true"
                                                                                              "}\n`"
                                                                                              "`"
                                                                                              "`" DS("call\xe2\x96\x81"
                                                                                                     "end")
                                                                                                  DS("calls\xe2\x96\x81"
                                                                                                     "end"),
        "", "The user wants weather.\n", two, 2);
}

static void test_firefunction_and_generic(void **state)
{
    struct tl_toolcall_config c = config(TL_TOOL_FIREFUNCTION_V2);
    const struct expect_call two[] = {paris, tokyo};
    check(
        &c,
        " functools[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": "
        "\"get_time\", \"arguments\": {\"tz\": \"Asia/Tokyo\", \"h24\": true}}]",
        "", "", two, 2);
    struct tl_toolcall_config g = config(TL_TOOL_GENERIC);
    check(&g, "{\"tool_call\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}}",
          "", "", &paris, 1);
    check(&g,
          "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
          "{\"name\": \"get_time\", \"arguments\": {\"tz\": \"Asia/Tokyo\", \"h24\": true}}]}",
          "", "", two, 2);
    check(&g, "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]", "", "", &paris,
          1);
    check(&g, "Hello {world}", "Hello {world}", "", NULL, 0);
    // calls off: the same text is content
    g.parse_calls = false;
    check(&g, "{\"name\": \"get_weather\", \"arguments\": {}}",
          "{\"name\": \"get_weather\", \"arguments\": {}}", "", NULL, 0);
}

// ---- reasoning --------------------------------------------------------------------------------

static void test_reasoning(void **state)
{
    struct tl_toolcall_config c = {.syntax = TL_TOOL_GENERIC, .reasoning = {"<think>", "</think>"}};
    check(&c, "<think>Hmm, 2+2.</think>\n\nIt is 4.", "It is 4.", "Hmm, 2+2.", NULL, 0);
    check(&c, "  <think>x</think>y", "  y", "x", NULL, 0); // leading space before the tag
    check(&c, "No thinking. <think>not a tag here</think>",
          "No thinking. <think>not a tag here</think>", "", NULL, 0);
    check(&c, "<thin", "<thin", "", NULL, 0);
    check(&c, "<think>never closed", "", "never closed", NULL, 0);
    c.reasoning_start_inside = true; // R1: the prompt opened it
    check(&c, "step 1 </thin k> still</think>Done", "Done", "step 1 </thin k> still", NULL, 0);
    check(&c, "only thoughts", "", "only thoughts", NULL, 0);
    check(&c, "</</think></think>", "</think>", "</", NULL, 0);
    // reasoning and a Hermes call together (Qwen3 / QwQ)
    struct tl_toolcall_config q = config(TL_TOOL_HERMES);
    q.reasoning = (struct tl_reasoning_tags){"<think>", "</think>"};
    check(&q,
          "<think>Need weather.</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
          "{\"city\": \"Paris\"}}\n</tool_call>",
          "", "Need weather.", &paris, 1);
}

static void test_ids_deterministic_and_distinct(void **state)
{
    struct tl_toolcall_config c = config(TL_TOOL_HERMES);
    const char *reply = "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>"
                        "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>";
    struct result a, b;
    run_cuts(&c, reply, NULL, 0, &a);
    run_cuts(&c, reply, NULL, 0, &b);
    assert_int_equal(a.n_calls, 2);
    assert_string_equal(a.calls[0][0], b.calls[0][0]);
    assert_string_not_equal(a.calls[0][0], a.calls[1][0]);
    assert_int_equal(strlen(a.calls[0][0]), 29);
    assert_memory_equal(a.calls[0][0], "call_", 5);
    for (int i = 0; i < 2; i++) // OpenAI's form: "call_" and 24 letters or digits
        for (int k = 5; k < 29; k++)
            assert_true(isalnum((unsigned char)a.calls[i][0][k]));
    c.id_seed = 43;
    run_cuts(&c, reply, NULL, 0, &b);
    assert_string_not_equal(a.calls[0][0], b.calls[0][0]);
}

// ---- running out of memory --------------------------------------------------------------------

// Jansson's allocator for the test below: the first json_ok allocations succeed, the rest fail.
static int json_ok = -1; // -1: no limit

static void *json_limited_malloc(size_t n)
{
    if (json_ok == 0) return NULL;
    if (json_ok > 0) json_ok--;
    return malloc(n);
}

// A call whose JSON cannot be read for want of memory fails the parser with TL_ERR_NOMEM; it
// does not come back as text. Oracle: with every allocation allowed the reply is one call; with
// Jansson's first allocation failing it is TL_ERR_NOMEM and no content. With the k-th failing
// (k = 1..63) it is the call, TL_ERR_NOMEM, or (where Jansson 2.14 reports the failure as a
// syntax error, see load_json) content; never a wrong call, and the parser stays usable.
static void test_json_out_of_memory_is_an_error(void **state)
{
    const struct tl_toolcall_config c = config(TL_TOOL_HERMES);
    const char *reply = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                        "\"Paris\"}}\n</tool_call>";
    json_set_alloc_funcs(json_limited_malloc, free);
    int n_nomem = 0, n_whole = 0;
    for (int k = -1; k < 64; k++) {
        struct result r;
        memset(&r, 0, sizeof(r));
        tl_toolcall_parser *p = tl_toolcall_parser_create(&c, on_event, &r);
        assert_non_null(p);
        json_ok = k;
        tl_status rc = tl_toolcall_parser_feed(p, reply, strlen(reply));
        if (rc == TL_OK) rc = tl_toolcall_parser_finish(p);
        json_ok = -1;
        tl_toolcall_parser_destroy(p);
        if (k <= 0) {
            // -1: no limit; 0: the very first JSON allocation fails
            assert_int_equal(rc, k < 0 ? TL_OK : TL_ERR_NOMEM);
            assert_int_equal(r.n_content, 0);
            assert_int_equal(r.n_calls, k < 0 ? 1 : 0);
        }
        if (rc == TL_ERR_NOMEM) {
            assert_int_equal(r.n_calls, 0);
            n_nomem++;
        } else {
            assert_int_equal(rc, TL_OK);
            if (r.n_calls) {
                assert_int_equal(r.n_calls, 1);
                assert_string_equal(r.calls[0][1], "get_weather");
                assert_string_equal(r.calls[0][2], "{\"city\":\"Paris\"}");
                n_whole++;
            }
        }
    }
    json_set_alloc_funcs(malloc, free);
    assert_true(n_nomem > 0);
    assert_true(n_whole > 1); // no limit, and 63 allocations are enough for this reply
}

TL_TEST_MAIN(cmocka_unit_test(test_detect_shared_templates), cmocka_unit_test(test_hermes),
             cmocka_unit_test(test_malformed_calls_are_content), cmocka_unit_test(test_llama3),
             cmocka_unit_test(test_mistral), cmocka_unit_test(test_command_r),
             cmocka_unit_test(test_functionary), cmocka_unit_test(test_deepseek_r1),
             cmocka_unit_test(test_firefunction_and_generic), cmocka_unit_test(test_reasoning),
             cmocka_unit_test(test_ids_deterministic_and_distinct),
             cmocka_unit_test(test_json_out_of_memory_is_an_error))
