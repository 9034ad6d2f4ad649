/*
 * Element conversions between f32 and the two 16-bit float types: IEEE binary16 (f16) and
 * bfloat16 (bf16). A leaf: every kernel file that reads or writes f16/bf16 scales calls down
 * into it, and it calls nothing of the kernels.
 *
 * Design: portable bit manipulation, no F16C, so the scalar build gives the same answers as the
 * hardware converters (the tests check all 65536 halves and compare with F16C where present).
 * Rounding is to nearest, ties to even, for both narrow types; f16 overflow becomes inf, NaN
 * stays NaN (quieted, payload top bits kept).
 *
 * Thread model: pure functions, re-entrant.
 */
#include "kernels/kernels.h"

#include <string.h>

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// ---- f16 ------------------------------------------------------------------------------------

float tl_fp16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0) {
        // zero or subnormal: mant * 2^-24, exact in f32
        float v = (float)mant * 0x1p-24f;
        return bits_f32(f32_bits(v) | sign);
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));
    return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t tl_f32_to_fp16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u) { // inf or NaN; a NaN keeps its top payload bits and is made quiet
        if (x == 0x7f800000u) return sign | 0x7c00;
        return sign | 0x7e00 | (uint16_t)((x >> 13) & 0x3ff);
    }
    if (x >= 0x47800000u) return sign | 0x7c00; // >= 2^16: beyond any rounding to 65504
    uint32_t e = x >> 23;
    if (e < 113) {
        // below 2^-14: the result is a subnormal half (or zero, or the smallest normal after
        // rounding up). Value in units of 2^-24 is m * 2^(e - 126).
        if (e < 101) return sign; // < 2^-25 rounds to zero (2^-25 itself is a tie to even: 0)
        uint32_t m = (x & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; // 14..25
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return sign | (uint16_t)q;
    }
    uint32_t h = ((e - 112) << 10) | ((x & 0x7fffffu) >> 13);
    uint32_t rem = x & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++; // a carry may reach inf: correct
    return sign | (uint16_t)h;
}

// ---- bf16 -----------------------------------------------------------------------------------

float tl_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t tl_f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); // quiet NaN
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}
