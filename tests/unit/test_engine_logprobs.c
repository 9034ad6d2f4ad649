/*
 * Prompt log-probabilities (tl_request.prompt_logprobs, TL_EVENT_PROMPT_TOKEN) on the real
 * stories260K model. The oracle is independent of the engine: a direct tl_forward_run over the
 * whole prompt in one batch (its own paged KV store, logits of every position) and a log-softmax
 * computed here in double. Then: the top-N are the N best and sorted; the events are exactly one
 * per prompt token, in order, before the first generated token; they are bit-identical across
 * chunk sizes (1, 7, 512), logits-row caps, batch company and preemption; a prompt-logprob
 * request skips the prefix cache but publishes its blocks; and a prompt token's logprob equals
 * the one the engine reports when it generates that same token greedily. On the fake model of
 * engine_fake.h with a 32000-token vocabulary: the prompt-logprob logits rows of a step stay
 * within their 16 MiB bound (131 rows) while three 512-token prompts get all their events.
 */
#include "engine_harness.h"
#include "tl_test.h"

#include "core/alloc.h"
#include "core/log.h"
#include "engine/engine_impl.h"
#include "engine_fake.h"

#include <math.h>

#define MAX_PROMPT 256
#define N_TOP 5

static tl_model *model;
static int32_t prompt[MAX_PROMPT];
static int n_prompt;

// A prompt of about 100 tokens from stories260K's own world.
static const char *prompt_text =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "sun with her big red ball. One day, her mom said they would go to the park. Lily was so "
    "happy! At the park she saw a dog and a boy. The boy said, \"Can I play with your ball?\" "
    "Lily smiled and";

static int setup(void **state)
{
    (void)state;
    tl_log_set_level(TL_LOG_ERROR);
    if (tl_model_load(tl_test_shared("models/stories260K.gguf"), NULL, &model)) {
        fprintf(stderr, "load: %s\n", tl_last_error());
        return -1;
    }
    int32_t *ids = NULL;
    int64_t n = 0;
    if (tl_model_tokenize(model, prompt_text, strlen(prompt_text), true, false, &ids, &n) ||
        n < 64 || n > MAX_PROMPT)
        return -1;
    memcpy(prompt, ids, (size_t)n * sizeof(int32_t));
    n_prompt = (int)n;
    free(ids);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tl_model_destroy(model);
    return 0;
}

// ---- what a request's callback saw ---------------------------------------------------------

struct run {
    int n_plp; // PROMPT_TOKEN events
    int32_t plp_tok[MAX_PROMPT + 64];
    float plp_lp[MAX_PROMPT + 64];
    int32_t plp_n_top[MAX_PROMPT + 64];
    struct tl_token_logprob plp_top[MAX_PROMPT + 64][N_TOP];
    int n_gen; // TOKEN events
    int32_t gen_tok[128];
    float gen_lp[128];
    struct tl_token_logprob gen_top[128][N_TOP];
    int n_done;
    struct tl_event done;
    char err[200]; // first protocol violation
};

static void violation(struct run *r, const char *msg, long long a)
{
    if (!r->err[0]) snprintf(r->err, sizeof(r->err), "%s (%lld)", msg, a);
}

static void on_event(void *user, const struct tl_event *ev)
{
    struct run *r = user;
    if (r->n_done) violation(r, "event after DONE", ev->type);
    if (ev->type == TL_EVENT_PROMPT_TOKEN) {
        if (r->n_gen) violation(r, "prompt token after a generated one", ev->prompt_pos);
        if (ev->prompt_pos != r->n_plp)
            violation(r, "prompt position out of order", ev->prompt_pos);
        if (r->n_plp >= MAX_PROMPT + 64 || ev->n_top > N_TOP || ev->text_len) {
            violation(r, "bad prompt event", r->n_plp);
            return;
        }
        r->plp_tok[r->n_plp] = ev->token;
        r->plp_lp[r->n_plp] = ev->logprob;
        r->plp_n_top[r->n_plp] = ev->n_top;
        if (ev->n_top) memcpy(r->plp_top[r->n_plp], ev->top, (size_t)ev->n_top * sizeof(*ev->top));
        r->n_plp++;
    } else if (ev->type == TL_EVENT_TOKEN) {
        if (r->n_gen >= 128 || ev->n_top > N_TOP) {
            violation(r, "too many tokens", r->n_gen);
            return;
        }
        r->gen_tok[r->n_gen] = ev->token;
        r->gen_lp[r->n_gen] = ev->logprob;
        if (ev->n_top) memcpy(r->gen_top[r->n_gen], ev->top, (size_t)ev->n_top * sizeof(*ev->top));
        r->n_gen++;
    } else {
        r->done = *ev;
        r->n_done++;
    }
}

static struct tl_engine_config base_config(void)
{
    struct tl_engine_config c;
    tl_engine_config_default(&c);
    c.max_seq_len = 512;
    c.n_threads = 2;
    c.kv_blocks = 1024;
    return c;
}

static tl_engine *engine(const struct tl_engine_config *c)
{
    return harness_engine(model, c);
}

static void submit(tl_engine *e, struct run *r, const int32_t *ids, int n, bool plp, int max_tokens,
                   int32_t priority)
{
    struct tl_request q;
    tl_request_default(&q);
    q.prompt_tokens = ids;
    q.n_prompt_tokens = n;
    q.sampling.temperature = 0;
    q.sampling.n_logprobs = N_TOP;
    q.max_tokens = max_tokens;
    q.prompt_logprobs = plp;
    q.priority = priority;
    q.on_event = on_event;
    q.user = r;
    uint64_t id;
    if (tl_engine_submit(e, &q, &id)) fail_msg("submit: %s", tl_last_error());
}

static uint64_t rng = 7;
static uint32_t rnd(uint32_t n)
{
    return harness_rnd(&rng, n);
}

// A random request of up to max_prompt tokens; a third of them want prompt logprobs too.
static void submit_random(tl_engine *e, struct run *r, int32_t priority, int max_prompt)
{
    int32_t ids[MAX_PROMPT];
    int n = 1 + (int)rnd((uint32_t)max_prompt);
    ids[0] = 1; // BOS
    for (int i = 1; i < n; i++)
        ids[i] = 3 + (int32_t)rnd(500);
    struct tl_request q;
    tl_request_default(&q);
    q.prompt_tokens = ids;
    q.n_prompt_tokens = n;
    q.sampling.temperature = rnd(2) ? 0.8f : 0.0f;
    q.sampling.seed = rnd(1 << 20);
    q.sampling.n_logprobs = (int32_t)rnd(N_TOP + 1);
    q.prompt_logprobs = rnd(3) == 0;
    q.max_tokens = 1 + (int32_t)rnd(40);
    q.priority = priority;
    q.on_event = on_event;
    q.user = r;
    uint64_t id;
    if (tl_engine_submit(e, &q, &id)) fail_msg("submit: %s", tl_last_error());
}

static void assert_clean(const struct run *r, int n_prompt_tokens)
{
    if (r->err[0]) fail_msg("%s", r->err);
    assert_int_equal(r->n_done, 1);
    assert_int_equal(r->n_plp, n_prompt_tokens);
}

// Bit-identical prompt logprobs (tokens, logprobs, alternatives).
static void assert_same_plp(const struct run *a, const struct run *b)
{
    assert_int_equal(a->n_plp, b->n_plp);
    assert_memory_equal(a->plp_tok, b->plp_tok, (size_t)a->n_plp * sizeof(int32_t));
    assert_memory_equal(a->plp_lp, b->plp_lp, (size_t)a->n_plp * sizeof(float));
    assert_memory_equal(a->plp_n_top, b->plp_n_top, (size_t)a->n_plp * sizeof(int32_t));
    for (int i = 0; i < a->n_plp; i++)
        assert_memory_equal(a->plp_top[i], b->plp_top[i],
                            (size_t)a->plp_n_top[i] * sizeof(struct tl_token_logprob));
}

// The reference: the prompt alone, default configuration.
static struct run *reference_run(enum tl_kv_type kv)
{
    struct tl_engine_config c = base_config();
    c.kv_type = kv;
    tl_engine *e = engine(&c);
    struct run *r = calloc(1, sizeof(*r));
    submit(e, r, prompt, n_prompt, true, 8, 0);
    harness_run_all(e);
    assert_clean(r, n_prompt);
    tl_engine_destroy(e);
    return r;
}

// ---- tests ----------------------------------------------------------------------------------

// The oracle: the model run directly over the prompt in one batch, every position's logits.
static float *direct_logits(void)
{
    const struct tl_hparams *hp = &model->hp;
    enum { BS = 16 };
    int n_blocks = (n_prompt + BS - 1) / BS;
    struct tl_kv_layer *layers = calloc((size_t)hp->n_layer, sizeof(*layers));
    size_t elems = (size_t)n_blocks * BS * hp->n_head_kv * hp->head_dim;
    for (int l = 0; l < hp->n_layer; l++) {
        layers[l] = (struct tl_kv_layer){.type = TL_DTYPE_F32,
                                         .block_size = BS,
                                         .n_kv_head = hp->n_head_kv,
                                         .head_dim = hp->head_dim};
        layers[l].k = tl_aligned_alloc(elems * sizeof(float));
        layers[l].v = tl_aligned_alloc(elems * sizeof(float));
        assert_true(layers[l].k && layers[l].v);
    }
    struct tl_kv_pages pages = {.n_layer = hp->n_layer, .layers = layers};
    int32_t table[MAX_PROMPT], pos[MAX_PROMPT], seq[MAX_PROMPT], out[MAX_PROMPT];
    for (int j = 0; j < n_blocks; j++)
        table[j] = n_blocks - 1 - j; // reversed: the table really matters
    for (int i = 0; i < n_prompt; i++)
        pos[i] = i, seq[i] = 0, out[i] = i;
    const int32_t *tables[1] = {table};
    struct tl_batch b = {.n_tok = n_prompt,
                         .token = prompt,
                         .pos = pos,
                         .seq = seq,
                         .block_tables = tables,
                         .n_out = n_prompt,
                         .out_idx = out};
    float *logits = malloc((size_t)n_prompt * hp->n_vocab * sizeof(float));
    struct tl_forward *f = tl_forward_create(model, n_prompt, 512, NULL);
    assert_non_null(f);
    if (tl_forward_run(f, &b, &pages, logits)) fail_msg("forward: %s", tl_last_error());
    tl_forward_destroy(f);
    for (int l = 0; l < hp->n_layer; l++) {
        tl_aligned_free(layers[l].k);
        tl_aligned_free(layers[l].v);
    }
    free(layers);
    return logits;
}

static void test_matches_direct_forward(void **state)
{
    (void)state;
    const int32_t nv = model->hp.n_vocab;
    float *logits = direct_logits();
    struct run *r = reference_run(TL_KV_F32);
    assert_int_equal(r->plp_tok[0], prompt[0]);
    assert_true(isnan(r->plp_lp[0]));
    assert_int_equal(r->plp_n_top[0], 0);
    for (int t = 1; t < n_prompt; t++) {
        const float *z = logits + (size_t)(t - 1) * nv;
        double mx = -INFINITY, sum = 0;
        for (int32_t i = 0; i < nv; i++)
            mx = z[i] > mx ? z[i] : mx;
        for (int32_t i = 0; i < nv; i++)
            sum += exp((double)z[i] - mx);
        double lse = mx + log(sum);
        assert_int_equal(r->plp_tok[t], prompt[t]);
        TL_ASSERT_NEAR(r->plp_lp[t], (double)z[prompt[t]] - lse, 1e-5, t);
        assert_true(r->plp_lp[t] <= 0);
        // The top N: the N highest logits, best first (ties to the lower id).
        assert_int_equal(r->plp_n_top[t], N_TOP);
        bool taken[4096] = {false};
        assert_true(nv <= 4096);
        for (int k = 0; k < N_TOP; k++) {
            int32_t best = -1;
            for (int32_t i = 0; i < nv; i++)
                if (!taken[i] && (best < 0 || z[i] > z[best])) best = i;
            taken[best] = true;
            assert_int_equal(r->plp_top[t][k].id, best);
            TL_ASSERT_NEAR(r->plp_top[t][k].logprob, (double)z[best] - lse, 1e-5, t);
            if (k) assert_true(r->plp_top[t][k].logprob <= r->plp_top[t][k - 1].logprob);
        }
        assert_true(r->plp_lp[t] <= r->plp_top[t][0].logprob);
    }
    assert_int_equal(r->n_gen, 8);
    assert_int_equal(r->done.n_prompt_tokens, n_prompt);
    free(r);
    free(logits);
}

static void test_identical_across_chunks_rows_and_company(void **state)
{
    (void)state;
    struct run *ref = reference_run(TL_KV_F16);
    const int32_t steps[] = {1, 7, 512};
    for (size_t k = 0; k < 3; k++) {
        for (int company = 0; company < 2; company++) {
            struct tl_engine_config c = base_config();
            c.max_tokens_per_step = steps[k];
            c.max_batch_size = steps[k] < 11 ? steps[k] : 11;
            tl_engine *e = engine(&c);
            // Also cut the prompt-logprob rows per step (the memory bound) below the chunk.
            if (company) e->plp.max_rows = 3;
            struct run *r = calloc(11, sizeof(*r));
            if (company)
                for (int i = 1; i < 11; i++)
                    submit_random(e, &r[i], i % 2 ? -1 : 1, 120);
            submit(e, &r[0], prompt, n_prompt, true, 8, 0);
            harness_run_all(e);
            assert_clean(&r[0], n_prompt);
            assert_same_plp(ref, &r[0]);
            assert_int_equal(r[0].n_gen, 8);
            assert_memory_equal(r[0].gen_tok, ref->gen_tok, 8 * sizeof(int32_t));
            for (int i = 1; i < 11 && company; i++) {
                if (r[i].err[0]) fail_msg("request %d: %s", i, r[i].err);
                assert_int_equal(r[i].n_done, 1);
                assert_int_equal(r[i].n_plp, r[i].n_plp ? r[i].done.n_prompt_tokens : 0);
            }
            tl_engine_destroy(e);
            free(r);
        }
    }
    free(ref);
}

static void test_identical_after_preemption(void **state)
{
    (void)state;
    struct run *ref = reference_run(TL_KV_F16);
    // Small pool and steps: the prompt takes many steps to prefill while better-priority
    // requests keep coming and preempt it, also in the middle of its prompt.
    struct tl_engine_config c = base_config();
    c.kv_block_size = 4;
    c.kv_blocks = 28; // the prompt alone needs 26
    c.max_tokens_per_step = 16;
    c.max_batch_size = 6;
    tl_engine *e = engine(&c);
    struct run *r = calloc(60, sizeof(*r));
    int next = 1;
    while (next < 4)
        submit_random(e, &r[next++], 0, 24);
    submit(e, &r[0], prompt, n_prompt, true, 8, 1);
    int64_t n = 1, steps = 0;
    bool mid_prompt = false;
    while (n > 0 || next < 60) {
        if (next < 60 && steps % 2 == 0) submit_random(e, &r[next++], 0, 24);
        if (tl_engine_step(e, &n)) fail_msg("step: %s", tl_last_error());
        if (tl__engine_check(e)) fail_msg("%s", tl_last_error());
        for (size_t i = 0; i < e->n_waiting; i++) {
            const struct tl_seq *s = e->waiting[i];
            if (s->user == &r[0] && s->n_preempted && s->plp.n_done > 0 &&
                s->plp.n_done < s->n_prompt)
                mid_prompt = true;
        }
        steps++;
    }
    assert_clean(&r[0], n_prompt);
    assert_true(r[0].done.n_preempted > 0);
    assert_true(mid_prompt);
    assert_same_plp(ref, &r[0]);
    assert_memory_equal(r[0].gen_tok, ref->gen_tok, 8 * sizeof(int32_t));
    for (int i = 1; i < 60; i++)
        if (r[i].err[0]) fail_msg("request %d: %s", i, r[i].err);
    tl_engine_destroy(e);
    free(r);
    free(ref);
}

static void test_prefix_cache_skipped_and_published(void **state)
{
    (void)state;
    struct run *ref = reference_run(TL_KV_F16);
    struct tl_engine_config c = base_config();
    tl_engine *e = engine(&c);
    struct run *r = calloc(3, sizeof(*r));
    // Without prompt logprobs first: its blocks are cached; the next request must not use them.
    submit(e, &r[0], prompt, n_prompt, false, 8, 0);
    harness_run_all(e);
    assert_int_equal(r[0].n_plp, 0);
    submit(e, &r[1], prompt, n_prompt, true, 8, 0);
    harness_run_all(e);
    assert_clean(&r[1], n_prompt);
    assert_int_equal(r[1].done.n_cached_tokens, 0);
    assert_same_plp(ref, &r[1]);
    // Its own blocks were published: a plain request hits them.
    tl_engine_destroy(e);
    e = engine(&c);
    memset(&r[1], 0, sizeof(r[1]));
    submit(e, &r[1], prompt, n_prompt, true, 8, 0);
    harness_run_all(e);
    assert_clean(&r[1], n_prompt);
    submit(e, &r[2], prompt, n_prompt, false, 8, 0);
    harness_run_all(e);
    assert_int_equal(r[2].done.n_cached_tokens, (n_prompt - 1) / 16 * 16);
    assert_memory_equal(r[2].gen_tok, ref->gen_tok, 8 * sizeof(int32_t));
    tl_engine_destroy(e);
    free(r);
    free(ref);
}

static void test_consistent_with_generated_logprobs(void **state)
{
    (void)state;
    // Greedy continuation of the prompt's first 40 tokens: each generated token's logprob (and
    // alternatives) must equal that token's prompt logprob when prompt + continuation is the
    // prompt of another request: same logits (forward contract), same log-softmax code.
    enum { HEAD = 40, GEN = 30 };
    struct tl_engine_config c = base_config();
    tl_engine *e = engine(&c);
    struct run *r = calloc(2, sizeof(*r));
    submit(e, &r[0], prompt, HEAD, false, GEN, 0);
    harness_run_all(e);
    assert_int_equal(r[0].n_gen, GEN);
    int32_t ids[HEAD + GEN];
    memcpy(ids, prompt, HEAD * sizeof(int32_t));
    memcpy(ids + HEAD, r[0].gen_tok, GEN * sizeof(int32_t));
    submit(e, &r[1], ids, HEAD + GEN, true, 1, 0);
    harness_run_all(e);
    assert_clean(&r[1], HEAD + GEN);
    for (int i = 0; i < GEN; i++) {
        assert_int_equal(r[1].plp_tok[HEAD + i], r[0].gen_tok[i]);
        if (r[1].plp_lp[HEAD + i] != r[0].gen_lp[i])
            fail_msg("token %d: prompt logprob %.9g, generated %.9g", i,
                     (double)r[1].plp_lp[HEAD + i], (double)r[0].gen_lp[i]);
        assert_memory_equal(r[1].plp_top[HEAD + i], r[0].gen_top[i],
                            N_TOP * sizeof(struct tl_token_logprob));
        // Greedy: the generated token is the best alternative.
        assert_int_equal(r[0].gen_top[i][0].id, r[0].gen_tok[i]);
    }
    tl_engine_destroy(e);
    free(r);
}

static void test_edge_cases(void **state)
{
    (void)state;
    struct tl_engine_config c = base_config();
    tl_engine *e = engine(&c);
    struct run *r = calloc(2, sizeof(*r));
    // A one-token prompt: one event, no logprob.
    int32_t bos = 1;
    submit(e, &r[0], &bos, 1, true, 3, 0);
    // No alternatives asked: logprobs only.
    struct tl_request q;
    tl_request_default(&q);
    q.prompt_tokens = prompt;
    q.n_prompt_tokens = 10;
    q.sampling.temperature = 0;
    q.prompt_logprobs = true;
    q.max_tokens = 2;
    q.on_event = on_event;
    q.user = &r[1];
    uint64_t id;
    assert_int_equal(tl_engine_submit(e, &q, &id), TL_OK);
    harness_run_all(e);
    assert_clean(&r[0], 1);
    assert_true(isnan(r[0].plp_lp[0]));
    assert_int_equal(r[0].n_gen, 3);
    assert_clean(&r[1], 10);
    for (int i = 0; i < 10; i++) {
        assert_int_equal(r[1].plp_n_top[i], 0);
        if (i) assert_true(isfinite(r[1].plp_lp[i]) && r[1].plp_lp[i] <= 0);
    }
    tl_engine_destroy(e);
    free(r);
}

// Counts one request's events and checks their order (prompt positions 0, 1, ... first).
struct counts {
    int64_t n_plp, n_gen, n_done;
    bool bad;
};

static void count_event(void *user, const struct tl_event *ev)
{
    struct counts *c = user;
    if (ev->type == TL_EVENT_PROMPT_TOKEN) {
        if (c->n_gen || ev->prompt_pos != c->n_plp) c->bad = true;
        c->n_plp++;
    } else if (ev->type == TL_EVENT_TOKEN) {
        c->n_gen++;
    } else {
        c->n_done++;
    }
}

static void test_logits_rows_bounded(void **state)
{
    (void)state;
    // A 32000-token vocabulary (fake model): 16 MiB of prompt-logprob rows is 131 rows, not the
    // 512 of a full chunk (64 MB). Three 512-token prompts still get every event.
    struct fake_model fm;
    struct tl_engine_config c = base_config();
    c.max_seq_len = 600;
    tl_engine *e = fake_engine(&fm, &c, 32000, 1024);
    assert_int_equal(e->plp.max_rows, (int64_t)(TL_ENGINE_PLP_LOGITS_BYTES / (32000 * 4)));
    assert_int_equal(e->plp.max_rows, 131);
    int32_t *ids = malloc(512 * sizeof(int32_t));
    struct counts cnt[3] = {{0}};
    for (int i = 0; i < 3; i++) {
        for (int k = 0; k < 512; k++)
            ids[k] = 1 + (k * 7 + i) % 26;
        struct tl_request q;
        tl_request_default(&q);
        q.prompt_tokens = ids;
        q.n_prompt_tokens = 512;
        q.sampling.n_logprobs = 3;
        q.prompt_logprobs = true;
        q.max_tokens = 4;
        q.ignore_eos = true;
        q.on_event = count_event;
        q.user = &cnt[i];
        uint64_t id;
        assert_int_equal(tl_engine_submit(e, &q, &id), TL_OK);
    }
    free(ids);
    int64_t n = 1, steps = 0, max_rows = 0;
    while (n > 0) {
        if (tl_engine_step(e, &n)) fail_msg("step: %s", tl_last_error());
        if (tl__engine_check(e)) fail_msg("%s", tl_last_error());
        if (e->plp.n > max_rows) max_rows = e->plp.n;
        steps++;
    }
    assert_int_equal(fm.violations, 0);
    assert_int_equal(max_rows, 131);
    assert_true(steps >= 3 * 511 / 131);
    for (int i = 0; i < 3; i++) {
        assert_false(cnt[i].bad);
        assert_int_equal(cnt[i].n_plp, 512);
        assert_int_equal(cnt[i].n_gen, 4);
        assert_int_equal(cnt[i].n_done, 1);
    }
    tl_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_direct_forward),
        cmocka_unit_test(test_identical_across_chunks_rows_and_company),
        cmocka_unit_test(test_identical_after_preemption),
        cmocka_unit_test(test_prefix_cache_skipped_and_published),
        cmocka_unit_test(test_consistent_with_generated_logprobs),
        cmocka_unit_test(test_edge_cases),
        cmocka_unit_test(test_logits_rows_bounded),
    };
    const char *filter = getenv("TL_TEST_FILTER");
    if (filter && *filter) cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, setup, teardown);
}
