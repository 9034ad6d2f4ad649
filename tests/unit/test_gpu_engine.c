/*
 * The engine with --device vulkan (tl_engine_config.device) over stories260K, on the test device
 * (lavapipe in CI; TAP skips without one). The oracle is the reference of
 * ../shared/models/PROVENANCE.md (llama2.c and llama.cpp's greedy token ids): the device step
 * must give exactly those ids
 * - after a prefix-cache hit (the second request reuses the first one's blocks in the device
 *   pool: the engine shares blocks by refcount and never copies one, so nothing else is needed);
 * - after preemption and recompute, among better-priority random requests (sampled and greedy,
 *   of every length) that keep the pool full: the reference sequence runs alone, in mixed
 *   prefill+decode batches, is thrown out and recomputed, and its tokens stay bit-identical
 *   (the engine's block invariants are checked after every step).
 * And a device lost mid-run fails the requests with an error naming it, never a hang.
 */
#define TL_TEST_RNG_SEED 0x9B05688C2B3E6C1Full
#include "engine_harness.h"
#include "gpu_test.h"

#include "core/log.h"
#include "gpu/backend.h"
#include "gpu/gpu_ops.h"

static int32_t ref_ids[1024];
static int n_ref;
static tl_model *model;

static int setup(void **state)
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
    n_ref = 0;
    while (*p && *p != ']') {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) return -1;
        ref_ids[n_ref++] = (int32_t)v;
        p = end;
        while (*p == ',' || *p == ' ')
            p++;
    }
    tl_log_set_level(TL_LOG_ERROR);
    return tl_model_load(tl_test_shared("models/stories260K.gguf"), NULL, &model) ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    tl_model_destroy(model);
    return 0;
}

struct run {
    int32_t tokens[1024];
    int n;
    struct tl_event done;
    int n_done;
    char error[512];
};

static void on_event(void *user, const struct tl_event *ev)
{
    struct run *r = user;
    if (ev->type == TL_EVENT_TOKEN)
        r->tokens[r->n++] = ev->token;
    else {
        r->done = *ev, r->n_done++;
        if (ev->error) snprintf(r->error, sizeof(r->error), "%s", ev->error);
    }
}

static struct tl_engine_config config(void)
{
    (void)gpu_test_buffer;
    gpu_test_device(); // skips without a device
    struct tl_engine_config c;
    tl_engine_config_default(&c);
    c.max_seq_len = 512;
    c.kv_blocks = 512;
    c.device = gpu_test_spec();
    return c;
}

static void submit_ref(tl_engine *e, struct run *r, int32_t priority)
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
}

static void assert_reference(const struct run *r)
{
    assert_int_equal(r->n_done, 1);
    assert_int_equal(r->n, n_ref - 5);
    for (int i = 0; i < r->n; i++)
        if (r->tokens[i] != ref_ids[5 + i])
            fail_msg("token %d: %d, reference %d", i, r->tokens[i], ref_ids[5 + i]);
}

static uint64_t rng = 0x243F6A8885A308D3ull;

static void submit_random(tl_engine *e, struct run *r, int32_t priority, int max_prompt)
{
    static const char *words[] = {"the",  "dog",  "Lily", "ran", "happy", "big", "tree", "said",
                                  "Once", "ball", "sun",  "mom", "play",  "a",   "and",  "."};
    char text[1024] = "";
    int n_words = 1 + (int)harness_rnd(&rng, (uint32_t)max_prompt);
    for (int i = 0; i < n_words; i++) {
        strcat(text, i ? " " : "");
        strcat(text, words[harness_rnd(&rng, 16)]);
    }
    struct tl_request q;
    tl_request_default(&q);
    q.prompt = text;
    q.sampling.temperature = harness_rnd(&rng, 3) ? 0.8f : 0.0f;
    q.sampling.seed = harness_rnd(&rng, 1 << 20);
    q.max_tokens = 1 + (int32_t)harness_rnd(&rng, 60);
    q.priority = priority;
    q.on_event = on_event;
    q.user = r;
    uint64_t id;
    if (tl_engine_submit(e, &q, &id)) fail_msg("submit: %s", tl_last_error());
}

static void test_reference_with_prefix_hit(void **state)
{
    (void)state;
    struct tl_engine_config c = config();
    c.kv_block_size = 2; // "BOS Once upon a time": 2 full blocks cacheable
    tl_engine *e = harness_engine(model, &c);
    struct tl_engine_stats s0, s1;
    tl_engine_get_stats(e, &s0);
    struct run *r = calloc(2, sizeof(*r));
    submit_ref(e, &r[0], 0);
    harness_run_all(e);
    assert_reference(&r[0]);
    submit_ref(e, &r[1], 0);
    harness_run_all(e);
    assert_int_equal(r[1].done.n_cached_tokens, 4);
    assert_reference(&r[1]);
    // the step's shape in the engine's stats (/stats "device"): one submission and one wait per
    // step; after load only the steps' small tables cross
    tl_engine_get_stats(e, &s1);
    int64_t steps = s1.steps_total - s0.steps_total;
    assert_true(steps >= 2 * (n_ref - 5) - 1);
    assert_int_equal(s1.gpu_submits_total - s0.gpu_submits_total, steps);
    assert_int_equal(s1.gpu_waits_total - s0.gpu_waits_total, steps);
    const struct tl_hparams *hp = &model->hp;
    int64_t up = s1.gpu_upload_bytes_total - s0.gpu_upload_bytes_total;
    // per step: ids, positions, outputs and 2 table entries per token (<= 5 tokens), and one
    // block table (<= n_ref / 2 blocks); less than the weights in all
    assert_true(up > 0 && up <= steps * 4 * (5 * 5 + n_ref / 2 + 1));
    assert_true(up < s0.gpu_weight_bytes / 4);
    assert_int_equal(s1.gpu_download_bytes_total - s0.gpu_download_bytes_total,
                     steps * hp->n_vocab * 4);
    assert_true(s0.gpu_weight_bytes > (int64_t)hp->n_vocab * hp->n_embd * 4);
    assert_int_equal(s0.gpu_kv_bytes,
                     2 * hp->n_layer *
                         (int64_t)tl_gpu_kv_pool_bytes(TL_DTYPE_F16, c.kv_blocks, c.kv_block_size,
                                                       hp->n_head_kv, hp->head_dim));
    tl_engine_destroy(e);
    free(r);
}

static void test_reference_after_preemption(void **state)
{
    (void)state;
    // The reference needs 127 positions = 32 blocks of 4; the pool has 36 and better-priority
    // requests keep coming.
    struct tl_engine_config c = config();
    c.kv_block_size = 4;
    c.kv_blocks = 36;
    c.max_tokens_per_step = 32;
    c.max_batch_size = 6;
    tl_engine *e = harness_engine(model, &c);
    struct run *r = calloc(16, sizeof(*r));
    submit_ref(e, &r[0], 1);
    int64_t n = 1, steps = 0;
    int next = 1;
    while (n > 0 || next < 16) {
        if (next < 16 && steps % 4 == 0) submit_random(e, &r[next++], 0, 20);
        if (tl_engine_step(e, &n)) fail_msg("step: %s", tl_last_error());
        if (tl__engine_check(e)) fail_msg("%s", tl_last_error());
        steps++;
    }
    assert_true(r[0].done.n_preempted > 0);
    assert_reference(&r[0]);
    for (int i = 1; i < 16; i++)
        assert_int_equal(r[i].n_done, 1);
    tl_engine_destroy(e);
    free(r);
}

// A device lost mid-run (injected: the next submission fails as VK_ERROR_DEVICE_LOST would):
// the step's requests end with an error naming it, later requests fail the same way at their
// first step, nothing hangs and the block accounting stays whole.
static void test_device_lost(void **state)
{
    (void)state;
    struct tl_engine_config c = config();
    tl_engine *e = harness_engine(model, &c);
    struct run *r = calloc(3, sizeof(*r));
    submit_ref(e, &r[0], 0);
    int64_t n = 1;
    for (int i = 0; i < 3; i++) // prefill and two decodes on a healthy device
        if (tl_engine_step(e, &n)) fail_msg("step: %s", tl_last_error());
    assert_int_equal(r[0].n, 3);
    tl_gpu_device_inject_lost(tl_gpu_engine_backend_device(e->be.ctx));
    submit_ref(e, &r[1], 0);
    harness_run_all(e);
    submit_ref(e, &r[2], 0);
    harness_run_all(e);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(r[i].n_done, 1);
        assert_int_equal(r[i].done.finish, TL_FINISH_ERROR);
        if (!strstr(r[i].error, "device lost")) fail_msg("request %d: '%s'", i, r[i].error);
    }
    tl_engine_destroy(e);
    free(r);
}

TL_TEST_MAIN(cmocka_unit_test_setup_teardown(test_device_lost, setup, teardown),
             cmocka_unit_test_setup_teardown(test_reference_with_prefix_hit, setup, teardown),
             cmocka_unit_test_setup_teardown(test_reference_after_preemption, setup, teardown))
