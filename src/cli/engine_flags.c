/*
 * Parsing of the engine flags shared by `generate` and `serve` (see engine_flags.h). Values are
 * checked for range here so that a typo gives a usage error naming the flag, not a failure deep
 * inside tl_engine_create; tl_engine_create still validates the combination.
 */
#include "cli/engine_flags.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

// Matches argv[*i] against a flag name, in either "--name value" or "--name=value" form.
// Returns 1 and sets *val when it matches with a value, 0 when it is not this flag, -1 when the
// value is missing.
static int match(const char *name, int argc, char **argv, int *i, const char **val)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (a[n] != '\0') return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "tokenloom: %s needs a value\n", name);
        return -1;
    }
    *i += 1;
    *val = argv[*i];
    return 1;
}

static int parse_i64(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "tokenloom: %s: '%s' is not an integer in [%lld, %lld]\n", flag, s,
                (long long)lo, (long long)hi);
        return -1;
    }
    *out = v;
    return 0;
}

// A byte size with an optional K/M/G/T suffix (powers of 1024; a trailing "B"/"iB" is allowed).
static int parse_bytes(const char *flag, const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double mul = 1;
    if (end != s) {
        switch (*end) {
        case 'k':
        case 'K':
            mul = 1024.0;
            end++;
            break;
        case 'm':
        case 'M':
            mul = 1024.0 * 1024;
            end++;
            break;
        case 'g':
        case 'G':
            mul = 1024.0 * 1024 * 1024;
            end++;
            break;
        case 't':
        case 'T':
            mul = 1024.0 * 1024 * 1024 * 1024;
            end++;
            break;
        default:
            break;
        }
        if (mul > 1 && *end == 'i') end++;
        if (*end == 'b' || *end == 'B') end++;
    }
    if (errno || end == s || *end != '\0' || !(v >= 0) || v * mul > 9.0e18) {
        fprintf(stderr, "tokenloom: %s: '%s' is not a byte size (e.g. 512M, 2G)\n", flag, s);
        return -1;
    }
    *out = (int64_t)(v * mul);
    return 0;
}

int tl_cli_engine_flag(struct tl_engine_config *c, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    const char *val = NULL;
    int64_t v;
    int m;
    if (!strcmp(a, "--no-prefix-cache") || !strcmp(a, "--no-prefix-caching")) {
        c->prefix_caching = false;
        return 1;
    }
    if ((m = match("--max-batch-size", argc, argv, i, &val)) != 0) {
        if (m < 0 || parse_i64(a, val, 1, 1 << 16, &v)) return -1;
        c->max_batch_size = (int32_t)v;
        return 1;
    }
    if ((m = match("--max-tokens-per-step", argc, argv, i, &val)) != 0) {
        if (m < 0 || parse_i64(a, val, 1, 1 << 20, &v)) return -1;
        c->max_tokens_per_step = (int32_t)v;
        return 1;
    }
    if ((m = match("--max-seq-len", argc, argv, i, &val)) != 0) {
        if (m < 0 || parse_i64(a, val, 0, 1 << 24, &v)) return -1;
        c->max_seq_len = (int32_t)v;
        return 1;
    }
    if ((m = match("--kv-block-size", argc, argv, i, &val)) != 0) {
        if (m < 0 || parse_i64(a, val, 1, 4096, &v)) return -1;
        c->kv_block_size = (int32_t)v;
        return 1;
    }
    if ((m = match("--kv-blocks", argc, argv, i, &val)) != 0) {
        if (m < 0 || parse_i64(a, val, 0, INT32_MAX, &v)) return -1;
        c->kv_blocks = v;
        return 1;
    }
    if ((m = match("--kv-bytes", argc, argv, i, &val)) != 0) {
        if (m < 0 || parse_bytes(a, val, &v)) return -1;
        c->kv_bytes = v;
        return 1;
    }
    if ((m = match("--kv-type", argc, argv, i, &val)) != 0) {
        if (m < 0) return -1;
        if (!strcasecmp(val, "f16")) {
            c->kv_type = TL_KV_F16;
        } else if (!strcasecmp(val, "f32")) {
            c->kv_type = TL_KV_F32;
        } else if (!strcasecmp(val, "q8_0")) {
            c->kv_type = TL_KV_Q8_0;
        } else {
            fprintf(stderr, "tokenloom: --kv-type: '%s' is not f16, f32 or q8_0\n", val);
            return -1;
        }
        return 1;
    }
    if ((m = match("--threads", argc, argv, i, &val)) != 0 ||
        (m = match("-t", argc, argv, i, &val)) != 0) {
        if (m < 0 || parse_i64("--threads", val, 0, 1024, &v)) return -1;
        c->n_threads = (int32_t)v;
        return 1;
    }
    return 0;
}

void tl_cli_engine_flags_help(FILE *f)
{
    fprintf(f, "engine flags:\n"
               "  --max-batch-size N       most sequences running at once (default 64)\n"
               "  --max-tokens-per-step N  token budget per step, decodes + prefill chunks "
               "(default 512)\n"
               "  --max-seq-len N          prompt + generated tokens per sequence (default: model "
               "context)\n"
               "  --kv-block-size N        positions per KV block (default 16)\n"
               "  --kv-blocks N            KV pool size in blocks\n"
               "  --kv-bytes SIZE          KV pool size in bytes (K/M/G suffixes); default: what\n"
               "                           max-batch-size full sequences need, at most 1/4 of RAM\n"
               "  --kv-type f16|f32|q8_0   KV cache element type (default f16); q8_0: 8-bit\n"
               "                           blocks of 32 with a scale, 0.53x the memory of f16\n"
               "                           (needs a head_dim that is a multiple of 32)\n"
               "  --no-prefix-cache        do not reuse computed prompt blocks across requests\n"
               "  -t, --threads N          compute threads (default: online CPUs)\n");
}
