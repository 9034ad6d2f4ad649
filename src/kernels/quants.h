/*
 * Internal interface of the extra weight types: Q4_0, Q4_1, Q5_0, Q5_1 (blocks of 32 values)
 * and the K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (super-blocks of 256), in ggml's exact block
 * layouts (so GGUF files from llama.cpp load as they are).
 *
 * Files: quants.c (formats, scalar dequantization/quantization, the scalar reference matmul,
 * the parallel driver), x86/avx2_quants.c and x86/avx512_quants.c (SIMD matmul rows and
 * activation quantizers). kernels.c and convert.c reach this code through the five tl__qx_* hooks
 * below; nothing else in the kernels knows these types.
 *
 * The common form. Every type decodes, per "superchunk" of 128 values (four 32-blocks), to
 *     value[i] = D[h] * (q[i] - off) + M[h],   h = i / 16 (the 16-value half of a block)
 * with unsigned quants q[i] (0..63), a per-type integer offset `off` and, for the types with a
 * minimum ("type-1": Q4_1, Q5_1, Q2_K, Q4_K, Q5_K), an additive M. The float arithmetic of the
 * decode matches ggml's dequantize_row_* (the products D*(q-off) are exact in f32, so one
 * rounding remains, at the + M). All matmul kernels and the dequantizer work from this form.
 *
 * Matmul. As llama.cpp does, activations are quantized per token to 8 bits in blocks of 32
 * (d = amax/127, q = rne(x * 127/amax), d kept in f32) in the layout of struct tl__qa_chunk,
 * and each 16-value half contributes the exact integer dot sum((q - off) * xq) times D * d_x,
 * plus M * d_x * sum(xq) for type-1 types. The integer sums are identical on every ISA; only
 * the order of the float additions differs between ISAs (tests bound it by NMSE). For one ISA
 * every output element goes through one fixed sequence whatever the batch, tile or thread
 * count (the determinism contract of kernels.h).
 */
#ifndef TL_KERNELS_QUANTS_H
#define TL_KERNELS_QUANTS_H

#include "kernels/kernels_impl.h"

// ---- block layouts (ggml-common.h) -----------------------------------------------------------

#define TL_QK4 32   // values per block of Q4_0, Q4_1, Q5_0, Q5_1
#define TL_QK_K 256 // values per K-quant super-block

struct tl_block_q4_0 { // value = d * (q - 8); q[j] = low nibble of qs[j], q[j+16] = high nibble
    uint16_t d;        // f16
    uint8_t qs[16];
};
struct tl_block_q4_1 { // value = d * q + m
    uint16_t d, m;     // f16
    uint8_t qs[16];
};
struct tl_block_q5_0 { // value = d * (q - 16); bit 4 of q[j] is bit j of qh (little endian)
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[16];
};
struct tl_block_q5_1 { // value = d * q + m
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[16];
};
// K-quants: values 128n + 32j + l (n < 2, j < 4, l < 32) of Q2_K/Q3_K take bits 2j..2j+1 of
// qs[32n + l]; sub-blocks of 16 values have their own scale.
struct tl_block_q2_k {  // value = d * (sc & 15) * q - dmin * (sc >> 4)
    uint8_t scales[16]; // per 16 values: low nibble scale, high nibble min
    uint8_t qs[64];
    uint16_t d, dmin;
};
struct tl_block_q3_k { // value = d * (sc - 32) * (q - 4), q = 2 low bits | hmask bit << 2
    uint8_t hmask[32]; // bit 4n + j of hmask[l]: high bit of value 128n + 32j + l
    uint8_t qs[64];
    uint8_t scales[12]; // 16 scales of 6 bits (low 4 bits in bytes 0-7, high 2 in 8-11)
    uint16_t d;
};
// Q4_K/Q5_K: sub-blocks of 32 values with a 6-bit scale and min each (packed in scales[12]);
// values 64c + l take the low nibble of qs[32c + l], values 64c + 32 + l the high nibble.
struct tl_block_q4_k { // value = d * sc * q - dmin * m
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[128];
};
struct tl_block_q5_k { // as Q4_K; bit 4 of value 64c + l is bit 2c of qh[l] (2c+1: + 32)
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
};
struct tl_block_q6_k { // value = d * scales[i / 16] * (q - 32), q of 6 bits (4 in ql, 2 in qh)
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint16_t d;
};

// ---- the common form ---------------------------------------------------------------------------

// Per-type constants.
struct tl__qx_traits {
    int blk;          // values per block: 32 or 256
    size_t blk_bytes; // bytes per block
    int off;          // offset subtracted from the unsigned quants (0 for type-1 types)
    int off_shift;    // log2(off), or -1 when off is 0
    bool has_min;     // value has an additive M
    bool split16;     // the two halves of a 32-block may have different D (or M)
};

// Traits of `type`, or NULL when it is not one of the types of this file.
const struct tl__qx_traits *tl__qx_traits(enum tl_dtype type);

// Superchunk s (values 128s .. 128s+127) of a row in the common form.
struct tl__qx_chunk {
    uint8_t q[128]; // unsigned quants in value order; 0 past the row's end
    float D[8];     // per 16-value half
    float M[8];     // per half; 0 for types without a minimum or past the row's end
};

// Decodes superchunk s of a row of n_in values of `type` (n_in a multiple of the block size).
void tl__qx_unpack(enum tl_dtype type, const void *row, int64_t n_in, int64_t s,
                   struct tl__qx_chunk *c);

// ---- quantized activations ----------------------------------------------------------------------

#define TL__QA_SUPER 128
// One superchunk of a token's quantized activations. The bytes of 32-block g of the superchunk
// are qs[16g .. 16g+15] (its first half) and qs[64 + 16g .. 64 + 16g+15] (second half), so one
// 512-bit register holds the same half of four blocks; lanes 4g+k of the other fields belong to
// block g (k < 4 selects bytes 4k..4k+3 of a half). Blocks past the row's end are all zero.
struct tl__qa_chunk {
    int8_t qs[128];
    float d[16];      // lane 4g+k: d of block g
    int32_t nslo[16]; // lane 4g+k: -(sum of bytes 4k..4k+3 of the first half of block g)
    int32_t nshi[16]; // the same for the second half
};

// Bytes of one quantized activation row of n_in values (64-byte multiple).
static inline size_t tl__qa_row_bytes(int64_t n_in)
{
    return (size_t)((n_in + TL__QA_SUPER - 1) / TL__QA_SUPER) * sizeof(struct tl__qa_chunk);
}

// The scalar quantizer of one activation row (n a multiple of 32). Every ISA's quantizer must
// write the same bytes for finite input (tests check).
void tl__qa_quantize_ref(const float *x, int64_t n, void *dst);

// ---- per-ISA matmul ---------------------------------------------------------------------------

struct tl__qx_mm {
    const struct tl_weight *w;
    const struct tl__qx_traits *tr;
    const struct tl__qa_chunk *xa; // n_tok rows of xa_stride chunks
    int64_t xa_stride;             // chunks per token row
    int64_t n_tok;
    float *y; // (n_tok, n_out)
};

struct tl__qx_ops {
    // Rows per micro-tile for this type; threads split rows in multiples of it.
    int (*row_align)(enum tl_dtype type);
    // Same bytes as tl__qa_quantize_ref.
    void (*quantize)(const float *x, int64_t n, void *dst);
    // y[t][r] for r in [r0, r1), all tokens.
    void (*matmul_rows)(const struct tl__qx_mm *m, int64_t r0, int64_t r1);
};

extern const struct tl__qx_ops tl__qx_ops_scalar;
#if defined(__x86_64__)
extern const struct tl__qx_ops tl__qx_ops_avx2;
extern const struct tl__qx_ops tl__qx_ops_avx512;
#endif

// The scalar reference over rows [r0, r1) (the scalar variant's matmul_rows).
void tl__qx_ref_matmul_rows(const struct tl__qx_mm *m, int64_t r0, int64_t r1);
// The whole reference matmul, single-threaded; `work` as for tl_matmul.
void tl__qx_ref_matmul(const struct tl_weight *w, const float *x, int64_t n_tok, float *y,
                       void *work);

// ---- hooks used by kernels.c and convert.c ---------------------------------------------------

// True for the types of this file.
bool tl__qx_supported(enum tl_dtype type);
// Row (de)quantization for the types of this file (false otherwise, or n not a block multiple).
bool tl__qx_dequantize_row(enum tl_dtype type, const void *src, float *dst, int64_t n);
bool tl__qx_quantize_row(enum tl_dtype type, const float *src, void *dst, int64_t n);
// tl_matmul_work_bytes and tl_matmul for these types; `o` is the ISA table in use (its
// counterpart here is chosen by identity).
size_t tl__qx_work_bytes(const struct tl_weight *w, int64_t n_tok);
void tl__qx_matmul(struct tl_pool *pool, const struct tl__kernel_ops *o, const struct tl_weight *w,
                   const float *x, int64_t n_tok, float *y, void *work);

#endif
