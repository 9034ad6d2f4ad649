/*
 * Internals shared by the kernel files: the per-ISA op table, the layout of quantized
 * activations, and the scalar reference functions (ref.c) that tests compare every variant to.
 *
 * Each ISA file (ref.c for "scalar", x86/avx2_ops.c, x86/avx512_ops.c) fills one
 * `struct tl__kernel_ops`; kernels.c picks one per process and owns the public entry points:
 * threading (tl_pool), activation quantization, work-buffer carving. An ISA only supplies the
 * inner loops, so the determinism rules live in one place:
 *   - matmul_rows computes y[t][r] for its rows and all tokens; every (t, r) element goes
 *     through the same sequence of operations whatever tile or tail path it lands in;
 *   - attn_head computes one (token, head) pair, attn_kv the heads of a range of KV heads of
 *     a run of tokens of one sequence, each (token, head) in a fixed order over its context
 *     whatever else shares the call.
 */
#ifndef TL_KERNELS_IMPL_H
#define TL_KERNELS_IMPL_H

#include "kernels/kernels.h"

#include "core/pool.h"

#include <math.h>
#include <stdbool.h>

// ---- several weights in one fork-join (tl_matmul_multi, tl__qx_matmul_multi) ----------------
//
// The rows of all the weights form one list of units (each weight's rows in blocks of `align`,
// the weights in order) that the threads split evenly, so q/k/v or gate/up share a fork-join.
struct tl__unit_split {
    int n_w;
    int64_t align[TL_MATMUL_MULTI_MAX];    // rows per unit of each weight
    int64_t n_out[TL_MATMUL_MULTI_MAX];    // rows of each weight
    int64_t unit_end[TL_MATMUL_MULTI_MAX]; // running total of units up to each weight
};

// Appends a weight of n_out rows taken `align` at a time; returns the units so far.
static inline int64_t tl__unit_split_add(struct tl__unit_split *s, int64_t n_out, int64_t align)
{
    int64_t before = s->n_w ? s->unit_end[s->n_w - 1] : 0;
    s->align[s->n_w] = align;
    s->n_out[s->n_w] = n_out;
    s->unit_end[s->n_w] = before + (n_out + align - 1) / align;
    return s->unit_end[s->n_w++];
}

// Rows [*r0, *r1) of weight i that thread ith of nth computes; false when it has none.
static inline bool tl__unit_split_rows(const struct tl__unit_split *s, int i, int ith, int nth,
                                       int64_t *r0, int64_t *r1)
{
    int64_t c0, c1;
    tl_pool_range(s->unit_end[s->n_w - 1], 1, ith, nth, &c0, &c1);
    const int64_t first = i ? s->unit_end[i - 1] : 0, end = s->unit_end[i];
    if (c0 < first) c0 = first;
    if (c1 > end) c1 = end;
    *r0 = (c0 - first) * s->align[i];
    *r1 = (c1 - first) * s->align[i];
    if (*r1 > s->n_out[i]) *r1 = s->n_out[i];
    return *r1 > *r0;
}

// ---- quantized activations (Q8_0 matmul) ------------------------------------------------------
//
// Before a Q8_0 matmul each token's activation row is quantized once into the work buffer
// (Q8_0 per 32-block: d = amax / 127, q = rne(x * 127 / amax); d kept in f32, which is more
// accurate than ggml's f16 and matches no file format because none is needed). The row is cut
// into "superchunks" of 128 values (four blocks, zero-padded at the end), laid out so a 512-bit
// VNNI kernel covers four blocks with two vpdpbusd and one int-to-float conversion:
//   int8_t  qs[n_super * 128]   per superchunk: bytes 0-15 of blocks 0..3 (16 each), then
//                               bytes 16-31 of blocks 0..3
//   float   d[n_super * 16]     per superchunk: lanes 4g..4g+3 = d of block g
//   int32_t bias[n_super * 16]  lane 4g+k: -128 * (sum of bytes 4k..4k+3 and 16+4k..16+4k+3
//                               of block g), which cancels the +128 of unsigned weights
//   int32_t bsum[n_super * 4]   per block: -128 * (sum of its 32 bytes), the same correction
//                               for the packed-weight kernels (one block per accumulator)
// The scalar and AVX2 kernels read a block's two halves and d[16s + 4g] and ignore the biases.
#define TL__XQ_SUPER 128

// Bytes of one quantized activation row of n_in values (a multiple of 64).
size_t tl__xq_row_bytes(int64_t n_in);

struct tl__xq_row {
    int8_t *qs;
    float *d;
    int32_t *bias;
    int32_t *bsum;
};
// Views one quantized row at `base` (tl__xq_row_bytes(n_in) bytes, 64-byte aligned).
static inline struct tl__xq_row tl__xq_view(void *base, int64_t n_in)
{
    int64_t n_super = (n_in + TL__XQ_SUPER - 1) / TL__XQ_SUPER;
    struct tl__xq_row r;
    r.qs = base;
    r.d = (float *)((char *)base + n_super * 128);
    r.bias = (int32_t *)((char *)base + n_super * 192);
    r.bsum = (int32_t *)((char *)base + n_super * 256);
    return r;
}

// Zeroes the bytes after bsum up to tl__xq_row_bytes (every quantizer calls it, so rows are
// byte-identical across ISAs).
static inline void tl__xq_clear_pad(void *base, int64_t n_in)
{
    int64_t n_super = (n_in + TL__XQ_SUPER - 1) / TL__XQ_SUPER;
    size_t used = (size_t)n_super * 272, padded = (used + 63) & ~(size_t)63;
    for (size_t i = used; i < padded; i++)
        ((char *)base)[i] = 0;
}

// Offset in a quantized row of bytes 4c..4c+3 (c = 0..7) of block b.
static inline int64_t tl__xq_off(int64_t b, int c)
{
    return (b >> 2) * 128 + (c >> 2) * 64 + (b & 3) * 16 + (c & 3) * 4;
}

// The two 16-byte halves of block b of a quantized row, and its scale.
static inline const int8_t *tl__xq_lo(struct tl__xq_row r, int64_t b)
{
    return r.qs + (b / 4) * 128 + (b % 4) * 16;
}
static inline const int8_t *tl__xq_hi(struct tl__xq_row r, int64_t b)
{
    return r.qs + (b / 4) * 128 + 64 + (b % 4) * 16;
}
static inline float tl__xq_d(struct tl__xq_row r, int64_t b)
{
    return r.d[(b / 4) * 16 + (b % 4) * 4];
}

// ---- packed Q8_0 weights (tl_weight_prepare) --------------------------------------------------
//
// Rows are taken 16 at a time ("groups"; the last one padded with zero rows). A group of
// nb = n_in / 32 blocks is stored contiguously, tl__qp_group_bytes(nb) bytes at a 64-byte
// aligned offset g * tl__qp_group_bytes(nb):
//   uint8_t  qs[nb][8][16][4]  block b, chunk c, row i: bytes 4c..4c+3 of row i's block b,
//                              each stored as w ^ 0x80 = w + 128 (unsigned, for VNNI)
//   uint16_t d[nb][16]         block b, row i: the f16 scale of row i's block b (0 = padding)
// So one 64-byte vector holds 4 consecutive weights of 16 rows, and a VNNI vpdpbusd with one
// broadcast activation dword advances 16 row dot products at once; the accumulator lanes are
// rows, so no horizontal sums are needed. An AVX2 register covers rows 0-7 or 8-15.
//
// F32, F16 and BF16 weights are packed in groups of 16 rows too, k-major: group g holds
// n_in x 16 elements of the weight's type, element (k, i) (row 16g + i, column k) at index
// 16k + i, so one load gives column k of 16 rows (a 64-byte f32 or 32-byte f16/bf16 vector):
// the kernels multiply it by token t's x[k] broadcast, with rows in the accumulator lanes.
#define TL__QP_ROWS 16

static inline size_t tl__qp_group_bytes(int64_t nb)
{
    return ((size_t)nb * (512 + 32) + 63) & ~(size_t)63;
}
// Bytes of one packed group of 16 rows of a weight of `type` with rows of n_in elements.
static inline size_t tl__pk_group_bytes(enum tl_dtype type, int64_t n_in)
{
    if (type == TL_DTYPE_Q8_0) return tl__qp_group_bytes(n_in / 32);
    size_t esz = type == TL_DTYPE_F32 ? 4 : 2;
    return ((size_t)n_in * TL__QP_ROWS * esz + 63) & ~(size_t)63;
}
// Group g of a packed weight.
static inline const void *tl__pk_group(const struct tl_weight *w, int64_t g)
{
    return (const char *)w->data + (size_t)g * tl__pk_group_bytes(w->type, w->n_in);
}
// The qs and d arrays of group g of a packed Q8_0 weight.
static inline const uint8_t *tl__qp_qs(const struct tl_weight *w, int64_t g)
{
    return (const uint8_t *)w->data + (size_t)g * tl__qp_group_bytes(w->n_in / 32);
}
static inline const uint16_t *tl__qp_d(const struct tl_weight *w, int64_t g)
{
    return (const uint16_t *)(tl__qp_qs(w, g) + (size_t)(w->n_in / 32) * 512);
}

// Tokens per chunk for a matmul of n_tok tokens walked in chunks of at most `max` (a multiple
// of `tile`): the chunks as even as whole tiles allow, so that no small last chunk streams the
// weights once more for a handful of tokens.
static inline int64_t tl__even_chunk(int64_t n_tok, int64_t max, int tile)
{
    if (max < tile) max = tile;
    int64_t n_chunks = (n_tok + max - 1) / max;
    int64_t c = (n_tok + n_chunks - 1) / n_chunks;
    return (c + tile - 1) / tile * tile;
}

// ---- per-ISA op table -------------------------------------------------------------------------

// One matmul call as the ISA sees it.
struct tl__mm {
    const struct tl_weight *w;
    const float *x; // f32 activations: (n_tok, n_in) rows, or interleaved when x_tile > 0
    int x_tile;     // 0, or W: token t's x[k] is at x[(t / W) * W * n_in + k * W + t % W]
    const void *xq; // quantized activations (Q8_0 weights only), n_tok rows of xq_stride bytes
    size_t xq_stride;
    int64_t n_tok;
    float *y; // (n_tok, n_out)
};

// Packed F32/F16/BF16 matmuls of several tokens read a copy of the activations in which each
// tile of W tokens (the ISA's x_tile) is interleaved: for every k the W values x[t][k] are
// contiguous, so a micro-kernel's broadcasts come from one stream (20% faster than W separate
// rows, which also collide in the L1 sets when n_in * 4 is a multiple of 4 KiB).
#define TL__X_TILE_MAX 16

struct tl__kernel_ops {
    const char *name;
    // Rows per micro-tile for this weight type; threads split rows in multiples of it.
    int (*row_align)(enum tl_dtype type);
    // Tokens per interleaved activation tile for packed float weights (0 or <= TL__X_TILE_MAX;
    // 0: the kernels read the rows as given).
    int x_tile;
    // Quantizes one activation row (n values) to the layout above. Must give the same bytes as
    // tl__ref_quantize_x (tests check it), so every ISA sees the same integers.
    void (*quantize_x)(const float *x, int64_t n, void *dst);
    // y[t][r] for r in [r0, r1), all tokens. For a packed weight r0 is a multiple of
    // TL__QP_ROWS and so is r1 unless it is n_out.
    void (*matmul_rows)(const struct tl__mm *m, int64_t r0, int64_t r1);
    void (*rmsnorm)(const float *x, const float *w, float eps, int64_t n, float *y);
    void (*swiglu)(const float *gate, const float *up, float *out, int64_t n);
    void (*add)(float *y, const float *x, int64_t n);
    void (*softmax)(float *x, int64_t n);
    // out[i] = e^(x[i] - m) (x[i] <= m; -inf gives 0).
    void (*exp_sub)(const float *x, float m, float *out, int64_t n);
    // One (token, head) of tl_attention over positions [lo, n_ctx) (lo > 0: a sliding window),
    // scores soft-capped when softcap > 0 (tl__softcap): q and out are head_dim floats,
    // `scores` has room for n_ctx - lo floats and `acc` for head_dim floats (both 64-byte
    // aligned).
    void (*attn_head)(const struct tl_kv_layer *kv, const int32_t *block_table, int64_t lo,
                      int64_t n_ctx, int kv_head, const float *q, float scale, float softcap,
                      float *out, float *scores, float *acc);
    // Optional (NULL when absent): how many (token, query head) pairs attn_kv handles in one
    // call for this head_dim (0: use attn_head), and the call itself: every query head of KV
    // heads [kvh0, kvh0 + n_kvh) for n_q consecutive tokens of one sequence, token i attending
    // to n_ctx0 + i positions (n_q * n_kvh * group <= attn_kv_pairs(head_dim)), only the last
    // `window` of them when window > 0 (tl_attn_opts), scores soft-capped when softcap > 0;
    // q and out hold the tokens' rows of n_head * head_dim, q_stride floats apart. Each
    // (token, head) result must not depend on which others share the call.
    int (*attn_kv_pairs)(int head_dim);
    // Optional: dst[i] = tl_f32_to_fp16(src[i]) for finite values (NaN stays NaN), vectorized.
    void (*f32_to_f16)(const float *src, uint16_t *dst, int64_t n);
    void (*attn_kv)(const struct tl_kv_layer *kv, const int32_t *block_table, int64_t n_ctx0,
                    int n_q, int kvh0, int n_kvh, int group, const float *q, size_t q_stride,
                    float scale, int64_t window, float softcap, float *out);
    // Optional: tl_quantize_row(TL_DTYPE_Q8_0) of n values (a multiple of 32), vectorized, the
    // same bytes for every input but signaling NaNs (the Q8_0 KV store; tests compare them).
    void (*quantize_q8_0)(const float *src, struct tl_block_q8_0 *dst, int64_t n);
};

extern const struct tl__kernel_ops tl__ops_scalar;
#if defined(__x86_64__)
extern const struct tl__kernel_ops tl__ops_avx2;
extern const struct tl__kernel_ops tl__ops_avx512;
#endif

// ---- scalar reference (ref.c) -----------------------------------------------------------------

void tl__ref_quantize_x(const float *x, int64_t n, void *dst);
// The reference matmul, single-threaded; `work` as for tl_matmul.
// The reference inner loop over rows [r0, r1) (the scalar variant's matmul_rows).
void tl__ref_matmul_rows(const struct tl__mm *m, int64_t r0, int64_t r1);
void tl__ref_matmul(const struct tl_weight *w, const float *x, int64_t n_tok, float *y, void *work);
void tl__ref_rmsnorm(const float *x, const float *w, float eps, int64_t n, float *y);
void tl__ref_rope(float *x, int n_heads, int head_dim, int64_t pos, float freq_base,
                  float freq_scale, enum tl_rope_mode mode);
// The pieces of tl__ref_rope, for tl_rope's per-thread cache (the same values bit for bit):
// frequency i, the cos/sin of pos * freq_scale * freq[i] for i < half, and the rotation.
double tl__rope_freq(float freq_base, int head_dim, int i);
void tl__rope_table(int64_t pos, float freq_scale, const double *freq, int half, float *c,
                    float *s);
void tl__rope_apply(float *x, int n_heads, int head_dim, const float *c, const float *s,
                    enum tl_rope_mode mode);
void tl__ref_swiglu(const float *gate, const float *up, float *out, int64_t n);
void tl__ref_add(float *y, const float *x, int64_t n);
void tl__ref_softmax(float *x, int64_t n);
void tl__ref_exp_sub(const float *x, float m, float *out, int64_t n);
void tl__ref_attn_head(const struct tl_kv_layer *kv, const int32_t *block_table, int64_t lo,
                       int64_t n_ctx, int kv_head, const float *q, float scale, float softcap,
                       float *out, float *scores, float *acc);

// Attention logit soft-capping of one score: cap * tanh(s / cap), in scalar f32 with libm's
// tanhf in every ISA (the same value everywhere; soft-capped layers pay one tanhf per score).
static inline float tl__softcap(float s, float cap)
{
    return cap * tanhf(s / cap);
}

// First position a query of n_ctx positions attends to under a sliding window (0: none).
static inline int64_t tl__attn_lo(int64_t n_ctx, int64_t window)
{
    return window > 0 && n_ctx > window ? n_ctx - window : 0;
}

// Bytes that the first n_elem elements of a KV pool of `type` span (Q8_0: n_elem a multiple
// of 32, the elements cut into 34-byte blocks): element index -> byte offset.
static inline size_t tl__kv_elem_bytes(enum tl_dtype type, size_t n_elem)
{
    if (type == TL_DTYPE_Q8_0) return n_elem / TL_QK8_0 * sizeof(struct tl_block_q8_0);
    return n_elem * (type == TL_DTYPE_F16 ? 2 : 4);
}

// Element index of element (pos, kv_head, 0) of K or V through a block table (for Q8_0, the
// element index of the first value of that row's first Q8_0 block).
static inline size_t tl__kv_index(const struct tl_kv_layer *kv, const int32_t *block_table,
                                  int64_t pos, int kv_head)
{
    int64_t b = block_table[pos / kv->block_size];
    int64_t s = pos % kv->block_size;
    return (size_t)(((b * kv->block_size + s) * kv->n_kv_head + kv_head) * kv->head_dim);
}

#endif
