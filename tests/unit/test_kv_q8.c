/*
 * The Q8_0 KV cache in the kernels: tl_kv_store writes exactly the bytes of
 * tl_quantize_row(TL_DTYPE_Q8_0) at the element addresses of kernels.h (scattered blocks, every
 * ISA, random and hard values: ties, NaN, inf, subnormals), and tl_attention over a Q8_0 cache
 * is within 4e-6 of the output's largest magnitude of an independent double-precision reference
 * over the dequantized values on every ISA; on scalar, AVX2 and AVX-512 with grouped heads (or
 * beyond head_dim 128) it also equals the same ISA's attention over an F32 cache holding those
 * values bit for bit (d * q is exact in f32), while AVX-512's attn_kv folds the block scale out of
 * its sums when every KV head has one query head; results do not depend on the batch or the
 * threads. Head sizes that are not a multiple of 32 are refused.
 */
#define TL_TEST_RNG_SEED 0x5DEECE66Dull
#include "tl_test.h"

#include "core/alloc.h"
#include "engine/kvcache.h"
#include "kernels/kernels.h"

#include <math.h>

// Random values with a per-32 block magnitude that varies over 2^-6 .. 2^2 (so scales differ
// between blocks), some all-zero blocks (d = 0) and the odd 8x outlier, as real K/V rows have.
static void fill_kv(float *x, int64_t n)
{
    for (int64_t b = 0; b < n; b += 32) {
        uint32_t kind = tl_test_rnd_u32() % 16;
        float mag = ldexpf(1.f, (int)(tl_test_rnd_u32() % 9) - 6);
        for (int64_t i = b; i < b + 32 && i < n; i++)
            x[i] = kind == 0 ? 0.f : tl_test_rnd_f() * mag;
        if (kind == 1) x[b + tl_test_rnd_u32() % 32] = 8.f * mag;
    }
}

static const char *const isas[] = {"scalar", "avx2", "avx512"};
enum { N_ISA = 3 };

// ---- store ------------------------------------------------------------------------------------

static void test_store_equals_quantize_row(void **state)
{
    (void)state;
    enum { BS = 5, KVH = 3, HD = 64, N_BLOCKS = 4, ROW = KVH * HD };
    const size_t row_bytes = (size_t)ROW / 32 * 34;
    const size_t pool_bytes = (size_t)N_BLOCKS * BS * row_bytes;
    assert_int_equal(tl_kv_row_bytes(TL_DTYPE_Q8_0, HD), HD / 32 * 34);
    unsigned char *kb = malloc(pool_bytes), *vb = malloc(pool_bytes);
    struct tl_kv_layer kv = {TL_DTYPE_Q8_0, BS, KVH, HD, kb, vb};
    const int32_t table[3] = {2, 0, 3}; // logical 0,1,2 -> physical 2,0,3
    for (int s = 0; s < N_ISA; s++) {
        if (!tl_kernels_force_isa(isas[s])) continue;
        memset(kb, 0xAB, pool_bytes);
        memset(vb, 0xCD, pool_bytes);
        for (int64_t pos = 0; pos < 3 * BS; pos++) {
            float k[ROW], v[ROW], back[ROW];
            fill_kv(k, ROW);
            fill_kv(v, ROW);
            tl_kv_store(&kv, table, pos, k, v);
            // physical slot (table[pos / BS], pos % BS): its row starts that many rows in
            size_t at = ((size_t)table[pos / BS] * BS + (size_t)(pos % BS)) * row_bytes;
            unsigned char want[ROW / 32 * 34];
            assert_true(tl_quantize_row(TL_DTYPE_Q8_0, k, want, ROW));
            if (memcmp(kb + at, want, row_bytes))
                fail_msg("%s: K of pos %lld", isas[s], (long long)pos);
            assert_true(tl_dequantize_row(TL_DTYPE_Q8_0, kb + at, back, ROW));
            // Q8_0's own error bound: half a step d/2, plus |q| <= 127 times the f16 rounding
            // of d (2^-11 relative): under 0.6 d, d = amax / 127 of the 32-block
            for (int b = 0; b < ROW; b += 32) {
                float amax = 0.f;
                for (int i = b; i < b + 32; i++)
                    amax = fmaxf(amax, fabsf(k[i]));
                for (int i = b; i < b + 32; i++)
                    TL_ASSERT_NEAR(back[i], k[i], 0.6 * amax / 127.0, i);
            }
            assert_true(tl_quantize_row(TL_DTYPE_Q8_0, v, want, ROW));
            if (memcmp(vb + at, want, row_bytes))
                fail_msg("%s: V of pos %lld", isas[s], (long long)pos);
        }
        // physical block 1 was never in the table: untouched
        for (size_t i = 0; i < BS * row_bytes; i++) {
            assert_int_equal(kb[1 * BS * row_bytes + i], 0xAB);
            assert_int_equal(vb[1 * BS * row_bytes + i], 0xCD);
        }
    }
    free(kb), free(vb);
}

// The vectorized stores must give tl_quantize_row's bytes for every input, not just tame ones:
// rounding ties (d = 1 when amax = 127, so x * id = x: every k + 0.5 and -(k + 0.5)), -0,
// subnormals, NaN, +-inf (d = inf, id = 0: inf * 0 = NaN -> 0), huge values, and random bit
// patterns (any float but a signaling NaN).
static void test_store_hard_values(void **state)
{
    (void)state;
    enum { HD = 32, KVH = 8, ROW = KVH * HD, ROUNDS = 400 };
    const size_t row_bytes = (size_t)ROW / 32 * 34;
    unsigned char kb[ROW / 32 * 34], vb[ROW / 32 * 34], want[ROW / 32 * 34];
    struct tl_kv_layer kv = {TL_DTYPE_Q8_0, 1, KVH, HD, kb, vb};
    const int32_t table[1] = {0};
    for (int s = 0; s < N_ISA; s++) {
        if (!tl_kernels_force_isa(isas[s])) continue;
        for (int r = 0; r < ROUNDS; r++) {
            float k[ROW], v[ROW];
            for (int i = 0; i < ROW; i++) {
                int blk = i / 32;
                if (r == 0) { // ties: blocks of amax 127 (d = 1 exactly in f32)
                    k[i] = (float)(i % 32 * 4 - 63) + (i % 2 ? 0.5f : -0.5f);
                    if (i % 32 == 0) k[i] = blk % 2 ? 127.f : -127.f;
                } else if (r % 2) {
                    uint32_t u = tl_test_rnd_u32();
                    // signaling NaNs quieted: arithmetic never makes them, and glibc's fmaxf
                    // (the reference's amax) returns NaN for them where a vector max does not
                    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffffu)) u |= 0x400000u;
                    memcpy(&k[i], &u, 4);
                } else {
                    const float sp[] = {0.f,   -0.f,   1e-40f, -1e-45f, NAN,  INFINITY, -INFINITY,
                                        3e38f, -3e38f, 0.5f,   -0.5f,   1.5f, 126.5f,   -126.5f};
                    uint32_t kind = tl_test_rnd_u32() % 4;
                    k[i] = kind == 0
                               ? sp[tl_test_rnd_u32() % (sizeof(sp) / sizeof(sp[0]))]
                               : tl_test_rnd_f() * ldexpf(1.f, (int)(tl_test_rnd_u32() % 40) - 20);
                }
                v[i] = r == 0 ? -k[i] : tl_test_rnd_f() * (float)(r % 7);
            }
            tl_kv_store(&kv, table, 0, k, v);
            assert_true(tl_quantize_row(TL_DTYPE_Q8_0, k, want, ROW));
            if (memcmp(kb, want, row_bytes)) fail_msg("%s: K of round %d", isas[s], r);
            assert_true(tl_quantize_row(TL_DTYPE_Q8_0, v, want, ROW));
            if (memcmp(vb, want, row_bytes)) fail_msg("%s: V of round %d", isas[s], r);
        }
    }
}

// ---- attention ----------------------------------------------------------------------------------

// A Q8_0 cache and an F32 cache with the same block tables, the F32 one holding the Q8_0
// cache's dequantized values; kf/vf are the logical (unpaged) dequantized rows.
struct fixture {
    struct tl_kv_layer q8, f32;
    int32_t *tables; // (n_seq, blocks_per_seq)
    int blocks_per_seq;
    float *kf, *vf; // (n_seq, ctx, kvh * hd)
};

static void fixture_make(struct fixture *f, int block_size, int n_kv, int hd, int n_seq, int ctx)
{
    f->blocks_per_seq = (ctx + block_size - 1) / block_size;
    int n_blocks = n_seq * f->blocks_per_seq + 3;
    size_t row = (size_t)n_kv * hd, slots = (size_t)n_blocks * block_size;
    f->q8 = (struct tl_kv_layer){TL_DTYPE_Q8_0,
                                 block_size,
                                 n_kv,
                                 hd,
                                 calloc(slots, row / 32 * 34),
                                 calloc(slots, row / 32 * 34)};
    f->f32 = (struct tl_kv_layer){
        TL_DTYPE_F32, block_size, n_kv, hd, calloc(slots, row * 4), calloc(slots, row * 4)};
    // physical blocks shuffled, so no table is contiguous
    int *perm = malloc(sizeof(int) * (size_t)n_blocks);
    for (int i = 0; i < n_blocks; i++)
        perm[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        int j = (int)(tl_test_rnd_u32() % (uint32_t)(i + 1)), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    f->tables = malloc(sizeof(int32_t) * (size_t)(n_seq * f->blocks_per_seq));
    for (int i = 0; i < n_seq * f->blocks_per_seq; i++)
        f->tables[i] = perm[i];
    free(perm);
    f->kf = malloc(sizeof(float) * (size_t)n_seq * ctx * row);
    f->vf = malloc(sizeof(float) * (size_t)n_seq * ctx * row);
    unsigned char *qk = malloc(row / 32 * 34), *qv = malloc(row / 32 * 34);
    for (int s = 0; s < n_seq; s++)
        for (int p = 0; p < ctx; p++) {
            const int32_t *table = f->tables + s * f->blocks_per_seq;
            float *k = f->kf + ((size_t)s * ctx + p) * row,
                  *v = f->vf + ((size_t)s * ctx + p) * row;
            fill_kv(k, (int64_t)row);
            fill_kv(v, (int64_t)row);
            tl_kv_store(&f->q8, table, p, k, v);
            // the expectation's K/V: the project's Q8_0 round trip of the row
            assert_true(tl_quantize_row(TL_DTYPE_Q8_0, k, qk, (int64_t)row));
            assert_true(tl_quantize_row(TL_DTYPE_Q8_0, v, qv, (int64_t)row));
            assert_true(tl_dequantize_row(TL_DTYPE_Q8_0, qk, k, (int64_t)row));
            assert_true(tl_dequantize_row(TL_DTYPE_Q8_0, qv, v, (int64_t)row));
            tl_kv_store(&f->f32, table, p, k, v);
        }
    free(qk), free(qv);
}

static void fixture_free(struct fixture *f)
{
    free(f->q8.k), free(f->q8.v), free(f->f32.k), free(f->f32.v);
    free(f->tables), free(f->kf), free(f->vf);
}

static void test_attention_every_isa(void **state)
{
    (void)state;
    enum { N_SEQ = 3, CTX = 70, MAX_HEAD = 16, MAX_HD = 160, MAX_TOK = CTX + 21 };
    // (query heads, KV heads): groups of 3 and 8, one KV head for all, no sharing (5/5)
    const int head_cfg[][2] = {{6, 2}, {16, 2}, {8, 1}, {5, 5}};
    // 160: more than the AVX-512 kernels keep in registers
    const int head_dims[] = {32, 64, 96, 128, 160};
    const int block_sizes[] = {16, 5};
    struct tl_pool *pool = tl_pool_create(3);
    static float q[MAX_TOK * MAX_HEAD * MAX_HD], out[MAX_TOK * MAX_HEAD * MAX_HD];
    static float out_f32[MAX_TOK * MAX_HEAD * MAX_HD], want[MAX_TOK * MAX_HEAD * MAX_HD];
    static float solo[MAX_HEAD * MAX_HD];
    for (int ci = 0; ci < 4; ci++)
        for (int hi = 0; hi < 5; hi++)
            for (int bi = 0; bi < 2; bi++) {
                const int N_HEAD = head_cfg[ci][0], N_KV = head_cfg[ci][1], hd = head_dims[hi];
                struct fixture f;
                fixture_make(&f, block_sizes[bi], N_KV, hd, N_SEQ, CTX);
                // batch 0: the sequences mixed at assorted positions (decode-like);
                // batch 1: prefill runs (a whole prompt, a middle part, a lone token)
                // without and with a sliding window of 7 (the window's first chunk is masked
                // from its start in attn_kv, in the folded Q8_0 path too)
                for (int batch = 0; batch < 2; batch++)
                for (int oi = 0; oi < 2; oi++) {
                    const struct tl_attn_opts opts = {.window = oi ? 7 : 0};
                    struct tl_attn_query qs[MAX_TOK];
                    int seq_of[MAX_TOK];
                    const int N_TOK = batch == 0 ? 9 : MAX_TOK;
                    for (int t = 0; t < N_TOK; t++) {
                        if (batch == 0) {
                            seq_of[t] = t % N_SEQ;
                            qs[t].n_ctx = t == 0   ? 1
                                          : t == 1 ? CTX
                                                   : 1 + (int64_t)(tl_test_rnd_u32() % CTX);
                        } else {
                            seq_of[t] = t < CTX ? 0 : t < CTX + 20 ? 1 : 2;
                            qs[t].n_ctx = t < CTX ? t + 1 : t < CTX + 20 ? t - CTX + 11 : CTX;
                        }
                        qs[t].block_table = f.tables + seq_of[t] * f.blocks_per_seq;
                    }
                    for (int i = 0; i < N_TOK * N_HEAD * hd; i++)
                        q[i] = tl_test_rnd_f() * 2.f;
                    const float scale = 1.f / sqrtf((float)hd);
                    // independent expectation in double over the dequantized logical K/V
                    for (int t = 0; t < N_TOK; t++)
                        for (int h = 0; h < N_HEAD; h++) {
                            const int kvh = h / (N_HEAD / N_KV);
                            const int64_t n = qs[t].n_ctx, row = (int64_t)N_KV * hd;
                            // keys q_pos - W < j <= q_pos (q_pos = n - 1)
                            const int64_t lo = opts.window && n > opts.window ? n - opts.window : 0;
                            const float *qh = q + ((size_t)t * N_HEAD + h) * hd;
                            double sc[CTX], mx = -INFINITY, sum = 0;
                            for (int64_t j = lo; j < n; j++) {
                                const float *k = f.kf + (seq_of[t] * CTX + j) * row + kvh * hd;
                                double d = 0;
                                for (int i = 0; i < hd; i++)
                                    d += (double)qh[i] * k[i];
                                sc[j] = d * scale;
                                mx = sc[j] > mx ? sc[j] : mx;
                            }
                            for (int64_t j = lo; j < n; j++)
                                sum += (sc[j] = exp(sc[j] - mx));
                            for (int i = 0; i < hd; i++) {
                                double o = 0;
                                for (int64_t j = lo; j < n; j++)
                                    o += sc[j] * f.vf[(seq_of[t] * CTX + j) * row + kvh * hd + i];
                                want[((size_t)t * N_HEAD + h) * hd + i] = (float)(o / sum);
                            }
                        }
                    void *work = tl_aligned_alloc(tl_attention_work_bytes(3, CTX, hd));
                    const int n_out = N_TOK * N_HEAD * hd;
                    for (int s = 0; s < N_ISA; s++) {
                        if (!tl_kernels_force_isa(isas[s])) continue;
                        tl_attention_opt(pool, &f.q8, q, qs, N_TOK, N_HEAD, scale, &opts, out,
                                         work);
                        tl_attention_opt(pool, &f.f32, q, qs, N_TOK, N_HEAD, scale, &opts,
                                         out_f32, work);
                        // scalar, AVX2 and AVX-512 with grouped heads widen int8 * d exactly and
                        // run the f32 arithmetic: bit for bit. AVX-512's attn_kv without grouping
                        // folds the block scale out of its sums ((q . k8) * d per block, (p * d) *
                        // v8), other roundings: it is held to the double reference below.
                        const bool folded =
                            !strcmp(isas[s], "avx512") && hd <= 128 && N_HEAD == N_KV;
                        if (!folded && memcmp(out, out_f32, sizeof(float) * (size_t)n_out))
                            fail_msg("%s hd %d bs %d heads %d/%d batch %d: q8 differs from f32 "
                                     "over the dequantized values",
                                     isas[s], hd, block_sizes[bi], N_HEAD, N_KV, batch);
                        // within 4e-6 of the output's largest magnitude (measured worst:
                        // scalar 1.7e-6, folded AVX-512 4.4e-7 against 3.6e-7 for its F32
                        // kernel; a folding mistake -- a scale applied twice or to the wrong
                        // block -- is off by orders more): f32 sums of terms
                        // of mixed signs and magnitudes (2^-6 .. 2^5 here) lose
                        // relative accuracy on the elements that nearly cancel
                        double big = 0;
                        for (int i = 0; i < n_out; i++)
                            big = fmax(big, fabs((double)want[i]));
                        for (int i = 0; i < n_out; i++)
                            if (!(fabs((double)out[i] - want[i]) <= 4e-6 * big))
                                fail_msg("%s hd %d bs %d heads %d/%d: [%d] %.9g vs %.9g", isas[s],
                                         hd, block_sizes[bi], N_HEAD, N_KV, i, (double)out[i],
                                         (double)want[i]);
                        // each token alone on one thread: bit-identical to the batch
                        for (int t = 0; t < N_TOK; t++) {
                            tl_attention_opt(NULL, &f.q8, q + (size_t)t * N_HEAD * hd, &qs[t], 1,
                                             N_HEAD, scale, &opts, solo, work);
                            if (memcmp(solo, out + (size_t)t * N_HEAD * hd,
                                       sizeof(float) * (size_t)(N_HEAD * hd)))
                                fail_msg("%s: q8 attention of token %d depends on the batch",
                                         isas[s], t);
                        }
                    }
                    tl_aligned_free(work);
                }
                fixture_free(&f);
            }
    tl_pool_destroy(pool);
}

// ---- bad shapes -------------------------------------------------------------------------------

static void test_bad_head_dim(void **state)
{
    (void)state;
    assert_true(tl_kv_type_supported(TL_DTYPE_Q8_0, 32));
    assert_true(tl_kv_type_supported(TL_DTYPE_Q8_0, 128));
    assert_false(tl_kv_type_supported(TL_DTYPE_Q8_0, 8));
    assert_false(tl_kv_type_supported(TL_DTYPE_Q8_0, 48));
    assert_false(tl_kv_type_supported(TL_DTYPE_Q8_0, 0));
    assert_false(tl_kv_type_supported(TL_DTYPE_Q4_0, 64));
    assert_true(tl_kv_type_supported(TL_DTYPE_F16, 8));
    assert_int_equal(tl_kv_row_bytes(TL_DTYPE_Q8_0, 48), 0);
    assert_int_equal(tl_kv_row_bytes(TL_DTYPE_F16, 48), 96);
    assert_int_equal(tl_kv_row_bytes(TL_DTYPE_Q8_0, 128), 136);

    struct tl_kv_cache_config c = {.n_blocks = 4,
                                   .block_size = 16,
                                   .n_layer = 2,
                                   .n_kv_head = 2,
                                   .head_dim = 48,
                                   .type = TL_DTYPE_Q8_0};
    assert_null(tl_kv_cache_create(&c));
    const char *msg = tl_last_error();
    if (!strstr(msg, "head_dim is 48") || !strstr(msg, "Q8_0"))
        fail_msg("error does not name head_dim and the type: %s", msg);
    // a good shape: the block bytes follow the type (2 layers x K,V x 16 x 2 heads x 68)
    c.head_dim = 64;
    assert_int_equal(tl_kv_cache_block_bytes(&c), (size_t)2 * 2 * 16 * 2 * 68);
    struct tl_kv_cache *kv = tl_kv_cache_create(&c);
    assert_non_null(kv);
    const struct tl_kv_pages *p = tl_kv_cache_pages(kv);
    assert_int_equal(p->layers[1].type, TL_DTYPE_Q8_0);
    // layer l's K and V are slices of (n_blocks, block_size, n_kv_head, 68) bytes
    assert_int_equal((char *)p->layers[0].v - (char *)p->layers[0].k, 4 * 16 * 2 * 68);
    tl_kv_cache_destroy(kv);
}

TL_TEST_MAIN(cmocka_unit_test(test_store_equals_quantize_row),
             cmocka_unit_test(test_store_hard_values), cmocka_unit_test(test_attention_every_isa),
             cmocka_unit_test(test_bad_head_dim))
