/*
 * The device's paged KV store and attention (src/gpu/shaders/kv_store.comp, attention.comp)
 * against the CPU's tl_kv_store / tl_attention and a double-precision oracle, on the test device
 * (lavapipe in CI; TAP skips without a device). Three sequences with shuffled block tables
 * (block size 16) of 100, 1 and 150 positions (150: three chunks of 64 in the device's online
 * softmax), grouped-query heads (4 query heads over 2 KV heads), F32, F16 and Q8_0 pools.
 *
 * - KV store: the device's pools are byte-identical to the CPU's (F16: round to nearest even,
 *   incl. overflow to inf, subnormals, ties, -0 and NaN; Q8_0: ties of x/d rounded away from
 *   zero, a zero block, tiny and large blocks), whatever the device's own conversions.
 * - Attention, against the exact softmax(q.K * scale).V in double over the stored K/V (decoded
 *   exactly): with u = 2^-24, E = the largest score error (scale * gamma_hd * sum|q k|, plus u|s|
 *   for the scale), X = the widest max - score gap, C = the chunks of 64, n = the context, the
 *   error of output d is at most (sum_j p_j |v_jd| / sum_j p_j) times
 *     2E + X (u + 2^-22) + 3 * 2^-23            (each p_j: the scores, the subtraction, exp's
 *                                                 3 + 2|x| ULP in Vulkan's precision table)
 *   + (3C + 2X) 2^-23 + C u                     (rescaling by exp(m_old - m_new), C times)
 *   + gamma_(n+C) + gamma_(6+2C) + 2.5 * 2^-23  (the sums of p v and of p, the division)
 *   and 10% for second-order terms. Against tl_attention the CPU's own error, of the same form
 *   (glibc's expf is within 1 ULP; the SIMD exps are held to it by test_kernels), is added: 2x.
 * - Batch invariance: each query token alone gives the bits it had in the batch of 7.
 */
#define TL_TEST_RNG_SEED 0xBB67AE8584CAA73Bull
#include "gpu_test.h"

#include "core/alloc.h"
#include "gpu/gpu_ops.h"
#include "kernels/kernels.h"

#include <math.h>

enum { BS = 16, N_KVH = 2, N_HEAD = 4, HD = 64, N_BLOCKS = 24, ROW = N_KVH * HD, N_SEQ = 3 };
static const int seq_len[N_SEQ] = {100, 1, 150};
static const double U = 1.0 / 16777216.0;

struct world {
    int32_t tables[N_SEQ][N_BLOCKS]; // block ids, a shuffled partition of 0..N_BLOCKS-1
    float *k[N_SEQ], *v[N_SEQ];      // (len, ROW) per sequence
};

static void world_init(struct world *w)
{
    int32_t perm[N_BLOCKS];
    for (int i = 0; i < N_BLOCKS; i++)
        perm[i] = i;
    for (int i = N_BLOCKS - 1; i > 0; i--) {
        int j = (int)(tl_test_rnd_u32() % (uint32_t)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    int used = 0;
    for (int s = 0; s < N_SEQ; s++) {
        int nb = (seq_len[s] + BS - 1) / BS;
        for (int b = 0; b < nb; b++)
            w->tables[s][b] = perm[used++];
        assert_true(used <= N_BLOCKS);
        w->k[s] = malloc((size_t)seq_len[s] * ROW * 4);
        w->v[s] = malloc((size_t)seq_len[s] * ROW * 4);
        for (int i = 0; i < seq_len[s] * ROW; i++) {
            w->k[s][i] = tl_test_rnd_f() * 2.f;
            w->v[s][i] = tl_test_rnd_f();
        }
    }
}

static void world_free(struct world *w)
{
    for (int s = 0; s < N_SEQ; s++)
        free(w->k[s]), free(w->v[s]);
}

// meta for tokens (seq[i], pos[i]): {pos, table offset} pairs, then one table per token.
static int64_t build_meta(const struct world *w, const int *seq, const int *pos, int n_tok,
                          int32_t *meta)
{
    int64_t n = 2 * n_tok;
    for (int t = 0; t < n_tok; t++) {
        meta[2 * t] = pos[t];
        meta[2 * t + 1] = (int32_t)n;
        int nb = pos[t] / BS + 1;
        for (int b = 0; b < nb; b++)
            meta[n++] = w->tables[seq[t]][b];
    }
    return n;
}

// Stores every position of every sequence on the CPU (kv) and on the device (dk) in one batch.
static void store_all(tl_gpu_device *d, const struct world *w, struct tl_kv_layer *kv,
                      struct tl_gpu_kv *dk)
{
    int n_tok = 0;
    for (int s = 0; s < N_SEQ; s++)
        n_tok += seq_len[s];
    int *seq = malloc(n_tok * sizeof(int)), *pos = malloc(n_tok * sizeof(int));
    float *kr = malloc((size_t)n_tok * ROW * 4), *vr = malloc((size_t)n_tok * ROW * 4);
    int t = 0;
    for (int s = 0; s < N_SEQ; s++)
        for (int p = 0; p < seq_len[s]; p++, t++) {
            seq[t] = s, pos[t] = p;
            memcpy(kr + (size_t)t * ROW, w->k[s] + (size_t)p * ROW, ROW * 4);
            memcpy(vr + (size_t)t * ROW, w->v[s] + (size_t)p * ROW, ROW * 4);
            tl_kv_store(kv, w->tables[s], p, w->k[s] + (size_t)p * ROW, w->v[s] + (size_t)p * ROW);
        }
    int32_t *meta = malloc((size_t)(2 * n_tok + n_tok * 16) * 4);
    int64_t n_meta = build_meta(w, seq, pos, n_tok, meta);
    tl_gpu_buffer *bm = gpu_test_buffer(d, meta, n_meta * 4);
    tl_gpu_buffer *bk = gpu_test_buffer(d, kr, (size_t)n_tok * ROW * 4);
    tl_gpu_buffer *bv = gpu_test_buffer(d, vr, (size_t)n_tok * ROW * 4);
    tl_gpu_rec *r;
    assert_int_equal(tl_gpu_rec_create(d, &r), TL_OK);
    assert_int_equal(tl_gpu_kv_store(r, dk, bk, bv, n_tok, bm, n_meta), TL_OK);
    if (tl_gpu_rec_run(r)) fail_msg("run: %s", tl_last_error());
    tl_gpu_rec_destroy(r);
    tl_gpu_buffer_destroy(bm), tl_gpu_buffer_destroy(bk), tl_gpu_buffer_destroy(bv);
    free(seq), free(pos), free(kr), free(vr), free(meta);
}

static void pools_create(tl_gpu_device *d, enum tl_dtype type, struct tl_kv_layer *kv,
                         struct tl_gpu_kv *dk)
{
    size_t bytes = tl_gpu_kv_pool_bytes(type, N_BLOCKS, BS, N_KVH, HD);
    assert_true(bytes > 0);
    *kv = (struct tl_kv_layer){.type = type, .block_size = BS, .n_kv_head = N_KVH, .head_dim = HD};
    kv->k = calloc(1, bytes), kv->v = calloc(1, bytes);
    static const unsigned char zero[4096];
    *dk = (struct tl_gpu_kv){
        .type = type, .block_size = BS, .n_kv_head = N_KVH, .head_dim = HD, .n_blocks = N_BLOCKS};
    dk->k = gpu_test_buffer(d, NULL, bytes), dk->v = gpu_test_buffer(d, NULL, bytes);
    for (size_t o = 0; o < bytes; o += sizeof(zero)) { // same starting bytes as the CPU's
        size_t n = bytes - o < sizeof(zero) ? bytes - o : sizeof(zero);
        assert_int_equal(tl_gpu_buffer_write(dk->k, o, zero, n), TL_OK);
        assert_int_equal(tl_gpu_buffer_write(dk->v, o, zero, n), TL_OK);
    }
}

static void pools_free(struct tl_kv_layer *kv, struct tl_gpu_kv *dk)
{
    free(kv->k), free(kv->v);
    tl_gpu_buffer_destroy(dk->k), tl_gpu_buffer_destroy(dk->v);
}

static void assert_pools_equal(const struct tl_kv_layer *kv, const struct tl_gpu_kv *dk)
{
    size_t bytes = tl_gpu_kv_pool_bytes(kv->type, N_BLOCKS, BS, N_KVH, HD);
    unsigned char *got = malloc(bytes);
    for (int which = 0; which < 2; which++) {
        assert_int_equal(tl_gpu_buffer_read(which ? dk->v : dk->k, 0, got, bytes), TL_OK);
        const unsigned char *want = which ? kv->v : kv->k;
        for (size_t i = 0; i < bytes; i++)
            if (got[i] != want[i])
                fail_msg("%s %s pool byte %zu: device %02x, CPU %02x", tl_dtype_name(kv->type),
                         which ? "V" : "K", i, got[i], want[i]);
    }
    free(got);
}

// The KV store, with F16's rounding edge cases in the first K row of sequence 0.
static void test_kv_store_bytes(void **state)
{
    (void)state;
    tl_gpu_device *d = gpu_test_device();
    static const uint32_t special[] = {
        0x477FF000u,
        /* 65520: ties to inf */ 0x477FEFFFu, /* just below: 65504 */
        0x7F800000u,
        0xFF800000u,
        0x7FC00000u, /* inf, -inf, NaN */
        0x80000000u,
        /* -0 */ 0x33000000u,
        /* 2^-25: ties to 0 */ 0x33000001u, /* to 2^-24 */
        0x387FC000u,
        /* subnormal tie */ 0x38800000u, /* 2^-14, smallest normal */
        0x3F801000u,
        /* 1 + 2^-11: a tie to even (1) */ 0x3F803000u, /* a tie up */
        0x4B800000u,
        /* 2^24: overflow */ 0x00000001u /* f32 subnormal */};
    // Q8_0 (finite inputs): rounding ties of x / d (d = 1 here: amax 127), a zero block, and
    // blocks of tiny and large values (d = amax / 127 and 1 / d must be correctly rounded)
    static const float q8_ties[] = {127.f, 2.5f, -2.5f, 0.5f, -0.5f, 126.5f, -126.5f, 1.5f};
    for (int ti = 0; ti < 3; ti++) {
        enum tl_dtype type = ti == 0 ? TL_DTYPE_F32 : ti == 1 ? TL_DTYPE_F16 : TL_DTYPE_Q8_0;
        struct world w;
        world_init(&w);
        if (type != TL_DTYPE_Q8_0) {
            for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); i++)
                memcpy(&w.k[0][i], &special[i], 4);
        } else {
            for (int i = 0; i < 32; i++)
                w.k[0][i] = i < 8 ? q8_ties[i] : tl_test_rnd_f();
            for (int i = 32; i < 64; i++)
                w.k[0][i] = 0.f;
            for (int i = 64; i < 96; i++)
                w.k[0][i] = tl_test_rnd_f() * 1e-3f;
            for (int i = 96; i < 128; i++)
                w.k[0][i] = tl_test_rnd_f() * 1e3f;
        }
        struct tl_kv_layer kv;
        struct tl_gpu_kv dk;
        pools_create(d, type, &kv, &dk);
        store_all(d, &w, &kv, &dk);
        assert_pools_equal(&kv, &dk);
        pools_free(&kv, &dk);
        world_free(&w);
    }
}

// Q8_0 rows of an odd number of blocks (3 x 34 bytes) start on 2-byte boundaries, so
// neighbouring positions share a word: every position of 40 stored in one batch (in a shuffled
// order) must still give the CPU's bytes, block and word boundaries included.
static void test_kv_store_q8_0_shared_words(void **state)
{
    (void)state;
    tl_gpu_device *d = gpu_test_device();
    enum { NKV = 3, HD3 = 32, ROW3 = NKV * HD3, NB = 4, N_POS = 40 };
    int32_t table[NB] = {2, 0, 3, 1};
    size_t bytes = tl_gpu_kv_pool_bytes(TL_DTYPE_Q8_0, NB, BS, NKV, HD3);
    assert_true(bytes >= (size_t)NB * BS * ROW3 / 32 * 34);
    struct tl_kv_layer kv = {
        .type = TL_DTYPE_Q8_0, .block_size = BS, .n_kv_head = NKV, .head_dim = HD3};
    kv.k = calloc(1, bytes), kv.v = calloc(1, bytes);
    static float k[N_POS * ROW3], v[N_POS * ROW3];
    for (int i = 0; i < N_POS * ROW3; i++)
        k[i] = tl_test_rnd_f() * 5.f, v[i] = tl_test_rnd_f();
    int32_t meta[2 * N_POS + NB];
    int order[N_POS];
    for (int i = 0; i < N_POS; i++)
        order[i] = (i * 17) % N_POS; // a permutation: 17 is coprime to 40
    static float kr[N_POS * ROW3], vr[N_POS * ROW3];
    for (int t = 0; t < N_POS; t++) {
        int p = order[t];
        meta[2 * t] = p, meta[2 * t + 1] = 2 * N_POS;
        memcpy(kr + t * ROW3, k + p * ROW3, ROW3 * 4);
        memcpy(vr + t * ROW3, v + p * ROW3, ROW3 * 4);
        tl_kv_store(&kv, table, p, k + p * ROW3, v + p * ROW3);
    }
    memcpy(meta + 2 * N_POS, table, sizeof(table));
    unsigned char *zero = calloc(1, bytes), *got = malloc(bytes);
    struct tl_gpu_kv dk = {
        .type = TL_DTYPE_Q8_0, .block_size = BS, .n_kv_head = NKV, .head_dim = HD3, .n_blocks = NB};
    dk.k = gpu_test_buffer(d, zero, bytes), dk.v = gpu_test_buffer(d, zero, bytes);
    tl_gpu_buffer *bk = gpu_test_buffer(d, kr, sizeof(kr)),
                  *bv = gpu_test_buffer(d, vr, sizeof(vr));
    tl_gpu_buffer *bm = gpu_test_buffer(d, meta, sizeof(meta));
    tl_gpu_rec *r;
    assert_int_equal(tl_gpu_rec_create(d, &r), TL_OK);
    assert_int_equal(tl_gpu_kv_store(r, &dk, bk, bv, N_POS, bm, 2 * N_POS + NB), TL_OK);
    assert_int_equal(tl_gpu_rec_download(r, dk.k, 0, got, bytes), TL_OK);
    if (tl_gpu_rec_run(r)) fail_msg("run: %s", tl_last_error());
    for (size_t i = 0; i < bytes; i++)
        if (got[i] != ((unsigned char *)kv.k)[i])
            fail_msg("Q8_0 K pool byte %zu: device %02x, CPU %02x", i, got[i],
                     ((unsigned char *)kv.k)[i]);
    tl_gpu_rec_destroy(r);
    tl_gpu_buffer_destroy(dk.k), tl_gpu_buffer_destroy(dk.v), tl_gpu_buffer_destroy(bk);
    tl_gpu_buffer_destroy(bv), tl_gpu_buffer_destroy(bm);
    free(kv.k), free(kv.v), free(zero), free(got);
}

// Exact attention of one (token, head) in double over the stored K/V, and its error bound.
static void oracle(const struct tl_kv_layer *kv, const int32_t *table, int n_ctx, int h,
                   const float *q, float scale, double *out, double *tol)
{
    int kvh = h / (N_HEAD / N_KVH);
    // byte offset of element idx (a row of a head starts a Q8_0 block: HD is a multiple of 32)
#define KV_OFF(idx)                                                                                \
    (kv->type == TL_DTYPE_Q8_0 ? (idx) / 32 * 34 : (idx) * (kv->type == TL_DTYPE_F16 ? 2 : 4))
    double *s = malloc(n_ctx * sizeof(double)), m = -INFINITY, maxE = 0;
    float krow[HD], vrow[HD];
    for (int j = 0; j < n_ctx; j++) {
        size_t idx = ((size_t)(table[j / BS] * BS + j % BS) * N_KVH + kvh) * HD;
        assert_true(tl_dequantize_row(kv->type, (const char *)kv->k + KV_OFF(idx), krow, HD));
        double dot = 0, mag = 0;
        for (int i = 0; i < HD; i++) {
            dot += (double)q[i] * krow[i];
            mag += fabs((double)q[i] * krow[i]);
        }
        s[j] = dot * scale;
        double e = scale * (HD * U / (1 - HD * U)) * mag + U * fabs(s[j]);
        maxE = e > maxE ? e : maxE;
        m = s[j] > m ? s[j] : m;
    }
    double X = 0, P = 0, A[HD], acc[HD];
    for (int i = 0; i < HD; i++)
        A[i] = acc[i] = 0;
    for (int j = 0; j < n_ctx; j++) {
        size_t idx = ((size_t)(table[j / BS] * BS + j % BS) * N_KVH + kvh) * HD;
        assert_true(tl_dequantize_row(kv->type, (const char *)kv->v + KV_OFF(idx), vrow, HD));
        double p = exp(s[j] - m);
        X = m - s[j] > X ? m - s[j] : X;
        P += p;
        for (int i = 0; i < HD; i++) {
            acc[i] += p * vrow[i];
            A[i] += p * fabs((double)vrow[i]);
        }
    }
    double C = (n_ctx + 63) / 64, e23 = 2 * U;
    double g1 = (n_ctx + C) * U / (1 - (n_ctx + C) * U),
           g2 = (6 + 2 * C) * U / (1 - (6 + 2 * C) * U);
    double rel = 2 * maxE + X * (U + 2 * e23) + 3 * e23 + (3 * C + 2 * X) * e23 + C * U + g1 + g2 +
                 2.5 * e23;
    for (int i = 0; i < HD; i++) {
        out[i] = acc[i] / P;
        tol[i] = 1.1 * rel * A[i] / P + 1e-30;
    }
    free(s);
}

static void check_attention(tl_gpu_device *d, enum tl_dtype type)
{
    struct world w;
    world_init(&w);
    struct tl_kv_layer kv;
    struct tl_gpu_kv dk;
    pools_create(d, type, &kv, &dk);
    store_all(d, &w, &kv, &dk);
    enum { N_TOK = 7 };
    static const int seq[N_TOK] = {0, 1, 2, 2, 2, 0, 2}, pos[N_TOK] = {99, 0, 149, 63, 64, 5, 127};
    const float scale = 1.f / 8.f;
    float *q = malloc(N_TOK * N_HEAD * HD * 4), *out = malloc(N_TOK * N_HEAD * HD * 4);
    float *cpu = malloc(N_TOK * N_HEAD * HD * 4), *one = malloc(N_HEAD * HD * 4);
    for (int i = 0; i < N_TOK * N_HEAD * HD; i++)
        q[i] = tl_test_rnd_f() * 3.f;
    int32_t meta[2 * N_TOK + N_TOK * 16];
    int64_t n_meta = build_meta(&w, seq, pos, N_TOK, meta);
    tl_gpu_buffer *bq = gpu_test_buffer(d, q, N_TOK * N_HEAD * HD * 4);
    tl_gpu_buffer *bo = gpu_test_buffer(d, NULL, N_TOK * N_HEAD * HD * 4);
    tl_gpu_buffer *bm = gpu_test_buffer(d, meta, n_meta * 4);
    tl_gpu_rec *r;
    assert_int_equal(tl_gpu_rec_create(d, &r), TL_OK);
    assert_int_equal(tl_gpu_attention(r, &dk, bq, N_TOK, N_HEAD, scale, bm, n_meta, bo), TL_OK);
    assert_int_equal(tl_gpu_rec_download(r, bo, 0, out, N_TOK * N_HEAD * HD * 4), TL_OK);
    if (tl_gpu_rec_run(r)) fail_msg("run: %s", tl_last_error());

    struct tl_attn_query qs[N_TOK];
    for (int t = 0; t < N_TOK; t++)
        qs[t] = (struct tl_attn_query){.block_table = w.tables[seq[t]], .n_ctx = pos[t] + 1};
    void *work = tl_aligned_alloc(tl_attention_work_bytes(1, 150, HD));
    tl_attention(NULL, &kv, q, qs, N_TOK, N_HEAD, scale, cpu, work);
    tl_aligned_free(work);

    double exact[HD], tol[HD];
    for (int t = 0; t < N_TOK; t++)
        for (int h = 0; h < N_HEAD; h++) {
            size_t o = ((size_t)t * N_HEAD + h) * HD;
            oracle(&kv, w.tables[seq[t]], pos[t] + 1, h, q + o, scale, exact, tol);
            for (int i = 0; i < HD; i++) {
                if (!(fabs(out[o + i] - exact[i]) <= tol[i]))
                    fail_msg("%s tok %d head %d dim %d: %.9g vs exact %.9g (tol %g)",
                             tl_dtype_name(type), t, h, i, out[o + i], exact[i], tol[i]);
                if (!(fabs(out[o + i] - cpu[o + i]) <= 2 * tol[i]))
                    fail_msg("%s tok %d head %d dim %d: %.9g vs CPU %.9g (tol %g)",
                             tl_dtype_name(type), t, h, i, out[o + i], cpu[o + i], 2 * tol[i]);
            }
        }
    // batch invariance: each token alone
    for (int t = 0; t < N_TOK; t++) {
        int32_t m1[2 + 16];
        int64_t n1 = build_meta(&w, &seq[t], &pos[t], 1, m1);
        tl_gpu_buffer *bq1 = gpu_test_buffer(d, q + (size_t)t * N_HEAD * HD, N_HEAD * HD * 4);
        tl_gpu_buffer *bm1 = gpu_test_buffer(d, m1, n1 * 4);
        assert_int_equal(tl_gpu_attention(r, &dk, bq1, 1, N_HEAD, scale, bm1, n1, bq1), TL_OK);
        assert_int_equal(tl_gpu_rec_download(r, bq1, 0, one, N_HEAD * HD * 4), TL_OK);
        if (tl_gpu_rec_run(r)) fail_msg("run: %s", tl_last_error());
        if (memcmp(one, out + (size_t)t * N_HEAD * HD, N_HEAD * HD * 4))
            fail_msg("%s: token %d alone differs from its row in the batch of 7",
                     tl_dtype_name(type), t);
        tl_gpu_buffer_destroy(bq1), tl_gpu_buffer_destroy(bm1);
    }
    tl_gpu_rec_destroy(r);
    tl_gpu_buffer_destroy(bq), tl_gpu_buffer_destroy(bo), tl_gpu_buffer_destroy(bm);
    free(q), free(out), free(cpu), free(one);
    pools_free(&kv, &dk);
    world_free(&w);
}

static void test_attention_f32(void **state)
{
    (void)state;
    check_attention(gpu_test_device(), TL_DTYPE_F32);
}

static void test_attention_f16(void **state)
{
    (void)state;
    check_attention(gpu_test_device(), TL_DTYPE_F16);
}

static void test_attention_q8_0(void **state)
{
    (void)state;
    check_attention(gpu_test_device(), TL_DTYPE_Q8_0);
}

static void test_bad_shapes(void **state)
{
    (void)state;
    tl_gpu_device *d = gpu_test_device();
    tl_gpu_buffer *b = gpu_test_buffer(d, NULL, 1 << 16);
    struct tl_gpu_kv dk = {.type = TL_DTYPE_Q4_0,
                           .block_size = 16,
                           .n_kv_head = 1,
                           .head_dim = 32,
                           .n_blocks = 2,
                           .k = b,
                           .v = b};
    tl_gpu_rec *r;
    assert_int_equal(tl_gpu_rec_create(d, &r), TL_OK);
    assert_int_equal(tl_gpu_kv_store(r, &dk, b, b, 1, b, 2), TL_ERR_UNSUPPORTED);
    assert_int_equal(tl_gpu_rec_run(r), TL_ERR_UNSUPPORTED);
    dk.type = TL_DTYPE_F16, dk.head_dim = 33; // odd for F16
    assert_int_equal(tl_gpu_kv_store(r, &dk, b, b, 1, b, 2), TL_ERR_INVALID_ARG);
    assert_int_equal(tl_gpu_rec_run(r), TL_ERR_INVALID_ARG);
    dk.type = TL_DTYPE_Q8_0, dk.head_dim = 48; // not a multiple of 32
    assert_int_equal(tl_gpu_kv_store(r, &dk, b, b, 1, b, 2), TL_ERR_INVALID_ARG);
    assert_int_equal(tl_gpu_rec_run(r), TL_ERR_INVALID_ARG);
    dk.head_dim = 256, dk.n_kv_head = 32; // a Q8_0 row larger than kv_store's shared memory
    assert_int_equal(tl_gpu_kv_store(r, &dk, b, b, 1, b, 2), TL_ERR_INVALID_ARG);
    assert_int_equal(tl_gpu_rec_run(r), TL_ERR_INVALID_ARG);
    dk.type = TL_DTYPE_F16, dk.n_kv_head = 1;
    dk.head_dim = 512; // more than the shader's 256
    assert_int_equal(tl_gpu_attention(r, &dk, b, 1, 1, 1.f, b, 2, b), TL_ERR_INVALID_ARG);
    assert_int_equal(tl_gpu_rec_run(r), TL_ERR_INVALID_ARG);
    dk.head_dim = 32, dk.n_kv_head = 2;
    assert_int_equal(tl_gpu_attention(r, &dk, b, 1, 3, 1.f, b, 2, b), TL_ERR_INVALID_ARG);
    assert_non_null(strstr(tl_last_error(), "multiple"));
    assert_int_equal(tl_gpu_rec_run(r), TL_ERR_INVALID_ARG);
    assert_int_equal(tl_gpu_attention(r, &dk, b, 4, 2, 1.f, b, 7, b), TL_ERR_INVALID_ARG);
    assert_non_null(strstr(tl_last_error(), "meta has 7 entries for 4 tokens"));
    assert_int_equal(tl_gpu_rec_run(r), TL_ERR_INVALID_ARG);
    dk.n_blocks = 1 << 20; // a pool larger than its buffer
    assert_int_equal(tl_gpu_kv_store(r, &dk, b, b, 1, b, 2), TL_ERR_INVALID_ARG);
    assert_non_null(strstr(tl_last_error(), "K pool needs"));
    assert_int_equal(tl_gpu_rec_run(r), TL_ERR_INVALID_ARG);
    tl_gpu_rec_destroy(r);
    tl_gpu_buffer_destroy(b);
}

TL_TEST_MAIN(cmocka_unit_test(test_kv_store_bytes),
             cmocka_unit_test(test_kv_store_q8_0_shared_words),
             cmocka_unit_test(test_attention_f32), cmocka_unit_test(test_attention_f16),
             cmocka_unit_test(test_attention_q8_0), cmocka_unit_test(test_bad_shapes))
