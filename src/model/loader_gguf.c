/*
 * GGUF model loader: hyperparameters from the "<arch>.*" keys (those every family shares here,
 * then the family's own through its descriptor, arch.h), weights as views into the mmap (no
 * copies), vocabulary from "tokenizer.*". Norm vectors and biases stored as F16/BF16 are
 * converted to owned f32 arrays, since the row-wise kernels take f32. Missing required keys and
 * tensors produce an error naming the file and the key; shapes are checked by model.c.
 */
#include "model/loader.h"

#include "model/arch.h"

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ctx {
    struct tl_model *m;
    const struct tl_arch_desc *desc; // the file's family
    struct tl_arch_keys keys;        // its "<arch>.*" keys
};

// A 1-D f32 vector of n elements (converted from F16/BF16 into an owned buffer when needed).
static tl_status load_vec(struct ctx *c, const char *name, int64_t n, bool required,
                          const float **out)
{
    const struct tl_gguf_tensor *t = tl_gguf_find_tensor(c->m->gguf, name);
    *out = NULL;
    if (!t) {
        if (required) return tl__errorf(TL_ERR_FORMAT, "%s: missing tensor %s", c->m->path, name);
        return TL_OK;
    }
    int64_t count = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    if (count != n)
        return tl__errorf(TL_ERR_FORMAT, "%s: tensor %s has %lld elements, expected %lld",
                          c->m->path, name, (long long)count, (long long)n);
    if (t->type == TL_DTYPE_F32) {
        *out = t->data;
        return TL_OK;
    }
    size_t bytes;
    float *buf = tl_mul_size((size_t)n, sizeof(float), &bytes) ? tl_aligned_alloc(bytes) : NULL;
    if (!buf) return tl__errorf(TL_ERR_NOMEM, "%s: out of memory", c->m->path);
    if (!tl_dequantize_row(t->type, t->data, buf, n)) {
        tl_aligned_free(buf);
        return tl__errorf(TL_ERR_UNSUPPORTED, "%s: tensor %s has unsupported type %s", c->m->path,
                          name, tl_dtype_name(t->type));
    }
    if (!tl__model_own(c->m, buf)) return tl__errorf(TL_ERR_NOMEM, "%s: out of memory", c->m->path);
    *out = buf;
    return TL_OK;
}

// A 2-D weight matrix view. Missing optional matrices leave w->data NULL.
static tl_status load_mat(struct ctx *c, const char *name, bool required, struct tl_weight *w)
{
    const struct tl_gguf_tensor *t = tl_gguf_find_tensor(c->m->gguf, name);
    memset(w, 0, sizeof(*w));
    if (!t) {
        if (required) return tl__errorf(TL_ERR_FORMAT, "%s: missing tensor %s", c->m->path, name);
        return TL_OK;
    }
    if (t->n_dims != 2 || t->ne[2] != 1 || t->ne[3] != 1)
        return tl__errorf(TL_ERR_FORMAT, "%s: tensor %s is not a matrix (%d dimensions)",
                          c->m->path, name, t->n_dims);
    w->type = t->type;
    w->n_in = t->ne[0];
    w->n_out = t->ne[1];
    w->data = t->data;
    if (!tl_dtype_row_bytes(t->type, t->ne[0], &w->row_bytes))
        return tl__errorf(TL_ERR_FORMAT, "%s: tensor %s: bad row size", c->m->path, name);
    return TL_OK;
}

// A matrix whose rows are several matrices stacked (phi3's attn_qkv, its gate+up ffn_up) as
// n views of rows[i] rows each, in order; the row counts must add up to the matrix's.
static tl_status split_rows(struct ctx *c, const char *name, const struct tl_weight *w,
                            const int64_t *rows, struct tl_weight *const *out, int n)
{
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        total += rows[i];
    if (w->n_out != total)
        return tl__errorf(TL_ERR_FORMAT, "%s: tensor %s has %lld rows, expected %lld", c->m->path,
                          name, (long long)w->n_out, (long long)total);
    int64_t r0 = 0;
    for (int i = 0; i < n; i++) {
        *out[i] = *w;
        out[i]->data = (const char *)w->data + (size_t)r0 * w->row_bytes;
        out[i]->n_out = rows[i];
        r0 += rows[i];
    }
    return TL_OK;
}

// Tensors that exist in some files of these families but that the forward pass has no place
// for: refused by name rather than silently ignored.
static const char *const unsupported_layer_tensors[] = {
    "attn_output.bias", "ffn_gate.bias", "ffn_up.bias", "ffn_down.bias", "ffn_gate_inp.weight",
};

// The n_expert (n_out, n_in) matrices stacked in one 3-D tensor [n_in, n_out, n_expert], as
// views: expert e's rows start at e * n_out rows. `out` holds n_expert weights.
static tl_status load_experts(struct ctx *c, const char *name, int32_t n_expert,
                              struct tl_weight *out)
{
    const struct tl_gguf_tensor *t = tl_gguf_find_tensor(c->m->gguf, name);
    if (!t) return tl__errorf(TL_ERR_FORMAT, "%s: missing tensor %s", c->m->path, name);
    if (t->n_dims != 3 || t->ne[2] != n_expert || t->ne[3] != 1)
        return tl__errorf(TL_ERR_FORMAT,
                          "%s: tensor %s has shape [%lld, %lld, %lld], expected 3 dimensions "
                          "with %d experts",
                          c->m->path, name, (long long)t->ne[0], (long long)t->ne[1],
                          (long long)t->ne[2], n_expert);
    size_t row_bytes;
    if (!tl_dtype_row_bytes(t->type, t->ne[0], &row_bytes))
        return tl__errorf(TL_ERR_FORMAT, "%s: tensor %s: bad row size", c->m->path, name);
    for (int32_t e = 0; e < n_expert; e++)
        out[e] = (struct tl_weight){.type = t->type,
                                    .n_in = t->ne[0],
                                    .n_out = t->ne[1],
                                    .row_bytes = row_bytes,
                                    .data = (const char *)t->data +
                                            (size_t)e * (size_t)t->ne[1] * row_bytes};
    return TL_OK;
}

// A mixture-of-experts FFN: the router and the stacked experts (qwen3moe, Mixtral-style llama).
static tl_status load_moe(struct ctx *c, int il, struct tl_layer *L)
{
    char name[96];
    tl_status rc;
    int32_t n_expert = c->m->hp.n_expert;
    size_t bytes;
    struct tl_weight *ws =
        tl_mul_size(3 * (size_t)n_expert, sizeof(*ws), &bytes) ? tl_aligned_alloc(bytes) : NULL;
    if (!ws || !tl__model_own(c->m, ws))
        return tl__errorf(TL_ERR_NOMEM, "%s: out of memory", c->m->path);
    L->n_expert = n_expert;
    L->exp_gate = ws, L->exp_up = ws + n_expert, L->exp_down = ws + 2 * n_expert;
#define NAME(suffix) (snprintf(name, sizeof(name), "blk.%d.%s", il, suffix), name)
    if ((rc = load_mat(c, NAME("ffn_gate_inp.weight"), true, &L->router)) ||
        (rc = load_experts(c, NAME("ffn_gate_exps.weight"), n_expert, L->exp_gate)) ||
        (rc = load_experts(c, NAME("ffn_up_exps.weight"), n_expert, L->exp_up)) ||
        (rc = load_experts(c, NAME("ffn_down_exps.weight"), n_expert, L->exp_down)))
        return rc;
#undef NAME
    return TL_OK;
}

tl_status tl__gguf_vec(struct tl_model *m, const char *name, int64_t n, bool required,
                       const float **out)
{
    struct ctx c = {.m = m};
    return load_vec(&c, name, n, required, out);
}

tl_status tl__gguf_mat(struct tl_model *m, const char *name, bool required, struct tl_weight *w)
{
    struct ctx c = {.m = m};
    return load_mat(&c, name, required, w);
}

static tl_status load_layer(struct ctx *c, int il, struct tl_layer *L)
{
    char name[96];
    tl_status rc;
    const struct tl_hparams *hp = &c->m->hp;
    int64_t q_dim = (int64_t)hp->n_head * hp->head_dim;
    int64_t kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
#define NAME(suffix) (snprintf(name, sizeof(name), "blk.%d.%s", il, suffix), name)
    size_t n_unsupported = sizeof(unsupported_layer_tensors) / sizeof(char *);
    bool moe = hp->n_expert > 0;
    if (moe) n_unsupported--; // ffn_gate_inp, the last, is its router
    for (size_t i = 0; i < n_unsupported; i++)
        if (tl_gguf_find_tensor(c->m->gguf, NAME(unsupported_layer_tensors[i])))
            return tl__errorf(TL_ERR_UNSUPPORTED,
                              "%s: tensor %s is not supported for architecture %s", c->m->path,
                              name, c->desc->name);
    if ((rc = load_vec(c, NAME("attn_norm.weight"), hp->n_embd, true, &L->attn_norm)) ||
        (rc = load_vec(c, NAME("ffn_norm.weight"), hp->n_embd, true, &L->ffn_norm)) ||
        (rc = load_mat(c, NAME("attn_output.weight"), true, &L->wo)))
        return rc;
    if (c->desc->fused && tl_gguf_find_tensor(c->m->gguf, NAME("attn_qkv.weight"))) {
        struct tl_weight qkv;
        if ((rc = load_mat(c, name, true, &qkv)) ||
            (rc = split_rows(c, name, &qkv, (int64_t[]){q_dim, kv_dim, kv_dim},
                             (struct tl_weight *[]){&L->wq, &L->wk, &L->wv}, 3)))
            return rc;
    } else if ((rc = load_mat(c, NAME("attn_q.weight"), true, &L->wq)) ||
               (rc = load_mat(c, NAME("attn_k.weight"), true, &L->wk)) ||
               (rc = load_mat(c, NAME("attn_v.weight"), true, &L->wv))) {
        return rc;
    }
    if (moe) {
        if ((rc = load_moe(c, il, L))) return rc;
    } else if (c->desc->fused) {
        struct tl_weight gate_up;
        if ((rc = load_mat(c, NAME("ffn_up.weight"), true, &gate_up)) ||
            (rc = split_rows(c, name, &gate_up, (int64_t[]){hp->n_ff, hp->n_ff},
                             (struct tl_weight *[]){&L->w_gate, &L->w_up}, 2)) ||
            (rc = load_mat(c, NAME("ffn_down.weight"), true, &L->w_down)))
            return rc;
    } else if ((rc = load_mat(c, NAME("ffn_gate.weight"), true, &L->w_gate)) ||
               (rc = load_mat(c, NAME("ffn_up.weight"), true, &L->w_up)) ||
               (rc = load_mat(c, NAME("ffn_down.weight"), true, &L->w_down))) {
        return rc;
    }
    bool bias = c->desc->attn_bias;
    if ((rc = load_vec(c, NAME("attn_q.bias"), q_dim, bias, &L->bq)) ||
        (rc = load_vec(c, NAME("attn_k.bias"), kv_dim, bias, &L->bk)) ||
        (rc = load_vec(c, NAME("attn_v.bias"), kv_dim, bias, &L->bv)))
        return rc;
    if (c->desc->qk_norm &&
        ((rc = load_vec(c, NAME("attn_q_norm.weight"), hp->head_dim, true, &L->q_norm)) ||
         (rc = load_vec(c, NAME("attn_k_norm.weight"), hp->head_dim, true, &L->k_norm))))
        return rc;
    if (c->desc->post_norms &&
        ((rc = load_vec(c, NAME("post_attention_norm.weight"), hp->n_embd, true,
                        &L->attn_post_norm)) ||
         (rc = load_vec(c, NAME("post_ffw_norm.weight"), hp->n_embd, true, &L->ffn_post_norm))))
        return rc;
#undef NAME
    L->no_rope = hp->no_rope_step > 0 && (il + 1) % hp->no_rope_step == 0;
    // llama.cpp's set_swa_pattern(n): layer il slides when il % n < n - 1
    if (hp->n_swa > 0 && hp->swa_pattern > 0 && il % hp->swa_pattern < hp->swa_pattern - 1)
        L->window = hp->n_swa;
    return TL_OK;
}

static tl_status load_hparams(struct ctx *c)
{
    struct tl_hparams *hp = &c->m->hp;
    tl_status rc;
    if ((rc = tl__arch_u32_req(&c->keys, "context_length", &hp->n_ctx_train)) ||
        (rc = tl__arch_u32_req(&c->keys, "embedding_length", &hp->n_embd)) ||
        (rc = tl__arch_u32_req(&c->keys, "block_count", &hp->n_layer)) ||
        (rc = tl__arch_u32_req(&c->keys, "feed_forward_length", &hp->n_ff)) ||
        (rc = tl__arch_u32_req(&c->keys, "attention.head_count", &hp->n_head)))
        return rc;
    if (hp->n_layer > 4096 || hp->n_head > 65536)
        return tl__errorf(TL_ERR_FORMAT, "%s: implausible block count %d or head count %d",
                          c->m->path, hp->n_layer, hp->n_head);
    int32_t n_expert = 0;
    tl__arch_u32_opt(&c->keys, "expert_count", &n_expert);
    if (n_expert > 0 && c->desc->experts == TL_EXPERTS_NONE)
        return tl__errorf(TL_ERR_UNSUPPORTED,
                          "%s: mixture-of-experts models (%s.expert_count %d) are not supported "
                          "yet",
                          c->m->path, c->keys.prefix, n_expert);
    hp->n_head_kv = hp->n_head;
    tl__arch_u32_opt(&c->keys, "attention.head_count_kv", &hp->n_head_kv);
    hp->head_dim = hp->n_head > 0 && hp->n_embd % hp->n_head == 0 ? hp->n_embd / hp->n_head : 0;
    tl__arch_u32_opt(&c->keys, "attention.key_length", &hp->head_dim);
    int32_t v_len = hp->head_dim, rope_dim = hp->head_dim;
    tl__arch_u32_opt(&c->keys, "attention.value_length", &v_len);
    tl__arch_u32_opt(&c->keys, "rope.dimension_count", &rope_dim);
    if (v_len != hp->head_dim || rope_dim != hp->head_dim)
        return tl__errorf(TL_ERR_UNSUPPORTED,
                          "%s: key length %d, value length %d and rope dimensions %d differ "
                          "(partial RoPE is not supported)",
                          c->m->path, hp->head_dim, v_len, rope_dim);
    hp->rms_eps = c->desc->rms_eps;
    tl__arch_f32_opt(&c->keys, "attention.layer_norm_rms_epsilon", &hp->rms_eps);
    hp->rope_freq_base = 10000.0f;
    tl__arch_f32_opt(&c->keys, "rope.freq_base", &hp->rope_freq_base);
    hp->rope_freq_scale = 1.0f;
    float factor = 0.0f;
    char key[128];
    struct tl_gguf_str stype;
    snprintf(key, sizeof(key), "%s.rope.scaling.type", c->keys.prefix);
    bool has_type = tl_gguf_get_str(c->m->gguf, key, &stype);
    // As llama.cpp: the older rope.scale_linear is read only when rope.scaling.factor is absent.
    snprintf(key, sizeof(key), "%s.rope.scaling.factor", c->keys.prefix);
    if (!tl_gguf_get_f32(c->m->gguf, key, &factor))
        tl__arch_f32_opt(&c->keys, "rope.scale_linear", &factor);
    if (has_type && !tl_gguf_str_eq(stype, "linear") && !tl_gguf_str_eq(stype, "none"))
        return tl__errorf(TL_ERR_UNSUPPORTED, "%s: rope scaling type '%.*s' is not supported",
                          c->m->path, (int)(stype.len > 32 ? 32 : stype.len), stype.ptr);
    if (factor > 0.0f && !(has_type && tl_gguf_str_eq(stype, "none")))
        hp->rope_freq_scale = 1.0f / factor;
    hp->rope_mode = c->desc->rope_mode;
    return c->desc->read_hparams ? c->desc->read_hparams(&c->keys, hp) : TL_OK;
}

static void pick_weight_type(struct tl_model *m)
{
    int64_t per_type[TL_DTYPE_COUNT] = {0};
    int64_t n_tensors = tl_gguf_n_tensors(m->gguf);
    m->n_params = 0;
    for (int64_t i = 0; i < n_tensors; i++) {
        const struct tl_gguf_tensor *t = tl_gguf_tensor_at(m->gguf, i);
        int64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        m->n_params += n;
        if (t->n_dims >= 2 && (uint32_t)t->type < TL_DTYPE_COUNT) per_type[t->type] += n;
    }
    int best = TL_DTYPE_F32;
    for (int t = 0; t < TL_DTYPE_COUNT; t++)
        if (per_type[t] > per_type[best]) best = t;
    m->weight_type = tl_dtype_name((uint32_t)best);
}

static char *dup_gguf_str(const struct tl_gguf *g, const char *key)
{
    struct tl_gguf_str s;
    if (!tl_gguf_get_str(g, key, &s) || s.len > (1u << 24)) return NULL;
    return tl_strndup(s.ptr, (size_t)s.len);
}

tl_status tl__model_load_gguf(struct tl_model *m)
{
    tl_status rc = tl_gguf_open(m->path, &m->gguf);
    if (rc) return rc;
    struct tl_gguf_str arch;
    if (!tl_gguf_get_str(m->gguf, "general.architecture", &arch))
        return tl__errorf(TL_ERR_FORMAT, "%s: missing key general.architecture", m->path);
    const struct tl_arch_desc *desc = tl__arch_find(arch);
    if (!desc)
        return tl__errorf(TL_ERR_UNSUPPORTED,
                          "%s: architecture '%.*s' is not supported (supported: %s)", m->path,
                          (int)(arch.len > 64 ? 64 : arch.len), arch.ptr, tl__arch_names());
    m->hp.arch = desc->arch;
    struct ctx c = {
        .m = m, .desc = desc, .keys = {.gguf = m->gguf, .path = m->path, .prefix = desc->name}};
    if ((rc = load_hparams(&c))) return rc;
    if ((rc = tl_vocab_load_gguf(m->gguf, &m->vocab))) return rc;
    m->name = dup_gguf_str(m->gguf, "general.name");
    if (!m->name) {
        const char *base = strrchr(m->path, '/');
        m->name = tl_strndup(base ? base + 1 : m->path, strlen(base ? base + 1 : m->path));
        if (!m->name) return tl__errorf(TL_ERR_NOMEM, "%s: out of memory", m->path);
    }
    m->chat_template = dup_gguf_str(m->gguf, "tokenizer.chat_template");
    if (desc->load_encoder) { // bert: its own tensors (arch_bert.c)
        if ((rc = desc->load_encoder(m))) return rc;
        pick_weight_type(m);
        return TL_OK;
    }

    if ((rc = load_mat(&c, "token_embd.weight", true, &m->tok_embd))) return rc;
    m->hp.n_vocab = (int32_t)m->tok_embd.n_out;
    if ((rc = load_vec(&c, "output_norm.weight", m->hp.n_embd, true, &m->output_norm))) return rc;
    if ((rc = load_mat(&c, "output.weight", false, &m->output))) return rc;
    // llama.cpp's converter writes Llama 3.1+'s "llama3" RoPE scaling as per-pair frequency
    // divisors; Phi-3's LongRoPE factors have no place here yet and are refused.
    if ((rc = load_vec(&c, "rope_freqs.weight", m->hp.head_dim / 2, false, &m->rope_freqs)))
        return rc;
    static const char *const longrope[] = {"rope_factors_long.weight", "rope_factors_short.weight"};
    for (int i = 0; i < 2; i++)
        if (tl_gguf_find_tensor(m->gguf, longrope[i]))
            return tl__errorf(TL_ERR_UNSUPPORTED, "%s: tensor %s (LongRoPE) is not supported",
                              m->path, longrope[i]);
    if (!m->output.data) m->output = m->tok_embd; // tied embeddings
    if (m->hp.n_layer <= 0) return tl__errorf(TL_ERR_FORMAT, "%s: block count is 0", m->path);
    m->layers = tl_calloc_array((size_t)m->hp.n_layer, sizeof(*m->layers));
    if (!m->layers) return tl__errorf(TL_ERR_NOMEM, "%s: out of memory", m->path);
    for (int il = 0; il < m->hp.n_layer; il++)
        if ((rc = load_layer(&c, il, &m->layers[il]))) return rc;
    pick_weight_type(m);
    return TL_OK;
}
