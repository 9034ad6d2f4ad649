/*
 * Private to x86/avx2_cb4.c and x86/avx512_cb4.c: the scales D of a superchunk's four 32-blocks
 * of an IQ4_NL, IQ4_XS or MXFP4 row decoded in one 128-bit register (lane g = block g), with the
 * same bits as tl__cb4_chunk_f (every conversion is exact), and pointers to their nibbles. Both
 * files are compiled with at least -mavx2 -mfma -mf16c (checked below).
 *
 * Thread model: pure inline functions.
 */
#ifndef TL_KERNELS_X86_CB4_SIMD_H
#define TL_KERNELS_X86_CB4_SIMD_H

#if !defined(__AVX2__) || !defined(__F16C__)
#error "cb4_simd.h needs -mavx2 -mf16c: include it only from src/kernels/x86/*_cb4.c"
#endif

#include "kernels/cb4.h"

#include <immintrin.h>
#include <string.h>

static inline __attribute__((always_inline)) float tl__cb4_f16c(uint16_t h)
{
    return _cvtsh_ss(h);
}

// 2^(e - 128) for four E8M0 values (tl__e8m0_half, vectorized: the same bits).
static inline __attribute__((always_inline)) __m128 tl__cb4_e8m0_half4(__m128i e)
{
    const __m128i one = _mm_set1_epi32(1);
    __m128i norm = _mm_slli_epi32(_mm_sub_epi32(e, one), 23);
    __m128i sub = _mm_sllv_epi32(_mm_set1_epi32(0x00200000), e);
    return _mm_castsi128_ps(_mm_blendv_epi8(sub, norm, _mm_cmpgt_epi32(e, one)));
}

// Superchunk s of a row of n_in values of `type`: *D (lane g: D of 32-block 4s+g, 0 past the
// row's end) and qs[g] (its 16 nibble bytes; for IQ4_XS the four are contiguous).
static inline __attribute__((always_inline)) void tl__cb4_scales4(const enum tl_dtype type,
                                                                  const uint8_t *row, int64_t n_in,
                                                                  int64_t s, __m128 *D,
                                                                  const uint8_t *qs[4])
{
    if (type == TL_DTYPE_IQ4_XS) { // half s % 2 of super-block s / 2: 32-blocks 4n .. 4n+3
        const struct tl_block_iq4_xs *x = (const struct tl_block_iq4_xs *)row + s / 2;
        const int n = (int)(s % 2);
        for (int g = 0; g < 4; g++)
            qs[g] = x->qs + 64 * n + 16 * g;
        // ls of block 4n+g: nibble 4n+g of scales_l (as a u32), 2-bit field 4n+g of scales_h
        uint32_t l, h = x->scales_h;
        memcpy(&l, x->scales_l, 4);
        const __m128i lo4 = _mm_and_si128(
            _mm_srlv_epi32(_mm_set1_epi32((int)(l >> (16 * n))), _mm_setr_epi32(0, 4, 8, 12)),
            _mm_set1_epi32(15));
        const __m128i hi2 = _mm_and_si128(
            _mm_srlv_epi32(_mm_set1_epi32((int)(h >> (8 * n))), _mm_setr_epi32(0, 2, 4, 6)),
            _mm_set1_epi32(3));
        const __m128i ls = _mm_or_si128(lo4, _mm_slli_epi32(hi2, 4));
        *D = _mm_mul_ps(_mm_set1_ps(tl__cb4_f16c(x->d)),
                        _mm_cvtepi32_ps(_mm_sub_epi32(ls, _mm_set1_epi32(32))));
        return;
    }
    if ((s + 1) * 128 <= n_in) { // IQ4_NL, MXFP4: four whole blocks
        const int bsz = type == TL_DTYPE_IQ4_NL ? 18 : 17, qoff = type == TL_DTYPE_IQ4_NL ? 2 : 1;
        const uint8_t *b = row + (size_t)s * 4 * bsz;
        for (int g = 0; g < 4; g++)
            qs[g] = b + g * bsz + qoff;
        if (type == TL_DTYPE_IQ4_NL) {
            uint16_t h[4];
            for (int g = 0; g < 4; g++)
                memcpy(&h[g], b + g * bsz, 2);
            *D = _mm_cvtph_ps(
                _mm_setr_epi16((short)h[0], (short)h[1], (short)h[2], (short)h[3], 0, 0, 0, 0));
        } else {
            *D = tl__cb4_e8m0_half4(_mm_setr_epi32(b[0], b[bsz], b[2 * bsz], b[3 * bsz]));
        }
        return;
    }
    float d[4];
    tl__cb4_chunk_f(type, row, n_in, s, d, qs, tl__cb4_f16c);
    *D = _mm_loadu_ps(d);
}

#endif
