/*
 * tokenloom info: prints what a GGUF file holds -- format, architecture and hyperparameters,
 * tensor count with a histogram of types, parameter count, the tokenizer's kind and size, and
 * whether a chat template is present -- as "label  value" lines a person or a script can read.
 * With --all it also lists every metadata key and every tensor.
 *
 * It reads the file through the GGUF module only (no model load), so it works on any GGUF,
 * including vocabulary-only files and architectures the engine cannot run. Strings from the file
 * are printed with control characters replaced, so a hostile file cannot garble the terminal.
 * A bad file gives one line "tokenloom: <path>: <problem>" on stderr and exit code 1.
 */
#include "cli/args.h"
#include "cli/cli.h"

#include "gguf/gguf.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tokenloom info [-m MODEL.gguf] [--all]\n"
            "  -m, --model PATH  the GGUF file (default: $MODEL or the shared stories260K.gguf)\n"
            "  -a, --all         also list every metadata key and every tensor\n");
}

// Prints up to `max` bytes of a file string, control characters as '?', stopping at a newline
// when `first_line`.
static void put_str(struct tl_gguf_str s, size_t max, bool first_line)
{
    size_t i;
    for (i = 0; i < s.len && i < max; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (first_line && (c == '\n' || c == '\r')) return;
        putchar(c < 0x20 || c == 0x7f ? '?' : c);
    }
    if (i < s.len) fputs("...", stdout);
}

static void label(const char *l)
{
    printf("%-22s", l);
}

// Prints a scalar value, or a short summary of an array.
static void put_value(const struct tl_gguf_value *v)
{
    switch (v->type) {
    case TL_GGUF_TYPE_STRING:
        putchar('"');
        put_str(v->str, 80, false);
        putchar('"');
        break;
    case TL_GGUF_TYPE_ARRAY: {
        printf("[%s x %" PRIu64 "]", tl_gguf_type_name(v->arr.elem_type), v->arr.n);
        double d;
        uint64_t n_show = v->arr.n < 4 ? v->arr.n : 4;
        if (v->arr.elem_type == TL_GGUF_TYPE_STRING) {
            for (uint64_t i = 0; i < n_show; i++) {
                fputs(i ? ", \"" : " \"", stdout);
                put_str(v->arr.items[i].str, 24, false);
                putchar('"');
            }
        } else {
            for (uint64_t i = 0; i < n_show && tl_gguf_arr_f64(v, i, &d); i++)
                printf(i ? ", %g" : " %g", d);
        }
        if (n_show < v->arr.n && v->arr.elem_type != TL_GGUF_TYPE_ARRAY) fputs(", ...", stdout);
        break;
    }
    case TL_GGUF_TYPE_FLOAT32:
    case TL_GGUF_TYPE_FLOAT64:
        printf("%g", v->f64);
        break;
    case TL_GGUF_TYPE_BOOL:
        fputs(v->u64 ? "true" : "false", stdout);
        break;
    case TL_GGUF_TYPE_INT8:
    case TL_GGUF_TYPE_INT16:
    case TL_GGUF_TYPE_INT32:
    case TL_GGUF_TYPE_INT64:
        printf("%" PRId64, v->i64);
        break;
    default:
        printf("%" PRIu64, v->u64);
        break;
    }
}

// Prints "<label> <value of <arch>.<suffix>>", or "-" and `absent_note` when absent.
static void arch_line(const struct tl_gguf *g, const char *arch, const char *suffix, const char *l,
                      const char *absent_note)
{
    char key[256];
    snprintf(key, sizeof(key), "%s.%s", arch, suffix);
    label(l);
    const struct tl_gguf_value *v = tl_gguf_get(g, key);
    if (v)
        put_value(v);
    else
        printf("-%s", absent_note);
    putchar('\n');
}

// The same line, printed only when the file has the key (the keys of some families only).
static void arch_line_opt(const struct tl_gguf *g, const char *arch, const char *suffix,
                          const char *l)
{
    char key[256];
    snprintf(key, sizeof(key), "%s.%s", arch, suffix);
    if (tl_gguf_get(g, key)) arch_line(g, arch, suffix, l, "");
}

static void human_count(int64_t n, char *buf, size_t cap)
{
    if (n >= 1000000000)
        snprintf(buf, cap, "%.2fB", (double)n / 1e9);
    else if (n >= 1000000)
        snprintf(buf, cap, "%.1fM", (double)n / 1e6);
    else if (n >= 1000)
        snprintf(buf, cap, "%.1fK", (double)n / 1e3);
    else
        snprintf(buf, cap, "%" PRId64, n);
}

static void print_summary(const struct tl_gguf *g)
{
    label("file");
    printf("%s\n", tl_gguf_path(g));
    label("file size");
    printf("%zu bytes\n", tl_gguf_file_size(g));
    label("gguf version");
    printf("%u\n", tl_gguf_version(g));
    label("alignment");
    printf("%zu\n", tl_gguf_alignment(g));
    label("metadata keys");
    printf("%" PRId64 "\n", tl_gguf_n_kv(g));

    struct tl_gguf_str s;
    char arch[128] = "";
    label("architecture");
    if (tl_gguf_get_str(g, "general.architecture", &s) && s.len < sizeof(arch)) {
        memcpy(arch, s.ptr, s.len);
        arch[s.len] = '\0';
        put_str(s, 64, false);
    } else {
        fputs("-", stdout);
    }
    putchar('\n');
    label("name");
    if (tl_gguf_get_str(g, "general.name", &s))
        put_str(s, 80, false);
    else
        fputs("-", stdout);
    putchar('\n');
    uint32_t ftype;
    label("file type");
    if (tl_gguf_get_u32(g, "general.file_type", &ftype))
        printf("%u\n", ftype);
    else
        puts("-");

    if (*arch) {
        arch_line(g, arch, "context_length", "context length", "");
        arch_line(g, arch, "embedding_length", "embedding length", "");
        arch_line(g, arch, "block_count", "block count", "");
        arch_line(g, arch, "feed_forward_length", "feed-forward length", "");
        arch_line(g, arch, "attention.head_count", "head count", "");
        arch_line(g, arch, "attention.head_count_kv", "head count kv", "");
        arch_line(g, arch, "rope.dimension_count", "rope dimensions", "");
        arch_line(g, arch, "rope.freq_base", "rope freq base",
                  " (absent: 10000 is the usual default)");
        arch_line(g, arch, "attention.layer_norm_rms_epsilon", "rms eps", "");
        arch_line(g, arch, "vocab_size", "vocab size", " (absent: the token count applies)");
        // Family hyperparameters: head size, granite's multipliers, experts, sliding window,
        // soft-capping (gemma2), granite's RoPE switch, bert's encoder keys.
        arch_line_opt(g, arch, "attention.key_length", "key length");
        arch_line_opt(g, arch, "attention.value_length", "value length");
        arch_line_opt(g, arch, "embedding_scale", "embedding scale");
        arch_line_opt(g, arch, "residual_scale", "residual scale");
        arch_line_opt(g, arch, "attention.scale", "attention scale");
        arch_line_opt(g, arch, "logit_scale", "logit scale");
        arch_line_opt(g, arch, "expert_count", "expert count");
        arch_line_opt(g, arch, "expert_used_count", "experts used");
        arch_line_opt(g, arch, "attention.sliding_window", "sliding window");
        arch_line_opt(g, arch, "attn_logit_softcapping", "attention soft-cap");
        arch_line_opt(g, arch, "final_logit_softcapping", "final soft-cap");
        arch_line_opt(g, arch, "rope.scaling.finetuned", "rope finetuned");
        // Encoders (bert): LayerNorm epsilon, attention mask, pooling (llama.cpp's enum).
        arch_line_opt(g, arch, "attention.layer_norm_epsilon", "layer norm eps");
        arch_line_opt(g, arch, "attention.causal", "causal attention");
        arch_line_opt(g, arch, "pooling_type", "pooling type");
    }

    // Tensors: count, type histogram, parameters.
    int64_t n_by_type[TL_DTYPE_COUNT] = {0};
    int64_t n_params = 0;
    size_t n_bytes = 0;
    for (int64_t i = 0; i < tl_gguf_n_tensors(g); i++) {
        const struct tl_gguf_tensor *t = tl_gguf_tensor_at(g, i);
        n_by_type[t->type]++;
        int64_t ne = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; // validated not to overflow
        if (__builtin_add_overflow(n_params, ne, &n_params)) n_params = INT64_MAX;
        n_bytes += t->n_bytes;
    }
    label("tensors");
    printf("%" PRId64 "\n", tl_gguf_n_tensors(g));
    label("tensor types");
    bool any = false;
    for (int t = 0; t < TL_DTYPE_COUNT; t++) {
        if (!n_by_type[t]) continue;
        printf("%s%s x %" PRId64, any ? ", " : "", tl_dtype_name((uint32_t)t), n_by_type[t]);
        any = true;
    }
    puts(any ? "" : "-");
    char human[32];
    human_count(n_params, human, sizeof(human));
    label("parameters");
    printf("%" PRId64 " (%s)\n", n_params, human);
    label("tensor data");
    printf("%zu bytes\n", n_bytes);

    // Tokenizer.
    const struct tl_gguf_value *toks = tl_gguf_get_arr(g, "tokenizer.ggml.tokens");
    label("vocabulary size");
    if (toks)
        printf("%" PRIu64 "\n", toks->arr.n);
    else
        puts("-");
    label("tokenizer model");
    if (tl_gguf_get_str(g, "tokenizer.ggml.model", &s))
        put_str(s, 64, false);
    else
        fputs("-", stdout);
    putchar('\n');
    label("tokenizer pre");
    if (tl_gguf_get_str(g, "tokenizer.ggml.pre", &s))
        put_str(s, 64, false);
    else
        fputs("-", stdout);
    putchar('\n');
    label("chat template");
    if (tl_gguf_get_str(g, "tokenizer.chat_template", &s)) {
        printf("yes (%" PRIu64 " bytes): ", s.len);
        put_str(s, 100, true);
        putchar('\n');
    } else {
        puts("no");
    }
}

static void print_all(const struct tl_gguf *g)
{
    printf("\nmetadata:\n");
    for (int64_t i = 0; i < tl_gguf_n_kv(g); i++) {
        const struct tl_gguf_kv *kv = tl_gguf_kv_at(g, i);
        printf("  ");
        put_str(kv->key, 80, false);
        printf(" (%s) = ", tl_gguf_type_name(kv->value.type));
        put_value(&kv->value);
        putchar('\n');
    }
    printf("\ntensors:\n");
    for (int64_t i = 0; i < tl_gguf_n_tensors(g); i++) {
        const struct tl_gguf_tensor *t = tl_gguf_tensor_at(g, i);
        printf("  %-6s [", tl_dtype_name(t->type));
        for (int d = 0; d < t->n_dims; d++)
            printf(d ? ", %" PRId64 : "%" PRId64, t->ne[d]);
        printf("] offset %" PRIu64 " bytes %zu  ", t->offset, t->n_bytes);
        put_str(t->name, 80, false);
        putchar('\n');
    }
}

int tl_cmd_info(int argc, char **argv)
{
    const char *path = NULL;
    bool all = false;
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc) {
            path = argv[++i];
        } else if (!strcmp(argv[i], "-a") || !strcmp(argv[i], "--all")) {
            all = true;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) {
            fprintf(stderr, "tokenloom info: %s needs a value\n", argv[i]);
            return 2;
        } else {
            static const char *const known[] = {"--model", "-m", "--all", "-a", "--help", NULL};
            return tl_cli_unknown_option("info", argv[i], known, NULL);
        }
    }
    if (!path) path = tl_cli_default_model();
    if (!path) {
        fprintf(stderr, "tokenloom info: no model given and no default model found (use -m)\n");
        return 2;
    }
    struct tl_gguf *g;
    if (tl_gguf_open(path, &g)) {
        fprintf(stderr, "tokenloom: %s\n", tl_last_error());
        return 1;
    }
    print_summary(g);
    if (all) print_all(g);
    tl_gguf_close(g);
    if (fflush(stdout) != 0) return 1;
    return 0;
}
