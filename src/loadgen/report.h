/*
 * The results of a `tokenloom bench` sweep (one run per concurrency level) written out for
 * people and programs: a JSON document, and a self-contained SVG (or HTML around the SVG)
 * report with throughput and TTFT / ITL / end-to-end latency percentiles against concurrency.
 * The report references nothing outside itself (no scripts, fonts or styles from anywhere),
 * so it opens offline.
 *
 * Pure output: the functions only write to the FILE they are given. Single-threaded.
 */
#ifndef TL_LOADGEN_REPORT_H
#define TL_LOADGEN_REPORT_H

#include "loadgen/bench.h"

#include <stdio.h>

struct tl_bench_level {
    struct tl_bench_config config; // the run's configuration (its concurrency is the level)
    struct tl_bench_result result;
};

struct tl_bench_sweep {
    const struct tl_bench_level *levels;
    int n_levels;
    const char *prompt_len, *output_len; // the distributions as given on the command line
    int64_t started_unix_s;
};

// One level as a flat JSON object (the fields `tokenloom bench --json` has always printed).
void tl_bench_write_level_json(const struct tl_bench_config *c, const struct tl_bench_result *r,
                               FILE *f);
// The whole sweep: {"tool", "url", "endpoint", ..., "levels": [level objects]}.
void tl_bench_write_json(const struct tl_bench_sweep *s, FILE *f);
// The report: an SVG document, or an HTML page holding it and a table when html is set.
void tl_bench_write_report(const struct tl_bench_sweep *s, bool html, FILE *f);

#endif
