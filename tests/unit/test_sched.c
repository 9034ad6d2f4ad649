/*
 * Scheduler tests over the fake model (engine_fake.h): determinism of a request's tokens under
 * batching, chunk sizes, prefix-cache hits and preemption; chunked prefill; decode-first
 * order; priorities; preemption victims; the prefix cache; limits. Every run checks the block
 * accounting after every step (fake_run).
 */
#include "tl_test.h"

#include "engine_fake.h"

#include "core/log.h"

enum { V = 48 };

static uint64_t rng_state = 777;
static uint32_t rnd(uint32_t n)
{
    return (uint32_t)(tl_xorshift64s(&rng_state) >> 33) % n;
}

static struct tl_engine_config config(int32_t budget, int64_t blocks, int32_t batch)
{
    struct tl_engine_config c;
    tl_engine_config_default(&c);
    c.max_seq_len = 256;
    c.kv_block_size = 4;
    c.kv_blocks = blocks;
    c.max_tokens_per_step = budget;
    c.max_batch_size = batch;
    return c;
}

// The request under test.
static int32_t R_prompt[37];
static struct tl_sampling R_sampling(void)
{
    struct tl_sampling s;
    tl_sampling_default(&s);
    s.temperature = 0.9f;
    s.top_k = 20;
    s.top_p = 0.95f;
    s.min_p = 0.02f;
    s.repetition_penalty = 1.1f;
    s.frequency_penalty = 0.2f;
    s.seed = 1234;
    return s;
}
enum { R_MAX = 50 };

static void init_prompt(void)
{
    for (int i = 0; i < 37; i++)
        R_prompt[i] = 1 + (i * 7) % 40;
}

static uint64_t submit_R(tl_engine *e, struct collected *c, int32_t priority)
{
    struct tl_sampling sp = R_sampling();
    struct tl_request r;
    tl_request_default(&r);
    r.prompt_tokens = R_prompt;
    r.n_prompt_tokens = 37;
    r.sampling = sp;
    r.max_tokens = R_MAX;
    r.priority = priority;
    r.on_event = collect_event;
    r.user = c;
    uint64_t id;
    assert_int_equal(tl_engine_submit(e, &r, &id), TL_OK);
    return id;
}

// A random other request (prompt shares R's first tokens sometimes).
static void submit_other(tl_engine *e, struct collected *c, int32_t priority, int max_len)
{
    int32_t prompt[100];
    int n = 1 + (int)rnd((uint32_t)max_len);
    bool share = rnd(3) == 0;
    for (int i = 0; i < n; i++)
        prompt[i] = share && i < 37 ? R_prompt[i] : 1 + (int32_t)rnd(V - 1);
    struct tl_request r;
    tl_request_default(&r);
    r.prompt_tokens = prompt;
    r.n_prompt_tokens = n;
    r.sampling.temperature = rnd(2) ? 0.0f : 0.5f + (float)rnd(100) / 100.0f;
    r.sampling.top_k = (int32_t)rnd(30);
    r.sampling.seed = rnd(1000);
    r.max_tokens = 1 + (int32_t)rnd(60);
    r.priority = priority;
    r.on_event = collect_event;
    r.user = c;
    uint64_t id;
    assert_int_equal(tl_engine_submit(e, &r, &id), TL_OK);
}

static struct collected *reference_run(void)
{
    struct fake_model f;
    struct tl_engine_config cfg = config(512, 1024, 64);
    tl_engine *e = fake_engine(&f, &cfg, V, 256);
    struct collected *c = calloc(1, sizeof(*c));
    submit_R(e, c, 0);
    fake_run(e);
    assert_int_equal(f.violations, 0);
    assert_int_equal(c->done.n_cached_tokens, 0);
    assert_int_equal(c->done.n_preempted, 0);
    tl_engine_destroy(e);
    return c;
}

static void assert_same_tokens(const struct collected *want, const struct collected *got)
{
    assert_int_equal(got->n_done, 1);
    assert_int_equal(got->n_tokens, want->n_tokens);
    for (int64_t i = 0; i < want->n_tokens; i++)
        if (got->tokens[i] != want->tokens[i])
            fail_msg("token %lld: %d, alone %d", (long long)i, got->tokens[i], want->tokens[i]);
    assert_string_equal(got->text, want->text);
}

static void test_determinism_in_a_crowd(void **state)
{
    (void)state;
    struct collected *ref = reference_run();
    assert_true(ref->n_tokens >= 10);
    for (int trial = 0; trial < 3; trial++) {
        struct fake_model f;
        struct tl_engine_config cfg = config(512, 4096, 64);
        tl_engine *e = fake_engine(&f, &cfg, V, 256);
        struct collected *c = calloc(64, sizeof(*c));
        int pos = (int)rnd(64);
        for (int i = 0; i < 64; i++) {
            if (i == pos)
                submit_R(e, &c[i], 0);
            else
                submit_other(e, &c[i], 0, 100);
        }
        fake_run(e);
        assert_int_equal(f.violations, 0);
        assert_true(f.max_batch_tok > 64); // they really shared steps
        assert_same_tokens(ref, &c[pos]);
        for (int i = 0; i < 64; i++)
            assert_int_equal(c[i].n_done, 1);
        tl_engine_destroy(e);
        free(c);
    }
    free(ref);
}

static void test_determinism_across_chunk_sizes(void **state)
{
    (void)state;
    struct collected *ref = reference_run();
    const int32_t budgets[] = {1, 2, 3, 5, 8, 16, 36, 37, 38, 100};
    for (size_t k = 0; k < sizeof(budgets) / sizeof(budgets[0]); k++) {
        struct fake_model f;
        struct tl_engine_config cfg = config(budgets[k], 4096, budgets[k] < 8 ? budgets[k] : 8);
        tl_engine *e = fake_engine(&f, &cfg, V, 256);
        struct collected *c = calloc(8, sizeof(*c));
        submit_R(e, &c[0], 0);
        for (int i = 1; i < 8; i++)
            submit_other(e, &c[i], 0, 100);
        fake_run(e);
        assert_int_equal(f.violations, 0);
        assert_true(f.max_batch_tok <= budgets[k]);
        assert_same_tokens(ref, &c[0]);
        tl_engine_destroy(e);
        free(c);
    }
    free(ref);
}

// The prefill cap while decoding (max_prefill_tokens_decoding) changes only how prompts are
// chunked, never a request's tokens.
static void test_determinism_across_prefill_caps(void **state)
{
    (void)state;
    struct collected *ref = reference_run();
    const int32_t caps[] = {1, 5, 16, 36, 100};
    for (size_t k = 0; k < sizeof(caps) / sizeof(caps[0]); k++) {
        struct fake_model f;
        struct tl_engine_config cfg = config(100, 4096, 8);
        cfg.max_prefill_tokens_decoding = caps[k];
        tl_engine *e = fake_engine(&f, &cfg, V, 256);
        struct collected *c = calloc(8, sizeof(*c));
        for (int i = 1; i < 8; i++)
            submit_other(e, &c[i], 0, 100);
        submit_R(e, &c[0], 0);
        fake_run(e);
        assert_int_equal(f.violations, 0);
        assert_same_tokens(ref, &c[0]);
        for (int i = 0; i < 8; i++)
            assert_int_equal(c[i].n_done, 1);
        tl_engine_destroy(e);
        free(c);
    }
    free(ref);
}

static void test_determinism_with_prefix_hit(void **state)
{
    (void)state;
    struct collected *ref = reference_run();
    struct fake_model f;
    struct tl_engine_config cfg = config(512, 1024, 64);
    tl_engine *e = fake_engine(&f, &cfg, V, 256);
    // A first request with the same prompt (another seed) fills the cache.
    struct collected *c = calloc(3, sizeof(*c));
    struct tl_sampling sp = R_sampling();
    sp.seed = 1;
    fake_submit(e, R_prompt, 37, &sp, 5, &c[0]);
    fake_run(e);
    submit_R(e, &c[1], 0);
    fake_run(e);
    // 37 tokens: 9 full blocks of 4 are cacheable (the last token is always computed).
    assert_int_equal(c[1].done.n_cached_tokens, 36);
    assert_same_tokens(ref, &c[1]);
    // Twice concurrently, after a cached run: both hit, both the same.
    struct collected *d = calloc(2, sizeof(*d));
    submit_R(e, &d[0], 0);
    submit_R(e, &d[1], 0);
    fake_run(e);
    assert_same_tokens(ref, &d[0]);
    assert_same_tokens(ref, &d[1]);
    assert_true(d[0].done.n_cached_tokens >= 36);
    struct tl_engine_stats st;
    tl_engine_get_stats(e, &st);
    assert_true(st.prefix_hits_total >= 36 * 3);
    assert_true(st.prefix_queries_total >= st.prefix_hits_total);
    assert_int_equal(f.violations, 0);
    tl_engine_destroy(e);

    // Without the prefix cache: no hits, same tokens.
    cfg.prefix_caching = false;
    e = fake_engine(&f, &cfg, V, 256);
    memset(c, 0, 3 * sizeof(*c));
    fake_submit(e, R_prompt, 37, &sp, 5, &c[0]);
    fake_run(e);
    submit_R(e, &c[1], 0);
    fake_run(e);
    assert_int_equal(c[1].done.n_cached_tokens, 0);
    assert_same_tokens(ref, &c[1]);
    tl_engine_get_stats(e, &st);
    assert_int_equal(st.prefix_hits_total, 0);
    assert_int_equal(st.kv_blocks_cached, 0);
    tl_engine_destroy(e);
    free(c);
    free(d);
    free(ref);
}

static void test_determinism_after_preemption(void **state)
{
    (void)state;
    struct collected *ref = reference_run();
    // R needs 37 + 50 - 1 = 86 positions = 22 blocks; the pool has 24. Better-priority
    // requests keep arriving, so R (priority 1) is preempted and recomputed, maybe often.
    for (int prefix = 0; prefix < 2; prefix++) {
        struct fake_model f;
        struct tl_engine_config cfg = config(16, 24, 8);
        cfg.prefix_caching = prefix;
        tl_engine *e = fake_engine(&f, &cfg, V, 256);
        struct collected *c = calloc(41, sizeof(*c));
        submit_R(e, &c[0], 1);
        int64_t n_pending = 1, steps = 0;
        int next = 1;
        while (n_pending > 0) {
            if (next < 41 && steps % 3 == 0) submit_other(e, &c[next++], 0, 40);
            assert_int_equal(tl_engine_step(e, &n_pending), TL_OK);
            if (tl__engine_check(e)) fail_msg("%s", tl_last_error());
            steps++;
            if (next < 41) n_pending = 1;
        }
        assert_int_equal(f.violations, 0);
        assert_true(c[0].done.n_preempted > 0);
        assert_same_tokens(ref, &c[0]);
        struct tl_engine_stats st;
        tl_engine_get_stats(e, &st);
        assert_true(st.preemptions_total >= c[0].done.n_preempted);
        for (int i = 0; i < 41; i++)
            assert_int_equal(c[i].n_done, 1);
        tl_engine_destroy(e);
        free(c);
    }
    free(ref);
}

// ---- scheduling order -----------------------------------------------------------------------

static int64_t step_no;
struct stamped {
    struct collected c;
    int64_t token_step[512];
    int64_t done_step;
};
static void stamp_event(void *user, const struct tl_event *ev)
{
    struct stamped *s = user;
    if (ev->type == TL_EVENT_TOKEN && s->c.n_tokens < 512) s->token_step[s->c.n_tokens] = step_no;
    if (ev->type == TL_EVENT_DONE) s->done_step = step_no;
    collect_event(&s->c, ev);
}

static uint64_t submit_stamped(tl_engine *e, struct stamped *s, int n_prompt, int max_tokens,
                               int32_t priority)
{
    int32_t prompt[200];
    for (int i = 0; i < n_prompt; i++)
        prompt[i] = 1 + (int32_t)rnd(V - 1);
    struct tl_request r;
    tl_request_default(&r);
    r.prompt_tokens = prompt;
    r.n_prompt_tokens = n_prompt;
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.priority = priority;
    r.on_event = stamp_event;
    r.user = s;
    uint64_t id;
    assert_int_equal(tl_engine_submit(e, &r, &id), TL_OK);
    return id;
}

static void run_stamped(tl_engine *e)
{
    int64_t n = 1;
    while (n > 0) {
        step_no++;
        assert_int_equal(tl_engine_step(e, &n), TL_OK);
        if (tl__engine_check(e)) fail_msg("%s", tl_last_error());
    }
}

static void test_chunked_prefill_and_decode_first(void **state)
{
    (void)state;
    struct fake_model f;
    struct tl_engine_config cfg = config(8, 1024, 8);
    tl_engine *e = fake_engine(&f, &cfg, V, 256);
    struct stamped *a = calloc(2, sizeof(*a));
    step_no = 0;
    submit_stamped(e, &a[0], 50, 40, 0);
    // 50 prompt tokens at 8 per step: the first token comes in step 7.
    for (int i = 0; i < 10; i++) {
        step_no++;
        int64_t n;
        assert_int_equal(tl_engine_step(e, &n), TL_OK);
    }
    assert_int_equal(a[0].token_step[0], 7);
    // A long prompt arrives while A decodes: A still gets a token every step (decode first),
    // B's prompt goes in chunks of at most 7 beside it.
    submit_stamped(e, &a[1], 150, 5, 0);
    run_stamped(e);
    for (int64_t i = 1; i < a[0].c.n_tokens; i++)
        assert_int_equal(a[0].token_step[i], a[0].token_step[i - 1] + 1);
    assert_true(f.max_batch_tok <= 8);
    assert_int_equal(a[1].c.done.finish, TL_FINISH_LENGTH);
    tl_engine_destroy(e);
    free(a);
}

static void test_prefill_cap_while_decoding(void **state)
{
    (void)state;
    struct fake_model f;
    struct tl_engine_config cfg = config(64, 1024, 8);
    cfg.max_prefill_tokens_decoding = 10;
    tl_engine *e = fake_engine(&f, &cfg, V, 256);
    struct stamped *a = calloc(2, sizeof(*a));
    step_no = 1;
    submit_stamped(e, &a[0], 50, 60, 0);
    int64_t n;
    assert_int_equal(tl_engine_step(e, &n), TL_OK);
    // Nothing decodes yet: the prompt takes the whole budget, its first token comes at once.
    assert_int_equal(f.last_batch_tok, 50);
    assert_int_equal(a[0].c.n_tokens, 1);
    // B's prompt arrives while A decodes: 10 prompt tokens per step beside A's one token.
    submit_stamped(e, &a[1], 150, 5, 0);
    while (a[1].c.n_tokens == 0) {
        step_no++;
        assert_int_equal(tl_engine_step(e, &n), TL_OK);
        if (tl__engine_check(e)) fail_msg("%s", tl_last_error());
        assert_true(f.last_batch_tok <= 11);
    }
    assert_int_equal(a[1].token_step[0], 1 + 15);
    run_stamped(e);
    for (int64_t i = 1; i < a[0].c.n_tokens; i++)
        assert_int_equal(a[0].token_step[i], a[0].token_step[i - 1] + 1);
    assert_int_equal(a[0].c.done.finish, TL_FINISH_LENGTH);
    assert_int_equal(a[1].c.done.finish, TL_FINISH_LENGTH);
    assert_int_equal(f.violations, 0);
    tl_engine_destroy(e);
    free(a);
}

// Above prefill_backlog_tokens waiting prompt tokens, a step that decodes still gives prefill
// the whole budget; at or below it, the cap applies again.
static void test_prefill_backlog_lifts_the_cap(void **state)
{
    (void)state;
    struct fake_model f;
    struct tl_engine_config cfg = config(64, 1024, 8);
    cfg.max_prefill_tokens_decoding = 10;
    cfg.prefill_backlog_tokens = 100;
    tl_engine *e = fake_engine(&f, &cfg, V, 256);
    struct stamped *a = calloc(2, sizeof(*a));
    step_no = 1;
    submit_stamped(e, &a[0], 20, 60, 0);
    int64_t n;
    assert_int_equal(tl_engine_step(e, &n), TL_OK);
    assert_int_equal(a[0].c.n_tokens, 1);
    submit_stamped(e, &a[1], 150, 5, 0);
    step_no++;
    assert_int_equal(tl_engine_step(e, &n), TL_OK);
    assert_int_equal(f.last_batch_tok, 64); // 150 > 100 waiting: A's decode + 63 of B's prompt
    while (a[1].c.n_tokens == 0) {
        step_no++;
        assert_int_equal(tl_engine_step(e, &n), TL_OK);
        assert_true(f.last_batch_tok <= 11); // 87 left <= 100: capped at 10 again
    }
    assert_int_equal(a[1].token_step[0], 2 + 9); // 87 tokens in 9 steps of at most 10
    run_stamped(e);
    assert_int_equal(a[0].c.done.finish, TL_FINISH_LENGTH);
    assert_int_equal(a[1].c.done.finish, TL_FINISH_LENGTH);
    assert_int_equal(f.violations, 0);
    tl_engine_destroy(e);
    free(a);
}

// The cap grows with the batch: prefill_tokens_per_decode prompt tokens per decoding sequence
// when that is more than max_prefill_tokens_decoding; -1 keeps the fixed cap.
static void test_prefill_cap_grows_with_decodes(void **state)
{
    (void)state;
    for (int k = 0; k < 2; k++) {
        struct fake_model f;
        struct tl_engine_config cfg = config(64, 1024, 8);
        cfg.max_prefill_tokens_decoding = 10;
        cfg.prefill_tokens_per_decode = k ? -1 : 6;
        tl_engine *e = fake_engine(&f, &cfg, V, 256);
        struct stamped *a = calloc(4, sizeof(*a));
        step_no = 1;
        for (int i = 0; i < 3; i++)
            submit_stamped(e, &a[i], 5, 80, 0);
        int64_t n;
        assert_int_equal(tl_engine_step(e, &n), TL_OK); // the three prompts, nothing decodes
        assert_int_equal(f.last_batch_tok, 15);
        submit_stamped(e, &a[3], 150, 5, 0);
        step_no++;
        assert_int_equal(tl_engine_step(e, &n), TL_OK);
        // three decodes beside max(10, 6 x 3) = 18 prompt tokens, or the fixed 10
        assert_int_equal(f.last_batch_tok, k ? 3 + 10 : 3 + 18);
        run_stamped(e);
        for (int i = 0; i < 4; i++)
            assert_int_equal(a[i].c.done.finish, TL_FINISH_LENGTH);
        assert_int_equal(f.violations, 0);
        tl_engine_destroy(e);
        free(a);
    }
}

static void test_priority_and_arrival_order(void **state)
{
    (void)state;
    struct fake_model f;
    struct tl_engine_config cfg = config(512, 1024, 1);
    tl_engine *e = fake_engine(&f, &cfg, V, 256);
    struct stamped *s = calloc(4, sizeof(*s));
    step_no = 0;
    submit_stamped(e, &s[0], 5, 5, 5);  // low priority, first
    submit_stamped(e, &s[1], 5, 5, 0);  // high, second
    submit_stamped(e, &s[2], 5, 5, 0);  // high, third
    submit_stamped(e, &s[3], 5, 5, -1); // highest, last
    run_stamped(e);
    // One at a time: -1, then the two 0s in arrival order, then 5.
    assert_true(s[3].done_step < s[1].token_step[0]);
    assert_true(s[1].done_step < s[2].token_step[0]);
    assert_true(s[2].done_step < s[0].token_step[0]);
    tl_engine_destroy(e);
    free(s);
}

static void test_preemption_victims(void **state)
{
    (void)state;
    // Three requests of 4 + 40 tokens (44 positions -> 11 blocks each when done); the pool
    // has 16 blocks, so they cannot all grow. The most recently admitted goes first.
    struct fake_model f;
    struct tl_engine_config cfg = config(512, 16, 8);
    tl_engine *e = fake_engine(&f, &cfg, V, 256);
    struct stamped *s = calloc(3, sizeof(*s));
    for (int i = 0; i < 3; i++)
        submit_stamped(e, &s[i], 4, 40, 0);
    run_stamped(e);
    assert_int_equal(s[0].c.done.n_preempted, 0);
    assert_true(s[2].c.done.n_preempted > 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(s[i].c.n_tokens, 40);
    tl_engine_destroy(e);
    // Priority beats admission order: the earliest admitted but lowest priority is the victim.
    e = fake_engine(&f, &cfg, V, 256);
    memset(s, 0, 3 * sizeof(*s));
    submit_stamped(e, &s[0], 4, 40, 9);
    int64_t n;
    step_no = 0;
    for (int i = 0; i < 3; i++) {
        step_no++;
        assert_int_equal(tl_engine_step(e, &n), TL_OK);
    }
    submit_stamped(e, &s[1], 4, 40, 0);
    submit_stamped(e, &s[2], 4, 40, 0);
    run_stamped(e);
    assert_true(s[0].c.done.n_preempted > 0);
    assert_int_equal(s[1].c.done.n_preempted, 0);
    tl_engine_destroy(e);
    free(s);
}

static void test_whole_pool_request_finishes(void **state)
{
    (void)state;
    // A request needing the entire pool (10 + 31 - 1 = 40 positions = 10 blocks) among a
    // steady stream of small ones of the same priority: it must finish.
    struct fake_model f;
    struct tl_engine_config cfg = config(64, 10, 8);
    tl_engine *e = fake_engine(&f, &cfg, V, 256);
    struct stamped *big = calloc(1, sizeof(*big));
    struct collected *small = calloc(60, sizeof(*small));
    step_no = 0;
    for (int i = 0; i < 3; i++) {
        int32_t p[3] = {1, 2, 3};
        fake_submit(e, p, 3, NULL, 6, &small[i]);
    }
    submit_stamped(e, big, 10, 31, 0);
    int64_t n = 1;
    int next = 3;
    while (n > 0 || next < 60) {
        if (next < 60) {
            int32_t p[3] = {4, 5, (int32_t)next % 40 + 1};
            fake_submit(e, p, 3, NULL, 6, &small[next++]);
        }
        step_no++;
        assert_int_equal(tl_engine_step(e, &n), TL_OK);
        if (tl__engine_check(e)) fail_msg("%s", tl_last_error());
        assert_true(step_no < 100000);
    }
    assert_int_equal(big->c.n_done, 1);
    assert_int_equal(big->c.n_tokens, 31);
    for (int i = 0; i < 60; i++)
        assert_int_equal(small[i].n_done, 1);
    tl_engine_destroy(e);
    free(big);
    free(small);
}

static void test_prefix_cache_sharing_and_eviction(void **state)
{
    (void)state;
    struct fake_model f;
    struct tl_engine_config cfg = config(512, 40, 8);
    tl_engine *e = fake_engine(&f, &cfg, V, 256);
    int32_t p[21];
    for (int i = 0; i < 21; i++)
        p[i] = 1 + i;
    struct collected *c = calloc(8, sizeof(*c));
    fake_submit(e, p, 21, NULL, 3, &c[0]);
    fake_run(e);
    struct tl_engine_stats st;
    tl_engine_get_stats(e, &st);
    // 21 prompt + 2 fed decodes = 23 positions: 5 full blocks published, 6 blocks released.
    assert_int_equal(st.kv_blocks_cached, 5);
    assert_int_equal(st.kv_blocks_free, 35);
    // Two concurrent requests with the same first 16 tokens share 4 blocks (refcount 2).
    int32_t q[20];
    memcpy(q, p, 16 * sizeof(int32_t));
    q[16] = 40, q[17] = 41, q[18] = 42, q[19] = 43;
    fake_submit(e, q, 20, NULL, 3, &c[1]);
    fake_submit(e, q, 18, NULL, 3, &c[2]);
    int64_t n;
    assert_int_equal(tl_engine_step(e, &n), TL_OK);
    assert_int_equal(tl__engine_check(e), TL_OK);
    struct tl_kv_cache *kv = tl__engine_kv(e);
    int shared = 0;
    for (int b = 0; b < 40; b++)
        shared += tl_kv_block_refcount(kv, b) == 2;
    assert_int_equal(shared, 4);
    fake_run(e);
    assert_int_equal(c[1].done.n_cached_tokens, 16);
    assert_int_equal(c[2].done.n_cached_tokens, 16);
    // Fill the pool with unrelated work: cached blocks are evicted, invariants hold.
    for (int i = 3; i < 8; i++) {
        int32_t u[30];
        for (int k = 0; k < 30; k++)
            u[k] = 1 + (int32_t)rnd(V - 1);
        fake_submit(e, u, 30, NULL, 6, &c[i]);
    }
    fake_run(e);
    struct tl_kv_counts kc;
    tl_kv_cache_counts(kv, &kc);
    assert_true(kc.n_evicted > 0);
    assert_int_equal(kc.n_used, 0);
    assert_int_equal(f.violations, 0);
    tl_engine_destroy(e);
    free(c);
}

static void test_length_limits(void **state)
{
    (void)state;
    struct fake_model f;
    struct tl_engine_config cfg = config(512, 64, 8);
    cfg.max_seq_len = 20;
    tl_engine *e = fake_engine(&f, &cfg, V, 256);
    f.eos_bias = -100.0f;
    int32_t p[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    struct collected *c = calloc(2, sizeof(*c));
    fake_submit(e, p, 10, NULL, 10, &c[0]);
    fake_run(e);
    assert_int_equal(c[0].done.finish, TL_FINISH_LENGTH);
    assert_int_equal(c[0].n_tokens, 10);
    tl_engine_destroy(e);
    free(c);
}

int main(void)
{
    tl_log_set_level(TL_LOG_ERROR);
    init_prompt();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_determinism_in_a_crowd),
        cmocka_unit_test(test_determinism_across_chunk_sizes),
        cmocka_unit_test(test_determinism_with_prefix_hit),
        cmocka_unit_test(test_determinism_after_preemption),
        // after the preemption test: it draws its requests from the shared RNG's state
        cmocka_unit_test(test_determinism_across_prefill_caps),
        cmocka_unit_test(test_chunked_prefill_and_decode_first),
        cmocka_unit_test(test_prefill_cap_while_decoding),
        cmocka_unit_test(test_prefill_cap_grows_with_decodes),
        cmocka_unit_test(test_prefill_backlog_lifts_the_cap),
        cmocka_unit_test(test_priority_and_arrival_order),
        cmocka_unit_test(test_preemption_victims),
        cmocka_unit_test(test_whole_pool_request_finishes),
        cmocka_unit_test(test_prefix_cache_sharing_and_eviction),
        cmocka_unit_test(test_length_limits),
    };
    const char *filter = getenv("TL_TEST_FILTER");
    if (filter && *filter) cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
