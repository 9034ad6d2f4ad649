/*
 * Constrained requests through the engine on the real stories260K model (512-token vocab):
 * every reply that stops is accepted by a fresh matcher over its text (and parses as JSON with
 * jansson when the grammar is JSON); one cut by max_tokens is a valid prefix; a choice list
 * gives one of its choices. Determinism: a constrained request at temperature 1 gives the same
 * tokens alone, among 63 others (constrained and not), at prefill chunk sizes 1, 3 and 16, and
 * after preemption; greedy constrained requests (the fast path) as well.
 */
#include "engine_harness.h"
#include "tl_test.h"

#include "core/log.h"
#include "grammar/grammar.h"

#include <jansson.h>

static tl_model *model;
static struct tl_grammar *g_schema, *g_json, *g_choice;

static const char SCHEMA[] =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120},\"tags\":{\"type\":\"array\","
    "\"items\":{\"enum\":[\"a\",\"b\",\"c\"]},\"maxItems\":3}},\"required\":[\"name\",\"age\"]}";

static int setup(void **state)
{
    (void)state;
    tl_log_set_level(TL_LOG_ERROR);
    if (tl_model_load(tl_test_shared("models/stories260K.gguf"), NULL, &model)) return -1;
    if (tl_grammar_compile(TL_GRAMMAR_JSON_SCHEMA, SCHEMA, strlen(SCHEMA), &g_schema)) return -1;
    if (tl_grammar_compile(TL_GRAMMAR_JSON_OBJECT, NULL, 0, &g_json)) return -1;
    const char *ch = "[\"yes\", \"no\", \"maybe not\"]";
    if (tl_grammar_compile(TL_GRAMMAR_CHOICE, ch, strlen(ch), &g_choice)) return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tl_grammar_unref(g_schema);
    tl_grammar_unref(g_json);
    tl_grammar_unref(g_choice);
    tl_model_destroy(model);
    return 0;
}

struct run {
    int32_t tokens[512];
    int n;
    char text[8192];
    size_t len;
    struct tl_event done;
    char error[256];
    int n_done;
};

static void on_event(void *user, const struct tl_event *ev)
{
    struct run *r = user;
    if (r->len + ev->text_len < sizeof(r->text)) {
        memcpy(r->text + r->len, ev->text, ev->text_len);
        r->len += ev->text_len;
        r->text[r->len] = 0;
    }
    if (ev->type == TL_EVENT_TOKEN) {
        if (r->n < 512) r->tokens[r->n++] = ev->token;
    } else {
        r->done = *ev;
        if (ev->error) snprintf(r->error, sizeof(r->error), "%s", ev->error);
        r->n_done++;
    }
}

static struct tl_engine_config base_config(void)
{
    struct tl_engine_config c;
    tl_engine_config_default(&c);
    c.max_seq_len = 512;
    c.n_threads = 2;
    c.kv_blocks = 2048;
    return c;
}

static void submit(tl_engine *e, struct run *r, struct tl_grammar *g, float temp, uint64_t seed,
                   int max_tokens, int32_t priority)
{
    struct tl_request q;
    tl_request_default(&q);
    q.prompt = "Once upon a time";
    q.sampling.temperature = temp;
    q.sampling.seed = seed;
    q.max_tokens = max_tokens;
    q.priority = priority;
    q.grammar = g;
    q.on_event = on_event;
    q.user = r;
    uint64_t id;
    if (tl_engine_submit(e, &q, &id)) fail_msg("submit: %s", tl_last_error());
}

// The text is a complete sentence (stop) or a valid prefix (length) of g; JSON parses.
static void check_output(struct tl_grammar *g, const struct run *r, bool is_json)
{
    assert_int_equal(r->n_done, 1);
    if (r->done.finish != TL_FINISH_STOP && r->done.finish != TL_FINISH_LENGTH)
        fail_msg("finish %d (%s)", r->done.finish, r->error);
    struct tl_gmatcher *m = tl_gmatcher_create(g);
    if (!tl_gmatcher_accept_bytes(m, r->text, r->len)) fail_msg("not a prefix: '%s'", r->text);
    if (r->done.finish == TL_FINISH_STOP) {
        if (!tl_gmatcher_can_end(m)) fail_msg("stopped but incomplete: '%s'", r->text);
        if (is_json) {
            json_error_t err;
            json_t *j = json_loadb(r->text, r->len, 0, &err);
            if (!j) fail_msg("not JSON (%s): '%s'", err.text, r->text);
            json_decref(j);
        }
    }
    tl_gmatcher_destroy(m);
}

static void test_outputs_valid(void **state)
{
    (void)state;
    struct tl_engine_config c = base_config();
    tl_engine *e = harness_engine(model, &c);
    struct run *r = calloc(48, sizeof(*r));
    for (int i = 0; i < 48; i++) {
        struct tl_grammar *g = i % 3 == 0 ? g_schema : i % 3 == 1 ? g_json : g_choice;
        submit(e, &r[i], g, i % 4 == 3 ? 0.0f : 1.0f, 100 + (uint64_t)i, 200, 0);
    }
    harness_run_all(e);
    int stopped = 0;
    for (int i = 0; i < 48; i++) {
        struct tl_grammar *g = i % 3 == 0 ? g_schema : i % 3 == 1 ? g_json : g_choice;
        check_output(g, &r[i], g != g_choice);
        stopped += r[i].done.finish == TL_FINISH_STOP;
        if (g == g_choice) {
            assert_int_equal(r[i].done.finish, TL_FINISH_STOP);
            assert_true(!strcmp(r[i].text, "yes") || !strcmp(r[i].text, "no") ||
                        !strcmp(r[i].text, "maybe not"));
        }
    }
    assert_true(stopped >= 16);
    tl_engine_destroy(e);
    free(r);
}

static void assert_same(const struct run *a, const struct run *b)
{
    assert_int_equal(a->n, b->n);
    assert_memory_equal(a->tokens, b->tokens, (size_t)a->n * sizeof(int32_t));
    assert_int_equal(a->done.finish, b->done.finish);
}

static void test_batch_invariant(void **state)
{
    (void)state;
    for (int greedy = 0; greedy < 2; greedy++) {
        float temp = greedy ? 0.0f : 1.0f;
        struct tl_engine_config c = base_config();
        tl_engine *e = harness_engine(model, &c);
        struct run *alone = calloc(1, sizeof(*alone));
        submit(e, alone, g_schema, temp, 7, 150, 0);
        harness_run_all(e);
        check_output(g_schema, alone, true);
        tl_engine_destroy(e);

        // Among 63 others, half of them constrained.
        e = harness_engine(model, &c);
        struct run *r = calloc(64, sizeof(*r));
        for (int i = 0; i < 64; i++) {
            if (i == 21) submit(e, &r[i], g_schema, temp, 7, 150, 0);
            else submit(e, &r[i], i % 2 ? g_json : NULL, 1.0f, 1000 + (uint64_t)i, 40, 0);
        }
        harness_run_all(e);
        assert_same(alone, &r[21]);
        tl_engine_destroy(e);
        free(r);

        // Prefill chunk sizes.
        const int32_t budgets[] = {1, 3, 16};
        for (size_t k = 0; k < 3; k++) {
            c = base_config();
            c.max_tokens_per_step = budgets[k];
            c.max_batch_size = budgets[k] < 4 ? budgets[k] : 4;
            e = harness_engine(model, &c);
            r = calloc(3, sizeof(*r));
            submit(e, &r[1], g_json, 1.0f, 5, 30, 0);
            submit(e, &r[0], g_schema, temp, 7, 150, 0);
            submit(e, &r[2], NULL, 1.0f, 6, 30, 0);
            harness_run_all(e);
            assert_same(alone, &r[0]);
            tl_engine_destroy(e);
            free(r);
        }

        // Preemption: a small pool and better-priority requests arriving.
        c = base_config();
        c.kv_block_size = 4;
        // Room for the request alone plus a little: the better-priority arrivals push it out.
        c.kv_blocks = (5 + 150 + 3) / 4 + 2;
        c.max_tokens_per_step = 32;
        c.max_batch_size = 6;
        e = harness_engine(model, &c);
        r = calloc(40, sizeof(*r));
        submit(e, &r[0], g_schema, temp, 7, 150, 1);
        int64_t n = 1, steps = 0;
        int next = 1;
        while (n > 0 || next < 40) {
            if (next < 40 && steps % 3 == 1) {
                submit(e, &r[next], next % 2 ? g_json : NULL, 1.0f, (uint64_t)next, 60, 0);
                next++;
            }
            if (tl_engine_step(e, &n)) fail_msg("step: %s", tl_last_error());
            if (tl__engine_check(e)) fail_msg("%s", tl_last_error());
            steps++;
        }
        if (alone->n > 8) assert_true(r[0].done.n_preempted > 0);
        assert_same(alone, &r[0]);
        tl_engine_destroy(e);
        free(r);
        free(alone);
    }
}

TL_TEST_MAIN(cmocka_unit_test_setup_teardown(test_outputs_valid, setup, teardown),
             cmocka_unit_test_setup_teardown(test_batch_invariant, setup, teardown))
