/*
 * The device kernels, recorded into a tl_gpu_rec (gpu.h) and run with it: each op checks its
 * shapes and buffer sizes (TL_ERR_INVALID_ARG / TL_ERR_UNSUPPORTED with a one-line message,
 * sticky in the recorder) and appends one dispatch. All tensors are f32 in device buffers unless
 * a weight type says otherwise, rows contiguous, element counts below 2^31.
 * Determinism (docs/ARCHITECTURE.md, per device): every output element is computed in one fixed
 * order whatever the batch's size or make-up; tests/unit/test_gpu_ops.c checks it bit for bit.
 * Device-neutral: a second backend implements the same kernels (gpu_impl.h).
 * Thread-safety: as the recorder (one thread at a time).
 */
#ifndef TL_GPU_GPU_OPS_H
#define TL_GPU_GPU_OPS_H

#include "gpu/gpu.h"

#include "core/dtype.h"
#include "kernels/kernels.h"

// y[r] = x[r] * w / sqrt(mean(x[r]^2) + eps) for n_rows rows of n (tl_rmsnorm). y may be x.
tl_status tl_gpu_rmsnorm(tl_gpu_rec *r, tl_gpu_buffer *x, tl_gpu_buffer *w, tl_gpu_buffer *y,
                         int64_t n, int64_t n_rows, float eps) TL_WARN_UNUSED;

enum tl_gpu_eltwise_op {
    TL_GPU_ADD = 0,    // y = a + b (tl_add)
    TL_GPU_MUL = 1,    // y = a * b
    TL_GPU_SWIGLU = 2, // y = silu(a) * b, a = gate, b = up (tl_swiglu)
};
// y[i] = a[i] op b[i] for i < n. y may be a or b.
tl_status tl_gpu_eltwise(tl_gpu_rec *r, enum tl_gpu_eltwise_op op, tl_gpu_buffer *a,
                         tl_gpu_buffer *b, tl_gpu_buffer *y, int64_t n) TL_WARN_UNUSED;

// x[r][i] += bias[i] for n_rows rows of n (tl_add of the bias to each row: bit-identical).
tl_status tl_gpu_add_bias(tl_gpu_rec *r, tl_gpu_buffer *x, tl_gpu_buffer *bias, int64_t n,
                          int64_t n_rows) TL_WARN_UNUSED;

// Fills the RoPE table cs[(pos * head_dim/2 + i) * 2 + {0,1}] = {cos, sin} of
// pos * freq_scale * freq_base^(-2i/head_dim) for pos < n_pos, computed as the CPU computes it
// (in double, rounded to float), so tl_gpu_rope equals tl_rope bit for bit. cs holds
// n_pos * head_dim floats. head_dim even.
void tl_gpu_rope_table_fill(float *cs, int64_t n_pos, int head_dim, float freq_base,
                            float freq_scale);

// RoPE in place on x (n_tok, n_heads, head_dim) (tl_rope, per token t at position pos[t]):
// pos is a buffer of n_tok int32, table one filled by tl_gpu_rope_table_fill for n_table
// positions. Every pos[t] must be in [0, n_table) (a row at another position is left as is).
tl_status tl_gpu_rope(tl_gpu_rec *r, tl_gpu_buffer *x, int64_t n_tok, int n_heads, int head_dim,
                      enum tl_rope_mode mode, tl_gpu_buffer *pos, tl_gpu_buffer *table,
                      int64_t n_table) TL_WARN_UNUSED;

// Whether tl_gpu_matmul takes weights of this type (F32, F16, BF16, Q8_0, Q4_K, Q5_K, Q6_K).
bool tl_gpu_matmul_supported(enum tl_dtype type);

// Bytes a device buffer holding a weight of (n_out, n_in) `type` must have: the rows as in the
// model file plus padding the shaders may read (0 for an unsupported type or shape).
size_t tl_gpu_matmul_weight_bytes(enum tl_dtype type, int64_t n_in, int64_t n_out);

// y[t][o] = sum_i W[o][i] * x[t][i] for t < n_tok, o < n_out (tl_matmul): W in `type` rows as in
// the model file (n_in even for F16/BF16, a multiple of 32 for Q8_0, of 256 for the K-quants),
// x (n_tok, n_in), y (n_tok,
// n_out). Each output element is reduced in one fixed order: a row's result is bit-identical
// alone and inside any batch.
tl_status tl_gpu_matmul(tl_gpu_rec *r, enum tl_dtype type, tl_gpu_buffer *w, int64_t n_in,
                        int64_t n_out, tl_gpu_buffer *x, int64_t n_tok,
                        tl_gpu_buffer *y) TL_WARN_UNUSED;

// y[t] = row ids[t] of the table W (n_rows rows of n values of `type`, any type tl_gpu_matmul
// takes, in a buffer of tl_gpu_matmul_weight_bytes), decoded to f32 bit-identically to
// tl_dequantize_row: the embedding lookup. ids: n_tok int32 in [0, n_rows) (one outside gives a
// row of zeros, never a read outside the table); y: (n_tok, n) f32.
tl_status tl_gpu_get_rows(tl_gpu_rec *r, enum tl_dtype type, tl_gpu_buffer *w, int64_t n,
                          int64_t n_rows, tl_gpu_buffer *ids, int64_t n_tok,
                          tl_gpu_buffer *y) TL_WARN_UNUSED;

// ---- paged KV cache and attention -------------------------------------------------------------

// A paged K and V pool on the device: n_blocks blocks of block_size positions of n_kv_head x
// head_dim values of `type` (F32; F16 with head_dim even; Q8_0 with head_dim a multiple of 32
// and n_kv_head * head_dim <= 7680), in kernels.h's tl_kv_layer element order and byte layout,
// so the engine's block ids address it as they address the CPU's pools.
struct tl_gpu_kv {
    enum tl_dtype type;
    int block_size, n_kv_head, head_dim; // head_dim <= 256
    int64_t n_blocks;
    tl_gpu_buffer *k, *v; // borrowed, each of tl_gpu_kv_pool_bytes
};

// Bytes of one pool (K or V) of that shape; 0 when the type or shape is not supported.
size_t tl_gpu_kv_pool_bytes(enum tl_dtype type, int64_t n_blocks, int block_size, int n_kv_head,
                            int head_dim);

// The step's token table, an int32 buffer of n_meta entries built by the host: meta[2t] is token
// t's position, meta[2t + 1] the index in meta where its sequence's block table begins (block
// ids < n_blocks for positions 0..pos). Block ids outside the pool and tables outside meta are
// the caller's bug: the kernels then skip the store or read a wrong row, never out of bounds.

// Stores token t's K row k[t] and V row v[t] (n_tok rows of n_kv_head * head_dim f32) at its
// position (tl_kv_store: the same bytes; F16 rounds to nearest even as tl_f32_to_fp16, Q8_0
// quantizes as tl_quantize_row, for finite inputs).
tl_status tl_gpu_kv_store(tl_gpu_rec *r, const struct tl_gpu_kv *kv, tl_gpu_buffer *k,
                          tl_gpu_buffer *v, int64_t n_tok, tl_gpu_buffer *meta,
                          int64_t n_meta) TL_WARN_UNUSED;

// Causal attention for n_tok query tokens (tl_attention): q and out are (n_tok, n_head *
// head_dim); token t attends to positions 0..meta[2t] of its sequence; grouped-query with
// n_head a multiple of n_kv_head. Each output is reduced in an order that depends only on the
// token's context length: bit-identical alone and in any batch.
tl_status tl_gpu_attention(tl_gpu_rec *r, const struct tl_gpu_kv *kv, tl_gpu_buffer *q,
                           int64_t n_tok, int n_head, float scale, tl_gpu_buffer *meta,
                           int64_t n_meta, tl_gpu_buffer *out) TL_WARN_UNUSED;

#endif
