/*
 * The device kernels (src/gpu/gpu_ops.c + shaders) against the CPU kernels and independent
 * double-precision oracles, on the test device (lavapipe in CI; TAP skips without a device).
 *
 * Tolerances, each derived from the arithmetic, not tuned (u = 2^-24, ulp(y) <= 2^-23 |y|):
 * - add, mul: Vulkan requires correctly rounded a+b and a*b, as the CPU does: bit-identical.
 * - RoPE: the cos/sin table is the CPU's (double angles rounded to float) and the shader's
 *   products are `precise` (no fused multiply-add), as the CPU's: bit-identical to tl_rope.
 * - SwiGLU, against silu(g) * up in double: Vulkan's precision table allows exp 3 + 2|x| ULP and
 *   division 2.5 ULP; with the add and the final multiply (0.5 ULP each) the relative error is at
 *   most (3 + 2|g| + 4) * 2^-23 (g in [-8, 8] keeps every value normal).
 * - RMSNorm, against tl_rmsnorm: the device sums squares in f32 (ceil(n/256) sequential terms
 *   then an 8-level tree: relative error <= (m) u, m = ceil(n/256) + 9, all terms positive),
 *   divides by n (2.5 ULP), adds eps (0.5), inversesqrt (2 ULP, halved for the square root's
 *   sensitivity: 0.5 (m u) + ...), then two multiplies; the CPU's double sum and float scale add
 *   1.5 ULP. Bound: |y| * u * (m/2 + 14).
 * - matmul (F32, F16, BF16, Q8_0, Q4_K, Q5_K, Q6_K), against the exact sum of dequantized w times x
 * in double (the device decodes each weight exactly as tl_dequantize_row does): each element is a
 *   chain of k multiply-adds and tree additions (fused or not: lavapipe does not fuse fma(); the
 *   bound holds either way, as for any recursive dot product), k = the per-lane terms (F32:
 *   ceil(n_in/32); F16, BF16: 2 ceil(n_in/64); Q8_0: 32 within a block + ceil(blocks/32) + 1;
 * K-quants: 256 within a super-block + ceil(super-blocks/32) + 1) plus 5 tree levels, so |err| <=
 * gamma_k * sum |w x| (Higham's bound, gamma_k = k u/(1-k u)). Against tl_matmul the CPU's own
 * bound is added: gamma_n_in * sum|w x| for F32/F16/BF16, and for the quantized types the CPU's
 * quantization of x to 8 bits in blocks of 32 (each x off by at most half its block's step
 * amax/127): sum over blocks of sum|w| * amax_x / 254.
 * - batch invariance: a token's outputs are bit-identical alone and inside a batch of 7.
 */
#define TL_TEST_RNG_SEED 0x6A09E667F3BCC909ull
#include "gpu_test.h"

#include "core/alloc.h"
#include "gpu/gpu_ops.h"
#include "kernels/kernels.h"

#include <math.h>

static const double U = 1.0 / 16777216.0; // 2^-24

static void run_ok(tl_gpu_rec *r)
{
    if (tl_gpu_rec_run(r)) fail_msg("run: %s", tl_last_error());
}

static tl_gpu_rec *rec_new(tl_gpu_device *d)
{
    tl_gpu_rec *r;
    if (tl_gpu_rec_create(d, &r)) fail_msg("rec: %s", tl_last_error());
    return r;
}

// ---- elementwise ------------------------------------------------------------------------------

static void test_add_mul_exact(void **state)
{
    (void)state;
    tl_gpu_device *d = gpu_test_device();
    enum { N = 70001 }; // > 256 * 256: several grid-stride iterations are not needed, but odd
    float *a = malloc(N * 4), *b = malloc(N * 4), *y = malloc(N * 4), *want = malloc(N * 4);
    for (int i = 0; i < N; i++) {
        a[i] = tl_test_rnd_f() * 100.f;
        b[i] = tl_test_rnd_f() * 3.f;
    }
    tl_gpu_buffer *ba = gpu_test_buffer(d, a, N * 4), *bb = gpu_test_buffer(d, b, N * 4);
    tl_gpu_buffer *by = gpu_test_buffer(d, NULL, N * 4);
    tl_gpu_rec *r = rec_new(d);
    for (int op = 0; op < 2; op++) {
        assert_int_equal(tl_gpu_eltwise(r, op ? TL_GPU_MUL : TL_GPU_ADD, ba, bb, by, N), TL_OK);
        assert_int_equal(tl_gpu_rec_download(r, by, 0, y, N * 4), TL_OK);
        run_ok(r);
        memcpy(want, a, N * 4);
        if (op == 0)
            tl_add(want, b, N);
        else
            for (int i = 0; i < N; i++)
                want[i] = a[i] * b[i];
        assert_memory_equal(y, want, N * 4);
    }
    tl_gpu_rec_destroy(r);
    tl_gpu_buffer_destroy(ba), tl_gpu_buffer_destroy(bb), tl_gpu_buffer_destroy(by);
    free(a), free(b), free(y), free(want);
}

static void test_swiglu(void **state)
{
    (void)state;
    tl_gpu_device *d = gpu_test_device();
    enum { N = 4099 };
    static float g[N], u[N], y[N], cpu[N];
    for (int i = 0; i < N; i++) {
        g[i] = tl_test_rnd_f() * 8.f;
        u[i] = tl_test_rnd_f();
    }
    g[0] = 0.f, g[1] = 8.f, g[2] = -8.f;
    tl_gpu_buffer *bg = gpu_test_buffer(d, g, sizeof(g)), *bu = gpu_test_buffer(d, u, sizeof(u));
    tl_gpu_rec *r = rec_new(d);
    // in place into the gate (y aliases a), as the forward pass does
    assert_int_equal(tl_gpu_eltwise(r, TL_GPU_SWIGLU, bg, bu, bg, N), TL_OK);
    assert_int_equal(tl_gpu_rec_download(r, bg, 0, y, sizeof(y)), TL_OK);
    run_ok(r);
    tl_swiglu(g, u, cpu, N);
    for (int i = 0; i < N; i++) {
        double exact = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
        double tol = fabs(exact) * 2 * U * (3 + 2 * fabs(g[i]) + 4) * 1.01 + 1e-30;
        TL_ASSERT_NEAR(y[i], exact, tol, i);
        // and the CPU kernel, within the device's bound plus the CPU's (same order)
        TL_ASSERT_NEAR(y[i], cpu[i], 2 * tol + fabs(exact) * 16 * U, i);
    }
    tl_gpu_rec_destroy(r);
    tl_gpu_buffer_destroy(bg), tl_gpu_buffer_destroy(bu);
}

// ---- RMSNorm -----------------------------------------------------------------------------------

static void test_rmsnorm(void **state)
{
    (void)state;
    tl_gpu_device *d = gpu_test_device();
    static const int64_t ns[] = {1, 64, 172, 257, 4096};
    for (size_t c = 0; c < sizeof(ns) / sizeof(ns[0]); c++) {
        int64_t n = ns[c], rows = 7;
        float *x = malloc(n * rows * 4), *w = malloc(n * 4), *y = malloc(n * rows * 4);
        float *alone = malloc(n * 4), *want = malloc(n * 4);
        for (int64_t i = 0; i < n * rows; i++)
            x[i] = tl_test_rnd_f() * (1 + (float)(i / n)); // rows of different scales
        for (int64_t i = 0; i < n; i++)
            w[i] = 0.5f + tl_test_rnd_f();
        tl_gpu_buffer *bx = gpu_test_buffer(d, x, n * rows * 4), *bw = gpu_test_buffer(d, w, n * 4);
        tl_gpu_buffer *by = gpu_test_buffer(d, NULL, n * rows * 4);
        tl_gpu_buffer *b1 = gpu_test_buffer(d, NULL, n * 4);
        tl_gpu_rec *r = rec_new(d);
        assert_int_equal(tl_gpu_rmsnorm(r, bx, bw, by, n, rows, 1e-5f), TL_OK);
        assert_int_equal(tl_gpu_rec_download(r, by, 0, y, n * rows * 4), TL_OK);
        run_ok(r);
        double m = (double)((n + 255) / 256 + 9);
        for (int64_t t = 0; t < rows; t++) {
            tl_rmsnorm(x + t * n, w, 1e-5f, n, want);
            for (int64_t i = 0; i < n; i++)
                TL_ASSERT_NEAR(y[t * n + i], want[i], fabs(want[i]) * U * (m / 2 + 14) * 1.01,
                               t * n + i);
            // the same row alone, in place: bit-identical
            assert_int_equal(tl_gpu_rec_upload(r, b1, 0, x + t * n, n * 4), TL_OK);
            assert_int_equal(tl_gpu_rmsnorm(r, b1, bw, b1, n, 1, 1e-5f), TL_OK);
            assert_int_equal(tl_gpu_rec_download(r, b1, 0, alone, n * 4), TL_OK);
            run_ok(r);
            assert_memory_equal(alone, y + t * n, n * 4);
        }
        tl_gpu_rec_destroy(r);
        tl_gpu_buffer_destroy(bx), tl_gpu_buffer_destroy(bw), tl_gpu_buffer_destroy(by);
        tl_gpu_buffer_destroy(b1);
        free(x), free(w), free(y), free(alone), free(want);
    }
}

// ---- RoPE -------------------------------------------------------------------------------------

static void test_rope_exact(void **state)
{
    (void)state;
    tl_gpu_device *d = gpu_test_device();
    enum { N_TOK = 6, N_HEADS = 3, HEAD_DIM = 64, N_TABLE = 5001 };
    static const int32_t pos[N_TOK] = {0, 1, 17, 4095, 5000, 1};
    static const struct {
        float base, scale;
        enum tl_rope_mode mode;
    } cases[] = {{10000.f, 1.f, TL_ROPE_NORMAL},
                 {1000000.f, 1.f, TL_ROPE_NEOX},
                 {10000.f, 0.25f, TL_ROPE_NEOX},
                 {500000.f, 0.125f, TL_ROPE_NORMAL}};
    enum { N = N_TOK * N_HEADS * HEAD_DIM };
    static float x[N], y[N], want[N];
    float *table = malloc((size_t)N_TABLE * HEAD_DIM * 4);
    tl_gpu_buffer *bx = gpu_test_buffer(d, NULL, sizeof(x));
    tl_gpu_buffer *bp = gpu_test_buffer(d, pos, sizeof(pos));
    tl_gpu_buffer *bt = gpu_test_buffer(d, NULL, (size_t)N_TABLE * HEAD_DIM * 4);
    tl_gpu_rec *r = rec_new(d);
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        for (int i = 0; i < N; i++)
            x[i] = tl_test_rnd_f() * 4.f;
        tl_gpu_rope_table_fill(table, N_TABLE, HEAD_DIM, cases[c].base, cases[c].scale);
        assert_int_equal(tl_gpu_rec_upload(r, bt, 0, table, (size_t)N_TABLE * HEAD_DIM * 4), TL_OK);
        assert_int_equal(tl_gpu_rec_upload(r, bx, 0, x, sizeof(x)), TL_OK);
        assert_int_equal(
            tl_gpu_rope(r, bx, N_TOK, N_HEADS, HEAD_DIM, cases[c].mode, bp, bt, N_TABLE), TL_OK);
        assert_int_equal(tl_gpu_rec_download(r, bx, 0, y, sizeof(y)), TL_OK);
        run_ok(r);
        memcpy(want, x, sizeof(x));
        for (int t = 0; t < N_TOK; t++)
            tl_rope(want + t * N_HEADS * HEAD_DIM, N_HEADS, HEAD_DIM, pos[t], cases[c].base,
                    cases[c].scale, cases[c].mode);
        for (int i = 0; i < N; i++)
            if (memcmp(&y[i], &want[i], 4))
                fail_msg("case %zu index %d: %.9g vs CPU %.9g", c, i, y[i], want[i]);
        // tokens 1 and 5 share a position and so share their rotation
        assert_memory_equal(y + 0, x + 0, HEAD_DIM * 4); // position 0 is the identity
    }
    tl_gpu_rec_destroy(r);
    tl_gpu_buffer_destroy(bx), tl_gpu_buffer_destroy(bp), tl_gpu_buffer_destroy(bt);
    free(table);
}

// ---- matmul -----------------------------------------------------------------------------------

struct mm_case {
    enum tl_dtype type;
    int64_t n_in, n_out;
};

// Bytes of one row of n_in values of `type` in the model file's layout.
static size_t row_bytes(enum tl_dtype type, int64_t n_in)
{
    switch (type) {
    case TL_DTYPE_F32:
        return (size_t)n_in * 4;
    case TL_DTYPE_F16:
    case TL_DTYPE_BF16:
        return (size_t)n_in * 2;
    case TL_DTYPE_Q8_0:
        return (size_t)n_in / 32 * sizeof(struct tl_block_q8_0);
    case TL_DTYPE_Q4_K:
        return (size_t)n_in / 256 * 144;
    case TL_DTYPE_Q5_K:
        return (size_t)n_in / 256 * 176;
    case TL_DTYPE_Q6_K:
        return (size_t)n_in / 256 * 210;
    default:
        fail_msg("no row size for %s", tl_dtype_name(type));
        return 0;
    }
}

// W rows in `type` (as a model file holds them) from random f32, and their dequantized f32.
static void make_weight(enum tl_dtype type, int64_t n_in, int64_t n_out, void **bytes,
                        size_t *n_bytes, float **deq)
{
    size_t padded = tl_gpu_matmul_weight_bytes(type, n_in, n_out);
    assert_true(padded > 0);
    unsigned char *b = calloc(1, padded);
    float *f = malloc(n_in * n_out * 4), *row = malloc(n_in * 4);
    size_t rb = row_bytes(type, n_in);
    for (int64_t o = 0; o < n_out; o++) {
        float scale = 0.05f + (float)(o % 5) * 0.3f;
        for (int64_t i = 0; i < n_in; i++)
            row[i] = tl_test_rnd_f() * scale;
        assert_true(tl_quantize_row(type, row, b + o * rb, n_in));
        assert_true(tl_dequantize_row(type, b + o * rb, f + o * n_in, n_in));
    }
    free(row);
    *bytes = b;
    *n_bytes = padded;
    *deq = f;
}

static double gamma_k(double k)
{
    return k * U / (1 - k * U);
}

static void check_matmul(tl_gpu_device *d, const struct mm_case *c)
{
    enum { N_TOK = 7 };
    int64_t n_in = c->n_in, n_out = c->n_out;
    void *wb;
    size_t wbytes;
    float *deq;
    make_weight(c->type, n_in, n_out, &wb, &wbytes, &deq);
    float *x = malloc(N_TOK * n_in * 4), *y = malloc(N_TOK * n_out * 4);
    float *one = malloc(n_out * 4), *cpu = malloc(N_TOK * n_out * 4);
    for (int64_t i = 0; i < N_TOK * n_in; i++)
        x[i] = tl_test_rnd_f() * (i % 97 == 0 ? 8.f : 1.f);
    tl_gpu_buffer *bw = gpu_test_buffer(d, wb, wbytes);
    tl_gpu_buffer *bx = gpu_test_buffer(d, x, N_TOK * n_in * 4);
    tl_gpu_buffer *by = gpu_test_buffer(d, NULL, N_TOK * n_out * 4);
    tl_gpu_buffer *bx1 = gpu_test_buffer(d, NULL, n_in * 4);
    tl_gpu_buffer *by1 = gpu_test_buffer(d, NULL, n_out * 4);
    tl_gpu_rec *r = rec_new(d);
    assert_int_equal(tl_gpu_matmul(r, c->type, bw, n_in, n_out, bx, N_TOK, by), TL_OK);
    assert_int_equal(tl_gpu_rec_download(r, by, 0, y, N_TOK * n_out * 4), TL_OK);
    run_ok(r);

    // the CPU kernel on the same file-layout weight
    struct tl_weight w = {.type = c->type,
                          .n_in = n_in,
                          .n_out = n_out,
                          .row_bytes = row_bytes(c->type, n_in),
                          .data = wb,
                          .layout = TL_WEIGHT_ROWS};
    void *work = tl_aligned_alloc(tl_matmul_work_bytes(&w, N_TOK) + 64);
    tl_matmul(NULL, &w, x, N_TOK, cpu, work);
    tl_aligned_free(work);

    double k = c->type == TL_DTYPE_F32 ? (double)((n_in + 31) / 32)
               : c->type == TL_DTYPE_F16 || c->type == TL_DTYPE_BF16
                   ? 2.0 * (double)((n_in + 63) / 64)
               : c->type == TL_DTYPE_Q8_0 ? 32.0 + (double)((n_in / 32 + 31) / 32) + 1
                                          : 256.0 + (double)((n_in / 256 + 31) / 32) + 1;
    double g_dev = gamma_k(k + 5), g_cpu = gamma_k((double)n_in + 5);
    for (int64_t t = 0; t < N_TOK; t++)
        for (int64_t o = 0; o < n_out; o++) {
            const float *wr = deq + o * n_in, *xr = x + t * n_in;
            double exact = 0, mag = 0, quant = 0;
            for (int64_t i = 0; i < n_in; i++) {
                exact += (double)wr[i] * xr[i];
                mag += fabs((double)wr[i] * xr[i]);
            }
            if (c->type != TL_DTYPE_F32 && c->type != TL_DTYPE_F16 && c->type != TL_DTYPE_BF16)
                for (int64_t b0 = 0; b0 < n_in; b0 += 32) {
                    double amax = 0, wsum = 0;
                    for (int64_t i = b0; i < b0 + 32; i++) {
                        amax = fmax(amax, fabs(xr[i]));
                        wsum += fabs(wr[i]);
                    }
                    quant += wsum * amax / 254.0;
                }
            double got = y[t * n_out + o];
            double tol = 1.01 * g_dev * mag + 1e-30;
            if (!(fabs(got - exact) <= tol))
                fail_msg("%s %lldx%lld tok %lld row %lld: %.9g vs exact %.9g (tol %g)",
                         tl_dtype_name(c->type), (long long)n_in, (long long)n_out, (long long)t,
                         (long long)o, got, exact, tol);
            double tol_cpu = tol + 1.01 * (g_cpu * mag + quant * (1 + 1e-3)) + 1e-30;
            if (!(fabs(got - cpu[t * n_out + o]) <= tol_cpu))
                fail_msg("%s %lldx%lld tok %lld row %lld: %.9g vs CPU %.9g (tol %g)",
                         tl_dtype_name(c->type), (long long)n_in, (long long)n_out, (long long)t,
                         (long long)o, got, (double)cpu[t * n_out + o], tol_cpu);
        }

    // batch invariance: each token alone gives the bits it had inside the batch of 7
    for (int64_t t = 0; t < N_TOK; t++) {
        assert_int_equal(tl_gpu_rec_upload(r, bx1, 0, x + t * n_in, n_in * 4), TL_OK);
        assert_int_equal(tl_gpu_matmul(r, c->type, bw, n_in, n_out, bx1, 1, by1), TL_OK);
        assert_int_equal(tl_gpu_rec_download(r, by1, 0, one, n_out * 4), TL_OK);
        run_ok(r);
        if (memcmp(one, y + t * n_out, n_out * 4))
            fail_msg("%s %lldx%lld: token %lld alone differs from its row in the batch of 7",
                     tl_dtype_name(c->type), (long long)n_in, (long long)n_out, (long long)t);
    }
    tl_gpu_rec_destroy(r);
    tl_gpu_buffer_destroy(bw), tl_gpu_buffer_destroy(bx), tl_gpu_buffer_destroy(by);
    tl_gpu_buffer_destroy(bx1), tl_gpu_buffer_destroy(by1);
    free(wb), free(deq), free(x), free(y), free(one), free(cpu);
}

static void test_matmul_f32(void **state)
{
    (void)state;
    tl_gpu_device *d = gpu_test_device();
    static const struct mm_case cs[] = {
        {TL_DTYPE_F32, 1, 3}, {TL_DTYPE_F32, 172, 37}, {TL_DTYPE_F32, 1100, 65}};
    for (size_t i = 0; i < sizeof(cs) / sizeof(cs[0]); i++)
        check_matmul(d, &cs[i]);
}

static void test_matmul_f16(void **state)
{
    (void)state;
    tl_gpu_device *d = gpu_test_device();
    static const struct mm_case cs[] = {
        {TL_DTYPE_F16, 2, 5}, {TL_DTYPE_F16, 172, 37}, {TL_DTYPE_F16, 2050, 33}};
    for (size_t i = 0; i < sizeof(cs) / sizeof(cs[0]); i++)
        check_matmul(d, &cs[i]);
}

static void test_matmul_bf16(void **state)
{
    (void)state;
    tl_gpu_device *d = gpu_test_device();
    static const struct mm_case cs[] = {
        {TL_DTYPE_BF16, 2, 5}, {TL_DTYPE_BF16, 172, 37}, {TL_DTYPE_BF16, 2050, 33}};
    for (size_t i = 0; i < sizeof(cs) / sizeof(cs[0]); i++)
        check_matmul(d, &cs[i]);
}

static void test_matmul_q8_0(void **state)
{
    (void)state;
    tl_gpu_device *d = gpu_test_device();
    // 64 blocks per row: two per lane; odd row counts exercise the 2-byte block alignment
    static const struct mm_case cs[] = {
        {TL_DTYPE_Q8_0, 32, 1}, {TL_DTYPE_Q8_0, 288, 37}, {TL_DTYPE_Q8_0, 2048, 19}};
    for (size_t i = 0; i < sizeof(cs) / sizeof(cs[0]); i++)
        check_matmul(d, &cs[i]);
}

// K-quants: rows of 1, 9 and 40 super-blocks of 256 (40: two for 8 of the 32 lanes). Q6_K
// super-blocks are 210 bytes, so odd ones start on 2-byte boundaries.
static void test_matmul_q4_k(void **state)
{
    (void)state;
    tl_gpu_device *d = gpu_test_device();
    static const struct mm_case cs[] = {
        {TL_DTYPE_Q4_K, 256, 3}, {TL_DTYPE_Q4_K, 2304, 37}, {TL_DTYPE_Q4_K, 10240, 5}};
    for (size_t i = 0; i < sizeof(cs) / sizeof(cs[0]); i++)
        check_matmul(d, &cs[i]);
}

static void test_matmul_q5_k(void **state)
{
    (void)state;
    tl_gpu_device *d = gpu_test_device();
    static const struct mm_case cs[] = {
        {TL_DTYPE_Q5_K, 256, 3}, {TL_DTYPE_Q5_K, 2304, 37}, {TL_DTYPE_Q5_K, 10240, 5}};
    for (size_t i = 0; i < sizeof(cs) / sizeof(cs[0]); i++)
        check_matmul(d, &cs[i]);
}

static void test_matmul_q6_k(void **state)
{
    (void)state;
    tl_gpu_device *d = gpu_test_device();
    static const struct mm_case cs[] = {
        {TL_DTYPE_Q6_K, 256, 3}, {TL_DTYPE_Q6_K, 2304, 37}, {TL_DTYPE_Q6_K, 10240, 5}};
    for (size_t i = 0; i < sizeof(cs) / sizeof(cs[0]); i++)
        check_matmul(d, &cs[i]);
}

// The embedding lookup: every weight type's rows decoded bit-identically to tl_dequantize_row,
// for repeated and unordered ids; an id outside the table gives zeros.
static void test_get_rows(void **state)
{
    (void)state;
    tl_gpu_device *d = gpu_test_device();
    static const enum tl_dtype types[] = {TL_DTYPE_F32,  TL_DTYPE_F16,  TL_DTYPE_BF16,
                                          TL_DTYPE_Q8_0, TL_DTYPE_Q4_K, TL_DTYPE_Q5_K,
                                          TL_DTYPE_Q6_K};
    enum { N_ROWS = 9, N_TOK = 6 };
    static const int32_t ids[N_TOK] = {3, 0, 8, 3, 5, -1};
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        enum tl_dtype type = types[ti];
        int64_t n = type == TL_DTYPE_Q4_K || type == TL_DTYPE_Q5_K || type == TL_DTYPE_Q6_K ? 512
                    : type == TL_DTYPE_Q8_0                                                 ? 96
                                                                                            : 70;
        void *wb;
        size_t wbytes;
        float *deq;
        make_weight(type, n, N_ROWS, &wb, &wbytes, &deq);
        float *y = malloc(N_TOK * n * 4);
        tl_gpu_buffer *bw = gpu_test_buffer(d, wb, wbytes),
                      *bi = gpu_test_buffer(d, ids, sizeof(ids));
        tl_gpu_buffer *by = gpu_test_buffer(d, NULL, N_TOK * n * 4);
        tl_gpu_rec *r = rec_new(d);
        assert_int_equal(tl_gpu_get_rows(r, type, bw, n, N_ROWS, bi, N_TOK, by), TL_OK);
        assert_int_equal(tl_gpu_rec_download(r, by, 0, y, N_TOK * n * 4), TL_OK);
        run_ok(r);
        for (int t = 0; t < N_TOK; t++)
            for (int64_t i = 0; i < n; i++) {
                float want = ids[t] < 0 ? 0.f : deq[ids[t] * n + i];
                if (memcmp(&y[t * n + i], &want, 4))
                    fail_msg("%s token %d (id %d) value %lld: %.9g vs CPU %.9g",
                             tl_dtype_name(type), t, ids[t], (long long)i, y[t * n + i], want);
            }
        tl_gpu_rec_destroy(r);
        tl_gpu_buffer_destroy(bw), tl_gpu_buffer_destroy(bi), tl_gpu_buffer_destroy(by);
        free(wb), free(deq), free(y);
    }
}

TL_TEST_MAIN(cmocka_unit_test(test_add_mul_exact), cmocka_unit_test(test_swiglu),
             cmocka_unit_test(test_rmsnorm), cmocka_unit_test(test_rope_exact),
             cmocka_unit_test(test_matmul_f32), cmocka_unit_test(test_matmul_f16),
             cmocka_unit_test(test_matmul_bf16), cmocka_unit_test(test_matmul_q8_0),
             cmocka_unit_test(test_matmul_q4_k), cmocka_unit_test(test_matmul_q5_k),
             cmocka_unit_test(test_matmul_q6_k), cmocka_unit_test(test_get_rows))
