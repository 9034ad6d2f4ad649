/*
 * A loaded model: hyperparameters, typed views of the weights (mmap'd from the GGUF, or owned
 * when converted from a llama2.c checkpoint), the vocabulary, and the batched forward pass.
 *
 * Ownership: the model owns its gguf mapping, vocabulary and any converted weights. It is
 * immutable after tl_model_load and shared read-only by every engine and thread.
 */
#ifndef TL_MODEL_H
#define TL_MODEL_H

#include <tokenloom.h>

#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "tokenizer/tokenizer.h"

// The model families (src/model/arch_*.c describe each; arch.h is the table).
enum tl_arch {
    TL_ARCH_LLAMA = 0,
    TL_ARCH_QWEN2 = 1,
    TL_ARCH_QWEN3 = 2,
    TL_ARCH_GRANITE = 3,
    TL_ARCH_SMOLLM3 = 4,
    TL_ARCH_QWEN3MOE = 5,
    TL_ARCH_PHI3 = 6,
    TL_ARCH_BERT = 7, // an encoder (embeddings only): arch_bert.c, encode.c
    TL_ARCH_GEMMA2 = 8,
    TL_ARCH_GEMMA3 = 9,
};

// How an encoder turns its per-token states into one vector: llama.cpp's llama_pooling_type
// values, as `<arch>.pooling_type` stores them.
enum tl_pooling {
    TL_POOLING_NONE = 0, // per-token embeddings (not one vector)
    TL_POOLING_MEAN = 1,
    TL_POOLING_CLS = 2,  // the first token's state
    TL_POOLING_LAST = 3, // the last token's state
    TL_POOLING_RANK = 4, // a cross-encoder's classification head (rerankers)
};

struct tl_bert; // encode.h: an encoder's weights

struct tl_hparams {
    enum tl_arch arch;
    int32_t n_vocab;
    int32_t n_ctx_train;
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim; // n_embd / n_head unless the file says otherwise
    int32_t n_ff;
    float rms_eps;
    float rope_freq_base;
    float rope_freq_scale; // 1 / linear scaling factor
    enum tl_rope_mode rope_mode;
    // Family knobs; 0 leaves the plain Llama block (zeroed hparams are a llama model).
    float embd_scale;     // embeddings multiplied by it (granite)
    float residual_scale; // each sublayer's output multiplied by it before the add (granite)
    float attn_scale;     // softmax scale of q.k; 0 = 1 / sqrt(head_dim)
    float logit_scale;    // logits divided by it (granite)
    int32_t no_rope_step; // layers il with (il + 1) % no_rope_step == 0 skip RoPE (smollm3: 4)
    // Gemma 2: GeGLU (tanh GELU) FFNs, soft-capping, sliding-window layers.
    bool ffn_gelu;            // FFN is gelu_tanh(gate) * up instead of silu(gate) * up
    float attn_softcap;       // attention logit soft-capping (0: none)
    float final_softcap;      // logits become cap * tanh(logits / cap) (0: none)
    int32_t n_swa;            // sliding window of the sliding layers (0: none)
    int32_t swa_pattern;      // layers il with il % swa_pattern < swa_pattern - 1 slide (gemma2: 2)
    float rope_freq_base_swa; // RoPE base of the sliding layers, unscaled (gemma3); 0: the same
    // Mixture of experts (qwen3moe); 0 for dense models.
    int32_t n_expert;      // experts per layer
    int32_t n_expert_used; // experts each token is routed to (top-k)
    int32_t n_ff_exp;      // hidden width of one expert
    // Encoders (bert): rms_eps holds the LayerNorm epsilon.
    enum tl_pooling pooling; // <arch>.pooling_type (TL_POOLING_NONE when absent)
};

struct tl_layer {
    const float *attn_norm;      // (n_embd)
    struct tl_weight wq;         // (n_head*head_dim rows, n_embd)
    struct tl_weight wk;         // (n_head_kv*head_dim, n_embd)
    struct tl_weight wv;         // (n_head_kv*head_dim, n_embd)
    struct tl_weight wo;         // (n_embd, n_head*head_dim)
    const float *bq, *bk, *bv;   // attention biases (qwen2), NULL otherwise
    const float *q_norm;         // (head_dim) RMSNorm of each q head before RoPE (qwen3), or NULL
    const float *k_norm;         // (head_dim) the same for each k head
    bool no_rope;                // q and k of this layer are not rotated (NoPE layers)
    int32_t window;              // sliding-window attention over the last `window` positions, or 0
    const float *attn_post_norm; // (n_embd) RMSNorm of the attention output (gemma2), or NULL
    const float *ffn_post_norm;  // (n_embd) RMSNorm of the FFN output (gemma2), or NULL
    const float *ffn_norm;       // (n_embd)
    struct tl_weight w_gate;     // (n_ff, n_embd)
    struct tl_weight w_up;       // (n_ff, n_embd)
    struct tl_weight w_down;     // (n_embd, n_ff)
    // A mixture-of-experts FFN instead of w_gate/w_up/w_down when n_expert > 0: the router and
    // each expert's matrices as views into the stacked GGUF tensors.
    int32_t n_expert;           // 0: dense layer
    struct tl_weight router;    // (n_expert rows, n_embd): ffn_gate_inp
    struct tl_weight *exp_gate; // (n_expert) each (n_ff_exp, n_embd); owned array (model->owned)
    struct tl_weight *exp_up;   // (n_expert) each (n_ff_exp, n_embd), same array
    struct tl_weight *exp_down; // (n_expert) each (n_embd, n_ff_exp), same array
};

// The matrices of a layer that the forward pass multiplies with, in a fixed order: q, k, v, o,
// then gate, up, down (dense) or the router and every expert's gate, up, down. For packing,
// scratch sizing and work accounting.
int64_t tl_layer_n_weights(const struct tl_layer *L);
struct tl_weight *tl_layer_weight(struct tl_layer *L, int64_t i);

// The largest head_dim / 2 of a model with rope_freqs (the forward pass keeps one table).
#define TL_ROPE_FREQS_MAX_HALF 256

struct tl_model {
    char *path; // owned
    char *name; // owned
    struct tl_hparams hp;
    struct tl_gguf *gguf; // owned; NULL for llama2.c checkpoints
    void *map;            // owned mmap of a llama2.c checkpoint (NULL for GGUF)
    size_t map_bytes;
    struct tl_vocab *vocab;    // owned
    char *chat_template;       // owned, NULL if absent
    struct tl_weight tok_embd; // (n_vocab rows, n_embd)
    const float *output_norm;  // (n_embd)
    const float *rope_freqs;   // (head_dim / 2) RoPE frequency divisors ("rope_freqs.weight",
                               // Llama 3.1+ "llama3" scaling), NULL when the file has none
    struct tl_weight output;   // (n_vocab rows, n_embd); equals tok_embd when tied
    struct tl_layer *layers;   // owned, (n_layer)
    void **owned;              // owned buffers (converted weights), freed with the model
    int n_owned;
    int64_t n_params;
    const char *weight_type; // name of the most common matrix type
    // An encoder's weights (bert; then layers, output and output_norm are unset and the decoder
    // forward pass refuses the model); NULL for decoders. In model->owned.
    struct tl_bert *bert;
};

// ---- the batched forward pass -----------------------------------------------------------------

// A flat batch: tokens of any number of sequences, never padded.
struct tl_batch {
    int64_t n_tok;
    const int32_t *token;               // (n_tok)
    const int32_t *pos;                 // (n_tok) position of each token in its sequence
    const int32_t *seq;                 // (n_tok) index into block_tables
    const int32_t *const *block_tables; // per sequence index: its KV block table
    int64_t n_out;                      // tokens whose logits are wanted
    const int32_t *out_idx;             // (n_out) batch indices of those tokens
};

// Checks a batch any backend runs: 1..max_tok tokens, ids in [0, n_vocab), positions in
// [0, max_ctx), n_out <= n_tok with output indices inside the batch. TL_ERR_INVALID_ARG
// (message set) naming the first bad field, else TL_OK.
tl_status tl_batch_check(const struct tl_batch *b, int32_t n_vocab, int64_t max_tok,
                         int64_t max_ctx);

// The KV pools of every layer (owned by the engine's KV cache).
struct tl_kv_pages {
    int32_t n_layer;
    struct tl_kv_layer *layers; // (n_layer)
};

// Scratch for forward passes of up to max_tok tokens whose context is at most max_ctx.
struct tl_forward;
struct tl_forward *tl_forward_create(const struct tl_model *m, int64_t max_tok, int64_t max_ctx,
                                     struct tl_pool *pool);
void tl_forward_destroy(struct tl_forward *f);

// Runs the model over the batch: writes each token's K/V into the pages at its position, then
// attends over positions [0, pos] of its own sequence. logits: (n_out, n_vocab). Each token's
// logits are bit-identical whatever else is in the batch.
tl_status tl_forward_run(struct tl_forward *f, const struct tl_batch *b,
                         const struct tl_kv_pages *kv, float *logits) TL_WARN_UNUSED;

// ---- step profile (benchmarks) ------------------------------------------------------------------

// Where the time of tl_forward_run goes, phase by phase, summed over every run while profiling
// is on: wall time, and CPU time of the calling thread (with a one-thread pool that is all the
// work, and it does not count time the thread spent preempted on a loaded machine).
enum tl_fwd_phase {
    TL_FWD_EMBED,      // token embedding lookup
    TL_FWD_NORM,       // RMSNorm before attention and before the FFN
    TL_FWD_QKV,        // q/k/v matmuls
    TL_FWD_ROPE_STORE, // bias, RoPE, K/V store into the paged cache
    TL_FWD_ATTN,       // attention
    TL_FWD_WO,         // attention output matmul
    TL_FWD_RESIDUAL,   // residual adds
    TL_FWD_GATE_UP,    // gate/up matmuls
    TL_FWD_SWIGLU,     // SwiGLU
    TL_FWD_DOWN,       // down matmul
    TL_FWD_OUT_NORM,   // gather of the output rows + final RMSNorm
    TL_FWD_OUTPUT,     // vocabulary projection (logits)
    TL_FWD_N_PHASES
};
struct tl_forward_profile {
    int64_t runs, tokens, outputs;
    int64_t wall_ns[TL_FWD_N_PHASES], cpu_ns[TL_FWD_N_PHASES];
};
// Turns profiling on (counters reset) or off for every tl_forward of the process. Not
// thread-safe: for benchmarks that run one engine and read the counters between steps.
void tl_forward_profile_enable(bool on);
void tl_forward_profile_get(struct tl_forward_profile *out);
const char *tl_forward_phase_name(enum tl_fwd_phase ph);

// ---- work accounting (work.c) -----------------------------------------------------------------

// What one forward pass over a batch computes and reads, counted from the shapes (work.c has
// the rules): the engine sums it per step for the utilization metrics.
struct tl_step_work {
    double int8_ops;     // matmul ops with quantized weights (a multiply-add = 2 ops)
    double flops;        // f32 FLOPs: float-weight matmuls and attention
    double weight_bytes; // weight bytes read (each matrix once, plus the embedding rows)
    double kv_bytes;     // K and V bytes read by attention
};
void tl_model_step_work(const struct tl_model *m, enum tl_dtype kv_type, const struct tl_batch *b,
                        struct tl_step_work *out);

#endif
