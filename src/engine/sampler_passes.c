/*
 * The sampler's vocabulary-wide passes (sampler.c calls them once or twice per sampled token):
 * copy with NaN as -inf, scale, max, exp-and-sum, first index of the max.
 *
 * Design. Every sampled token walks the whole vocabulary several times, so these passes are
 * written for SSE2 (x86-64's baseline) with an identical scalar twin elsewhere; both give the
 * same values (double sums in fixed lanes and order). They are pure functions of their arrays
 * and know nothing of struct tl_sampler (sampler_passes.h lists them).
 *
 * Thread model: re-entrant; no state.
 */
#include "engine/sampler_passes.h"

#include "kernels/kernels.h"

#include <math.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

// ---- vocabulary-wide passes ---------------------------------------------------------------------
//
// Every sampled token walks the whole vocabulary several times (32000 entries for Llama 2: at
// 64 sequences that was ~10% of a decode step), so these passes are written for SSE2 (the
// x86-64 baseline) with a scalar twin elsewhere. Both compute the same values: max over
// NaN-free floats (the only difference, +0 vs -0 for the max, changes no later result), and
// double sums in the same fixed lanes and order.

// v[i] = logits[i], NaN as -inf; returns the max (-inf when empty).
float tl__copy_sanitize_max(const float *logits, float *v, int32_t n)
{
    float mx = -INFINITY;
    int32_t i = 0;
#if defined(__SSE2__)
    const __m128 ninf = _mm_set1_ps(-INFINITY);
    __m128 m4 = ninf;
    for (; i + 4 <= n; i += 4) {
        __m128 x = _mm_loadu_ps(logits + i), nan = _mm_cmpunord_ps(x, x);
        x = _mm_or_ps(_mm_andnot_ps(nan, x), _mm_and_ps(nan, ninf));
        _mm_storeu_ps(v + i, x);
        m4 = _mm_max_ps(m4, x);
    }
    float t[4];
    _mm_storeu_ps(t, m4);
    for (int j = 0; j < 4; j++)
        mx = t[j] > mx ? t[j] : mx;
#endif
    for (; i < n; i++) {
        float x = logits[i];
        v[i] = isnan(x) ? -INFINITY : x;
        if (v[i] > mx) mx = v[i];
    }
    return mx;
}

// v[i] *= f (f > 0, v NaN-free); returns the new max.
float tl__scale_max(float *v, float f, int32_t n)
{
    float mx = -INFINITY;
    int32_t i = 0;
#if defined(__SSE2__)
    const __m128 f4 = _mm_set1_ps(f);
    __m128 m4 = _mm_set1_ps(-INFINITY);
    for (; i + 4 <= n; i += 4) {
        __m128 x = _mm_mul_ps(_mm_loadu_ps(v + i), f4);
        _mm_storeu_ps(v + i, x);
        m4 = _mm_max_ps(m4, x);
    }
    float t[4];
    _mm_storeu_ps(t, m4);
    for (int j = 0; j < 4; j++)
        mx = t[j] > mx ? t[j] : mx;
#endif
    for (; i < n; i++) {
        v[i] *= f;
        if (v[i] > mx) mx = v[i];
    }
    return mx;
}

// The max of v (NaN-free), -inf when empty.
float tl__max_of(const float *v, int32_t n)
{
    float mx = -INFINITY;
    int32_t i = 0;
#if defined(__SSE2__)
    __m128 m4 = _mm_set1_ps(-INFINITY);
    for (; i + 4 <= n; i += 4)
        m4 = _mm_max_ps(m4, _mm_loadu_ps(v + i));
    float t[4];
    _mm_storeu_ps(t, m4);
    for (int j = 0; j < 4; j++)
        mx = t[j] > mx ? t[j] : mx;
#endif
    for (; i < n; i++)
        if (v[i] > mx) mx = v[i];
    return mx;
}

// The sum of p[0..n) in double: eight lanes (lane j takes p[8k + j]), the tail first, then the
// lanes in order.
double tl__sum8(const float *p, int32_t n)
{
    double lane[8] = {0};
    int32_t i = 0;
#if defined(__SSE2__)
    __m128d a0 = _mm_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    for (; i + 8 <= n; i += 8) {
        __m128 lo = _mm_loadu_ps(p + i), hi = _mm_loadu_ps(p + i + 4);
        a0 = _mm_add_pd(a0, _mm_cvtps_pd(lo));
        a1 = _mm_add_pd(a1, _mm_cvtps_pd(_mm_movehl_ps(lo, lo)));
        a2 = _mm_add_pd(a2, _mm_cvtps_pd(hi));
        a3 = _mm_add_pd(a3, _mm_cvtps_pd(_mm_movehl_ps(hi, hi)));
    }
    _mm_storeu_pd(lane, a0);
    _mm_storeu_pd(lane + 2, a1);
    _mm_storeu_pd(lane + 4, a2);
    _mm_storeu_pd(lane + 6, a3);
#else
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            lane[j] += (double)p[i + j];
#endif
    double sum = 0;
    for (; i < n; i++)
        sum += (double)p[i];
    for (int j = 0; j < 8; j++)
        sum += lane[j];
    return sum;
}

// prob[i] = e^(v[i] - m) for i < n (v[i] <= m; -inf gives exactly 0), with the kernels'
// vectorized exp (libm's scalar expf over a 32000-token vocabulary was ~40% of sampling);
// returns the sum (tl__sum8).
double tl__exp_sum(const float *v, float m, float *prob, int32_t n)
{
    tl_exp_sub(v, m, prob, n);
    return tl__sum8(prob, n);
}

// The first id whose v equals m (m the max of v, finite), or -1.
int32_t tl__first_equal(const float *v, float m, int32_t n)
{
    int32_t i = 0;
#if defined(__SSE2__)
    const __m128 m4 = _mm_set1_ps(m);
    for (; i + 4 <= n; i += 4) {
        int hit = _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(v + i), m4));
        if (hit) return i + __builtin_ctz((unsigned)hit);
    }
#endif
    for (; i < n; i++)
        if (v[i] == m) return i;
    return -1;
}
