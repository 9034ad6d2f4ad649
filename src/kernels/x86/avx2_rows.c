/*
 * The row-wise ops of the AVX2 kernel variant (AVX2 + FMA + F16C; compiled with those -m flags
 * and only called when the CPU has them): rmsnorm, swiglu, add, softmax, exp_sub, the f32 -> f16
 * conversion, and the maximum / exp-sum passes that attention (avx2_attn.c) shares. A leaf of
 * the AVX2 files: avx2_ops.c puts these ops in the op table, and nothing here calls back.
 *
 * Elementwise ops use a vectorized exp (exp256: Cody-Waite reduction, degree-7 polynomial),
 * accurate to about 1 ulp over the clamped range [-87.3, 88.3].
 *
 * Thread model: pure functions over caller-owned memory; re-entrant.
 */
#include "kernels/x86/avx2_impl.h"

#include <math.h>

// ---- row-wise ops -----------------------------------------------------------------------------

void tl__avx2_rmsnorm(const float *x, const float *w, float eps, int64_t n, float *y)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
        a0 = _mm256_fmadd_ps(v0, v0, a0);
        a1 = _mm256_fmadd_ps(v1, v1, a1);
    }
    for (; i < n; i += 8) {
        __m256 v = load_tail(x + i, n - i);
        a0 = _mm256_fmadd_ps(v, v, a0);
    }
    float ss = hsum256(_mm256_add_ps(a0, a1));
    __m256 s = _mm256_set1_ps((float)(1.0 / sqrt((double)ss / (double)n + eps)));
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(
            y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), s), _mm256_loadu_ps(w + i)));
    if (i < n)
        store_tail(
            y + i, n - i,
            _mm256_mul_ps(_mm256_mul_ps(load_tail(x + i, n - i), s), load_tail(w + i, n - i)));
}

static ALWAYS_INLINE __m256 silu_mul(__m256 g, __m256 u)
{
    __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.f), e)), u);
}

void tl__avx2_swiglu(const float *gate, const float *up, float *out, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, silu_mul(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n)
        store_tail(out + i, n - i, silu_mul(load_tail(gate + i, n - i), load_tail(up + i, n - i)));
}

void tl__avx2_add(float *y, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
    for (; i < n; i++)
        y[i] += x[i];
}

float tl__avx2_max_of(const float *x, int64_t n)
{
    __m256 mx = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        mx = _mm256_max_ps(mx, _mm256_loadu_ps(x + i));
    float m = hmax256(mx);
    for (; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

// exp(x - mx) in place; returns the sum (8 lane sums in order, then hsum256).
float tl__avx2_exp_sum(float *x, int64_t n, float mx)
{
    __m256 vmx = _mm256_set1_ps(mx), sum = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmx));
        sum = _mm256_add_ps(sum, e);
        _mm256_storeu_ps(x + i, e);
    }
    if (i < n) {
        __m256i mask = tail_mask8(n - i);
        __m256 e = exp256(_mm256_sub_ps(load_tail(x + i, n - i), vmx));
        e = _mm256_and_ps(e, _mm256_castsi256_ps(mask));
        sum = _mm256_add_ps(sum, e);
        _mm256_maskstore_ps(x + i, mask, e);
    }
    return hsum256(sum);
}

// exp256 clamps its input at -87.3, so differences below that (and -inf, impossible tokens)
// are zeroed explicitly: a softmax numerator of -inf must be exactly 0.
static ALWAYS_INLINE __m256 exp_sub8(__m256 x, __m256 vm)
{
    __m256 d = _mm256_sub_ps(x, vm);
    __m256 keep = _mm256_cmp_ps(d, _mm256_set1_ps(-87.3f), _CMP_GT_OQ);
    return _mm256_and_ps(exp256(d), keep);
}

void tl__avx2_exp_sub(const float *x, float m, float *out, int64_t n)
{
    __m256 vm = _mm256_set1_ps(m);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, exp_sub8(_mm256_loadu_ps(x + i), vm));
    if (i < n)
        _mm256_maskstore_ps(out + i, tail_mask8(n - i), exp_sub8(load_tail(x + i, n - i), vm));
}

void tl__avx2_softmax(float *x, int64_t n)
{
    if (n <= 0) return;
    float inv = 1.f / tl__avx2_exp_sum(x, n, tl__avx2_max_of(x, n));
    __m256 v = _mm256_set1_ps(inv);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), v));
    for (; i < n; i++)
        x[i] *= inv;
}

// ---- conversions ------------------------------------------------------------------------------

// F16C rounds to nearest even like tl_f32_to_fp16 (the tests compare them over all inputs).
void tl__avx2_f32_to_f16(const float *src, uint16_t *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        dst[i] = tl_f32_to_fp16(src[i]);
}
