/*
 * Parsing of the engine flags shared by `generate` and `serve` (see engine_flags.h), with the
 * vLLM and llama.cpp spellings as aliases. Values are checked for range here so that a typo
 * gives a usage error naming the flag, not a failure deep inside tl_engine_create;
 * tl_engine_create still validates the combination against the model. The K and V cache types
 * given separately (-ctk/-ctv) are remembered in file statics to check that they agree:
 * parsing is single-threaded and happens once per process.
 */
#include "cli/engine_flags.h"

#include "cli/args.h"
#include "core/log.h"
#include "gpu/gpu.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define NAMES(...) ((const char *const[]){__VA_ARGS__, NULL})

static const char *const *const max_batch_names = NAMES(
    "--max-batch-size", "--max-num-seqs", "-np", "--parallel", "--batch_size", "--max_batch_size");
static const char *const *const step_names =
    NAMES("--max-tokens-per-step", "--max-num-batched-tokens", "-b", "--batch-size");
static const char *const *const prefill_decoding_names = NAMES("--max-prefill-tokens-decoding");
static const char *const *const prefill_backlog_names = NAMES("--prefill-backlog-tokens");
static const char *const *const prefill_per_decode_names = NAMES("--prefill-tokens-per-decode");
static const char *const *const seq_len_names =
    NAMES("--max-seq-len", "--max-model-len", "-c", "--ctx-size", "--max_seq_length");
static const char *const *const block_names = NAMES("--kv-block-size", "--block-size");
static const char *const *const kv_type_names = NAMES("--kv-type", "--kv-cache-dtype");
static const char *const *const kv_k_names = NAMES("-ctk", "--cache-type-k");
static const char *const *const kv_v_names = NAMES("-ctv", "--cache-type-v");
static const char *const *const thread_names = NAMES("--threads", "-t");
static const char *const *const gpu_layer_names = NAMES("-ngl", "--n-gpu-layers", "--gpu-layers");

const char *const tl_cli_engine_flag_names[] = {"--max-batch-size",
                                                "--max-num-seqs",
                                                "-np",
                                                "--parallel",
                                                "--batch_size",
                                                "--max_batch_size",
                                                "--max-tokens-per-step",
                                                "--max-num-batched-tokens",
                                                "-b",
                                                "--batch-size",
                                                "--max-prefill-tokens-decoding",
                                                "--prefill-backlog-tokens",
                                                "--prefill-tokens-per-decode",
                                                "--max-seq-len",
                                                "--max-model-len",
                                                "-c",
                                                "--ctx-size",
                                                "--max_seq_length",
                                                "--use_kv_cache",
                                                "--prefill_enabled",
                                                "--enable_padding",
                                                "--pad_token_id",
                                                "--kv-block-size",
                                                "--block-size",
                                                "--kv-blocks",
                                                "--kv-bytes",
                                                "--kv-type",
                                                "--kv-cache-dtype",
                                                "-ctk",
                                                "--cache-type-k",
                                                "-ctv",
                                                "--cache-type-v",
                                                "--no-prefix-cache",
                                                "--no-prefix-caching",
                                                "--no-enable-prefix-caching",
                                                "--threads",
                                                "-t",
                                                "--gpu-memory-utilization",
                                                "-ngl",
                                                "--n-gpu-layers",
                                                "--gpu-layers",
                                                "--device",
                                                NULL};

// A byte size with an optional K/M/G/T suffix (powers of 1024; a trailing "B"/"iB" is allowed).
static int parse_bytes(const char *cmd, const char *flag, const char *s, int64_t *out)
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
            break;
        case 'm':
        case 'M':
            mul = 1024.0 * 1024;
            break;
        case 'g':
        case 'G':
            mul = 1024.0 * 1024 * 1024;
            break;
        case 't':
        case 'T':
            mul = 1024.0 * 1024 * 1024 * 1024;
            break;
        default:
            break;
        }
        if (mul > 1) end++;
        if (mul > 1 && *end == 'i') end++;
        if (*end == 'b' || *end == 'B') end++;
    }
    if (errno || end == s || *end != '\0' || !(v >= 0) || v * mul > 9.0e18) {
        fprintf(stderr, "tokenloom %s: %s: '%s' is not a byte size (e.g. 512M, 2G)\n", cmd, flag,
                s);
        return -1;
    }
    *out = (int64_t)(v * mul);
    return 0;
}

// A KV element type name: ours, llama.cpp's (f16, f32, q8_0) and vLLM's "auto" (= f16).
static int parse_kv_type(const char *cmd, const char *flag, const char *s, enum tl_kv_type *out)
{
    if (!strcasecmp(s, "f16") || !strcasecmp(s, "auto"))
        *out = TL_KV_F16;
    else if (!strcasecmp(s, "f32"))
        *out = TL_KV_F32;
    else if (!strcasecmp(s, "q8_0"))
        *out = TL_KV_Q8_0;
    else {
        fprintf(stderr, "tokenloom %s: %s: '%s' is not supported (f16, f32 or q8_0%s)\n", cmd, flag,
                s, !strncasecmp(s, "fp8", 3) ? "; q8_0 is the 8-bit KV type" : "");
        return -1;
    }
    return 0;
}

// --device auto|cpu|vulkan[:N]: cpu is the default; vulkan[:N] runs the steps on that device
// (tl_engine_create opens it and says what is missing); auto takes the first discrete or
// integrated GPU (never lavapipe) and otherwise stays on the CPU with an info line saying why.
static int device_flag(const char *cmd, const char *flag, const char *val,
                       struct tl_engine_config *c)
{
    static char picked[32];
    struct tl_device_spec spec;
    if (tl_device_spec_parse(val, &spec)) {
        fprintf(stderr,
                "tokenloom %s: %s: '%s' is not a device (auto, cpu, vulkan or vulkan:N; "
                "see tokenloom devices)\n",
                cmd, flag, val);
        return -1;
    }
    c->device = NULL;
    if (spec.kind == TL_DEVICE_CPU) return 1;
    if (spec.kind == TL_DEVICE_VULKAN) {
        if (!tl_gpu_vulkan_compiled()) {
            fprintf(stderr,
                    "tokenloom %s: %s %s: not supported: this tokenloom was built without "
                    "Vulkan (CPU only); use --device cpu\n",
                    cmd, flag, val);
            return -1;
        }
        c->device = val;
        return 1;
    }
    char why[512];
    int pick = tl_gpu_auto_pick(why, sizeof(why));
    if (pick >= 0) {
        snprintf(picked, sizeof(picked), "vulkan:%d", pick);
        c->device = picked;
        tl_log(TL_LOG_INFO, "%s: --device auto: running on %s", cmd, picked);
        return 1;
    }
    tl_log(TL_LOG_INFO, "%s: --device auto: running on the CPU: %s", cmd, why);
    return 1;
}

// -ctk and -ctv set one shared KV type; different values are refused.
static int kv_k_given = -1, kv_v_given = -1;

static int kv_half(const char *cmd, struct tl_engine_config *c, const char *flag, const char *val,
                   int *mine, int other)
{
    enum tl_kv_type t;
    if (parse_kv_type(cmd, flag, val, &t)) return -1;
    if (other >= 0 && other != (int)t) {
        fprintf(stderr,
                "tokenloom %s: %s: the K and V caches share one type here; give -ctk and -ctv "
                "the same value\n",
                cmd, flag);
        return -1;
    }
    *mine = (int)t;
    c->kv_type = t;
    return 1;
}

static void warn_threads(const char *cmd, long long n)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus > 0 && n > cpus)
        fprintf(stderr,
                "tokenloom %s: warning: %lld threads on %ld online CPUs; threads will share "
                "cores and run slower (0 = one per CPU)\n",
                cmd, n, cpus);
}

// The seed article's switches for what tokenloom always does: =true (or no value) is accepted,
// anything else is refused with the reason. Returns 1 (consumed), -1 (refused) or 0 (not one).
static int seed_switch(const char *cmd, const char *a)
{
    static const struct {
        const char *name, *why;
    } always[] = {
        {"--use_kv_cache", "the KV cache is always on"},
        {"--prefill_enabled", "prompts are always prefilled in chunks"},
    };
    for (size_t k = 0; k < sizeof(always) / sizeof(always[0]); k++) {
        size_t n = strlen(always[k].name);
        if (strncmp(a, always[k].name, n) || (a[n] && a[n] != '=')) continue;
        if (!a[n] || !strcasecmp(a + n + 1, "true") || !strcmp(a + n + 1, "1")) return 1;
        fprintf(stderr, "tokenloom %s: %s: cannot be turned off (%s)\n", cmd, a, always[k].why);
        return -1;
    }
    static const char *const padding[] = {"--enable_padding", "--pad_token_id"};
    for (size_t k = 0; k < 2; k++) {
        size_t n = strlen(padding[k]);
        if (strncmp(a, padding[k], n) || (a[n] && a[n] != '=')) continue;
        fprintf(stderr,
                "tokenloom %s: %s: not supported: batches are flat (each sequence's tokens "
                "side by side) and never padded\n",
                cmd, padding[k]);
        return -1;
    }
    return 0;
}

int tl_cli_engine_flag(const char *cmd, struct tl_engine_config *c, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    const char *val = NULL;
    long long v;
    int64_t b;
    int m;
    if (!strcmp(a, "--no-prefix-cache") || !strcmp(a, "--no-prefix-caching") ||
        !strcmp(a, "--no-enable-prefix-caching")) {
        c->prefix_caching = false;
        return 1;
    }
    if ((m = seed_switch(cmd, a)) != 0) return m;
    if ((m = tl_cli_flag(cmd, max_batch_names, argc, argv, i, &val)) != 0) {
        if (m < 0 || tl_cli_int(cmd, a, val, 1, 1 << 16, &v)) return -1;
        c->max_batch_size = (int32_t)v;
        return 1;
    }
    if ((m = tl_cli_flag(cmd, step_names, argc, argv, i, &val)) != 0) {
        if (m < 0 || tl_cli_int(cmd, a, val, 1, 1 << 20, &v)) return -1;
        c->max_tokens_per_step = (int32_t)v;
        return 1;
    }
    if ((m = tl_cli_flag(cmd, prefill_decoding_names, argc, argv, i, &val)) != 0) {
        if (m < 0 || tl_cli_int(cmd, a, val, 1, 1 << 20, &v)) return -1;
        c->max_prefill_tokens_decoding = (int32_t)v;
        return 1;
    }
    if ((m = tl_cli_flag(cmd, prefill_backlog_names, argc, argv, i, &val)) != 0) {
        if (m < 0 || tl_cli_int(cmd, a, val, 0, 1 << 30, &v)) return -1;
        c->prefill_backlog_tokens = v ? (int32_t)v : -1; // 0 = never
        return 1;
    }
    if ((m = tl_cli_flag(cmd, prefill_per_decode_names, argc, argv, i, &val)) != 0) {
        if (m < 0 || tl_cli_int(cmd, a, val, 0, 1 << 20, &v)) return -1;
        c->prefill_tokens_per_decode = v ? (int32_t)v : -1; // 0 = the fixed cap only
        return 1;
    }
    if ((m = tl_cli_flag(cmd, seq_len_names, argc, argv, i, &val)) != 0) {
        if (m < 0 || tl_cli_int(cmd, a, val, 0, 1 << 24, &v)) return -1;
        c->max_seq_len = (int32_t)v;
        return 1;
    }
    if ((m = tl_cli_flag(cmd, block_names, argc, argv, i, &val)) != 0) {
        if (m < 0 || tl_cli_int(cmd, a, val, 1, 4096, &v)) return -1;
        c->kv_block_size = (int32_t)v;
        return 1;
    }
    if ((m = tl_cli_flag(cmd, NAMES("--kv-blocks"), argc, argv, i, &val)) != 0) {
        if (m < 0 || tl_cli_int(cmd, a, val, 0, INT32_MAX, &v)) return -1;
        c->kv_blocks = v;
        return 1;
    }
    if ((m = tl_cli_flag(cmd, NAMES("--kv-bytes"), argc, argv, i, &val)) != 0) {
        if (m < 0 || parse_bytes(cmd, a, val, &b)) return -1;
        c->kv_bytes = b;
        return 1;
    }
    if ((m = tl_cli_flag(cmd, kv_type_names, argc, argv, i, &val)) != 0) {
        if (m < 0 || parse_kv_type(cmd, a, val, &c->kv_type)) return -1;
        return 1;
    }
    if ((m = tl_cli_flag(cmd, kv_k_names, argc, argv, i, &val)) != 0)
        return m < 0 ? -1 : kv_half(cmd, c, a, val, &kv_k_given, kv_v_given);
    if ((m = tl_cli_flag(cmd, kv_v_names, argc, argv, i, &val)) != 0)
        return m < 0 ? -1 : kv_half(cmd, c, a, val, &kv_v_given, kv_k_given);
    if ((m = tl_cli_flag(cmd, thread_names, argc, argv, i, &val)) != 0) {
        if (m < 0 || tl_cli_int(cmd, a, val, 0, 1024, &v)) return -1;
        warn_threads(cmd, v);
        c->n_threads = (int32_t)v;
        return 1;
    }
    if ((m = tl_cli_flag(cmd, NAMES("--device"), argc, argv, i, &val)) != 0)
        return m < 0 ? -1 : device_flag(cmd, "--device", val, c);
    if ((m = tl_cli_flag(cmd, NAMES("--gpu-memory-utilization"), argc, argv, i, &val)) != 0) {
        if (m > 0)
            fprintf(stderr,
                    "tokenloom %s: --gpu-memory-utilization: not supported; size the KV cache "
                    "(on the CPU, or in device memory with --device vulkan) with --kv-bytes "
                    "SIZE or --kv-blocks N\n",
                    cmd);
        return -1;
    }
    if ((m = tl_cli_flag(cmd, gpu_layer_names, argc, argv, i, &val)) != 0) {
        if (m < 0 || tl_cli_int(cmd, a, val, 0, INT32_MAX, &v)) return -1;
        if (v == 0) return 1; // nothing offloaded: what tokenloom does anyway
        fprintf(stderr,
                "tokenloom %s: %s %lld: tokenloom does not split a model between the CPU and "
                "a GPU; run every layer on the GPU with --device vulkan[:N], or drop the flag "
                "(or give 0)\n",
                cmd, a, v);
        return -1;
    }
    return 0;
}

void tl_cli_engine_flags_help(FILE *f)
{
    fprintf(f,
            "engine flags (vLLM / llama.cpp spellings in brackets are aliases):\n"
            "  --max-batch-size N       most sequences running at once (default 64)\n"
            "                           [--max-num-seqs, -np, --parallel; the seed's\n"
            "                           --batch_size, --max_batch_size]\n"
            "  --max-tokens-per-step N  token budget per step, decodes + prefill chunks\n"
            "                           (default 512) [--max-num-batched-tokens, -b, "
            "--batch-size]\n"
            "                           note: --batch-size (llama.cpp) is tokens per step;\n"
            "                           --batch_size (the seed article) is sequences at once\n"
            "  --max-prefill-tokens-decoding N  prefill tokens at most in a step that also\n"
            "                           decodes: short steps keep inter-token latency and the\n"
            "                           wait of new arrivals low (default 160)\n"
            "  --prefill-tokens-per-decode N  ... but at least N per sequence the step decodes\n"
            "                           (default 7: a full batch of 64 is not capped; 0 = the\n"
            "                           fixed cap only)\n"
            "  --prefill-backlog-tokens N  with more than N prompt tokens waiting, a step gives\n"
            "                           prefill the whole budget anyway (drains bursts\n"
            "                           faster; 0 = never, the default)\n"
            "  --max-seq-len N          prompt + generated tokens per sequence (default: model\n"
            "                           context) [--max-model-len, -c, --ctx-size,\n"
            "                           --max_seq_length]\n"
            "  --use_kv_cache=true, --prefill_enabled=true  accepted: always so here; =false,\n"
            "                           --enable_padding and --pad_token_id are refused (batches\n"
            "                           are flat and never padded)\n"
            "  --kv-block-size N        positions per KV block (default 16) [--block-size]\n"
            "  --kv-blocks N            KV pool size in blocks\n"
            "  --kv-bytes SIZE          KV pool size in bytes (K/M/G suffixes); default: what\n"
            "                           max-batch-size full sequences need, at most 1/4 of RAM\n"
            "  --kv-type f16|f32|q8_0   KV cache element type (default f16); q8_0: 8-bit\n"
            "                           blocks of 32 with a scale, 0.53x the memory of f16\n"
            "                           (needs a head_dim that is a multiple of 32)\n"
            "                           [--kv-cache-dtype (auto = f16), -ctk/-ctv,\n"
            "                           --cache-type-k/--cache-type-v (K and V must agree)]\n"
            "  --no-prefix-cache        do not reuse computed prompt blocks across requests\n"
            "                           [--no-enable-prefix-caching]\n"
            "  -t, --threads N          compute threads (default: online CPUs)\n"
            "  --device auto|cpu|vulkan[:N]  where the engine runs (default cpu); vulkan:N runs\n"
            "                           every step on that Vulkan device (llama/qwen2 in\n"
            "                           F32/F16/BF16/Q8_0/Q4_K/Q5_K/Q6_K); auto takes a GPU,\n"
            "                           never lavapipe, else logs why it runs on the CPU\n"
            "                           (tokenloom devices lists the devices)\n"
            "  --gpu-memory-utilization and -ngl/--n-gpu-layers above 0 are refused (use\n"
            "                           --kv-bytes and --device)\n");
}
