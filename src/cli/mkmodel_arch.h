/*
 * Internal to `tokenloom mkmodel` (cmd_mkmodel.c): the model families it writes (mkmodel_arch.c)
 * and, for each, the tensors of one layer as llama.cpp's converters name and shape them.
 */
#ifndef TL_CLI_MKMODEL_ARCH_H
#define TL_CLI_MKMODEL_ARCH_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"

// How a tensor's values are made: N(0, std^2); all 1; 1 + N(0, 0.1^2) (qwen3's q/k norms, so
// that a reference can tell whether they are applied); given values.
enum tl_mk_fill { TL_MK_FILL_NORMAL, TL_MK_FILL_ONES, TL_MK_FILL_NEAR_ONE, TL_MK_FILL_VALUES };

struct tl_mk_family {
    const char *name; // general.architecture and the prefix of its keys
    float rms_eps, rope_base;
    bool attn_bias;   // qwen2: attn_{q,k,v}.bias
    bool qk_norm;     // qwen3: attn_{q,k}_norm
    bool multipliers; // granite: embedding/residual/attention/logit scales
    bool key_length;  // writes attention.key_length / value_length always
    bool moe;         // always a mixture of experts (qwen3moe)
    bool fused;       // phi3: attn_qkv and a gate+up ffn_up of 2 * ff rows
    bool bert;        // the BERT encoder: LayerNorms with biases, biases everywhere, GELU FFN,
                      // learned positions and token types (no RoPE, no output head)
    int gemma;        // 2, 3: Gemma's post norms, norms near 1 (the file holds 1 + w), the
                      // window key (and gemma2's soft-cap keys), no output.weight
};

// The family named `name`; NULL when mkmodel does not know it.
const struct tl_mk_family *tl__mk_family(const char *name);

// One tensor of a layer: blk.N.<suffix>.<kind>.
struct tl_mk_tensor {
    const char *suffix, *kind; // kind: "weight" or "bias"
    int64_t n_in, n_out;       // n_out 0 for 1-D norms and biases
    enum tl_mk_fill fill;
    int64_t n_exp; // > 0: n_exp matrices stacked in a 3-D tensor
    bool f32;      // kept F32 whatever --type (llama.cpp never quantizes the router)
};

struct tl_mk_shape {
    int64_t dim, q_dim, kv_dim, head_dim, ff;
    int64_t experts, expert_ff; // experts 0: a dense FFN
    int64_t vocab, ctx;         // rows of token_embd (and output) and of bert's position_embd
};

#define TL_MK_MAX_LAYER_TENSORS 17

// The tensors of one layer of family f, in llama.cpp's usual order; returns how many were
// written to out (at most TL_MK_MAX_LAYER_TENSORS).
int tl__mk_layer_tensors(const struct tl_mk_family *f, const struct tl_mk_shape *s,
                         struct tl_mk_tensor *out);

// The tensors outside the layers, named <suffix>.<kind>: those written before the layers
// (before = true: token_embd, and bert's token_types, position_embd, token_embd_norm) or after
// them (output_norm and output; none for bert). Returns how many (at most 5).
int tl__mk_global_tensors(const struct tl_mk_family *f, const struct tl_mk_shape *s, bool before,
                          struct tl_mk_tensor *out);

// Llama 3.1's "llama3" RoPE scaling as llama.cpp's converter writes it (rope_freqs.weight): a
// divisor per rotated pair, 1 for wavelengths under orig_ctx / 4 (high_freq_factor), `factor`
// over orig_ctx / 1 (low_freq_factor), 1 / ((1 - smooth) / factor + smooth) between.
// out: head_dim / 2 values.
void tl__mk_rope_llama3(double rope_base, int head_dim, double factor, int orig_ctx, float *out);

// BERT (mkmodel_bert.c): the size of the built-in WordPiece vocabulary; writing it (tokenizer.*
// keys: [PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103); the bert.* encoder keys
// (pooling: llama.cpp's enum, 1 mean, 2 CLS, 3 last).
int64_t tl__mk_bert_vocab_size(void);
tl_status tl__mk_bert_vocab(struct tl_gguf_writer *w) TL_WARN_UNUSED;
tl_status tl__mk_bert_keys(struct tl_gguf_writer *w, float eps, uint32_t pooling) TL_WARN_UNUSED;

#endif
