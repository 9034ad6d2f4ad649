/*
 * Structured-output benchmark.
 *
 * 1. Compile time per grammar (best of 20 tl_grammar_compile calls, no LRU).
 * 2. Mask time per token on a real vocabulary (default llama-2-tiny-random: 32000 tokens):
 *    random walks (seeded) through each grammar pick an allowed token at every step; every
 *    tl_gmatcher_fill_mask call is timed. Reported: p50 / p99 / max over all steps of the
 *    first walk (cold cache: entries computed on first use) and of the later walks (warm: the
 *    cache holds what earlier requests computed, as in a server); the same for the calling
 *    thread's CPU time (wall time on a loaded machine includes preemptions).
 * 3. End to end (with -e MODEL, e.g. a 110M Q8_0 from `tokenloom mkmodel`): aggregate tok/s of
 *    32 concurrent requests with a json_schema vs 32 unconstrained ones, same prompts and
 *    max_tokens (both sampled at temperature 1; the constrained ones may stop earlier, so the
 *    rate is generated tokens per second).
 *
 * Usage: bench_grammar [-v VOCAB_MODEL] [-e E2E_MODEL] [--walks N] [--steps N] [--threads N]
 *                      [--only NAME-SUBSTRING]
 */
#include "core/hash.h"
#include "grammar/grammar.h"

#include "bench_common.h"

#include <tokenloom.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    enum tl_grammar_kind kind;
    const char *src; // NULL: read from file
    const char *file;
} GRAMMARS[] = {
    {"json.gbnf", TL_GRAMMAR_GBNF, NULL, "grammars/json.gbnf"},
    {"c.gbnf", TL_GRAMMAR_GBNF, NULL, "grammars/c.gbnf"},
    {"json_object", TL_GRAMMAR_JSON_OBJECT, NULL, NULL},
    {"schema person", TL_GRAMMAR_JSON_SCHEMA,
     "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":20},"
     "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},\"email\":{\"type\":"
     "\"string\",\"format\":\"email\"}},\"required\":[\"name\",\"age\"]}",
     NULL},
    {"schema nested", TL_GRAMMAR_JSON_SCHEMA,
     "{\"$defs\":{\"item\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},"
     "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},\"price\":{\"type\":"
     "\"number\",\"minimum\":0},\"kind\":{\"enum\":[\"a\",\"b\",\"c\"]},\"sub\":{\"$ref\":\"#/"
     "$defs/item\"}},\"required\":[\"id\",\"kind\"]}},\"type\":\"object\",\"properties\":{"
     "\"items\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/item\"}},\"total\":{\"type\":"
     "\"number\"},\"when\":{\"type\":\"string\",\"format\":\"date-time\"}},\"required\":["
     "\"items\"]}",
     NULL},
    {"schema strings", TL_GRAMMAR_JSON_SCHEMA,
     "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"pattern\":\"^[a-z ]+$\"},"
     "\"maxItems\":50}",
     NULL},
};
#define N_GRAMMARS (sizeof(GRAMMARS) / sizeof(GRAMMARS[0]))

static char *grammar_source(size_t i, size_t *len)
{
    if (GRAMMARS[i].src) {
        *len = strlen(GRAMMARS[i].src);
        return strdup(GRAMMARS[i].src);
    }
    if (!GRAMMARS[i].file) {
        *len = 0;
        return NULL;
    }
    char path[512];
    const char *shared = getenv("TL_SHARED");
    snprintf(path, sizeof(path), "%s/%s", shared ? shared : "../shared", GRAMMARS[i].file);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(1);
    }
    char *buf = malloc(1 << 20);
    *len = fread(buf, 1, (1 << 20) - 1, f);
    buf[*len] = 0;
    fclose(f);
    return buf;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(double *v, int n, double p)
{
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    int k = (int)(p * (n - 1) + 0.5);
    return v[k];
}

static const tl_model *vocab_model;

static int model_bytes(void *ctx, int32_t id, char *buf, int cap)
{
    (void)ctx;
    size_t n = tl_model_token_text(vocab_model, id, buf, (size_t)cap);
    return n == 0 || n > (size_t)cap ? -1 : (int)n;
}

static bool model_eog(void *ctx, int32_t id)
{
    (void)ctx;
    struct tl_model_info info;
    tl_model_get_info(vocab_model, &info);
    return id == info.eos || id == info.eot;
}

static void bench_masks(const tl_model *m, int walks, int steps, const char *only)
{
    vocab_model = m;
    struct tl_model_info info;
    tl_model_get_info(m, &info);
    double t0 = now_s();
    struct tl_gvocab *v = tl_gvocab_create(info.n_vocab, model_bytes, model_eog, NULL);
    printf("vocabulary trie: %d tokens, built in %.1f ms\n\n", info.n_vocab, (now_s() - t0) * 1e3);
    size_t words = ((size_t)info.n_vocab + 63) / 64;
    uint64_t *mask = malloc(words * 8);
    int32_t *allowed = malloc((size_t)info.n_vocab * sizeof(int32_t));
    double *cold = malloc((size_t)steps * sizeof(double));
    double *warm = malloc((size_t)steps * (size_t)walks * sizeof(double));
    double *cold_cpu = malloc((size_t)steps * sizeof(double));
    double *warm_cpu = malloc((size_t)steps * (size_t)walks * sizeof(double));
    printf("| grammar | compile ms | cold p50 / p99 / max us | warm p50 / p99 / max us | "
           "CPU cold p99 / warm p50 / p99 / max us | steps |\n"
           "| --- | --- | --- | --- | --- | --- |\n");
    for (size_t gi = 0; gi < N_GRAMMARS; gi++) {
        if (only && !strstr(GRAMMARS[gi].name, only)) continue;
        size_t len;
        char *src = grammar_source(gi, &len);
        double best = 1e9;
        struct tl_grammar *g = NULL;
        for (int k = 0; k < 20; k++) {
            struct tl_grammar *x;
            double c0 = now_s();
            if (tl_grammar_compile(GRAMMARS[gi].kind, src, len, &x)) {
                fprintf(stderr, "%s: %s\n", GRAMMARS[gi].name, tl_last_error());
                exit(1);
            }
            double dt = now_s() - c0;
            if (dt < best) best = dt;
            if (!g)
                g = x;
            else
                tl_grammar_unref(x);
        }
        int n_cold = 0, n_warm = 0;
        uint64_t seed = 12345 + gi;
        for (int w = 0; w < walks; w++) {
            struct tl_gmatcher *mt = tl_gmatcher_create(g);
            for (int s = 0; s < steps; s++) {
                double c0 = now_s(), u0 = thread_cpu_s();
                tl_gmatcher_fill_mask(mt, v, mask);
                double dt = now_s() - c0, du = thread_cpu_s() - u0;
                if (w == 0) {
                    cold_cpu[n_cold] = du;
                    cold[n_cold++] = dt;
                } else {
                    warm_cpu[n_warm] = du;
                    warm[n_warm++] = dt;
                }
                int na = 0;
                for (int32_t t = 0; t < info.n_vocab; t++)
                    if ((mask[t >> 6] >> (t & 63)) & 1) allowed[na++] = t;
                if (!na) break;
                int32_t t = allowed[tl_xorshift64s(&seed) % (uint64_t)na];
                if (model_eog(NULL, t)) break;
                tl_gmatcher_accept_token(mt, v, t);
            }
            tl_gmatcher_destroy(mt);
        }
        double c50 = pct(cold, n_cold, 0.5) * 1e6, c99 = pct(cold, n_cold, 0.99) * 1e6,
               cmax = pct(cold, n_cold, 1.0) * 1e6;
        double w50 = pct(warm, n_warm, 0.5) * 1e6, w99 = pct(warm, n_warm, 0.99) * 1e6,
               wmax = pct(warm, n_warm, 1.0) * 1e6;
        double uc99 = pct(cold_cpu, n_cold, 0.99) * 1e6, u50 = pct(warm_cpu, n_warm, 0.5) * 1e6,
               u99 = pct(warm_cpu, n_warm, 0.99) * 1e6, umax = pct(warm_cpu, n_warm, 1.0) * 1e6;
        printf("| %s | %.2f | %.0f / %.0f / %.0f | %.0f / %.0f / %.0f | %.0f / %.0f / %.0f / %.0f "
               "| %d + %d |\n",
               GRAMMARS[gi].name, best * 1e3, c50, c99, cmax, w50, w99, wmax, uc99, u50, u99, umax,
               n_cold, n_warm);
        fflush(stdout);
        tl_grammar_unref(g);
        free(src);
    }
    tl_gvocab_destroy(v);
    free(mask);
    free(allowed);
    free(cold);
    free(warm);
    free(cold_cpu);
    free(warm_cpu);
}

// ---- end to end -----------------------------------------------------------------------------

struct e2e_run {
    int64_t n_tokens;
    int done;
};

static void e2e_event(void *user, const struct tl_event *ev)
{
    struct e2e_run *r = user;
    if (ev->type == TL_EVENT_TOKEN) r->n_tokens++;
    if (ev->type == TL_EVENT_DONE) r->done = 1;
}

static double process_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double last_cpu_per_token; // process CPU seconds per generated token, last e2e_rate run

static double e2e_rate(tl_engine *e, struct tl_grammar *g, int n_req, int max_tokens,
                       int64_t *tokens)
{
    struct e2e_run *runs = calloc((size_t)n_req, sizeof(*runs));
    double t0 = now_s(), c0 = process_cpu_s();
    for (int i = 0; i < n_req; i++) {
        struct tl_request q;
        tl_request_default(&q);
        char prompt[64];
        snprintf(prompt, sizeof(prompt), "Item %d of the catalogue, as JSON:", i);
        q.prompt = prompt;
        q.max_tokens = max_tokens;
        q.sampling.temperature = 1.0f;
        q.sampling.seed = (uint64_t)i + 1;
        q.grammar = g;
        q.on_event = e2e_event;
        q.user = &runs[i];
        uint64_t id;
        if (tl_engine_submit(e, &q, &id)) {
            fprintf(stderr, "submit: %s\n", tl_last_error());
            exit(1);
        }
    }
    int64_t n = 1;
    while (n > 0)
        if (tl_engine_step(e, &n)) exit(1);
    double dt = now_s() - t0, dc = process_cpu_s() - c0;
    *tokens = 0;
    for (int i = 0; i < n_req; i++)
        *tokens += runs[i].n_tokens;
    last_cpu_per_token = *tokens ? dc / (double)*tokens : 0;
    free(runs);
    return (double)*tokens / dt;
}

static void bench_e2e(const char *path, int threads)
{
    tl_model *m;
    if (tl_model_load(path, NULL, &m)) {
        fprintf(stderr, "load %s: %s\n", path, tl_last_error());
        exit(1);
    }
    struct tl_engine_config c;
    tl_engine_config_default(&c);
    c.n_threads = threads;
    c.max_seq_len = 512;
    tl_engine *e;
    if (tl_engine_create(m, &c, &e)) {
        fprintf(stderr, "engine: %s\n", tl_last_error());
        exit(1);
    }
    // "schema nested" may finish early (fewer running sequences: a lower rate that is not the
    // mask's cost); "long array" cannot end before max_tokens, so its batch stays full and the
    // ratio is the constraint's cost alone.
    static const char *const long_array =
        "{\"type\":\"array\",\"minItems\":500,\"items\":{\"type\":\"object\",\"properties\":"
        "{\"id\":{\"type\":\"integer\"},\"name\":{\"type\":\"string\",\"maxLength\":12}},"
        "\"required\":[\"id\",\"name\"]}}";
    const char *schemas[2] = {GRAMMARS[4].src, long_array};
    const char *names[2] = {"schema nested", "long array"};
    struct tl_grammar *g[2];
    for (int i = 0; i < 2; i++)
        if (tl_grammar_get(TL_GRAMMAR_JSON_SCHEMA, schemas[i], strlen(schemas[i]), &g[i])) exit(1);
    int64_t tok_u, tok_c[2];
    e2e_rate(e, NULL, 4, 8, &tok_u); // warm-up (and the vocabulary trie)
    for (int i = 0; i < 2; i++)
        e2e_rate(e, g[i], 4, 8, &tok_c[i]);
    printf("\nend to end, %s, 32 concurrent requests, max_tokens 128 (best of 3, rounds "
           "alternate):\n",
           path);
    double best_u = 0, best_c[2] = {0, 0}, cpu_u = 1e9, cpu_c[2] = {1e9, 1e9};
    int64_t n_c[2] = {0, 0};
    for (int k = 0; k < 3; k++) {
        double u = e2e_rate(e, NULL, 32, 128, &tok_u);
        if (u > best_u) best_u = u;
        if (last_cpu_per_token < cpu_u) cpu_u = last_cpu_per_token;
        printf("  round %d: unconstrained %.1f tok/s (%lld tokens, %.2f CPU ms/token)", k, u,
               (long long)tok_u, last_cpu_per_token * 1e3);
        for (int i = 0; i < 2; i++) {
            double cc = e2e_rate(e, g[i], 32, 128, &tok_c[i]);
            if (cc > best_c[i]) best_c[i] = cc;
            if (last_cpu_per_token < cpu_c[i]) cpu_c[i] = last_cpu_per_token;
            n_c[i] = tok_c[i];
            printf(", %s %.1f tok/s (%lld tokens, %.2f CPU ms/token)", names[i], cc,
                   (long long)tok_c[i], last_cpu_per_token * 1e3);
        }
        printf("\n");
    }
    printf("| requests | unconstrained tok/s | constrained | tokens | tok/s | ratio | CPU ms/token "
           "unconstrained / constrained |\n| --- | --- | --- | --- | --- | --- | --- |\n");
    for (int i = 0; i < 2; i++)
        printf("| 32 | %.1f | %s | %lld | %.1f | %.2f | %.2f / %.2f |\n", best_u, names[i],
               (long long)n_c[i], best_c[i], best_c[i] / best_u, cpu_u * 1e3, cpu_c[i] * 1e3);
    for (int i = 0; i < 2; i++)
        tl_grammar_unref(g[i]);
    tl_engine_destroy(e);
    tl_model_destroy(m);
}

int main(int argc, char **argv)
{
    const char *vocab_path = "../shared/models/llama-2-tiny-random.gguf", *e2e_path = NULL;
    const char *only = NULL;
    int walks = 5, steps = 100, threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-v") && v)
            vocab_path = argv[++i];
        else if (!strcmp(a, "-e") && v)
            e2e_path = argv[++i];
        else if (!strcmp(a, "--walks") && v)
            walks = atoi(argv[++i]);
        else if (!strcmp(a, "--steps") && v)
            steps = atoi(argv[++i]);
        else if (!strcmp(a, "--threads") && v)
            threads = atoi(argv[++i]);
        else if (!strcmp(a, "--only") && v)
            only = argv[++i];
        else {
            fprintf(stderr, "usage: bench_grammar [-v VOCAB_MODEL] [-e E2E_MODEL] [--walks N] "
                            "[--steps N] [--threads N] [--only NAME]\n");
            return 2;
        }
    }
    if (walks < 2) walks = 2;
    tl_model *m;
    if (tl_model_load(vocab_path, NULL, &m)) {
        fprintf(stderr, "load %s: %s\n", vocab_path, tl_last_error());
        return 1;
    }
    bench_masks(m, walks, steps, only);
    tl_model_destroy(m);
    if (e2e_path) bench_e2e(e2e_path, threads);
    return 0;
}
