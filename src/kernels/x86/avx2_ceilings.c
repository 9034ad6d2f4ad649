/*
 * Ceiling probes of the AVX2 kernel variant (see kernels/ceilings.h): the f32 FMA rate and the
 * int8 dot-product rate of the instruction sequence the AVX2 Q8_0 matmul uses per 32 bytes
 * (vpmaddubsw, then vpmaddwd to 32 bits, then an add). Twelve independent accumulators hide
 * the instructions' latency, so the loops run at the ports' throughput.
 *
 * Thread model: pure functions; each pool thread runs its own copy.
 */
#include "kernels/ceilings.h"

#include <immintrin.h>

enum { N_ACC = 12 };

double tl__avx2_probe_fp32(int64_t iters, double *ops_per_iter)
{
    __m256 a[N_ACC];
    for (int i = 0; i < N_ACC; i++)
        a[i] = _mm256_set1_ps((float)i);
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (int64_t it = 0; it < iters; it++)
#pragma GCC unroll 12
        for (int i = 0; i < N_ACC; i++)
            a[i] = _mm256_fmadd_ps(a[i], m, c);
    float v[8], s = 0;
    for (int i = 0; i < N_ACC; i++) {
        _mm256_storeu_ps(v, a[i]);
        s += v[0];
    }
    *ops_per_iter = N_ACC * 8 * 2;
    return s;
}

double tl__avx2_probe_int8(int64_t iters, double *ops_per_iter)
{
    // The accumulator feeds the unsigned operand so that no product can be hoisted.
    __m256i a[N_ACC];
    for (int i = 0; i < N_ACC; i++)
        a[i] = _mm256_set1_epi32(i);
    const __m256i s8 = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
    for (int64_t it = 0; it < iters; it++)
#pragma GCC unroll 12
        for (int i = 0; i < N_ACC; i++) {
            __m256i p16 = _mm256_maddubs_epi16(a[i], s8);
            a[i] = _mm256_add_epi32(a[i], _mm256_madd_epi16(p16, ones));
        }
    int32_t v[8];
    int64_t s = 0;
    for (int i = 0; i < N_ACC; i++) {
        _mm256_storeu_si256((__m256i *)v, a[i]);
        s += v[0];
    }
    *ops_per_iter = N_ACC * 32 * 2; // 32 byte products per vpmaddubsw, a multiply-add = 2 ops
    return (double)s;
}
