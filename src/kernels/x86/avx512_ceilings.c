/*
 * Ceiling probes of the AVX-512 kernel variant (see kernels/ceilings.h): the f32 FMA rate on
 * 512-bit vectors and the int8 rate of VNNI vpdpbusd, the instruction the AVX-512 Q8_0 matmul
 * is built on. Sixteen independent accumulators hide the latency.
 *
 * Thread model: pure functions; each pool thread runs its own copy.
 */
#include "kernels/ceilings.h"

#include <immintrin.h>

enum { N_ACC = 16 };

double tl__avx512_probe_fp32(int64_t iters, double *ops_per_iter)
{
    __m512 a[N_ACC];
    for (int i = 0; i < N_ACC; i++)
        a[i] = _mm512_set1_ps((float)i);
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (int64_t it = 0; it < iters; it++)
#pragma GCC unroll 16
        for (int i = 0; i < N_ACC; i++)
            a[i] = _mm512_fmadd_ps(a[i], m, c);
    float s = 0;
    for (int i = 0; i < N_ACC; i++)
        s += _mm512_reduce_add_ps(a[i]);
    *ops_per_iter = N_ACC * 16 * 2;
    return s;
}

double tl__avx512_probe_int8(int64_t iters, double *ops_per_iter)
{
    __m512i a[N_ACC];
    for (int i = 0; i < N_ACC; i++)
        a[i] = _mm512_set1_epi32(i);
    const __m512i u8 = _mm512_set1_epi8(3), s8 = _mm512_set1_epi8(-2);
    for (int64_t it = 0; it < iters; it++)
#pragma GCC unroll 16
        for (int i = 0; i < N_ACC; i++)
            a[i] = _mm512_dpbusd_epi32(a[i], u8, s8);
    int64_t s = 0;
    for (int i = 0; i < N_ACC; i++)
        s += _mm512_reduce_add_epi32(a[i]);
    *ops_per_iter = N_ACC * 64 * 2; // 64 byte products per vpdpbusd, a multiply-add = 2 ops
    return (double)s;
}
