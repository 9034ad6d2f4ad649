/*
 * Tests for src/kernels: conversions (exhaustive over f16, RNE ties, NaN/inf, compared with the
 * CPU's F16C where present), Q8_0 rows, the scalar reference against independent double
 * precision formulas, every SIMD variant against the reference on odd shapes (NMSE), and the
 * determinism contract: a token's output is bit-identical whatever the batch size, its place in
 * the batch and the thread count.
 */
#include "tl_test.h"

#include "core/alloc.h"
#include "core/pool.h"
#include "kernels/kernels.h"
#include "kernels/kernels_impl.h"

#include <math.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

// ---- helpers ----------------------------------------------------------------------------------

static void fill(float *x, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = tl_test_rnd_f() * scale;
}

static float bits_f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t f_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

// Normalized mean squared error of `got` against `want`.
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

// A weight matrix of `type` with random values (owned buffers; free with weight_free).
struct test_weight {
    struct tl_weight w;
    void *data;
    void *packed; // tl_weight_prepare's copy (owned), or NULL
    float *deq;   // (n_out, n_in) dequantized values
};

static void weight_make(struct test_weight *tw, enum tl_dtype type, int64_t n_out, int64_t n_in)
{
    size_t rb;
    assert_true(tl_dtype_row_bytes(type, n_in, &rb));
    tw->data = tl_aligned_alloc(rb * (size_t)n_out + 64);
    tw->packed = NULL;
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
    tw->w = (struct tl_weight){
        .type = type, .n_in = n_in, .n_out = n_out, .row_bytes = rb, .data = tw->data};
}

// Repacks the weight with tl_weight_prepare (a no-op for types without a packed layout).
static void weight_pack(struct test_weight *tw)
{
    assert_int_equal(tl_weight_prepare(&tw->w, &tw->packed), TL_OK);
}

static void weight_free(struct test_weight *tw)
{
    tl_aligned_free(tw->packed);
    tl_aligned_free(tw->data);
    free(tw->deq);
}

// ---- conversions ------------------------------------------------------------------------------

static void test_fp16_exhaustive_roundtrip(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = tl_fp16_to_f32((uint16_t)h);
        uint16_t back = tl_f32_to_fp16(f);
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) { // NaN: stays NaN, sign kept
            assert_true(isnan(f));
            assert_true((back & 0x7c00) == 0x7c00 && (back & 0x3ff));
            assert_int_equal(back & 0x8000, h & 0x8000);
        } else {
            if (back != h) fail_msg("f16 0x%04x -> %g -> 0x%04x", h, f, back);
        }
    }
}

static void test_fp16_known_values(void **state)
{
    (void)state;
    assert_true(tl_fp16_to_f32(0x3c00) == 1.f);
    assert_true(tl_fp16_to_f32(0xc000) == -2.f);
    assert_true(tl_fp16_to_f32(0x7bff) == 65504.f);
    assert_true(tl_fp16_to_f32(0x0001) == 0x1p-24f);
    assert_true(tl_fp16_to_f32(0x0400) == 0x1p-14f);
    assert_true(isinf(tl_fp16_to_f32(0x7c00)) && tl_fp16_to_f32(0xfc00) < 0);
    assert_int_equal(tl_f32_to_fp16(65504.f), 0x7bff);
    assert_int_equal(tl_f32_to_fp16(65519.99f), 0x7bff);
    assert_int_equal(tl_f32_to_fp16(65520.f), 0x7c00); // tie with "65536" rounds to even: inf
    assert_int_equal(tl_f32_to_fp16(1e9f), 0x7c00);
    assert_int_equal(tl_f32_to_fp16(-1e9f), 0xfc00);
    assert_int_equal(tl_f32_to_fp16(INFINITY), 0x7c00);
    assert_int_equal(tl_f32_to_fp16(0x1p-25f), 0x0000);        // tie between 0 and 2^-24: 0
    assert_int_equal(tl_f32_to_fp16(0x1.000002p-25f), 0x0001); // just above the tie
    assert_int_equal(tl_f32_to_fp16(0x1.8p-24f), 0x0002);      // 1.5 ulp: tie to even (2)
    assert_int_equal(tl_f32_to_fp16(0x1p-26f), 0x0000);
    assert_int_equal(tl_f32_to_fp16(-0.f), 0x8000);
    assert_int_equal(tl_f32_to_fp16(0x1.ff8p-15f), 0x03ff); // largest subnormal
    assert_int_equal(tl_f32_to_fp16(0x1.ffap-15f), 0x03ff);
    assert_int_equal(tl_f32_to_fp16(0x1.ffcp-15f), 0x0400);   // tie: rounds up into the normals
    assert_int_equal(tl_f32_to_fp16(1.f + 0x1p-11f), 0x3c00); // tie: 1.0 is even
    assert_int_equal(tl_f32_to_fp16(1.f + 3 * 0x1p-11f), 0x3c02);
    assert_true((tl_f32_to_fp16(NAN) & 0x7e00) == 0x7e00);
    assert_int_equal(tl_f32_to_fp16(bits_f(0x7f800001)) & 0x7e00, 0x7e00); // sNaN -> qNaN
}

// Every tie between consecutive finite halves must round to the even one.
static void test_fp16_all_ties_to_even(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x7bff; h++) {
        double lo = tl_fp16_to_f32((uint16_t)h), hi = tl_fp16_to_f32((uint16_t)(h + 1));
        float mid = (float)((lo + hi) / 2); // exact: halves have 11 significant bits
        uint16_t want = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        assert_int_equal(tl_f32_to_fp16(mid), want);
        assert_int_equal(tl_f32_to_fp16(-mid), want | 0x8000);
        // just off the tie goes to the nearer one
        assert_int_equal(tl_f32_to_fp16(nextafterf(mid, 0.f)), h);
        assert_int_equal(tl_f32_to_fp16(nextafterf(mid, INFINITY)), h + 1);
    }
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) static uint16_t hw_f32_to_fp16(float f)
{
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
__attribute__((target("f16c"))) static float hw_fp16_to_f32(uint16_t h)
{
    return _cvtsh_ss(h);
}
#endif

static void test_fp16_matches_f16c(void **state)
{
    (void)state;
#if defined(__x86_64__)
    unsigned r0, r1, r2, r3; // F16C from CPUID: clang's __builtin_cpu_supports lacks "f16c"
    if (!__get_cpuid(1, &r0, &r1, &r2, &r3) || !(r2 & bit_F16C)) skip();
    for (uint32_t h = 0; h < 65536; h++) {
        float a = tl_fp16_to_f32((uint16_t)h), b = hw_fp16_to_f32((uint16_t)h);
        if (isnan(a))
            assert_true(isnan(b));
        else
            assert_int_equal(f_bits(a), f_bits(b));
    }
    for (int i = 0; i < 2000000; i++) {
        float f = bits_f(tl_test_rnd_u32());
        uint16_t a = tl_f32_to_fp16(f), b = hw_f32_to_fp16(f);
        if (isnan(f))
            assert_true((a & 0x7c00) == 0x7c00 && (a & 0x3ff));
        else if (a != b)
            fail_msg("f32 %a (0x%08x): 0x%04x vs F16C 0x%04x", f, f_bits(f), a, b);
    }
#else
    skip();
#endif
}

static void test_bf16_rounding(void **state)
{
    (void)state;
    assert_int_equal(tl_f32_to_bf16(1.f), 0x3f80);
    assert_true(tl_bf16_to_f32(0x3f80) == 1.f);
    assert_int_equal(tl_f32_to_bf16(bits_f(0x3f808000)), 0x3f80); // tie, even stays
    assert_int_equal(tl_f32_to_bf16(bits_f(0x3f818000)), 0x3f82); // tie, odd rounds up
    assert_int_equal(tl_f32_to_bf16(bits_f(0x3f808001)), 0x3f81);
    assert_int_equal(tl_f32_to_bf16(bits_f(0x7f7fffff)), 0x7f80); // rounds to inf
    assert_int_equal(tl_f32_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(tl_f32_to_bf16(-INFINITY), 0xff80);
    // NaN must stay NaN even when its payload is only in the low 16 bits
    uint16_t n = tl_f32_to_bf16(bits_f(0x7f800001));
    assert_true((n & 0x7f80) == 0x7f80 && (n & 0x7f));
    assert_true(isnan(tl_bf16_to_f32(tl_f32_to_bf16(NAN))));
    // Random finite values: the nearer of the two neighbours (ties to even), checked in double.
    for (int i = 0; i < 1000000; i++) {
        uint32_t u = tl_test_rnd_u32();
        float f = bits_f(u);
        if (!isfinite(f)) continue;
        uint32_t lo = u & 0xffff0000u;
        // above the largest finite bf16 the next step would be 2^128 (IEEE overflow rule)
        double dlo = bits_f(lo),
               dhi = (lo & 0x7fffffff) == 0x7f7f0000 ? copysign(0x1p128, f) : bits_f(lo + 0x10000);
        double elo = fabs((double)f - dlo), ehi = fabs((double)f - dhi);
        uint16_t want = (uint16_t)(lo >> 16);
        if (ehi < elo || (ehi == elo && (want & 1))) want++;
        if (tl_f32_to_bf16(f) != want) fail_msg("bf16 of 0x%08x", u);
    }
    for (uint32_t h = 0; h < 65536; h++) {
        float f = tl_bf16_to_f32((uint16_t)h);
        if (!isnan(f)) assert_int_equal(tl_f32_to_bf16(f), h);
    }
}

// ---- rows -------------------------------------------------------------------------------------

static void test_q8_0_known_block(void **state)
{
    (void)state;
    float x[64], back[64];
    struct tl_block_q8_0 b[2];
    // block 0: max 127 -> d = 1 exactly; halves round away from zero (ggml's roundf)
    for (int i = 0; i < 32; i++)
        x[i] = (float)(i - 16) + 0.5f;
    x[31] = 127.f;
    // block 1: all zero -> d = 0, q = 0
    for (int i = 32; i < 64; i++)
        x[i] = 0.f;
    assert_true(tl_quantize_row(TL_DTYPE_Q8_0, x, b, 64));
    assert_int_equal(b[0].d, 0x3c00);
    assert_int_equal(b[0].qs[0], -16); // -15.5 -> -16
    assert_int_equal(b[0].qs[1], -15); // -14.5 -> -15
    assert_int_equal(b[0].qs[16], 1);  // 0.5 -> 1
    assert_int_equal(b[0].qs[17], 2);  // 1.5 -> 2
    assert_int_equal(b[0].qs[31], 127);
    assert_int_equal(b[1].d, 0);
    for (int i = 0; i < 32; i++)
        assert_int_equal(b[1].qs[i], 0);
    assert_true(tl_dequantize_row(TL_DTYPE_Q8_0, b, back, 64));
    assert_true(back[0] == -16.f && back[31] == 127.f && back[40] == 0.f);
    // negative extreme gives -127
    for (int i = 0; i < 32; i++)
        x[i] = i == 5 ? -3.f : 0.01f * i;
    assert_true(tl_quantize_row(TL_DTYPE_Q8_0, x, b, 32));
    assert_int_equal(b[0].qs[5], -127);
    assert_int_equal(b[0].d, tl_f32_to_fp16(3.f / 127.f));
}

static void test_quantize_rows_all_types(void **state)
{
    (void)state;
    enum { N = 256 };
    float x[N], back[N];
    uint8_t buf[N * 4];
    fill(x, N, 3.f);
    const enum tl_dtype types[] = {TL_DTYPE_F32, TL_DTYPE_F16, TL_DTYPE_BF16, TL_DTYPE_Q8_0};
    const double tol[] = {0, 1e-6, 2e-5, 1e-4}; // NMSE of one rounding at each precision
    for (int k = 0; k < 4; k++) {
        assert_true(tl_kernels_weight_supported(types[k]));
        assert_true(tl_quantize_row(types[k], x, buf, N));
        assert_true(tl_dequantize_row(types[k], buf, back, N));
        double e = nmse(back, x, N);
        if (e > tol[k]) fail_msg("%s: nmse %g", tl_dtype_name(types[k]), e);
    }
    // elementwise agreement with the scalar converters
    assert_true(tl_quantize_row(TL_DTYPE_F16, x, buf, N));
    for (int i = 0; i < N; i++)
        assert_int_equal(((uint16_t *)buf)[i], tl_f32_to_fp16(x[i]));
    // Q8_0 error bound: half a step, plus the scale's own f16 rounding (2^-11 relative) times 127
    assert_true(tl_quantize_row(TL_DTYPE_Q8_0, x, buf, N));
    assert_true(tl_dequantize_row(TL_DTYPE_Q8_0, buf, back, N));
    for (int b = 0; b < N / 32; b++) {
        float d = tl_fp16_to_f32(((struct tl_block_q8_0 *)buf)[b].d);
        for (int i = b * 32; i < b * 32 + 32; i++)
            TL_ASSERT_NEAR(back[i], x[i], d * (0.5 + 127 * 0x1p-11), i);
    }
    // bad requests fail cleanly
    assert_false(tl_quantize_row(TL_DTYPE_Q8_0, x, buf, 33));
    assert_false(tl_dequantize_row(TL_DTYPE_Q8_0, buf, back, 33));
    // (types the kernels do not support; Q4_0..Q6_K are tested in test_quants.c, IQ4_NL, IQ4_XS
    // and MXFP4 in test_cb4.c)
    assert_false(tl_quantize_row(TL_DTYPE_IQ2_XXS, x, buf, 256));
    assert_false(tl_dequantize_row(TL_DTYPE_IQ3_S, buf, back, 256));
    assert_false(tl_kernels_weight_supported(TL_DTYPE_IQ2_XXS));
    // non-finite input does not crash and yields finite codes
    x[3] = NAN;
    x[7] = INFINITY;
    assert_true(tl_quantize_row(TL_DTYPE_Q8_0, x, buf, 32));
}

// All ISAs quantize activations to the same bytes (so integer dot products agree exactly).
static void test_quantize_x_same_on_every_isa(void **state)
{
    (void)state;
    const int64_t ns[] = {32, 64, 96, 160, 768, 2048};
    for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
        int64_t n = ns[k];
        float *x = malloc(sizeof(float) * (size_t)n);
        fill(x, n, 4.f);
        for (int64_t i = 0; i < n; i += 37)
            x[i] = 0.5f * (float)(i % 5); // some ties
        for (int64_t i = 64; i < n && i < 96; i++)
            x[i] = 0.f; // an all-zero block
        size_t rb = tl__xq_row_bytes(n);
        void *want = tl_aligned_alloc(rb), *got = tl_aligned_alloc(rb);
        tl__ref_quantize_x(x, n, want);
        for (int s = 0; s < N_ISA; s++) {
            if (!tl_kernels_force_isa(isas[s])) continue;
            const struct tl__kernel_ops *o = !strcmp(isas[s], "scalar") ? &tl__ops_scalar
#if defined(__x86_64__)
                                             : !strcmp(isas[s], "avx2") ? &tl__ops_avx2
                                                                        : &tl__ops_avx512;
#else
                                                                        : NULL;
#endif
            memset(got, 0x55, rb);
            o->quantize_x(x, n, got);
            if (memcmp(got, want, rb))
                fail_msg("%s quantize_x differs at n=%lld", isas[s], (long long)n);
        }
        tl_aligned_free(want);
        tl_aligned_free(got);
        free(x);
    }
}

// ---- matmul -----------------------------------------------------------------------------------

static const enum tl_dtype mm_types[] = {TL_DTYPE_F32, TL_DTYPE_F16, TL_DTYPE_BF16, TL_DTYPE_Q8_0};

// The reference against double-precision sums over the dequantized weights.
static void test_matmul_ref_vs_double(void **state)
{
    (void)state;
    for (int k = 0; k < 4; k++) {
        struct test_weight tw;
        int64_t n_in = mm_types[k] == TL_DTYPE_Q8_0 ? 96 : 77, n_out = 19, n_tok = 5;
        weight_make(&tw, mm_types[k], n_out, n_in);
        float *x = malloc(sizeof(float) * (size_t)(n_tok * n_in));
        float *y = malloc(sizeof(float) * (size_t)(n_tok * n_out));
        float *want = malloc(sizeof(float) * (size_t)(n_tok * n_out));
        fill(x, n_tok * n_in, 2.f);
        void *work = tl_aligned_alloc(tl_matmul_work_bytes(&tw.w, n_tok) + 64);
        tl__ref_matmul(&tw.w, x, n_tok, y, work);
        for (int64_t t = 0; t < n_tok; t++)
            for (int64_t r = 0; r < n_out; r++) {
                double s = 0;
                for (int64_t i = 0; i < n_in; i++)
                    s += (double)tw.deq[r * n_in + i] * x[t * n_in + i];
                want[t * n_out + r] = (float)s;
            }
        double e = nmse(y, want, n_tok * n_out);
        double tol = mm_types[k] == TL_DTYPE_Q8_0 ? 1e-4 : 1e-12;
        if (e > tol) fail_msg("%s: nmse %g", tl_dtype_name(mm_types[k]), e);
        tl_aligned_free(work);
        free(x), free(y), free(want);
        weight_free(&tw);
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
    for (int k = 0; k < 4; k++) {
        const int64_t ins_f[] = {1, 7, 16, 33, 100, 257, 1100};
        const int64_t ins_q[] = {32, 64, 96, 160, 512, 1120};
        const int64_t *ins = mm_types[k] == TL_DTYPE_Q8_0 ? ins_q : ins_f;
        int n_ins = mm_types[k] == TL_DTYPE_Q8_0 ? 6 : 7;
        for (int a = 0; a < n_ins; a++)
            for (int b = 0; b < 4; b++) {
                struct test_weight tw;
                weight_make(&tw, mm_types[k], outs[b], ins[a]);
                int64_t n_in = ins[a], n_out = outs[b], max_tok = 33;
                float *x = malloc(sizeof(float) * (size_t)(max_tok * n_in));
                float *y = malloc(sizeof(float) * (size_t)(max_tok * n_out));
                float *want = malloc(sizeof(float) * (size_t)(max_tok * n_out));
                void *work = tl_aligned_alloc(tl_matmul_work_bytes(&tw.w, max_tok) + 64);
                fill(x, max_tok * n_in, 1.f);
                for (int c = 0; c < 5; c++) {
                    int64_t n_tok = toks[c];
                    tl__ref_matmul(&tw.w, x, n_tok, want, work);
                    for (int s = 0; s < N_ISA; s++) {
                        if (!tl_kernels_force_isa(isas[s])) continue;
                        memset(y, 0xff, sizeof(float) * (size_t)(n_tok * n_out));
                        tl_matmul(pool, &tw.w, x, n_tok, y, work);
                        double e = nmse(y, want, n_tok * n_out);
                        if (!(e <= 1e-10))
                            fail_msg("%s %s n_in=%lld n_out=%lld n_tok=%lld: nmse %g", isas[s],
                                     tl_dtype_name(mm_types[k]), (long long)n_in, (long long)n_out,
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

// tl_weight_prepare: packed weights (Q8_0, F32, F16, BF16) give the reference's results on
// every ISA (the scalar variant bit for bit, since it does the same arithmetic on the packed
// values), odd shapes included (a partial last group of 16 rows, 1 and 3 Q8_0 blocks per row);
// other types and packed weights are left alone; bad shapes are refused.
static void test_weight_prepare(void **state)
{
    (void)state;
    struct tl_pool *pool = tl_pool_create(2);
    assert_non_null(pool);
    const int64_t ins_q[] = {32, 96, 160, 512, 1120}, ins_f[] = {1, 7, 96, 257, 1100};
    const int64_t outs[] = {1, 3, 16, 37, 64};
    const int64_t toks[] = {1, 2, 3, 7, 13, 33};
    for (int k = 0; k < 4; k++)
        for (int a = 0; a < 5; a++)
            for (int b = 0; b < 5; b++) {
                enum tl_dtype type = mm_types[k];
                int64_t n_in = type == TL_DTYPE_Q8_0 ? ins_q[a] : ins_f[a];
                int64_t n_out = outs[b], max_tok = 33;
                struct test_weight tw;
                weight_make(&tw, type, n_out, n_in);
                struct tl_weight raw = tw.w;
                weight_pack(&tw);
                assert_non_null(tw.packed);
                assert_ptr_equal(tw.w.data, tw.packed);
                assert_int_equal(tw.w.layout, TL_WEIGHT_PACKED);
                size_t esz = type == TL_DTYPE_F32 ? 4 : 2;
                size_t group =
                    type == TL_DTYPE_Q8_0 ? (size_t)(n_in / 32 * 544) : (size_t)n_in * 16 * esz;
                assert_int_equal(tl_weight_data_bytes(&tw.w),
                                 (size_t)((n_out + 15) / 16) * ((group + 63) / 64 * 64));
                float *x = malloc(sizeof(float) * (size_t)(max_tok * n_in));
                float *y = malloc(sizeof(float) * (size_t)(max_tok * n_out));
                float *want = malloc(sizeof(float) * (size_t)(max_tok * n_out));
                void *work = tl_aligned_alloc(tl_matmul_work_bytes(&tw.w, max_tok) + 64);
                fill(x, max_tok * n_in, 1.f);
                for (int c = 0; c < 6; c++) {
                    int64_t n_tok = toks[c];
                    tl__ref_matmul(&raw, x, n_tok, want, work);
                    for (int s = 0; s < N_ISA; s++) {
                        if (!tl_kernels_force_isa(isas[s])) continue;
                        memset(y, 0xff, sizeof(float) * (size_t)(n_tok * n_out));
                        tl_matmul(pool, &tw.w, x, n_tok, y, work);
                        double e = nmse(y, want, n_tok * n_out);
                        bool exact = !memcmp(y, want, sizeof(float) * (size_t)(n_tok * n_out));
                        if (!(e <= 1e-10) || (s == 0 && !exact))
                            fail_msg("%s packed %s n_in=%lld n_out=%lld n_tok=%lld: nmse %g",
                                     isas[s], tl_dtype_name(type), (long long)n_in,
                                     (long long)n_out, (long long)n_tok, e);
                    }
                }
                // a second prepare leaves the packed weight alone
                void *again = (void *)1;
                assert_int_equal(tl_weight_prepare(&tw.w, &again), TL_OK);
                assert_null(again);
                assert_ptr_equal(tw.w.data, tw.packed);
                tl_aligned_free(work);
                free(x), free(y), free(want);
                weight_free(&tw);
            }
    // a type without a packed layout is left as it is
    struct tl_weight q4 = {.type = TL_DTYPE_Q4_0, .n_in = 64, .n_out = 5, .row_bytes = 36};
    char q4data[5 * 36] = {0};
    q4.data = q4data;
    void *owned = (void *)1;
    assert_int_equal(tl_weight_prepare(&q4, &owned), TL_OK);
    assert_null(owned);
    assert_ptr_equal(q4.data, q4data);
    assert_int_equal(q4.layout, TL_WEIGHT_ROWS);
    assert_int_equal(tl_weight_data_bytes(&q4), 5 * 36);
    // a Q8_0 shape no file can hold is refused with a message, the weight untouched
    struct tl_weight bad = {.type = TL_DTYPE_Q8_0, .n_in = 48, .n_out = 2, .row_bytes = 51};
    char dummy[128] = {0};
    bad.data = dummy;
    owned = (void *)1;
    assert_int_equal(tl_weight_prepare(&bad, &owned), TL_ERR_INVALID_ARG);
    assert_null(owned);
    assert_ptr_equal(bad.data, dummy);
    assert_int_equal(bad.layout, TL_WEIGHT_ROWS);
    tl_pool_destroy(pool);
}

// tl_matmul_multi gives each weight's tl_matmul result bit for bit: same-type weights of
// different heights sharing one activation pass, packed and file layouts, mixed types.
static void test_matmul_multi(void **state)
{
    (void)state;
    struct tl_pool *pool = tl_pool_create(2);
    assert_non_null(pool);
    const int64_t n_in = 160, outs[3] = {37, 16, 70}, toks[] = {1, 5, 33};
    const enum tl_dtype sets[][3] = {{TL_DTYPE_Q8_0, TL_DTYPE_Q8_0, TL_DTYPE_Q8_0},
                                     {TL_DTYPE_F16, TL_DTYPE_F16, TL_DTYPE_F16},
                                     {TL_DTYPE_F32, TL_DTYPE_BF16, TL_DTYPE_F32},
                                     {TL_DTYPE_Q8_0, TL_DTYPE_F16, TL_DTYPE_Q4_0}};
    for (int si = 0; si < 4; si++)
        for (int packed = 0; packed < 2; packed++) {
            struct test_weight tw[3];
            const struct tl_weight *ws[3];
            size_t wb = 0;
            for (int i = 0; i < 3; i++) {
                if (sets[si][i] == TL_DTYPE_Q4_0) { // a type of quants.c, never packed
                    size_t rb;
                    assert_true(tl_dtype_row_bytes(TL_DTYPE_Q4_0, n_in, &rb));
                    tw[i].data = tl_aligned_alloc(rb * (size_t)outs[i]);
                    tw[i].packed = NULL;
                    tw[i].deq = NULL;
                    float *row = malloc(sizeof(float) * (size_t)n_in);
                    for (int64_t r = 0; r < outs[i]; r++) {
                        fill(row, n_in, 1.f);
                        assert_true(tl_quantize_row(TL_DTYPE_Q4_0, row,
                                                    (char *)tw[i].data + rb * (size_t)r, n_in));
                    }
                    free(row);
                    tw[i].w = (struct tl_weight){.type = TL_DTYPE_Q4_0,
                                                 .n_in = n_in,
                                                 .n_out = outs[i],
                                                 .row_bytes = rb,
                                                 .data = tw[i].data};
                } else {
                    weight_make(&tw[i], sets[si][i], outs[i], n_in);
                    if (packed) weight_pack(&tw[i]);
                }
                ws[i] = &tw[i].w;
                size_t b = tl_matmul_work_bytes(ws[i], 33);
                wb = b > wb ? b : wb;
            }
            float *x = malloc(sizeof(float) * (size_t)(33 * n_in));
            float *y[3], *want[3];
            for (int i = 0; i < 3; i++) {
                y[i] = malloc(sizeof(float) * (size_t)(33 * outs[i]));
                want[i] = malloc(sizeof(float) * (size_t)(33 * outs[i]));
            }
            void *work = tl_aligned_alloc(wb + 64);
            fill(x, 33 * n_in, 1.f);
            for (int s = 0; s < N_ISA; s++) {
                if (!tl_kernels_force_isa(isas[s])) continue;
                for (int c = 0; c < 3; c++) {
                    for (int i = 0; i < 3; i++)
                        tl_matmul(pool, ws[i], x, toks[c], want[i], work);
                    tl_matmul_multi(pool, 3, ws, x, toks[c], y, work);
                    for (int i = 0; i < 3; i++)
                        if (memcmp(y[i], want[i], sizeof(float) * (size_t)(toks[c] * outs[i])))
                            fail_msg("%s set %d%s n_tok %lld: weight %d differs", isas[s], si,
                                     packed ? " packed" : "", (long long)toks[c], i);
                }
            }
            tl_aligned_free(work);
            free(x);
            for (int i = 0; i < 3; i++) {
                free(y[i]), free(want[i]);
                weight_free(&tw[i]);
            }
        }
    tl_pool_destroy(pool);
}

// The determinism contract: for n_tok in 1..40 and 1..3 threads, every token's row equals its
// n_tok = 1 result bit for bit, wherever it sits in the batch. A second, wider shape takes the
// blocked paths (k-blocks of the weight rows, token chunks, converted weight blocks) with a few
// larger batches.
static void check_deterministic(enum tl_dtype type, int64_t n_in, int64_t n_out, const int *n_toks,
                                int n_n_toks, struct tl_pool **pools, bool packed)
{
    int max_tok = 0;
    for (int i = 0; i < n_n_toks; i++)
        max_tok = n_toks[i] > max_tok ? n_toks[i] : max_tok;
    struct test_weight tw;
    weight_make(&tw, type, n_out, n_in);
    if (packed) weight_pack(&tw);
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
                // batch slot i holds token (i + n_tok + p) % max_tok: tokens move around
                for (int i = 0; i < n_tok; i++)
                    memcpy(xb + i * n_in, x + ((i + n_tok + p) % max_tok) * n_in,
                           sizeof(float) * (size_t)n_in);
                tl_matmul(pools[p], &tw.w, xb, n_tok, y, work);
                for (int i = 0; i < n_tok; i++) {
                    int t = (i + n_tok + p) % max_tok;
                    if (memcmp(y + i * n_out, solo + t * n_out, sizeof(float) * (size_t)n_out))
                        fail_msg("%s %s%s n_in %lld: token %d in slot %d of %d, %d threads differs",
                                 isas[s], tl_dtype_name(type), packed ? " packed" : "",
                                 (long long)n_in, t, i, n_tok, p + 1);
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
    const int wide[] = {1, 2, 3, 4, 5, 9, 47, 48, 49, 97};
    for (int k = 0; k < 4; k++) {
        int q = mm_types[k] == TL_DTYPE_Q8_0;
        check_deterministic(mm_types[k], q ? 160 : 157, 37, small, 40, pools, false);
        check_deterministic(mm_types[k], q ? 1120 : 1100, 13, wide, 10, pools, false);
    }
    // packed weights: a partial last row group (37 = 2 x 16 + 5), several groups per thread,
    // k-blocks and token chunks
    for (int k = 0; k < 4; k++) {
        int q = mm_types[k] == TL_DTYPE_Q8_0;
        check_deterministic(mm_types[k], q ? 160 : 157, 37, small, 40, pools, true);
        check_deterministic(mm_types[k], q ? 1120 : 1100, 13, wide, 10, pools, true);
        check_deterministic(mm_types[k], 96, 200, small, 40, pools, true);
        check_deterministic(mm_types[k], 8192, 21, wide, 10, pools, true); // several chunks
    }
    for (int p = 0; p < 3; p++)
        tl_pool_destroy(pools[p]);
}

// ---- row-wise ops -----------------------------------------------------------------------------

static void test_rmsnorm(void **state)
{
    (void)state;
    const int64_t ns[] = {1, 7, 16, 33, 768, 2051};
    for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
        int64_t n = ns[k];
        float *x = malloc(sizeof(float) * (size_t)n), *w = malloc(sizeof(float) * (size_t)n);
        float *y = malloc(sizeof(float) * (size_t)n), *want = malloc(sizeof(float) * (size_t)n);
        fill(x, n, 3.f);
        fill(w, n, 1.f);
        double ss = 0;
        for (int64_t i = 0; i < n; i++)
            ss += (double)x[i] * x[i];
        double s = 1.0 / sqrt(ss / n + 1e-5);
        for (int64_t i = 0; i < n; i++)
            want[i] = (float)(x[i] * s * w[i]);
        for (int i = 0; i < N_ISA; i++) {
            if (!tl_kernels_force_isa(isas[i])) continue;
            tl_rmsnorm(x, w, 1e-5f, n, y);
            for (int64_t j = 0; j < n; j++)
                TL_ASSERT_NEAR(y[j], want[j], 1e-5 * fabs(want[j]) + 1e-6, j);
            memcpy(y, x, sizeof(float) * (size_t)n); // in place
            tl_rmsnorm(y, w, 1e-5f, n, y);
            for (int64_t j = 0; j < n; j++)
                TL_ASSERT_NEAR(y[j], want[j], 1e-5 * fabs(want[j]) + 1e-6, j);
        }
        free(x), free(w), free(y), free(want);
    }
}

static void test_rope_modes(void **state)
{
    (void)state;
    enum { H = 3, D = 64 };
    float x[H * D], y[H * D], z[H * D];
    fill(x, H * D, 1.f);
    const int64_t positions[] = {0, 1, 17, 4095};
    for (size_t k = 0; k < 4; k++) {
        int64_t pos = positions[k];
        // NORMAL: adjacent pairs rotated by pos * base^(-2i/D), computed here in double
        memcpy(y, x, sizeof(x));
        tl_rope(y, H, D, pos, 10000.f, 1.f, TL_ROPE_NORMAL);
        for (int h = 0; h < H; h++)
            for (int i = 0; i < D / 2; i++) {
                double th = (double)pos * pow(10000.0, -2.0 * i / D);
                double a = x[h * D + 2 * i], b = x[h * D + 2 * i + 1];
                TL_ASSERT_NEAR(y[h * D + 2 * i], a * cos(th) - b * sin(th), 1e-5, i);
                TL_ASSERT_NEAR(y[h * D + 2 * i + 1], a * sin(th) + b * cos(th), 1e-5, i);
            }
        // NEOX on x equals NORMAL on x with its halves interleaved
        for (int h = 0; h < H; h++)
            for (int i = 0; i < D / 2; i++) {
                z[h * D + 2 * i] = x[h * D + i];
                z[h * D + 2 * i + 1] = x[h * D + i + D / 2];
            }
        tl_rope(z, H, D, pos, 10000.f, 1.f, TL_ROPE_NORMAL);
        memcpy(y, x, sizeof(x));
        tl_rope(y, H, D, pos, 10000.f, 1.f, TL_ROPE_NEOX);
        for (int h = 0; h < H; h++)
            for (int i = 0; i < D / 2; i++) {
                assert_true(y[h * D + i] == z[h * D + 2 * i]);
                assert_true(y[h * D + i + D / 2] == z[h * D + 2 * i + 1]);
            }
    }
    // pos 0 is the identity; freq_scale scales the position
    memcpy(y, x, sizeof(x));
    tl_rope(y, H, D, 0, 10000.f, 1.f, TL_ROPE_NORMAL);
    assert_memory_equal(x, y, sizeof(x));
    memcpy(y, x, sizeof(x));
    memcpy(z, x, sizeof(x));
    tl_rope(y, H, D, 10, 10000.f, 0.5f, TL_ROPE_NORMAL);
    tl_rope(z, H, D, 5, 10000.f, 1.f, TL_ROPE_NORMAL);
    assert_memory_equal(y, z, sizeof(x));
}

// tl_rope caches frequencies and cos/sin per thread: every call must still equal the plain
// reference bit for bit whatever came before it (same or new position, base, scale, head_dim).
static void test_rope_cache_matches_ref(void **state)
{
    (void)state;
    struct {
        int hd;
        int64_t pos;
        float base, scale;
        enum tl_rope_mode mode;
    } calls[] = {
        {64, 7, 10000.f, 1.f, TL_ROPE_NORMAL},      {64, 7, 10000.f, 1.f, TL_ROPE_NEOX},
        {64, 8, 10000.f, 1.f, TL_ROPE_NORMAL},      {64, 8, 10000.f, 0.25f, TL_ROPE_NORMAL},
        {64, 8, 500000.f, 0.25f, TL_ROPE_NEOX},     {128, 8, 500000.f, 0.25f, TL_ROPE_NEOX},
        {128, 0, 500000.f, 1.f, TL_ROPE_NORMAL},    {6, 3, 10000.f, 1.f, TL_ROPE_NORMAL},
        {1024, 4095, 10000.f, 1.f, TL_ROPE_NORMAL}, {64, 7, 10000.f, 1.f, TL_ROPE_NORMAL},
    };
    enum { H = 3, MAX_D = 1024 };
    static float x[H * MAX_D], y[H * MAX_D];
    for (size_t c = 0; c < sizeof(calls) / sizeof(calls[0]); c++) {
        int hd = calls[c].hd;
        fill(x, H * hd, 3.f);
        memcpy(y, x, sizeof(float) * (size_t)(H * hd));
        tl__ref_rope(x, H, hd, calls[c].pos, calls[c].base, calls[c].scale, calls[c].mode);
        tl_rope(y, H, hd, calls[c].pos, calls[c].base, calls[c].scale, calls[c].mode);
        if (memcmp(x, y, sizeof(float) * (size_t)(H * hd))) fail_msg("rope call %zu differs", c);
    }
}

static void test_swiglu_add_softmax(void **state)
{
    (void)state;
    const int64_t ns[] = {1, 5, 16, 31, 1000};
    for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
        int64_t n = ns[k];
        size_t bytes = sizeof(float) * (size_t)n;
        float *g = malloc(bytes), *u = malloc(bytes), *o = malloc(bytes), *s = malloc(bytes);
        fill(g, n, 8.f);
        fill(u, n, 2.f);
        for (int i = 0; i < N_ISA; i++) {
            if (!tl_kernels_force_isa(isas[i])) continue;
            tl_swiglu(g, u, o, n);
            for (int64_t j = 0; j < n; j++) {
                double want = g[j] / (1.0 + exp(-(double)g[j])) * u[j];
                TL_ASSERT_NEAR(o[j], want, 1e-6 * fabs(want) + 1e-6, j);
            }
            memcpy(o, g, bytes);
            tl_add(o, u, n);
            for (int64_t j = 0; j < n; j++)
                assert_true(o[j] == g[j] + u[j]);
            memcpy(s, g, bytes);
            tl_softmax(s, n);
            double mx = -INFINITY, sum = 0, tot = 0;
            for (int64_t j = 0; j < n; j++)
                mx = g[j] > mx ? g[j] : mx;
            for (int64_t j = 0; j < n; j++)
                sum += exp((double)g[j] - mx);
            for (int64_t j = 0; j < n; j++) {
                double want = exp((double)g[j] - mx) / sum;
                TL_ASSERT_NEAR(s[j], want, 1e-6 * want + 1e-9, j);
                tot += s[j];
            }
            TL_ASSERT_NEAR(tot, 1.0, 1e-5, 0);
        }
        free(g), free(u), free(o), free(s);
    }
    float big[3] = {1000.f, 1000.f, -1000.f}; // no overflow
    tl_softmax(big, 3);
    TL_ASSERT_NEAR(big[0], 0.5, 1e-7, 0);
    TL_ASSERT_NEAR(big[2], 0.0, 1e-7, 2);
}

// ---- attention --------------------------------------------------------------------------------

struct attn_fixture {
    struct tl_kv_layer kv;
    int n_blocks;
    int32_t *tables; // (n_seq, blocks_per_seq)
    int blocks_per_seq;
    float *kf, *vf; // logical f32 copies as stored (after f16 rounding): (n_seq, ctx, kvh*hd)
};

static void attn_fixture_make(struct attn_fixture *f, enum tl_dtype type, int block_size,
                              int n_kv_head, int head_dim, int n_seq, int ctx)
{
    f->blocks_per_seq = (ctx + block_size - 1) / block_size;
    f->n_blocks = n_seq * f->blocks_per_seq + 3;
    size_t elt = type == TL_DTYPE_F16 ? 2 : 4;
    size_t per_block = (size_t)block_size * n_kv_head * head_dim;
    f->kv = (struct tl_kv_layer){type,
                                 block_size,
                                 n_kv_head,
                                 head_dim,
                                 calloc(per_block * f->n_blocks, elt),
                                 calloc(per_block * f->n_blocks, elt)};
    // a shuffled permutation of physical blocks, so tables are not contiguous
    int *perm = malloc(sizeof(int) * (size_t)f->n_blocks);
    for (int i = 0; i < f->n_blocks; i++)
        perm[i] = i;
    for (int i = f->n_blocks - 1; i > 0; i--) {
        int j = (int)(tl_test_rnd_u32() % (uint32_t)(i + 1)), tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
    f->tables = malloc(sizeof(int32_t) * (size_t)(n_seq * f->blocks_per_seq));
    for (int i = 0; i < n_seq * f->blocks_per_seq; i++)
        f->tables[i] = perm[i];
    free(perm);
    int64_t row = (int64_t)n_kv_head * head_dim;
    f->kf = malloc(sizeof(float) * (size_t)(n_seq * ctx * row));
    f->vf = malloc(sizeof(float) * (size_t)(n_seq * ctx * row));
    for (int s = 0; s < n_seq; s++)
        for (int p = 0; p < ctx; p++) {
            float *k = f->kf + (s * ctx + p) * row, *v = f->vf + (s * ctx + p) * row;
            fill(k, row, 1.f);
            fill(v, row, 1.f);
            tl_kv_store(&f->kv, f->tables + s * f->blocks_per_seq, p, k, v);
            if (type == TL_DTYPE_F16)
                for (int64_t i = 0; i < row; i++) {
                    k[i] = tl_fp16_to_f32(tl_f32_to_fp16(k[i]));
                    v[i] = tl_fp16_to_f32(tl_f32_to_fp16(v[i]));
                }
        }
}

static void attn_fixture_free(struct attn_fixture *f)
{
    free(f->kv.k), free(f->kv.v), free(f->tables), free(f->kf), free(f->vf);
}

static void test_attention(void **state)
{
    (void)state;
    enum { N_SEQ = 3, CTX = 45, MAX_HEAD = 16 };
    // (query heads, KV heads): groups of 3 and 8 heads share a KV head; 5/5 has one query
    // head per KV head (no sharing) and an odd KV head count to split into ranges
    const int head_cfg[][2] = {{6, 2}, {16, 2}, {8, 1}, {5, 5}};
    // 128 and 136: the most kept in registers, and more
    const int head_dims[] = {64, 40, 8, 128, 136};
    const int block_sizes[] = {16, 5};
    const enum tl_dtype types[] = {TL_DTYPE_F32, TL_DTYPE_F16};
    struct tl_pool *pool = tl_pool_create(3);
    for (int ci = 0; ci < 4; ci++)
        for (int ti = 0; ti < 2; ti++)
            for (int hi = 0; hi < 5; hi++)
                for (int bi = 0; bi < 2; bi++) {
                    const int N_HEAD = head_cfg[ci][0], N_KV = head_cfg[ci][1];
                    int hd = head_dims[hi];
                    struct attn_fixture f;
                    attn_fixture_make(&f, types[ti], block_sizes[bi], N_KV, hd, N_SEQ, CTX);
                    // batch 0 mixes the sequences at assorted positions; batch 1 is prefill
                    // runs (a whole prompt, a middle part of one, a lone decode token)
                    // options: none; a window of 7 (under a block of 16, so a prefill run's
                    // windows start in different blocks and chunks); a window of 20 with
                    // soft-capping (scores of about +-1 against a cap of 0.5: tanh bites)
                    for (int batch = 0; batch < 2; batch++)
                    for (int oi = 0; oi < 3; oi++) {
                        const struct tl_attn_opts opts = {.window = oi == 0 ? 0 : oi == 1 ? 7 : 20,
                                                          .softcap = oi == 2 ? 0.5f : 0.f};
                        enum { MAX_TOK = CTX + 21 };
                        struct tl_attn_query qs[MAX_TOK];
                        int seq_of[MAX_TOK];
                        int N_TOK = batch == 0 ? 9 : MAX_TOK;
                        for (int t = 0; t < N_TOK; t++) {
                            if (batch == 0) {
                                seq_of[t] = t % N_SEQ;
                                qs[t].n_ctx = t == 0 ? 1 : 1 + (int64_t)(tl_test_rnd_u32() % CTX);
                            } else {
                                seq_of[t] = t < CTX ? 0 : t < CTX + 20 ? 1 : 2;
                                qs[t].n_ctx = t < CTX ? t + 1 : t < CTX + 20 ? t - CTX + 11 : CTX;
                            }
                            qs[t].block_table = f.tables + seq_of[t] * f.blocks_per_seq;
                        }
                        enum { MAX_HD = 136 };
                        static float q[MAX_TOK * MAX_HEAD * MAX_HD],
                            out[MAX_TOK * MAX_HEAD * MAX_HD];
                        static float want[MAX_TOK * MAX_HEAD * MAX_HD], solo[MAX_HEAD * MAX_HD];
                        fill(q, N_TOK * N_HEAD * hd, 2.f);
                        float scale = 1.f / sqrtf((float)hd);
                        // independent expectation in double over the logical (unpaged) K/V
                        for (int t = 0; t < N_TOK; t++)
                            for (int h = 0; h < N_HEAD; h++) {
                                int kvh = h / (N_HEAD / N_KV);
                                int64_t n = qs[t].n_ctx, row = N_KV * hd;
                                // the window: q_pos - W < j <= q_pos, q_pos = n - 1
                                int64_t lo = opts.window && n > opts.window ? n - opts.window : 0;
                                const float *qv = q + (t * N_HEAD + h) * hd;
                                double sc[CTX], mx = -INFINITY, sum = 0;
                                for (int64_t j = lo; j < n; j++) {
                                    const float *k = f.kf + (seq_of[t] * CTX + j) * row + kvh * hd;
                                    double d = 0;
                                    for (int i = 0; i < hd; i++)
                                        d += (double)qv[i] * k[i];
                                    sc[j] = d * scale;
                                    if (opts.softcap)
                                        sc[j] = opts.softcap * tanh(sc[j] / opts.softcap);
                                    mx = sc[j] > mx ? sc[j] : mx;
                                }
                                for (int64_t j = lo; j < n; j++)
                                    sum += (sc[j] = exp(sc[j] - mx));
                                for (int i = 0; i < hd; i++) {
                                    double o = 0;
                                    for (int64_t j = lo; j < n; j++)
                                        o += sc[j] *
                                             f.vf[(seq_of[t] * CTX + j) * row + kvh * hd + i];
                                    want[(t * N_HEAD + h) * hd + i] = (float)(o / sum);
                                }
                            }
                        size_t wb = tl_attention_work_bytes(3, CTX, hd);
                        void *work = tl_aligned_alloc(wb);
                        for (int s = 0; s < N_ISA; s++) {
                            if (!tl_kernels_force_isa(isas[s])) continue;
                            tl_attention_opt(pool, &f.kv, q, qs, N_TOK, N_HEAD, scale, &opts, out,
                                             work);
                            double e = nmse(out, want, N_TOK * N_HEAD * hd);
                            if (!(e < 1e-10))
                                fail_msg("%s kv %s hd %d bs %d heads %d/%d window %d cap %g: "
                                         "nmse %g",
                                         isas[s], tl_dtype_name(types[ti]), hd, block_sizes[bi],
                                         N_HEAD, N_KV, (int)opts.window, opts.softcap, e);
                            // each token alone, single thread: bit-identical
                            for (int t = 0; t < N_TOK; t++) {
                                tl_attention_opt(NULL, &f.kv, q + t * N_HEAD * hd, &qs[t], 1,
                                                 N_HEAD, scale, &opts, solo, work);
                                if (memcmp(solo, out + t * N_HEAD * hd,
                                           sizeof(float) * (size_t)(N_HEAD * hd)))
                                    fail_msg("%s: attention of token %d depends on the batch",
                                             isas[s], t);
                            }
                        }
                        tl_aligned_free(work);
                    }
                    attn_fixture_free(&f);
                }
    tl_pool_destroy(pool);
}

static void test_kv_store_layout(void **state)
{
    (void)state;
    // element (block b, slot s, head h, dim d) at ((b * bs + s) * n_kv + h) * hd + d
    float k[2 * 4], v[2 * 4];
    for (int i = 0; i < 8; i++)
        k[i] = (float)i, v[i] = (float)(100 + i);
    float kb[3 * 4 * 8] = {0}, vb[3 * 4 * 8] = {0};
    struct tl_kv_layer kv = {TL_DTYPE_F32, 4, 2, 4, kb, vb};
    int32_t table[2] = {2, 0};
    tl_kv_store(&kv, table, 5, k, v); // logical block 1 -> physical 0, slot 1
    for (int i = 0; i < 8; i++) {
        assert_true(kb[(0 * 4 + 1) * 8 + i] == k[i]);
        assert_true(vb[(0 * 4 + 1) * 8 + i] == v[i]);
    }
    tl_kv_store(&kv, table, 2, k, v); // logical block 0 -> physical 2, slot 2
    assert_true(kb[(2 * 4 + 2) * 8 + 7] == 7.f);
    uint16_t kh[3 * 4 * 8], vh[3 * 4 * 8];
    struct tl_kv_layer kv16 = {TL_DTYPE_F16, 4, 2, 4, kh, vh};
    tl_kv_store(&kv16, table, 5, k, v);
    assert_int_equal(kh[(0 * 4 + 1) * 8 + 3], tl_f32_to_fp16(3.f));
    assert_int_equal(vh[(0 * 4 + 1) * 8 + 3], tl_f32_to_fp16(103.f));
}

// Every ISA's KV store rounds to f16 exactly like tl_f32_to_fp16 (ties, subnormals, overflow).
static void test_kv_store_f16_every_isa(void **state)
{
    (void)state;
    enum { KVH = 2, HD = 21, N = KVH * HD }; // 42 values: not a multiple of any vector width
    uint16_t kh[2 * N], vh[2 * N];
    struct tl_kv_layer kv = {TL_DTYPE_F16, 1, KVH, HD, kh, vh};
    int32_t table[1] = {1};
    for (int s = 0; s < N_ISA; s++) {
        if (!tl_kernels_force_isa(isas[s])) continue;
        for (int rep = 0; rep < 2000; rep++) {
            float k[N], v[N];
            for (int i = 0; i < N; i++) {
                // exponents 2^-27 .. 2^18: below, through and above the f16 range
                uint32_t u = tl_test_rnd_u32();
                k[i] = bits_f((u & 0x807fffffu) | ((100u + (u >> 8) % 46u) << 23));
                // a tie between two halves, or a plain value
                v[i] = (i & 1) ? (float)((tl_fp16_to_f32(0x3c01) + tl_fp16_to_f32(0x3c02)) / 2)
                               : tl_test_rnd_f() * 1e-5f;
            }
            tl_kv_store(&kv, table, 0, k, v);
            for (int i = 0; i < N; i++) {
                if (kh[N + i] != tl_f32_to_fp16(k[i]))
                    fail_msg("%s: k %a -> 0x%04x, want 0x%04x", isas[s], k[i], kh[N + i],
                             tl_f32_to_fp16(k[i]));
                assert_int_equal(vh[N + i], tl_f32_to_fp16(v[i]));
            }
        }
    }
}

static void test_isa_selection(void **state)
{
    (void)state;
    assert_true(tl_kernels_force_isa("scalar"));
    assert_string_equal(tl_kernels_isa(), "scalar");
    assert_false(tl_kernels_force_isa("sse9"));
    assert_false(tl_kernels_force_isa(NULL));
    assert_string_equal(tl_kernels_isa(), "scalar");
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        assert_true(tl_kernels_force_isa("avx2"));
        assert_string_equal(tl_kernels_isa(), "avx2");
    }
#endif
}

// tl_exp_sub on every ISA: close to expf, exactly 0 for -inf and far-below differences, exactly 1
// at the maximum; odd lengths exercise the tails.
static void test_exp_sub(void **state)
{
    (void)state;
    const int64_t n = 1003;
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    for (int64_t i = 0; i < n; i++)
        x[i] = -100.0f * (float)((i * 7919) % 1000) / 1000.0f + 3.0f;
    x[0] = -INFINITY, x[1] = 3.0f, x[n - 1] = -INFINITY;
    for (int s = 0; s < N_ISA; s++) {
        if (!tl_kernels_force_isa(isas[s])) continue;
        for (int64_t len = 1; len <= n; len += (len < 40 ? 1 : 97)) {
            memset(y, 0xFF, sizeof(float) * n); // NaN: catches unwritten outputs
            tl_exp_sub(x, 3.0f, y, len);
            for (int64_t i = 0; i < len; i++) {
                double want = exp((double)x[i] - 3.0);
                if (x[i] == -INFINITY || want < 1e-37) {
                    if (!(y[i] >= 0.0f && y[i] <= 2e-37f))
                        fail_msg("%s: exp(%g) gave %g", isas[s], x[i] - 3.0, y[i]);
                    if (x[i] == -INFINITY) assert_true(y[i] == 0.0f);
                } else {
                    TL_ASSERT_NEAR(y[i], want, 4e-7 * want, i);
                }
            }
            if (len > 1) assert_true(y[1] == 1.0f);
            if (len < n) assert_true(isnan(y[len]));
        }
    }
    tl_kernels_force_isa("scalar");
    free(x), free(y);
}

TL_TEST_MAIN(cmocka_unit_test(test_fp16_exhaustive_roundtrip),
             cmocka_unit_test(test_fp16_known_values), cmocka_unit_test(test_fp16_all_ties_to_even),
             cmocka_unit_test(test_fp16_matches_f16c), cmocka_unit_test(test_bf16_rounding),
             cmocka_unit_test(test_q8_0_known_block),
             cmocka_unit_test(test_quantize_rows_all_types),
             cmocka_unit_test(test_quantize_x_same_on_every_isa),
             cmocka_unit_test(test_matmul_ref_vs_double), cmocka_unit_test(test_matmul_isa_vs_ref),
             cmocka_unit_test(test_matmul_deterministic_across_batch_and_threads),
             cmocka_unit_test(test_weight_prepare), cmocka_unit_test(test_matmul_multi),
             cmocka_unit_test(test_rmsnorm), cmocka_unit_test(test_rope_modes),
             cmocka_unit_test(test_rope_cache_matches_ref),
             cmocka_unit_test(test_swiglu_add_softmax), cmocka_unit_test(test_exp_sub),
             cmocka_unit_test(test_attention), cmocka_unit_test(test_kv_store_layout),
             cmocka_unit_test(test_kv_store_f16_every_isa), cmocka_unit_test(test_isa_selection))
