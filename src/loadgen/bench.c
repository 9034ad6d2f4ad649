/*
 * The load generator behind `tokenloom bench` (see bench.h).
 *
 * DESIGN
 * One libevent loop on the calling thread. The request list is drawn up front from the seed
 * (prompt token ids, prompt and output lengths, arrival times), so a run is reproducible.
 * Arrivals: with --rate R the gaps are exponential with mean 1/R (a Poisson process); without,
 * every request is due at once. A due request starts when fewer than --concurrency are in
 * flight, otherwise it waits for one to finish; latencies are measured from the moment it is
 * actually sent. Each request gets its own connection (loopback connects are cheap and this
 * keeps one request's slowness from delaying another's), streams with include_usage, and its
 * SSE body is parsed as it arrives: the first non-empty text chunk stamps TTFT, later ones add
 * inter-token gaps, the usage chunk gives the token counts.
 *
 * Prompts are token-id lists (ids drawn uniformly from [3, vocab_size) as the server reports
 * it in /v1/models), so their lengths are exact; outputs use ignore_eos so that they are too.
 *
 * Threads: everything runs on the calling thread.
 */
#include "loadgen/bench.h"

#include "loadgen/report.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/sse.h"
#include "core/strbuf.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

// ---- statistics ------------------------------------------------------------------------------

double tl_bench_uniform(uint64_t *rng)
{
    if (!*rng) *rng = TL_GOLDEN64; // xorshift64* must not start at 0
    return tl_xorshift64s_unit(rng);
}

double tl_bench_exp(uint64_t *rng, double mean)
{
    return -mean * log1p(-tl_bench_uniform(rng));
}

bool tl_bench_dist_parse(const char *s, struct tl_bench_dist *out)
{
    char *end;
    if (!strncmp(s, "exp:", 4)) {
        double m = strtod(s + 4, &end);
        if (end == s + 4 || *end || !(m >= 1) || m > 1e7) return false;
        *out = (struct tl_bench_dist){TL_DIST_EXP, m, 0};
        return true;
    }
    double a = strtod(s, &end);
    if (end == s || !(a >= 1) || a > 1e7) return false;
    if (*end == '\0') {
        *out = (struct tl_bench_dist){TL_DIST_FIXED, floor(a), 0};
        return true;
    }
    if (*end != '-') return false;
    const char *p = end + 1;
    double b = strtod(p, &end);
    if (end == p || *end || !(b >= a) || b > 1e7) return false;
    *out = (struct tl_bench_dist){TL_DIST_UNIFORM, floor(a), floor(b)};
    return true;
}

int64_t tl_bench_dist_draw(const struct tl_bench_dist *d, uint64_t *rng)
{
    double v;
    switch (d->kind) {
    case TL_DIST_UNIFORM:
        v = d->a + floor(tl_bench_uniform(rng) * (d->b - d->a + 1));
        break;
    case TL_DIST_EXP:
        v = round(tl_bench_exp(rng, d->a));
        break;
    default:
        v = d->a;
        break;
    }
    return v < 1 ? 1 : (int64_t)v;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double tl_bench_percentile(double *v, int64_t n, double p)
{
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    double rank = p / 100.0 * (double)(n - 1);
    int64_t lo = (int64_t)floor(rank);
    int64_t hi = lo + 1 < n ? lo + 1 : lo;
    double frac = rank - (double)lo;
    return v[lo] + (v[hi] - v[lo]) * frac;
}

void tl_bench_config_default(struct tl_bench_config *c)
{
    memset(c, 0, sizeof(*c));
    c->url = "http://127.0.0.1:8000";
    c->concurrency = 1;
    c->n_requests = 100;
    c->prompt_len = (struct tl_bench_dist){TL_DIST_FIXED, 32, 0};
    c->output_len = (struct tl_bench_dist){TL_DIST_FIXED, 64, 0};
    c->seed = 1;
    c->timeout_s = 600;
}

// ---- the run ---------------------------------------------------------------------------------

struct breq {
    struct bench *b;
    int64_t i;
    double due_s; // arrival time after the start
    int64_t prompt_len, output_len;
    char *body;                     // owned request JSON
    struct evhttp_connection *conn; // freed by libevent on completion
    struct tl_sse_parser sse;
    int64_t t_send_us, t_first_us, t_last_us, t_end_us;
    int64_t out_tokens, prompt_tokens;
    bool got_done, ok, finished;
    double *itl; // owned gaps (seconds)
    int64_t n_itl, cap_itl;
};

struct bench {
    const struct tl_bench_config *c;
    struct event_base *base;
    struct evhttp_uri *uri;
    const char *host;
    int port;
    char model[256];
    int64_t vocab, max_len;
    struct breq *reqs;
    int64_t n, next, in_flight, n_done;
    int64_t t0_us;
    struct event *timer;
    struct tl_bench_result *res;
};

static void start_due(struct bench *b);

static void add_auth(struct bench *b, struct evkeyvalq *h)
{
    char host[300];
    snprintf(host, sizeof(host), "%s:%d", b->host, b->port);
    evhttp_add_header(h, "Host", host);
    if (b->c->api_key) {
        char auth[512];
        snprintf(auth, sizeof(auth), "Bearer %s", b->c->api_key);
        evhttp_add_header(h, "Authorization", auth);
    }
}

static bool on_sse(void *user, const char *data, size_t len)
{
    struct breq *r = user;
    if (len == 6 && !memcmp(data, "[DONE]", 6)) {
        r->got_done = true;
        return true;
    }
    json_t *j = json_loadb(data, len, 0, NULL);
    if (!j) return true;
    json_t *u = json_object_get(j, "usage");
    if (json_is_object(u)) {
        r->out_tokens = json_integer_value(json_object_get(u, "completion_tokens"));
        r->prompt_tokens = json_integer_value(json_object_get(u, "prompt_tokens"));
    }
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    json_t *t = json_object_get(c, "text");
    if (!t) t = json_object_get(json_object_get(c, "delta"), "content");
    if (json_is_string(t) && json_string_length(t) > 0) {
        int64_t now = tl_time_us();
        if (!r->t_first_us) {
            r->t_first_us = now;
        } else {
            if (r->n_itl == r->cap_itl) {
                void *p = r->itl;
                size_t cap = (size_t)r->cap_itl;
                if (tl_grow(&p, &cap, (size_t)r->n_itl + 1, sizeof(double))) {
                    r->itl = p;
                    r->cap_itl = (int64_t)cap;
                }
            }
            if (r->n_itl < r->cap_itl) r->itl[r->n_itl++] = (double)(now - r->t_last_us) / 1e6;
        }
        r->t_last_us = now;
    }
    json_decref(j);
    return true;
}

static void on_chunk(struct evhttp_request *req, void *arg)
{
    struct breq *r = arg;
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    if (!n) return;
    const char *p = (const char *)evbuffer_pullup(in, -1);
    if (p) tl_sse_feed(&r->sse, p, n, on_sse, r);
    evbuffer_drain(in, n);
}

static void note_error(struct bench *b, const char *fmt, const char *detail)
{
    if (!b->res->first_error[0])
        snprintf(b->res->first_error, sizeof(b->res->first_error), fmt, detail);
}

static void on_done(struct evhttp_request *req, void *arg)
{
    struct breq *r = arg;
    struct bench *b = r->b;
    if (r->finished) return;
    r->finished = true;
    r->t_end_us = tl_time_us();
    int status = req ? evhttp_request_get_response_code(req) : 0;
    if (req && status == 200) {
        on_chunk(req, r); // anything not yet delivered through the chunk callback
        r->ok = r->got_done && r->t_first_us > 0;
        if (!r->ok) note_error(b, "%s", "a stream ended without [DONE] or without tokens");
    } else if (req) {
        struct evbuffer *in = evhttp_request_get_input_buffer(req);
        size_t n = evbuffer_get_length(in);
        char msg[200];
        snprintf(msg, sizeof(msg), "HTTP %d: %.*s", status, (int)(n < 150 ? n : 150),
                 n ? (const char *)evbuffer_pullup(in, -1) : "");
        note_error(b, "%s", msg);
    } else {
        note_error(b, "%s", "connection failed or timed out");
    }
    b->in_flight--;
    b->n_done++;
    if (b->n_done == b->n)
        event_base_loopbreak(b->base);
    else
        start_due(b);
}

static void send_one(struct bench *b, struct breq *r)
{
    r->conn = evhttp_connection_base_new(b->base, NULL, b->host, (ev_uint16_t)b->port);
    struct evhttp_request *req = evhttp_request_new(on_done, r);
    if (!r->conn || !req) {
        if (req) evhttp_request_free(req);
        if (r->conn) evhttp_connection_free(r->conn);
        b->in_flight++;
        on_done(NULL, r);
        return;
    }
    evhttp_connection_set_timeout(r->conn, (int)ceil(b->c->timeout_s));
    evhttp_connection_free_on_completion(r->conn);
    evhttp_request_set_chunked_cb(req, on_chunk);
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    add_auth(b, h);
    evhttp_add_header(h, "Content-Type", "application/json");
    evhttp_add_header(h, "Connection", "close");
    evbuffer_add(evhttp_request_get_output_buffer(req), r->body, strlen(r->body));
    r->t_send_us = tl_time_us();
    b->in_flight++;
    if (evhttp_make_request(r->conn, req, EVHTTP_REQ_POST,
                            b->c->chat ? "/v1/chat/completions" : "/v1/completions") != 0) {
        // libevent freed req; the connection is ours to free.
        evhttp_connection_free(r->conn);
        on_done(NULL, r);
    }
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    start_due(arg);
}

// Starts every request that is due, as concurrency allows; arms the timer for the next one.
static void start_due(struct bench *b)
{
    double now_s = (double)(tl_time_us() - b->t0_us) / 1e6;
    while (b->next < b->n) {
        struct breq *r = &b->reqs[b->next];
        if (r->due_s > now_s) {
            double wait = r->due_s - now_s;
            struct timeval tv = {(time_t)wait, (suseconds_t)((wait - floor(wait)) * 1e6)};
            evtimer_add(b->timer, &tv);
            return;
        }
        if (b->c->concurrency > 0 && b->in_flight >= b->c->concurrency) return;
        b->next++;
        send_one(b, r);
    }
}

// ---- /v1/models ------------------------------------------------------------------------------

struct fetch {
    struct event_base *base;
    int status;
    char *body;
};

static void on_fetch(struct evhttp_request *req, void *arg)
{
    struct fetch *f = arg;
    f->status = req ? evhttp_request_get_response_code(req) : 0;
    if (req) {
        struct evbuffer *in = evhttp_request_get_input_buffer(req);
        size_t n = evbuffer_get_length(in);
        f->body = tl_strndup(n ? (const char *)evbuffer_pullup(in, -1) : "", n);
    }
    event_base_loopbreak(f->base);
}

static tl_status fetch_model(struct bench *b)
{
    struct fetch f = {b->base, 0, NULL};
    struct evhttp_connection *conn =
        evhttp_connection_base_new(b->base, NULL, b->host, (ev_uint16_t)b->port);
    struct evhttp_request *req = conn ? evhttp_request_new(on_fetch, &f) : NULL;
    if (!req) {
        if (conn) evhttp_connection_free(conn);
        return tl__errorf(TL_ERR_NOMEM, "bench: out of memory");
    }
    evhttp_connection_set_timeout(conn, 30);
    add_auth(b, evhttp_request_get_output_headers(req));
    if (evhttp_make_request(conn, req, EVHTTP_REQ_GET, "/v1/models") == 0)
        event_base_dispatch(b->base);
    evhttp_connection_free(conn);
    json_t *j = f.body ? json_loads(f.body, 0, NULL) : NULL;
    free(f.body);
    json_t *m = json_array_get(json_object_get(j, "data"), 0);
    const char *id = json_string_value(json_object_get(m, "id"));
    if (f.status != 200 || !id) {
        json_decref(j);
        return tl__errorf(TL_ERR_IO, "bench: GET %s/v1/models failed (HTTP %d)", b->c->url,
                          f.status);
    }
    snprintf(b->model, sizeof(b->model), "%s", id);
    b->vocab = json_integer_value(json_object_get(m, "vocab_size"));
    b->max_len = json_integer_value(json_object_get(m, "max_model_len"));
    if (b->vocab < 4) b->vocab = 256; // an older server: ids below 256 exist in any vocabulary
    if (b->max_len < 2) b->max_len = 2048;
    json_decref(j);
    return TL_OK;
}

// ---- setup and results -----------------------------------------------------------------------

static char *make_body(struct bench *b, struct breq *r, uint64_t *rng)
{
    json_t *o = json_object();
    json_object_set_new(o, "model", json_string(b->model));
    if (b->c->chat) {
        // Words from a fixed list; the token count only approximates prompt_len.
        static const char *words[] = {"the", "cat", "sat",  "on",   "a",   "mat", "and",  "dog",
                                      "ran", "to",  "park", "with", "big", "red", "ball", "sun"};
        struct tl_sb sb;
        tl_sb_init(&sb);
        for (int64_t k = 0; k < r->prompt_len; k++) {
            if (k) tl_sb_add(&sb, " ", 1);
            tl_sb_adds(&sb, words[(int)(tl_bench_uniform(rng) * 16)]);
        }
        json_t *msg = json_pack("{ss ss}", "role", "user", "content", sb.buf ? sb.buf : "");
        tl_sb_free(&sb);
        json_object_set_new(o, "messages", json_pack("[o]", msg));
        json_object_set_new(o, "max_completion_tokens", json_integer(r->output_len));
    } else {
        json_t *ids = json_array();
        for (int64_t k = 0; k < r->prompt_len; k++)
            json_array_append_new(ids, json_integer(3 + (json_int_t)(tl_bench_uniform(rng) *
                                                                     (double)(b->vocab - 3))));
        json_object_set_new(o, "prompt", ids);
        json_object_set_new(o, "max_tokens", json_integer(r->output_len));
    }
    json_object_set_new(o, "temperature", json_real(0.0));
    json_object_set_new(o, "ignore_eos", json_true());
    json_object_set_new(o, "stream", json_true());
    json_object_set_new(o, "stream_options", json_pack("{sb}", "include_usage", 1));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

static void summarize(double *v, int64_t n, double out[4])
{
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += v[i];
    out[0] = n ? sum / (double)n : NAN;
    out[1] = tl_bench_percentile(v, n, 50);
    out[2] = tl_bench_percentile(v, n, 90);
    out[3] = tl_bench_percentile(v, n, 99);
}

static tl_status collect(struct bench *b)
{
    struct tl_bench_result *res = b->res;
    int64_t n_itl = 0;
    for (int64_t i = 0; i < b->n; i++)
        n_itl += b->reqs[i].n_itl;
    double *ttft = tl_malloc_array((size_t)b->n + 1, sizeof(double));
    double *tpot = tl_malloc_array((size_t)b->n + 1, sizeof(double));
    double *e2e = tl_malloc_array((size_t)b->n + 1, sizeof(double));
    double *itl = tl_malloc_array((size_t)n_itl + 1, sizeof(double));
    if (!ttft || !tpot || !e2e || !itl) {
        free(ttft), free(tpot), free(e2e), free(itl);
        return tl__errorf(TL_ERR_NOMEM, "bench: out of memory");
    }
    int64_t n_ok = 0, n_tpot = 0, k = 0;
    for (int64_t i = 0; i < b->n; i++) {
        struct breq *r = &b->reqs[i];
        if (!r->ok) {
            res->n_failed++;
            continue;
        }
        double lat = (double)(r->t_end_us - r->t_send_us) / 1e6;
        double first = (double)(r->t_first_us - r->t_send_us) / 1e6;
        ttft[n_ok] = first;
        e2e[n_ok] = lat;
        n_ok++;
        if (r->out_tokens > 1) tpot[n_tpot++] = (lat - first) / (double)(r->out_tokens - 1);
        res->output_tokens += r->out_tokens;
        res->prompt_tokens += r->prompt_tokens;
        for (int64_t j = 0; j < r->n_itl; j++)
            itl[k++] = r->itl[j];
    }
    res->n_ok = n_ok;
    summarize(ttft, n_ok, res->ttft);
    summarize(tpot, n_tpot, res->tpot);
    summarize(itl, k, res->itl);
    summarize(e2e, n_ok, res->e2e);
    double d = res->duration_s > 0 ? res->duration_s : 1e-9;
    res->req_per_s = (double)n_ok / d;
    res->out_tok_per_s = (double)res->output_tokens / d;
    res->total_tok_per_s = (double)(res->output_tokens + res->prompt_tokens) / d;
    free(ttft), free(tpot), free(e2e), free(itl);
    return TL_OK;
}

tl_status tl_bench_run(const struct tl_bench_config *c, struct tl_bench_result *out)
{
    memset(out, 0, sizeof(*out));
    if (c->n_requests <= 0 || (c->concurrency <= 0 && c->rate <= 0))
        return tl__errorf(TL_ERR_INVALID_ARG, "bench: need requests > 0 and a concurrency or rate");
    struct bench b;
    memset(&b, 0, sizeof(b));
    b.c = c;
    b.res = out;
    tl_status st = TL_OK;
    b.uri = evhttp_uri_parse(c->url);
    b.host = b.uri ? evhttp_uri_get_host(b.uri) : NULL;
    if (!b.host) {
        st = tl__errorf(TL_ERR_INVALID_ARG, "bench: '%s' is not a URL like http://host:port",
                        c->url);
        goto out;
    }
    b.port = evhttp_uri_get_port(b.uri) > 0 ? evhttp_uri_get_port(b.uri) : 80;
    b.base = event_base_new();
    b.timer = b.base ? evtimer_new(b.base, on_timer, &b) : NULL;
    if (!b.timer) {
        st = tl__errorf(TL_ERR_NOMEM, "bench: cannot create the event loop");
        goto out;
    }
    st = fetch_model(&b);
    if (st) goto out;
    b.n = c->n_requests;
    b.reqs = tl_calloc_array((size_t)b.n, sizeof(*b.reqs));
    if (!b.reqs) {
        st = tl__errorf(TL_ERR_NOMEM, "bench: out of memory");
        goto out;
    }
    uint64_t rng = c->seed * 0x9E3779B97F4A7C15ull + 1;
    double t = 0;
    for (int64_t i = 0; i < b.n; i++) {
        struct breq *r = &b.reqs[i];
        r->b = &b;
        r->i = i;
        if (c->rate > 0) t += tl_bench_exp(&rng, 1.0 / c->rate);
        r->due_s = c->rate > 0 ? t : 0;
        r->prompt_len = tl_bench_dist_draw(&c->prompt_len, &rng);
        r->output_len = tl_bench_dist_draw(&c->output_len, &rng);
        // Fit the server's context (chat adds template tokens: leave room).
        int64_t room = b.max_len - (c->chat ? 64 : 1);
        if (r->prompt_len > room - 1) r->prompt_len = room - 1 > 1 ? room - 1 : 1;
        if (r->prompt_len + r->output_len > room) r->output_len = room - r->prompt_len;
        if (r->output_len < 1) r->output_len = 1;
        tl_sse_parser_init(&r->sse);
        r->body = make_body(&b, r, &rng);
        if (!r->body) {
            st = tl__errorf(TL_ERR_NOMEM, "bench: out of memory");
            goto out;
        }
    }
    b.t0_us = tl_time_us();
    start_due(&b);
    if (b.n_done < b.n) event_base_dispatch(b.base);
    out->duration_s = (double)(tl_time_us() - b.t0_us) / 1e6;
    st = collect(&b);
out:
    if (b.reqs) {
        for (int64_t i = 0; i < b.n; i++) {
            free(b.reqs[i].body);
            free(b.reqs[i].itl);
            tl_sse_parser_free(&b.reqs[i].sse);
        }
        free(b.reqs);
    }
    if (b.timer) event_free(b.timer);
    if (b.base) event_base_free(b.base);
    if (b.uri) evhttp_uri_free(b.uri);
    return st;
}

void tl_bench_print(const struct tl_bench_config *c, const struct tl_bench_result *r, bool json,
                    FILE *f)
{
    const double *v[4] = {r->ttft, r->tpot, r->itl, r->e2e};
    if (json) {
        tl_bench_write_level_json(c, r, f);
        return;
    }
    const char *titles[4] = {"Time to first token", "Time per output token (excl. 1st)",
                             "Inter-token latency", "End-to-end latency"};
    fprintf(f, "============ Serving Benchmark Result ============\n");
    fprintf(f, "%-40s %d\n", "Max concurrency:", c->concurrency);
    if (c->rate > 0)
        fprintf(f, "%-40s %.2f\n", "Request rate (req/s):", c->rate);
    else
        fprintf(f, "%-40s %s\n", "Request rate (req/s):", "inf");
    fprintf(f, "%-40s %lld\n", "Successful requests:", (long long)r->n_ok);
    fprintf(f, "%-40s %lld\n", "Failed requests:", (long long)r->n_failed);
    fprintf(f, "%-40s %.2f\n", "Benchmark duration (s):", r->duration_s);
    fprintf(f, "%-40s %lld\n", "Total input tokens:", (long long)r->prompt_tokens);
    fprintf(f, "%-40s %lld\n", "Total generated tokens:", (long long)r->output_tokens);
    fprintf(f, "%-40s %.2f\n", "Request throughput (req/s):", r->req_per_s);
    fprintf(f, "%-40s %.2f\n", "Output token throughput (tok/s):", r->out_tok_per_s);
    fprintf(f, "%-40s %.2f\n", "Total token throughput (tok/s):", r->total_tok_per_s);
    for (int i = 0; i < 4; i++) {
        fprintf(f, "---------------%s---------------\n", titles[i]);
        fprintf(f, "Mean %-35s %.2f\n", "(ms):", v[i][0] * 1e3);
        fprintf(f, "P50 %-36s %.2f\n", "(ms):", v[i][1] * 1e3);
        fprintf(f, "P90 %-36s %.2f\n", "(ms):", v[i][2] * 1e3);
        fprintf(f, "P99 %-36s %.2f\n", "(ms):", v[i][3] * 1e3);
    }
    fprintf(f, "==================================================\n");
    if (r->first_error[0]) fprintf(f, "first error: %s\n", r->first_error);
}
