/*
 * Tests for the Jinja engine's failure behaviour (src/chat/jinja_*.c); rendering itself is
 * compared with Jinja2 in test_jinja_oracle.c. Here: parse errors name the line and column,
 * every limit (steps, time, output, memory, macro depth, expression nesting) stops a hostile
 * template with an error instead of hanging or crashing, raise_exception carries its message,
 * a shared template renders identically from several threads, and mutated real templates never
 * crash the parser or the renderer.
 */
#include "tl_test.h"

#include "chat/chat_render.h"

#include <pthread.h>

static tl_jinja_template *parse_ok(const char *src)
{
    tl_jinja_template *t = NULL;
    char err[256];
    tl_status st = tl_jinja_parse(src, strlen(src), &t, err, sizeof(err));
    if (st) fail_msg("parse failed: %s", err);
    return t;
}

static void expect_parse_error(const char *src, const char *want_prefix, const char *want_word)
{
    tl_jinja_template *t = NULL;
    char err[256];
    assert_int_equal(tl_jinja_parse(src, strlen(src), &t, err, sizeof(err)), TL_ERR_FORMAT);
    assert_null(t);
    if (strncmp(err, want_prefix, strlen(want_prefix)) || !strstr(err, want_word))
        fail_msg("error '%s' lacks '%s' ... '%s'", err, want_prefix, want_word);
}

static void test_parse_errors_name_line_and_column(void **state)
{
    (void)state;
    expect_parse_error("line one\n{{ 1 + }}", "line 2, column 8:", "expression");
    expect_parse_error("{% if x %}\nno end", "line 2, column 7:", "endif");
    expect_parse_error("ok\n\n   {% frobnicate %}", "line 3, column 7:", "frobnicate");
    expect_parse_error("{{ 'unterminated }}", "line 1, column 4:", "unterminated");
    expect_parse_error("{% for x in y %}{% endif %}", "line 1, column 20:", "endif");
    expect_parse_error("{{ x ", "line 1, column 1:", "unclosed");
    expect_parse_error("{# never closed", "line 1, column 1:", "comment");
    expect_parse_error("{{ a.(b) }}", "line 1, column 6:", "attribute");
    // Nesting deeper than the parser allows is an error, not a stack overflow.
    size_t n = 100000;
    char *deep = malloc(2 * n + 8);
    memcpy(deep, "{{", 2);
    memset(deep + 2, '(', n);
    deep[2 + n] = '1';
    memset(deep + 3 + n, ')', n);
    memcpy(deep + 3 + 2 * n, "}}", 3);
    expect_parse_error(deep, "line 1, column", "nested too deeply");
    memset(deep + 2, '[', n);
    memset(deep + 3 + n, ']', n);
    expect_parse_error(deep, "line 1, column", "nested too deeply");
    free(deep);
}

// Renders src with no variables; returns the status and leaves the message in err.
static tl_status render(const char *src, const struct tl_jinja_limits *lim,
                        enum tl_jinja_error_kind *kind, char *err, size_t err_size)
{
    tl_jinja_template *t = parse_ok(src);
    char *out = NULL;
    size_t len = 0;
    json_t *vars = json_object();
    tl_status st = tl_jinja_render(t, vars, NULL, lim, &out, &len, kind, err, err_size);
    json_decref(vars);
    free(out);
    tl_jinja_destroy(t);
    return st;
}

static void expect_render_error(const char *src, const struct tl_jinja_limits *lim,
                                enum tl_jinja_error_kind want_kind, const char *want)
{
    enum tl_jinja_error_kind kind;
    char err[512];
    tl_status st = render(src, lim, &kind, err, sizeof(err));
    assert_int_equal(st, TL_ERR_INVALID_ARG);
    assert_int_equal(kind, want_kind);
    if (!strstr(err, want)) fail_msg("error '%s' lacks '%s'", err, want);
}

static void test_limits_stop_hostile_templates(void **state)
{
    (void)state;
    struct tl_jinja_limits lim = tl_jinja_default_limits();
    lim.max_steps = 100000;
    lim.max_time_ms = 600000;
    expect_render_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
                        "{% endfor %}",
                        &lim, TL_JINJA_ERROR, "steps");
    lim = tl_jinja_default_limits();
    lim.max_output_bytes = 1 << 20;
    expect_render_error("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", &lim,
                        TL_JINJA_ERROR, "output exceeds");
    expect_render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL,
                        TL_JINJA_ERROR, "nested deeper");
    lim = tl_jinja_default_limits();
    lim.max_memory_bytes = 8 << 20;
    expect_render_error("{% set ns = namespace(s='x') %}{% for i in range(40) %}"
                        "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s | length }}",
                        &lim, TL_JINJA_ERROR, "memory");
    lim = tl_jinja_default_limits();
    lim.max_steps = INT64_MAX;
    lim.max_time_ms = 50;
    int64_t t0 = (int64_t)time(NULL);
    expect_render_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
                        "{% endfor %}",
                        &lim, TL_JINJA_ERROR, "longer than 50 ms");
    assert_true((int64_t)time(NULL) - t0 < 10);
    expect_render_error("{{ range(1000000) | length }}", NULL, TL_JINJA_ERROR, "Range too big");
    expect_render_error("{{ 'x' * 100000000000 }}", NULL, TL_JINJA_ERROR, "too large");
    expect_render_error("{{ 9223372036854775807 + 1 }}", NULL, TL_JINJA_ERROR, "overflow");
    expect_render_error("{{ 1 // 0 }}", NULL, TL_JINJA_ERROR, "by zero");
}

static void test_errors_carry_messages(void **state)
{
    (void)state;
    expect_render_error("a{{ raise_exception('Only user and assistant roles!') }}b", NULL,
                        TL_JINJA_RAISED, "Only user and assistant roles!");
    enum tl_jinja_error_kind kind;
    char err[512];
    assert_int_equal(render("x\n  {{ nothing.here }}", NULL, &kind, err, sizeof(err)),
                     TL_ERR_INVALID_ARG);
    assert_int_equal(kind, TL_JINJA_ERROR);
    // The exact message of raise_exception; other errors say where they happened.
    assert_string_equal(err, "line 2, column 13: 'nothing' is undefined (attribute access)");
    expect_render_error("{{ [1, 2] | tojson | length }}{{ ([1] | map('string')) | tojson }}", NULL,
                        TL_JINJA_ERROR, "not JSON serializable");
    expect_render_error("{{ unknown_function() }}", NULL, TL_JINJA_ERROR, "undefined");
    expect_render_error("{{ 1 | no_such_filter }}", NULL, TL_JINJA_ERROR, "no filter");
    expect_render_error("{{ 1 is no_such_test }}", NULL, TL_JINJA_ERROR, "no test");
    expect_render_error("{% set x = [1] %}{% set x.a = 1 %}", NULL, TL_JINJA_ERROR, "namespace");
}

// ---- one template, many threads

struct thread_arg {
    const tl_jinja_template *t;
    const json_t *vars;
    char *out;
};

static void *render_thread(void *p)
{
    struct thread_arg *a = p;
    for (int i = 0; i < 50; i++) {
        free(a->out);
        a->out = NULL;
        size_t len;
        enum tl_jinja_error_kind kind;
        char err[256];
        if (tl_jinja_render(a->t, a->vars, NULL, NULL, &a->out, &len, &kind, err, sizeof(err)))
            return NULL;
    }
    return a;
}

static void test_shared_template_renders_on_many_threads(void **state)
{
    (void)state;
    tl_jinja_template *t = parse_ok(
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
        "<{{ m.role }}>{{ m.content | upper }}{% endfor %}{{ ns.n }}{{ messages | tojson }}");
    json_t *vars = json_pack("{s:[{s:s,s:s},{s:s,s:s}]}", "messages", "role", "user", "content",
                             "hi", "role", "assistant", "content", "yo");
    struct thread_arg args[4] = {
        {t, vars, NULL}, {t, vars, NULL}, {t, vars, NULL}, {t, vars, NULL}};
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL, render_thread, &args[i]), 0);
    for (int i = 0; i < 4; i++) {
        void *ret;
        pthread_join(th[i], &ret);
        assert_non_null(ret);
    }
    for (int i = 1; i < 4; i++)
        assert_string_equal(args[i].out, args[0].out);
    assert_non_null(strstr(args[0].out, "<user>HI<assistant>YO2"));
    for (int i = 0; i < 4; i++)
        free(args[i].out);
    json_decref(vars);
    tl_jinja_destroy(t);
}

// ---- mutated real templates: errors are fine, crashes and hangs are not

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void)
{
    return tl_xorshift64s(&rng_state);
}

static void test_mutated_templates_never_crash(void **state)
{
    (void)state;
    static const char *const names[] = {"meetkai-functionary-medium-v3.2.jinja",
                                        "meta-llama-Llama-3.1-8B-Instruct.jinja",
                                        "Qwen-Qwen2.5-7B-Instruct.jinja"};
    static const char *const snippets[] = {
        "{{",      "}}", "{%",    "%}",  "{% endif %}", "{% for x in ",
        "(",       ")",  "[",     "|",   " is ",        "'",
        "-",       "{#", "loop.", " ~ ", "**",          "{% macro m() %}",
        "caller()"};
    json_t *vars =
        json_pack("{s:[{s:s,s:s}],s:b,s:s,s:s}", "messages", "role", "user", "content", "hi",
                  "add_generation_prompt", 1, "bos_token", "<s>", "eos_token", "</s>");
    struct tl_jinja_limits lim = tl_jinja_default_limits();
    lim.max_steps = 100000;
    lim.max_time_ms = 500;
    int parsed = 0, rendered = 0;
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
        char path[512];
        snprintf(path, sizeof(path), "%s", tl_test_shared("templates"));
        strncat(path, "/", sizeof(path) - strlen(path) - 1);
        strncat(path, names[k], sizeof(path) - strlen(path) - 1);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        char src[16384];
        size_t n = fread(src, 1, sizeof(src) - 64, f);
        fclose(f);
        for (int iter = 0; iter < 700; iter++) {
            char mut[16384];
            memcpy(mut, src, n);
            size_t len = n;
            for (int e = 0; e < 1 + (int)(rng() % 4); e++) {
                size_t at = rng() % len;
                if (rng() % 2) { // delete a span
                    size_t del = 1 + rng() % 8;
                    if (at + del > len) del = len - at;
                    memmove(mut + at, mut + at + del, len - at - del);
                    len -= del;
                } else { // insert a snippet
                    const char *s = snippets[rng() % (sizeof(snippets) / sizeof(snippets[0]))];
                    size_t sl = strlen(s);
                    if (len + sl >= sizeof(mut)) continue;
                    memmove(mut + at + sl, mut + at, len - at);
                    memcpy(mut + at, s, sl);
                    len += sl;
                }
                if (!len) break;
            }
            tl_jinja_template *t = NULL;
            char err[256];
            if (tl_jinja_parse(mut, len, &t, err, sizeof(err))) {
                assert_true(strncmp(err, "line ", 5) == 0);
                continue;
            }
            parsed++;
            char *out = NULL;
            size_t out_len;
            enum tl_jinja_error_kind kind;
            if (!tl_jinja_render(t, vars, NULL, &lim, &out, &out_len, &kind, err, sizeof(err)))
                rendered++;
            else
                assert_true(err[0] != 0);
            free(out);
            tl_jinja_destroy(t);
        }
    }
    printf("# mutated templates: %d parsed, %d rendered\n", parsed, rendered);
    assert_true(parsed > 0);
    json_decref(vars);
}

TL_TEST_MAIN(cmocka_unit_test(test_parse_errors_name_line_and_column),
             cmocka_unit_test(test_limits_stop_hostile_templates),
             cmocka_unit_test(test_errors_carry_messages),
             cmocka_unit_test(test_shared_template_renders_on_many_threads),
             cmocka_unit_test(test_mutated_templates_never_crash))
