/*
 * GET /stats: a compact JSON snapshot for the dashboard page (see stats.h and docs/server.md).
 *
 * What it holds and where it comes from:
 *   - the model and the engine configuration (the resolved values: threads, kernel ISA, KV type,
 *     block size, blocks in the pool, batch limits, context);
 *   - counters and gauges from one tl_engine_stats snapshot (the same call /metrics makes, so a
 *     quiet server gives the same numbers on both endpoints);
 *   - latency histograms (TTFT, ITL, queue, end to end) from the server's own tl_metrics plus
 *     the gRPC front's (its add_latency hook, as /metrics),
 *     with their p50/p90/p99 since start estimated as Prometheus's histogram_quantile()
 *     does, and the raw bucket counts, so that the page can take differences between two polls
 *     and estimate the percentiles of the last seconds the same way (a Grafana panel does
 *     histogram_quantile over rate(); a ring of recent samples would have cost every token an
 *     extra store on the loop and given no more than the buckets resolve);
 *   - "utilization": the engine's busy time (inside steps, and inside the forward pass), as
 *     counters the page turns into a busy ratio, and metrics.c's 10 s window: compute and
 *     memory-bandwidth utilization against the measured ceilings, and the ceilings. Fields
 *     the server does not have (no ceilings, no window yet) are left out, never filled with
 *     placeholders;
 *   - counters of the batch composition (sequences, decode and prefill tokens over all steps)
 *     and of the work counted from the model's shapes (int8 ops, f32 FLOPs, bytes read).
 *
 * Cost: one stats snapshot (a mutex held for a struct copy), about 250 JSON values, one
 * serialisation: tens of microseconds on the loop, measured against a 32-client load by
 * bench/dashboard_cost.sh.
 *
 * Threads: the event-loop thread. The engine snapshot is taken through the backend's
 * thread-safe get_stats.
 */
#include "server/stats.h"

#include "core/clock.h"
#include "server/route_checks.h"

#include <math.h>
#include <stdbool.h>
#include <unistd.h>

double tl_hist_quantile(const struct tl_hist *h, double q)
{
    if (h->n <= 0 || !(q > 0.0 && q < 1.0)) return NAN;
    double rank = q * (double)h->n;
    int64_t below = 0; // observations in the buckets before i
    for (int i = 0; i < h->n_le; i++) {
        int64_t in = h->count[i];
        if (in > 0 && (double)(below + in) >= rank) {
            double lo = i == 0 ? (h->le[0] > 0 ? 0.0 : h->le[0]) : h->le[i - 1];
            return lo + (h->le[i] - lo) * ((rank - (double)below) / (double)in);
        }
        below += in;
    }
    return h->n_le > 0 ? h->le[h->n_le - 1] : NAN; // the rank is in the +Inf bucket
}

// Adds v (stolen) under key; clears *ok when v is NULL or the insertion fails.
static void put(json_t *o, const char *key, json_t *v, bool *ok)
{
    if (!v || json_object_set_new(o, key, v)) *ok = false;
}

// A real, or null for NaN (JSON has no NaN).
static json_t *real_or_null(double v)
{
    return isnan(v) ? json_null() : json_real(v);
}

static json_t *int_value(int64_t v)
{
    return json_integer((json_int_t)v);
}

// {"count", "sum", "p50", "p90", "p99", "le": [finite bounds], "counts": [per bucket, the
// last one the +Inf bucket]}: counts are per bucket (not cumulative), n_le + 1 of them.
static json_t *hist_json(const struct tl_hist *h)
{
    json_t *o = json_object(), *le = json_array(), *counts = json_array();
    bool ok = o && le && counts;
    for (int i = 0; ok && i < h->n_le; i++)
        ok = !json_array_append_new(le, json_real(h->le[i])) &&
             !json_array_append_new(counts, int_value(h->count[i]));
    if (ok) ok = !json_array_append_new(counts, int_value(h->n_inf));
    if (ok) {
        put(o, "count", int_value(h->n), &ok);
        put(o, "sum", json_real(h->sum), &ok);
        put(o, "p50", real_or_null(tl_hist_quantile(h, 0.50)), &ok);
        put(o, "p90", real_or_null(tl_hist_quantile(h, 0.90)), &ok);
        put(o, "p99", real_or_null(tl_hist_quantile(h, 0.99)), &ok);
        put(o, "le", le, &ok);
        put(o, "counts", counts, &ok);
        le = counts = NULL;
    }
    json_decref(le);
    json_decref(counts);
    if (!ok) json_decref(o);
    return ok ? o : NULL;
}

static const char *state_name(int st)
{
    return st == TL_SRV_READY      ? "ready"
           : st == TL_SRV_LOADING  ? "loading"
           : st == TL_SRV_DRAINING ? "draining"
                                   : "failed";
}

static const char *kv_type_name(enum tl_kv_type t)
{
    return t == TL_KV_F32 ? "f32" : t == TL_KV_Q8_0 ? "q8_0" : "f16";
}

static json_t *model_json(const struct tl_server *s)
{
    const struct tl_model_info *m = &s->info;
    return json_pack("{ss ss* ss* ss* sI sI sI sI sI sI sI}", "id", s->model_name, "file",
                     s->model_base, "arch", m->arch, "weight_type", m->weight_type, "n_params",
                     (json_int_t)m->n_params, "n_vocab", (json_int_t)m->n_vocab, "n_ctx_train",
                     (json_int_t)m->n_ctx_train, "n_layer", (json_int_t)m->n_layer, "n_embd",
                     (json_int_t)m->n_embd, "n_head", (json_int_t)m->n_head, "n_head_kv",
                     (json_int_t)m->n_head_kv);
}

// The configuration the engine runs with: defaults resolved as the engine resolves them
// (threads 0 = online CPUs, as core/pool.c), the pool size as the engine built it.
static json_t *engine_json(const struct tl_server *s, const struct tl_engine_stats *es)
{
    const struct tl_engine_config *c = &s->cfg.engine;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int64_t threads = c->n_threads > 0 ? c->n_threads : (cpus > 0 ? cpus : 1);
    return json_pack("{sI ss ss sI sI sI sI sI sb}", "threads", (json_int_t)threads, "isa",
                     s->metrics.kernels_isa, "kv_type", kv_type_name(c->kv_type), "kv_block_size",
                     (json_int_t)es->kv_block_size, "kv_blocks", (json_int_t)es->kv_blocks_total,
                     "max_batch_size", (json_int_t)c->max_batch_size, "max_tokens_per_step",
                     (json_int_t)c->max_tokens_per_step, "max_seq_len", (json_int_t)s->max_seq_len,
                     "prefix_caching", c->prefix_caching);
}

static json_t *counters_json(const struct tl_server *s, const struct tl_engine_stats *es)
{
    json_t *fin =
        json_pack("{sI sI sI sI sI}", "stop", (json_int_t)es->finished_total[TL_FINISH_STOP],
                  "length", (json_int_t)es->finished_total[TL_FINISH_LENGTH], "abort",
                  (json_int_t)es->finished_total[TL_FINISH_CANCELLED], "timeout",
                  (json_int_t)es->finished_total[TL_FINISH_DEADLINE], "error",
                  (json_int_t)es->finished_total[TL_FINISH_ERROR]);
    if (!fin) return NULL;
    return json_pack(
        "{sI sI so sI sf sI sI sI sI sI}", "prompt_tokens", (json_int_t)es->prompt_tokens_total,
        "generation_tokens", (json_int_t)es->generation_tokens_total, "requests_finished", fin,
        "steps", (json_int_t)es->steps_total, "step_seconds", (double)es->step_us_total / 1e6,
        "step_tokens", (json_int_t)es->step_tokens_sum, "prefix_cache_queries",
        (json_int_t)es->prefix_queries_total, "prefix_cache_hits",
        (json_int_t)es->prefix_hits_total, "preemptions", (json_int_t)es->preemptions_total,
        "client_disconnects", (json_int_t)s->metrics.client_disconnects);
}

// The batch composition and work counters beside the others (metrics.c exports the same as
// histogram sums and engine_ops_total / engine_bytes_read_total).
static bool add_work_counters(json_t *c, const struct tl_engine_stats *es)
{
    json_t *w = json_pack("{sI sI sI sf sf sf sf}", "step_sequences", (json_int_t)es->seqs_sum,
                          "decode_tokens", (json_int_t)es->decode_tokens_sum, "prefill_tokens",
                          (json_int_t)es->prefill_tokens_sum, "int8_ops", es->int8_ops_total,
                          "fp32_flops", es->flops_total, "weight_bytes_read",
                          es->weight_bytes_total, "kv_bytes_read", es->kv_bytes_total);
    bool ok = c && w && json_object_update(c, w) == 0;
    json_decref(w);
    return ok;
}

static json_t *gauges_json(const struct tl_engine_stats *es)
{
    return json_pack("{sI sI sI sI sI sI}", "running", (json_int_t)es->n_running, "waiting",
                     (json_int_t)es->n_waiting, "kv_blocks_used", (json_int_t)es->kv_blocks_used,
                     "kv_blocks_cached", (json_int_t)es->kv_blocks_cached, "kv_blocks_free",
                     (json_int_t)es->kv_blocks_free, "kv_blocks_total",
                     (json_int_t)es->kv_blocks_total);
}

// Only what the engine measures; the page derives ratios from the *_seconds counters'
// differences and charts the *_ratio gauges. From metrics.c's 10 s window (the numbers of
// /metrics' gauges): compute and memory-bandwidth utilization against the machine's ceilings
// (absent with --no-ceilings or before the window has data), the busy ratio, and the ceilings.
static json_t *utilization_json(struct tl_server *s, const struct tl_engine_stats *es)
{
    json_t *u = json_pack("{sf sf}", "busy_seconds", (double)es->step_us_total / 1e6,
                          "forward_seconds", (double)es->forward_us_total / 1e6);
    if (!u) return NULL;
    struct tl_metrics_window w;
    struct tl_metrics all;
    tl_srv_metrics_view(s, &all);
    tl_metrics_window(&all, es, tl_time_us(), &w);
    bool ok = true;
    if (w.seconds > 0) {
        put(u, "window_s", json_real(w.seconds), &ok);
        put(u, "busy_window_ratio", json_real(w.busy_ratio), &ok);
        if (w.compute_utilization >= 0)
            put(u, "compute_ratio", json_real(w.compute_utilization), &ok);
        if (w.memory_utilization >= 0)
            put(u, "memory_bandwidth_ratio", json_real(w.memory_utilization), &ok);
    }
    if (s->metrics.have_ceilings) {
        const struct tl_machine_ceilings *c = &s->metrics.ceilings;
        put(u, "peak_int8_ops_per_s", json_real(c->int8_ops_per_s), &ok);
        put(u, "peak_fp32_flops_per_s", json_real(c->fp32_flops_per_s), &ok);
        put(u, "peak_memory_read_bytes_per_s", json_real(c->mem_read_bytes_per_s), &ok);
    }
    if (!ok) {
        json_decref(u);
        return NULL;
    }
    return u;
}

// The device the steps run on (--device vulkan; absent on the CPU): the step's shape (queue
// submissions, host waits, dispatches and copies: one submission and one wait per step), the
// device busy time from timestamp queries and its phases, device memory held.
static json_t *device_json(const struct tl_engine_stats *es)
{
    return json_pack("{sI sI sI sI sI sf sf sf sf sf sI sI}", "submissions",
                     (json_int_t)es->gpu_submits_total, "waits", (json_int_t)es->gpu_waits_total,
                     "dispatches", (json_int_t)es->gpu_dispatches_total, "upload_bytes",
                     (json_int_t)es->gpu_upload_bytes_total, "download_bytes",
                     (json_int_t)es->gpu_download_bytes_total, "busy_seconds",
                     (double)es->gpu_busy_ns_total / 1e9, "matmul_seconds",
                     (double)es->gpu_phase_ns_total[0] / 1e9, "attention_seconds",
                     (double)es->gpu_phase_ns_total[1] / 1e9, "other_seconds",
                     (double)es->gpu_phase_ns_total[2] / 1e9, "copy_seconds",
                     (double)es->gpu_phase_ns_total[3] / 1e9, "weight_bytes",
                     (json_int_t)es->gpu_weight_bytes, "kv_pool_bytes",
                     (json_int_t)es->gpu_kv_bytes);
}

json_t *tl_srv_stats_json(struct tl_server *s)
{
    int st = atomic_load(&s->state);
    bool up = tl_srv_metrics_sync(s);
    struct tl_engine_stats es;
    if (up) s->be->get_stats(s->engine, &es);
    double now = (double)tl_wall_time_us() / 1e6;
    json_t *o = json_object();
    bool ok = o != NULL;
    if (!ok) return NULL;
    put(o, "object", json_string("tokenloom.stats"), &ok);
    put(o, "time", json_real(now), &ok);
    put(o, "started", int_value(s->started_s), &ok);
    put(o, "uptime_s", json_real(now - (double)s->started_s), &ok);
    put(o, "state", json_string(state_name(st)), &ok);
    // Model facts are published by the READY state and stay valid while draining.
    if (st == TL_SRV_READY || st == TL_SRV_DRAINING) put(o, "model", model_json(s), &ok);
    if (up) {
        put(o, "engine", engine_json(s, &es), &ok);
        json_t *counters = counters_json(s, &es);
        if (counters && !add_work_counters(counters, &es)) ok = false;
        put(o, "counters", counters, &ok);
        put(o, "gauges", gauges_json(&es), &ok);
        put(o, "utilization", utilization_json(s, &es), &ok);
        if (es.gpu_submits_total > 0) put(o, "device", device_json(&es), &ok);
    }
    // As /metrics: the gRPC front's requests are added to the server's own histograms.
    struct tl_metrics all;
    tl_srv_metrics_view(s, &all);
    json_t *lat = json_object();
    if (lat) {
        put(lat, "ttft", hist_json(&all.ttft), &ok);
        put(lat, "itl", hist_json(&all.itl), &ok);
        put(lat, "queue", hist_json(&all.queue), &ok);
        put(lat, "e2e", hist_json(&all.e2e), &ok);
    }
    put(o, "latency", lat, &ok);
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

void tl_srv_h_stats(struct tl_server *s, struct evhttp_request *r, int64_t t0, json_t *body)
{
    // Polled by pages that stay open: never cached by a proxy or the browser.
    evhttp_add_header(evhttp_request_get_output_headers(r), "Cache-Control", "no-store");
    tl_http_send_json(&s->http, r, 200, tl_srv_stats_json(s), t0, 0, 0);
}
