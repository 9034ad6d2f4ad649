/*
 * Internal interface of the 4-bit codebook weight types: IQ4_NL, IQ4_XS and MXFP4, in ggml's
 * exact block layouts (ggml-common.h), so GGUF files from llama.cpp load as they are.
 *
 * Files: cb4.c (formats, scalar dequantization and quantization, the scalar reference matmul),
 * x86/avx2_cb4.c and x86/avx512_cb4.c (SIMD matmul rows). They plug into the Q4_0..Q6_K driver
 * of quants.h: the activations are quantized the same way (struct tl__qa_chunk rows) and
 * quants_driver.c hands the rows of a codebook weight to the ISA's matmul_cb4_rows.
 *
 * The common form. All three decode, per 32-value block b of a row, to
 *     value[i] = D_b * K[q_i],   q_i = low nibble of qs[i] (i < 16), high nibble of qs[i-16]
 * with an int8 codebook K of 16 entries and one float scale D_b per block:
 *   IQ4_NL  K = kvalues_iq4nl (-127 .. 113, non-uniform), D = f16 d
 *   IQ4_XS  the same K; super-blocks of 256 with an f16 d and eight 6-bit scales ls (low 4 bits
 *           in scales_l, high 2 in scales_h): D of 32-block j = d * (ls_j - 32)
 *   MXFP4   K = 2 * E2M1 = {0, 1, 2, 3, 4, 6, 8, 12, -0, -1, ..., -12}, D = 2^(e - 128) from the
 *           E8M0 byte e (ggml's "half" scale, since K is doubled; e = 255 gives 2^127 as ggml)
 * Every product D * K[q] is exact in f32 (at most 24 significant bits), so the dequantizer is
 * bit-identical to ggml's dequantize_row_*.
 *
 * Matmul. Per block and (row, token), the exact integer dot sum(K[q_i] * xq_i) of the codebook
 * values with the token's 8-bit activations, times D_b * d_x. The integer sums are identical on
 * every ISA; only the order of the float additions differs between ISAs (tests bound it by
 * NMSE). For one ISA every output element goes through one fixed sequence whatever the batch,
 * tile or thread count (the determinism contract of kernels.h).
 */
#ifndef TL_KERNELS_CB4_H
#define TL_KERNELS_CB4_H

#include "kernels/quants.h"

#include <string.h>

// ---- block layouts (ggml-common.h) -----------------------------------------------------------

struct tl_block_iq4_nl { // value = d * K[q]
    uint16_t d;          // f16
    uint8_t qs[16];      // q[j] = low nibble of qs[j], q[j+16] = high nibble
};
struct tl_block_iq4_xs { // value = d * (ls - 32) * K[q] per 32-block j
    uint16_t d;          // f16
    uint16_t scales_h;   // bits 2j..2j+1: high 2 bits of ls_j
    uint8_t scales_l[4]; // nibble j % 2 of byte j / 2: low 4 bits of ls_j
    uint8_t qs[128];     // 32-block j: qs[16j .. 16j+15], nibbles as IQ4_NL
};
struct tl_block_mxfp4 { // value = 2^(e - 128) * K[q]
    uint8_t e;          // E8M0 shared exponent
    uint8_t qs[16];     // nibbles as IQ4_NL
};

// The codebooks, as int8 (K above).
extern const int8_t tl__kv_iq4nl[16];
extern const int8_t tl__kv_mxfp4[16];

// True for IQ4_NL, IQ4_XS and MXFP4.
static inline bool tl__cb4_type(enum tl_dtype type)
{
    return type == TL_DTYPE_IQ4_NL || type == TL_DTYPE_IQ4_XS || type == TL_DTYPE_MXFP4;
}

static inline const int8_t *tl__cb4_codebook(enum tl_dtype type)
{
    return type == TL_DTYPE_MXFP4 ? tl__kv_mxfp4 : tl__kv_iq4nl;
}

// 2^(e - 128): the MXFP4 scale of E8M0 byte e (subnormal for e < 2; exact for every e).
static inline float tl__e8m0_half(uint8_t e)
{
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

extern const uint8_t tl__cb4_zero16[16]; // the nibbles of the blocks past a row's end

// The 6-bit scale of 32-block j of an IQ4_XS super-block (ls; D = d * (ls - 32)).
static inline int tl__iq4_xs_scale(const struct tl_block_iq4_xs *x, int j)
{
    return ((x->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((x->scales_h >> (2 * j)) & 3) << 4);
}

// The scales D of 32-blocks 4s .. 4s+3 of a row of n_in values (superchunk s; 0 past the row's
// end) and pointers to their 16 nibble bytes (tl__cb4_zero16 past the end). `f16` converts an
// f16 exactly (tl_fp16_to_f32, or F16C in the SIMD files: inlined there).
static inline __attribute__((always_inline)) void
tl__cb4_chunk_f(enum tl_dtype type, const void *row, int64_t n_in, int64_t s, float D[4],
                const uint8_t *qs[4], float (*f16)(uint16_t))
{
    if (type == TL_DTYPE_IQ4_XS) { // superchunk s is half s % 2 of super-block s / 2
        const struct tl_block_iq4_xs *x = (const struct tl_block_iq4_xs *)row + s / 2;
        const float d = f16(x->d);
        for (int g = 0; g < 4; g++) {
            const int j = 4 * (int)(s % 2) + g;
            D[g] = d * (float)(tl__iq4_xs_scale(x, j) - 32);
            qs[g] = x->qs + 16 * j;
        }
        return;
    }
    const int64_t nb = n_in / 32;
    for (int g = 0; g < 4; g++) {
        const int64_t b = 4 * s + g;
        if (b >= nb) {
            D[g] = 0.f;
            qs[g] = tl__cb4_zero16;
        } else if (type == TL_DTYPE_IQ4_NL) {
            const struct tl_block_iq4_nl *x = (const struct tl_block_iq4_nl *)row + b;
            D[g] = f16(x->d);
            qs[g] = x->qs;
        } else {
            const struct tl_block_mxfp4 *x = (const struct tl_block_mxfp4 *)row + b;
            D[g] = tl__e8m0_half(x->e);
            qs[g] = x->qs;
        }
    }
}

// Row (de)quantization (n a multiple of the block size; false otherwise). The quantizers are
// round-to-nearest: the value of largest magnitude of a block sets its scale, every value
// takes the nearest codebook entry (first on ties); any finite or non-finite input gives valid
// blocks.
bool tl__cb4_dequantize_row(enum tl_dtype type, const void *src, float *dst, int64_t n);
bool tl__cb4_quantize_row(enum tl_dtype type, const float *src, void *dst, int64_t n);

// Rows per micro-tile of the matmul kernels (threads split rows in multiples of it).
#define TL__CB4_ROWS 4

// y[t][r] for r in [r0, r1), all tokens of m (file layout; m->aux unused). The scalar
// reference, and the SIMD variants (the ISAs' matmul_cb4_rows).
void tl__cb4_ref_rows(const struct tl__qx_mm *m, int64_t r0, int64_t r1);
#if defined(__x86_64__)
void tl__cb4_avx2_rows(const struct tl__qx_mm *m, int64_t r0, int64_t r1);
void tl__cb4_avx512_rows(const struct tl__qx_mm *m, int64_t r0, int64_t r1);
#endif

#endif
