/*
 * bench_sched: the real scheduler (src/engine/sched.c, through the whole engine) under a
 * simulated serving load, on a virtual clock. A fake backend charges each step a cost from a
 * linear model of the forward pass (fixed + per prefill token + per decoding sequence,
 * calibrated on the 110M Q8_0 model, 2 threads, idle machine: see bench/README.md), and closed-
 * loop clients behave as `tokenloom bench --concurrency C` does: C requests at once, each
 * finished one replaced by a new one after a round trip. So scheduling policies can be compared
 * without the noise of a shared machine (the real server is measured by serving_latency.py).
 *
 * Reported per (policy, clients): queueing delay (submission to first scheduled), TTFT, ITL,
 * output tok/s, and the TTFT p99 of the steady state (without the first C requests, which all
 * arrive at t = 0 and must queue behind each other's prompts whatever the policy).
 *
 * Threads: one; the engine runs on the calling thread with no compute pool.
 */
#include "engine/engine_impl.h"

#include "core/alloc.h"
#include "core/hash.h"
#include "core/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cost_model {
    double fixed_ms, prefill_ms, decode_ms; // per step, per prefill token, per decoding seq
};

struct sim_req {
    double submit_ms, sched_ms, first_ms, last_ms, done_ms;
    int64_t n_out;
    int client;
    bool scheduled;
    struct sim *sim;
};

struct sim {
    struct cost_model cost;
    double jitter; // each step's cost is scaled by a uniform factor in [1 - jitter, 1 + jitter]
    uint64_t rng;
    tl_engine *e;
    double now_ms, step_end_ms, rtt_ms;
    bool forwarded;
    struct sim_req *reqs;
    int64_t n_reqs, n_sent, n_done;
    double *next_arrival; // per client; INFINITY = none
    int n_clients;
    double *itl;
    int64_t n_itl, cap_itl;
    int64_t n_steps, n_out_total;
};

// Uniform in [0, 1) (xorshift64*).
static double uniform(uint64_t *s)
{
    return tl_xorshift64s_unit(s);
}

static tl_status sim_forward(void *ctx, const struct tl_batch *b, const struct tl_kv_pages *kv,
                             float *logits)
{
    (void)kv;
    struct sim *m = ctx;
    int64_t n_pre = 0, n_dec = 0;
    for (int64_t i = 0; i < m->e->n_b_seqs; i++) {
        struct tl_seq *s = m->e->b_seqs[i];
        struct sim_req *r = s->user;
        if (!r->scheduled) {
            r->scheduled = true;
            r->sched_ms = m->now_ms;
        }
        if (s->n_computed >= s->n_prompt && s->sched_n == 1)
            n_dec++;
        else
            n_pre += s->sched_n;
    }
    double ms = m->cost.fixed_ms + m->cost.prefill_ms * n_pre + m->cost.decode_ms * n_dec;
    m->step_end_ms = m->now_ms + ms * (1 + m->jitter * (2 * uniform(&m->rng) - 1));
    m->forwarded = true;
    m->n_steps++;
    // Token 1 always wins (argmax at temperature 0); the values do not matter.
    for (int64_t o = 0; o < b->n_out; o++)
        for (int v = 0; v < 8; v++)
            logits[o * 8 + v] = v == 1 ? 1.0f : 0.0f;
    return TL_OK;
}

static tl_status sim_detok_push(void *ctx, void *state, int32_t id, char **out, size_t *len,
                                size_t *cap)
{
    (void)ctx, (void)state, (void)id, (void)out, (void)len, (void)cap;
    return TL_OK;
}

static void push_itl(struct sim *m, double gap)
{
    if (m->n_itl == m->cap_itl) {
        void *p = m->itl;
        size_t cap = (size_t)m->cap_itl;
        if (!tl_grow(&p, &cap, (size_t)m->n_itl + 1, sizeof(double))) abort();
        m->itl = p;
        m->cap_itl = (int64_t)cap;
    }
    m->itl[m->n_itl++] = gap;
}

static void submit(struct sim *m, int client);

static void on_event(void *user, const struct tl_event *ev)
{
    struct sim_req *r = user;
    struct sim *m = r->sim;
    double t = m->step_end_ms; // events go out when the step's forward pass is done
    if (ev->type == TL_EVENT_TOKEN) {
        if (!r->n_out)
            r->first_ms = t;
        else
            push_itl(m, t - r->last_ms);
        r->last_ms = t;
        r->n_out++;
        m->n_out_total++;
    } else if (ev->type == TL_EVENT_DONE) {
        r->done_ms = t;
        m->n_done++;
        // The client's round trip: uniform in [0, 2 rtt].
        m->next_arrival[r->client] =
            m->n_sent < m->n_reqs ? t + 2 * m->rtt_ms * uniform(&m->rng) : INFINITY;
    }
}

static int32_t prompt_len = 130, gen_len = 64;

static void submit(struct sim *m, int client)
{
    struct sim_req *r = &m->reqs[m->n_sent];
    memset(r, 0, sizeof(*r));
    r->sim = m;
    r->client = client;
    r->submit_ms = m->next_arrival[client];
    int32_t *prompt = tl_malloc_array((size_t)prompt_len, sizeof(int32_t));
    for (int32_t i = 0; i < prompt_len; i++) // distinct prompts: no prefix-cache hits
        prompt[i] = 2 + (int32_t)(((uint64_t)m->n_sent * 7919 + (uint64_t)i * 104729) % 6);
    prompt[0] = 2 + (int32_t)(m->n_sent % 6);
    struct tl_request q;
    tl_request_default(&q);
    q.prompt_tokens = prompt;
    q.n_prompt_tokens = prompt_len;
    q.max_tokens = gen_len;
    q.ignore_eos = true;
    q.sampling.temperature = 0;
    q.on_event = on_event;
    q.user = r;
    if (tl_engine_submit(m->e, &q, NULL)) {
        fprintf(stderr, "bench_sched: submit: %s\n", tl_last_error());
        exit(1);
    }
    free(prompt);
    m->n_sent++;
    m->next_arrival[client] = INFINITY;
}

// --per-decode K: the engine's prefill_tokens_per_decode (-1, the default here: the fixed cap,
// as the tables in docs/internals/engine.md were made)
static int32_t g_per_decode = -1;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// numpy's default percentile (linear between closest ranks), as tokenloom bench.
static double pct(double *v, int64_t n, double p)
{
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    double rank = p / 100.0 * (double)(n - 1);
    int64_t lo = (int64_t)floor(rank), hi = lo + 1 < n ? lo + 1 : lo;
    return v[lo] + (v[hi] - v[lo]) * (rank - (double)lo);
}

struct result {
    double queue[3], ttft[3], ttft_steady99, itl[3], out_tok_s, mean_step_ms;
};

static void run(const struct cost_model *cost, int clients, int64_t n_reqs, int32_t budget,
                int32_t cap, int32_t backlog, double rtt_ms, double jitter, struct result *res)
{
    struct sim m;
    memset(&m, 0, sizeof(m));
    m.cost = *cost;
    m.rtt_ms = rtt_ms;
    m.jitter = jitter;
    m.rng = 0x9E3779B97F4A7C15ull;
    m.n_clients = clients;
    m.n_reqs = n_reqs;
    m.reqs = tl_calloc_array((size_t)n_reqs, sizeof(*m.reqs));
    m.next_arrival = tl_calloc_array((size_t)clients, sizeof(double)); // all due at t = 0
    struct tl_engine_backend be = {
        .ctx = &m,
        .n_vocab = 8,
        .n_ctx = 4096,
        .forward = sim_forward,
        .detok_push = sim_detok_push,
    };
    struct tl_engine_config cfg;
    tl_engine_config_default(&cfg);
    cfg.max_tokens_per_step = budget;
    cfg.max_prefill_tokens_decoding = cap;
    cfg.prefill_backlog_tokens = backlog;
    cfg.prefill_tokens_per_decode = g_per_decode;
    cfg.prefix_caching = false; // the load generator's prompts are random: no hits
    cfg.max_batch_size = clients > 64 ? clients : 64;
    cfg.kv_blocks = (int64_t)cfg.max_batch_size * ((prompt_len + gen_len) / 16 + 2);
    if (tl__engine_create_with(&be, &cfg, &m.e)) {
        fprintf(stderr, "bench_sched: %s\n", tl_last_error());
        exit(1);
    }
    int64_t n_pending = 0;
    while (m.n_done < n_reqs) {
        double next = INFINITY;
        for (int c = 0; c < clients; c++) {
            if (m.next_arrival[c] <= m.now_ms && m.n_sent < n_reqs) submit(&m, c);
            if (m.next_arrival[c] < next) next = m.next_arrival[c];
        }
        m.forwarded = false;
        if (tl_engine_step(m.e, &n_pending)) {
            fprintf(stderr, "bench_sched: step: %s\n", tl_last_error());
            exit(1);
        }
        if (m.forwarded)
            m.now_ms = m.step_end_ms;
        else if (next < INFINITY)
            m.now_ms = next > m.now_ms ? next : m.now_ms; // idle until the next arrival
        else if (m.n_done < n_reqs) {
            fprintf(stderr, "bench_sched: stalled with %lld pending\n", (long long)n_pending);
            exit(1);
        }
    }
    double *q = tl_malloc_array((size_t)n_reqs, sizeof(double));
    double *t = tl_malloc_array((size_t)n_reqs, sizeof(double));
    double *ts = tl_malloc_array((size_t)n_reqs, sizeof(double));
    int64_t n_steady = 0;
    double end = 0;
    for (int64_t i = 0; i < n_reqs; i++) {
        struct sim_req *r = &m.reqs[i];
        q[i] = r->sched_ms - r->submit_ms;
        t[i] = r->first_ms - r->submit_ms;
        if (i >= clients) ts[n_steady++] = t[i];
        if (r->done_ms > end) end = r->done_ms;
    }
    const double ps[3] = {50, 90, 99};
    for (int k = 0; k < 3; k++) {
        res->queue[k] = pct(q, n_reqs, ps[k]);
        res->ttft[k] = pct(t, n_reqs, ps[k]);
        res->itl[k] = pct(m.itl, m.n_itl, ps[k]);
    }
    res->ttft_steady99 = pct(ts, n_steady, 99);
    res->out_tok_s = (double)m.n_out_total / (end / 1000.0);
    res->mean_step_ms = end / (double)m.n_steps;
    free(q), free(t), free(ts), free(m.itl), free(m.reqs), free(m.next_arrival);
    tl_engine_destroy(m.e);
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_sched [--clients 8,32,64] [--requests-per-client N (20)]\n"
                    "                   [--caps 512,256,128] [--backlog -1,2048] [--per-decode K] "
                    "[--budget 512]\n"
                    "                   [--prompt 130] [--gen 64]\n"
                    "                   [--cost FIXED_MS,PREFILL_MS_PER_TOKEN,DECODE_MS_PER_SEQ]\n"
                    "                   [--rtt-ms 1] [--jitter 0.1]\n");
    exit(2);
}

static int parse_list(const char *s, int *out, int max)
{
    int n = 0;
    while (*s && n < max) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < -1 || v == 0) usage();
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

int main(int argc, char **argv)
{
    tl_log_set_level(TL_LOG_ERROR);
    int clients[16] = {8, 32, 64}, caps[16] = {512, 256, 128}, backlogs[16] = {-1};
    int n_clients = 3, n_caps = 3, n_backlogs = 1;
    int32_t budget = 512;
    double per_client = 20, rtt_ms = 1, jitter = 0.1;
    // 110M Q8_0, 2 threads (issue 10's table): B=1 238, B=8 870, B=32 1134, B=64 1232 decode
    // tok/s -> 3.1 ms + 0.764 ms per sequence; prefill ~2900-3100 tok/s -> 0.33 ms per token.
    struct cost_model cost = {3.1, 0.33, 0.764};
    if (argc % 2 == 0) usage(); // flags come in pairs
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--clients"))
            n_clients = parse_list(v, clients, 16);
        else if (!strcmp(a, "--caps"))
            n_caps = parse_list(v, caps, 16);
        else if (!strcmp(a, "--backlog"))
            n_backlogs = parse_list(v, backlogs, 16);
        else if (!strcmp(a, "--per-decode"))
            g_per_decode = atoi(v);
        else if (!strcmp(a, "--budget"))
            budget = atoi(v);
        else if (!strcmp(a, "--prompt"))
            prompt_len = atoi(v);
        else if (!strcmp(a, "--gen"))
            gen_len = atoi(v);
        else if (!strcmp(a, "--requests-per-client"))
            per_client = atof(v);
        else if (!strcmp(a, "--jitter"))
            jitter = atof(v);
        else if (!strcmp(a, "--rtt-ms"))
            rtt_ms = atof(v);
        else if (!strcmp(a, "--cost")) {
            if (sscanf(v, "%lf,%lf,%lf", &cost.fixed_ms, &cost.prefill_ms, &cost.decode_ms) != 3)
                usage();
        } else
            usage();
    }
    if (budget < 1 || prompt_len < 1 || gen_len < 1 || per_client < 1) usage();
    printf("cost model: %.2f ms + %.3f ms/prefill token + %.3f ms/decoding seq, +-%.0f%% per "
           "step; prompt %d, gen %d, budget %d, rtt 0-%.1f ms, %.0f requests per client\n",
           cost.fixed_ms, cost.prefill_ms, cost.decode_ms, jitter * 100, prompt_len, gen_len,
           budget, 2 * rtt_ms, per_client);
    printf("| prefill cap | backlog | clients | out tok/s | mean step ms | queue p50/p90/p99 ms | "
           "TTFT p50/p90/p99 ms | TTFT p99 steady ms | ITL p50/p90/p99 ms |\n");
    printf("|---:|---:|---:|---:|---:|---|---|---:|---|\n");
    for (int k = 0; k < n_caps; k++)
        for (int d = 0; d < n_backlogs; d++)
            for (int c = 0; c < n_clients; c++) {
                struct result r;
                run(&cost, clients[c], (int64_t)(clients[c] * per_client), budget, caps[k],
                    backlogs[d], rtt_ms, jitter, &r);
                printf("| %d | %d | %d | %.0f | %.1f | %.0f / %.0f / %.0f | %.0f / %.0f / %.0f | "
                       "%.0f | "
                       "%.0f / %.0f / %.0f |\n",
                       caps[k], backlogs[d], clients[c], r.out_tok_s, r.mean_step_ms, r.queue[0],
                       r.queue[1], r.queue[2], r.ttft[0], r.ttft[1], r.ttft[2], r.ttft_steady99,
                       r.itl[0], r.itl[1], r.itl[2]);
                fflush(stdout);
            }
    return 0;
}
