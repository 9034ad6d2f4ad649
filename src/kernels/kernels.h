/*
 * The arithmetic of the forward pass: matmul per weight type, norms, RoPE, activation, paged
 * attention, and the f16/bf16/Q8_0 conversions. Every op has a plain scalar reference; SIMD
 * variants (AVX2, AVX-512/VNNI) are chosen once per process at run time (TL_ISA=scalar|avx2|avx512
 * overrides) and each is tested against the reference.
 *
 * Determinism contract (the engine relies on it): for a given ISA variant, the value of every
 * output element depends only on the inputs it is a function of -- never on how many tokens
 * are in the batch, where a token sits in it, the tile it falls in, or the thread count. Work
 * is split across threads by output rows / (token, head) pairs, never inside one reduction.
 *
 * Thread model: ops that take a tl_pool fan out over it; the others are single-threaded and
 * re-entrant. No op allocates: callers pass work buffers sized by the *_work_bytes helpers.
 */
#ifndef TL_KERNELS_H
#define TL_KERNELS_H

#include "core/dtype.h"
#include "core/error.h"
#include "core/pool.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// ---- element conversions ---------------------------------------------------------------------

float tl_fp16_to_f32(uint16_t h);
uint16_t tl_f32_to_fp16(float f); // round to nearest even, overflow to inf
float tl_bf16_to_f32(uint16_t h);
uint16_t tl_f32_to_bf16(float f); // round to nearest even; NaN stays NaN

// Q8_0: blocks of 32 values sharing one f16 scale d; value = d * qs[i].
#define TL_QK8_0 32
struct tl_block_q8_0 {
    uint16_t d; // f16 scale
    int8_t qs[TL_QK8_0];
};

// Whether the kernels can multiply with weights of this type: F32, F16, BF16, Q8_0, and
// Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (kernels/quants.h).
bool tl_kernels_weight_supported(enum tl_dtype type);

// Dequantizes n elements (a multiple of the type's block size) of a row of `type` to f32.
// Works for every weight-supported type. Returns false for other types.
bool tl_dequantize_row(enum tl_dtype type, const void *src, float *dst, int64_t n);

// Quantizes n f32 values (n a multiple of the block size) to `type` (any weight-supported type;
// round-to-nearest for the 4/5/6-bit and K types);
// used by mkmodel and tests. Returns false for other types.
bool tl_quantize_row(enum tl_dtype type, const float *src, void *dst, int64_t n);

// ---- matmul ---------------------------------------------------------------------------------

// How a weight's bytes are arranged.
enum tl_weight_layout {
    TL_WEIGHT_ROWS = 0, // as in the model file: n_out rows of row_bytes, contiguous
    TL_WEIGHT_PACKED,   // repacked by tl_weight_prepare; only tl_matmul reads it
};

// A weight matrix: n_out rows of n_in elements, rows contiguous as in the model file, or
// (layout TL_WEIGHT_PACKED) rearranged by tl_weight_prepare for faster batched matmul.
struct tl_weight {
    enum tl_dtype type;
    int64_t n_in;                 // row length (elements), ne[0] in GGUF terms
    int64_t n_out;                // rows, ne[1]
    size_t row_bytes;             // bytes per row in the file layout (even when packed)
    const void *data;             // mmap or owned by the model; opaque when packed
    enum tl_weight_layout layout; // TL_WEIGHT_ROWS unless tl_weight_prepare repacked it
};

// Repacks a file-layout weight into the layout the matmul kernels read fastest, once at load
// time: rows interleaved 16 at a time so one vector load holds 16 rows (Q8_0: 4 bytes of each,
// pre-offset for VNNI; F32/F16/BF16: one column; Q4_K/Q5_K/Q6_K: 4 values of each, nibbles
// kept packed); every ISA variant reads it. On success
// *owned is NULL when `w` is left as is (a type without a packed layout, or already packed),
// else the new 64-byte aligned buffer that w->data now points to: the caller owns it, frees it
// with tl_aligned_free after the last matmul, and must not read rows through w->data any more.
// tl_matmul's results stay within the tested tolerance of the file layout's, and the
// determinism contract holds for each layout. Returns TL_ERR_NOMEM (w unchanged) if the copy
// cannot be allocated, TL_ERR_INVALID_ARG for an inconsistent shape. Not thread-safe on `w`.
tl_status tl_weight_prepare(struct tl_weight *w, void **owned) TL_WARN_UNUSED;

// tl_weight_prepare in two steps, for a caller that packs many weights into one allocation
// (a model's: one huge-page arena instead of ~100 buffers of 4 KiB pages). *bytes: what the
// packed copy needs, 0 when `w` has no packed layout or is packed already; TL_ERR_INVALID_ARG
// for an inconsistent shape, TL_ERR_NOMEM when the size overflows. tl_weight_pack then writes
// it into `buf` (64-byte aligned, that many bytes, owned by the caller) and points w at it.
tl_status tl_weight_packed_bytes(const struct tl_weight *w, size_t *bytes) TL_WARN_UNUSED;
void tl_weight_pack(struct tl_weight *w, void *buf);

// Bytes that w->data spans in its current layout (what a copy of the weight must hold).
size_t tl_weight_data_bytes(const struct tl_weight *w);

// Bytes of work buffer tl_matmul needs for n_tok tokens with this weight (as prepared: the
// answer depends on the layout, so ask after tl_weight_prepare).
size_t tl_matmul_work_bytes(const struct tl_weight *w, int64_t n_tok);

// y[t * n_out + r] = sum_i w[r][i] * x[t * n_in + i] for t < n_tok, r < n_out.
// The step's tokens are tiled so each weight block loaded is used for all of them; threads split
// the rows. `work` must hold tl_matmul_work_bytes(w, n_tok) bytes, 64-byte aligned.
void tl_matmul(struct tl_pool *pool, const struct tl_weight *w, const float *x, int64_t n_tok,
               float *y, void *work);

// Several weights with the same input (q/k/v, gate/up): y[i] = tl_matmul(w[i], x) for i < n_w
// (1 <= n_w <= TL_MATMUL_MULTI_MAX), bit-identical to n_w tl_matmul calls, but the activations
// are quantized or rearranged once and the rows of all the weights are split over the threads
// in one fork-join. The weights must share n_in; `work` must hold the largest
// tl_matmul_work_bytes of them. Weights that need different activation layouts are simply
// multiplied one after the other.
#define TL_MATMUL_MULTI_MAX 8
void tl_matmul_multi(struct tl_pool *pool, int n_w, const struct tl_weight *const *w,
                     const float *x, int64_t n_tok, float *const *y, void *work);

// ---- row-wise ops (one token's row at a time; callers loop or parallelize over tokens) -------

// y = x / sqrt(mean(x^2) + eps) * w  (n elements; y may alias x)
void tl_rmsnorm(const float *x, const float *w, float eps, int64_t n, float *y);

enum tl_rope_mode {
    TL_ROPE_NORMAL = 0, // rotate adjacent pairs (x[2i], x[2i+1]): Llama in GGUF layout
    TL_ROPE_NEOX = 2,   // rotate halves (x[i], x[i + d/2]): Qwen2, GPT-NeoX
};

// Rotates n_heads vectors of head_dim (contiguous) in place for position `pos`:
// theta_i = (pos * freq_scale) * freq_base^(-2i/head_dim).
void tl_rope(float *x, int n_heads, int head_dim, int64_t pos, float freq_base, float freq_scale,
             enum tl_rope_mode mode);

// out[i] = silu(gate[i]) * up[i]  (out may alias gate)
void tl_swiglu(const float *gate, const float *up, float *out, int64_t n);

// y[i] += x[i]
void tl_add(float *y, const float *x, int64_t n);

// In-place softmax of n values.
void tl_softmax(float *x, int64_t n);

// out[i] = e^(x[i] - m) for n values with x[i] <= m (softmax numerators; -inf gives exactly 0,
// NaN gives 0 on SIMD variants). Vectorized; the sampler's normalizers use it.
void tl_exp_sub(const float *x, float m, float *out, int64_t n);

// ---- paged KV cache and attention -------------------------------------------------------------
//
// The K and V of one layer live in pools of n_blocks blocks; a block holds block_size positions
// of n_kv_head * head_dim values of kv `type` (F32, F16 or Q8_0): element (block b, slot s,
// head h, dim d) is element index ((b * block_size + s) * n_kv_head + h) * head_dim + d. A
// sequence's block table maps its logical block j (positions j*block_size ..) to a physical
// block.
//
// Q8_0 (head_dim a multiple of 32): the same element order cut into GGUF Q8_0 blocks of 32
// (struct tl_block_q8_0, 34 bytes: f16 scale then 32 int8), so element index i lives in Q8_0
// block i / 32 at slot i % 32, and one position's row of every head is exactly what
// tl_quantize_row(TL_DTYPE_Q8_0) makes of it. The scales stay interleaved with their values:
// a (position, head) row is one contiguous run of head_dim / 32 * 34 bytes, so the attention
// walk streams one run per row (one prefetch stream, the scale in the cache line of its
// values or the next) and the block arithmetic of F32/F16 carries over unchanged.

struct tl_kv_layer {
    enum tl_dtype type; // F32, F16 or Q8_0 (Q8_0 needs head_dim % 32 == 0)
    int block_size;
    int n_kv_head;
    int head_dim;
    void *k; // (n_blocks, block_size, n_kv_head, head_dim), owned by the KV cache
    void *v; // same shape
};

// Whether a KV cache of `type` can hold heads of head_dim values (F32, F16: any head_dim >= 1;
// Q8_0: a multiple of 32).
bool tl_kv_type_supported(enum tl_dtype type, int head_dim);

// Bytes of one (position, KV head) row of head_dim values of kv `type` (0 when unsupported).
size_t tl_kv_row_bytes(enum tl_dtype type, int head_dim);

// Stores one token's k and v rows (n_kv_head * head_dim f32 each) at position pos of the
// sequence whose block table is `block_table`, converting to the cache type (Q8_0: quantized
// as tl_quantize_row does, byte for byte).
void tl_kv_store(const struct tl_kv_layer *kv, const int32_t *block_table, int64_t pos,
                 const float *k, const float *v);

// One query token of the batch for tl_attention.
struct tl_attn_query {
    const int32_t *block_table; // its sequence's block table (borrowed)
    int64_t n_ctx;              // attends to positions [0, n_ctx) (its own position + 1)
};

// Bytes of work buffer tl_attention needs for the longest n_ctx in the batch.
size_t tl_attention_work_bytes(int n_threads, int64_t max_ctx, int head_dim);

// Causal attention for n_tok query tokens at once: for token t and head h,
// out[t][h] = softmax(q[t][h] . K[0..n_ctx) * scale) . V, reading K/V through the token's own
// block table (grouped-query: head h uses kv head h / (n_head / n_kv_head)). q is
// (n_tok, n_head * head_dim); out is the same shape. Parallel over (token, head) pairs.
void tl_attention(struct tl_pool *pool, const struct tl_kv_layer *kv, const float *q,
                  const struct tl_attn_query *queries, int64_t n_tok, int n_head, float scale,
                  float *out, void *work);

// Per-layer variations of tl_attention (zero-initialized: plain causal attention).
struct tl_attn_opts {
    // Sliding window (0: none): the query at position q_pos = n_ctx - 1 attends only to key
    // positions p with q_pos - window < p <= q_pos, the last `window` positions including its
    // own. This is the convention of Hugging Face transformers (sliding_window_overlay:
    // kv_idx > q_idx - sliding_window; Gemma 2's older mask tril(diagonal=-sliding_window)
    // masks q - k >= W) and of llama.cpp (llama_hparams::is_masked_swa, standard type: masked
    // when p1 - p0 >= n_swa), so a GGUF's `*.attention.sliding_window` means the same here.
    int64_t window;
    // Attention logit soft-capping (0: none): each score s = (q . k) * scale becomes
    // softcap * tanh(s / softcap) before the softmax (Gemma 2's attn_logit_softcapping).
    float softcap;
};

// tl_attention with per-layer options (NULL: none). Results stay batch-invariant.
void tl_attention_opt(struct tl_pool *pool, const struct tl_kv_layer *kv, const float *q,
                      const struct tl_attn_query *queries, int64_t n_tok, int n_head, float scale,
                      const struct tl_attn_opts *opts, float *out, void *work);

// ---- introspection (tests, benchmarks) --------------------------------------------------------

// The ISA variant in use: "scalar", "avx2" or "avx512".
const char *tl_kernels_isa(void);
// Forces a variant ("scalar", "avx2", "avx512") for the whole process; false if the CPU lacks
// it. Tests use it to compare variants; call it before any op runs or between ops.
bool tl_kernels_force_isa(const char *isa);

#endif
