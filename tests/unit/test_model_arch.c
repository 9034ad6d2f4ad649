/*
 * Tests for the forward-pass paths that stories260K (llama, tied embeddings, rope base 10000, no
 * scaling, default epsilon) does not reach: qwen2 with q/k/v biases and NEOX RoPE, an untied
 * output.weight, another rope.freq_base, linear RoPE scaling (and type "none", and the legacy
 * key), a non-default RMS epsilon, a head size that is not n_embd / n_head, F16 and BF16 weights,
 * F16 norms and biases, and the clear errors for what the loader rejects (partial RoPE, YaRN,
 * missing qwen2 biases).
 *
 * Design: every case builds a tiny random model with the GGUF writer, loads it with
 * tl_model_load and runs the real batched forward (one chunk of N_TOK tokens, and the same
 * tokens one at a time), then compares every position's logits with a scalar reference forward
 * written in this file from the math: RMSNorm, RoPE (pairs (2i, 2i+1) or halves (i, i + d/2)),
 * causal softmax attention with grouped-query heads, SwiGLU, final norm, logits, all in double.
 * The reference shares no code with src/model or src/kernels; the parameters it runs with are
 * written by hand per case from what llama.cpp does with the same file (llama -> "normal"
 * pairing, qwen2 -> NEOX, per llama_model_rope_type; freq_scale = 1 / rope.scaling.factor,
 * rope.scale_linear only when the former is absent, no scaling when the type is "none").
 *
 * Weights are k * 2^-s with |k| <= 255, exact in f32, f16 and bf16, so one reference serves
 * every storage type. Embeddings are small (rms ~0.005), so the first RMSNorm's epsilon moves
 * the result well beyond the tolerance. Each case also carries negative controls: the reference
 * run with one parameter wrong (the other pairing, no bias, tied output, base 10000, no
 * scaling, the default epsilon) must miss the engine by far more than the tolerance; this proves
 * the case really exercises the path it claims to.
 *
 * Ownership: each test owns its temp file (unlinked at the end) and every buffer it allocates.
 */
#include "tl_test.h"

#include "core/alloc.h"
#include "core/hash.h"
#include "gguf/gguf.h"
#include "model/model.h"

#include <math.h>

#define N_VOCAB 512      // the donor tokenizer's (stories260K) token count
#define N_TOK 12         // tokens per sequence
#define MAX_LAYERS 4     // enough for the tiny models here
#define TOL 1e-4         // max |engine - ref| per position, relative to that position's max |ref|
#define CONTROL_MIN 1e-2 // a wrong reference must miss by at least 100x the tolerance

static const int32_t tokens[N_TOK] = {1, 403, 407, 261, 378, 432, 383, 286, 17, 511, 0, 376};

// ---- seeded weights, exact in every storage type ------------------------------------------------

// x[i] = offset + k * 2^-shift, k uniform in [-255, 255]: 8 significant bits (bf16-exact).
static void fill_uniform(uint64_t *s, float *x, int64_t n, float offset, int shift)
{
    for (int64_t i = 0; i < n; i++) {
        int k = (int)(tl_splitmix64(s) % 511) - 255;
        x[i] = offset + ldexpf((float)k, -shift);
    }
}

// The f16 bits of v, which must be exactly representable (checked).
static uint16_t f16_exact(float v)
{
    uint16_t sign = signbit(v) ? 0x8000 : 0;
    double a = fabs((double)v);
    if (a == 0) return sign;
    int e;
    frexp(a, &e);
    int ex = e - 1; // a = 1.m * 2^ex
    assert_true(ex <= 15);
    if (ex < -14) { // subnormal: a multiple of 2^-24
        double n = a * 0x1p24;
        assert_true(n == floor(n) && n < 1024);
        return sign | (uint16_t)n;
    }
    double mant = (ldexp(a, -ex) - 1.0) * 1024.0;
    assert_true(mant == floor(mant));
    return sign | (uint16_t)((ex + 15) << 10) | (uint16_t)mant;
}

// The bf16 bits of v (the top half of its f32 bits; the bottom half must be zero).
static uint16_t bf16_exact(float v)
{
    uint32_t bits;
    memcpy(&bits, &v, 4);
    assert_true((bits & 0xffff) == 0);
    return (uint16_t)(bits >> 16);
}

// ---- the case description and the reference model ----------------------------------------------

// What the reference runs with.
struct knobs {
    double base;  // RoPE frequency base
    double scale; // positions are multiplied by this (1 / linear factor)
    double eps;   // RMSNorm epsilon
    bool neox;    // pairs (i, i + d/2) instead of (2i, 2i + 1)
    bool bias;    // add the q/k/v biases
    bool tied;    // logits from token_embd even though output.weight exists
};

struct control {
    const char *what;
    struct knobs k;
};

struct arch_case {
    const char *name;
    const char *arch; // general.architecture
    int n_embd, n_head, n_head_kv, n_layer, n_ff;
    int key_length;           // attention.key_length = value_length when nonzero
    int rope_dims;            // rope.dimension_count when nonzero
    bool untied;              // write output.weight
    bool biases;              // write attn_{q,k,v}.bias
    float freq_base;          // rope.freq_base, 0 = absent
    const char *scaling_type; // rope.scaling.type, NULL = absent
    float scaling_factor;     // rope.scaling.factor, 0 = absent
    float scale_linear;       // rope.scale_linear (the older key), 0 = absent
    float rms_eps;            // attention.layer_norm_rms_epsilon, 0 = absent
    enum tl_dtype wtype;      // 2-D weights: F32, F16 or BF16
    enum tl_dtype vtype;      // norms and biases: F32 or F16
    struct knobs want;        // what llama.cpp would run this file with
    struct control controls[4];
};

struct ref_layer {
    float *attn_norm; // (n_embd)
    float *wq, *wk;   // (q_dim, n_embd), (kv_dim, n_embd): row r is output r
    float *wv;        // (kv_dim, n_embd)
    float *wo;        // (n_embd, q_dim)
    float *bq, *bk;   // (q_dim), (kv_dim); NULL without biases
    float *bv;        // (kv_dim)
    float *ffn_norm;  // (n_embd)
    float *wg, *wu;   // (n_ff, n_embd)
    float *wd;        // (n_embd, n_ff)
};

struct ref_model {
    int n_embd, n_head, n_head_kv, head_dim, n_layer, n_ff;
    float *tok;      // (N_VOCAB, n_embd)
    float *out;      // (N_VOCAB, n_embd); NULL when tied
    float *out_norm; // (n_embd)
    struct ref_layer layers[MAX_LAYERS];
    float *bufs[16 * MAX_LAYERS + 8]; // owned: every array above
    int n_bufs;
};

static float *ref_alloc(struct ref_model *m, int64_t n)
{
    assert_true(m->n_bufs < (int)(sizeof(m->bufs) / sizeof(m->bufs[0])));
    float *p = malloc(sizeof(float) * (size_t)n);
    assert_non_null(p);
    m->bufs[m->n_bufs++] = p;
    return p;
}

static void ref_free(struct ref_model *m)
{
    for (int i = 0; i < m->n_bufs; i++)
        free(m->bufs[i]);
    m->n_bufs = 0;
}

// ---- the scalar reference forward (double) ------------------------------------------------------

static void ref_rmsnorm(const double *x, const float *w, int n, double eps, double *y)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    double inv = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++)
        y[i] = x[i] * inv * w[i];
}

// y[r] = sum_i W[r][i] x[i] (+ b[r])
static void ref_matvec(const float *W, const float *b, const double *x, int n_in, int n_out,
                       double *y)
{
    for (int r = 0; r < n_out; r++) {
        double acc = b ? b[r] : 0.0;
        for (int i = 0; i < n_in; i++)
            acc += (double)W[(size_t)r * n_in + i] * x[i];
        y[r] = acc;
    }
}

// Rotates one head vector for position pos: pair i turns by pos * scale * base^(-2i/d).
static void ref_rope(double *v, int d, int pos, const struct knobs *k)
{
    for (int i = 0; i < d / 2; i++) {
        double theta = pos * k->scale * pow(k->base, -2.0 * i / d);
        double c = cos(theta), s = sin(theta);
        int i0 = k->neox ? i : 2 * i, i1 = k->neox ? i + d / 2 : 2 * i + 1;
        double a = v[i0], b = v[i1];
        v[i0] = a * c - b * s;
        v[i1] = a * s + b * c;
    }
}

// logits: (n, N_VOCAB) for tokens tok[0..n) at positions 0..n-1 of one sequence.
static void ref_forward(const struct ref_model *m, const struct knobs *k, const int32_t *tok, int n,
                        double *logits)
{
    int D = m->n_embd, hd = m->head_dim, F = m->n_ff;
    int q_dim = m->n_head * hd, kv_dim = m->n_head_kv * hd, group = m->n_head / m->n_head_kv;
    double *x = calloc((size_t)n * D, sizeof(double));
    double *xn = calloc((size_t)D, sizeof(double));
    double *q = calloc((size_t)n * q_dim, sizeof(double));
    double *K = calloc((size_t)n * kv_dim, sizeof(double));
    double *V = calloc((size_t)n * kv_dim, sizeof(double));
    double *att = calloc((size_t)q_dim, sizeof(double));
    double *p = calloc((size_t)n, sizeof(double));
    double *o = calloc((size_t)D, sizeof(double));
    double *g = calloc((size_t)F, sizeof(double)), *u = calloc((size_t)F, sizeof(double));
    assert_true(x && xn && q && K && V && att && p && o && g && u);
    for (int t = 0; t < n; t++)
        for (int i = 0; i < D; i++)
            x[t * D + i] = m->tok[(size_t)tok[t] * D + i];
    for (int il = 0; il < m->n_layer; il++) {
        const struct ref_layer *L = &m->layers[il];
        for (int t = 0; t < n; t++) {
            ref_rmsnorm(x + t * D, L->attn_norm, D, k->eps, xn);
            ref_matvec(L->wq, k->bias ? L->bq : NULL, xn, D, q_dim, q + t * q_dim);
            ref_matvec(L->wk, k->bias ? L->bk : NULL, xn, D, kv_dim, K + t * kv_dim);
            ref_matvec(L->wv, k->bias ? L->bv : NULL, xn, D, kv_dim, V + t * kv_dim);
            for (int h = 0; h < m->n_head; h++)
                ref_rope(q + t * q_dim + h * hd, hd, t, k);
            for (int h = 0; h < m->n_head_kv; h++)
                ref_rope(K + t * kv_dim + h * hd, hd, t, k);
        }
        for (int t = 0; t < n; t++) {
            for (int h = 0; h < m->n_head; h++) {
                const double *qh = q + t * q_dim + h * hd;
                int kvh = h / group;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    double dot = 0;
                    for (int i = 0; i < hd; i++)
                        dot += qh[i] * K[j * kv_dim + kvh * hd + i];
                    p[j] = dot / sqrt((double)hd);
                    mx = fmax(mx, p[j]);
                }
                for (int j = 0; j <= t; j++)
                    sum += (p[j] = exp(p[j] - mx));
                for (int i = 0; i < hd; i++) {
                    double acc = 0;
                    for (int j = 0; j <= t; j++)
                        acc += p[j] / sum * V[j * kv_dim + kvh * hd + i];
                    att[h * hd + i] = acc;
                }
            }
            ref_matvec(L->wo, NULL, att, q_dim, D, o);
            for (int i = 0; i < D; i++)
                x[t * D + i] += o[i];
            ref_rmsnorm(x + t * D, L->ffn_norm, D, k->eps, xn);
            ref_matvec(L->wg, NULL, xn, D, F, g);
            ref_matvec(L->wu, NULL, xn, D, F, u);
            for (int i = 0; i < F; i++)
                g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
            ref_matvec(L->wd, NULL, g, F, D, o);
            for (int i = 0; i < D; i++)
                x[t * D + i] += o[i];
        }
    }
    const float *out = k->tied || !m->out ? m->tok : m->out;
    for (int t = 0; t < n; t++) {
        ref_rmsnorm(x + t * D, m->out_norm, D, k->eps, xn);
        ref_matvec(out, NULL, xn, D, N_VOCAB, logits + (size_t)t * N_VOCAB);
    }
    free(x), free(xn), free(q), free(K), free(V), free(att), free(p), free(o), free(g), free(u);
}

// Max over positions of max_i |got - ref| / max_i |ref|.
static double rel_err(const float *got, const double *ref, int n_pos)
{
    double worst = 0;
    for (int t = 0; t < n_pos; t++) {
        double mx = 0, diff = 0;
        for (int i = 0; i < N_VOCAB; i++) {
            mx = fmax(mx, fabs(ref[t * N_VOCAB + i]));
            diff = fmax(diff, fabs(got[t * N_VOCAB + i] - ref[t * N_VOCAB + i]));
        }
        worst = fmax(worst, diff / mx);
    }
    return worst;
}

// ---- writing the model file --------------------------------------------------------------------

struct builder {
    struct tl_gguf_writer *w;
    void *bytes[16 * MAX_LAYERS + 8]; // owned converted tensor data, borrowed by the writer
    int n_bytes;
    uint64_t rng;
};

// Adds tensor `name` of shape ne (ne[0] fastest) with values `x`, stored as `type`.
static void add_tensor(struct builder *b, const char *name, enum tl_dtype type, int n_dims,
                       int64_t ne0, int64_t ne1, const float *x)
{
    int64_t n = ne0 * ne1;
    size_t esize = type == TL_DTYPE_F32 ? 4 : 2;
    void *buf = malloc((size_t)n * esize);
    assert_non_null(buf);
    for (int64_t i = 0; i < n; i++) {
        if (type == TL_DTYPE_F32)
            ((float *)buf)[i] = x[i];
        else if (type == TL_DTYPE_F16)
            ((uint16_t *)buf)[i] = f16_exact(x[i]);
        else
            ((uint16_t *)buf)[i] = bf16_exact(x[i]);
    }
    b->bytes[b->n_bytes++] = buf;
    int64_t ne[2] = {ne0, ne1};
    assert_int_equal(tl_gguf_writer_add_tensor(b->w, name, type, n_dims, ne, buf), TL_OK);
}

// A random 2-D weight with n_out rows of n_in: written as ne = [n_in, n_out].
static float *gen_mat(struct builder *b, struct ref_model *m, const struct arch_case *c,
                      const char *name, int n_in, int n_out, int shift)
{
    float *x = ref_alloc(m, (int64_t)n_in * n_out);
    fill_uniform(&b->rng, x, (int64_t)n_in * n_out, 0.0f, shift);
    add_tensor(b, name, c->wtype, 2, n_in, n_out, x);
    return x;
}

static float *gen_vec(struct builder *b, struct ref_model *m, const struct arch_case *c,
                      const char *name, int n, float offset, int shift)
{
    float *x = ref_alloc(m, n);
    fill_uniform(&b->rng, x, n, offset, shift);
    add_tensor(b, name, c->vtype, 1, n, 1, x);
    return x;
}

static void set_u32(struct builder *b, const struct arch_case *c, const char *suffix, uint32_t v)
{
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", c->arch, suffix);
    assert_int_equal(tl_gguf_writer_set_u32(b->w, key, v), TL_OK);
}

static void set_f32(struct builder *b, const struct arch_case *c, const char *suffix, float v)
{
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", c->arch, suffix);
    assert_int_equal(tl_gguf_writer_set_f32(b->w, key, v), TL_OK);
}

// Writes the case's model to a temp file (returned; caller unlinks) and fills the reference
// model with the same values. drop_bias_of_layer >= 0 leaves that layer's q bias out.
static const char *write_model(const struct arch_case *c, struct ref_model *m,
                               int drop_bias_of_layer)
{
    memset(m, 0, sizeof(*m));
    struct builder b = {.w = tl_gguf_writer_create(), .rng = 0x5eed0000u + (uint64_t)c->n_embd};
    assert_non_null(b.w);
    assert_true(c->n_layer <= MAX_LAYERS);
    m->n_embd = c->n_embd, m->n_head = c->n_head, m->n_head_kv = c->n_head_kv;
    m->n_layer = c->n_layer, m->n_ff = c->n_ff;
    m->head_dim = c->key_length ? c->key_length : c->n_embd / c->n_head;
    int D = c->n_embd, q_dim = m->n_head * m->head_dim, kv_dim = m->n_head_kv * m->head_dim;

    // Metadata: the tokenizer of stories260K, then the architecture keys.
    struct tl_gguf *donor = NULL;
    assert_int_equal(tl_gguf_open(tl_test_shared("models/stories260K.gguf"), &donor), TL_OK);
    for (int64_t i = 0; i < tl_gguf_n_kv(donor); i++) {
        const struct tl_gguf_kv *kv = tl_gguf_kv_at(donor, i);
        char key[256];
        snprintf(key, sizeof(key), "%.*s", (int)kv->key.len, kv->key.ptr);
        if (!strncmp(key, "tokenizer.", 10))
            assert_int_equal(tl_gguf_writer_set_value(b.w, key, &kv->value), TL_OK);
    }
    assert_int_equal(tl_gguf_writer_set_str(b.w, "general.architecture", c->arch), TL_OK);
    assert_int_equal(tl_gguf_writer_set_str(b.w, "general.name", c->name), TL_OK);
    set_u32(&b, c, "context_length", 256);
    set_u32(&b, c, "embedding_length", (uint32_t)D);
    set_u32(&b, c, "block_count", (uint32_t)c->n_layer);
    set_u32(&b, c, "feed_forward_length", (uint32_t)c->n_ff);
    set_u32(&b, c, "attention.head_count", (uint32_t)c->n_head);
    set_u32(&b, c, "attention.head_count_kv", (uint32_t)c->n_head_kv);
    if (c->key_length) {
        set_u32(&b, c, "attention.key_length", (uint32_t)c->key_length);
        set_u32(&b, c, "attention.value_length", (uint32_t)c->key_length);
    }
    if (c->rope_dims) set_u32(&b, c, "rope.dimension_count", (uint32_t)c->rope_dims);
    if (c->freq_base > 0) set_f32(&b, c, "rope.freq_base", c->freq_base);
    if (c->rms_eps > 0) set_f32(&b, c, "attention.layer_norm_rms_epsilon", c->rms_eps);
    if (c->scaling_type) {
        char key[128];
        snprintf(key, sizeof(key), "%s.rope.scaling.type", c->arch);
        assert_int_equal(tl_gguf_writer_set_str(b.w, key, c->scaling_type), TL_OK);
    }
    if (c->scaling_factor > 0) set_f32(&b, c, "rope.scaling.factor", c->scaling_factor);
    if (c->scale_linear > 0) set_f32(&b, c, "rope.scale_linear", c->scale_linear);

    // Tensors. Embeddings small (see the header); matrices ~0.14 std; norms around 1.
    m->tok = gen_mat(&b, m, c, "token_embd.weight", D, N_VOCAB, 15);
    m->out_norm = gen_vec(&b, m, c, "output_norm.weight", D, 1.0f, 10);
    if (c->untied) m->out = gen_mat(&b, m, c, "output.weight", D, N_VOCAB, 10);
    for (int il = 0; il < c->n_layer; il++) {
        struct ref_layer *L = &m->layers[il];
        char name[64];
#define NAME(s) (snprintf(name, sizeof(name), "blk.%d.%s", il, s), name)
        L->attn_norm = gen_vec(&b, m, c, NAME("attn_norm.weight"), D, 1.0f, 10);
        L->wq = gen_mat(&b, m, c, NAME("attn_q.weight"), D, q_dim, 10);
        L->wk = gen_mat(&b, m, c, NAME("attn_k.weight"), D, kv_dim, 10);
        L->wv = gen_mat(&b, m, c, NAME("attn_v.weight"), D, kv_dim, 10);
        L->wo = gen_mat(&b, m, c, NAME("attn_output.weight"), q_dim, D, 10);
        if (c->biases) {
            if (il != drop_bias_of_layer)
                L->bq = gen_vec(&b, m, c, NAME("attn_q.bias"), q_dim, 0.0f, 8);
            L->bk = gen_vec(&b, m, c, NAME("attn_k.bias"), kv_dim, 0.0f, 8);
            L->bv = gen_vec(&b, m, c, NAME("attn_v.bias"), kv_dim, 0.0f, 8);
        }
        L->ffn_norm = gen_vec(&b, m, c, NAME("ffn_norm.weight"), D, 1.0f, 10);
        L->wg = gen_mat(&b, m, c, NAME("ffn_gate.weight"), D, c->n_ff, 10);
        L->wu = gen_mat(&b, m, c, NAME("ffn_up.weight"), D, c->n_ff, 10);
        L->wd = gen_mat(&b, m, c, NAME("ffn_down.weight"), c->n_ff, D, 10);
#undef NAME
    }
    const char *path = tl_test_tmpfile("arch.gguf");
    tl_status rc = tl_gguf_writer_write(b.w, path);
    if (rc) fail_msg("write %s: %s", path, tl_last_error());
    tl_gguf_writer_destroy(b.w);
    tl_gguf_close(donor);
    for (int i = 0; i < b.n_bytes; i++)
        free(b.bytes[i]);
    return path;
}

// ---- driving the real forward ------------------------------------------------------------------

#define BLOCK 4
#define N_BLOCKS 16

struct kv_fixture {
    struct tl_kv_pages pages;
    struct tl_kv_layer layers[MAX_LAYERS];
    int32_t tables[2][N_BLOCKS / 2];
};

static void kv_init(struct kv_fixture *kv, const struct tl_model *m)
{
    memset(kv, 0, sizeof(*kv));
    size_t elems = (size_t)N_BLOCKS * BLOCK * m->hp.n_head_kv * m->hp.head_dim;
    for (int l = 0; l < m->hp.n_layer; l++) {
        kv->layers[l] = (struct tl_kv_layer){.type = TL_DTYPE_F32,
                                             .block_size = BLOCK,
                                             .n_kv_head = m->hp.n_head_kv,
                                             .head_dim = m->hp.head_dim};
        kv->layers[l].k = tl_aligned_alloc(elems * sizeof(float));
        kv->layers[l].v = tl_aligned_alloc(elems * sizeof(float));
        assert_true(kv->layers[l].k && kv->layers[l].v);
        memset(kv->layers[l].k, 0, elems * sizeof(float));
        memset(kv->layers[l].v, 0, elems * sizeof(float));
    }
    kv->pages.n_layer = m->hp.n_layer;
    kv->pages.layers = kv->layers;
    // Sequence s owns blocks s, s + 2, s + 4, ... (interleaved, so the tables matter).
    for (int s = 0; s < 2; s++)
        for (int j = 0; j < N_BLOCKS / 2; j++)
            kv->tables[s][j] = s + 2 * j;
}

static void kv_free(struct kv_fixture *kv)
{
    for (int l = 0; l < kv->pages.n_layer; l++) {
        tl_aligned_free(kv->layers[l].k);
        tl_aligned_free(kv->layers[l].v);
    }
}

// Runs tokens [from, to) of sequence s as one batch; logits of every row.
static void run_chunk(struct tl_forward *f, struct kv_fixture *kv, int s, int from, int to,
                      float *logits)
{
    int32_t pos[N_TOK], seq[N_TOK], out[N_TOK];
    const int32_t *tables[2] = {kv->tables[0], kv->tables[1]};
    int n = to - from;
    for (int i = 0; i < n; i++)
        pos[i] = from + i, seq[i] = s, out[i] = i;
    struct tl_batch b = {.n_tok = n,
                         .token = tokens + from,
                         .pos = pos,
                         .seq = seq,
                         .block_tables = tables,
                         .n_out = n,
                         .out_idx = out};
    tl_status rc = tl_forward_run(f, &b, &kv->pages, logits);
    if (rc) fail_msg("forward: %s", tl_last_error());
}

// Loads the case's file under the current ISA and runs the tokens as one chunk (sequence 0) and
// one token at a time (sequence 1). OUT: chunk, single: (N_TOK, N_VOCAB).
static void run_engine(const char *path, float *chunk, float *single)
{
    struct tl_model *m = NULL;
    tl_status rc = tl_model_load(path, NULL, &m);
    if (rc) fail_msg("load: %s", tl_last_error());
    assert_int_equal(m->hp.n_vocab, N_VOCAB);
    struct tl_pool *pool = tl_pool_create(2);
    struct tl_forward *f = tl_forward_create(m, N_TOK, BLOCK * N_BLOCKS / 2, pool);
    assert_non_null(f);
    struct kv_fixture kv;
    kv_init(&kv, m);
    run_chunk(f, &kv, 0, 0, N_TOK, chunk);
    for (int t = 0; t < N_TOK; t++)
        run_chunk(f, &kv, 1, t, t + 1, single + t * N_VOCAB);
    kv_free(&kv);
    tl_forward_destroy(f);
    tl_pool_destroy(pool);
    tl_model_destroy(m);
}

static void check_case(const struct arch_case *c)
{
    struct ref_model m;
    const char *tmp = write_model(c, &m, -1);
    char path[256];
    snprintf(path, sizeof(path), "%s", tmp);
    double *ref = malloc(sizeof(double) * N_TOK * N_VOCAB);
    double *wrong = malloc(sizeof(double) * N_TOK * N_VOCAB);
    float *chunk = malloc(sizeof(float) * N_TOK * N_VOCAB);
    float *single = malloc(sizeof(float) * N_TOK * N_VOCAB);
    assert_true(ref && wrong && chunk && single);
    ref_forward(&m, &c->want, tokens, N_TOK, ref);

    // Every ISA variant this CPU has; the default one is restored after.
    static const char *const isas[] = {"scalar", "avx2", "avx512"};
    const char *isa0 = tl_kernels_isa();
    int n_run = 0;
    for (int i = 0; i < 3; i++) {
        if (!tl_kernels_force_isa(isas[i])) continue;
        n_run++;
        run_engine(path, chunk, single);
        double err = rel_err(chunk, ref, N_TOK);
        print_message("# %-22s %-6s rel err %.2e\n", c->name, isas[i], err);
        if (!(err <= TOL))
            fail_msg("%s [%s]: logits differ from the reference: %.3g", c->name, isas[i], err);
        // The determinism contract: chunked and one-at-a-time runs agree bit for bit.
        assert_memory_equal(chunk, single, sizeof(float) * N_TOK * N_VOCAB);
        for (int k = 0; k < 4 && c->controls[k].what; k++) {
            ref_forward(&m, &c->controls[k].k, tokens, N_TOK, wrong);
            double miss = rel_err(chunk, wrong, N_TOK);
            if (i == 0)
                print_message("# %-22s control '%s' misses by %.2e\n", c->name, c->controls[k].what,
                              miss);
            if (!(miss >= CONTROL_MIN))
                fail_msg("%s: the reference with %s is within %.3g of the engine: the case does "
                         "not exercise that path",
                         c->name, c->controls[k].what, miss);
        }
    }
    assert_true(n_run >= 1);
    assert_true(tl_kernels_force_isa(isa0));
    unlink(path);
    ref_free(&m);
    free(ref), free(wrong), free(chunk), free(single);
}

// ---- cases --------------------------------------------------------------------------------------

// Every case is a 64-wide model with 4 query heads and a 96-wide FFN; it picks the KV heads and
// layers. Weights, norms and biases are F32 unless a case sets wtype / vtype (F32 is 0).
#define SHAPE(n_kv, layers)                                                                        \
    .n_embd = 64, .n_head = 4, .n_head_kv = (n_kv), .n_layer = (layers), .n_ff = 96

// The knobs llama.cpp uses for a llama file with no rope/eps keys, and variations of them.
#define LLAMA_DEFAULT                                                                              \
    {                                                                                              \
        .base = 10000, .scale = 1, .eps = 1e-5, .neox = false                                      \
    }

static void test_llama_untied_base_1e6_eps_1e6(void **state)
{
    (void)state;
    const struct arch_case c = {
        .name = "llama-untied-1e6",
        .arch = "llama",
        SHAPE(2, 2),
        .untied = true,
        .freq_base = 1e6f,
        .rms_eps = 1e-6f,
        .want = {.base = 1e6, .scale = 1, .eps = 1e-6f},
        .controls = {{"tied output", {.base = 1e6, .scale = 1, .eps = 1e-6f, .tied = true}},
                     {"base 10000", {.base = 10000, .scale = 1, .eps = 1e-6f}},
                     {"eps 1e-5", {.base = 1e6, .scale = 1, .eps = 1e-5}},
                     {"NEOX pairing", {.base = 1e6, .scale = 1, .eps = 1e-6f, .neox = true}}},
    };
    check_case(&c);
}

static void test_llama_linear_rope_scaling(void **state)
{
    (void)state;
    const struct arch_case c = {
        .name = "llama-linear-x4",
        .arch = "llama",
        SHAPE(2, 2),
        .scaling_type = "linear",
        .scaling_factor = 4.0f,
        .want = {.base = 10000, .scale = 0.25, .eps = 1e-5},
        .controls = {{"no scaling", LLAMA_DEFAULT},
                     {"scale x4 instead of /4", {.base = 10000, .scale = 4, .eps = 1e-5}}},
    };
    check_case(&c);
}

// Factor present without a type: llama.cpp defaults the type to linear.
static void test_llama_legacy_scale_key_and_no_type(void **state)
{
    (void)state;
    const struct arch_case c = {
        .name = "llama-scale_linear-x2",
        .arch = "llama",
        SHAPE(4, 1),
        .scale_linear = 2.0f,
        .want = {.base = 10000, .scale = 0.5, .eps = 1e-5},
        .controls = {{"no scaling", LLAMA_DEFAULT}},
    };
    check_case(&c);
}

// Both keys: rope.scaling.factor wins; rope.scale_linear is read only when it is absent.
static void test_llama_scaling_factor_wins_over_legacy_key(void **state)
{
    (void)state;
    const struct arch_case c = {
        .name = "llama-factor-vs-legacy",
        .arch = "llama",
        SHAPE(2, 1),
        .scaling_type = "linear",
        .scaling_factor = 4.0f,
        .scale_linear = 2.0f,
        .want = {.base = 10000, .scale = 0.25, .eps = 1e-5},
        .controls = {{"the legacy factor 2", {.base = 10000, .scale = 0.5, .eps = 1e-5}}},
    };
    check_case(&c);
}

// Type "none" disables a factor that is present (llama.cpp: "never scale if type is none").
static void test_llama_scaling_type_none_ignores_factor(void **state)
{
    (void)state;
    const struct arch_case c = {
        .name = "llama-type-none",
        .arch = "llama",
        SHAPE(2, 1),
        .scaling_type = "none",
        .scaling_factor = 8.0f,
        .want = LLAMA_DEFAULT,
        .controls = {{"the factor applied", {.base = 10000, .scale = 0.125, .eps = 1e-5}}},
    };
    check_case(&c);
}

// head_dim 32 with n_embd 64 and 4 heads: q is 128 wide, wo maps 128 -> 64; MQA (1 KV head).
static void test_llama_key_length_and_mqa(void **state)
{
    (void)state;
    const struct arch_case c = {
        .name = "llama-hd32-mqa",
        .arch = "llama",
        SHAPE(1, 2),
        .key_length = 32,
        .freq_base = 500000.0f,
        .want = {.base = 500000, .scale = 1, .eps = 1e-5},
        .controls = {{"NEOX pairing", {.base = 500000, .scale = 1, .eps = 1e-5, .neox = true}},
                     {"base 10000", LLAMA_DEFAULT}},
    };
    check_case(&c);
}

static void test_qwen2_biases_neox(void **state)
{
    (void)state;
    const struct arch_case c = {
        .name = "qwen2-bias",
        .arch = "qwen2",
        SHAPE(2, 2),
        .biases = true,
        .freq_base = 1e6f,
        .rms_eps = 1e-6f,
        .want = {.base = 1e6, .scale = 1, .eps = 1e-6f, .neox = true, .bias = true},
        .controls = {{"normal pairing", {.base = 1e6, .scale = 1, .eps = 1e-6f, .bias = true}},
                     {"no bias", {.base = 1e6, .scale = 1, .eps = 1e-6f, .neox = true}}},
    };
    check_case(&c);
}

// qwen2 with untied output, F16 matrices and F16 norms/biases (converted to f32 by the loader).
static void test_qwen2_f16_untied(void **state)
{
    (void)state;
    const struct arch_case c = {
        .name = "qwen2-f16-untied",
        .arch = "qwen2",
        SHAPE(2, 2),
        .untied = true,
        .biases = true,
        .freq_base = 1e6f,
        .rms_eps = 1e-6f,
        .wtype = TL_DTYPE_F16,
        .vtype = TL_DTYPE_F16,
        .want = {.base = 1e6, .scale = 1, .eps = 1e-6f, .neox = true, .bias = true},
        .controls =
            {{"normal pairing", {.base = 1e6, .scale = 1, .eps = 1e-6f, .bias = true}},
             {"tied output",
              {.base = 1e6, .scale = 1, .eps = 1e-6f, .neox = true, .bias = true, .tied = true}}},
    };
    check_case(&c);
}

static void test_llama_f16_and_bf16_weights(void **state)
{
    (void)state;
    struct arch_case c = {
        .name = "llama-f16",
        .arch = "llama",
        SHAPE(2, 2),
        .untied = true,
        .scaling_type = "linear",
        .scaling_factor = 4.0f,
        .wtype = TL_DTYPE_F16,
        .vtype = TL_DTYPE_F32,
        .want = {.base = 10000, .scale = 0.25, .eps = 1e-5},
        .controls = {{"no scaling", LLAMA_DEFAULT}},
    };
    check_case(&c);
    c.name = "llama-bf16";
    c.wtype = TL_DTYPE_BF16;
    check_case(&c);
}

// ---- what the loader rejects, with a clear error ------------------------------------------------

static void expect_load_error(const struct arch_case *c, int drop_bias_of_layer, tl_status want,
                              const char *needle)
{
    struct ref_model m;
    const char *tmp = write_model(c, &m, drop_bias_of_layer);
    char path[256];
    snprintf(path, sizeof(path), "%s", tmp);
    struct tl_model *model = NULL;
    tl_status rc = tl_model_load(path, NULL, &model);
    if (rc != want || !strstr(tl_last_error(), needle) || !strstr(tl_last_error(), path))
        fail_msg("%s: want status %d with '%s', got %d: %s", c->name, want, needle, rc,
                 tl_last_error());
    assert_null(model);
    unlink(path);
    ref_free(&m);
}

static void test_unsupported_files_rejected_clearly(void **state)
{
    (void)state;
    struct arch_case c = {
        .name = "partial-rope",
        .arch = "llama",
        SHAPE(2, 1),
        .rope_dims = 8, // half of head_dim 16
    };
    expect_load_error(&c, -1, TL_ERR_UNSUPPORTED, "partial RoPE");
    c.name = "yarn", c.rope_dims = 0, c.scaling_type = "yarn", c.scaling_factor = 4.0f;
    expect_load_error(&c, -1, TL_ERR_UNSUPPORTED, "'yarn'");
    // rope.dimension_count equal to the head size is fine.
    c.name = "full-rope", c.rope_dims = 16, c.scaling_type = NULL, c.scaling_factor = 0;
    c.want = (struct knobs)LLAMA_DEFAULT;
    check_case(&c);
    // qwen2 needs its attention biases.
    struct arch_case q = {
        .name = "qwen2-no-bias",
        .arch = "qwen2",
        SHAPE(2, 2),
        .biases = true,
    };
    expect_load_error(&q, 1, TL_ERR_FORMAT, "blk.1.attn_q.bias");
}

TL_TEST_MAIN(cmocka_unit_test(test_llama_untied_base_1e6_eps_1e6),
             cmocka_unit_test(test_llama_linear_rope_scaling),
             cmocka_unit_test(test_llama_legacy_scale_key_and_no_type),
             cmocka_unit_test(test_llama_scaling_factor_wins_over_legacy_key),
             cmocka_unit_test(test_llama_scaling_type_none_ignores_factor),
             cmocka_unit_test(test_llama_key_length_and_mqa),
             cmocka_unit_test(test_qwen2_biases_neox), cmocka_unit_test(test_qwen2_f16_untied),
             cmocka_unit_test(test_llama_f16_and_bf16_weights),
             cmocka_unit_test(test_unsupported_files_rejected_clearly))
