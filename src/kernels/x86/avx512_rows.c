/*
 * The row-wise ops of the AVX-512 kernel variant (F, BW, VL, DQ, VNNI; compiled with those -m
 * flags and only called when the CPU has them): rmsnorm, swiglu, add, softmax, exp_sub, the
 * f32 -> f16 conversion, and the exp-sum / maximum passes that attention (avx512_attn.c) shares.
 * A leaf of the AVX-512 files: avx512_ops.c puts these ops in the op table, and nothing here
 * calls back.
 *
 * Elementwise ops use a vectorized exp (exp512: Cody-Waite reduction, degree-7 polynomial,
 * scalef), accurate to about 1 ulp; the sums they return are taken in a fixed order.
 *
 * Thread model: pure functions over caller-owned memory; re-entrant.
 */
#include "kernels/x86/avx512_impl.h"

#include <math.h>

// ---- row-wise ops -----------------------------------------------------------------------------

void tl__avx512_rmsnorm(const float *x, const float *w, float eps, int64_t n, float *y)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
        a0 = _mm512_fmadd_ps(v0, v0, a0);
        a1 = _mm512_fmadd_ps(v1, v1, a1);
    }
    for (; i < n; i += 16) {
        __m512 v = _mm512_maskz_loadu_ps(tail_mask16(n - i), x + i);
        a0 = _mm512_fmadd_ps(v, v, a0);
    }
    float ss = hsum512(_mm512_add_ps(a0, a1));
    __m512 s = _mm512_set1_ps((float)(1.0 / sqrt((double)ss / (double)n + eps)));
    for (i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask16(n - i);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), s);
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + i)));
    }
}

void tl__avx512_swiglu(const float *gate, const float *up, float *out, int64_t n)
{
    const __m512 one = _mm512_set1_ps(1.f);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask16(n - i);
        __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
        __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
        __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, up + i)));
    }
}

void tl__avx512_add(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask16(n - i);
        __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i), _mm512_maskz_loadu_ps(m, x + i));
        _mm512_mask_storeu_ps(y + i, m, v);
    }
}

// exp(x - max) in place; returns the sum (fixed order: 16 lane sums, then hsum512).
float tl__avx512_exp_sum(float *x, int64_t n, float mx)
{
    __m512 vmx = _mm512_set1_ps(mx), sum = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask16(n - i);
        __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vmx));
        e = _mm512_maskz_mov_ps(m, e);
        sum = _mm512_add_ps(sum, e);
        _mm512_mask_storeu_ps(x + i, m, e);
    }
    return hsum512(sum);
}

float tl__avx512_max_of(const float *x, int64_t n)
{
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int64_t i = 0; i < n; i += 16)
        mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(mx, tail_mask16(n - i), x + i));
    return _mm512_reduce_max_ps(mx);
}

static void scale_by(float *x, int64_t n, float s)
{
    __m512 v = _mm512_set1_ps(s);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask16(n - i);
        _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), v));
    }
}

void tl__avx512_exp_sub(const float *x, float m, float *out, int64_t n)
{
    __m512 vm = _mm512_set1_ps(m);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm));
        _mm512_mask_storeu_ps(out + i, k, e);
    }
}

void tl__avx512_softmax(float *x, int64_t n)
{
    if (n <= 0) return;
    float sum = tl__avx512_exp_sum(x, n, tl__avx512_max_of(x, n));
    scale_by(x, n, 1.f / sum);
}

// ---- conversions ------------------------------------------------------------------------------

// F16C rounds to nearest even like tl_f32_to_fp16 (the tests compare them over all inputs).
// The KV store's conversion: its rows go to memory that is usually not in any cache. Converting
// into a register and storing it whole (a masked store only for the tail) measured ~2x faster
// per cold 1.5 KiB row on AMD Zen 4 than what the compiler makes of a masked store of the
// conversion (vcvtps2ph straight to memory under a mask); the empty asm keeps them apart.
void tl__avx512_f32_to_f16(const float *src, uint16_t *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        __asm__("" : "+v"(h));
        _mm256_storeu_si256((__m256i *)(dst + i), h);
    }
    if (i < n) {
        __mmask16 m = tail_mask16(n - i);
        __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), _MM_FROUND_TO_NEAREST_INT);
        __asm__("" : "+v"(h));
        _mm256_mask_storeu_epi16(dst + i, m, h);
    }
}
