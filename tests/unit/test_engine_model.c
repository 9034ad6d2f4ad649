/*
 * The engine over the real stories260K model: greedy decoding of "Once upon a time" must give
 * the reference token ids and text of /work/shared/models/PROVENANCE.md (read at run time)
 * alone, among 63 random requests, with any prefill chunk size, with a prefix-cache hit, after
 * preemption and recompute, with F16 and F32 KV.
 */
#include "engine_harness.h"
#include "tl_test.h"

#include "core/log.h"
#include "engine/engine_impl.h"

#include <pthread.h>

static int32_t ref_ids[1024];
static int n_ref;           // all ids: BOS, 4 prompt tokens, then greedy tokens
static char ref_text[4096]; // the 128-token reference text
static tl_model *model;

static int load_reference(void **state)
{
    (void)state;
    FILE *fp = fopen(tl_test_shared("models/PROVENANCE.md"), "r");
    if (!fp) return -1;
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    const char *p = strstr(buf, "all_ids [");
    if (!p) return -1;
    p += strlen("all_ids [");
    while (*p && *p != ']') {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) return -1;
        ref_ids[n_ref++] = (int32_t)v;
        p = end;
        while (*p == ',' || *p == ' ')
            p++;
    }
    // The first fenced block after "## Reference output" is the text.
    const char *t = strstr(buf, "## Reference output");
    if (!t || !(t = strstr(t, "```\n"))) return -1;
    t += 4;
    const char *e = strstr(t, "\n```");
    if (!e || (size_t)(e - t) >= sizeof(ref_text)) return -1;
    memcpy(ref_text, t, (size_t)(e - t));
    tl_log_set_level(TL_LOG_ERROR);
    if (tl_model_load(tl_test_shared("models/stories260K.gguf"), NULL, &model)) {
        fprintf(stderr, "load: %s\n", tl_last_error());
        return -1;
    }
    return 0;
}

static int unload(void **state)
{
    (void)state;
    tl_model_destroy(model);
    return 0;
}

struct run {
    int32_t tokens[1024];
    int n;
    char text[8192];
    size_t len;
    struct tl_event done;
    int n_done;
};

static void on_event(void *user, const struct tl_event *ev)
{
    struct run *r = user;
    if (r->len + ev->text_len < sizeof(r->text)) {
        memcpy(r->text + r->len, ev->text, ev->text_len);
        r->len += ev->text_len;
    }
    if (ev->type == TL_EVENT_TOKEN)
        r->tokens[r->n++] = ev->token;
    else {
        r->done = *ev;
        r->n_done++;
    }
}

static tl_engine *engine(const struct tl_engine_config *c)
{
    return harness_engine(model, c);
}

static struct tl_engine_config base_config(void)
{
    struct tl_engine_config c;
    tl_engine_config_default(&c);
    c.max_seq_len = 512; // the model was trained with 512
    c.n_threads = 2;
    c.kv_blocks = 512;
    return c;
}

// The reference request: "Once upon a time", greedy, as many tokens as the reference has.
static uint64_t submit_ref(tl_engine *e, struct run *r, int32_t priority)
{
    struct tl_request q;
    tl_request_default(&q);
    q.prompt = "Once upon a time";
    q.add_special = true;
    q.sampling.temperature = 0;
    q.max_tokens = n_ref - 5;
    q.priority = priority;
    q.on_event = on_event;
    q.user = r;
    uint64_t id;
    if (tl_engine_submit(e, &q, &id)) fail_msg("submit: %s", tl_last_error());
    return id;
}

static void assert_reference(const struct run *r)
{
    assert_int_equal(r->n_done, 1);
    assert_int_equal(r->done.n_prompt_tokens, 5);
    assert_int_equal(r->n, n_ref - 5);
    for (int i = 0; i < r->n; i++)
        if (r->tokens[i] != ref_ids[5 + i])
            fail_msg("token %d: %d, reference %d", i, r->tokens[i], ref_ids[5 + i]);
    char full[8192];
    snprintf(full, sizeof(full), "Once upon a time%.*s", (int)r->len, r->text);
    assert_string_equal(full, ref_text);
}

static void test_reference_alone_f16_and_f32(void **state)
{
    (void)state;
    assert_true(n_ref > 100);
    for (int t = 0; t < 2; t++) {
        struct tl_engine_config c = base_config();
        c.kv_type = t ? TL_KV_F32 : TL_KV_F16;
        tl_engine *e = engine(&c);
        struct run *r = calloc(1, sizeof(*r));
        submit_ref(e, r, 0);
        harness_run_all(e);
        assert_reference(r);
        assert_int_equal(r->done.finish, TL_FINISH_LENGTH);
        tl_engine_destroy(e);
        free(r);
    }
}

static uint64_t rng = 99;
static uint32_t rnd(uint32_t n)
{
    return harness_rnd(&rng, n);
}

static void submit_random(tl_engine *e, struct run *r, int32_t priority, int max_prompt)
{
    static const char *words[] = {"the",  "dog",  "Lily", "ran", "happy", "big", "tree", "said",
                                  "Once", "ball", "sun",  "mom", "play",  "a",   "and",  "."};
    char text[1024] = "";
    int n_words = 1 + (int)rnd((uint32_t)max_prompt);
    for (int i = 0; i < n_words; i++) {
        strcat(text, i ? " " : "");
        strcat(text, words[rnd(16)]);
    }
    struct tl_request q;
    tl_request_default(&q);
    q.prompt = text;
    q.sampling.temperature = rnd(3) ? 0.8f : 0.0f;
    q.sampling.top_p = 0.9f;
    q.sampling.seed = rnd(1 << 20);
    q.max_tokens = 1 + (int32_t)rnd(100);
    q.priority = priority;
    q.on_event = on_event;
    q.user = r;
    uint64_t id;
    if (tl_engine_submit(e, &q, &id)) fail_msg("submit: %s", tl_last_error());
}

static void test_reference_among_63_others(void **state)
{
    (void)state;
    struct tl_engine_config c = base_config();
    c.kv_blocks = 4096;
    tl_engine *e = engine(&c);
    struct run *r = calloc(64, sizeof(*r));
    for (int i = 0; i < 64; i++) {
        if (i == 17)
            submit_ref(e, &r[i], 0);
        else
            submit_random(e, &r[i], 0, 60);
    }
    harness_run_all(e);
    assert_reference(&r[17]);
    for (int i = 0; i < 64; i++)
        assert_int_equal(r[i].n_done, 1);
    tl_engine_destroy(e);
    free(r);
}

static void test_reference_any_chunk_size(void **state)
{
    (void)state;
    const int32_t budgets[] = {1, 2, 3, 7, 16, 100};
    for (size_t k = 0; k < sizeof(budgets) / sizeof(budgets[0]); k++) {
        struct tl_engine_config c = base_config();
        c.max_tokens_per_step = budgets[k];
        c.max_batch_size = budgets[k] < 4 ? budgets[k] : 4;
        tl_engine *e = engine(&c);
        struct run *r = calloc(4, sizeof(*r));
        submit_random(e, &r[1], 0, 40);
        submit_ref(e, &r[0], 0);
        submit_random(e, &r[2], 0, 40);
        submit_random(e, &r[3], 0, 40);
        harness_run_all(e);
        assert_reference(&r[0]);
        tl_engine_destroy(e);
        free(r);
    }
}

static void test_reference_with_prefix_hit(void **state)
{
    (void)state;
    struct tl_engine_config c = base_config();
    c.kv_block_size = 2; // "BOS Once upon a time": 2 full blocks cacheable
    tl_engine *e = engine(&c);
    struct run *r = calloc(3, sizeof(*r));
    submit_ref(e, &r[0], 0);
    harness_run_all(e);
    submit_ref(e, &r[1], 0);
    harness_run_all(e);
    assert_int_equal(r[1].done.n_cached_tokens, 4);
    assert_reference(&r[1]);
    tl_engine_destroy(e);
    // A 60-token prompt taken from the reference: a second request hits 48 tokens (3 blocks of
    // 16) and both continue exactly as the reference does.
    c = base_config();
    e = engine(&c);
    for (int k = 0; k < 2; k++) {
        struct tl_request q;
        tl_request_default(&q);
        q.prompt_tokens = ref_ids;
        q.n_prompt_tokens = 60;
        q.sampling.temperature = 0;
        q.max_tokens = n_ref - 60;
        q.on_event = on_event;
        q.user = &r[2];
        memset(&r[2], 0, sizeof(r[2]));
        uint64_t id;
        assert_int_equal(tl_engine_submit(e, &q, &id), TL_OK);
        harness_run_all(e);
        assert_int_equal(r[2].done.n_cached_tokens, k ? 48 : 0);
        assert_int_equal(r[2].n, n_ref - 60);
        assert_memory_equal(r[2].tokens, ref_ids + 60, (size_t)(n_ref - 60) * sizeof(int32_t));
    }
    tl_engine_destroy(e);
    free(r);
}

static void test_reference_after_preemption(void **state)
{
    (void)state;
    // The reference request needs 128 - 1 positions = 32 blocks of 4; the pool has 36 and
    // better-priority requests keep coming.
    struct tl_engine_config c = base_config();
    c.kv_block_size = 4;
    c.kv_blocks = 36;
    c.max_tokens_per_step = 32;
    c.max_batch_size = 6;
    tl_engine *e = engine(&c);
    struct run *r = calloc(40, sizeof(*r));
    submit_ref(e, &r[0], 1);
    int64_t n = 1, steps = 0;
    int next = 1;
    while (n > 0 || next < 40) {
        if (next < 40 && steps % 4 == 0) submit_random(e, &r[next++], 0, 20);
        if (tl_engine_step(e, &n)) fail_msg("step: %s", tl_last_error());
        if (tl__engine_check(e)) fail_msg("%s", tl_last_error());
        steps++;
    }
    assert_true(r[0].done.n_preempted > 0);
    assert_reference(&r[0]);
    tl_engine_destroy(e);
    free(r);
}

static void test_stop_string_on_real_text(void **state)
{
    (void)state;
    struct tl_engine_config c = base_config();
    tl_engine *e = engine(&c);
    struct run *r = calloc(1, sizeof(*r));
    struct tl_request q;
    tl_request_default(&q);
    q.prompt = "Once upon a time";
    q.sampling.temperature = 0;
    q.max_tokens = 100;
    const char *stops[] = {"named L", "park"};
    q.stop = stops;
    q.n_stop = 2;
    q.on_event = on_event;
    q.user = r;
    uint64_t id;
    assert_int_equal(tl_engine_submit(e, &q, &id), TL_OK);
    harness_run_all(e);
    assert_int_equal(r->done.finish, TL_FINISH_STOP);
    r->text[r->len] = '\0';
    assert_string_equal(r->text, ", there was a little girl ");
    tl_engine_destroy(e);
    free(r);
}

static void test_text_prompt_too_long(void **state)
{
    (void)state;
    struct tl_engine_config c = base_config();
    c.max_seq_len = 16;
    tl_engine *e = engine(&c);
    struct run r;
    struct tl_request q;
    tl_request_default(&q);
    q.prompt = "Once upon a time there was a dog and a cat and a very big tree";
    q.max_tokens = 4;
    q.on_event = on_event;
    q.user = &r;
    uint64_t id;
    assert_int_equal(tl_engine_submit(e, &q, &id), TL_ERR_TOO_LONG);
    assert_non_null(strstr(tl_last_error(), "16"));
    tl_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_alone_f16_and_f32),
        cmocka_unit_test(test_reference_among_63_others),
        cmocka_unit_test(test_reference_any_chunk_size),
        cmocka_unit_test(test_reference_with_prefix_hit),
        cmocka_unit_test(test_reference_after_preemption),
        cmocka_unit_test(test_stop_string_on_real_text),
        cmocka_unit_test(test_text_prompt_too_long),
    };
    const char *filter = getenv("TL_TEST_FILTER");
    if (filter && *filter) cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, load_reference, unload);
}
