/*
 * The load generator behind `tokenloom bench`: streams completions from a running server with
 * Poisson arrivals at a request rate or a fixed number of requests in flight, prompt and output
 * lengths drawn from distributions, and reports throughput and latency percentiles with vLLM's
 * benchmark_serving definitions (TTFT: send to first streamed token; ITL: gaps between
 * consecutive token chunks; TPOT: (latency - TTFT) / (output tokens - 1); E2E: send to end).
 *
 * The statistics helpers are pure and tested on their own. tl_bench_run owns one libevent loop
 * on the calling thread.
 */
#ifndef TL_LOADGEN_BENCH_H
#define TL_LOADGEN_BENCH_H

#include <tokenloom.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

// A length distribution: "N" (always N), "LO-HI" (uniform integers), "exp:MEAN" (exponential,
// rounded, at least 1).
struct tl_bench_dist {
    enum { TL_DIST_FIXED, TL_DIST_UNIFORM, TL_DIST_EXP } kind;
    double a, b; // fixed: a; uniform: [a, b]; exp: mean a
};
bool tl_bench_dist_parse(const char *s, struct tl_bench_dist *out);
// A draw (>= 1) using the xorshift state *rng.
int64_t tl_bench_dist_draw(const struct tl_bench_dist *d, uint64_t *rng);

// Uniform double in [0, 1) from a xorshift64* state (never 0 state).
double tl_bench_uniform(uint64_t *rng);
// Exponential with the given mean (Poisson inter-arrival times).
double tl_bench_exp(uint64_t *rng, double mean);

// The p-th percentile (0..100) of v[0..n) with linear interpolation between closest ranks
// (numpy's default, as vLLM reports). Sorts v in place. NAN when n == 0.
double tl_bench_percentile(double *v, int64_t n, double p);

struct tl_bench_config {
    const char *url; // "http://host:port"
    int concurrency; // requests in flight at most (0 = unlimited with a rate)
    double rate;     // requests per second, Poisson; 0 = send as concurrency allows
    int64_t n_requests;
    struct tl_bench_dist prompt_len, output_len;
    uint64_t seed;
    const char *api_key; // NULL = none
    bool chat;           // use /v1/chat/completions instead of /v1/completions
    double timeout_s;    // per request
};
void tl_bench_config_default(struct tl_bench_config *c);

struct tl_bench_result {
    int64_t n_ok, n_failed;
    double duration_s;
    int64_t prompt_tokens, output_tokens;
    double req_per_s, out_tok_per_s, total_tok_per_s;
    // seconds: mean, p50, p90, p99
    double ttft[4], tpot[4], itl[4], e2e[4];
    char first_error[256];
};

// Runs the benchmark (blocking). TL_ERR_IO when the server cannot be reached at all.
tl_status tl_bench_run(const struct tl_bench_config *c, struct tl_bench_result *out) TL_WARN_UNUSED;
// Prints the result as a table (milliseconds), or as one JSON object when json is set.
void tl_bench_print(const struct tl_bench_config *c, const struct tl_bench_result *r, bool json,
                    FILE *f);

#endif
