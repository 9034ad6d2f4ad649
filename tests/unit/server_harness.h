/*
 * The in-process server harness shared by the server tests: a scripted fake model and engine
 * behind struct tl_srv_backend (so the HTTP layer runs without the real engine), a server on
 * a thread, and a minimal blocking HTTP/1.1 client.
 *
 * The fake engine generates letters: token k of a request with seed S is 'a' + (S + k) % 26,
 * one token per running request per step; its tokenizer maps each byte b to id b + 3 and
 * prepends BOS (1). Its own allocations use plain malloc, so fault injection
 * (tl_alloc_fail_after) reaches only the server's.
 *
 * Threads: the fake engine's state is guarded by fe.mu; the client runs on the test thread.
 */
#ifndef TL_TEST_SERVER_HARNESS_H
#define TL_TEST_SERVER_HARNESS_H

#include "tl_test.h"

#include "core/clock.h"
#include "server/server.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

// Not every test uses every helper.
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-variable"

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

#endif
