/*
 * End-to-end tests of the HTTP layer (src/server) against a scripted fake model and engine, so
 * that routing, validation errors, SSE framing, client disconnects, the queue bound and the
 * graceful stop are checked without the real engine. The fake engine generates letters:
 * token k of a request with seed S is 'a' + (S + k) % 26, one token per running request per
 * step; its tokenizer maps each byte b to id b + 3 and prepends BOS (1).
 *
 * The real model and engine are exercised by tests/http (curl and the openai npm package).
 */
#include "tl_test.h"

#include "core/clock.h"
#include "server/server.h"
#include "server/sse.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <time.h>

// ---- the fake model --------------------------------------------------------------------------

static void fake_info(const tl_model *m, struct tl_model_info *out)
{
    (void)m;
    memset(out, 0, sizeof(*out));
    out->arch = "llama";
    out->name = "fake";
    out->path = "/models/fake-model.gguf";
    out->n_vocab = 300;
    out->n_ctx_train = 64;
    out->bos = 1;
    out->eos = 2;
    out->eot = -1;
}

static tl_status fake_tokenize(const tl_model *m, const char *text, size_t len, bool add_special,
                               bool parse_special, int32_t **ids, int64_t *n)
{
    (void)m;
    (void)parse_special;
    *ids = malloc((len + 1) * sizeof(int32_t));
    int64_t k = 0;
    if (add_special) (*ids)[k++] = 1;
    for (size_t i = 0; i < len; i++)
        (*ids)[k++] = (unsigned char)text[i] + 3;
    *n = k;
    return TL_OK;
}

static atomic_long n_detokenize; // calls of fake_detokenize

static char *fake_detokenize(const tl_model *m, const int32_t *ids, int64_t n, bool special)
{
    (void)m;
    atomic_fetch_add(&n_detokenize, 1);
    (void)special;
    char *s = malloc((size_t)n + 1);
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] >= 3) s[k++] = (char)(ids[i] - 3);
    s[k] = '\0';
    return s;
}

static size_t fake_token_text(const tl_model *m, int32_t id, char *buf, size_t cap)
{
    (void)m;
    if (id < 3) return 0;
    if (cap) buf[0] = (char)(id - 3);
    return 1;
}

// ---- the fake engine -------------------------------------------------------------------------

#define FAKE_MAX 256

struct fake_req {
    bool used, cancelled;
    uint64_t id;
    int32_t max_tokens, n_gen;
    int64_t n_prompt;
    uint64_t seed;
    int32_t n_logprobs;
    bool prompt_logprobs; // PROMPT_TOKEN events still to send (at the first step)
    int32_t prompt[64];
    tl_event_fn fn;
    void *user;
};

static struct fake_engine {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct fake_req r[FAKE_MAX];
    uint64_t next_id;
    atomic_int step_sleep_ms; // per step, so that streams take a while (set by the test thread)
    int64_t n_cancel_calls;
    int64_t n_submitted;
    int64_t n_finished[6];
} fe = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static tl_status fake_submit(tl_engine *e, const struct tl_request *r, uint64_t *id)
{
    (void)e;
    pthread_mutex_lock(&fe.mu);
    for (int i = 0; i < FAKE_MAX; i++) {
        if (fe.r[i].used) continue;
        fe.r[i] = (struct fake_req){.used = true,
                                    .id = ++fe.next_id,
                                    .max_tokens = r->max_tokens,
                                    .n_prompt = r->n_prompt_tokens,
                                    .seed = r->sampling.seed,
                                    .n_logprobs = r->sampling.n_logprobs,
                                    .prompt_logprobs = r->prompt_logprobs,
                                    .fn = r->on_event,
                                    .user = r->user};
        if (r->n_prompt_tokens > 64) fe.r[i].prompt_logprobs = false;
        if (fe.r[i].prompt_logprobs)
            memcpy(fe.r[i].prompt, r->prompt_tokens, (size_t)r->n_prompt_tokens * sizeof(int32_t));
        *id = fe.r[i].id;
        fe.n_submitted++;
        pthread_cond_broadcast(&fe.cv);
        pthread_mutex_unlock(&fe.mu);
        return TL_OK;
    }
    pthread_mutex_unlock(&fe.mu);
    return TL_ERR_FULL;
}

static tl_status fake_cancel(tl_engine *e, uint64_t id)
{
    (void)e;
    pthread_mutex_lock(&fe.mu);
    fe.n_cancel_calls++;
    tl_status st = TL_ERR_NOT_FOUND;
    for (int i = 0; i < FAKE_MAX; i++)
        if (fe.r[i].used && fe.r[i].id == id) {
            fe.r[i].cancelled = true;
            st = TL_OK;
        }
    pthread_cond_broadcast(&fe.cv);
    pthread_mutex_unlock(&fe.mu);
    return st;
}

static void done(struct fake_req *q, enum tl_finish_reason why)
{
    struct tl_event ev = {.type = TL_EVENT_DONE,
                          .request_id = q->id,
                          .text = "",
                          .finish = why,
                          .n_prompt_tokens = q->n_prompt,
                          .n_generated = q->n_gen,
                          .queue_us = 10,
                          .ttft_us = 100,
                          .total_us = 1000};
    fe.n_finished[why]++;
    q->used = false;
    q->fn(q->user, &ev);
}

static tl_status fake_step(tl_engine *e, int64_t *n_pending)
{
    (void)e;
    int sleep_ms = atomic_load(&fe.step_sleep_ms);
    if (sleep_ms) {
        struct timespec ts = {0, sleep_ms * 1000000L};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&fe.mu);
    int64_t pending = 0;
    for (int i = 0; i < FAKE_MAX; i++) {
        struct fake_req *q = &fe.r[i];
        if (!q->used) continue;
        if (q->cancelled) {
            done(q, TL_FINISH_CANCELLED);
            continue;
        }
        // Prompt logprobs as the engine gives them: all at once before the first token, the
        // first one NAN; prompt token k's is -k/4, its alternatives the token and 'z'.
        for (int64_t k = 0; q->prompt_logprobs && k < q->n_prompt; k++) {
            float lp = k ? -0.25f * (float)k : NAN;
            struct tl_token_logprob top[2] = {{q->prompt[k], lp}, {'z' + 3, -9.0f}};
            struct tl_event ev = {.type = TL_EVENT_PROMPT_TOKEN,
                                  .request_id = q->id,
                                  .text = "",
                                  .token = q->prompt[k],
                                  .logprob = lp,
                                  .top = k ? top : NULL,
                                  .n_top = k ? (q->n_logprobs < 2 ? q->n_logprobs : 2) : 0,
                                  .prompt_pos = k};
            q->fn(q->user, &ev);
        }
        q->prompt_logprobs = false;
        char c = (char)('a' + (q->seed + (uint64_t)q->n_gen) % 26);
        struct tl_token_logprob top[2] = {{c + 3, -0.5f}, {'z' + 3, -2.0f}};
        struct tl_event ev = {.type = TL_EVENT_TOKEN,
                              .request_id = q->id,
                              .text = &c,
                              .text_len = 1,
                              .token = c + 3,
                              .logprob = -0.5f,
                              .top = top,
                              .n_top = q->n_logprobs < 2 ? q->n_logprobs : 2};
        q->n_gen++;
        q->fn(q->user, &ev);
        if (q->n_gen >= q->max_tokens)
            done(q, TL_FINISH_LENGTH);
        else
            pending++;
    }
    pthread_mutex_unlock(&fe.mu);
    *n_pending = pending;
    return TL_OK;
}

static void fake_wait(tl_engine *e, int timeout_ms)
{
    (void)e;
    pthread_mutex_lock(&fe.mu);
    bool any = false;
    for (int i = 0; i < FAKE_MAX; i++)
        any = any || fe.r[i].used;
    if (!any) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)timeout_ms * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&fe.cv, &fe.mu, &ts);
    }
    pthread_mutex_unlock(&fe.mu);
}

static void fake_wake(tl_engine *e)
{
    (void)e;
    pthread_mutex_lock(&fe.mu);
    pthread_cond_broadcast(&fe.cv);
    pthread_mutex_unlock(&fe.mu);
}

static void fake_stats(tl_engine *e, struct tl_engine_stats *out)
{
    (void)e;
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&fe.mu);
    for (int i = 0; i < FAKE_MAX; i++)
        out->n_running += fe.r[i].used;
    out->kv_blocks_total = 100;
    out->kv_blocks_used = out->n_running;
    memcpy(out->finished_total, fe.n_finished, sizeof(fe.n_finished));
    pthread_mutex_unlock(&fe.mu);
}

static const struct tl_srv_backend fake_backend = {
    fake_info,   fake_tokenize, fake_detokenize, fake_token_text, fake_submit,
    fake_cancel, fake_step,     fake_wait,       fake_wake,       fake_stats,
};

// ---- a server in a thread --------------------------------------------------------------------

struct running {
    struct tl_server *s;
    pthread_t th;
    int rc;
};

static void *run_main(void *arg)
{
    struct running *r = arg;
    r->rc = tl_server_run(r->s);
    return NULL;
}

static int64_t running_requests(void);

// Overrides for the next start() (0 = the default).
static size_t s_max_unsent;
static int32_t s_max_seq_len;

static struct running *start(const char *api_key, size_t max_body, int max_queued)
{
    for (int i = 0; i < FAKE_MAX; i++)
        fe.r[i].used = false;
    fe.step_sleep_ms = 1;
    struct tl_server_config c;
    tl_server_config_default(&c);
    c.port = 0;
    c.backend = &fake_backend;
    c.model = (tl_model *)&fe; // never dereferenced by the fake
    c.engine_handle = (tl_engine *)&fe;
    c.api_key = api_key;
    if (max_body) c.max_body_bytes = max_body;
    if (max_queued) c.max_queued_requests = max_queued;
    c.shutdown_timeout_s = 5;
    if (s_max_unsent) c.max_unsent_bytes = s_max_unsent;
    if (s_max_seq_len) c.engine.max_seq_len = s_max_seq_len;
    struct running *r = calloc(1, sizeof(*r));
    r->s = tl_server_create(&c);
    assert_non_null(r->s);
    assert_int_equal(pthread_create(&r->th, NULL, run_main, r), 0);
    return r;
}

static int stop(struct running *r)
{
    tl_server_stop(r->s);
    pthread_join(r->th, NULL);
    tl_server_destroy(r->s);
    int rc = r->rc;
    free(r);
    return rc;
}

// ---- a minimal HTTP client -------------------------------------------------------------------

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    struct timeval tv = {20, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

static void send_all(int fd, const char *buf, size_t n)
{
    while (n) {
        ssize_t k = send(fd, buf, n, MSG_NOSIGNAL);
        if (k <= 0) return;
        buf += k;
        n -= (size_t)k;
    }
}

static void send_request(int fd, const char *method, const char *path, const char *body,
                         const char *extra_headers)
{
    char head[1024];
    snprintf(head, sizeof(head),
             "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%sContent-Length: %zu\r\n\r\n",
             method, path, extra_headers ? extra_headers : "", body ? strlen(body) : 0);
    send_all(fd, head, strlen(head));
    if (body) send_all(fd, body, strlen(body));
}

struct resp {
    int status;
    char headers[4096];
    char *body; // de-chunked, NUL-terminated
    size_t body_len;
};

static void resp_free(struct resp *r)
{
    free(r->body);
}

// Reads until EOF and parses status, headers and (chunked or plain) body.
static void read_response(int fd, struct resp *out)
{
    size_t cap = 1 << 16, len = 0;
    char *raw = malloc(cap);
    for (;;) {
        if (len + 4096 > cap) raw = realloc(raw, cap *= 2);
        ssize_t k = recv(fd, raw + len, cap - len - 1, 0);
        if (k <= 0) break;
        len += (size_t)k;
    }
    raw[len] = '\0';
    memset(out, 0, sizeof(*out));
    sscanf(raw, "HTTP/1.%*d %d", &out->status);
    char *end = strstr(raw, "\r\n\r\n");
    assert_non_null(end);
    size_t hl = (size_t)(end - raw);
    snprintf(out->headers, sizeof(out->headers), "%.*s", (int)hl, raw);
    char *b = end + 4;
    size_t bl = len - hl - 4;
    out->body = malloc(bl + 1);
    if (strcasestr(out->headers, "Transfer-Encoding: chunked")) {
        size_t o = 0;
        char *p = b;
        for (;;) {
            size_t n = strtoul(p, &p, 16);
            p = strstr(p, "\r\n") + 2;
            if (n == 0) break;
            memcpy(out->body + o, p, n);
            o += n;
            p += n + 2;
        }
        out->body_len = o;
    } else {
        memcpy(out->body, b, bl);
        out->body_len = bl;
    }
    out->body[out->body_len] = '\0';
    free(raw);
}

static void request(int port, const char *method, const char *path, const char *body,
                    const char *headers, struct resp *out)
{
    int fd = connect_to(port);
    send_request(fd, method, path, body, headers);
    read_response(fd, out);
    close(fd);
}

static json_t *body_json(const struct resp *r)
{
    json_error_t e;
    json_t *j = json_loads(r->body, 0, &e);
    if (!j) fail_msg("not JSON (%s): %s", e.text, r->body);
    return j;
}

// Expects an OpenAI error object with this status.
static void expect_error(int port, const char *method, const char *path, const char *body,
                         const char *headers, int status, const char *param)
{
    struct resp r;
    request(port, method, path, body, headers, &r);
    if (r.status != status)
        fail_msg("%s %s: status %d, want %d: %s", method, path, r.status, status, r.body);
    if (status != 413) { // libevent answers 413 itself, before the body reaches us
        json_t *j = body_json(&r);
        json_t *e = json_object_get(j, "error");
        assert_true(json_is_object(e));
        assert_true(json_is_string(json_object_get(e, "message")));
        assert_true(json_is_string(json_object_get(e, "type")));
        assert_non_null(json_object_get(e, "code"));
        json_t *pj = json_object_get(e, "param");
        if (param) assert_string_equal(json_string_value(pj), param);
        json_decref(j);
    }
    resp_free(&r);
}

static bool wait_until(bool (*cond)(void), int max_ms)
{
    for (int t = 0; t < max_ms; t += 5) {
        if (cond()) return true;
        struct timespec ts = {0, 5000000L};
        nanosleep(&ts, NULL);
    }
    return cond();
}

static int64_t running_requests(void)
{
    struct tl_engine_stats st;
    fake_stats(NULL, &st);
    return st.n_running;
}

static int64_t cancel_calls(void)
{
    pthread_mutex_lock(&fe.mu);
    int64_t n = fe.n_cancel_calls;
    pthread_mutex_unlock(&fe.mu);
    return n;
}

static bool engine_idle(void)
{
    return running_requests() == 0;
}

static int s_port;
static bool server_healthy(void)
{
    struct resp r;
    request(s_port, "GET", "/health", NULL, NULL, &r);
    resp_free(&r);
    return r.status == 200;
}

// ---- tests -----------------------------------------------------------------------------------

static void test_health_models_metrics(void **state)
{
    (void)state;
    struct running *sv = start(NULL, 0, 0);
    s_port = tl_server_port(sv->s);
    assert_true(wait_until(server_healthy, 5000));
    struct resp r;
    request(s_port, "GET", "/v1/models", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    json_t *m = json_array_get(json_object_get(j, "data"), 0);
    assert_string_equal(json_string_value(json_object_get(m, "id")), "fake");
    assert_string_equal(json_string_value(json_object_get(m, "chat_template")), "chatml");
    assert_true(json_is_true(json_object_get(m, "chat_template_fallback")));
    assert_int_equal(json_integer_value(json_object_get(m, "max_model_len")), 64);
    json_decref(j);
    resp_free(&r);
    request(s_port, "GET", "/metrics", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.headers, "text/plain"));
    assert_non_null(strstr(r.body, "\ntokenloom:kv_cache_usage_perc 0\n"));
    assert_non_null(strstr(r.body, "# TYPE tokenloom:time_to_first_token_seconds histogram"));
    resp_free(&r);
    assert_int_equal(stop(sv), 0);
}

static void test_completion_plain(void **state)
{
    (void)state;
    struct running *sv = start(NULL, 0, 0);
    s_port = tl_server_port(sv->s);
    assert_true(wait_until(server_healthy, 5000));
    struct resp r;
    request(s_port, "POST", "/v1/completions",
            "{\"model\":\"fake-model\",\"prompt\":[\"hi\",\"abc\"],\"max_tokens\":5,\"seed\":2,"
            "\"n\":2,\"logprobs\":1,\"echo\":true}",
            NULL, &r);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "text_completion");
    assert_true(!strncmp(json_string_value(json_object_get(j, "id")), "cmpl-", 5));
    assert_string_equal(json_string_value(json_object_get(j, "model")), "fake");
    json_t *ch = json_object_get(j, "choices");
    assert_int_equal(json_array_size(ch), 4);
    // choice i = prompt i/2, sample i%2 with seed 2 + i%2: letters from 'c' or 'd'.
    const char *want[4] = {"hicdefg", "hidefgh", "abccdefg", "abcdefgh"};
    for (int i = 0; i < 4; i++) {
        json_t *c = json_array_get(ch, (size_t)i);
        assert_int_equal(json_integer_value(json_object_get(c, "index")), i);
        assert_string_equal(json_string_value(json_object_get(c, "text")), want[i]);
        assert_string_equal(json_string_value(json_object_get(c, "finish_reason")), "length");
        json_t *lp = json_object_get(c, "logprobs");
        json_t *toks = json_object_get(lp, "tokens");
        // echo: one entry per prompt token (BOS renders as "") with the engine's prompt
        // logprobs (the first null: nothing predicts it), then the 5 generated
        size_t np = strlen(want[i]) - 5 + 1;
        assert_int_equal(json_array_size(toks), np + 5);
        json_t *tlp = json_object_get(lp, "token_logprobs"),
               *tops = json_object_get(lp, "top_logprobs");
        json_t *offs = json_object_get(lp, "text_offset");
        assert_int_equal(json_array_size(tlp), np + 5);
        assert_int_equal(json_array_size(tops), np + 5);
        assert_int_equal(json_array_size(offs), np + 5);
        assert_true(json_is_null(json_array_get(tlp, 0)));
        assert_true(json_is_null(json_array_get(tops, 0)));
        assert_string_equal(json_string_value(json_array_get(toks, 0)), "");
        for (size_t k = 1; k < np; k++) {
            double v = json_real_value(json_array_get(tlp, k));
            assert_true(isfinite(v) && v <= 0);
            assert_true(fabs(v + 0.25 * (double)k) < 1e-6);
            char tok[2] = {want[i][k - 1], 0};
            assert_string_equal(json_string_value(json_array_get(toks, k)), tok);
            json_t *t = json_array_get(tops, k);
            assert_int_equal(json_object_size(t), 1); // logprobs: 1
            assert_true(fabs(json_real_value(json_object_get(t, tok)) + 0.25 * (double)k) < 1e-6);
            assert_int_equal(json_integer_value(json_array_get(offs, k)), (json_int_t)(k - 1));
        }
        // Generated tokens continue at the end of the echoed prompt text.
        assert_int_equal(json_integer_value(json_array_get(offs, np)), (json_int_t)(np - 1));
        json_t *last = json_array_get(tlp, np + 4);
        assert_true(fabs(json_real_value(last) + 0.5) < 1e-6);
        json_t *top = json_array_get(tops, np);
        assert_int_equal(json_object_size(top), 1);
    }
    json_t *u = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")), 3 + 4);
    assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")), 20);
    assert_int_equal(json_integer_value(json_object_get(u, "total_tokens")), 27);
    assert_non_null(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens"));
    json_decref(j);
    resp_free(&r);
    assert_int_equal(stop(sv), 0);
}

struct sse_got {
    json_t *ev[64];
    int n;
    bool done;
};

static bool collect(void *user, const char *data, size_t len)
{
    struct sse_got *g = user;
    if (len == 6 && !memcmp(data, "[DONE]", 6)) {
        g->done = true;
        return true;
    }
    if (g->done) fail_msg("event after [DONE]");
    if (g->n < 64) g->ev[g->n++] = json_loadb(data, len, 0, NULL);
    return true;
}

static void test_streams(void **state)
{
    (void)state;
    struct running *sv = start(NULL, 0, 0);
    s_port = tl_server_port(sv->s);
    assert_true(wait_until(server_healthy, 5000));
    struct resp r;
    request(s_port, "POST", "/v1/completions",
            "{\"prompt\":\"x\",\"max_tokens\":3,\"seed\":0,\"stream\":true,"
            "\"stream_options\":{\"include_usage\":true}}",
            NULL, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.headers, "text/event-stream"));
    // Framing: every event is "data: <json>\n\n" and the stream ends with [DONE].
    assert_true(!strncmp(r.body, "data: {", 7));
    size_t bl = strlen(r.body);
    assert_true(bl > 16 && !strcmp(r.body + bl - 14, "data: [DONE]\n\n"));
    struct tl_sse_parser p;
    struct sse_got g = {0};
    tl_sse_parser_init(&p);
    assert_true(tl_sse_feed(&p, r.body, r.body_len, collect, &g));
    tl_sse_parser_free(&p);
    assert_true(g.done);
    assert_int_equal(g.n, 5); // a, b, c, the finish chunk, the usage chunk
    struct tl_sb text;
    tl_sb_init(&text);
    for (int i = 0; i < 4; i++) {
        assert_string_equal(json_string_value(json_object_get(g.ev[i], "object")),
                            "text_completion");
        assert_true(json_is_null(json_object_get(g.ev[i], "usage")));
        json_t *c = json_array_get(json_object_get(g.ev[i], "choices"), 0);
        tl_sb_adds(&text, json_string_value(json_object_get(c, "text")));
        json_t *fin = json_object_get(c, "finish_reason");
        if (i < 3)
            assert_true(json_is_null(fin));
        else
            assert_string_equal(json_string_value(fin), "length");
    }
    assert_string_equal(text.buf, "abc");
    tl_sb_free(&text);
    assert_int_equal(json_array_size(json_object_get(g.ev[4], "choices")), 0);
    json_t *u = json_object_get(g.ev[4], "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")), 3);
    assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")), 2);
    for (int i = 0; i < g.n; i++)
        json_decref(g.ev[i]);
    resp_free(&r);

    // Chat: the first chunk of each choice carries the role, then content deltas.
    request(s_port, "POST", "/v1/chat/completions",
            "{\"messages\":[{\"role\":\"user\",\"content\":\"hey\"}],\"max_completion_tokens\":2,"
            "\"seed\":7,\"stream\":true}",
            NULL, &r);
    assert_int_equal(r.status, 200);
    memset(&g, 0, sizeof(g));
    tl_sse_parser_init(&p);
    assert_true(tl_sse_feed(&p, r.body, r.body_len, collect, &g));
    tl_sse_parser_free(&p);
    assert_true(g.done);
    assert_int_equal(g.n, 4);
    json_t *d0 = json_object_get(json_array_get(json_object_get(g.ev[0], "choices"), 0), "delta");
    assert_string_equal(json_string_value(json_object_get(d0, "role")), "assistant");
    assert_string_equal(json_string_value(json_object_get(g.ev[0], "object")),
                        "chat.completion.chunk");
    json_t *d1 = json_object_get(json_array_get(json_object_get(g.ev[1], "choices"), 0), "delta");
    assert_string_equal(json_string_value(json_object_get(d1, "content")), "h");
    assert_null(json_object_get(d1, "role"));
    json_t *c3 = json_array_get(json_object_get(g.ev[3], "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(c3, "finish_reason")), "length");
    for (int i = 0; i < g.n; i++)
        json_decref(g.ev[i]);
    resp_free(&r);

    // Chat, not streamed.
    request(s_port, "POST", "/v1/chat/completions",
            "{\"messages\":[{\"role\":\"user\",\"content\":\"hey\"}],\"max_tokens\":3,\"seed\":0}",
            NULL, &r);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "chat.completion");
    json_t *msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    assert_string_equal(json_string_value(json_object_get(msg, "role")), "assistant");
    assert_string_equal(json_string_value(json_object_get(msg, "content")), "abc");
    // The ChatML prompt "<|im_start|>user\nhey<|im_end|>\n<|im_start|>assistant\n"; no BOS is
    // added to a rendered chat (the template writes its own, as vLLM tokenizes chats).
    json_t *u2 = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(u2, "prompt_tokens")),
                     (int)strlen("<|im_start|>user\nhey<|im_end|>\n<|im_start|>assistant\n"));
    json_decref(j);
    resp_free(&r);
    assert_int_equal(stop(sv), 0);
}

// The logprobs object of a choice with its arrays concatenated over stream chunks.
static void lp_append(json_t *acc, json_t *lp)
{
    const char *keys[4] = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
    for (int k = 0; k < 4; k++) {
        json_t *a = json_object_get(acc, keys[k]);
        if (!a) json_object_set_new(acc, keys[k], a = json_array());
        json_array_extend(a, json_object_get(lp, keys[k]));
    }
}

static void test_echo_logprobs_stream_and_not(void **state)
{
    (void)state;
    struct running *sv = start(NULL, 0, 0);
    s_port = tl_server_port(sv->s);
    assert_true(wait_until(server_healthy, 5000));
    const char *body = "{\"prompt\":\"xy\",\"max_tokens\":3,\"seed\":0,\"echo\":true,"
                       "\"logprobs\":2%s}";
    char req[256];
    struct resp r;
    snprintf(req, sizeof(req), body, "");
    request(s_port, "POST", "/v1/completions", req, NULL, &r);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(c, "text")), "xyabc");
    json_t *whole = json_incref(json_object_get(c, "logprobs"));
    // usage is unchanged: 3 prompt tokens (BOS x y), 3 generated.
    json_t *u = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")), 3);
    assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")), 3);
    json_decref(j);
    resp_free(&r);
    assert_int_equal(json_array_size(json_object_get(whole, "tokens")), 6);

    // Streamed: the first chunk echoes the prompt with its logprobs, then one chunk per token;
    // concatenated, the same arrays.
    snprintf(req, sizeof(req), body, ",\"stream\":true");
    request(s_port, "POST", "/v1/completions", req, NULL, &r);
    assert_int_equal(r.status, 200);
    struct tl_sse_parser p;
    struct sse_got g = {0};
    tl_sse_parser_init(&p);
    assert_true(tl_sse_feed(&p, r.body, r.body_len, collect, &g));
    tl_sse_parser_free(&p);
    assert_true(g.done);
    assert_int_equal(g.n, 5); // prompt, a, b, c, finish
    json_t *c0 = json_array_get(json_object_get(g.ev[0], "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(c0, "text")), "xy");
    assert_int_equal(json_array_size(json_object_get(json_object_get(c0, "logprobs"), "tokens")),
                     3);
    json_t *acc = json_object();
    struct tl_sb text;
    tl_sb_init(&text);
    for (int i = 0; i < 4; i++) {
        json_t *ci = json_array_get(json_object_get(g.ev[i], "choices"), 0);
        tl_sb_adds(&text, json_string_value(json_object_get(ci, "text")));
        lp_append(acc, json_object_get(ci, "logprobs"));
    }
    assert_string_equal(text.buf, "xyabc");
    tl_sb_free(&text);
    if (!json_equal(acc, whole)) {
        char *a = json_dumps(acc, 0), *b = json_dumps(whole, 0);
        fail_msg("streamed %s\nwhole %s", a, b);
    }
    json_decref(acc);
    json_decref(whole);
    for (int i = 0; i < g.n; i++)
        json_decref(g.ev[i]);
    resp_free(&r);
    assert_int_equal(stop(sv), 0);
}

static void test_errors(void **state)
{
    (void)state;
    struct running *sv = start(NULL, 256, 0);
    int port = s_port = tl_server_port(sv->s);
    assert_true(wait_until(server_healthy, 5000));
    expect_error(port, "GET", "/nope", NULL, NULL, 404, NULL);
    expect_error(port, "GET", "/v1/completions", NULL, NULL, 405, NULL);
    expect_error(port, "POST", "/health", "{}", NULL, 405, NULL);
    expect_error(port, "POST", "/v1/completions", "{\"prompt\":", NULL, 400, NULL);
    expect_error(port, "POST", "/v1/completions", "{\"prompt\":\"x\",\"top_p\":7}", NULL, 400,
                 "top_p");
    expect_error(port, "POST", "/v1/completions", "{\"prompt\":\"x\",\"model\":\"gpt-4\"}", NULL,
                 404, "model");
    // 64-token context: 2 prompt tokens + 63 is one too many.
    expect_error(port, "POST", "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":63}", NULL, 400,
                 "max_tokens");
    char big[400];
    memset(big, 0, sizeof(big));
    snprintf(big, sizeof(big), "{\"prompt\":\"%0300d\"}", 0);
    expect_error(port, "POST", "/v1/completions", big, NULL, 413, NULL);
    expect_error(port, "POST", "/tokenize", "{\"prompt\":5}", NULL, 400, "prompt");
    expect_error(port, "POST", "/detokenize", "{\"tokens\":[1,999]}", NULL, 400, "tokens");
    struct resp r;
    request(port, "POST", "/tokenize", "{\"prompt\":\"ab\"}", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"tokens\":[1,100,101]"));
    resp_free(&r);
    request(port, "POST", "/detokenize", "{\"tokens\":[100,101]}", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"prompt\":\"ab\""));
    resp_free(&r);
    assert_int_equal(stop(sv), 0);

    sv = start("sekrit", 0, 0);
    port = s_port = tl_server_port(sv->s);
    assert_true(wait_until(server_healthy, 5000)); // /health needs no key
    expect_error(port, "GET", "/v1/models", NULL, NULL, 401, NULL);
    expect_error(port, "GET", "/v1/models", NULL, "Authorization: Bearer wrong\r\n", 401, NULL);
    request(port, "GET", "/v1/models", NULL, "Authorization: Bearer sekrit\r\n", &r);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    assert_int_equal(stop(sv), 0);
}

static void test_queue_bound_gives_429(void **state)
{
    (void)state;
    struct running *sv = start(NULL, 0, 2);
    int port = s_port = tl_server_port(sv->s);
    assert_true(wait_until(server_healthy, 5000));
    // n = 3 choices can never fit a queue of 2.
    expect_error(port, "POST", "/v1/completions", "{\"prompt\":\"x\",\"n\":3}", NULL, 429, NULL);
    struct resp r;
    request(port, "POST", "/v1/completions", "{\"prompt\":\"x\",\"n\":3}", NULL, &r);
    assert_non_null(strcasestr(r.headers, "Retry-After: "));
    resp_free(&r);
    request(port, "POST", "/v1/completions", "{\"prompt\":\"x\",\"n\":2,\"max_tokens\":2}", NULL,
            &r);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    assert_int_equal(stop(sv), 0);
}

static void test_disconnect_cancels(void **state)
{
    (void)state;
    struct running *sv = start(NULL, 0, 0);
    int port = s_port = tl_server_port(sv->s);
    assert_true(wait_until(server_healthy, 5000));
    fe.step_sleep_ms = 20;
    int64_t cancels0 = cancel_calls();
    // A stream that is read a little and then abandoned.
    int fd = connect_to(port);
    send_request(fd, "POST", "/v1/completions",
                 "{\"prompt\":\"x\",\"max_tokens\":50,\"stream\":true}", NULL);
    char buf[512];
    assert_true(recv(fd, buf, sizeof(buf), 0) > 0);
    close(fd);
    assert_true(wait_until(engine_idle, 5000));
    assert_true(cancel_calls() > cancels0);
    // A non-streaming request whose client leaves while it is being computed.
    cancels0 = cancel_calls();
    fd = connect_to(port);
    send_request(fd, "POST", "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":60}", NULL);
    struct timespec ts = {0, 100000000L};
    nanosleep(&ts, NULL);
    close(fd);
    assert_true(wait_until(engine_idle, 5000));
    assert_true(cancel_calls() > cancels0);
    struct resp r;
    request(port, "GET", "/metrics", NULL, NULL, &r);
    assert_non_null(strstr(r.body, "\ntokenloom:client_disconnects_total 2\n"));
    assert_non_null(strstr(r.body, "\ntokenloom:kv_cache_usage_perc 0\n"));
    resp_free(&r);
    fe.step_sleep_ms = 1;
    assert_int_equal(stop(sv), 0);
}

// GET /health on a kept-alive connection: reads exactly one response, returns its status.
static int keepalive_health(int fd)
{
    const char *req = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    send_all(fd, req, strlen(req));
    char buf[2048];
    size_t len = 0;
    char *end = NULL;
    while (!end && len < sizeof(buf) - 1) {
        ssize_t k = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);
        if (k <= 0) return -1;
        len += (size_t)k;
        buf[len] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    if (!end) return -1;
    const char *cl = strcasestr(buf, "Content-Length:");
    size_t want = (size_t)(end + 4 - buf) + (cl ? strtoul(cl + 15, NULL, 10) : 0);
    while (len < want && len < sizeof(buf) - 1) {
        ssize_t k = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);
        if (k <= 0) break;
        len += (size_t)k;
    }
    int status = 0;
    sscanf(buf, "HTTP/1.%*d %d", &status);
    return status;
}

struct bg_req {
    int port;
    struct resp r;
};

static void *bg_request(void *arg)
{
    struct bg_req *b = arg;
    request(b->port, "POST", "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":20,\"seed\":0}",
            NULL, &b->r);
    return NULL;
}

static bool one_running(void)
{
    return running_requests() == 1;
}

static void test_graceful_stop_finishes_in_flight(void **state)
{
    (void)state;
    struct running *sv = start(NULL, 0, 0);
    int port = s_port = tl_server_port(sv->s);
    assert_true(wait_until(server_healthy, 5000));
    fe.step_sleep_ms = 20;
    struct bg_req b = {.port = port};
    pthread_t th;
    pthread_create(&th, NULL, bg_request, &b);
    assert_true(wait_until(one_running, 5000));
    int keep = connect_to(port); // a keep-alive connection, in use before the stop
    assert_int_equal(keepalive_health(keep), 200);
    tl_server_stop(sv->s);
    // Once draining (the stop is handled by the loop asynchronously), /health on an open
    // connection says 503 while the request is still running.
    int st = 0;
    for (int i = 0; i < 200 && (st = keepalive_health(keep)) == 200; i++) {
        struct timespec ts = {0, 2000000L};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(st, 503);
    close(keep);
    pthread_join(th, NULL);
    assert_int_equal(b.r.status, 200);
    json_t *j = body_json(&b.r);
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(c, "text")), "abcdefghijklmnopqrst");
    json_decref(j);
    resp_free(&b.r);
    fe.step_sleep_ms = 1;
    assert_int_equal(stop(sv), 0);
}

static int64_t finished(enum tl_finish_reason why)
{
    pthread_mutex_lock(&fe.mu);
    int64_t n = fe.n_finished[why];
    pthread_mutex_unlock(&fe.mu);
    return n;
}

// A client that requests a long stream and never reads it (its TCP window fills up): the
// server must not buffer the whole stream for it. Past --max-unsent-bytes the choices are
// cancelled while the connection is still open; the server keeps serving others.
static void test_stalled_reader_is_cancelled(void **state)
{
    (void)state;
    s_max_unsent = 64 * 1024;
    s_max_seq_len = 1 << 17;
    struct running *sv = start(NULL, 0, 0);
    s_max_unsent = 0;
    s_max_seq_len = 0;
    int port = s_port = tl_server_port(sv->s);
    assert_true(wait_until(server_healthy, 5000));
    fe.step_sleep_ms = 0;
    int64_t cancelled0 = finished(TL_FINISH_CANCELLED), length0 = finished(TL_FINISH_LENGTH);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    // Unbounded, this stream would be 8 x 100000 chunks of ~250 bytes (~200 MB).
    send_request(fd, "POST", "/v1/completions",
                 "{\"prompt\":\"x\",\"max_tokens\":100000,\"n\":8,\"logprobs\":2,\"stream\":true,"
                 "\"ignore_eos\":true}",
                 NULL);
    for (int i = 0; i < 1000 && running_requests() < 8; i++) {
        struct timespec ts = {0, 5000000L};
        nanosleep(&ts, NULL);
    }
    assert_true(wait_until(engine_idle, 60000));
    assert_int_equal(finished(TL_FINISH_CANCELLED) - cancelled0, 8);
    assert_int_equal(finished(TL_FINISH_LENGTH) - length0, 0);
    assert_true(server_healthy()); // the stalled connection is still open
    struct resp r;
    request(port, "GET", "/metrics", NULL, NULL, &r);
    assert_non_null(strstr(r.body, "\ntokenloom:client_disconnects_total 1\n"));
    resp_free(&r);
    close(fd);
    fe.step_sleep_ms = 1;
    assert_int_equal(stop(sv), 0);
}

// echo with a token-id prompt that cannot fit the context: 400 before the prompt is
// detokenized for the echo (that work runs on the event loop).
static void test_echo_of_overlong_token_prompt_is_not_detokenized(void **state)
{
    (void)state;
    struct running *sv = start(NULL, 0, 0);
    int port = s_port = tl_server_port(sv->s);
    assert_true(wait_until(server_healthy, 5000));
    char body[1024];
    int k = snprintf(body, sizeof(body), "{\"echo\":true,\"max_tokens\":1,\"prompt\":[5");
    for (int i = 1; i < 100; i++)
        k += snprintf(body + k, sizeof(body) - (size_t)k, ",5");
    snprintf(body + k, sizeof(body) - (size_t)k, "]}");
    long before = atomic_load(&n_detokenize);
    expect_error(port, "POST", "/v1/completions", body, NULL, 400, "max_tokens");
    assert_int_equal(atomic_load(&n_detokenize), before);
    // A prompt that fits is echoed (detokenized once).
    struct resp r;
    request(port, "POST", "/v1/completions",
            "{\"echo\":true,\"max_tokens\":1,\"prompt\":[72,105],\"seed\":0}", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"text\":\"Efa\""));
    resp_free(&r);
    assert_int_equal(atomic_load(&n_detokenize), before + 1);
    assert_int_equal(stop(sv), 0);
}

TL_TEST_MAIN(cmocka_unit_test(test_health_models_metrics), cmocka_unit_test(test_completion_plain),
             cmocka_unit_test(test_streams), cmocka_unit_test(test_echo_logprobs_stream_and_not),
             cmocka_unit_test(test_errors), cmocka_unit_test(test_queue_bound_gives_429),
             cmocka_unit_test(test_disconnect_cancels),
             cmocka_unit_test(test_graceful_stop_finishes_in_flight),
             cmocka_unit_test(test_stalled_reader_is_cancelled),
             cmocka_unit_test(test_echo_of_overlong_token_prompt_is_not_detokenized))
