/*
 * The engine with a Q8_0 KV cache over a real model. stories260K has head_dim 8, which Q8_0
 * cannot hold (engine creation must fail and say so); the same trained weights regrouped as 2
 * query heads and 1 KV head of 32 values (a copy of the GGUF written at setup with the head
 * counts changed: every tensor keeps its shape) give a model Q8_0 can hold. With it:
 *   - greedy tokens of a request are identical alone, among 15 other requests, with prefill
 *     chunks of 1, 7 and 512 tokens, and after preemption and recompute (the determinism
 *     contract holds for Q8_0 KV as for F16);
 *   - the logits of a Q8_0-KV forward pass stay close to the F32-KV ones, and F16 KV closer
 *     still (the tolerance, and why it is loose on this model, is explained at the test).
 */
#include "engine_harness.h"
#include "tl_test.h"

#include "core/log.h"
#include "engine/engine_impl.h"
#include "engine/kvcache.h"
#include "gguf/gguf.h"
#include "model/model.h"

#include <math.h>
#include <unistd.h>

static tl_model *model; // the regrouped model: head_dim 32
static char model_path[256];

// Copies stories260K.gguf with llama.attention.head_count 2 and head_count_kv 1.
static int write_regrouped(const char *path)
{
    struct tl_gguf *src;
    if (tl_gguf_open(tl_test_shared("models/stories260K.gguf"), &src)) return -1;
    struct tl_gguf_writer *w = tl_gguf_writer_create();
    int rc = w ? 0 : -1;
    for (int64_t i = 0; !rc && i < tl_gguf_n_kv(src); i++) {
        const struct tl_gguf_kv *kv = tl_gguf_kv_at(src, i);
        char key[256];
        snprintf(key, sizeof(key), "%.*s", (int)kv->key.len, kv->key.ptr);
        if (!strcmp(key, "llama.attention.head_count") ||
            !strcmp(key, "llama.attention.head_count_kv") ||
            !strcmp(key, "llama.rope.dimension_count") ||
            !strcmp(key, "llama.attention.key_length") ||
            !strcmp(key, "llama.attention.value_length"))
            continue;
        if (tl_gguf_writer_set_value(w, key, &kv->value)) rc = -1;
    }
    if (!rc && (tl_gguf_writer_set_u32(w, "llama.attention.head_count", 2) ||
                tl_gguf_writer_set_u32(w, "llama.attention.head_count_kv", 1)))
        rc = -1;
    for (int64_t i = 0; !rc && i < tl_gguf_n_tensors(src); i++) {
        const struct tl_gguf_tensor *t = tl_gguf_tensor_at(src, i);
        char name[128];
        snprintf(name, sizeof(name), "%.*s", (int)t->name.len, t->name.ptr);
        if (tl_gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data)) rc = -1;
    }
    if (!rc && tl_gguf_writer_write(w, path)) rc = -1;
    tl_gguf_writer_destroy(w);
    tl_gguf_close(src);
    return rc;
}

static void run_ref_alone(void);

static int setup(void **state)
{
    (void)state;
    tl_log_set_level(TL_LOG_ERROR);
    snprintf(model_path, sizeof(model_path), "%s", tl_test_tmpfile("regrouped.gguf"));
    if (write_regrouped(model_path)) {
        fprintf(stderr, "write: %s\n", tl_last_error());
        return -1;
    }
    if (tl_model_load(model_path, NULL, &model)) {
        fprintf(stderr, "load: %s\n", tl_last_error());
        return -1;
    }
    if (model->hp.head_dim != 32 || model->hp.n_head_kv != 1) return -1;
    run_ref_alone();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tl_model_destroy(model);
    unlink(model_path);
    return 0;
}

// ---- engine runs ----------------------------------------------------------------------------

struct run {
    int32_t tokens[512];
    int n;
    struct tl_event done;
    int n_done;
};

static void on_event(void *user, const struct tl_event *ev)
{
    struct run *r = user;
    if (ev->type == TL_EVENT_TOKEN) {
        if (r->n < 512) r->tokens[r->n++] = ev->token;
    } else {
        r->done = *ev;
        r->n_done++;
    }
}

static struct tl_engine_config q8_config(void)
{
    struct tl_engine_config c;
    tl_engine_config_default(&c);
    c.kv_type = TL_KV_Q8_0;
    c.max_seq_len = 512;
    c.n_threads = 2;
    c.kv_blocks = 1024;
    return c;
}

static tl_engine *engine(const struct tl_engine_config *c)
{
    return harness_engine(model, c);
}

enum { N_GEN = 100 };
static const char *const PROMPT = "Once upon a time, there was a little girl named Lily. She "
                                  "loved to play outside in the park. One day, she saw";

// The request under test: greedy, N_GEN tokens, no stop.
static void submit_ref(tl_engine *e, struct run *r, int32_t priority)
{
    struct tl_request q;
    tl_request_default(&q);
    q.prompt = PROMPT;
    q.add_special = true;
    q.sampling.temperature = 0;
    q.max_tokens = N_GEN;
    q.ignore_eos = true;
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

// A random request: 1..max_prompt random tokens, sampled or greedy, 1..80 new tokens.
static void submit_random(tl_engine *e, struct run *r, int32_t priority, int max_prompt)
{
    int32_t toks[256];
    int n = 1 + (int)rnd((uint32_t)max_prompt);
    for (int i = 0; i < n; i++)
        toks[i] = 3 + (int32_t)rnd((uint32_t)model->hp.n_vocab - 3);
    struct tl_request q;
    tl_request_default(&q);
    q.prompt_tokens = toks;
    q.n_prompt_tokens = n;
    q.sampling.temperature = rnd(3) ? 0.8f : 0.0f;
    q.sampling.seed = rnd(1 << 20);
    q.max_tokens = 1 + (int32_t)rnd(80);
    q.priority = priority;
    q.on_event = on_event;
    q.user = r;
    uint64_t id;
    if (tl_engine_submit(e, &q, &id)) fail_msg("submit: %s", tl_last_error());
}

static struct run ref; // the request alone, default budget

// The reference every comparison uses: the request alone in an engine of its own, run once by
// setup so that each test can be run by itself (TL_TEST_FILTER) or in any order.
static void run_ref_alone(void)
{
    struct tl_engine_config c = q8_config();
    tl_engine *e = engine(&c);
    memset(&ref, 0, sizeof(ref));
    submit_ref(e, &ref, 0);
    harness_run_all(e);
    tl_engine_destroy(e);
}

static void assert_same_as_ref(const struct run *r, const char *what)
{
    assert_int_equal(r->n_done, 1);
    assert_int_equal(r->n, N_GEN);
    for (int i = 0; i < N_GEN; i++)
        if (r->tokens[i] != ref.tokens[i])
            fail_msg("%s: token %d is %d, alone %d", what, i, r->tokens[i], ref.tokens[i]);
}

static void test_q8_refused_for_head_dim_8(void **state)
{
    (void)state;
    tl_model *m;
    assert_int_equal(tl_model_load(tl_test_shared("models/stories260K.gguf"), NULL, &m), TL_OK);
    assert_int_equal(m->hp.head_dim, 8);
    struct tl_engine_config c = q8_config();
    tl_engine *e = NULL;
    assert_int_equal(tl_engine_create(m, &c, &e), TL_ERR_INVALID_ARG);
    assert_null(e);
    const char *msg = tl_last_error();
    if (!strstr(msg, "q8_0") || !strstr(msg, "head_dim is 8"))
        fail_msg("error does not name the type and head_dim: %s", msg);
    c.kv_type = TL_KV_F16; // the same model is fine with F16
    assert_int_equal(tl_engine_create(m, &c, &e), TL_OK);
    tl_engine_destroy(e);
    tl_model_destroy(m);
}

static void test_kv_bytes_follow_the_type(void **state)
{
    (void)state;
    // a block: 16 positions x 5 layers x (K, V) x 1 KV head x 32 values; Q8_0 34 bytes per 32
    struct tl_engine_config c = q8_config();
    c.kv_blocks = 10;
    tl_engine *e = engine(&c);
    struct tl_engine_stats st;
    tl_engine_get_stats(e, &st);
    assert_int_equal(st.kv_blocks_total, 10);
    tl_engine_destroy(e);
    struct tl_kv_cache_config kc = {.n_blocks = 10,
                                    .block_size = 16,
                                    .n_layer = 5,
                                    .n_kv_head = 1,
                                    .head_dim = 32,
                                    .type = TL_DTYPE_Q8_0};
    assert_int_equal(tl_kv_cache_block_bytes(&kc), 16 * 5 * 2 * 34);
    kc.type = TL_DTYPE_F16;
    assert_int_equal(tl_kv_cache_block_bytes(&kc), 16 * 5 * 2 * 64);
    // kv_bytes buys 64/34 as many Q8_0 blocks as F16 ones
    c = q8_config();
    c.kv_blocks = 0;
    c.kv_bytes = 16 * 5 * 2 * 34 * 100;
    e = engine(&c);
    tl_engine_get_stats(e, &st);
    assert_int_equal(st.kv_blocks_total, 100);
    tl_engine_destroy(e);
}

static void test_greedy_alone_batched_chunked(void **state)
{
    (void)state;
    rng = 7; // each test seeds its own random requests: no test depends on another's order
    struct tl_engine_config c = q8_config();
    tl_engine *e;
    assert_int_equal(ref.n_done, 1);
    assert_int_equal(ref.n, N_GEN);
    assert_true(ref.done.n_prompt_tokens > 20); // several chunks of 7

    // among 15 others, with prefill chunks of 1, 7 and 512 tokens per step
    const int32_t budgets[] = {1, 7, 512};
    for (int k = 0; k < 3; k++) {
        c = q8_config();
        c.max_tokens_per_step = budgets[k];
        c.max_batch_size = 16;
        e = engine(&c);
        struct run *r = calloc(16, sizeof(*r));
        for (int i = 0; i < 16; i++) {
            if (i == 5)
                submit_ref(e, &r[i], 0);
            else
                submit_random(e, &r[i], 0, 60);
        }
        harness_run_all(e);
        char what[64];
        snprintf(what, sizeof(what), "among 15 others, budget %d", budgets[k]);
        assert_same_as_ref(&r[5], what);
        for (int i = 0; i < 16; i++)
            assert_int_equal(r[i].n_done, 1);
        tl_engine_destroy(e);
        free(r);
    }
}

static void test_greedy_after_preemption(void **state)
{
    (void)state;
    rng = 11;
    assert_int_equal(ref.n, N_GEN); // the reference run by setup
    // the request needs ~125 positions = 32 blocks of 4; the pool has 40 and better-priority
    // requests keep coming, so it is preempted and recomputed
    struct tl_engine_config c = q8_config();
    c.kv_block_size = 4;
    c.kv_blocks = 40;
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
    assert_same_as_ref(&r[0], "after preemption");
    tl_engine_destroy(e);
    free(r);
}

// ---- logits against F16 / F32 KV ------------------------------------------------------------

// Logits of every position of `toks` run as one prefill through a KV cache of `type`.
static float *forward_logits(enum tl_dtype type, const int32_t *toks, int n)
{
    const struct tl_hparams *hp = &model->hp;
    enum { BS = 16 };
    int n_blocks = (n + BS - 1) / BS;
    struct tl_kv_cache_config kc = {.n_blocks = n_blocks,
                                    .block_size = BS,
                                    .n_layer = hp->n_layer,
                                    .n_kv_head = hp->n_head_kv,
                                    .head_dim = hp->head_dim,
                                    .type = type};
    struct tl_kv_cache *kv = tl_kv_cache_create(&kc);
    assert_non_null(kv);
    int32_t table[64], pos[512], seq[512], out[512];
    for (int j = 0; j < n_blocks; j++)
        table[j] = n_blocks - 1 - j; // reversed: the table matters
    for (int i = 0; i < n; i++)
        pos[i] = i, seq[i] = 0, out[i] = i;
    const int32_t *tables[1] = {table};
    struct tl_batch b = {.n_tok = n,
                         .token = toks,
                         .pos = pos,
                         .seq = seq,
                         .block_tables = tables,
                         .n_out = n,
                         .out_idx = out};
    float *logits = malloc((size_t)n * hp->n_vocab * sizeof(float));
    struct tl_forward *f = tl_forward_create(model, n, 512, NULL);
    assert_non_null(f);
    if (tl_forward_run(f, &b, tl_kv_cache_pages(kv), logits))
        fail_msg("forward: %s", tl_last_error());
    tl_forward_destroy(f);
    tl_kv_cache_destroy(kv);
    return logits;
}

static void test_logits_close_to_f16_kv(void **state)
{
    (void)state;
    // a real text (the stories reference continuation, as token ids) of 200 positions
    int32_t toks[200];
    struct tl_engine_config c = q8_config();
    c.kv_type = TL_KV_F32;
    tl_engine *e = engine(&c);
    struct run *r = calloc(1, sizeof(*r));
    struct tl_request q;
    tl_request_default(&q);
    q.prompt = PROMPT;
    q.add_special = true;
    q.sampling.temperature = 0.7f; // varied text rather than a greedy loop
    q.sampling.seed = 1;
    q.max_tokens = 200;
    q.ignore_eos = true;
    q.on_event = on_event;
    q.user = r;
    uint64_t id;
    assert_int_equal(tl_engine_submit(e, &q, &id), TL_OK);
    harness_run_all(e);
    tl_engine_destroy(e);
    assert_true(r->n == 200);
    memcpy(toks, r->tokens, sizeof(toks));
    free(r);
    const int n = 200, nv = model->hp.n_vocab;
    float *l32 = forward_logits(TL_DTYPE_F32, toks, n);
    float *l16 = forward_logits(TL_DTYPE_F16, toks, n);
    float *l8 = forward_logits(TL_DTYPE_Q8_0, toks, n);
    // relative RMS error of the logits against F32 KV, and how often the top token agrees
    double e16 = 0, e8 = 0, den = 0;
    int agree8 = 0, agree16 = 0;
    for (int t = 0; t < n; t++) {
        const float *a = l32 + (size_t)t * nv, *b16 = l16 + (size_t)t * nv,
                    *b8 = l8 + (size_t)t * nv;
        int i32 = 0, i16 = 0, i8 = 0;
        for (int i = 0; i < nv; i++) {
            e16 += ((double)b16[i] - a[i]) * ((double)b16[i] - a[i]);
            e8 += ((double)b8[i] - a[i]) * ((double)b8[i] - a[i]);
            den += (double)a[i] * a[i];
            i32 = a[i] > a[i32] ? i : i32;
            i16 = b16[i] > b16[i16] ? i : i16;
            i8 = b8[i] > b8[i8] ? i : i8;
        }
        agree16 += i16 == i32;
        agree8 += i8 == i32;
    }
    e16 = sqrt(e16 / den), e8 = sqrt(e8 / den);
    print_message("logits vs f32 KV: relative rms f16 %.2e, q8_0 %.2e; top-1 agrees at %d / %d "
                  "(f16 %d)\n",
                  e16, e8, agree8, n, agree16);
    // Q8_0 rounds each K/V value to within 0.6 * amax/127 of its 32-block: measured on this
    // model 0.5-0.8% relative RMS per layer for K and V (F16: ~0.03%). This model's attention is
    // sharp (K RMS 3.5-8, |K| up to 30 per value, q alike, so q.k/sqrt(32) reaches the tens) and
    // a score error of 0.7% of that moves the softmax weights by several percent: measured,
    // the logits move by 6.3% RMS against F32 KV and the top token agrees at 171 of 200
    // positions (F16: 0.2% and 198). The bounds leave ~1.5x room over those numbers; a wrong
    // scale, a misplaced block or a half-stored row gives errors of order 1 and agreement near
    // chance, far outside them. (The exact check of the Q8_0 attention arithmetic is
    // test_kv_q8: bit-identical to F32 attention over the dequantized values.)
    assert_true(e8 < 0.1);
    assert_true(agree8 >= n * 80 / 100);
    // F16 is much closer, as it should be: the comparison measures KV precision
    assert_true(e16 < e8 / 10);
    free(l32), free(l16), free(l8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q8_refused_for_head_dim_8),
        cmocka_unit_test(test_kv_bytes_follow_the_type),
        cmocka_unit_test(test_greedy_alone_batched_chunked),
        cmocka_unit_test(test_greedy_after_preemption),
        cmocka_unit_test(test_logits_close_to_f16_kv),
    };
    const char *filter = getenv("TL_TEST_FILTER");
    if (filter && *filter) cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, setup, teardown);
}
