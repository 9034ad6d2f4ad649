/*
 * The families `tokenloom mkmodel --arch` writes (mkmodel_arch.h): their defaults and the
 * tensors of one layer, named and shaped as llama.cpp's converters write them. eps and rope
 * base are the released models' (Llama 2, Qwen2.5, Qwen3, Granite 3.x 2B, SmolLM3, Phi-3).
 * Pure data and arithmetic; no state.
 */
#include "cli/mkmodel_arch.h"

#include <math.h>
#include <string.h>

static const struct tl_mk_family families[] = {
    // name, eps, rope_base, attn_bias, qk_norm, multipliers, key_length, moe, fused, bert, gemma
    {"llama", 1e-5f, 10000.0f, false, false, false, false, false, false, false, 0},
    {"qwen2", 1e-6f, 1000000.0f, true, false, false, false, false, false, false, 0},
    {"qwen3", 1e-6f, 1000000.0f, false, true, false, true, false, false, false, 0},
    {"qwen3moe", 1e-6f, 1000000.0f, false, true, false, true, true, false, false, 0},
    {"granite", 1e-5f, 10000.0f, false, false, true, false, false, false, false, 0},
    {"smollm3", 1e-6f, 5000000.0f, false, false, false, false, false, false, false, 0},
    {"phi3", 1e-5f, 10000.0f, false, false, false, false, false, true, false, 0},
    // BERT's layer_norm_eps (bert-base, bge, e5, all-MiniLM); no RoPE
    {"bert", 1e-12f, 0.0f, true, false, false, false, false, false, true, 0},
    {"gemma2", 1e-6f, 10000.0f, false, false, false, true, false, false, false, 2},
    {"gemma3", 1e-6f, 1000000.0f, false, true, false, true, false, false, false, 3},
};

const struct tl_mk_family *tl__mk_family(const char *name)
{
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++)
        if (!strcmp(name, families[i].name)) return &families[i];
    return NULL;
}

static struct tl_mk_tensor tensor(const char *suffix, const char *kind, int64_t n_in, int64_t n_out,
                                  enum tl_mk_fill fill)
{
    return (struct tl_mk_tensor){suffix, kind, n_in, n_out, fill, 0, false};
}

// A BERT layer as llama.cpp's converter writes it: every projection with its bias, the
// post-attention and post-FFN LayerNorms (weight near 1, bias random so a reference can tell
// both are applied), an up/down GELU FFN.
static int bert_layer(const struct tl_mk_shape *s, struct tl_mk_tensor *out)
{
    int n = 0;
    const char *proj[4] = {"attn_q", "attn_k", "attn_v", "attn_output"};
    for (int i = 0; i < 4; i++) {
        out[n++] = tensor(proj[i], "weight", s->dim, s->dim, TL_MK_FILL_NORMAL);
        out[n++] = tensor(proj[i], "bias", s->dim, 0, TL_MK_FILL_NORMAL);
    }
    out[n++] = tensor("attn_output_norm", "weight", s->dim, 0, TL_MK_FILL_NEAR_ONE);
    out[n++] = tensor("attn_output_norm", "bias", s->dim, 0, TL_MK_FILL_NORMAL);
    out[n++] = tensor("ffn_up", "weight", s->dim, s->ff, TL_MK_FILL_NORMAL);
    out[n++] = tensor("ffn_up", "bias", s->ff, 0, TL_MK_FILL_NORMAL);
    out[n++] = tensor("ffn_down", "weight", s->ff, s->dim, TL_MK_FILL_NORMAL);
    out[n++] = tensor("ffn_down", "bias", s->dim, 0, TL_MK_FILL_NORMAL);
    out[n++] = tensor("layer_output_norm", "weight", s->dim, 0, TL_MK_FILL_NEAR_ONE);
    out[n++] = tensor("layer_output_norm", "bias", s->dim, 0, TL_MK_FILL_NORMAL);
    return n;
}

int tl__mk_global_tensors(const struct tl_mk_family *f, const struct tl_mk_shape *s, bool before,
                          struct tl_mk_tensor *out)
{
    int n = 0;
    if (before) {
        out[n++] = tensor("token_embd", "weight", s->dim, s->vocab, TL_MK_FILL_NORMAL);
        if (f->bert) { // BERT's type_vocab_size is 2; llama.cpp keeps these two F32
            out[n] = tensor("token_types", "weight", s->dim, 2, TL_MK_FILL_NORMAL);
            out[n++].f32 = true;
            out[n] = tensor("position_embd", "weight", s->dim, s->ctx, TL_MK_FILL_NORMAL);
            out[n++].f32 = true;
            out[n++] = tensor("token_embd_norm", "weight", s->dim, 0, TL_MK_FILL_NEAR_ONE);
            out[n++] = tensor("token_embd_norm", "bias", s->dim, 0, TL_MK_FILL_NORMAL);
        }
    } else if (!f->bert) {
        out[n++] = tensor("output_norm", "weight", s->dim, 0, TL_MK_FILL_ONES);
        // Gemma's output is tied (llama.cpp's converter writes no output.weight).
        if (!f->gemma) out[n++] = tensor("output", "weight", s->dim, s->vocab, TL_MK_FILL_NORMAL);
    }
    return n;
}

int tl__mk_layer_tensors(const struct tl_mk_family *f, const struct tl_mk_shape *s,
                         struct tl_mk_tensor *out)
{
    if (f->bert) return bert_layer(s, out);
    int n = 0;
    // gemma: every norm near 1, so that a reader adding HF's 1 a second time is told apart
    const enum tl_mk_fill norm = f->gemma ? TL_MK_FILL_NEAR_ONE : TL_MK_FILL_ONES;
    out[n++] = tensor("attn_norm", "weight", s->dim, 0, norm);
    if (f->fused) {
        out[n++] =
            tensor("attn_qkv", "weight", s->dim, s->q_dim + 2 * s->kv_dim, TL_MK_FILL_NORMAL);
    } else {
        out[n++] = tensor("attn_q", "weight", s->dim, s->q_dim, TL_MK_FILL_NORMAL);
        out[n++] = tensor("attn_k", "weight", s->dim, s->kv_dim, TL_MK_FILL_NORMAL);
        out[n++] = tensor("attn_v", "weight", s->dim, s->kv_dim, TL_MK_FILL_NORMAL);
    }
    out[n++] = tensor("attn_output", "weight", s->q_dim, s->dim, TL_MK_FILL_NORMAL);
    if (f->gemma) out[n++] = tensor("post_attention_norm", "weight", s->dim, 0, norm);
    out[n++] = tensor("ffn_norm", "weight", s->dim, 0, norm);
    if (f->fused) {
        out[n++] = tensor("ffn_up", "weight", s->dim, 2 * s->ff, TL_MK_FILL_NORMAL);
        out[n++] = tensor("ffn_down", "weight", s->ff, s->dim, TL_MK_FILL_NORMAL);
    } else if (s->experts > 0) {
        out[n] = tensor("ffn_gate_inp", "weight", s->dim, s->experts, TL_MK_FILL_NORMAL);
        out[n++].f32 = true;
        const char *exps[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
        for (int i = 0; i < 3; i++) {
            bool down = i == 2;
            out[n] = tensor(exps[i], "weight", down ? s->expert_ff : s->dim,
                            down ? s->dim : s->expert_ff, TL_MK_FILL_NORMAL);
            out[n++].n_exp = s->experts;
        }
    } else {
        out[n++] = tensor("ffn_gate", "weight", s->dim, s->ff, TL_MK_FILL_NORMAL);
        out[n++] = tensor("ffn_up", "weight", s->dim, s->ff, TL_MK_FILL_NORMAL);
        out[n++] = tensor("ffn_down", "weight", s->ff, s->dim, TL_MK_FILL_NORMAL);
    }
    if (f->attn_bias) {
        out[n++] = tensor("attn_q", "bias", s->q_dim, 0, TL_MK_FILL_NORMAL);
        out[n++] = tensor("attn_k", "bias", s->kv_dim, 0, TL_MK_FILL_NORMAL);
        out[n++] = tensor("attn_v", "bias", s->kv_dim, 0, TL_MK_FILL_NORMAL);
    }
    if (f->gemma) out[n++] = tensor("post_ffw_norm", "weight", s->dim, 0, norm);
    if (f->qk_norm) {
        out[n++] = tensor("attn_q_norm", "weight", s->head_dim, 0, TL_MK_FILL_NEAR_ONE);
        out[n++] = tensor("attn_k_norm", "weight", s->head_dim, 0, TL_MK_FILL_NEAR_ONE);
    }
    return n;
}

void tl__mk_rope_llama3(double rope_base, int head_dim, double factor, int orig_ctx, float *out)
{
    const double low = 1.0, high = 4.0; // Llama 3.1's low_freq_factor, high_freq_factor
    for (int i = 0; i < head_dim / 2; i++) {
        double freq = pow(rope_base, -2.0 * i / head_dim);
        double wavelen = 2 * M_PI / freq;
        double smooth = (orig_ctx / wavelen - low) / (high - low);
        if (wavelen < orig_ctx / high)
            out[i] = 1.0f;
        else if (wavelen > orig_ctx / low)
            out[i] = (float)factor;
        else
            out[i] = (float)(1.0 / ((1 - smooth) / factor + smooth));
    }
}
