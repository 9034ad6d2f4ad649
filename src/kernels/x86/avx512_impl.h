/*
 * Private to the AVX-512 kernel variant (avx512_matmul*.c, _attn.c, _ops.c, _rows.c, _quants.c):
 * the inline helpers those files share (tail masks, fixed-order horizontal sums, the vectorized
 * exp), the packed float tile shape that the op table publishes as x_tile, and the tl__avx512_*
 * functions one file defines for another. Include it only from src/kernels/x86/avx512*.c: the
 * Makefile compiles exactly those files with the AVX-512 -m flags (checked below).
 *
 * The horizontal sums are part of the determinism contract: every caller sums lanes through
 * these same functions, in the same order, so a value never depends on which file or tile shape
 * reduced it.
 *
 * Thread model: pure functions over caller-owned memory; re-entrant.
 */
#ifndef TL_KERNELS_X86_AVX512_IMPL_H
#define TL_KERNELS_X86_AVX512_IMPL_H

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) ||                   \
    !defined(__AVX512DQ__) || !defined(__AVX512VNNI__)
#error "avx512_impl.h needs the AVX-512 flags: include it only from src/kernels/x86/avx512*.c"
#endif

#include "kernels/kernels_impl.h"

#include <immintrin.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

// ---- helpers ----------------------------------------------------------------------------------

static ALWAYS_INLINE __mmask16 tail_mask16(int64_t n)
{
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
}

// Fixed-order horizontal sum (the same for every caller: part of the determinism contract).
static ALWAYS_INLINE float hsum512(__m512 v)
{
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

// exp(x) for 16 lanes; NaN maps to 0 (inputs here are differences from a maximum).
static ALWAYS_INLINE __m512 exp512(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-200.f)); // NaN -> -200; far below the denormals
    x = _mm512_min_ps(x, _mm512_set1_ps(100.f));  // beyond 88.73 the result is inf anyway
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
    __m512 p = _mm512_set1_ps(1.f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
    return _mm512_scalef_ps(p, n);
}

// r[i] = sum of the lanes of v[i], for 16 vectors. Every output is summed in the same order:
// per 128-bit lane (x0 + x2) + (x1 + x3), then (L0 + L1) + (L2 + L3); hsum_tree() below gives
// the identical value for one vector, so results do not depend on how vectors are grouped.
static ALWAYS_INLINE __m512 reduce16(const __m512 *v)
{
    __m512 t[8], u[4], w[2];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
        t[k] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * k], v[2 * k + 1]),
                             _mm512_unpackhi_ps(v[2 * k], v[2 * k + 1]));
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        __m512d a = _mm512_castps_pd(t[2 * k]), b = _mm512_castps_pd(t[2 * k + 1]);
        u[k] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
#pragma GCC unroll 2
    for (int k = 0; k < 2; k++)
        w[k] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * k], u[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(u[2 * k], u[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// The sum of one vector's lanes in reduce16's order.
static ALWAYS_INLINE float hsum_tree(__m512 v)
{
    __m512 a = _mm512_add_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(1, 0, 3, 2)));
    a = _mm512_add_ps(a, _mm512_permute_ps(a, _MM_SHUFFLE(2, 3, 0, 1)));
    a = _mm512_add_ps(a, _mm512_shuffle_f32x4(a, a, _MM_SHUFFLE(2, 3, 0, 1)));
    a = _mm512_add_ps(a, _mm512_shuffle_f32x4(a, a, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm512_cvtss_f32(a);
}

// Sums each accumulator of an R x T tile and stores it at y[j * y_stride + i]. A 4-row tile
// reduces 4 tokens x 4 rows at once (one transpose-add tree for 16 vectors); other shapes sum
// vector by vector in the same order, so every element gets the same value in every shape.
// ---- shared tile shape ------------------------------------------------------------------------

// The packed F32/F16/BF16 tile (avx512_matmul_packed.c: GR groups of 16 rows x GT tokens). GT is
// also the op table's x_tile (avx512_ops.c): kernels.c interleaves the activations in tiles of GT
// tokens for it. The -D hooks let the benchmark try other shapes without editing the files.
#ifndef TL_AVX512_GR
#define TL_AVX512_GR 2
#define TL_AVX512_GT 12
#endif

// Tiles computed over k-blocks park their accumulators between blocks (avx512_matmul.c,
// avx512_matmul_packed.c): ACC_LOAD resumes from the parked values, ACC_REDUCE marks the last
// k-block, which stores y.
enum { ACC_LOAD = 1, ACC_REDUCE = 2 };

// ---- functions shared across the AVX-512 files ------------------------------------------------

// avx512_matmul.c: the op table's quantize_x, row_align and matmul_rows.
void tl__avx512_quantize_x(const float *x, int64_t n, void *dst);
int tl__avx512_row_align(enum tl_dtype type);
void tl__avx512_matmul_rows(const struct tl__mm *m, int64_t r0, int64_t r1);
// avx512_matmul_packed.c: matmul_rows over packed Q8_0 weights and packed F32/F16/BF16 weights.
void tl__avx512_qp_rows(const struct tl__mm *m, int64_t r0, int64_t r1);
void tl__avx512_gp_rows(const struct tl__mm *m, int64_t r0, int64_t r1);

// avx512_attn.c: the op table's attn_head, attn_kv_pairs and attn_kv.
void tl__avx512_attn_head(const struct tl_kv_layer *kv, const int32_t *block_table, int64_t lo,
                          int64_t n_ctx, int kv_head, const float *q, float scale, float softcap,
                          float *out, float *scores, float *acc);
int tl__avx512_attn_kv_pairs(int head_dim);
void tl__avx512_attn_kv(const struct tl_kv_layer *kv, const int32_t *block_table, int64_t n_ctx0,
                        int n_q, int kvh0, int n_kvh, int group, const float *q, size_t q_stride,
                        float scale, int64_t window, float softcap, float *out);
// avx512_attn.c: the op table's quantize_q8_0 (the Q8_0 KV store).
void tl__avx512_quantize_q8_0(const float *src, struct tl_block_q8_0 *dst, int64_t n);

// avx512_rows.c: the op table's row-wise ops and f32 -> f16 conversion.
void tl__avx512_rmsnorm(const float *x, const float *w, float eps, int64_t n, float *y);
void tl__avx512_swiglu(const float *gate, const float *up, float *out, int64_t n);
void tl__avx512_add(float *y, const float *x, int64_t n);
void tl__avx512_softmax(float *x, int64_t n);
void tl__avx512_exp_sub(const float *x, float m, float *out, int64_t n);
void tl__avx512_f32_to_f16(const float *src, uint16_t *dst, int64_t n);
// avx512_rows.c, also used by attention: x[i] = exp(x[i] - mx) in place, returning the sum
// (fixed order: 16 lane sums, then hsum512); and the maximum of n values.
float tl__avx512_exp_sum(float *x, int64_t n, float mx);
float tl__avx512_max_of(const float *x, int64_t n);

#endif
