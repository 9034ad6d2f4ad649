/*
 * tokenloom bench: flag parsing for the streaming load generator (src/loadgen/bench.h), which
 * reports request and token throughput and TTFT / TPOT / ITL / end-to-end latency percentiles
 * as vLLM's benchmark_serving defines them.
 */
#include "cli/cli.h"
#include "loadgen/bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: tokenloom bench [--url URL] [--concurrency C | --rate R] [options]\n"
               "\n"
               "  --url URL            server to load (default http://127.0.0.1:8000)\n"
               "  --concurrency C      requests in flight at most (default 1; with --rate, a cap;\n"
               "                       0 = no cap)\n"
               "  --rate R             Poisson arrivals at R requests/s (default: all at once)\n"
               "  --requests N         requests to send (default 100)\n"
               "  --prompt-len DIST    prompt tokens: N, LO-HI (uniform) or exp:MEAN (default 32)\n"
               "  --output-len DIST    generated tokens, same forms (default 64)\n"
               "  --seed S             seed for lengths, prompts and arrivals (default 1)\n"
               "  --chat               use /v1/chat/completions (word prompts)\n"
               "  --api-key KEY        send 'Authorization: Bearer KEY' ($TOKENLOOM_API_KEY)\n"
               "  --timeout S          per-request timeout in seconds (default 600)\n"
               "  --json               print one JSON object instead of the table\n");
}

static int num(const char *name, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "tokenloom bench: %s: '%s' is not a number in [%g, %g]\n", name, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int tl_cmd_bench(int argc, char **argv)
{
    struct tl_bench_config c;
    tl_bench_config_default(&c);
    const char *env_key = getenv("TOKENLOOM_API_KEY");
    if (env_key && *env_key) c.api_key = env_key;
    bool json = false, concurrency_set = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = NULL;
        const char *eq = strchr(a, '=');
        char name[64];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--json")) {
            json = true;
            continue;
        }
        if (!strcmp(a, "--chat")) {
            c.chat = true;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            fprintf(stderr, "tokenloom bench: unexpected argument '%s'\n", a);
            return 2;
        }
        if (eq) {
            snprintf(name, sizeof(name), "%.*s", (int)(eq - a), a);
            v = eq + 1;
        } else {
            snprintf(name, sizeof(name), "%s", a);
            if (i + 1 >= argc) {
                fprintf(stderr, "tokenloom bench: %s needs a value\n", a);
                return 2;
            }
            v = argv[++i];
        }
        double d;
        if (!strcmp(name, "--url")) {
            c.url = v;
        } else if (!strcmp(name, "--concurrency")) {
            if (num(name, v, 0, 100000, &d)) return 2;
            c.concurrency = (int)d;
            concurrency_set = true;
        } else if (!strcmp(name, "--rate")) {
            if (num(name, v, 0, 1e6, &d)) return 2;
            c.rate = d;
        } else if (!strcmp(name, "--requests")) {
            if (num(name, v, 1, 1e8, &d)) return 2;
            c.n_requests = (int64_t)d;
        } else if (!strcmp(name, "--prompt-len") || !strcmp(name, "--output-len")) {
            struct tl_bench_dist *dist = name[2] == 'p' ? &c.prompt_len : &c.output_len;
            if (!tl_bench_dist_parse(v, dist)) {
                fprintf(stderr, "tokenloom bench: %s: '%s' is not N, LO-HI or exp:MEAN\n", name, v);
                return 2;
            }
        } else if (!strcmp(name, "--seed")) {
            if (num(name, v, 0, 1.8e19, &d)) return 2;
            c.seed = (uint64_t)d;
        } else if (!strcmp(name, "--api-key")) {
            c.api_key = v;
        } else if (!strcmp(name, "--timeout")) {
            if (num(name, v, 0.001, 86400, &d)) return 2;
            c.timeout_s = d;
        } else {
            fprintf(stderr, "tokenloom bench: unknown option '%s'\n", name);
            usage(stderr);
            return 2;
        }
    }
    if (c.rate > 0 && !concurrency_set) c.concurrency = 0; // a rate alone: no cap
    if (c.rate <= 0 && c.concurrency <= 0) {
        fprintf(stderr, "tokenloom bench: --concurrency 0 needs a --rate\n");
        return 2;
    }
    struct tl_bench_result r;
    tl_status st = tl_bench_run(&c, &r);
    if (st) {
        fprintf(stderr, "tokenloom bench: %s\n", tl_last_error());
        return 1;
    }
    tl_bench_print(&c, &r, json, stdout);
    return r.n_failed ? 1 : 0;
}
