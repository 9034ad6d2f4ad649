/*
 * Server metrics in the Prometheus text exposition format (version 0.0.4), names prefixed
 * "tokenloom:" (docs/server.md lists them). Latency histograms are observed by the server's
 * event loop as requests finish; engine counters and gauges come from a tl_engine_stats
 * snapshot taken at scrape time.
 *
 * Thread model: a tl_metrics belongs to the event-loop thread (observe and render there); no
 * locks.
 */
#ifndef TL_SERVER_METRICS_H
#define TL_SERVER_METRICS_H

#include <tokenloom.h>

#include "core/strbuf.h"

#include <stdint.h>

#define TL_HIST_MAX_BUCKETS 24

struct tl_hist {
    int n_le;                           // finite bucket bounds
    double le[TL_HIST_MAX_BUCKETS];     // upper bounds, increasing (seconds or tokens)
    int64_t count[TL_HIST_MAX_BUCKETS]; // observations <= le[i] and > le[i-1] (not cumulative)
    int64_t n_inf;                      // observations above the last bound
    double sum;
    int64_t n;
};

// Sets the bucket bounds (n_le <= TL_HIST_MAX_BUCKETS, increasing) and clears the counts.
void tl_hist_init(struct tl_hist *h, const double *le, int n_le);
void tl_hist_observe(struct tl_hist *h, double v);

// HTTP status codes counted by /metrics (others are counted as "other").
#define TL_METRICS_N_CODES 10

struct tl_metrics {
    struct tl_hist ttft;       // seconds, submission to first token
    struct tl_hist itl;        // seconds between consecutive tokens of one choice
    struct tl_hist e2e;        // seconds, submission to done
    struct tl_hist queue;      // seconds, submission to first scheduled
    struct tl_hist prompt_len; // prompt tokens per engine request
    struct tl_hist output_len; // generated tokens per engine request
    int64_t http_by_code[TL_METRICS_N_CODES + 1]; // see tl_metrics_code_index
    int64_t client_disconnects; // requests cancelled because their client went away
};

void tl_metrics_init(struct tl_metrics *m);
// Counts one HTTP response with this status.
void tl_metrics_count_http(struct tl_metrics *m, int status);
// Observes one finished engine request (times from its DONE event, in microseconds).
void tl_metrics_observe_done(struct tl_metrics *m, int64_t queue_us, int64_t ttft_us,
                             int64_t total_us, int64_t n_prompt, int64_t n_generated);
// Adds every histogram and counter of src into dst (both set up by tl_metrics_init): another
// front's observations (gRPC) merged into a copy of the server's at scrape time.
void tl_metrics_add(struct tl_metrics *dst, const struct tl_metrics *src);

// Appends the whole exposition text. es may be NULL (engine still loading): engine metrics
// are then reported as zero.
void tl_metrics_render(const struct tl_metrics *m, const struct tl_engine_stats *es,
                       struct tl_sb *out);

#endif
