/*
 * tokenloom mkmodel: writes a GGUF model with random weights, for tests and benchmarks of shapes
 * we have no trained weights for (up to a TinyLlama-sized 1B model), in any family the loader
 * reads (--arch llama, qwen2, qwen3, qwen3moe, granite, smollm3, phi3; llama with --experts is
 * a Mixtral-style MoE; bert, the encoder of embedding models: see mkmodel_bert.c).
 *
 * The file follows llama.cpp's conventions so llama.cpp could load it: tensor names
 * token_embd / output_norm / output / blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output,
 * ffn_norm, ffn_gate, ffn_up, ffn_down}.weight, plus the family's own (qwen2: attn_{q,k,v}.bias;
 * qwen3: attn_q_norm / attn_k_norm.weight of head_dim values; experts: ffn_gate_inp.weight
 * (kept F32) and ffn_{gate,up,down}_exps.weight 3-D, [n_in, n_out, n_expert], instead of the
 * dense ffn_{gate,up,down}; phi3: attn_qkv instead of attn_q/k/v and one ffn_up of 2 * ff rows,
 * gate then up, instead of ffn_gate/ffn_up), 2-D weights with ne = [n_in, n_out], norms and biases
 * in F32, the <arch>.* hyperparameter keys (granite: its four multipliers; qwen3 and --head-dim:
 * attention.key_length / value_length; experts: expert_count, expert_used_count, qwen3moe's
 * expert_feed_forward_length; smollm3 has no key of its own: llama.cpp hard-codes its NoPE
 * interval), and every tokenizer.* key copied from a donor GGUF (the vocab size is its token
 * count). Weights and biases are N(0, 0.02^2) (Box-Muller over splitmix64), norms 1.0, except
 * qwen3's q/k norms: 1 + N(0, 0.1^2), so that a reference can tell whether their weights are
 * applied.
 *
 * The families' defaults and layer tensors are in mkmodel_arch.c.
 *
 * Design: each tensor gets its own RNG stream seeded from (--seed, tensor name), so the bytes of
 * a tensor do not depend on the order tensors are written, and a fixed seed gives an identical
 * file. Tensor data is produced row by row inside the GGUF writer's fill callback and quantized
 * with tl_quantize_row, so memory use is one tensor, never the model. A tensor whose row length
 * is not a multiple of the requested type's block size falls back as llama.cpp's quantizer does:
 * a K-quant to Q5_0 (Q5_1 for Q5_K, Q8_0 for Q6_K) and IQ4_XS to IQ4_NL when the row is a
 * multiple of 32, and anything to F16 otherwise (e.g. Q8_0 with ff = 172).
 *
 * Mixes: q4_k_m / q5_k_m follow llama.cpp's recipe roughly: the base type (Q4_K / Q5_K) for most
 * matrices, Q6_K for output.weight and for attn_v / ffn_down in the layers that llama.cpp gives
 * more bits (the first and last eighth of the layers and every third one between).
 *
 * Thread model: single-threaded. Ownership: everything is local to tl_cmd_mkmodel.
 */
#include "cli/args.h"
#include "cli/cli.h"
#include "cli/mkmodel_arch.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "core/hash.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

struct preset {
    const char *name;
    int dim, layers, heads, kv_heads, ff, ctx;
    const char *tokenizer; // default donor, relative to the shared models folder
};

// 260K is stories260K's shape with its own 512-token vocabulary; the others use the 32000-token
// Llama-2 vocabulary. 15M/42M/110M are llama2.c's TinyStories shapes; 1B is TinyLlama's.
static const struct preset presets[] = {
    {"260K", 64, 5, 8, 4, 172, 512, "stories260K.gguf"},
    {"15M", 288, 6, 6, 6, 768, 256, "llama-2-tiny-random.gguf"},
    {"42M", 512, 8, 8, 8, 1376, 1024, "llama-2-tiny-random.gguf"},
    {"110M", 768, 12, 12, 12, 2048, 1024, "llama-2-tiny-random.gguf"},
    {"1B", 2048, 22, 32, 4, 5632, 2048, "llama-2-tiny-random.gguf"},
};

#define WEIGHT_STD 0.02f
#define HEAD_NORM_STD 0.1f

// granite's multipliers: granite-3.1-2b's config (embedding_multiplier 12, residual_multiplier
// 0.22, attention_multiplier 0.015625, logits_scaling 8).
#define GRANITE_EMBEDDING_SCALE 12.0f
#define GRANITE_RESIDUAL_SCALE 0.22f
#define GRANITE_ATTENTION_SCALE 0.015625f
#define GRANITE_LOGIT_SCALE 8.0f

// gemma2's defaults: gemma-2-2b/9b's config (sliding_window 4096, attn_logit_softcapping 50,
// final_logit_softcapping 30); --sliding-window and --softcap change them (tests use small ones).
#define GEMMA2_SLIDING_WINDOW 4096
#define GEMMA2_ATTN_SOFTCAP 50.0
#define GEMMA2_FINAL_SOFTCAP 30.0

static void usage(FILE *f)
{
    fprintf(
        f, "usage: tokenloom mkmodel -o OUT.gguf [options]\n"
           "  --arch ARCH                   llama (default), qwen2, qwen3, qwen3moe, granite,\n"
           "                                smollm3, phi3, bert\n"
           "  --size 260K|15M|42M|110M|1B   shape preset (default 260K)\n"
           "  --type TYPE                   weight type (default f32; norms stay f32): f32, f16,\n"
           "                                bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k,\n"
           "                                q5_k, q6_k, iq4_nl, iq4_xs, mxfp4, or the mixes\n"
           "                                q4_k_m, q5_k_m\n"
           "  --tokenizer-from GGUF         copy tokenizer.* from this file (default: the shared\n"
           "                                stories260K.gguf for 260K, llama-2-tiny-random.gguf\n"
           "                                otherwise)\n"
           "  --seed N                      RNG seed (default 42)\n"
           "  --weight-std X                std of the random weights (default 0.02)\n"
           "  --rope-llama3 F[,CTX]         Llama 3.1's RoPE scaling (factor F, low/high freq\n"
           "                                factors 1/4, original context CTX, default 8192),\n"
           "                                written as rope_freqs.weight as llama.cpp does\n"
           "  --ctx N                       llama.context_length\n"
           "  --dim N --layers N --heads N --kv-heads N --ff N   override the preset\n"
           "                                (--heads without --kv-heads sets both)\n"
           "  --head-dim N                  head size (default dim / heads), written as\n"
           "                                attention.key_length / value_length\n"
           "  --experts N --experts-used K --expert-ff F   experts per layer (qwen3moe: 8;\n"
           "                                llama: a Mixtral-style MoE, experts --ff wide),\n"
           "                                experts per token (2), qwen3moe's expert width (--ff)\n"
           "  --pooling mean|cls|last       bert.pooling_type (bert; default mean)\n"
           "  --sliding-window N            gemma2/3: attention.sliding_window (4096)\n"
           "  --softcap A,F                 gemma2: attention and final logit soft-caps (50,30)\n"
           "  --name NAME                   general.name\n");
}

// ---- random weights -----------------------------------------------------------------------------

// Fills x[0..n) with N(0, std^2) samples (Box-Muller, both outputs used).
static void fill_normal(uint64_t *state, float *x, int64_t n, double std)
{
    for (int64_t i = 0; i < n; i += 2) {
        // u1 in (0, 1] so log(u1) is finite; 53-bit uniforms.
        double u1 = ((double)(tl_splitmix64(state) >> 11) + 1.0) * 0x1p-53;
        double u2 = (double)(tl_splitmix64(state) >> 11) * 0x1p-53;
        double r = sqrt(-2.0 * log(u1)) * std;
        double a = 2.0 * M_PI * u2;
        x[i] = (float)(r * cos(a));
        if (i + 1 < n) x[i + 1] = (float)(r * sin(a));
    }
}

struct tensor_job {
    char name[64];
    enum tl_dtype type;
    int n_dims;
    int64_t ne[3];
    enum tl_mk_fill fill;
    const float *values; // TL_MK_FILL_VALUES: ne[0] values (borrowed)
    uint64_t seed;       // stream seed for this tensor
    double weight_std;   // of TL_MK_FILL_NORMAL
    float *row;          // borrowed: shared row buffer of at least ne[0] floats
};

static int fill_tensor(void *ctx, const char *name, void *dst, size_t n_bytes)
{
    struct tensor_job *j = ctx;
    size_t row_bytes;
    if (!tl_dtype_row_bytes(j->type, j->ne[0], &row_bytes)) return -1;
    int64_t n_rows = j->n_dims >= 2 ? j->ne[1] * j->ne[2] : 1;
    if (row_bytes * (size_t)n_rows != n_bytes) return -1;
    uint64_t state = j->seed;
    for (int64_t r = 0; r < n_rows; r++) {
        if (j->fill == TL_MK_FILL_ONES) {
            for (int64_t i = 0; i < j->ne[0]; i++)
                j->row[i] = 1.0f;
        } else if (j->fill == TL_MK_FILL_VALUES) {
            memcpy(j->row, j->values, sizeof(float) * (size_t)j->ne[0]);
        } else if (j->fill == TL_MK_FILL_NEAR_ONE) {
            fill_normal(&state, j->row, j->ne[0], HEAD_NORM_STD);
            for (int64_t i = 0; i < j->ne[0]; i++)
                j->row[i] += 1.0f;
        } else {
            fill_normal(&state, j->row, j->ne[0], j->weight_std);
        }
        if (!tl_quantize_row(j->type, j->row, (uint8_t *)dst + (size_t)r * row_bytes, j->ne[0]))
            return -1;
    }
    return 0;
}

// FNV-1a of the name (core/hash.h), from 1469598103934665603 rather than the published basis
// (14695981039346656037, a digit longer): a slip kept on purpose, since every model that
// mkmodel has made takes its weights from this seed.
static uint64_t hash_name(const char *s)
{
    return tl_fnv1a64_more(1469598103934665603ull, s, strlen(s));
}

// ---- arguments ----------------------------------------------------------------------------------

// Parses a positive int in [1, max]; false otherwise.
static bool parse_int(const char *s, long max, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < 1 || v > max) return false;
    *out = (int)v;
    return true;
}

static uint32_t file_type_of(enum tl_dtype t, bool mix)
{
    // llama.cpp's llama_ftype numbers: ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q4_0 2, MOSTLY_Q4_1 3,
    // MOSTLY_Q8_0 7, MOSTLY_Q5_0 8, MOSTLY_Q5_1 9, MOSTLY_Q2_K 10, MOSTLY_Q3_K_S 11,
    // MOSTLY_Q4_K_S 14, MOSTLY_Q4_K_M 15, MOSTLY_Q5_K_S 16, MOSTLY_Q5_K_M 17, MOSTLY_Q6_K 18,
    // MOSTLY_IQ4_NL 25, MOSTLY_IQ4_XS 30, MOSTLY_BF16 32, MOSTLY_MXFP4_MOE 38.
    switch (t) {
    case TL_DTYPE_F16:
        return 1;
    case TL_DTYPE_Q4_0:
        return 2;
    case TL_DTYPE_Q4_1:
        return 3;
    case TL_DTYPE_Q8_0:
        return 7;
    case TL_DTYPE_Q5_0:
        return 8;
    case TL_DTYPE_Q5_1:
        return 9;
    case TL_DTYPE_Q2_K:
        return 10;
    case TL_DTYPE_Q3_K:
        return 11;
    case TL_DTYPE_Q4_K:
        return mix ? 15 : 14;
    case TL_DTYPE_Q5_K:
        return mix ? 17 : 16;
    case TL_DTYPE_Q6_K:
        return 18;
    case TL_DTYPE_IQ4_NL:
        return 25;
    case TL_DTYPE_IQ4_XS:
        return 30;
    case TL_DTYPE_BF16:
        return 32;
    case TL_DTYPE_MXFP4:
        return 38;
    default:
        return 0;
    }
}

static bool is_weight_type(enum tl_dtype t)
{
    switch (t) {
    case TL_DTYPE_F32:
    case TL_DTYPE_F16:
    case TL_DTYPE_BF16:
    case TL_DTYPE_Q8_0:
    case TL_DTYPE_Q4_0:
    case TL_DTYPE_Q4_1:
    case TL_DTYPE_Q5_0:
    case TL_DTYPE_Q5_1:
    case TL_DTYPE_Q2_K:
    case TL_DTYPE_Q3_K:
    case TL_DTYPE_Q4_K:
    case TL_DTYPE_Q5_K:
    case TL_DTYPE_Q6_K:
    case TL_DTYPE_IQ4_NL:
    case TL_DTYPE_IQ4_XS:
    case TL_DTYPE_MXFP4:
        return tl_kernels_weight_supported(t);
    default:
        return false;
    }
}

// llama.cpp's use_more_bits: the first and last eighth of the layers, and every third between.
static bool more_bits(int64_t layer, int64_t n_layer)
{
    return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

// The type of a matrix named `suffix` ("output", "token_embd", "attn_v", ...) in `layer`.
static enum tl_dtype matrix_type(enum tl_dtype base, bool mix, const char *suffix, int64_t layer,
                                 int64_t n_layer)
{
    if (!mix) return base;
    if (!strcmp(suffix, "output")) return TL_DTYPE_Q6_K;
    if ((!strcmp(suffix, "attn_v") || !strcmp(suffix, "ffn_down")) && more_bits(layer, n_layer))
        return TL_DTYPE_Q6_K;
    return base;
}

// A type whose block fits rows of n_in values: llama.cpp's fallbacks for K-quants, then F16.
static enum tl_dtype fitting_type(enum tl_dtype t, int64_t n_in)
{
    if (n_in % tl_dtype_info(t)->block_size == 0) return t;
    if (t == TL_DTYPE_Q2_K || t == TL_DTYPE_Q3_K || t == TL_DTYPE_Q4_K) t = TL_DTYPE_Q5_0;
    if (t == TL_DTYPE_Q5_K) t = TL_DTYPE_Q5_1;
    if (t == TL_DTYPE_Q6_K) t = TL_DTYPE_Q8_0;
    if (t == TL_DTYPE_IQ4_XS) t = TL_DTYPE_IQ4_NL;
    if (n_in % tl_dtype_info(t)->block_size == 0) return t;
    return TL_DTYPE_F16;
}

// ---- the command --------------------------------------------------------------------------------

int tl_cmd_mkmodel(int argc, char **argv)
{
    const char *out = NULL, *size = "260K", *type_name = "f32", *tok_from = NULL, *name = NULL;
    const char *arch = "llama";
    uint64_t seed = 42;
    double weight_std = WEIGHT_STD;
    double rope_factor = 0; // --rope-llama3: Llama 3.1's "llama3" RoPE scaling
    int rope_orig_ctx = 8192;
    int ctx = 0, dim = 0, layers = 0, heads = 0, kv_heads = 0, ff = 0, head_dim = 0;
    int experts = 0, experts_used = 2, expert_ff = 0;
    uint32_t pooling = 1; // bert: llama.cpp's LLAMA_POOLING_TYPE_MEAN
    int sliding_window = GEMMA2_SLIDING_WINDOW;
    double attn_softcap = GEMMA2_ATTN_SOFTCAP, final_softcap = GEMMA2_FINAL_SOFTCAP;
    for (int i = 1; i < argc; i += 2) { // every option takes one value
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        static const char *const known[] = {"--out",
                                            "-o",
                                            "--size",
                                            "--type",
                                            "--tokenizer-from",
                                            "--name",
                                            "--seed",
                                            "--ctx",
                                            "--dim",
                                            "--layers",
                                            "--heads",
                                            "--kv-heads",
                                            "--ff",
                                            "--help",
                                            "--arch",
                                            "--head-dim",
                                            "--weight-std",
                                            "--experts",
                                            "--experts-used",
                                            "--expert-ff",
                                            "--rope-llama3",
                                            "--pooling",
                                            "--sliding-window",
                                            "--softcap",
                                            NULL};
        if (!v) {
            size_t d;
            if (!tl_cli_closest(a, known, &d) || d)
                return tl_cli_unknown_option("mkmodel", a, known, NULL);
            fprintf(stderr, "tokenloom mkmodel: %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "-o") || !strcmp(a, "--out"))
            out = v;
        else if (!strcmp(a, "--size"))
            size = v;
        else if (!strcmp(a, "--arch"))
            arch = v;
        else if (!strcmp(a, "--type"))
            type_name = v;
        else if (!strcmp(a, "--tokenizer-from"))
            tok_from = v;
        else if (!strcmp(a, "--name"))
            name = v;
        else if (!strcmp(a, "--seed")) {
            char *end;
            seed = strtoull(v, &end, 10);
            ok = *v && !*end;
        } else if (!strcmp(a, "--ctx"))
            ok = parse_int(v, 1 << 24, &ctx);
        else if (!strcmp(a, "--dim"))
            ok = parse_int(v, 1 << 16, &dim);
        else if (!strcmp(a, "--layers"))
            ok = parse_int(v, 1024, &layers);
        else if (!strcmp(a, "--heads"))
            ok = parse_int(v, 1024, &heads);
        else if (!strcmp(a, "--kv-heads"))
            ok = parse_int(v, 1024, &kv_heads);
        else if (!strcmp(a, "--ff"))
            ok = parse_int(v, 1 << 18, &ff);
        else if (!strcmp(a, "--weight-std")) {
            char *end;
            weight_std = strtod(v, &end);
            ok = *v && !*end && weight_std > 0 && weight_std <= 1;
        } else if (!strcmp(a, "--experts"))
            ok = parse_int(v, 4096, &experts);
        else if (!strcmp(a, "--experts-used"))
            ok = parse_int(v, 4096, &experts_used);
        else if (!strcmp(a, "--sliding-window"))
            ok = parse_int(v, 1 << 24, &sliding_window);
        else if (!strcmp(a, "--softcap")) {
            char *end, *end2 = NULL;
            attn_softcap = strtod(v, &end);
            if (*end == ',') final_softcap = strtod(end + 1, &end2);
            ok = end2 && end2 != end + 1 && !*end2 && attn_softcap >= 0 && final_softcap >= 0;
        } else if (!strcmp(a, "--rope-llama3")) {
            char *end;
            rope_factor = strtod(v, &end);
            if (*end == ',')
                ok = parse_int(end + 1, 1 << 24, &rope_orig_ctx);
            else
                ok = !*end;
            ok = ok && rope_factor >= 1 && rope_factor <= 1024;
        } else if (!strcmp(a, "--expert-ff"))
            ok = parse_int(v, 1 << 18, &expert_ff);
        else if (!strcmp(a, "--head-dim"))
            ok = parse_int(v, 1 << 12, &head_dim);
        else if (!strcmp(a, "--pooling")) {
            static const char *const names[] = {"mean", "cls", "last"};
            ok = false;
            for (uint32_t k = 0; k < 3; k++)
                if (!strcmp(v, names[k])) ok = true, pooling = k + 1;
        } else
            return tl_cli_unknown_option("mkmodel", a, known, NULL);
        if (!ok) {
            fprintf(stderr, "tokenloom mkmodel: bad value '%s' for %s\n", v, a);
            return 2;
        }
    }
    if (!out) {
        fprintf(stderr, "tokenloom mkmodel: -o OUT.gguf is required\n");
        usage(stderr);
        return 2;
    }
    const struct preset *p = NULL;
    for (size_t i = 0; i < sizeof(presets) / sizeof(presets[0]); i++)
        if (!strcasecmp(size, presets[i].name)) p = &presets[i];
    if (!p) {
        fprintf(stderr, "tokenloom mkmodel: unknown --size '%s' (260K, 15M, 42M, 110M, 1B)\n",
                size);
        return 2;
    }
    const struct tl_mk_family *fam = tl__mk_family(arch);
    if (!fam) {
        fprintf(stderr,
                "tokenloom mkmodel: unknown --arch '%s' (llama, qwen2, qwen3, qwen3moe, granite, "
                "smollm3, phi3, bert)\n",
                arch);
        return 2;
    }
    enum tl_dtype wtype;
    bool mix = false;
    if (!strcasecmp(type_name, "q4_k_m") || !strcasecmp(type_name, "q5_k_m")) {
        mix = true;
        wtype = type_name[1] == '4' ? TL_DTYPE_Q4_K : TL_DTYPE_Q5_K;
    } else if (!tl_dtype_from_name(type_name, &wtype) || !is_weight_type(wtype)) {
        fprintf(stderr,
                "tokenloom mkmodel: unsupported --type '%s' (f32, f16, bf16, q8_0, q4_0, q4_1, "
                "q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, q4_k_m, q5_k_m, iq4_nl, iq4_xs, "
                "mxfp4)\n",
                type_name);
        return 2;
    }
    if (!kv_heads) kv_heads = heads ? heads : p->kv_heads;
    if (!dim) dim = p->dim;
    if (!layers) layers = p->layers;
    if (!heads) heads = p->heads;
    if (!ff) ff = p->ff;
    if (!ctx) ctx = p->ctx;
    bool key_length = fam->key_length || head_dim;
    if (!head_dim && dim % heads == 0) head_dim = dim / heads;
    if (!head_dim || heads % kv_heads || head_dim % 2) {
        fprintf(stderr,
                "tokenloom mkmodel: bad shape: dim %d must be a multiple of heads %d (or give "
                "--head-dim), heads a multiple of kv-heads %d, and the head size even\n",
                dim, heads, kv_heads);
        return 2;
    }
    int64_t q_dim = (int64_t)heads * head_dim, kv_dim = (int64_t)kv_heads * head_dim;
    // qwen3moe always has experts (8 by default); llama when --experts is given (Mixtral-style,
    // each expert --ff wide, as llama.cpp reads llama experts).
    bool moe = fam->moe || (experts && !strcmp(fam->name, "llama"));
    if (fam->moe && !experts) experts = 8;
    if (!expert_ff || !fam->moe) expert_ff = ff;
    if (experts && !moe) {
        fprintf(stderr, "tokenloom mkmodel: --experts applies to --arch llama and qwen3moe\n");
        return 2;
    }
    if (moe && experts_used > experts) {
        fprintf(stderr, "tokenloom mkmodel: --experts-used %d is more than --experts %d\n",
                experts_used, experts);
        return 2;
    }

    // The donor tokenizer (bert without one: the built-in WordPiece vocabulary).
    char tok_buf[PATH_MAX];
    struct tl_gguf *tok = NULL;
    int64_t n_vocab = tl__mk_bert_vocab_size();
    if (fam->bert && !tok_from) goto have_vocab;
    if (!tok_from) {
        if (!tl_cli_find_shared_model(p->tokenizer, tok_buf, sizeof(tok_buf))) {
            fprintf(stderr,
                    "tokenloom mkmodel: cannot find the shared %s (set TL_SHARED or use "
                    "--tokenizer-from)\n",
                    p->tokenizer);
            return 1;
        }
        tok_from = tok_buf;
    }
    if (tl_gguf_open(tok_from, &tok)) {
        fprintf(stderr, "tokenloom: %s\n", tl_last_error());
        return 1;
    }
    const struct tl_gguf_value *toks = tl_gguf_get_arr(tok, "tokenizer.ggml.tokens");
    if (!toks || toks->arr.elem_type != TL_GGUF_TYPE_STRING || toks->arr.n == 0 ||
        toks->arr.n > INT32_MAX) {
        fprintf(stderr, "tokenloom: %s: no usable tokenizer.ggml.tokens array\n", tok_from);
        tl_gguf_close(tok);
        return 1;
    }
    n_vocab = (int64_t)toks->arr.n;

have_vocab:;
    int rc = 1;
    struct tl_gguf_writer *w = tl_gguf_writer_create();
    struct tl_mk_shape shape0 = {.experts = moe ? experts : 0};
    struct tl_mk_tensor count_only[TL_MK_MAX_LAYER_TENSORS], head[5], tail[5];
    int n_head = tl__mk_global_tensors(fam, &shape0, true, head);
    int n_tail = tl__mk_global_tensors(fam, &shape0, false, tail);
    int64_t n_jobs =
        n_head + n_tail + tl__mk_layer_tensors(fam, &shape0, count_only) * (int64_t)layers;
    struct tensor_job *jobs = tl_calloc_array((size_t)n_jobs + 1, sizeof(*jobs)); // + rope_freqs
    int64_t max_row = dim > ff ? dim : ff;
    if (q_dim > max_row) max_row = q_dim;
    if (expert_ff > max_row) max_row = expert_ff;
    if (q_dim + 2 * kv_dim > max_row) max_row = q_dim + 2 * kv_dim;
    float *row = tl_malloc_array((size_t)max_row + 1, sizeof(float));
    if (!w || !jobs || !row) {
        fprintf(stderr, "tokenloom mkmodel: out of memory\n");
        goto out;
    }

    // Metadata.
    char name_buf[64];
    if (!name) {
        snprintf(name_buf, sizeof(name_buf), "tokenloom-random-%s", p->name);
        name = name_buf;
    }
    char key[128];
#define KEY(suffix) (snprintf(key, sizeof(key), "%s.%s", fam->name, suffix), key)
    tl_status st = tl_gguf_writer_set_str(w, "general.architecture", fam->name);
    if (!st) st = tl_gguf_writer_set_str(w, "general.name", name);
    if (!st) st = tl_gguf_writer_set_u32(w, "general.file_type", file_type_of(wtype, mix));
    if (!st && tl_dtype_info(wtype)->block_size > 1)
        st = tl_gguf_writer_set_u32(w, "general.quantization_version", 2);
    if (!st) st = tl_gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)ctx);
    if (!st) st = tl_gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)dim);
    if (!st) st = tl_gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)layers);
    if (!st) st = tl_gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)ff);
    if (!st) st = tl_gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)heads);
    if (!st) st = tl_gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)kv_heads);
    if (!st && key_length)
        st = tl_gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)head_dim);
    if (!st && key_length)
        st = tl_gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)head_dim);
    if (!st && fam->bert) st = tl__mk_bert_keys(w, fam->rms_eps, pooling);
    if (!st && !fam->bert)
        st = tl_gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), fam->rms_eps);
    if (!st && !fam->bert)
        st = tl_gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)head_dim);
    if (!st && !fam->bert) st = tl_gguf_writer_set_f32(w, KEY("rope.freq_base"), fam->rope_base);
    if (!st && fam->multipliers)
        st = tl_gguf_writer_set_f32(w, KEY("embedding_scale"), GRANITE_EMBEDDING_SCALE);
    if (!st && fam->multipliers)
        st = tl_gguf_writer_set_f32(w, KEY("residual_scale"), GRANITE_RESIDUAL_SCALE);
    if (!st && fam->multipliers)
        st = tl_gguf_writer_set_f32(w, KEY("attention.scale"), GRANITE_ATTENTION_SCALE);
    if (!st && fam->multipliers)
        st = tl_gguf_writer_set_f32(w, KEY("logit_scale"), GRANITE_LOGIT_SCALE);
    if (!st && moe) st = tl_gguf_writer_set_u32(w, KEY("expert_count"), (uint32_t)experts);
    if (!st && moe)
        st = tl_gguf_writer_set_u32(w, KEY("expert_used_count"), (uint32_t)experts_used);
    if (!st && fam->moe)
        st = tl_gguf_writer_set_u32(w, KEY("expert_feed_forward_length"), (uint32_t)expert_ff);
    if (!st && fam->gemma)
        st = tl_gguf_writer_set_u32(w, KEY("attention.sliding_window"), (uint32_t)sliding_window);
    if (!st && fam->gemma == 2)
        st = tl_gguf_writer_set_f32(w, KEY("attn_logit_softcapping"), (float)attn_softcap);
    if (!st && fam->gemma == 2)
        st = tl_gguf_writer_set_f32(w, KEY("final_logit_softcapping"), (float)final_softcap);
    if (!st) st = tl_gguf_writer_set_u32(w, KEY("vocab_size"), (uint32_t)n_vocab);
#undef KEY
    if (!st && !tok) st = tl__mk_bert_vocab(w);
    for (int64_t i = 0; !st && tok && i < tl_gguf_n_kv(tok); i++) {
        const struct tl_gguf_kv *kv = tl_gguf_kv_at(tok, i);
        char tkey[256];
        if (kv->key.len < 10 || kv->key.len >= sizeof(tkey) ||
            memcmp(kv->key.ptr, "tokenizer.", 10))
            continue;
        memcpy(tkey, kv->key.ptr, kv->key.len);
        tkey[kv->key.len] = '\0';
        st = tl_gguf_writer_set_value(w, tkey, &kv->value);
    }
    if (st) {
        fprintf(stderr, "tokenloom mkmodel: %s\n", tl_last_error());
        goto out;
    }

    // Tensors, in llama.cpp's usual order.
    int64_t nj = 0, n_params = 0, n_fallback = 0;
    struct tl_mk_shape shape = {.dim = dim,
                                .q_dim = q_dim,
                                .kv_dim = kv_dim,
                                .head_dim = head_dim,
                                .ff = ff,
                                .experts = moe ? experts : 0,
                                .expert_ff = expert_ff,
                                .vocab = n_vocab,
                                .ctx = ctx};
    struct tl_mk_tensor blk[TL_MK_MAX_LAYER_TENSORS];
    int nb = tl__mk_layer_tensors(fam, &shape, blk);
    n_head = tl__mk_global_tensors(fam, &shape, true, head);
    n_tail = tl__mk_global_tensors(fam, &shape, false, tail);
    for (int64_t t = 0; t < n_jobs; t++) {
        struct tensor_job *j = &jobs[nj++];
        int64_t n_in, n_out, layer = -1;
        const char *suffix;
        enum tl_mk_fill fill = TL_MK_FILL_NORMAL;
        int64_t n_exp = 0;
        bool f32 = false;
        if (t < n_head || t >= n_jobs - n_tail) {
            const struct tl_mk_tensor *g = t < n_head ? &head[t] : &tail[t - (n_jobs - n_tail)];
            snprintf(j->name, sizeof(j->name), "%s.%s", g->suffix, g->kind);
            n_in = g->n_in, n_out = g->n_out, suffix = g->suffix, fill = g->fill, f32 = g->f32;
        } else {
            int64_t l = (t - n_head) / nb, k = (t - n_head) % nb;
            snprintf(j->name, sizeof(j->name), "blk.%" PRId64 ".%s.%s", l, blk[k].suffix,
                     blk[k].kind);
            n_in = blk[k].n_in, n_out = blk[k].n_out, suffix = blk[k].suffix, layer = l;
            fill = blk[k].fill, n_exp = blk[k].n_exp, f32 = blk[k].f32;
        }
        bool vec = n_out == 0; // norms and biases: 1-D, F32
        j->fill = fill;
        j->n_dims = vec ? 1 : n_exp ? 3 : 2;
        j->ne[0] = n_in;
        j->ne[1] = vec ? 1 : n_out;
        j->ne[2] = n_exp ? n_exp : 1;
        j->type = vec || f32 ? TL_DTYPE_F32 : matrix_type(wtype, mix, suffix, layer, layers);
        enum tl_dtype fit = fitting_type(j->type, j->ne[0]);
        if (fit != j->type) {
            j->type = fit;
            n_fallback++;
        }
        j->seed = seed ^ hash_name(j->name);
        j->weight_std = weight_std;
        j->row = row;
        n_params += j->ne[0] * j->ne[1] * j->ne[2];
        st = tl_gguf_writer_add_tensor_fill(w, j->name, j->type, j->n_dims, j->ne, fill_tensor, j);
        if (st) {
            fprintf(stderr, "tokenloom mkmodel: %s\n", tl_last_error());
            goto out;
        }
    }

    // Llama 3.1's "llama3" RoPE scaling, as llama.cpp's converter writes it.
    float rope_values[1024];
    if (rope_factor > 0) {
        int half = head_dim / 2;
        if (half > 1024) {
            fprintf(stderr, "tokenloom mkmodel: --rope-llama3 needs a head size <= 2048\n");
            goto out;
        }
        tl__mk_rope_llama3(fam->rope_base, head_dim, rope_factor, rope_orig_ctx, rope_values);
        struct tensor_job *j = &jobs[nj++];
        snprintf(j->name, sizeof(j->name), "rope_freqs.weight");
        j->fill = TL_MK_FILL_VALUES, j->values = rope_values, j->n_dims = 1;
        j->ne[0] = half, j->ne[1] = 1, j->ne[2] = 1;
        j->type = TL_DTYPE_F32, j->row = row;
        n_params += half;
        st = tl_gguf_writer_add_tensor_fill(w, j->name, j->type, 1, j->ne, fill_tensor, j);
        if (st) {
            fprintf(stderr, "tokenloom mkmodel: %s\n", tl_last_error());
            goto out;
        }
    }

    int64_t t0 = tl_time_us();
    st = tl_gguf_writer_write(w, out);
    if (st) {
        fprintf(stderr, "tokenloom: %s\n", tl_last_error());
        goto out;
    }
    struct stat sb;
    long long file_bytes = stat(out, &sb) == 0 ? (long long)sb.st_size : -1;
    printf("wrote %s: %s, %s%s weights, dim %d, %d layers, %d heads (%d kv), ff %d, vocab %" PRId64
           ", ctx %d\n",
           out, fam->name, tl_dtype_name(wtype), mix ? "_M mix" : "", dim, layers, heads, kv_heads,
           ff, n_vocab, ctx);
    if (n_fallback)
        printf("note: %" PRId64 " tensors whose row length is not a multiple of the %s block size "
               "have a smaller block type (Q5_0, Q5_1, Q8_0 or F16)\n",
               n_fallback, tl_dtype_name(wtype));
    double np = (double)n_params;
    printf("parameters %" PRId64 " (%.2f%s), file size %lld bytes, %.1f s\n", n_params,
           np >= 1e9 ? np / 1e9 : np / 1e6, np >= 1e9 ? "B" : "M", file_bytes,
           (double)(tl_time_us() - t0) / 1e6);
    rc = 0;
out:
    free(row);
    free(jobs);
    tl_gguf_writer_destroy(w);
    tl_gguf_close(tok);
    return rc;
}
