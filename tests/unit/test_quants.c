/*
 * Tests for the extra weight types (src/kernels/quants.c and the x86 *_quants.c kernels):
 * dequantization of hand-built blocks against values computed here from the ggml block
 * layouts (byte offsets written out independently of our structs), quantize -> dequantize
 * error bounds, the reference matmul against double-precision sums, every ISA against the
 * reference on odd shapes, identical activation bytes on every ISA, the determinism contract
 * (bit-identical rows for n_tok 1..40 and 1..3 threads) for every type, and whole models: the
 * logits of a random Llama model quantized to each type stay close to those of the same model
 * in F32, relative to their spread.
 */
#define TL_TEST_RNG_SEED 0x2545F4914F6CDD1Dull
#include "tl_test.h"

#include "core/alloc.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/pool.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "kernels/quants.h"
#include "model/model.h"

#include <math.h>
#include <string.h>

// ---- helpers ----------------------------------------------------------------------------------

static void fill(float *x, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = tl_test_rnd_f() * scale;
}

static double nmse(const float *got, const float *want, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)got[i] - want[i];
        num += d * d;
        den += (double)want[i] * want[i];
    }
    return den > 0 ? num / den : num;
}

static const char *const isas[] = {"scalar", "avx2", "avx512"};
enum { N_ISA = 3 };

static const enum tl_dtype qtypes[] = {TL_DTYPE_Q4_0, TL_DTYPE_Q4_1, TL_DTYPE_Q5_0,
                                       TL_DTYPE_Q5_1, TL_DTYPE_Q2_K, TL_DTYPE_Q3_K,
                                       TL_DTYPE_Q4_K, TL_DTYPE_Q5_K, TL_DTYPE_Q6_K};
enum { N_QTYPES = 9 };

static int64_t blk_of(enum tl_dtype t)
{
    return tl_dtype_info(t)->block_size;
}

static void put_f16(uint8_t *p, float v)
{
    uint16_t h = tl_f32_to_fp16(v);
    memcpy(p, &h, 2);
}

// Dequantizes one block of `bytes` with the library and compares with want[0..n).
static void check_block(enum tl_dtype type, const uint8_t *bytes, const float *want, int n)
{
    float got[256];
    assert_true(tl_dequantize_row(type, bytes, got, n));
    for (int i = 0; i < n; i++)
        if (got[i] != want[i])
            fail_msg("%s value %d: %.9g, want %.9g", tl_dtype_name(type), i, got[i], want[i]);
}

// ---- known blocks -----------------------------------------------------------------------------

// Block sizes agree with the GGUF type table, and every type is supported.
static void test_traits_match_dtype_table(void **state)
{
    (void)state;
    for (int k = 0; k < N_QTYPES; k++) {
        const struct tl__qx_traits *tr = tl__qx_traits(qtypes[k]);
        assert_non_null(tr);
        assert_int_equal(tr->blk, tl_dtype_info(qtypes[k])->block_size);
        assert_int_equal(tr->blk_bytes, tl_dtype_info(qtypes[k])->block_bytes);
        assert_true(tl_kernels_weight_supported(qtypes[k]));
    }
    assert_null(tl__qx_traits(TL_DTYPE_Q8_0));
    assert_null(tl__qx_traits(TL_DTYPE_IQ2_XXS));
    assert_false(tl_kernels_weight_supported(TL_DTYPE_IQ3_S));
    assert_false(tl_kernels_weight_supported(TL_DTYPE_Q8_K));
}

// Q4_0 (d, qs[16]) and Q4_1 (d, m, qs[16]): value j from the low nibble of byte j, value 16+j
// from its high nibble.
static void test_known_q4_0_q4_1(void **state)
{
    (void)state;
    uint8_t b[20];
    float want[32];
    put_f16(b, 0.5f);
    for (int j = 0; j < 16; j++)
        b[2 + j] = (uint8_t)(j | (15 - j) << 4);
    for (int i = 0; i < 32; i++)
        want[i] = i < 16 ? (float)(i - 8) * 0.5f : (float)(15 - (i - 16) - 8) * 0.5f;
    check_block(TL_DTYPE_Q4_0, b, want, 32);

    put_f16(b, 0.25f);
    put_f16(b + 2, -1.f);
    for (int j = 0; j < 16; j++)
        b[4 + j] = (uint8_t)(((j * 7) & 15) | ((j * 3) & 15) << 4);
    for (int i = 0; i < 32; i++)
        want[i] = (float)(i < 16 ? (i * 7) & 15 : ((i - 16) * 3) & 15) * 0.25f - 1.f;
    check_block(TL_DTYPE_Q4_1, b, want, 32);
}

// Q5_0 (d, qh[4], qs[16]) and Q5_1 (d, m, qh[4], qs[16]): bit 4 of value i is bit i of qh read
// as a little-endian u32.
static void test_known_q5_0_q5_1(void **state)
{
    (void)state;
    uint8_t b[24];
    float want[32];
    const uint8_t qh[4] = {0x0F, 0xF0, 0x55, 0xAA};
    uint32_t h = 0xAA55F00Fu;
    put_f16(b, 2.f);
    memcpy(b + 2, qh, 4);
    for (int j = 0; j < 16; j++)
        b[6 + j] = (uint8_t)(j | j << 4);
    for (int i = 0; i < 32; i++) {
        int q = (i % 16) | (int)((h >> i) & 1) << 4;
        want[i] = (float)(q - 16) * 2.f;
    }
    check_block(TL_DTYPE_Q5_0, b, want, 32);

    put_f16(b, 0.25f);
    put_f16(b + 2, 1.f);
    memcpy(b + 4, qh, 4);
    for (int j = 0; j < 16; j++)
        b[8 + j] = (uint8_t)((15 - j) | j << 4);
    for (int i = 0; i < 32; i++) {
        int nib = i < 16 ? 15 - i : i - 16;
        want[i] = (float)(nib | (int)((h >> i) & 1) << 4) * 0.25f + 1.f;
    }
    check_block(TL_DTYPE_Q5_1, b, want, 32);
}

// Q4_K (d, dmin, scales[12], qs[128]) and Q5_K (d, dmin, scales[12], qh[32], qs[128]):
// sub-block j of 32 values has a 6-bit scale and min; j < 4 in the low 6 bits of bytes j and
// j+4; j >= 4: low 4 bits in byte j+4 (scale low nibble, min high nibble), high 2 bits in the
// top bits of bytes j-4 (scale) and j (min). Value 64c+l is the low nibble of qs[32c+l], value
// 64c+32+l its high nibble; Q5_K's bit 4 of those is bit 2c (2c+1) of qh[l].
static void test_known_q4_k_q5_k(void **state)
{
    (void)state;
    int sc[8], mn[8];
    uint8_t scales[12] = {0};
    for (int j = 0; j < 8; j++) {
        sc[j] = 8 * j + 5;
        mn[j] = 63 - 7 * j;
    }
    for (int j = 0; j < 4; j++) {
        scales[j] = (uint8_t)sc[j];
        scales[j + 4] = (uint8_t)mn[j];
    }
    for (int j = 4; j < 8; j++) {
        scales[j + 4] = (uint8_t)((sc[j] & 15) | (mn[j] & 15) << 4);
        scales[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
        scales[j] |= (uint8_t)((mn[j] >> 4) << 6);
    }
    uint8_t b[176];
    float want[256];
    for (int q5 = 0; q5 < 2; q5++) {
        memset(b, 0, sizeof(b));
        put_f16(b, 0.5f);
        put_f16(b + 2, 0.25f);
        memcpy(b + 4, scales, 12);
        uint8_t *qh = b + 16, *qs = b + (q5 ? 48 : 16);
        for (int k = 0; k < 128; k++)
            qs[k] = (uint8_t)(k * 37 + 11);
        if (q5)
            for (int l = 0; l < 32; l++)
                qh[l] = (uint8_t)(l * 53 + 7);
        for (int i = 0; i < 256; i++) {
            int c = i / 64, within = i % 64, l = within % 32, hi = within >= 32;
            int q = hi ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 15;
            if (q5) q |= ((qh[l] >> (2 * c + hi)) & 1) << 4;
            int j = i / 32;
            want[i] = 0.5f * (float)sc[j] * (float)q - 0.25f * (float)mn[j];
        }
        check_block(q5 ? TL_DTYPE_Q5_K : TL_DTYPE_Q4_K, b, want, 256);
    }
}

// Q6_K (ql[128], qh[64], scales[16] int8, d): in half n (128 values), value 32g+l takes the
// low nibble of ql[64n+l] (g=0), of ql[64n+32+l] (g=1), the high nibbles of those (g=2, 3),
// bits 2g..2g+1 of qh[32n+l] above them; value = d * scales[i/16] * (q - 32).
static void test_known_q6_k(void **state)
{
    (void)state;
    uint8_t b[210];
    float want[256];
    const float d = 0.0625f;
    for (int k = 0; k < 128; k++)
        b[k] = (uint8_t)(k * 29 + 3);
    for (int k = 0; k < 64; k++)
        b[128 + k] = (uint8_t)(k * 17 + 1);
    for (int j = 0; j < 16; j++)
        b[192 + j] = (uint8_t)(int8_t)(j * 13 - 100);
    put_f16(b + 208, d);
    for (int i = 0; i < 256; i++) {
        int n = i / 128, g = (i % 128) / 32, l = i % 32;
        int byte = b[64 * n + (g % 2) * 32 + l];
        int lo = g < 2 ? byte & 15 : byte >> 4;
        int hi = (b[128 + 32 * n + l] >> (2 * g)) & 3;
        int q = lo | hi << 4;
        want[i] = d * (float)(int8_t)b[192 + i / 16] * (float)(q - 32);
    }
    check_block(TL_DTYPE_Q6_K, b, want, 256);
}

// Q3_K (hmask[32], qs[64], scales[12], d) and Q2_K (scales[16], qs[64], d, dmin): in half n,
// value 32j+l takes bits 2j..2j+1 of qs[32n+l]; Q3_K adds 4 when bit 4n+j of hmask[l] is set
// and subtracts 4; its 16 scales have 4 low bits (bytes 0-7, low nibbles for scales 0-7 and
// high nibbles for 8-15) and 2 high bits (bits 2(s/4).. of byte 8 + s%4), minus 32. Q2_K's
// byte per 16 values holds the scale (low nibble) and min (high nibble).
static void test_known_q3_k_q2_k(void **state)
{
    (void)state;
    uint8_t b[110];
    float want[256];
    for (int k = 0; k < 32; k++)
        b[k] = (uint8_t)(k * 41 + 5);
    for (int k = 0; k < 64; k++)
        b[32 + k] = (uint8_t)(k * 23 + 9);
    for (int k = 0; k < 12; k++)
        b[96 + k] = (uint8_t)(k * 19 + 2);
    put_f16(b + 108, 0.5f);
    for (int i = 0; i < 256; i++) {
        int n = i / 128, j = (i % 128) / 32, l = i % 32, s = i / 16;
        int low2 = (b[32 + 32 * n + l] >> (2 * j)) & 3;
        int hb = (b[l] >> (4 * n + j)) & 1;
        int lo4 = s < 8 ? b[96 + s] & 15 : b[96 + s - 8] >> 4;
        int hi2 = (b[96 + 8 + s % 4] >> (2 * (s / 4))) & 3;
        want[i] = 0.5f * (float)((lo4 | hi2 << 4) - 32) * (float)(low2 + 4 * hb - 4);
    }
    check_block(TL_DTYPE_Q3_K, b, want, 256);

    uint8_t c[84];
    for (int k = 0; k < 16; k++)
        c[k] = (uint8_t)(k * 27 + 4);
    for (int k = 0; k < 64; k++)
        c[16 + k] = (uint8_t)(k * 45 + 6);
    put_f16(c + 80, 0.25f);
    put_f16(c + 82, 0.5f);
    for (int i = 0; i < 256; i++) {
        int n = i / 128, j = (i % 128) / 32, l = i % 32, sc = c[i / 16];
        int q = (c[16 + 32 * n + l] >> (2 * j)) & 3;
        want[i] = 0.25f * (float)(sc & 15) * (float)q - 0.5f * (float)(sc >> 4);
    }
    check_block(TL_DTYPE_Q2_K, c, want, 256);
}

// ---- quantization -----------------------------------------------------------------------------

// Round trips: NMSE bounds from the step size of each format (uniform inputs in [-1, 1]: a
// round-to-nearest grid of step s has error variance s^2/12 against a signal variance of 1/3),
// with margin for the scales' own rounding; exact zeros stay zero; bad sizes fail cleanly.
static void test_quantize_roundtrip(void **state)
{
    (void)state;
    enum { N = 1024 };
    // step over the range of one (sub-)block: 2/15 (4 bits), 2/31 (5), 2/63 (6), 2/7 (3), 2/3 (2)
    const double step[N_QTYPES] = {2. / 15, 2. / 15, 2. / 31, 2. / 31, 2. / 3,
                                   2. / 7,  2. / 15, 2. / 31, 2. / 63};
    float x[N], back[N];
    static uint8_t buf[N * 2];
    for (int k = 0; k < N_QTYPES; k++) {
        enum tl_dtype t = qtypes[k];
        fill(x, N, 1.f);
        assert_true(tl_quantize_row(t, x, buf, N));
        assert_true(tl_dequantize_row(t, buf, back, N));
        double e = nmse(back, x, N), bound = 2.0 * step[k] * step[k] / 12 * 3;
        if (!(e <= bound)) fail_msg("%s: nmse %g > %g", tl_dtype_name(t), e, bound);
        // and no element further than ~one step off
        for (int i = 0; i < N; i++)
            TL_ASSERT_NEAR(back[i], x[i], 1.2 * step[k], i);
        // scaled inputs (typical weights are ~0.02) keep the relative error
        for (int i = 0; i < N; i++)
            x[i] *= 0.02f;
        assert_true(tl_quantize_row(t, x, buf, N));
        assert_true(tl_dequantize_row(t, buf, back, N));
        e = nmse(back, x, N);
        if (!(e <= bound * 1.5)) fail_msg("%s (x0.02): nmse %g > %g", tl_dtype_name(t), e, bound);
        // zeros stay exact zeros
        memset(x, 0, sizeof(x));
        assert_true(tl_quantize_row(t, x, buf, N));
        assert_true(tl_dequantize_row(t, buf, back, N));
        for (int i = 0; i < N; i++)
            assert_true(back[i] == 0.f);
        // a row that is not a whole number of blocks is refused
        assert_false(tl_quantize_row(t, x, buf, blk_of(t) + 16));
        assert_false(tl_dequantize_row(t, buf, back, blk_of(t) / 2));
        // non-finite input: valid blocks, no crash
        fill(x, N, 1.f);
        x[3] = NAN;
        x[40] = INFINITY;
        x[300] = -INFINITY;
        assert_true(tl_quantize_row(t, x, buf, N));
        assert_true(tl_dequantize_row(t, buf, back, N));
    }
}

// ---- matmul -----------------------------------------------------------------------------------

struct test_weight {
    struct tl_weight w;
    void *data;
    float *deq; // (n_out, n_in)
};

static void weight_make(struct test_weight *tw, enum tl_dtype type, int64_t n_out, int64_t n_in)
{
    size_t rb;
    assert_true(tl_dtype_row_bytes(type, n_in, &rb));
    // exact size (no slack), so ASan builds catch any read past the last row
    tw->data = malloc(rb * (size_t)n_out);
    tw->deq = malloc(sizeof(float) * (size_t)(n_out * n_in));
    float *row = malloc(sizeof(float) * (size_t)n_in);
    assert_non_null(tw->data);
    for (int64_t r = 0; r < n_out; r++) {
        fill(row, n_in, 1.f);
        void *dst = (char *)tw->data + rb * (size_t)r;
        assert_true(tl_quantize_row(type, row, dst, n_in));
        assert_true(tl_dequantize_row(type, dst, tw->deq + r * n_in, n_in));
    }
    free(row);
    memset(&tw->w, 0, sizeof(tw->w));
    tw->w.type = type;
    tw->w.n_in = n_in;
    tw->w.n_out = n_out;
    tw->w.row_bytes = rb;
    tw->w.data = tw->data;
}

static void weight_free(struct test_weight *tw)
{
    free(tw->data);
    free(tw->deq);
}

static bool is_k(enum tl_dtype t)
{
    return blk_of(t) == 256;
}

// The reference against double-precision sums over the dequantized weights (the activations'
// 8-bit quantization is the only approximation, as for Q8_0).
static void test_ref_matmul_vs_double(void **state)
{
    (void)state;
    for (int k = 0; k < N_QTYPES; k++) {
        enum tl_dtype t = qtypes[k];
        int64_t n_in = is_k(t) ? 512 : 96, n_out = 19, n_tok = 5;
        struct test_weight tw;
        weight_make(&tw, t, n_out, n_in);
        float *x = malloc(sizeof(float) * (size_t)(n_tok * n_in));
        float *y = malloc(sizeof(float) * (size_t)(n_tok * n_out));
        float *want = malloc(sizeof(float) * (size_t)(n_tok * n_out));
        fill(x, n_tok * n_in, 2.f);
        void *work = tl_aligned_alloc(tl_matmul_work_bytes(&tw.w, n_tok) + 64);
        tl__qx_ref_matmul(&tw.w, x, n_tok, y, work);
        for (int64_t tk = 0; tk < n_tok; tk++)
            for (int64_t r = 0; r < n_out; r++) {
                double s = 0;
                for (int64_t i = 0; i < n_in; i++)
                    s += (double)tw.deq[r * n_in + i] * x[tk * n_in + i];
                want[tk * n_out + r] = (float)s;
            }
        double e = nmse(y, want, n_tok * n_out);
        if (!(e <= 1e-4)) fail_msg("%s: nmse %g", tl_dtype_name(t), e);
        tl_aligned_free(work);
        free(x), free(y), free(want);
        weight_free(&tw);
    }
}

// Every ISA quantizes activations to the same bytes (so the integer dots agree exactly).
static void test_activation_bytes_same_on_every_isa(void **state)
{
    (void)state;
    const struct tl__qx_ops *ops[N_ISA] = {
        &tl__qx_ops_scalar,
#if defined(__x86_64__)
        &tl__qx_ops_avx2,
        &tl__qx_ops_avx512
#else
        NULL,
        NULL
#endif
    };
    const int64_t ns[] = {32, 64, 96, 128, 160, 768, 2048, 5632};
    for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
        int64_t n = ns[k];
        float *x = malloc(sizeof(float) * (size_t)n);
        fill(x, n, 4.f);
        for (int64_t i = 0; i < n; i += 37)
            x[i] = 0.5f * (float)(i % 5); // some ties
        for (int64_t i = 32; i < n && i < 64; i++)
            x[i] = 0.f; // an all-zero block
        size_t rb = tl__qa_row_bytes(n);
        void *want = tl_aligned_alloc(rb), *got = tl_aligned_alloc(rb);
        memset(want, 0x55, rb);
        tl__qa_quantize_ref(x, n, want);
        for (int s = 1; s < N_ISA; s++) {
            if (!tl_kernels_force_isa(isas[s])) continue;
            memset(got, 0xAA, rb);
            ops[s]->quantize(x, n, got);
            if (memcmp(got, want, rb))
                fail_msg("%s activation bytes differ at n=%lld", isas[s], (long long)n);
        }
        tl_aligned_free(want);
        tl_aligned_free(got);
        free(x);
    }
}

// Every ISA against the reference on odd shapes.
static void test_matmul_isa_vs_ref(void **state)
{
    (void)state;
    struct tl_pool *pool = tl_pool_create(2);
    assert_non_null(pool);
    const int64_t toks[] = {1, 2, 3, 17, 33};
    const int64_t outs[] = {1, 3, 37, 64};
    const int64_t ins_32[] = {32, 64, 96, 160, 512, 1120};
    const int64_t ins_k[] = {256, 512, 768, 1280};
    for (int k = 0; k < N_QTYPES; k++) {
        enum tl_dtype t = qtypes[k];
        const int64_t *ins = is_k(t) ? ins_k : ins_32;
        int n_ins = is_k(t) ? 4 : 6;
        for (int a = 0; a < n_ins; a++)
            for (int b = 0; b < 4; b++) {
                struct test_weight tw;
                weight_make(&tw, t, outs[b], ins[a]);
                int64_t n_in = ins[a], n_out = outs[b], max_tok = 33;
                float *x = malloc(sizeof(float) * (size_t)(max_tok * n_in));
                float *y = malloc(sizeof(float) * (size_t)(max_tok * n_out));
                float *want = malloc(sizeof(float) * (size_t)(max_tok * n_out));
                void *work = tl_aligned_alloc(tl_matmul_work_bytes(&tw.w, max_tok) + 64);
                fill(x, max_tok * n_in, 1.f);
                for (int c = 0; c < 5; c++) {
                    int64_t n_tok = toks[c];
                    tl__qx_ref_matmul(&tw.w, x, n_tok, want, work);
                    for (int s = 0; s < N_ISA; s++) {
                        if (!tl_kernels_force_isa(isas[s])) continue;
                        memset(y, 0xff, sizeof(float) * (size_t)(n_tok * n_out));
                        tl_matmul(pool, &tw.w, x, n_tok, y, work);
                        double e = nmse(y, want, n_tok * n_out);
                        if (!(e <= 1e-10))
                            fail_msg("%s %s n_in=%lld n_out=%lld n_tok=%lld: nmse %g", isas[s],
                                     tl_dtype_name(t), (long long)n_in, (long long)n_out,
                                     (long long)n_tok, e);
                    }
                }
                tl_aligned_free(work);
                free(x), free(y), free(want);
                weight_free(&tw);
            }
    }
    tl_pool_destroy(pool);
}

// The determinism contract: for n_tok in 1..40 and 1..3 threads, every token's row equals its
// n_tok = 1 result bit for bit, wherever it sits in the batch.
static void check_deterministic(enum tl_dtype type, int64_t n_in, int64_t n_out, const int *n_toks,
                                int n_n_toks, struct tl_pool **pools)
{
    int max_tok = 0;
    for (int i = 0; i < n_n_toks; i++)
        max_tok = n_toks[i] > max_tok ? n_toks[i] : max_tok;
    struct test_weight tw;
    weight_make(&tw, type, n_out, n_in);
    float *x = malloc(sizeof(float) * (size_t)(max_tok * n_in));
    float *xb = malloc(sizeof(float) * (size_t)(max_tok * n_in));
    float *solo = malloc(sizeof(float) * (size_t)(max_tok * n_out));
    float *y = malloc(sizeof(float) * (size_t)(max_tok * n_out));
    void *work = tl_aligned_alloc(tl_matmul_work_bytes(&tw.w, max_tok) + 64);
    fill(x, max_tok * n_in, 1.f);
    for (int s = 0; s < N_ISA; s++) {
        if (!tl_kernels_force_isa(isas[s])) continue;
        for (int t = 0; t < max_tok; t++)
            tl_matmul(NULL, &tw.w, x + t * n_in, 1, solo + t * n_out, work);
        for (int k = 0; k < n_n_toks; k++)
            for (int p = 0; p < 3; p++) {
                int n_tok = n_toks[k];
                for (int i = 0; i < n_tok; i++)
                    memcpy(xb + i * n_in, x + ((i + n_tok + p) % max_tok) * n_in,
                           sizeof(float) * (size_t)n_in);
                tl_matmul(pools[p], &tw.w, xb, n_tok, y, work);
                for (int i = 0; i < n_tok; i++) {
                    int t = (i + n_tok + p) % max_tok;
                    if (memcmp(y + i * n_out, solo + t * n_out, sizeof(float) * (size_t)n_out))
                        fail_msg("%s %s n_in %lld: token %d in slot %d of %d, %d threads differs",
                                 isas[s], tl_dtype_name(type), (long long)n_in, t, i, n_tok, p + 1);
                }
            }
    }
    tl_aligned_free(work);
    free(x), free(xb), free(solo), free(y);
    weight_free(&tw);
}

static void test_matmul_deterministic_across_batch_and_threads(void **state)
{
    (void)state;
    struct tl_pool *pools[3];
    for (int p = 0; p < 3; p++)
        assert_non_null(pools[p] = tl_pool_create(p + 1));
    int small[40];
    for (int i = 0; i < 40; i++)
        small[i] = i + 1;
    const int wide[] = {1, 2, 3, 5, 9, 33, 97};
    for (int k = 0; k < N_QTYPES; k++) {
        enum tl_dtype t = qtypes[k];
        check_deterministic(t, is_k(t) ? 256 : 160, 37, small, 40, pools);
        check_deterministic(t, is_k(t) ? 2048 : 1120, 13, wide, 7, pools);
    }
    for (int p = 0; p < 3; p++)
        tl_pool_destroy(pools[p]);
}

// ---- whole model ------------------------------------------------------------------------------

// A random Llama model (dims multiples of 256) written as GGUF with every matrix of `type`
// (norms F32) from the same f32 values for every type: N(0, 0.02^2) per tensor, seeded by name.
enum { M_DIM = 256, M_LAYERS = 2, M_HEADS = 4, M_KV = 2, M_FF = 512 };

struct mtensor {
    char name[48];
    int64_t ne[2];
    int n_dims;
    enum tl_dtype type;
    void *data;
};

static void write_random_model(const char *path, enum tl_dtype type, int64_t *n_vocab_out)
{
    struct tl_gguf *tok = NULL;
    assert_int_equal(tl_gguf_open(tl_test_shared("models/stories260K.gguf"), &tok), TL_OK);
    const struct tl_gguf_value *toks = tl_gguf_get_arr(tok, "tokenizer.ggml.tokens");
    assert_non_null(toks);
    int64_t n_vocab = (int64_t)toks->arr.n;
    *n_vocab_out = n_vocab;
    struct tl_gguf_writer *w = tl_gguf_writer_create();
    assert_non_null(w);
    tl_status st = tl_gguf_writer_set_str(w, "general.architecture", "llama");
    if (!st) st = tl_gguf_writer_set_u32(w, "llama.context_length", 256);
    if (!st) st = tl_gguf_writer_set_u32(w, "llama.embedding_length", M_DIM);
    if (!st) st = tl_gguf_writer_set_u32(w, "llama.block_count", M_LAYERS);
    if (!st) st = tl_gguf_writer_set_u32(w, "llama.feed_forward_length", M_FF);
    if (!st) st = tl_gguf_writer_set_u32(w, "llama.attention.head_count", M_HEADS);
    if (!st) st = tl_gguf_writer_set_u32(w, "llama.attention.head_count_kv", M_KV);
    if (!st) st = tl_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    if (!st) st = tl_gguf_writer_set_u32(w, "llama.rope.dimension_count", M_DIM / M_HEADS);
    for (int64_t i = 0; !st && i < tl_gguf_n_kv(tok); i++) {
        const struct tl_gguf_kv *kv = tl_gguf_kv_at(tok, i);
        char key[256];
        if (kv->key.len < 10 || kv->key.len >= sizeof(key) || memcmp(kv->key.ptr, "tokenizer.", 10))
            continue;
        memcpy(key, kv->key.ptr, kv->key.len);
        key[kv->key.len] = '\0';
        st = tl_gguf_writer_set_value(w, key, &kv->value);
    }
    assert_int_equal(st, TL_OK);
    const struct {
        const char *suffix;
        int64_t n_in, n_out;
    } blk[9] = {{"attn_norm", M_DIM, 0},
                {"attn_q", M_DIM, M_DIM},
                {"attn_k", M_DIM, M_DIM / M_HEADS * M_KV},
                {"attn_v", M_DIM, M_DIM / M_HEADS * M_KV},
                {"attn_output", M_DIM, M_DIM},
                {"ffn_norm", M_DIM, 0},
                {"ffn_gate", M_DIM, M_FF},
                {"ffn_up", M_DIM, M_FF},
                {"ffn_down", M_FF, M_DIM}};
    enum { N_T = 3 + 9 * M_LAYERS };
    struct mtensor ts[N_T];
    for (int t = 0; t < N_T; t++) {
        struct mtensor *mt = &ts[t];
        int64_t n_in, n_out;
        if (t == 0)
            snprintf(mt->name, sizeof(mt->name), "token_embd.weight"), n_in = M_DIM,
                                                                       n_out = n_vocab;
        else if (t == N_T - 2)
            snprintf(mt->name, sizeof(mt->name), "output_norm.weight"), n_in = M_DIM, n_out = 0;
        else if (t == N_T - 1)
            snprintf(mt->name, sizeof(mt->name), "output.weight"), n_in = M_DIM, n_out = n_vocab;
        else {
            int l = (t - 1) / 9, k = (t - 1) % 9;
            snprintf(mt->name, sizeof(mt->name), "blk.%d.%s.weight", l, blk[k].suffix);
            n_in = blk[k].n_in, n_out = blk[k].n_out;
        }
        mt->n_dims = n_out ? 2 : 1;
        mt->ne[0] = n_in;
        mt->ne[1] = n_out ? n_out : 1;
        mt->type = n_out ? type : TL_DTYPE_F32;
        size_t rb;
        assert_true(tl_dtype_row_bytes(mt->type, n_in, &rb));
        mt->data = malloc(rb * (size_t)mt->ne[1]);
        float *row = malloc(sizeof(float) * (size_t)n_in);
        // FNV-1a of the name from mkmodel's (shortened) basis: the same data as before.
        uint64_t seed = tl_fnv1a64_more(1469598103934665603ull, mt->name, strlen(mt->name));
        for (int64_t r = 0; r < mt->ne[1]; r++) {
            for (int64_t i = 0; i < n_in; i += 2) { // Box-Muller, N(0, 0.02^2)
                double u1 = ((double)(tl_splitmix64(&seed) >> 11) + 1.0) * 0x1p-53;
                double u2 = (double)(tl_splitmix64(&seed) >> 11) * 0x1p-53;
                double rad = sqrt(-2.0 * log(u1)) * 0.02;
                row[i] = n_out ? (float)(rad * cos(2 * M_PI * u2)) : 1.f;
                row[i + 1] = n_out ? (float)(rad * sin(2 * M_PI * u2)) : 1.f;
            }
            assert_true(tl_quantize_row(mt->type, row, (char *)mt->data + rb * (size_t)r, n_in));
        }
        free(row);
        assert_int_equal(
            tl_gguf_writer_add_tensor(w, mt->name, mt->type, mt->n_dims, mt->ne, mt->data), TL_OK);
    }
    assert_int_equal(tl_gguf_writer_write(w, path), TL_OK);
    for (int t = 0; t < N_T; t++)
        free(ts[t].data);
    tl_gguf_writer_destroy(w);
    tl_gguf_close(tok);
}

// Logits of a 12-token prompt (one prefill batch) for every position: (12, n_vocab).
static void model_logits(const char *path, float *logits)
{
    enum { N = 12, BS = 16, N_BLOCKS = 4 };
    struct tl_model *m = NULL;
    if (tl_model_load(path, NULL, &m)) fail_msg("load: %s", tl_last_error());
    struct tl_kv_layer layers[M_LAYERS];
    size_t elems = (size_t)N_BLOCKS * BS * M_KV * (M_DIM / M_HEADS);
    for (int l = 0; l < M_LAYERS; l++) {
        layers[l] = (struct tl_kv_layer){
            .type = TL_DTYPE_F32, .block_size = BS, .n_kv_head = M_KV, .head_dim = M_DIM / M_HEADS};
        layers[l].k = calloc(elems, 4);
        layers[l].v = calloc(elems, 4);
    }
    struct tl_kv_pages pages = {M_LAYERS, layers};
    int32_t table[N_BLOCKS] = {2, 0, 3, 1};
    const int32_t *tables[1] = {table};
    int32_t tok[N], pos[N], seq[N], out[N];
    for (int i = 0; i < N; i++)
        tok[i] = (int32_t)(1 + (i * 97) % 500), pos[i] = i, seq[i] = 0, out[i] = i;
    struct tl_batch b = {.n_tok = N,
                         .token = tok,
                         .pos = pos,
                         .seq = seq,
                         .block_tables = tables,
                         .n_out = N,
                         .out_idx = out};
    struct tl_forward *f = tl_forward_create(m, N, N_BLOCKS * BS, NULL);
    assert_non_null(f);
    if (tl_forward_run(f, &b, &pages, logits)) fail_msg("forward: %s", tl_last_error());
    tl_forward_destroy(f);
    for (int l = 0; l < M_LAYERS; l++)
        free(layers[l].k), free(layers[l].v);
    tl_model_destroy(m);
}

// For each type: RMS(logits - f32 logits) / std(f32 logits) below a bound that grows as the bits
// per weight shrink: about 1.5x what these round-to-nearest quantizers give (Q4_K: 0.20); a
// model whose logits had nothing to do with the F32 ones would be at sqrt(2). The 4-bit
// codebook types (IQ4_NL, IQ4_XS: 0.21; MXFP4, power-of-two scales: 0.33) sit beside Q4_K.
static void test_quantized_model_logits_close_to_f32(void **state)
{
    (void)state;
    enum { N = 12 };
    const char *path = tl_test_tmpfile("qmodel.gguf");
    char p[256];
    snprintf(p, sizeof(p), "%s", path);
    int64_t n_vocab;
    write_random_model(p, TL_DTYPE_F32, &n_vocab);
    float *ref = malloc(sizeof(float) * (size_t)(N * n_vocab));
    float *got = malloc(sizeof(float) * (size_t)(N * n_vocab));
    model_logits(p, ref);
    double mean = 0, var = 0;
    for (int64_t i = 0; i < N * n_vocab; i++)
        mean += ref[i];
    mean /= (double)(N * n_vocab);
    for (int64_t i = 0; i < N * n_vocab; i++)
        var += (ref[i] - mean) * (ref[i] - mean);
    double spread = sqrt(var / (double)(N * n_vocab));
    assert_true(spread > 0.05);
    const enum tl_dtype types[] = {TL_DTYPE_Q8_0, TL_DTYPE_Q6_K, TL_DTYPE_Q5_K,   TL_DTYPE_Q5_0,
                                   TL_DTYPE_Q5_1, TL_DTYPE_Q4_K, TL_DTYPE_Q4_0,   TL_DTYPE_Q4_1,
                                   TL_DTYPE_Q3_K, TL_DTYPE_Q2_K, TL_DTYPE_IQ4_NL, TL_DTYPE_IQ4_XS,
                                   TL_DTYPE_MXFP4};
    const double bound[] = {0.03, 0.08, 0.14, 0.15, 0.17, 0.3, 0.33,
                            0.3,  0.55, 1.0,  0.32, 0.32, 0.5};
    for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
        write_random_model(p, types[k], &n_vocab);
        model_logits(p, got);
        double se = 0;
        for (int64_t i = 0; i < N * n_vocab; i++)
            se += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
        double rel = sqrt(se / (double)(N * n_vocab)) / spread;
        print_message("# %s: logits rms error / spread = %.4f\n", tl_dtype_name(types[k]), rel);
        if (!(rel <= bound[k]))
            fail_msg("%s: logits rms error / spread %.4f > %.2f", tl_dtype_name(types[k]), rel,
                     bound[k]);
    }
    unlink(p);
    free(ref), free(got);
}

TL_TEST_MAIN(cmocka_unit_test(test_traits_match_dtype_table),
             cmocka_unit_test(test_known_q4_0_q4_1), cmocka_unit_test(test_known_q5_0_q5_1),
             cmocka_unit_test(test_known_q4_k_q5_k), cmocka_unit_test(test_known_q6_k),
             cmocka_unit_test(test_known_q3_k_q2_k), cmocka_unit_test(test_quantize_roundtrip),
             cmocka_unit_test(test_ref_matmul_vs_double),
             cmocka_unit_test(test_activation_bytes_same_on_every_isa),
             cmocka_unit_test(test_matmul_isa_vs_ref),
             cmocka_unit_test(test_matmul_deterministic_across_batch_and_threads),
             cmocka_unit_test(test_quantized_model_logits_close_to_f32))
