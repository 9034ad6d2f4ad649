/*
 * One transformer layer (llama-style: RMSNorm, Q/K/V projections, RoPE, KV store, paged
 * attention, output projection, residual, RMSNorm, SwiGLU FFN, residual) recorded from the
 * device kernels as ONE recording, on the test device (lavapipe in CI; TAP skips without one).
 * No oracle is needed for what this checks, which are the device's invariants:
 * - the whole layer for a mixed batch (a prefill chunk, a decode, a new sequence) is one queue
 *   submission and one host wait;
 * - batch invariance through the composition: every token's output is bit-identical to running
 *   the tokens one at a time, and to the same batch in another order (docs/ARCHITECTURE.md's
 *   determinism contract, per device);
 * - the one-recording layer equals the same kernels run one submission each (barriers between
 *   dependent dispatches hold on this device).
 * The kernels' agreement with the CPU is test_gpu_ops / test_gpu_attention's job.
 */
#define TL_TEST_RNG_SEED 0x3C6EF372FE94F82Bull
#include "gpu_test.h"

#include "gpu/gpu_ops.h"

enum {
    DIM = 128,
    HID = 1152, // 36 Q8_0 blocks: some lanes of the down projection sum two
    N_HEAD = 4,
    N_KVH = 2,
    HD = 32,
    KVD = N_KVH * HD,
    BS = 8,
    N_BLOCKS = 16,
    N_TABLE = 64,
    N_TOK = 7
};

// The batch: 4 prefill tokens of sequence 0 at 10..13 (history 0..9), a decode of sequence 1 at
// 20 (history 0..19), and 2 tokens of a new sequence 2 at 0..1.
static const int tok_seq[N_TOK] = {0, 0, 0, 0, 1, 2, 2};
static const int tok_pos[N_TOK] = {10, 11, 12, 13, 20, 0, 1};
static const int32_t tables[3][4] = {{5, 1}, {9, 2, 14}, {7}};
static const int history[3] = {10, 20, 0};

struct layer {
    tl_gpu_device *d;
    tl_gpu_buffer *wq, *wk, *wv, *wo, *wg, *wu, *wd, *n1, *n2, *rope;
    struct tl_gpu_kv kv;
    // activations for up to N_TOK tokens
    tl_gpu_buffer *x, *xn, *q, *k, *v, *att, *o, *g, *u, *pos, *meta;
};

static tl_gpu_buffer *weight(tl_gpu_device *d, int64_t n_in, int64_t n_out)
{
    size_t bytes = tl_gpu_matmul_weight_bytes(TL_DTYPE_Q8_0, n_in, n_out);
    void *b = calloc(1, bytes);
    float *row = malloc(n_in * 4);
    for (int64_t o = 0; o < n_out; o++) {
        for (int64_t i = 0; i < n_in; i++)
            row[i] = tl_test_rnd_f() * 0.2f;
        assert_true(tl_quantize_row(TL_DTYPE_Q8_0, row, (char *)b + o * (n_in / 32 * 34), n_in));
    }
    tl_gpu_buffer *g = gpu_test_buffer(d, b, bytes);
    free(b), free(row);
    return g;
}

static void layer_init(struct layer *L, tl_gpu_device *d)
{
    L->d = d;
    L->wq = weight(d, DIM, DIM), L->wk = weight(d, DIM, KVD), L->wv = weight(d, DIM, KVD);
    L->wo = weight(d, DIM, DIM), L->wg = weight(d, DIM, HID), L->wu = weight(d, DIM, HID);
    L->wd = weight(d, HID, DIM);
    float nw[DIM];
    for (int i = 0; i < DIM; i++)
        nw[i] = 1.f + 0.1f * tl_test_rnd_f();
    L->n1 = gpu_test_buffer(d, nw, sizeof(nw));
    for (int i = 0; i < DIM; i++)
        nw[i] = 1.f + 0.1f * tl_test_rnd_f();
    L->n2 = gpu_test_buffer(d, nw, sizeof(nw));
    static float table[N_TABLE * HD];
    tl_gpu_rope_table_fill(table, N_TABLE, HD, 10000.f, 1.f);
    L->rope = gpu_test_buffer(d, table, sizeof(table));
    size_t pool = tl_gpu_kv_pool_bytes(TL_DTYPE_F16, N_BLOCKS, BS, N_KVH, HD);
    L->kv = (struct tl_gpu_kv){.type = TL_DTYPE_F16,
                               .block_size = BS,
                               .n_kv_head = N_KVH,
                               .head_dim = HD,
                               .n_blocks = N_BLOCKS};
    L->kv.k = gpu_test_buffer(d, NULL, pool), L->kv.v = gpu_test_buffer(d, NULL, pool);
    L->x = gpu_test_buffer(d, NULL, N_TOK * DIM * 4),
    L->xn = gpu_test_buffer(d, NULL, N_TOK * DIM * 4);
    L->q = gpu_test_buffer(d, NULL, N_TOK * DIM * 4),
    L->att = gpu_test_buffer(d, NULL, N_TOK * DIM * 4);
    L->o = gpu_test_buffer(d, NULL, N_TOK * DIM * 4);
    L->k = gpu_test_buffer(d, NULL, N_TOK * KVD * 4),
    L->v = gpu_test_buffer(d, NULL, N_TOK * KVD * 4);
    L->g = gpu_test_buffer(d, NULL, N_TOK * HID * 4),
    L->u = gpu_test_buffer(d, NULL, N_TOK * HID * 4);
    L->pos = gpu_test_buffer(d, NULL, N_TOK * 4), L->meta = gpu_test_buffer(d, NULL, 4096);
}

static void layer_free(struct layer *L)
{
    tl_gpu_buffer *all[] = {L->wq, L->wk,   L->wv,   L->wo,   L->wg, L->wu,  L->wd,  L->n1,
                            L->n2, L->rope, L->kv.k, L->kv.v, L->x,  L->xn,  L->q,   L->k,
                            L->v,  L->att,  L->o,    L->g,    L->u,  L->pos, L->meta};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        tl_gpu_buffer_destroy(all[i]);
}

// The K/V history of every sequence (positions before the batch), stored from random rows that
// are drawn once, so every call restores the same pool contents.
static void store_history(struct layer *L)
{
    static float k[3][20 * KVD], v[3][20 * KVD];
    static int drawn;
    if (!drawn) {
        drawn = 1;
        for (int s = 0; s < 3; s++)
            for (int i = 0; i < history[s] * KVD; i++)
                k[s][i] = tl_test_rnd_f(), v[s][i] = tl_test_rnd_f();
    }
    for (int s = 0; s < 3; s++) {
        if (!history[s]) continue;
        int32_t meta[2 * 20 + 4];
        for (int p = 0; p < history[s]; p++)
            meta[2 * p] = p, meta[2 * p + 1] = 2 * history[s];
        memcpy(meta + 2 * history[s], tables[s], sizeof(tables[s]));
        tl_gpu_buffer *bk = gpu_test_buffer(L->d, k[s], history[s] * KVD * 4);
        tl_gpu_buffer *bv = gpu_test_buffer(L->d, v[s], history[s] * KVD * 4);
        tl_gpu_rec *r;
        assert_int_equal(tl_gpu_rec_create(L->d, &r), TL_OK);
        assert_int_equal(tl_gpu_rec_upload(r, L->meta, 0, meta, sizeof(meta)), TL_OK);
        assert_int_equal(
            tl_gpu_kv_store(r, &L->kv, bk, bv, history[s], L->meta, 2 * history[s] + 4), TL_OK);
        if (tl_gpu_rec_run(r)) fail_msg("history: %s", tl_last_error());
        tl_gpu_rec_destroy(r);
        tl_gpu_buffer_destroy(bk), tl_gpu_buffer_destroy(bv);
    }
}

// Records the layer for tokens idx[0..n) of the batch (their input rows x_in) into r, or runs
// every kernel as its own submission when `each` is set. Writes the output rows to out.
static void run_layer(struct layer *L, const int *idx, int n, const float *x_in, float *out,
                      bool each)
{
    int32_t pos[N_TOK], meta[2 * N_TOK + N_TOK * 4];
    int64_t n_meta = 2 * n;
    static float xs[N_TOK * DIM];
    for (int t = 0; t < n; t++) {
        int s = tok_seq[idx[t]];
        pos[t] = tok_pos[idx[t]];
        meta[2 * t] = pos[t], meta[2 * t + 1] = (int32_t)n_meta;
        for (int b = 0; b <= pos[t] / BS; b++)
            meta[n_meta++] = tables[s][b];
        memcpy(xs + t * DIM, x_in + idx[t] * DIM, DIM * 4);
    }
    tl_gpu_rec *r;
    assert_int_equal(tl_gpu_rec_create(L->d, &r), TL_OK);
#define STEP(call)                                                                                 \
    do {                                                                                           \
        if ((call) != TL_OK) fail_msg("%s: %s", #call, tl_last_error());                           \
        if (each && tl_gpu_rec_run(r)) fail_msg("run: %s", tl_last_error());                       \
    } while (0)
    STEP(tl_gpu_rec_upload(r, L->x, 0, xs, n * DIM * 4));
    STEP(tl_gpu_rec_upload(r, L->pos, 0, pos, n * 4));
    STEP(tl_gpu_rec_upload(r, L->meta, 0, meta, n_meta * 4));
    STEP(tl_gpu_rmsnorm(r, L->x, L->n1, L->xn, DIM, n, 1e-5f));
    STEP(tl_gpu_matmul(r, TL_DTYPE_Q8_0, L->wq, DIM, DIM, L->xn, n, L->q));
    STEP(tl_gpu_matmul(r, TL_DTYPE_Q8_0, L->wk, DIM, KVD, L->xn, n, L->k));
    STEP(tl_gpu_matmul(r, TL_DTYPE_Q8_0, L->wv, DIM, KVD, L->xn, n, L->v));
    STEP(tl_gpu_rope(r, L->q, n, N_HEAD, HD, TL_ROPE_NEOX, L->pos, L->rope, N_TABLE));
    STEP(tl_gpu_rope(r, L->k, n, N_KVH, HD, TL_ROPE_NEOX, L->pos, L->rope, N_TABLE));
    STEP(tl_gpu_kv_store(r, &L->kv, L->k, L->v, n, L->meta, n_meta));
    STEP(tl_gpu_attention(r, &L->kv, L->q, n, N_HEAD, 0.17677669f, L->meta, n_meta, L->att));
    STEP(tl_gpu_matmul(r, TL_DTYPE_Q8_0, L->wo, DIM, DIM, L->att, n, L->o));
    STEP(tl_gpu_eltwise(r, TL_GPU_ADD, L->x, L->o, L->x, n * DIM));
    STEP(tl_gpu_rmsnorm(r, L->x, L->n2, L->xn, DIM, n, 1e-5f));
    STEP(tl_gpu_matmul(r, TL_DTYPE_Q8_0, L->wg, DIM, HID, L->xn, n, L->g));
    STEP(tl_gpu_matmul(r, TL_DTYPE_Q8_0, L->wu, DIM, HID, L->xn, n, L->u));
    STEP(tl_gpu_eltwise(r, TL_GPU_SWIGLU, L->g, L->u, L->g, n * HID));
    STEP(tl_gpu_matmul(r, TL_DTYPE_Q8_0, L->wd, HID, DIM, L->g, n, L->o));
    STEP(tl_gpu_eltwise(r, TL_GPU_ADD, L->x, L->o, L->x, n * DIM));
    STEP(tl_gpu_rec_download(r, L->x, 0, xs, n * DIM * 4));
#undef STEP
    if (!each && tl_gpu_rec_run(r)) fail_msg("run: %s", tl_last_error());
    for (int t = 0; t < n; t++)
        memcpy(out + idx[t] * DIM, xs + t * DIM, DIM * 4);
    tl_gpu_rec_destroy(r);
}

static void test_layer_batch_invariance(void **state)
{
    (void)state;
    tl_gpu_device *d = gpu_test_device();
    struct layer L;
    layer_init(&L, d);
    static float x[N_TOK * DIM], batch[N_TOK * DIM], got[N_TOK * DIM];
    for (int i = 0; i < N_TOK * DIM; i++)
        x[i] = tl_test_rnd_f();

    // the batch, in one recording: one submission, one wait
    store_history(&L);
    static const int in_order[N_TOK] = {0, 1, 2, 3, 4, 5, 6};
    struct tl_gpu_stats s0, s1;
    tl_gpu_device_stats(d, &s0);
    run_layer(&L, in_order, N_TOK, x, batch, false);
    tl_gpu_device_stats(d, &s1);
    assert_int_equal(s1.n_submits - s0.n_submits, 1);
    assert_int_equal(s1.n_waits - s0.n_waits, 1);
    assert_int_equal(s1.n_dispatches - s0.n_dispatches, 17);
    for (int i = 0; i < N_TOK * DIM; i++)
        if (!(batch[i] == batch[i])) fail_msg("NaN at %d", i);

    // each token alone, in position order (the KV history restored first)
    store_history(&L);
    for (int t = 0; t < N_TOK; t++)
        run_layer(&L, &t, 1, x, got, false);
    for (int t = 0; t < N_TOK; t++)
        if (memcmp(got + t * DIM, batch + t * DIM, DIM * 4))
            fail_msg("token %d (seq %d pos %d) alone differs from the batch", t, tok_seq[t],
                     tok_pos[t]);

    // the same batch in another order (a sequence's tokens keep their relative order)
    store_history(&L);
    static const int shuffled[N_TOK] = {5, 4, 0, 6, 1, 2, 3};
    run_layer(&L, shuffled, N_TOK, x, got, false);
    assert_memory_equal(got, batch, sizeof(batch));

    // every kernel its own submission: the same bits
    store_history(&L);
    tl_gpu_device_stats(d, &s0);
    run_layer(&L, in_order, N_TOK, x, got, true);
    tl_gpu_device_stats(d, &s1);
    assert_int_equal(s1.n_submits - s0.n_submits, 20);
    assert_memory_equal(got, batch, sizeof(batch));
    layer_free(&L);
}

TL_TEST_MAIN(cmocka_unit_test(test_layer_batch_invariance))
