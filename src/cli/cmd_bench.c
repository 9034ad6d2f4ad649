/*
 * tokenloom bench: flag parsing for the streaming load generator (src/loadgen/bench.h), which
 * reports request and token throughput and TTFT / TPOT / ITL / end-to-end latency percentiles
 * as vLLM's benchmark_serving defines them. --concurrency takes a list to sweep (one run of
 * --requests per level, in the order given); the results go to stdout as tables or JSON, to a
 * JSON file (--json FILE) and to an SVG or HTML report (--report FILE, src/loadgen/report.c).
 * Single-threaded.
 */
#include "cli/cli.h"
#include "loadgen/bench.h"
#include "loadgen/report.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: tokenloom bench [--url URL] [--concurrency C | --rate R] [options]\n"
               "\n"
               "  --url URL            server to load (default http://127.0.0.1:8000)\n"
               "  --concurrency C      requests in flight at most (default 1; with --rate, a cap;\n"
               "                       0 = no cap); a list (1,4,16) runs one sweep level each\n"
               "  --rate R             Poisson arrivals at R requests/s (default: all at once)\n"
               "  --requests N         requests to send (default 100)\n"
               "  --prompt-len DIST    prompt tokens: N, LO-HI (uniform) or exp:MEAN (default 32)\n"
               "  --output-len DIST    generated tokens, same forms (default 64)\n"
               "  --seed S             seed for lengths, prompts and arrivals (default 1)\n"
               "  --chat               use /v1/chat/completions (word prompts)\n"
               "  --api-key KEY        send 'Authorization: Bearer KEY' ($TOKENLOOM_API_KEY)\n"
               "  --timeout S          per-request timeout in seconds (default 600)\n"
               "  --json [FILE]        without FILE: print one JSON object per level instead of\n"
               "                       the tables; with FILE: write the whole sweep there as one\n"
               "                       JSON document ('-' = stdout)\n"
               "  --report FILE        write a self-contained report: SVG, or HTML when FILE ends\n"
               "                       in .html (throughput and latency percentiles per level)\n");
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

enum { MAX_LEVELS = 64 };

// "C" or "C1,C2,...": each a whole number in [0, 100000]; at most MAX_LEVELS of them.
static int parse_levels(const char *s, int *out, int *n)
{
    int k = 0;
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (errno || end == p || !(v >= 0 && v <= 100000) || v != (double)(int)v ||
            (*end && *end != ',') || k >= MAX_LEVELS) {
            fprintf(stderr,
                    "tokenloom bench: --concurrency: '%s' is not a number in [0, 100000] or a "
                    "comma-separated list of at most %d of them\n",
                    s, MAX_LEVELS);
            return -1;
        }
        out[k++] = (int)v;
        if (!*end) break;
        p = end + 1;
    }
    *n = k;
    return 0;
}

static bool has_suffix(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcasecmp(s + a - b, suffix);
}

int tl_cmd_bench(int argc, char **argv)
{
    struct tl_bench_config c;
    tl_bench_config_default(&c);
    const char *env_key = getenv("TOKENLOOM_API_KEY");
    if (env_key && *env_key) c.api_key = env_key;
    bool json = false, concurrency_set = false;
    int levels[MAX_LEVELS] = {1}, n_levels = 1;
    const char *json_file = NULL, *report_file = NULL;
    const char *prompt_text = "32", *output_text = "64";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = NULL;
        const char *eq = strchr(a, '=');
        char name[64];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        // --json alone prints to stdout; a following word that is not a flag is its FILE.
        if (!strcmp(a, "--json") && (i + 1 >= argc || !strncmp(argv[i + 1], "--", 2))) {
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
            if (parse_levels(v, levels, &n_levels)) return 2;
            c.concurrency = levels[0];
            concurrency_set = true;
        } else if (!strcmp(name, "--json")) {
            json_file = v;
        } else if (!strcmp(name, "--report")) {
            report_file = v;
        } else if (!strcmp(name, "--prompt-len") || !strcmp(name, "--output-len")) {
            struct tl_bench_dist *dist = name[2] == 'p' ? &c.prompt_len : &c.output_len;
            if (!tl_bench_dist_parse(v, dist)) {
                fprintf(stderr, "tokenloom bench: %s: '%s' is not N, LO-HI or exp:MEAN\n", name, v);
                return 2;
            }
            *(name[2] == 'p' ? &prompt_text : &output_text) = v;
        } else if (!strcmp(name, "--rate")) {
            if (num(name, v, 0, 1e6, &d)) return 2;
            c.rate = d;
        } else if (!strcmp(name, "--requests")) {
            if (num(name, v, 1, 1e8, &d)) return 2;
            c.n_requests = (int64_t)d;
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
    if (c.rate > 0 && !concurrency_set) levels[0] = 0; // a rate alone: no cap
    for (int k = 0; k < n_levels; k++)
        if (c.rate <= 0 && levels[k] <= 0) {
            fprintf(stderr, "tokenloom bench: --concurrency 0 needs a --rate\n");
            return 2;
        }
    // The output files are opened before the (long) run, so a bad path fails at once.
    FILE *jf = NULL, *rf = NULL;
    if (json_file && !(jf = strcmp(json_file, "-") ? fopen(json_file, "w") : stdout)) {
        fprintf(stderr, "tokenloom bench: --json: cannot write %s: %s\n", json_file,
                strerror(errno));
        return 2;
    }
    if (report_file && !(rf = fopen(report_file, "w"))) {
        fprintf(stderr, "tokenloom bench: --report: cannot write %s: %s\n", report_file,
                strerror(errno));
        if (jf && jf != stdout) fclose(jf);
        return 2;
    }
    static struct tl_bench_level runs[MAX_LEVELS];
    struct tl_bench_sweep sweep = {.levels = runs,
                                   .prompt_len = prompt_text,
                                   .output_len = output_text,
                                   .started_unix_s = (int64_t)time(NULL)};
    int rc = 0;
    for (int k = 0; k < n_levels; k++) {
        runs[k].config = c;
        runs[k].config.concurrency = levels[k];
        // A new seed per level: a level must not find the previous level's prompts in the
        // server's prefix cache (that would flatter its TTFT).
        runs[k].config.seed = c.seed + (uint64_t)k;
        tl_status st = tl_bench_run(&runs[k].config, &runs[k].result);
        if (st) {
            fprintf(stderr, "tokenloom bench: %s\n", tl_last_error());
            rc = 1;
            break;
        }
        sweep.n_levels = k + 1;
        if (jf != stdout) tl_bench_print(&runs[k].config, &runs[k].result, json, stdout);
        fflush(stdout);
        if (runs[k].result.n_failed) rc = 1;
    }
    if (sweep.n_levels > 0) {
        if (jf) tl_bench_write_json(&sweep, jf);
        if (rf) tl_bench_write_report(&sweep, has_suffix(report_file, ".html"), rf);
    }
    if (jf && jf != stdout && fclose(jf) != 0) rc = 1;
    if (rf && fclose(rf) != 0) rc = 1;
    return rc;
}
