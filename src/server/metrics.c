/*
 * Prometheus text exposition for the server (see metrics.h).
 *
 * Histograms keep per-bucket counts and emit cumulative "_bucket{le=...}" lines, "+Inf",
 * "_sum" and "_count" as the format requires. Bucket bounds follow vLLM's choices for the same
 * quantities (milliseconds to minutes for latencies) so dashboards carry over. The
 * tokens-per-step histogram is the engine's own (tl_engine_stats.step_hist_*), re-emitted in
 * cumulative form; its catch-all last bucket (bound INT64_MAX) is the "+Inf" line, not a bound.
 *
 * The gauges the Gateway API Inference Extension's endpoint picker reads are also exported under
 * vLLM's names (vllm:num_requests_waiting, vllm:num_requests_running, vllm:kv_cache_usage_perc,
 * vllm:cache_config_info{block_size,num_gpu_blocks}), always: five extra samples per scrape cost
 * less than a flag every deployment behind the picker would have to remember.
 *
 * Thread model: one tl_metrics per server, touched only by the event-loop thread.
 */
#include "server/metrics.h"

#include "core/error.h"

#include <stdint.h>
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
    static const double ttft[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,
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
    for (int i = 0; i <= TL_METRICS_N_CODES; i++)
        dst->http_by_code[i] += src->http_by_code[i];
    dst->client_disconnects += src->client_disconnects;
}

static void head(struct tl_sb *o, const char *name, const char *type, const char *help)
{
    tl_sb_printf(o, "# HELP " P "%s %s\n# TYPE " P "%s %s\n", name, help, name, type);
}

static void scalar(struct tl_sb *o, const char *name, const char *type, const char *help, double v)
{
    head(o, name, type, help);
    tl_sb_printf(o, P "%s %.17g\n", name, v);
}

static void hist(struct tl_sb *o, const char *name, const char *help, const struct tl_hist *h)
{
    head(o, name, "histogram", help);
    int64_t cum = 0;
    for (int i = 0; i < h->n_le; i++) {
        cum += h->count[i];
        tl_sb_printf(o, P "%s_bucket{le=\"%g\"} %lld\n", name, h->le[i], (long long)cum);
    }
    cum += h->n_inf;
    tl_sb_printf(o, P "%s_bucket{le=\"+Inf\"} %lld\n", name, (long long)cum);
    tl_sb_printf(o, P "%s_sum %.17g\n", name, h->sum);
    tl_sb_printf(o, P "%s_count %lld\n", name, (long long)h->n);
}

void tl_metrics_render(const struct tl_metrics *m, const struct tl_engine_stats *es,
                       struct tl_sb *o)
{
    struct tl_engine_stats zero;
    if (!es) {
        memset(&zero, 0, sizeof(zero));
        es = &zero;
    }
    scalar(o, "num_requests_running", "gauge", "Requests being prefilled or decoded.",
           (double)es->n_running);
    scalar(o, "num_requests_waiting", "gauge", "Requests waiting to be scheduled.",
           (double)es->n_waiting);
    double usage =
        es->kv_blocks_total > 0 ? (double)es->kv_blocks_used / (double)es->kv_blocks_total : 0.0;
    scalar(o, "kv_cache_usage_perc", "gauge",
           "Fraction of KV cache blocks held by running requests (0 to 1).", usage);
    scalar(o, "kv_cache_blocks_total", "gauge", "KV cache blocks in the pool.",
           (double)es->kv_blocks_total);
    scalar(o, "kv_cache_blocks_free", "gauge", "KV cache blocks neither used nor cached.",
           (double)es->kv_blocks_free);
    scalar(o, "kv_cache_blocks_cached", "gauge",
           "KV cache blocks kept only by the prefix cache (reusable, evictable).",
           (double)es->kv_blocks_cached);
    scalar(o, "prompt_tokens_total", "counter",
           "Prompt tokens computed (prefix-cache hits excluded).", (double)es->prompt_tokens_total);
    scalar(o, "generation_tokens_total", "counter", "Tokens generated.",
           (double)es->generation_tokens_total);

    head(o, "request_success_total", "counter", "Engine requests finished, by finish reason.");
    for (int r = TL_FINISH_STOP; r <= TL_FINISH_ERROR; r++) {
        const char *name = r == TL_FINISH_STOP        ? "stop"
                           : r == TL_FINISH_LENGTH    ? "length"
                           : r == TL_FINISH_CANCELLED ? "abort"
                           : r == TL_FINISH_DEADLINE  ? "timeout"
                                                      : "error";
        tl_sb_printf(o, P "request_success_total{finished_reason=\"%s\"} %lld\n", name,
                     (long long)es->finished_total[r]);
    }
    scalar(o, "num_preemptions_total", "counter", "Requests preempted (KV freed, recomputed).",
           (double)es->preemptions_total);
    scalar(o, "prefix_cache_queries_total", "counter",
           "Prompt tokens looked up in the prefix cache.", (double)es->prefix_queries_total);
    scalar(o, "prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.",
           (double)es->prefix_hits_total);
    scalar(o, "engine_steps_total", "counter", "Engine steps (forward passes) run.",
           (double)es->steps_total);
    scalar(o, "engine_step_seconds_total", "counter", "Wall time spent inside engine steps.",
           (double)es->step_us_total / 1e6);

    hist(o, "time_to_first_token_seconds", "Time from submission to the first token.", &m->ttft);
    hist(o, "inter_token_latency_seconds", "Time between consecutive tokens of one request.",
         &m->itl);
    hist(o, "e2e_request_latency_seconds", "Time from submission to the end of a request.",
         &m->e2e);
    hist(o, "request_queue_time_seconds", "Time from submission to first being scheduled.",
         &m->queue);
    hist(o, "request_prompt_tokens", "Prompt length of finished requests, in tokens.",
         &m->prompt_len);
    hist(o, "request_generation_tokens", "Tokens generated by finished requests.", &m->output_len);

    // The engine's tokens-per-step histogram, made cumulative. Buckets with a zero bound past
    // the first are unused slots.
    head(o, "iteration_tokens_total", "histogram", "Tokens (prefill + decode) per engine step.");
    int64_t cum = 0, n_steps = 0;
    for (int i = 0; i < TL_STEP_HIST_BUCKETS; i++)
        n_steps += es->step_hist_count[i];
    for (int i = 0; i < TL_STEP_HIST_BUCKETS; i++) {
        if (i > 0 && es->step_hist_le[i] <= es->step_hist_le[i - 1]) break;
        if (es->step_hist_le[i] == INT64_MAX) break; // the catch-all: counted in +Inf below
        cum += es->step_hist_count[i];
        tl_sb_printf(o, P "iteration_tokens_total_bucket{le=\"%lld\"} %lld\n",
                     (long long)es->step_hist_le[i], (long long)cum);
    }
    tl_sb_printf(o, P "iteration_tokens_total_bucket{le=\"+Inf\"} %lld\n", (long long)n_steps);
    tl_sb_printf(o, P "iteration_tokens_total_sum %lld\n", (long long)es->step_tokens_sum);
    tl_sb_printf(o, P "iteration_tokens_total_count %lld\n", (long long)n_steps);

    head(o, "http_requests_total", "counter", "HTTP responses sent, by status code.");
    for (int i = 0; i < TL_METRICS_N_CODES; i++)
        tl_sb_printf(o, P "http_requests_total{code=\"%d\"} %lld\n", http_codes[i],
                     (long long)m->http_by_code[i]);
    tl_sb_printf(o, P "http_requests_total{code=\"other\"} %lld\n",
                 (long long)m->http_by_code[TL_METRICS_N_CODES]);
    scalar(o, "client_disconnects_total", "counter",
           "Requests cancelled because the client closed the connection.",
           (double)m->client_disconnects);

    // vLLM's names for what the inference gateway's endpoint picker reads (same values).
    tl_sb_printf(o,
                 "# HELP vllm:num_requests_waiting Requests waiting to be scheduled.\n"
                 "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting %lld\n"
                 "# HELP vllm:num_requests_running Requests being prefilled or decoded.\n"
                 "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running %lld\n"
                 "# HELP vllm:kv_cache_usage_perc KV cache usage (0 to 1).\n"
                 "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc %.17g\n"
                 "# HELP vllm:cache_config_info KV cache configuration.\n"
                 "# TYPE vllm:cache_config_info gauge\n"
                 "vllm:cache_config_info{block_size=\"%lld\",num_gpu_blocks=\"%lld\"} 1\n",
                 (long long)es->n_waiting, (long long)es->n_running, usage,
                 (long long)es->kv_block_size, (long long)es->kv_blocks_total);
}
