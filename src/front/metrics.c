/*
 * Prometheus text exposition for the server (see metrics.h).
 *
 * Histograms keep per-bucket counts and emit cumulative "_bucket{le=...}" lines, "+Inf",
 * "_sum" and "_count" as the format requires. Bucket bounds follow vLLM's choices for the same
 * quantities (milliseconds to minutes for latencies) so dashboards carry over; the queue and
 * TTFT histograms also have a 0.05 bound, the "queued under 50 ms" line. The per-step
 * histograms (tokens, sequences, decode and prefill tokens per step) are the engine's own
 * (tl_engine_stats, bounds step_hist_le), re-emitted in cumulative form; their catch-all last
 * bucket (bound INT64_MAX) is the "+Inf" line, not a bound.
 *
 * Every tokenloom: and vllm: series carries model_name="<served id>" (as vLLM labels its own),
 * so that one Prometheus can tell models apart; process_* metrics are the process's, unlabelled
 * as client libraries emit them.
 *
 * Utilization: the engine counts the work of every step from the model's shapes (int8 ops, f32
 * FLOPs, bytes of weights and K/V read: model/work.c). The event loop samples those counters
 * about once a second into a small ring (tl_metrics_tick); a scrape divides the growth since
 * the oldest sample at most TL_METRICS_WINDOW_S old by the elapsed time and by the machine's
 * ceilings (measured by the caller, front/machine.h). Without ceilings (--no-ceilings) the two
 * utilization gauges and the machine_* gauges are absent rather than zero, which would read as
 * "idle".
 *
 * The gauges the Gateway API Inference Extension's endpoint picker reads are also exported under
 * vLLM's names (vllm:num_requests_waiting, vllm:num_requests_running, vllm:kv_cache_usage_perc,
 * vllm:cache_config_info{block_size,num_gpu_blocks}), always: five extra samples per scrape cost
 * less than a flag every deployment behind the picker would have to remember.
 *
 * Thread model: one tl_metrics per server, touched only by the event-loop thread (the model
 * facts are written by the engine thread before the server turns READY, which publishes them).
 */
#include "front/metrics.h"

#include "core/error.h"
#include "front/build_info.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define P "tokenloom:"

static const int http_codes[TL_METRICS_N_CODES] = {200, 400, 401, 404, 405,
                                                   413, 429, 500, 503, 504};

void tl_hist_init(struct tl_hist *h, const double *le, int n_le)
{
    TL_ASSERT(n_le >= 0 && n_le <= TL_HIST_MAX_BUCKETS);
    memset(h, 0, sizeof(*h));
    h->n_le = n_le;
    for (int i = 0; i < n_le; i++) {
        TL_ASSERT(i == 0 || le[i] > le[i - 1]);
        h->le[i] = le[i];
    }
}

void tl_hist_observe(struct tl_hist *h, double v)
{
    int i = 0;
    while (i < h->n_le && v > h->le[i])
        i++;
    if (i < h->n_le)
        h->count[i]++;
    else
        h->n_inf++;
    h->sum += v;
    h->n++;
}

void tl_metrics_init(struct tl_metrics *m)
{
    static const double ttft[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.05, 0.06, 0.08, 0.1, 0.25,
                                  0.5,   0.75,  1.0,  2.5,  5.0,  7.5,  10.0, 20.0, 40.0};
    static const double itl[] = {0.001, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075,
                                 0.1,   0.15,  0.2,  0.3,   0.4,  0.5,   0.75, 1.0,  2.5};
    static const double e2e[] = {0.01, 0.05, 0.1,  0.3,  0.5,  0.8,  1.0,   2.5,   5.0,  10.0,
                                 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0};
    static const double len[] = {1,   2,    5,    10,   20,    50,    100,  200,
                                 500, 1000, 2000, 5000, 10000, 20000, 50000};
    memset(m, 0, sizeof(*m));
    tl_hist_init(&m->ttft, ttft, (int)(sizeof(ttft) / sizeof(ttft[0])));
    tl_hist_init(&m->itl, itl, (int)(sizeof(itl) / sizeof(itl[0])));
    tl_hist_init(&m->e2e, e2e, (int)(sizeof(e2e) / sizeof(e2e[0])));
    tl_hist_init(&m->queue, ttft, (int)(sizeof(ttft) / sizeof(ttft[0])));
    tl_hist_init(&m->prompt_len, len, (int)(sizeof(len) / sizeof(len[0])));
    tl_hist_init(&m->output_len, len, (int)(sizeof(len) / sizeof(len[0])));
    snprintf(m->model_label, sizeof(m->model_label), "model_name=\"\"");
    snprintf(m->kv_type, sizeof(m->kv_type), "f16");
    snprintf(m->kernels_isa, sizeof(m->kernels_isa), "unknown");
}

void tl_metrics_set_model(struct tl_metrics *m, const char *model_name, const char *kv_type,
                          const struct tl_machine *machine)
{
    // Label values escape backslash, double quote and newline; a name too long is cut (a
    // served id is at most a few hundred bytes in practice).
    size_t n = 0, cap = sizeof(m->model_label);
    n += (size_t)snprintf(m->model_label, cap, "model_name=\"");
    for (const char *c = model_name ? model_name : ""; *c && n + 4 < cap; c++) {
        if (*c == '\\' || *c == '"') m->model_label[n++] = '\\';
        if (*c == '\n') {
            m->model_label[n++] = '\\';
            m->model_label[n++] = 'n';
            continue;
        }
        m->model_label[n++] = *c;
    }
    m->model_label[n++] = '"';
    m->model_label[n] = 0;
    snprintf(m->kv_type, sizeof(m->kv_type), "%s", kv_type ? kv_type : "f16");
    snprintf(m->kernels_isa, sizeof(m->kernels_isa), "%s",
             machine && machine->kernels_isa[0] ? machine->kernels_isa : "unknown");
    m->have_ceilings = machine && machine->have_ceilings;
    if (m->have_ceilings) m->ceilings = machine->ceilings;
}

void tl_metrics_count_http(struct tl_metrics *m, int status)
{
    for (int i = 0; i < TL_METRICS_N_CODES; i++) {
        if (http_codes[i] == status) {
            m->http_by_code[i]++;
            return;
        }
    }
    m->http_by_code[TL_METRICS_N_CODES]++;
}

void tl_metrics_observe_done(struct tl_metrics *m, int64_t queue_us, int64_t ttft_us,
                             int64_t total_us, int64_t n_prompt, int64_t n_generated)
{
    tl_hist_observe(&m->queue, (double)queue_us / 1e6);
    if (queue_us < TL_METRICS_QUEUE_FAST_US) m->queue_fast++;
    if (n_generated > 0 && ttft_us >= 0) tl_hist_observe(&m->ttft, (double)ttft_us / 1e6);
    tl_hist_observe(&m->e2e, (double)total_us / 1e6);
    tl_hist_observe(&m->prompt_len, (double)n_prompt);
    tl_hist_observe(&m->output_len, (double)n_generated);
}

static void hist_add(struct tl_hist *d, const struct tl_hist *s)
{
    TL_ASSERT(d->n_le == s->n_le);
    for (int i = 0; i < s->n_le; i++)
        d->count[i] += s->count[i];
    d->n_inf += s->n_inf;
    d->sum += s->sum;
    d->n += s->n;
}

void tl_metrics_add(struct tl_metrics *dst, const struct tl_metrics *src)
{
    hist_add(&dst->ttft, &src->ttft);
    hist_add(&dst->itl, &src->itl);
    hist_add(&dst->e2e, &src->e2e);
    hist_add(&dst->queue, &src->queue);
    hist_add(&dst->prompt_len, &src->prompt_len);
    hist_add(&dst->output_len, &src->output_len);
    dst->queue_fast += src->queue_fast;
    for (int i = 0; i <= TL_METRICS_N_CODES; i++)
        dst->http_by_code[i] += src->http_by_code[i];
    dst->client_disconnects += src->client_disconnects;
}

// ---- the window -------------------------------------------------------------------------------

static int64_t hist_total(const int64_t *count)
{
    int64_t n = 0;
    for (int i = 0; i < TL_STEP_HIST_BUCKETS; i++)
        n += count[i];
    return n;
}

static void take_sample(const struct tl_metrics *m, const struct tl_engine_stats *es,
                        int64_t now_us, struct tl_metrics_sample *s)
{
    *s = (struct tl_metrics_sample){
        .t_us = now_us,
        .int8_ops = es->int8_ops_total,
        .flops = es->flops_total,
        .bytes_read = es->weight_bytes_total + es->kv_bytes_total,
        .step_us = es->step_us_total,
        .steps = es->steps_total,
        .step_tokens = es->step_tokens_sum,
        .seqs = es->seqs_sum,
        .decode_tokens = es->decode_tokens_sum,
        .decode_steps = hist_total(es->decode_hist_count),
        .prefill_tokens = es->prefill_tokens_sum,
        .prefill_steps = hist_total(es->prefill_hist_count),
        .queue_n = m->queue.n,
        .queue_fast = m->queue_fast,
    };
}

bool tl_metrics_tick_due(const struct tl_metrics *m, int64_t now_us)
{
    if (m->n_window == 0) return true;
    int last = (m->i_window + TL_METRICS_WINDOW_SAMPLES - 1) % TL_METRICS_WINDOW_SAMPLES;
    return now_us - m->window[last].t_us >= 1000000;
}

void tl_metrics_tick(struct tl_metrics *m, const struct tl_engine_stats *es, int64_t now_us)
{
    take_sample(m, es, now_us, &m->window[m->i_window]);
    m->i_window = (m->i_window + 1) % TL_METRICS_WINDOW_SAMPLES;
    if (m->n_window < TL_METRICS_WINDOW_SAMPLES) m->n_window++;
}

static double ratio(double num, double den)
{
    return den > 0 ? num / den : 0.0;
}

void tl_metrics_window(const struct tl_metrics *m, const struct tl_engine_stats *es, int64_t now_us,
                       struct tl_metrics_window *out)
{
    memset(out, 0, sizeof(*out));
    out->compute_utilization = out->memory_utilization = out->queue_under_50ms_ratio = -1;
    // The oldest sample no more than the window old.
    const struct tl_metrics_sample *old = NULL;
    for (int k = 0; k < m->n_window; k++) {
        int i = (m->i_window - m->n_window + k + 2 * TL_METRICS_WINDOW_SAMPLES) %
                TL_METRICS_WINDOW_SAMPLES;
        if (now_us - m->window[i].t_us <= (int64_t)TL_METRICS_WINDOW_S * 1000000) {
            old = &m->window[i];
            break;
        }
    }
    if (!es || !old || now_us - old->t_us < 100000) return; // nothing to measure yet
    struct tl_metrics_sample cur;
    take_sample(m, es, now_us, &cur);
    double dt = (double)(now_us - old->t_us) / 1e6;
    out->seconds = dt;
    out->int8_ops_per_s = (cur.int8_ops - old->int8_ops) / dt;
    out->flops_per_s = (cur.flops - old->flops) / dt;
    out->bytes_read_per_s = (cur.bytes_read - old->bytes_read) / dt;
    out->busy_ratio = (double)(cur.step_us - old->step_us) / 1e6 / dt;
    if (out->busy_ratio > 1) out->busy_ratio = 1; // a step straddling the window's start
    int64_t steps = cur.steps - old->steps;
    out->steps_per_s = (double)steps / dt;
    out->tokens_per_step = ratio((double)(cur.step_tokens - old->step_tokens), (double)steps);
    out->seqs_per_step = ratio((double)(cur.seqs - old->seqs), (double)steps);
    out->decode_tokens_per_step = ratio((double)(cur.decode_tokens - old->decode_tokens),
                                        (double)(cur.decode_steps - old->decode_steps));
    out->prefill_tokens_per_step = ratio((double)(cur.prefill_tokens - old->prefill_tokens),
                                         (double)(cur.prefill_steps - old->prefill_steps));
    if (cur.queue_n > old->queue_n)
        out->queue_under_50ms_ratio =
            (double)(cur.queue_fast - old->queue_fast) / (double)(cur.queue_n - old->queue_n);
    if (m->have_ceilings) {
        const struct tl_machine_ceilings *c = &m->ceilings;
        out->compute_utilization = ratio(out->int8_ops_per_s, c->int8_ops_per_s) +
                                   ratio(out->flops_per_s, c->fp32_flops_per_s);
        out->memory_utilization = ratio(out->bytes_read_per_s, c->mem_read_bytes_per_s);
    }
}

// ---- rendering --------------------------------------------------------------------------------

static void head(struct tl_sb *o, const char *name, const char *type, const char *help)
{
    tl_sb_printf(o, "# HELP " P "%s %s\n# TYPE " P "%s %s\n", name, help, name, type);
}

static void scalar(struct tl_sb *o, const struct tl_metrics *m, const char *name, const char *type,
                   const char *help, double v)
{
    head(o, name, type, help);
    tl_sb_printf(o, P "%s{%s} %.17g\n", name, m->model_label, v);
}

static void hist(struct tl_sb *o, const struct tl_metrics *m, const char *name, const char *help,
                 const struct tl_hist *h)
{
    head(o, name, "histogram", help);
    int64_t cum = 0;
    for (int i = 0; i < h->n_le; i++) {
        cum += h->count[i];
        tl_sb_printf(o, P "%s_bucket{le=\"%g\",%s} %lld\n", name, h->le[i], m->model_label,
                     (long long)cum);
    }
    cum += h->n_inf;
    tl_sb_printf(o, P "%s_bucket{le=\"+Inf\",%s} %lld\n", name, m->model_label, (long long)cum);
    tl_sb_printf(o, P "%s_sum{%s} %.17g\n", name, m->model_label, h->sum);
    tl_sb_printf(o, P "%s_count{%s} %lld\n", name, m->model_label, (long long)h->n);
}

// One of the engine's per-step histograms (bounds es->step_hist_le), made cumulative. Buckets
// with a bound not above the previous one are unused slots; INT64_MAX is the catch-all.
static void step_hist(struct tl_sb *o, const struct tl_metrics *m, const char *name,
                      const char *help, const struct tl_engine_stats *es, const int64_t *count,
                      int64_t sum)
{
    head(o, name, "histogram", help);
    int64_t cum = 0, n = hist_total(count);
    for (int i = 0; i < TL_STEP_HIST_BUCKETS; i++) {
        if (i > 0 && es->step_hist_le[i] <= es->step_hist_le[i - 1]) break;
        if (es->step_hist_le[i] == INT64_MAX) break; // the catch-all: counted in +Inf below
        cum += count[i];
        tl_sb_printf(o, P "%s_bucket{le=\"%lld\",%s} %lld\n", name, (long long)es->step_hist_le[i],
                     m->model_label, (long long)cum);
    }
    tl_sb_printf(o, P "%s_bucket{le=\"+Inf\",%s} %lld\n", name, m->model_label, (long long)n);
    tl_sb_printf(o, P "%s_sum{%s} %lld\n", name, m->model_label, (long long)sum);
    tl_sb_printf(o, P "%s_count{%s} %lld\n", name, m->model_label, (long long)n);
}

// es: the snapshot (zeros while loading); live: the same, or NULL while loading (no window).
static void render_utilization(const struct tl_metrics *m, const struct tl_engine_stats *es,
                               const struct tl_engine_stats *live, int64_t now_us, struct tl_sb *o)
{
    const char *L = m->model_label;
    head(o, "engine_ops_total", "counter",
         "Arithmetic done by engine steps, counted from the model's shapes: int8 ops of "
         "quantized-weight matmuls, f32 FLOPs of float matmuls and attention (a multiply-add "
         "is 2).");
    tl_sb_printf(o, P "engine_ops_total{kind=\"int8\",%s} %.17g\n", L, es->int8_ops_total);
    tl_sb_printf(o, P "engine_ops_total{kind=\"fp32\",%s} %.17g\n", L, es->flops_total);
    head(o, "engine_bytes_read_total", "counter",
         "Bytes engine steps read: weights (each matrix once per step) and K/V (each token's "
         "context).");
    tl_sb_printf(o, P "engine_bytes_read_total{kind=\"weights\",%s} %.17g\n", L,
                 es->weight_bytes_total);
    tl_sb_printf(o, P "engine_bytes_read_total{kind=\"kv\",%s} %.17g\n", L, es->kv_bytes_total);

    struct tl_metrics_window w;
    tl_metrics_window(m, live, now_us, &w);
    scalar(o, m, "engine_busy_ratio", "gauge",
           "Share of wall time spent inside engine steps over the last 10 s.", w.busy_ratio);
    if (m->have_ceilings) {
        const struct tl_machine_ceilings *c = &m->ceilings;
        scalar(o, m, "compute_utilization", "gauge",
               "Work done over the last 10 s against the machine's peak (int8 ops / peak int8 + "
               "f32 FLOPs / peak f32), 0 to 1: the CPU's MFU.",
               w.compute_utilization);
        scalar(o, m, "memory_bandwidth_utilization", "gauge",
               "Bytes read per second over the last 10 s against the measured read bandwidth.",
               w.memory_utilization);
        scalar(o, m, "machine_peak_int8_ops_per_second", "gauge",
               "Measured peak int8 dot-product ops/s of the kernels' path on the engine's threads.",
               c->int8_ops_per_s);
        scalar(o, m, "machine_peak_fp32_flops_per_second", "gauge",
               "Measured peak f32 FMA FLOP/s on the engine's threads.", c->fp32_flops_per_s);
        scalar(o, m, "machine_memory_read_bytes_per_second", "gauge",
               "Measured streaming read bandwidth (a buffer beyond the last-level cache).",
               c->mem_read_bytes_per_s);
    }
}

static void render_engine(const struct tl_metrics *m, const struct tl_engine_stats *es,
                          struct tl_sb *o)
{
    const char *L = m->model_label;
    scalar(o, m, "num_requests_running", "gauge", "Requests being prefilled or decoded.",
           (double)es->n_running);
    scalar(o, m, "num_requests_waiting", "gauge", "Requests waiting to be scheduled.",
           (double)es->n_waiting);
    double usage =
        es->kv_blocks_total > 0 ? (double)es->kv_blocks_used / (double)es->kv_blocks_total : 0.0;
    scalar(o, m, "kv_cache_usage_perc", "gauge",
           "Fraction of KV cache blocks held by running requests (0 to 1).", usage);
    scalar(o, m, "kv_cache_blocks", "gauge", "KV cache blocks in the pool.",
           (double)es->kv_blocks_total);
    scalar(o, m, "kv_cache_blocks_free", "gauge", "KV cache blocks neither used nor cached.",
           (double)es->kv_blocks_free);
    scalar(o, m, "kv_cache_blocks_cached", "gauge",
           "KV cache blocks kept only by the prefix cache (reusable, evictable).",
           (double)es->kv_blocks_cached);
    scalar(o, m, "prompt_tokens_total", "counter",
           "Prompt tokens computed (prefix-cache hits excluded).", (double)es->prompt_tokens_total);
    scalar(o, m, "generation_tokens_total", "counter", "Tokens generated.",
           (double)es->generation_tokens_total);

    head(o, "request_success_total", "counter", "Engine requests finished, by finish reason.");
    for (int r = TL_FINISH_STOP; r <= TL_FINISH_ERROR; r++) {
        const char *name = r == TL_FINISH_STOP        ? "stop"
                           : r == TL_FINISH_LENGTH    ? "length"
                           : r == TL_FINISH_CANCELLED ? "abort"
                           : r == TL_FINISH_DEADLINE  ? "timeout"
                                                      : "error";
        tl_sb_printf(o, P "request_success_total{finished_reason=\"%s\",%s} %lld\n", name, L,
                     (long long)es->finished_total[r]);
    }
    scalar(o, m, "num_preemptions_total", "counter", "Requests preempted (KV freed, recomputed).",
           (double)es->preemptions_total);
    scalar(o, m, "prefix_cache_queries_total", "counter",
           "Prompt tokens looked up in the prefix cache.", (double)es->prefix_queries_total);
    scalar(o, m, "prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.",
           (double)es->prefix_hits_total);
    scalar(o, m, "engine_steps_total", "counter", "Engine steps (forward passes) run.",
           (double)es->steps_total);
    scalar(o, m, "engine_step_seconds_total", "counter", "Wall time spent inside engine steps.",
           (double)es->step_us_total / 1e6);

    // Batch size. (vLLM calls the tokens-per-step histogram iteration_tokens_total; a histogram
    // must not end in _total, so tokenloom's own name is batch_tokens_per_step.)
    step_hist(o, m, "batch_tokens_per_step", "Tokens (prefill + decode) per engine step.", es,
              es->step_hist_count, es->step_tokens_sum);
    step_hist(o, m, "batch_sequences_per_step", "Sequences in each engine step.", es,
              es->seqs_hist_count, es->seqs_sum);
    step_hist(o, m, "batch_decode_tokens_per_step",
              "Decode tokens (one per generating sequence) per step, over steps that decode.", es,
              es->decode_hist_count, es->decode_tokens_sum);
    step_hist(o, m, "batch_prefill_tokens_per_step",
              "Prompt (and recomputed) tokens per step, over steps that prefill.", es,
              es->prefill_hist_count, es->prefill_tokens_sum);
}

static void render_info(const struct tl_metrics *m, const struct tl_engine_stats *es,
                        struct tl_sb *o)
{
    head(o, "build_info", "gauge",
         "The build: version, git revision, kernel ISA chosen at run time.");
    tl_sb_printf(o, P "build_info{version=\"%s\",revision=\"%s\",isa=\"%s\",%s} 1\n",
                 tl_build_version(), tl_build_revision(), m->kernels_isa, m->model_label);
    head(o, "cache_config_info", "gauge", "The KV cache: positions per block, blocks, type.");
    tl_sb_printf(
        o, P "cache_config_info{block_size=\"%lld\",num_blocks=\"%lld\",kv_type=\"%s\",%s} 1\n",
        (long long)es->kv_block_size, (long long)es->kv_blocks_total, m->kv_type, m->model_label);
}

void tl_metrics_render(const struct tl_metrics *m, const struct tl_engine_stats *es, int64_t now_us,
                       struct tl_sb *o)
{
    struct tl_engine_stats zero;
    if (!es) {
        memset(&zero, 0, sizeof(zero));
        es = &zero;
    }
    const char *L = m->model_label;
    render_info(m, es, o);
    render_engine(m, es, o);
    render_utilization(m, es, es == &zero ? NULL : es, now_us, o);

    hist(o, m, "time_to_first_token_seconds", "Time from submission to the first token.", &m->ttft);
    hist(o, m, "inter_token_latency_seconds", "Time between consecutive tokens of one request.",
         &m->itl);
    hist(o, m, "e2e_request_latency_seconds", "Time from submission to the end of a request.",
         &m->e2e);
    hist(o, m, "request_queue_time_seconds", "Time from submission to first being scheduled.",
         &m->queue);
    scalar(o, m, "request_queue_time_under_50ms_total", "counter",
           "Requests whose queueing delay was under 50 ms (beside "
           "request_queue_time_seconds_count).",
           (double)m->queue_fast);
    hist(o, m, "request_prompt_tokens", "Prompt length of finished requests, in tokens.",
         &m->prompt_len);
    hist(o, m, "request_generation_tokens", "Tokens generated by finished requests.",
         &m->output_len);

    head(o, "http_requests_total", "counter", "HTTP responses sent, by status code.");
    for (int i = 0; i < TL_METRICS_N_CODES; i++)
        tl_sb_printf(o, P "http_requests_total{code=\"%d\",%s} %lld\n", http_codes[i], L,
                     (long long)m->http_by_code[i]);
    tl_sb_printf(o, P "http_requests_total{code=\"other\",%s} %lld\n", L,
                 (long long)m->http_by_code[TL_METRICS_N_CODES]);
    scalar(o, m, "client_disconnects_total", "counter",
           "Requests cancelled because the client closed the connection.",
           (double)m->client_disconnects);

    // vLLM's names for what the inference gateway's endpoint picker reads (same values).
    double usage =
        es->kv_blocks_total > 0 ? (double)es->kv_blocks_used / (double)es->kv_blocks_total : 0.0;
    tl_sb_printf(o,
                 "# HELP vllm:num_requests_waiting Requests waiting to be scheduled.\n"
                 "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{%s} %lld\n"
                 "# HELP vllm:num_requests_running Requests being prefilled or decoded.\n"
                 "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{%s} %lld\n"
                 "# HELP vllm:kv_cache_usage_perc KV cache usage (0 to 1).\n"
                 "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{%s} %.17g\n"
                 "# HELP vllm:cache_config_info KV cache configuration.\n"
                 "# TYPE vllm:cache_config_info gauge\n"
                 "vllm:cache_config_info{block_size=\"%lld\",num_gpu_blocks=\"%lld\",%s} 1\n",
                 L, (long long)es->n_waiting, L, (long long)es->n_running, L, usage,
                 (long long)es->kv_block_size, (long long)es->kv_blocks_total, L);
    tl_metrics_render_process(o);
}
