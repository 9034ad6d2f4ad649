/*
 * Tests for the 4-bit codebook weight types IQ4_NL, IQ4_XS and MXFP4 (src/kernels/cb4.c and the
 * x86 *_cb4.c kernels): dequantization of hand-built blocks against values computed here from
 * the published layouts (byte offsets written out independently of our structs; MXFP4's
 * values decoded from the E2M1 bit fields and the E8M0 exponent as the OCP MX spec defines
 * them, not from a table), exact round trips of representable values, quantize -> dequantize
 * error bounds, the reference matmul against double-precision sums, every ISA against the
 * reference, tl_matmul_multi against single matmuls, and the determinism contract
 * (bit-identical rows for n_tok 1..40 and 1..3 threads) on every ISA.
 */
#define TL_TEST_RNG_SEED 0x7F4A7C159E3779B9ull
#include "tl_test.h"

#include "core/alloc.h"
#include "core/pool.h"
#include "kernels/kernels.h"
#include "kernels/quants.h"

#include <math.h>
#include <string.h>

static const char *const isas[] = {"scalar", "avx2", "avx512"};
enum { N_ISA = 3 };

static const enum tl_dtype ctypes[] = {TL_DTYPE_IQ4_NL, TL_DTYPE_IQ4_XS, TL_DTYPE_MXFP4};
enum { N_CTYPES = 3 };

// The IQ4_NL codebook as published (ggml-common.h kvalues_iq4nl).
static const int IQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                              1,    13,   25,  38,  53,  69,  89,  113};

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

static int64_t blk_of(enum tl_dtype t)
{
    return tl_dtype_info(t)->block_size;
}

static void put_f16(uint8_t *p, float v)
{
    uint16_t h = tl_f32_to_fp16(v);
    TL_ASSERT(tl_fp16_to_f32(h) == v); // the test's scales are exact halves
    memcpy(p, &h, 2);
}

static void check_block(enum tl_dtype type, const uint8_t *bytes, const float *want, int n)
{
    float got[256];
    assert_true(tl_dequantize_row(type, bytes, got, n));
    for (int i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], 4))
            fail_msg("%s value %d: %.9g, want %.9g", tl_dtype_name(type), i, got[i], want[i]);
}

// The OCP MX E2M1 element: sign bit 3, exponent bits 2-1 (bias 1), mantissa bit 0.
static double e2m1(int bits)
{
    int s = bits >> 3 & 1, e = bits >> 1 & 3, m = bits & 1;
    double v = e == 0 ? 0.5 * m : ldexp(1.0 + 0.5 * m, e - 1);
    return s ? -v : v;
}

// ---- known blocks -----------------------------------------------------------------------------

static void test_types_supported(void **state)
{
    (void)state;
    const int64_t blk[] = {32, 256, 32};
    const size_t bytes[] = {18, 136, 17};
    for (int k = 0; k < N_CTYPES; k++) {
        assert_true(tl_kernels_weight_supported(ctypes[k]));
        assert_int_equal(tl_dtype_info(ctypes[k])->block_size, blk[k]);
        assert_int_equal(tl_dtype_info(ctypes[k])->block_bytes, bytes[k]);
        const struct tl__qx_traits *tr = tl__qx_traits(ctypes[k]);
        assert_non_null(tr);
        assert_true(tr->cb4);
        assert_int_equal(tr->blk, blk[k]);
        assert_int_equal(tr->blk_bytes, bytes[k]);
    }
    enum tl_dtype t;
    assert_true(tl_dtype_from_name("mxfp4", &t) && t == TL_DTYPE_MXFP4);
    assert_true(tl_dtype_from_name("iq4_xs", &t) && t == TL_DTYPE_IQ4_XS);
}

// IQ4_NL (d f16 at byte 0, qs[16] at byte 2): value j = d * K[low nibble of qs[j]], value
// 16 + j = d * K[high nibble of qs[j]].
static void test_known_iq4_nl(void **state)
{
    (void)state;
    uint8_t b[18 * 2];
    float want[64];
    put_f16(b, 0.5f);
    put_f16(b + 18, -0.0078125f);
    for (int j = 0; j < 16; j++) {
        b[2 + j] = (uint8_t)(j | (15 - j) << 4);
        b[20 + j] = (uint8_t)(((j * 7) & 15) | ((j * 5 + 3) & 15) << 4);
    }
    for (int j = 0; j < 16; j++) {
        want[j] = 0.5f * (float)IQ4NL[j];
        want[16 + j] = 0.5f * (float)IQ4NL[15 - j];
        want[32 + j] = -0.0078125f * (float)IQ4NL[(j * 7) & 15];
        want[48 + j] = -0.0078125f * (float)IQ4NL[(j * 5 + 3) & 15];
    }
    check_block(TL_DTYPE_IQ4_NL, b, want, 64);
}

// IQ4_XS (d f16 at 0, scales_h u16 at 2, scales_l[4] at 4, qs[128] at 8): 32-block j has the
// 6-bit scale ls = (nibble j % 2 of scales_l[j / 2]) | (bits 2j..2j+1 of scales_h) << 4 and
// values d * (ls - 32) * K[nibble], the nibbles of qs[16j .. 16j+15] as in IQ4_NL.
static void test_known_iq4_xs(void **state)
{
    (void)state;
    const int ls[8] = {0, 1, 31, 32, 33, 47, 63, 16};
    uint8_t b[136];
    memset(b, 0, sizeof(b));
    put_f16(b, 0.25f);
    unsigned sh = 0;
    for (int j = 0; j < 8; j++) {
        b[4 + j / 2] |= (uint8_t)((ls[j] & 15) << (j % 2 ? 4 : 0));
        sh |= (unsigned)(ls[j] >> 4) << (2 * j);
    }
    b[2] = (uint8_t)(sh & 0xFF), b[3] = (uint8_t)(sh >> 8);
    float want[256];
    for (int i = 0; i < 128; i++)
        b[8 + i] = (uint8_t)((i * 11 + 1) & 255);
    for (int j = 0; j < 8; j++)
        for (int l = 0; l < 16; l++) {
            int byte = (16 * j + l) * 11 + 1;
            want[32 * j + l] = 0.25f * (float)(ls[j] - 32) * (float)IQ4NL[byte & 15];
            want[32 * j + 16 + l] = 0.25f * (float)(ls[j] - 32) * (float)IQ4NL[(byte >> 4) & 15];
        }
    check_block(TL_DTYPE_IQ4_XS, b, want, 256);
}

// MXFP4 (E8M0 byte e at 0, qs[16] at 1): value = 2^(e - 127) * E2M1(nibble), the nibbles placed
// as in IQ4_NL. Exponents 127 (x1), 130 (x8), 1 and 0 (subnormal range) and 254.
static void test_known_mxfp4(void **state)
{
    (void)state;
    const int es[] = {127, 130, 1, 0, 254, 100};
    for (size_t k = 0; k < sizeof(es) / sizeof(es[0]); k++) {
        uint8_t b[17];
        float want[32];
        b[0] = (uint8_t)es[k];
        for (int j = 0; j < 16; j++)
            b[1 + j] = (uint8_t)(j | ((j + 9) & 15) << 4);
        for (int j = 0; j < 16; j++) {
            // + 0.f: the -0 code decodes to +0, as ggml's integer codebook does
            want[j] = (float)ldexp(e2m1(j), es[k] - 127) + 0.f;
            want[16 + j] = (float)ldexp(e2m1((j + 9) & 15), es[k] - 127) + 0.f;
        }
        check_block(TL_DTYPE_MXFP4, b, want, 32);
    }
}

// ---- quantization -----------------------------------------------------------------------------

// Values the format represents exactly come back exactly: per block, a scale and codebook
// values whose largest magnitude sits on the largest codebook entry (what the quantizers aim
// the scale at).
static void test_exact_roundtrip(void **state)
{
    (void)state;
    enum { N = 512 };
    float x[N], back[N];
    uint8_t buf[N / 32 * 18 + 64];
    // IQ4_NL: d > 0, value -127 * d (K[0]) in every block
    for (int b = 0; b < N / 32; b++) {
        float d = ldexpf(1.f + (float)(b % 5) / 8.f, -(b % 7));
        for (int j = 0; j < 32; j++)
            x[32 * b + j] = d * (float)IQ4NL[j ? tl_test_rnd_u32() % 16 : 0];
    }
    assert_true(tl_quantize_row(TL_DTYPE_IQ4_NL, x, buf, N));
    assert_true(tl_dequantize_row(TL_DTYPE_IQ4_NL, buf, back, N));
    assert_memory_equal(back, x, sizeof(x));
    // MXFP4: 2^k * E2M1 values with +-6 * 2^k in every block
    for (int b = 0; b < N / 32; b++) {
        int k = b % 9 - 4;
        for (int j = 0; j < 32; j++)
            x[32 * b + j] =
                (float)ldexp(e2m1(j ? (int)(tl_test_rnd_u32() % 16) : 7 + 8 * (b % 2)), k);
    }
    assert_true(tl_quantize_row(TL_DTYPE_MXFP4, x, buf, N));
    assert_true(tl_dequantize_row(TL_DTYPE_MXFP4, buf, back, N));
    for (int i = 0; i < N; i++) // -0 and +0 both encode 0
        if (back[i] != x[i]) fail_msg("MXFP4 value %d: %g, want %g", i, back[i], x[i]);
    // IQ4_XS: block scales d * s_j with s_j in [-32, 31], one of them -32
    for (int sb = 0; sb < N / 256; sb++) {
        float d = sb ? 0.125f : 0.01171875f;
        for (int j = 0; j < 8; j++) {
            int s = j == 3 ? -32 : (int)(tl_test_rnd_u32() % 63) - 31;
            for (int l = 0; l < 32; l++)
                x[256 * sb + 32 * j + l] =
                    d * (float)s * (float)IQ4NL[l ? tl_test_rnd_u32() % 16 : 0];
        }
    }
    assert_true(tl_quantize_row(TL_DTYPE_IQ4_XS, x, buf, N));
    assert_true(tl_dequantize_row(TL_DTYPE_IQ4_XS, buf, back, N));
    for (int i = 0; i < N; i++) // a block scale of 0 gives +0 for -0
        if (back[i] != x[i]) fail_msg("IQ4_XS value %d: %g, want %g", i, back[i], x[i]);
}

// Random values: the error of a 4-bit codebook, bad lengths refused, non-finite input safe.
static void test_quantize_roundtrip(void **state)
{
    (void)state;
    enum { N = 1024 };
    float x[N], back[N];
    uint8_t buf[N / 32 * 18];
    for (int k = 0; k < N_CTYPES; k++) {
        enum tl_dtype t = ctypes[k];
        fill(x, N, 1.f);
        assert_true(tl_quantize_row(t, x, buf, N));
        assert_true(tl_dequantize_row(t, buf, back, N));
        double e = nmse(back, x, N);
        // uniform values: a 16-level codebook gives a few 1e-3; MXFP4's power-of-two scales and
        // sparse top levels somewhat more
        if (!(e < 2e-2)) fail_msg("%s: nmse %g", tl_dtype_name(t), e);
        assert_false(tl_quantize_row(t, x, buf, blk_of(t) + 16));
        assert_false(tl_dequantize_row(t, buf, back, blk_of(t) / 2));
        x[3] = NAN;
        x[40] = INFINITY;
        x[300] = -INFINITY;
        assert_true(tl_quantize_row(t, x, buf, N));
        assert_true(tl_dequantize_row(t, buf, back, N));
        memset(x, 0, sizeof(x));
        assert_true(tl_quantize_row(t, x, buf, N));
        assert_true(tl_dequantize_row(t, buf, back, N));
        for (int i = 0; i < N; i++)
            if (fabsf(back[i]) > 1e-30f) fail_msg("%s: zero gives %g", tl_dtype_name(t), back[i]);
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
    tw->data = malloc(rb * (size_t)n_out); // exact size: ASan catches reads past the last row
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

// The reference against double-precision sums over the dequantized weights (the activations'
// 8-bit quantization is the only approximation).
static void test_ref_matmul_vs_double(void **state)
{
    (void)state;
    for (int k = 0; k < N_CTYPES; k++) {
        enum tl_dtype t = ctypes[k];
        int64_t n_in = blk_of(t) == 256 ? 512 : 96, n_out = 19, n_tok = 5;
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

// Every ISA against the reference on odd shapes (the integer sums are exact everywhere; only
// the order of the float additions differs).
static void test_matmul_isa_vs_ref(void **state)
{
    (void)state;
    struct tl_pool *pool = tl_pool_create(2);
    assert_non_null(pool);
    const int64_t toks[] = {1, 2, 3, 5, 17};
    const int64_t outs[] = {1, 3, 37};
    const int64_t ins_32[] = {32, 64, 96, 160, 1120};
    const int64_t ins_256[] = {256, 768, 1280};
    int n_run = 0;
    for (int k = 0; k < N_CTYPES; k++) {
        enum tl_dtype t = ctypes[k];
        const int64_t *ins = blk_of(t) == 256 ? ins_256 : ins_32;
        int n_ins = blk_of(t) == 256 ? 3 : 5;
        for (int a = 0; a < n_ins; a++)
            for (int b = 0; b < 3; b++) {
                struct test_weight tw;
                weight_make(&tw, t, outs[b], ins[a]);
                int64_t n_in = ins[a], n_out = outs[b], max_tok = 17;
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
                        if (s == 0) // the scalar variant is the reference itself
                            assert_memory_equal(y, want, sizeof(float) * (size_t)(n_tok * n_out));
                        n_run++;
                    }
                }
                tl_aligned_free(work);
                free(x), free(y), free(want);
                weight_free(&tw);
            }
    }
    assert_true(n_run >= 3 * 13 * 5); // at least the scalar variant ran every case
    tl_pool_destroy(pool);
}

// Checks one hand-made weight: the reference against double sums over its dequantized values,
// every ISA against the reference.
static void check_matmul_bytes(const struct tl_weight *w, float x_scale, const char *what)
{
    enum { N_TOK = 3 };
    struct tl_pool *pool = tl_pool_create(2);
    assert_non_null(pool);
    const int64_t n_in = w->n_in, n_out = w->n_out;
    float *deq = malloc(sizeof(float) * (size_t)(n_out * n_in));
    float *x = malloc(sizeof(float) * (size_t)(N_TOK * n_in));
    float *want = malloc(sizeof(float) * (size_t)(N_TOK * n_out));
    float *ref = malloc(sizeof(float) * (size_t)(N_TOK * n_out));
    float *y = malloc(sizeof(float) * (size_t)(N_TOK * n_out));
    for (int64_t r = 0; r < n_out; r++)
        assert_true(tl_dequantize_row(w->type, (const char *)w->data + (size_t)r * w->row_bytes,
                                      deq + r * n_in, n_in));
    fill(x, N_TOK * n_in, x_scale);
    for (int t = 0; t < N_TOK; t++)
        for (int64_t r = 0; r < n_out; r++) {
            double sum = 0;
            for (int64_t i = 0; i < n_in; i++)
                sum += (double)deq[r * n_in + i] * x[t * n_in + i];
            want[t * n_out + r] = (float)sum;
        }
    void *work = tl_aligned_alloc(tl_matmul_work_bytes(w, N_TOK) + 64);
    tl__qx_ref_matmul(w, x, N_TOK, ref, work);
    double e = nmse(ref, want, N_TOK * n_out);
    if (!(e <= 1e-4)) fail_msg("%s: reference nmse %g", what, e);
    for (int s = 0; s < N_ISA; s++) {
        if (!tl_kernels_force_isa(isas[s])) continue;
        tl_matmul(pool, w, x, N_TOK, y, work);
        e = nmse(y, ref, N_TOK * n_out);
        if (!(e <= 1e-10)) fail_msg("%s, %s: nmse %g", what, isas[s], e);
    }
    tl_aligned_free(work);
    free(deq), free(x), free(want), free(ref), free(y);
    tl_pool_destroy(pool);
}

// Blocks of random bytes (every scale field and nibble pattern the quantizers never write: IQ4_XS
// scales over the whole 6-bit range, with their high bits in scales_h), sane f16 scales.
static void test_matmul_random_blocks(void **state)
{
    (void)state;
    enum { N_OUT = 9 };
    const int64_t n_ins[] = {288, 1024, 512}; // IQ4_NL (a partial superchunk), IQ4_XS, MXFP4
    for (int k = 0; k < N_CTYPES; k++) {
        const enum tl_dtype t = ctypes[k];
        const int64_t n_in = n_ins[k];
        size_t rb;
        assert_true(tl_dtype_row_bytes(t, n_in, &rb));
        uint8_t *buf = malloc(rb * N_OUT);
        for (size_t i = 0; i < rb * N_OUT; i++)
            buf[i] = (uint8_t)tl_test_rnd_u32();
        const size_t bb = tl_dtype_info(t)->block_bytes;
        for (size_t b = 0; b < rb * N_OUT / bb; b++) {
            if (t == TL_DTYPE_MXFP4) {
                buf[b * bb] = (uint8_t)(120 + tl_test_rnd_u32() % 12);
            } else { // d in [2^-9, 2^-7)
                uint16_t d = tl_f32_to_fp16(ldexpf(1.f + (float)(tl_test_rnd_u32() % 1024) / 1024.f,
                                                   -9 + (int)(tl_test_rnd_u32() % 2)));
                memcpy(buf + b * bb, &d, 2);
            }
        }
        struct tl_weight w = {
            .type = t, .n_in = n_in, .n_out = N_OUT, .row_bytes = rb, .data = buf};
        check_matmul_bytes(&w, 1.f, tl_dtype_name(t));
        free(buf);
    }
}

// MXFP4 blocks at the ends of the E8M0 range (the subnormal scales 2^-128, 2^-127 and the
// largest ones) through every ISA's kernel, with activations scaled so the products stay
// normal floats: each ISA against the reference and the reference against double sums.
// (From e = 253 on the largest values, 12 * 2^(e - 128), overflow f32 in ggml's dequantizer too.)
static void test_mxfp4_extreme_exponents(void **state)
{
    (void)state;
    enum { N_IN = 288, N_OUT = 9 }; // 2 full superchunks and a partial one
    const int lows[] = {0, 1, 2, 3}, highs[] = {249, 250, 251, 252}; // 12 * 2^124 still finite
    uint8_t wbuf[N_OUT * N_IN / 32 * 17];
    for (int hi = 0; hi < 2; hi++) {
        for (int b = 0; b < N_OUT * N_IN / 32; b++) {
            wbuf[17 * b] = (uint8_t)(hi ? highs[b % 4] : lows[b % 4]);
            for (int j = 1; j < 17; j++)
                wbuf[17 * b + j] = (uint8_t)tl_test_rnd_u32();
        }
        struct tl_weight w = {.type = TL_DTYPE_MXFP4,
                              .n_in = N_IN,
                              .n_out = N_OUT,
                              .row_bytes = N_IN / 32 * 17,
                              .data = wbuf};
        check_matmul_bytes(&w, hi ? 1e-30f : 1e30f,
                           hi ? "MXFP4 high exponents" : "MXFP4 low exponents");
    }
}

// tl_matmul_multi over a mix of codebook and other quantized weights equals one tl_matmul per
// weight, bit for bit, on every ISA.
static void test_matmul_multi_mixed(void **state)
{
    (void)state;
    struct tl_pool *pool = tl_pool_create(3);
    assert_non_null(pool);
    const enum tl_dtype types[] = {TL_DTYPE_IQ4_XS, TL_DTYPE_Q4_K, TL_DTYPE_MXFP4, TL_DTYPE_IQ4_NL,
                                   TL_DTYPE_Q4_0};
    enum { NW = 5, N_IN = 512, N_TOK = 7 };
    const int64_t outs[NW] = {33, 16, 20, 7, 40};
    struct test_weight tw[NW];
    const struct tl_weight *wp[NW];
    float *y[NW], *ys[NW];
    size_t work_bytes = 0;
    for (int i = 0; i < NW; i++) {
        weight_make(&tw[i], types[i], outs[i], N_IN);
        wp[i] = &tw[i].w;
        y[i] = malloc(sizeof(float) * N_TOK * (size_t)outs[i]);
        ys[i] = malloc(sizeof(float) * N_TOK * (size_t)outs[i]);
        size_t b = tl_matmul_work_bytes(wp[i], N_TOK);
        work_bytes = b > work_bytes ? b : work_bytes;
    }
    float x[N_TOK * N_IN];
    fill(x, N_TOK * N_IN, 1.f);
    void *work = tl_aligned_alloc(work_bytes + 64);
    for (int s = 0; s < N_ISA; s++) {
        if (!tl_kernels_force_isa(isas[s])) continue;
        tl_matmul_multi(pool, NW, wp, x, N_TOK, y, work);
        for (int i = 0; i < NW; i++) {
            tl_matmul(pool, wp[i], x, N_TOK, ys[i], work);
            if (memcmp(y[i], ys[i], sizeof(float) * N_TOK * (size_t)outs[i]))
                fail_msg("%s: multi differs from single for weight %d (%s)", isas[s], i,
                         tl_dtype_name(types[i]));
        }
    }
    tl_aligned_free(work);
    for (int i = 0; i < NW; i++) {
        weight_free(&tw[i]);
        free(y[i]), free(ys[i]);
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
    for (int k = 0; k < N_CTYPES; k++) {
        enum tl_dtype t = ctypes[k];
        check_deterministic(t, blk_of(t) == 256 ? 256 : 160, 37, small, 40, pools);
        check_deterministic(t, blk_of(t) == 256 ? 2048 : 1120, 13, wide, 7, pools);
    }
    for (int p = 0; p < 3; p++)
        tl_pool_destroy(pools[p]);
}

TL_TEST_MAIN(cmocka_unit_test(test_types_supported), cmocka_unit_test(test_known_iq4_nl),
             cmocka_unit_test(test_known_iq4_xs), cmocka_unit_test(test_known_mxfp4),
             cmocka_unit_test(test_exact_roundtrip), cmocka_unit_test(test_quantize_roundtrip),
             cmocka_unit_test(test_ref_matmul_vs_double), cmocka_unit_test(test_matmul_isa_vs_ref),
             cmocka_unit_test(test_matmul_multi_mixed), cmocka_unit_test(test_matmul_random_blocks),
             cmocka_unit_test(test_mxfp4_extreme_exponents),
             cmocka_unit_test(test_matmul_deterministic_across_batch_and_threads))
