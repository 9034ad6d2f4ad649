/*
 * Private to the AVX2 kernel variant (avx2_matmul.c, _attn.c, _ops.c, _rows.c, _quants.c): the
 * inline helpers those files share (tail masks and masked loads/stores, fixed-order horizontal sum
 * and max, the vectorized exp), the packed float tile shape that the op table publishes as x_tile,
 * and the tl__avx2_* functions one file defines for another. Include it only from
 * src/kernels/x86/avx2*.c: the Makefile compiles exactly those files with -mavx2 -mfma -mf16c
 * (checked below).
 *
 * The horizontal sum is part of the determinism contract: every caller sums lanes through the
 * same function, in the same order, so a value never depends on which file or tile reduced it.
 *
 * Thread model: pure functions over caller-owned memory; re-entrant.
 */
#ifndef TL_KERNELS_X86_AVX2_IMPL_H
#define TL_KERNELS_X86_AVX2_IMPL_H

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "avx2_impl.h needs -mavx2 -mfma -mf16c: include it only from src/kernels/x86/avx2*.c"
#endif

#include "kernels/kernels_impl.h"

#include <immintrin.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

// ---- helpers ----------------------------------------------------------------------------------

static ALWAYS_INLINE __m256i tail_mask8(int64_t n)
{
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n < 8 ? n : 8)), idx);
}

static ALWAYS_INLINE __m256 load_tail(const float *p, int64_t n)
{
    return _mm256_maskload_ps(p, tail_mask8(n));
}

static ALWAYS_INLINE void store_tail(float *p, int64_t n, __m256 v)
{
    _mm256_maskstore_ps(p, tail_mask8(n), v);
}

// Fixed-order horizontal sum.
static ALWAYS_INLINE float hsum256(__m256 v)
{
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

static ALWAYS_INLINE float hmax256(__m256 v)
{
    __m128 b = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    b = _mm_max_ps(b, _mm_movehl_ps(b, b));
    b = _mm_max_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

static ALWAYS_INLINE __m256 exp256(__m256 x)
{
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f)); // NaN -> -87.3
    x = _mm256_min_ps(x, _mm256_set1_ps(88.3f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
    __m256 p = _mm256_set1_ps(1.f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
    __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// ---- shared tile shape ------------------------------------------------------------------------

// The packed F32/F16/BF16 tile (avx2_matmul.c: GH halves of 8 rows x GT tokens). GT is also the
// op table's x_tile (avx2_ops.c): kernels.c interleaves the activations in tiles of GT tokens
// for it. The -D hooks let the benchmark try other shapes without editing the files.
#ifndef TL_AVX2_GH
#define TL_AVX2_GH 2
#define TL_AVX2_GT 6
#endif

// ---- functions shared across the AVX2 files ---------------------------------------------------

// avx2_matmul.c: the op table's quantize_x, row_align and matmul_rows.
void tl__avx2_quantize_x(const float *x, int64_t n, void *dst);
int tl__avx2_row_align(enum tl_dtype type);
void tl__avx2_matmul_rows(const struct tl__mm *m, int64_t r0, int64_t r1);

// avx2_attn.c: the op table's attn_head.
void tl__avx2_attn_head(const struct tl_kv_layer *kv, const int32_t *block_table, int64_t lo,
                        int64_t n_ctx, int kv_head, const float *q, float scale, float softcap,
                        float *out, float *scores, float *acc);
// avx2_attn.c: the op table's quantize_q8_0 (the Q8_0 KV store).
void tl__avx2_quantize_q8_0(const float *src, struct tl_block_q8_0 *dst, int64_t n);

// avx2_rows.c: the op table's row-wise ops and f32 -> f16 conversion.
void tl__avx2_rmsnorm(const float *x, const float *w, float eps, int64_t n, float *y);
void tl__avx2_swiglu(const float *gate, const float *up, float *out, int64_t n);
void tl__avx2_add(float *y, const float *x, int64_t n);
void tl__avx2_softmax(float *x, int64_t n);
void tl__avx2_exp_sub(const float *x, float m, float *out, int64_t n);
void tl__avx2_f32_to_f16(const float *src, uint16_t *dst, int64_t n);
// avx2_rows.c, also used by attention: the maximum of n values; and x[i] = exp(x[i] - mx) in
// place, returning the sum (8 lane sums in order, then hsum256).
float tl__avx2_max_of(const float *x, int64_t n);
float tl__avx2_exp_sum(float *x, int64_t n, float mx);

#endif
