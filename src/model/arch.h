/*
 * Internal to src/model: the model families. One descriptor per GGUF `general.architecture`
 * (defined in its arch_<family>.c) says what the shared forward pass needs to know about the
 * family: the RoPE pairing llama.cpp uses for it, which optional tensors it requires, and the
 * family's own hyperparameter keys, read by its read_hparams hook after the keys every family
 * shares (loader_gguf.c). A new family is a new descriptor plus, where its block differs, an
 * optional piece of struct tl_layer / struct tl_hparams that forward.c honours.
 */
#ifndef TL_MODEL_ARCH_H
#define TL_MODEL_ARCH_H

#include "model/model.h"

// The GGUF keys of one file under one prefix ("<arch>."), for the hparam hooks.
struct tl_arch_keys {
    const struct tl_gguf *gguf; // borrowed
    const char *path;           // for messages
    const char *prefix;         // the architecture name
};

// "<prefix>.<suffix>" as u32 / f32 / bool. _req: a missing or invalid key is an error naming
// it. _opt: leaves *out as it was when the key is absent or invalid.
tl_status tl__arch_u32_req(const struct tl_arch_keys *k, const char *suffix,
                           int32_t *out) TL_WARN_UNUSED;
void tl__arch_u32_opt(const struct tl_arch_keys *k, const char *suffix, int32_t *out);
tl_status tl__arch_f32_req(const struct tl_arch_keys *k, const char *suffix,
                           float *out) TL_WARN_UNUSED;
void tl__arch_f32_opt(const struct tl_arch_keys *k, const char *suffix, float *out);
void tl__arch_bool_opt(const struct tl_arch_keys *k, const char *suffix, bool *out);

enum tl_arch_experts {
    TL_EXPERTS_NONE = 0, // dense; an <arch>.expert_count > 0 is refused
    TL_EXPERTS_OPTIONAL, // MoE when <arch>.expert_count > 0 (llama: Mixtral)
    TL_EXPERTS_REQUIRED, // always MoE (qwen3moe)
};

// Reads expert_count (required or optional per `experts`), then expert_used_count (required
// when there are experts) into hp, checking 1 <= used <= count <= 4096; n_ff_exp is set to
// ff_exp. For the families' hparam hooks.
tl_status tl__arch_read_experts(const struct tl_arch_keys *k, enum tl_arch_experts experts,
                                struct tl_hparams *hp) TL_WARN_UNUSED;

struct tl_arch_desc {
    enum tl_arch arch;
    const char *name;             // general.architecture, also the prefix of its keys
    enum tl_rope_mode rope_mode;  // llama.cpp's llama_model_rope_type for the family
    float rms_eps;                // RMSNorm epsilon when the file has no key
    bool attn_bias;               // blk.N.attn_{q,k,v}.bias required (optional otherwise)
    bool qk_norm;                 // blk.N.attn_{q,k}_norm.weight required (absent otherwise)
    bool fused;                   // phi3: attn_qkv (or attn_q/k/v) and a gate+up ffn_up
    bool post_norms;              // gemma2: post_attention_norm and post_ffw_norm required
    enum tl_arch_experts experts; // whether its FFNs are mixtures of experts
    // The family's own keys, after the shared ones are in hp; NULL when it has none.
    tl_status (*read_hparams)(const struct tl_arch_keys *k, struct tl_hparams *hp);
    // Encoders: loads every tensor itself (token_embd included) and checks their shapes, instead
    // of the decoder layout; NULL for decoders.
    tl_status (*load_encoder)(struct tl_model *m);
};

extern const struct tl_arch_desc tl__arch_llama, tl__arch_qwen2, tl__arch_qwen3, tl__arch_qwen3moe,
    tl__arch_granite, tl__arch_smollm3, tl__arch_phi3, tl__arch_bert, tl__arch_gemma2,
    tl__arch_gemma3;

// The descriptor of a general.architecture value; NULL when the family is not supported.
const struct tl_arch_desc *tl__arch_find(struct tl_gguf_str name);
// The descriptor of a loaded model's family (never NULL for a valid enum value).
const struct tl_arch_desc *tl__arch_of(enum tl_arch arch);
// "llama, qwen2, ...": the supported names, for error messages.
const char *tl__arch_names(void);

#endif
