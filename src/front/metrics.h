/*
 * Server metrics in the Prometheus text exposition format (version 0.0.4), names prefixed
 * "tokenloom:" (docs/server.md lists them), every series labelled model_name="<served id>".
 * Latency histograms are observed by the server's event loop as requests finish; engine
 * counters and gauges come from a tl_engine_stats snapshot taken at scrape time; utilization
 * gauges are rates over a recent window of samples of those counters, against the machine's
 * ceilings measured at start, handed in by the caller (front/machine.h).
 *
 * Thread model: a tl_metrics belongs to the event-loop thread (observe and render there); no
 * locks.
 */
#ifndef TL_FRONT_METRICS_H
#define TL_FRONT_METRICS_H

#include <tokenloom.h>

#include "core/strbuf.h"
#include "front/machine.h"

#include <stdbool.h>
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

// A queueing delay under this counts as "prompt" (tokenloom:request_queue_time_under_50ms_total).
#define TL_METRICS_QUEUE_FAST_US 50000

// The recent window the utilization gauges cover: samples of the engine's counters taken about
// once a second (tl_metrics_tick), the rates measured from the oldest sample at most
// TL_METRICS_WINDOW_S old up to the scrape.
#define TL_METRICS_WINDOW_S 10
#define TL_METRICS_WINDOW_SAMPLES (TL_METRICS_WINDOW_S + 2)

struct tl_metrics_sample {
    int64_t t_us; // tl_time_us() when taken
    double int8_ops, flops, bytes_read;
    int64_t step_us, steps, step_tokens, seqs, decode_tokens, decode_steps, prefill_tokens,
        prefill_steps;
    int64_t queue_n, queue_fast; // finished requests, of which queued under 50 ms
};

struct tl_metrics {
    struct tl_hist ttft;       // seconds, submission to first token
    struct tl_hist itl;        // seconds between consecutive tokens of one choice
    struct tl_hist e2e;        // seconds, submission to done
    struct tl_hist queue;      // seconds, submission to first scheduled
    struct tl_hist prompt_len; // prompt tokens per engine request
    struct tl_hist output_len; // generated tokens per engine request
    int64_t queue_fast;        // requests whose queueing delay was under 50 ms
    int64_t http_by_code[TL_METRICS_N_CODES + 1]; // see tl_metrics_code_index
    int64_t client_disconnects; // requests cancelled because their client went away

    // Facts of the loaded model (tl_metrics_set_model; before that, an empty model_name).
    char model_label[320]; // `model_name="..."`, value escaped for the exposition format
    char kv_type[8];       // "f16", "f32", "q8_0"
    char kernels_isa[16];  // build_info's isa label ("unknown" when not said)
    bool have_ceilings;    // false with --no-ceilings: the machine_* gauges and
    struct tl_machine_ceilings ceilings; // the utilization gauges are then absent

    struct tl_metrics_sample window[TL_METRICS_WINDOW_SAMPLES]; // ring
    int n_window, i_window; // samples held, index of the next to write
};

void tl_metrics_init(struct tl_metrics *m);
// Records the served model's id, the KV cache type and the machine (its kernel ISA and
// ceilings; NULL: ISA unknown, no ceilings).
void tl_metrics_set_model(struct tl_metrics *m, const char *model_name, const char *kv_type,
                          const struct tl_machine *machine);
// Counts one HTTP response with this status.
void tl_metrics_count_http(struct tl_metrics *m, int status);
// Observes one finished engine request (times from its DONE event, in microseconds).
void tl_metrics_observe_done(struct tl_metrics *m, int64_t queue_us, int64_t ttft_us,
                             int64_t total_us, int64_t n_prompt, int64_t n_generated);
// Adds src's histograms and request counters into dst (both set up by tl_metrics_init; the
// window and the model facts stay dst's): another front's observations (gRPC) merged into a
// copy of the server's (tl_srv_metrics_view).
void tl_metrics_add(struct tl_metrics *dst, const struct tl_metrics *src);

// The window: whether a new sample is due (a second after the last), and taking one.
bool tl_metrics_tick_due(const struct tl_metrics *m, int64_t now_us);
void tl_metrics_tick(struct tl_metrics *m, const struct tl_engine_stats *es, int64_t now_us);

// The recent window's rates, for /metrics' gauges and the stats page (C callers: server/stats.c).
// A ratio with no data (no ceilings, nothing finished) is -1.
struct tl_metrics_window {
    double seconds;             // span covered (0 until a sample is a moment old)
    double compute_utilization; // int8 ops / peak int8 + f32 FLOPs / peak f32, per second
    double memory_utilization;  // bytes read per second / read bandwidth ceiling
    double busy_ratio;          // time inside engine steps / wall time
    double int8_ops_per_s, flops_per_s, bytes_read_per_s;
    double steps_per_s;
    double tokens_per_step;         // mean over the window's steps (0 without steps)
    double seqs_per_step;           // sequences per step
    double decode_tokens_per_step;  // over steps that decoded
    double prefill_tokens_per_step; // over steps that prefilled
    double queue_under_50ms_ratio;  // of the requests finished in the window
};
void tl_metrics_window(const struct tl_metrics *m, const struct tl_engine_stats *es, int64_t now_us,
                       struct tl_metrics_window *out);

// Appends the whole exposition text. es may be NULL (engine still loading): engine metrics
// are then reported as zero. now_us: tl_time_us() (the window's end).
void tl_metrics_render(const struct tl_metrics *m, const struct tl_engine_stats *es, int64_t now_us,
                       struct tl_sb *out);

// process_* metrics as Prometheus client libraries name them (metrics_process.c): resident and
// virtual memory, CPU seconds, open and maximum file descriptors, start time; from /proc/self.
void tl_metrics_render_process(struct tl_sb *out);

#endif
