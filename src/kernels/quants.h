/*
 * Internal interface of the extra weight types: Q4_0, Q4_1, Q5_0, Q5_1 (blocks of 32 values)
 * and the K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (super-blocks of 256), in ggml's exact block
 * layouts (so GGUF files from llama.cpp load as they are). The 4-bit codebook types IQ4_NL,
 * IQ4_XS and MXFP4 (cb4.h) share the activation quantizer and the driver below; their traits
 * carry `cb4`, and the hooks at the end hand them to cb4.c and the ISAs' matmul_cb4_rows.
 *
 * Files: quants.c (formats, scalar dequantization/quantization, the scalar reference matmul),
 * quants_driver.c (the parallel driver and the scalar op table), x86/avx2_quants.c and
 * x86/avx512_quants.c (SIMD matmul rows and activation quantizers). kernels.c and convert.c reach
 * this code through the five tl__qx_* hooks below; nothing else in the kernels knows these types.
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

#include <math.h>

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
    bool cb4;         // a 4-bit codebook type (IQ4_NL, IQ4_XS, MXFP4): cb4.h, not this form
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

// Per 32-block of a token's quantized activations, what the K-quant kernels (Q4_K, Q5_K, Q6_K,
// file layout and packed) add to struct tl__qa_chunk: computed from its bytes by one C function
// (tl__kq_aux_row), so every ISA sees the same values.
struct tl__kq_aux {
    float dx;     // the block's activation scale (d of tl__qa_chunk)
    float dsx;    // dx * (float)(sum of the block's 32 bytes): the minimum's factor
    int32_t b6lo; // -32 * (sum of bytes 0..15): Q6_K's offset of 32, first half
    int32_t b6hi; // the same for bytes 16..31
};

// Type traits the ISA tiles fold at compile time (the type is a constant there): the integer
// offset of a type's quants as a shift of the activations' negated sum (Q4_0's 8 = 1 << 3,
// Q5_0's 16, Q6_K's 32, Q3_K's 4; -1: none), and whether it carries a per-block minimum.
static inline __attribute__((always_inline)) int tl__qx_off_shift(int type)
{
    return type == TL_DTYPE_Q4_0   ? 3
           : type == TL_DTYPE_Q5_0 ? 4
           : type == TL_DTYPE_Q6_K ? 5
           : type == TL_DTYPE_Q3_K ? 2
                                   : -1;
}

static inline __attribute__((always_inline)) int tl__qx_has_min(int type)
{
    return type == TL_DTYPE_Q4_1 || type == TL_DTYPE_Q5_1 || type == TL_DTYPE_Q4_K ||
           type == TL_DTYPE_Q5_K || type == TL_DTYPE_Q2_K;
}

struct tl__qx_mm {
    const struct tl_weight *w;
    const struct tl__qx_traits *tr;
    const struct tl__qa_chunk *xa; // n_tok rows of xa_stride chunks
    int64_t xa_stride;             // chunks per token row
    int64_t n_tok;
    float *y;                     // (n_tok, n_out)
    const struct tl__kq_aux *aux; // Q4_K/Q5_K/Q6_K: n_tok rows of aux_stride entries (else NULL)
    int64_t aux_stride;           // entries per token row (n_in / 32, rounded up to 4)
};

struct tl__qx_ops {
    // Rows per micro-tile for this type; threads split rows in multiples of it.
    int (*row_align)(enum tl_dtype type);
    // Same bytes as tl__qa_quantize_ref.
    void (*quantize)(const float *x, int64_t n, void *dst);
    // y[t][r] for r in [r0, r1), all tokens.
    void (*matmul_rows)(const struct tl__qx_mm *m, int64_t r0, int64_t r1);
    // The same for a weight packed by tl__kq_pack (r0 a multiple of TL__KQ_ROWS, and r1 too
    // unless it is n_out): bit-identical to tl__qx_ref_matmul_rows on the file layout.
    void (*matmul_packed_rows)(const struct tl__qx_mm *m, int64_t r0, int64_t r1);
    // The same for a weight of a codebook type (cb4.h), rows split in units of TL__CB4_ROWS.
    void (*matmul_cb4_rows)(const struct tl__qx_mm *m, int64_t r0, int64_t r1);
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

// ---- K-quants: the fixed order of the float operations, and the packed layout --------------
//
// For Q4_K, Q5_K and Q6_K every ISA and layout computes an output element y[t][r] with exactly
// the float operations of tl__kq_step, block by block in row order from y = 0 (so the packed
// kernels, whose SIMD lanes are rows, reproduce the scalar reference bit for bit). The integer
// sums are exact, so how an ISA computes them does not matter.

// The K-quant 6-bit scale and min of sub-block j (< 8) of a Q4_K/Q5_K super-block: j < 4 in the
// low 6 bits of bytes j and j+4; j >= 4 split as 4 low bits in byte j+4 and 2 high bits in the
// top of bytes j-4 (scale) and j (min).
static inline void tl__k4_scale_min(const uint8_t *sc, int j, int *scale, int *min)
{
    if (j < 4) {
        *scale = sc[j] & 63;
        *min = sc[j + 4] & 63;
    } else {
        *scale = (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4);
        *min = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
    }
}

// True for the types with a packed layout here (Q4_K, Q5_K, Q6_K).
static inline bool tl__kq_packable(enum tl_dtype type)
{
    return type == TL_DTYPE_Q4_K || type == TL_DTYPE_Q5_K || type == TL_DTYPE_Q6_K;
}

// One 32-block of one (row, token): q = its 32 unsigned quants (value order), xlo / xhi the
// activation bytes 0..15 / 16..31, D0 / D1 the scale of the first / second 16 values (Q4_K,
// Q5_K: equal), M the minimum (-(dmin * m); Q6_K: unused). Q6_K: y += isum_lo * (D0 * dx), then
// y += isum_hi * (D1 * dx); Q4_K/Q5_K: y += isum * (D0 * dx), then y += M * dsx; each a fused
// multiply-add. The integer sums are exact and below 2^24, so their conversion is exact too.
static inline float tl__kq_step(enum tl_dtype type, float y, const uint8_t *q, const int8_t *xlo,
                                const int8_t *xhi, float D0, float D1, float M,
                                const struct tl__kq_aux *a)
{
    int32_t lo = type == TL_DTYPE_Q6_K ? a->b6lo : 0, hi = type == TL_DTYPE_Q6_K ? a->b6hi : 0;
    for (int l = 0; l < 16; l++) {
        lo += q[l] * xlo[l];
        hi += q[16 + l] * xhi[l];
    }
    if (type == TL_DTYPE_Q6_K) {
        y = fmaf((float)lo, D0 * a->dx, y);
        return fmaf((float)hi, D1 * a->dx, y);
    }
    y = fmaf((float)(lo + hi), D0 * a->dx, y);
    return fmaf(M, a->dsx, y);
}

// The aux entries of one quantized activation row of nb32 blocks (n_in / 32).
void tl__kq_aux_row(const struct tl__qa_chunk *xa, int64_t nb32, struct tl__kq_aux *aux);
// Entries per aux row (nb32 rounded up to 4, so rows stay 64-byte aligned).
static inline int64_t tl__kq_aux_stride(int64_t n_in)
{
    return (n_in / 32 + 3) & ~(int64_t)3;
}

// The packed layout (tl_weight_prepare). Rows are taken 16 at a time ("groups", the last one
// padded with zero rows); a group is stored as its n_in / 256 super-blocks, one record of
// tl__kq_sb_bytes(type) bytes each (a multiple of 64), so a group streams as one run. In a
// record, with i = row in the group (0..15), e = 0..3, c = 0..3 (a pair of 32-blocks), k = 0..7
// (the 4-value step within a 32-block), j = 0..7 (the 32-block), h = 0..15 (Q6_K's 16-value
// sub-block):
//   qs[c][k][i][e]    (all)  byte: low nibble = low 4 bits of value 64c + 4k + e of row i
//                     (32-block 2c), high nibble = those of value 64c + 32 + 4k + e (block 2c+1)
//   Q4_K/Q5_K: sc[j][i], mn[j][i] the 6-bit scale and min of row i's sub-block j (uint8);
//              d[i], dmin[i] (f16); Q5_K then qh[j][k]: a 64-bit word whose bit 4i + e is
//              bit 4 of value 32j + 4k + e of row i
//   Q6_K: qh[j][p][i][e] byte: bits 2f..2f+1 = bits 4-5 of value 32j + 4(4p + f) + e (p < 2,
//         f < 4); sc[h][i] (int8); d[i] (f16)
// So one 64-byte load holds 4 consecutive values of 16 rows and a VNNI vpdpbusd with one
// broadcast activation dword advances 16 row sums; the lanes are rows, so no horizontal sums.
#define TL__KQ_ROWS 16
enum {
    TL__KQ_QS = 0,     // 2048 bytes
    TL__KQ4_SC = 2048, // Q4_K/Q5_K: 128 bytes
    TL__KQ4_MN = 2176, // 128
    TL__KQ4_D = 2304,  // 32
    TL__KQ4_DMIN = 2336,
    TL__KQ5_QH = 2368, // Q5_K: 512
    TL__KQ6_QH = 2048, // Q6_K: 1024
    TL__KQ6_SC = 3072, // 256
    TL__KQ6_D = 3328,  // 32
};
static inline size_t tl__kq_sb_bytes(enum tl_dtype type)
{
    return type == TL_DTYPE_Q4_K ? 2368 : type == TL_DTYPE_Q5_K ? 2880 : 3392;
}
static inline size_t tl__kq_group_bytes(enum tl_dtype type, int64_t n_in)
{
    return (size_t)(n_in / 256) * tl__kq_sb_bytes(type);
}
// Writes the packed copy of w (file layout, n_in a multiple of 256) to dst
// ((n_out + 15) / 16 * tl__kq_group_bytes bytes).
void tl__kq_pack(const struct tl_weight *w, uint8_t *dst);
// The kernels over the packed layout (the ISAs' matmul_packed_rows): kquant_pack.c,
// x86/avx2_kquant.c, x86/avx512_kquant.c.
void tl__kq_scalar_packed_rows(const struct tl__qx_mm *m, int64_t r0, int64_t r1);
#if defined(__x86_64__)
void tl__kq_avx2_packed_rows(const struct tl__qx_mm *m, int64_t r0, int64_t r1);
void tl__kq_avx512_packed_rows(const struct tl__qx_mm *m, int64_t r0, int64_t r1);
#endif

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
// tl_matmul_multi for weights that are all of these types (same n_in): the activations are
// quantized once and the rows of all the weights split over the threads in one fork-join.
void tl__qx_matmul_multi(struct tl_pool *pool, const struct tl__kernel_ops *o, int n_w,
                         const struct tl_weight *const *w, const float *x, int64_t n_tok,
                         float *const *y, void *work);

#endif
