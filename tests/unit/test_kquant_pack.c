/*
 * Tests for the packed K-quants (src/kernels/kquant_pack.c, x86/avx2_kquant.c,
 * x86/avx512_kquant.c): tl_weight_prepare's 16-row layout of Q4_K, Q5_K and Q6_K decoded here
 * from the byte positions documented in quants.h (written out independently of the packer)
 * gives exactly the values tl_dequantize_row gives for the file rows; every ISA's matmul over
 * the packed layout is bit-identical to the scalar reference on the file layout, for odd shapes
 * (partial last groups), batches of 1..40 and 97 tokens in rotated slots and 1..3 threads (the
 * determinism contract); zero, huge and tiny activations; shape errors on prepare.
 */
#include "tl_test.h"

#include "core/alloc.h"
#include "core/error.h"
#include "core/pool.h"
#include "kernels/kernels.h"
#include "kernels/quants.h"

#include <math.h>
#include <string.h>

static const char *const isas[] = {"scalar", "avx2", "avx512"};
enum { N_ISA = 3 };
static const enum tl_dtype ktypes[] = {TL_DTYPE_Q4_K, TL_DTYPE_Q5_K, TL_DTYPE_Q6_K};
enum { N_KTYPES = 3 };

// A file-layout weight of random rows (some rows scaled up or down, so the f16 scales vary
// widely) and its packed copy.
struct kw {
    struct tl_weight file, packed;
    void *rows, *owned;
};

static void kw_make(struct kw *k, enum tl_dtype type, int64_t n_out, int64_t n_in)
{
    size_t rb;
    assert_true(tl_dtype_row_bytes(type, n_in, &rb));
    k->rows = malloc(rb * (size_t)n_out); // exact size: ASan catches reads past the last row
    float *row = malloc(sizeof(float) * (size_t)n_in);
    assert_non_null(k->rows);
    for (int64_t r = 0; r < n_out; r++) {
        float scale = r % 7 == 3 ? 50.f : r % 7 == 5 ? 1e-3f : 1.f;
        for (int64_t i = 0; i < n_in; i++)
            row[i] =
                tl_test_rnd_f() * scale + (r % 3 == 1 ? 0.3f * scale : 0.f); // some skewed rows
        assert_true(tl_quantize_row(type, row, (char *)k->rows + rb * (size_t)r, n_in));
    }
    free(row);
    k->file = (struct tl_weight){.type = type, .n_in = n_in, .n_out = n_out, .row_bytes = rb,
                                 .data = k->rows};
    k->packed = k->file;
    assert_int_equal(tl_weight_prepare(&k->packed, &k->owned), TL_OK);
    assert_non_null(k->owned);
    assert_int_equal(k->packed.layout, TL_WEIGHT_PACKED);
    assert_int_equal(tl_weight_data_bytes(&k->packed),
                     (size_t)((n_out + 15) / 16) * tl__kq_group_bytes(type, n_in));
}

static void kw_free(struct kw *k)
{
    free(k->rows);
    tl_aligned_free(k->owned);
}

// ---- the layout -------------------------------------------------------------------------------

static float f16_at(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return tl_fp16_to_f32(h);
}

// Value v (< 256) of row i of a packed super-block record, from the byte positions of the
// quants.h comment: offsets qs 0, then Q4_K/Q5_K sc 2048, mn 2176, d 2304, dmin 2336, Q5_K qh
// 2368; Q6_K qh 2048, sc 3072, d 3328.
static float packed_value(enum tl_dtype type, const uint8_t *rec, int i, int v)
{
    const int j = v / 32, l = v % 32; // 32-block and position in it
    const int c = j / 2, k = l / 4, e = l % 4;
    uint8_t byte = rec[(c * 8 + k) * 64 + 4 * i + e];
    int q = j % 2 ? byte >> 4 : byte & 15;
    if (type == TL_DTYPE_Q6_K) {
        const int p = k / 4, f = k % 4;
        q |= ((rec[2048 + (j * 2 + p) * 64 + 4 * i + e] >> (2 * f)) & 3) << 4;
        float D = f16_at(rec + 3328 + 2 * i) * (float)(int8_t)rec[3072 + 16 * (v / 16) + i];
        return D * (float)(q - 32);
    }
    if (type == TL_DTYPE_Q5_K) {
        const int bit = 4 * i + e;
        if (rec[2368 + (j * 8 + k) * 8 + bit / 8] >> (bit % 8) & 1) q |= 16;
    }
    float D = f16_at(rec + 2304 + 2 * i) * (float)rec[2048 + 16 * j + i];
    float M = -(f16_at(rec + 2336 + 2 * i) * (float)rec[2176 + 16 * j + i]);
    float dq = D * (float)q; // two statements: no compiler may fuse them (dequantize does not)
    return dq + M;
}

static void test_packed_layout_matches_dequantized_rows(void **state)
{
    (void)state;
    for (int t = 0; t < N_KTYPES; t++) {
        const int64_t n_in = 768, n_out = 37; // 3 super-blocks, a partial last group
        struct kw k;
        kw_make(&k, ktypes[t], n_out, n_in);
        const size_t sbb = tl__kq_sb_bytes(ktypes[t]);
        assert_int_equal(sbb % 64, 0);
        float *deq = malloc(sizeof(float) * (size_t)n_in);
        for (int64_t r = 0; r < n_out; r++) {
            assert_true(tl_dequantize_row(ktypes[t], (char *)k.rows + k.file.row_bytes * (size_t)r,
                                          deq, n_in));
            for (int64_t sb = 0; sb < n_in / 256; sb++) {
                const uint8_t *rec = (const uint8_t *)k.packed.data +
                                     (size_t)((r / 16) * (n_in / 256) + sb) * sbb;
                for (int v = 0; v < 256; v++) {
                    float got = packed_value(ktypes[t], rec, (int)(r % 16), v);
                    if (got != deq[sb * 256 + v])
                        fail_msg("%s row %lld value %lld: packed %.9g, file %.9g",
                                 tl_dtype_name(ktypes[t]), (long long)r, (long long)(sb * 256 + v),
                                 got, deq[sb * 256 + v]);
                }
            }
        }
        // padding rows 37..47 of the last group are zero (d = 0)
        const uint8_t *last = (const uint8_t *)k.packed.data + (size_t)(2 * (n_in / 256)) * sbb;
        for (int i = 37 % 16; i < 16; i++)
            for (int v = 0; v < 256; v++)
                assert_true(packed_value(ktypes[t], last, i, v) == 0.f);
        free(deq);
        kw_free(&k);
    }
}

// ---- matmul: bit-identical to the reference ---------------------------------------------------

// Compares every ISA's packed matmul of tokens x (rotated through the batch slots by `rot`)
// with the file-layout reference, bit for bit.
static void check_packed(struct kw *k, const float *x, int64_t n_tok, int rot,
                         struct tl_pool **pools, int n_pools)
{
    const int64_t n_in = k->file.n_in, n_out = k->file.n_out;
    float *xb = malloc(sizeof(float) * (size_t)(n_tok * n_in));
    float *want = malloc(sizeof(float) * (size_t)(n_tok * n_out));
    float *got = malloc(sizeof(float) * (size_t)(n_tok * n_out));
    for (int64_t i = 0; i < n_tok; i++)
        memcpy(xb + i * n_in, x + ((i + rot) % n_tok) * n_in, sizeof(float) * (size_t)n_in);
    size_t wb = tl_matmul_work_bytes(&k->packed, n_tok);
    assert_int_equal(wb, tl_matmul_work_bytes(&k->file, n_tok));
    void *work = tl_aligned_alloc(wb + 64);
    tl__qx_ref_matmul(&k->file, xb, n_tok, want, work);
    for (int s = 0; s < N_ISA; s++) {
        if (!tl_kernels_force_isa(isas[s])) continue;
        for (int p = 0; p < n_pools; p++) {
            memset(got, 0xff, sizeof(float) * (size_t)(n_tok * n_out));
            tl_matmul(pools[p], &k->packed, xb, n_tok, got, work);
            for (int64_t i = 0; i < n_tok * n_out; i++)
                if (memcmp(&got[i], &want[i], sizeof(float)))
                    fail_msg("%s %s n_in %lld n_out %lld n_tok %lld (slot rotation %d, pool %d): "
                             "token %lld row %lld: %.9g, reference %.9g",
                             isas[s], tl_dtype_name(k->file.type), (long long)n_in,
                             (long long)n_out, (long long)n_tok, rot, p, (long long)(i / n_out),
                             (long long)(i % n_out), got[i], want[i]);
        }
    }
    tl_aligned_free(work);
    free(xb), free(want), free(got);
}

static void fill(float *x, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = tl_test_rnd_f() * scale;
}

static void test_packed_bit_identical_on_every_isa(void **state)
{
    (void)state;
    struct tl_pool *pool = tl_pool_create(2);
    assert_non_null(pool);
    const int64_t ins[] = {256, 512, 768, 1280};
    const int64_t outs[] = {1, 3, 16, 37, 64};
    const int64_t toks[] = {1, 2, 3, 4, 7, 8, 15, 16, 17, 33};
    for (int t = 0; t < N_KTYPES; t++)
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 5; b++) {
                struct kw k;
                kw_make(&k, ktypes[t], outs[b], ins[a]);
                float *x = malloc(sizeof(float) * (size_t)(33 * ins[a]));
                fill(x, 33 * ins[a], 1.f);
                for (int c = 0; c < 10; c++)
                    check_packed(&k, x, toks[c], c, &pool, 1);
                free(x);
                kw_free(&k);
            }
    tl_pool_destroy(pool);
}

// Activations with all-zero blocks, huge values (|x| ~ 1e30) and tiny ones (products D * dx
// below the normal range). (Below ~4e-37 the activation quantizers themselves disagree between
// ISAs: 127 / amax overflows; not a packing matter.)
static void test_packed_extreme_activations(void **state)
{
    (void)state;
    struct tl_pool *pool = tl_pool_create(2);
    assert_non_null(pool);
    const int64_t n_in = 512, n_tok = 6;
    float *x = calloc((size_t)(n_tok * n_in), sizeof(float));
    fill(x + n_in, n_in, 1e30f);
    fill(x + 2 * n_in, n_in, 1e-35f);
    fill(x + 3 * n_in, n_in, 1.f);
    for (int64_t i = 0; i < 64; i++)
        x[3 * n_in + 100 + i] = 0.f; // zero blocks in a normal row
    for (int64_t i = 0; i < n_in; i++)
        x[4 * n_in + i] = (i % 32 == 5) ? 3.f : 0.f, x[5 * n_in + i] = -1.f;
    for (int t = 0; t < N_KTYPES; t++) {
        struct kw k;
        kw_make(&k, ktypes[t], 21, n_in);
        check_packed(&k, x, n_tok, 0, &pool, 1);
        kw_free(&k);
    }
    free(x);
    tl_pool_destroy(pool);
}

// The determinism contract on the packed layout: whatever the batch (1..40, 97 tokens), the
// slot a token sits in and the thread count (1..3), each output equals the reference's.
static void test_packed_deterministic_across_batch_and_threads(void **state)
{
    (void)state;
    struct tl_pool *pools[3];
    for (int p = 0; p < 3; p++)
        assert_non_null(pools[p] = tl_pool_create(p + 1));
    for (int t = 0; t < N_KTYPES; t++) {
        struct kw k;
        kw_make(&k, ktypes[t], 53, 256);
        float *x = malloc(sizeof(float) * 40 * 256);
        fill(x, 40 * 256, 2.f);
        for (int n = 1; n <= 40; n++)
            check_packed(&k, x, n, n % 5, pools, 3);
        free(x);
        kw_free(&k);
        kw_make(&k, ktypes[t], 45, 2048);
        x = malloc(sizeof(float) * 97 * 2048);
        fill(x, 97 * 2048, 1.f);
        check_packed(&k, x, 97, 11, pools, 3);
        free(x);
        kw_free(&k);
    }
    for (int p = 0; p < 3; p++)
        tl_pool_destroy(pools[p]);
}

// tl_matmul_multi over packed K-quants mixed with a file-layout Q4_0 weight (as a Q4_K_M layer
// mixes Q4_K and Q6_K) gives the bits of separate tl_matmul calls, on every ISA and 1..3 threads.
static void test_matmul_multi_matches_separate_calls(void **state)
{
    (void)state;
    struct tl_pool *pools[3];
    for (int p = 0; p < 3; p++)
        assert_non_null(pools[p] = tl_pool_create(p + 1));
    const int64_t n_in = 512, outs[4] = {48, 16, 37, 20};
    struct kw k[3];
    for (int t = 0; t < 3; t++)
        kw_make(&k[t], ktypes[t], outs[t], n_in);
    size_t rb;
    assert_true(tl_dtype_row_bytes(TL_DTYPE_Q4_0, n_in, &rb));
    void *rows0 = malloc(rb * (size_t)outs[3]);
    float *row = malloc(sizeof(float) * (size_t)n_in);
    for (int64_t r = 0; r < outs[3]; r++) {
        fill(row, n_in, 1.f);
        assert_true(tl_quantize_row(TL_DTYPE_Q4_0, row, (char *)rows0 + rb * (size_t)r, n_in));
    }
    free(row);
    struct tl_weight w0 = {.type = TL_DTYPE_Q4_0, .n_in = n_in, .n_out = outs[3], .row_bytes = rb,
                           .data = rows0};
    const struct tl_weight *ws[4] = {&k[0].packed, &k[1].packed, &k[2].packed, &w0};
    const int64_t toks[] = {1, 3, 19};
    for (int c = 0; c < 3; c++) {
        const int64_t n_tok = toks[c];
        float *x = malloc(sizeof(float) * (size_t)(n_tok * n_in));
        fill(x, n_tok * n_in, 1.f);
        size_t wb = 0;
        for (int i = 0; i < 4; i++)
            if (tl_matmul_work_bytes(ws[i], n_tok) > wb) wb = tl_matmul_work_bytes(ws[i], n_tok);
        void *work = tl_aligned_alloc(wb);
        float *want[4], *got[4];
        for (int i = 0; i < 4; i++) {
            want[i] = malloc(sizeof(float) * (size_t)(n_tok * outs[i]));
            got[i] = malloc(sizeof(float) * (size_t)(n_tok * outs[i]));
        }
        for (int s = 0; s < N_ISA; s++) {
            if (!tl_kernels_force_isa(isas[s])) continue;
            for (int i = 0; i < 4; i++)
                tl_matmul(pools[0], ws[i], x, n_tok, want[i], work);
            for (int p = 0; p < 3; p++) {
                for (int i = 0; i < 4; i++)
                    memset(got[i], 0xff, sizeof(float) * (size_t)(n_tok * outs[i]));
                tl_matmul_multi(pools[p], 4, ws, x, n_tok, got, work);
                for (int i = 0; i < 4; i++)
                    if (memcmp(got[i], want[i], sizeof(float) * (size_t)(n_tok * outs[i])))
                        fail_msg("%s n_tok %lld, %d threads: weight %d (%s) differs", isas[s],
                                 (long long)n_tok, p + 1, i, tl_dtype_name(ws[i]->type));
            }
        }
        for (int i = 0; i < 4; i++)
            free(want[i]), free(got[i]);
        tl_aligned_free(work);
        free(x);
    }
    for (int t = 0; t < 3; t++)
        kw_free(&k[t]);
    free(rows0);
    for (int p = 0; p < 3; p++)
        tl_pool_destroy(pools[p]);
}

static void test_prepare_errors_and_other_types(void **state)
{
    (void)state;
    // a row length that is not a whole number of super-blocks cannot be packed
    uint8_t buf[4 * 144] = {0};
    struct tl_weight w = {.type = TL_DTYPE_Q4_K, .n_in = 300, .n_out = 2, .row_bytes = 144,
                          .data = buf};
    void *owned = (void *)1;
    assert_int_not_equal(tl_weight_prepare(&w, &owned), TL_OK);
    assert_null(owned);
    assert_int_equal(w.layout, TL_WEIGHT_ROWS);
    assert_ptr_equal(w.data, buf);
    // types without a packed layout here stay as they are
    w = (struct tl_weight){.type = TL_DTYPE_Q4_0, .n_in = 32, .n_out = 2, .row_bytes = 18,
                           .data = buf};
    assert_int_equal(tl_weight_prepare(&w, &owned), TL_OK);
    assert_null(owned);
    assert_int_equal(w.layout, TL_WEIGHT_ROWS);
    // preparing twice leaves the packed weight alone
    struct kw k;
    kw_make(&k, TL_DTYPE_Q6_K, 5, 256);
    const void *before = k.packed.data;
    assert_int_equal(tl_weight_prepare(&k.packed, &owned), TL_OK);
    assert_null(owned);
    assert_ptr_equal(k.packed.data, before);
    kw_free(&k);
}

TL_TEST_MAIN(cmocka_unit_test(test_packed_layout_matches_dequantized_rows),
             cmocka_unit_test(test_packed_bit_identical_on_every_isa),
             cmocka_unit_test(test_packed_extreme_activations),
             cmocka_unit_test(test_packed_deterministic_across_batch_and_threads),
             cmocka_unit_test(test_matmul_multi_matches_separate_calls),
             cmocka_unit_test(test_prepare_errors_and_other_types))
