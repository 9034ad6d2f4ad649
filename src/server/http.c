/*
 * The server's event loop and engine thread (see server.h).
 *
 * DESIGN
 * One libevent event loop (the thread calling tl_server_run) owns every socket: evhttp parses
 * HTTP/1.1 (keep-alive, chunked replies for SSE), routes.c turns requests into engine requests
 * and engine events into responses. A second thread runs the engine: load the model, then
 * loop { step; wait while idle }. Submission and cancellation go straight to the engine's
 * thread-safe API from the loop. Events come back through tl_srv_queue: the engine-thread
 * callback copies each event into a message, appends it under a mutex and writes an eventfd
 * when the list was empty; the loop reads the eventfd and processes the whole list in order.
 * No thread per connection; the loop never blocks on the engine.
 *
 * INVARIANTS
 * - A request's memory (tl_srv_req, its choices) is freed only on the loop, once its reply is
 *   complete (or abandoned) and every submitted choice's DONE message has been processed. The
 *   engine calls back with the choice pointer until DONE, and DONE is its last event, so the
 *   callback never sees freed memory. Every choice owns a preallocated DONE message, so DONE is
 *   delivered even when memory runs out.
 * - A client that goes away cancels its choices: libevent's close callback catches a failed
 *   write (streams); a periodic probe (recv MSG_PEEK) catches a peer that closed while we were
 *   still computing. A connection closed by libevent leaves its request orphaned (libevent
 *   sets its connection to NULL and does not free it); we end it later with the usual reply
 *   call, which frees it.
 * - Stopping (signal or tl_server_stop): the listener closes, /health says 503, new work gets
 *   503; in-flight requests get until the shutdown timeout, then are cancelled; then the loop
 *   ends, the engine thread is joined and everything is freed.
 *
 * THREADS: loop thread (all of tl_server except queue, state, stop flags); engine thread
 * (engine, model load, tl__srv_on_event). tl_server_stop may be called from any thread or a
 * signal handler.
 */
#include "server/server_impl.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "server/sse.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/keyvalq_struct.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

// ---- backend and config ----------------------------------------------------------------------

static void model_info_(const tl_model *m, struct tl_model_info *out)
{
    tl_model_get_info(m, out);
}

const struct tl_srv_backend tl_srv_backend_default = {
    .model_info = model_info_,
    .tokenize = tl_model_tokenize,
    .detokenize = tl_model_detokenize,
    .token_text = tl_model_token_text,
    .submit = tl_engine_submit,
    .cancel = tl_engine_cancel,
    .step = tl_engine_step,
    .wait = tl_engine_wait,
    .wake = tl_engine_wake,
    .get_stats = tl_engine_get_stats,
};

void tl_server_config_default(struct tl_server_config *c)
{
    memset(c, 0, sizeof(*c));
    c->host = "127.0.0.1";
    c->port = 8000;
    c->max_body_bytes = 8u << 20;
    c->max_queued_requests = 256;
    c->shutdown_timeout_s = 30;
    c->http_timeout_s = 60;
    c->max_unsent_bytes = 8u << 20;
    tl_engine_config_default(&c->engine);
}

// ---- the engine -> loop queue ----------------------------------------------------------------

static void queue_push(struct tl_srv_queue *q, struct tl_srv_msg *m)
{
    m->next = NULL;
    pthread_mutex_lock(&q->mu);
    bool was_empty = q->head == NULL;
    if (q->tail)
        q->tail->next = m;
    else
        q->head = m;
    q->tail = m;
    pthread_mutex_unlock(&q->mu);
    if (was_empty) {
        uint64_t one = 1;
        ssize_t n = write(q->efd, &one, sizeof(one)); // only fails when the counter is huge
        (void)n;
    }
}

static struct tl_srv_msg *queue_take_all(struct tl_srv_queue *q)
{
    pthread_mutex_lock(&q->mu);
    struct tl_srv_msg *m = q->head;
    q->head = q->tail = NULL;
    pthread_mutex_unlock(&q->mu);
    return m;
}

void tl__srv_on_event(void *user, const struct tl_event *ev)
{
    struct tl_srv_choice *c = user;
    struct tl_server *s = c->req->srv;
    size_t text_len = ev->text ? ev->text_len : 0;
    if (ev->type == TL_EVENT_DONE) {
        // The preallocated message: delivery cannot fail. Nothing of c is touched after the
        // push, since the loop may free it at once.
        struct tl_srv_msg *m = c->done_msg;
        m->ev = *ev;
        m->ev.top = NULL;
        m->ev.n_top = 0;
        m->ev.text = NULL;
        m->ev.text_len = 0;
        m->ev.error = NULL;
        m->t_us = tl_time_us();
        if (text_len) {
            m->text_heap = malloc(text_len);
            if (m->text_heap) {
                memcpy(m->text_heap, ev->text, text_len);
                m->ev.text = m->text_heap;
                m->ev.text_len = text_len;
            } else {
                atomic_store(&c->dropped, true);
            }
        }
        if (ev->error) snprintf(m->error, sizeof(m->error), "%s", ev->error);
        queue_push(&s->queue, m);
        return;
    }
    int n_top = ev->n_top > 0 && ev->top ? ev->n_top : 0;
    size_t size =
        sizeof(struct tl_srv_msg) + (size_t)n_top * sizeof(struct tl_token_logprob) + text_len + 1;
    struct tl_srv_msg *m = malloc(size);
    if (!m) {
        atomic_store(&c->dropped, true); // the request ends with an error at DONE
        return;
    }
    memset(m, 0, sizeof(*m));
    m->choice = c;
    m->ev = *ev;
    m->t_us = tl_time_us();
    char *p = (char *)(m + 1);
    if (n_top) {
        memcpy(p, ev->top, (size_t)n_top * sizeof(struct tl_token_logprob));
        m->ev.top = (const struct tl_token_logprob *)p;
        p += (size_t)n_top * sizeof(struct tl_token_logprob);
    } else {
        m->ev.top = NULL;
    }
    m->ev.n_top = n_top;
    if (text_len) memcpy(p, ev->text, text_len);
    p[text_len] = '\0';
    m->ev.text = p;
    m->ev.text_len = text_len;
    m->ev.error = NULL;
    queue_push(&s->queue, m);
}

static void on_queue(evutil_socket_t fd, short what, void *arg)
{
    struct tl_server *s = arg;
    uint64_t cnt;
    ssize_t n = read(fd, &cnt, sizeof(cnt)); // reset before taking, so no wake-up is lost
    (void)n;
    struct tl_srv_msg *m = queue_take_all(&s->queue);
    while (m) {
        struct tl_srv_msg *next = m->next;
        tl__srv_process_msg(s, m); // frees m (or keeps a preallocated one with its choice)
        m = next;
    }
}

// ---- the engine thread -----------------------------------------------------------------------

static void wake_loop(struct tl_server *s)
{
    uint64_t one = 1;
    ssize_t n = write(s->stop_efd, &one, sizeof(one));
    (void)n;
}

static void *engine_main(void *arg)
{
    struct tl_server *s = arg;
    if (!s->cfg.backend) {
        int64_t t0 = tl_time_us();
        tl_status st = tl_model_load(s->cfg.model_path, &s->cfg.model_params, &s->model);
        if (!st) st = tl_engine_create(s->model, &s->cfg.engine, &s->engine);
        if (st) {
            TL_LOGE("serve: cannot load %s: %s", s->cfg.model_path ? s->cfg.model_path : "(none)",
                    tl_last_error());
            atomic_store(&s->state, TL_SRV_FAILED);
            wake_loop(s);
            return NULL;
        }
        TL_LOGI("serve: loaded %s in %.0f ms", s->cfg.model_path,
                (double)(tl_time_us() - t0) / 1000.0);
    }
    if (!tl__srv_model_ready(s)) {
        TL_LOGE("serve: %s", tl_last_error());
        atomic_store(&s->state, TL_SRV_FAILED);
        wake_loop(s);
        return NULL;
    }
    atomic_store(&s->engine_up, true);
    int expected = TL_SRV_LOADING;
    if (atomic_compare_exchange_strong(&s->state, &expected, TL_SRV_READY))
        TL_LOGI("serve: ready: model '%s' on http://%s:%d (chat template %s%s)", s->model_name,
                s->cfg.host, s->port, s->chat.source_name,
                s->chat.fallback ? ": the model has none" : "");
    int64_t last_err_us = 0;
    while (!atomic_load(&s->engine_quit)) {
        int64_t pending = 0;
        tl_status st = s->be->step(s->engine, &pending);
        if (st) {
            int64_t now = tl_time_us();
            if (now - last_err_us > 1000000) {
                TL_LOGE("serve: engine step failed: %s", tl_last_error());
                last_err_us = now;
            }
            s->be->wait(s->engine, 10);
        } else if (pending == 0) {
            s->be->wait(s->engine, 200);
        }
    }
    return NULL;
}

// ---- replies ---------------------------------------------------------------------------------

static const char *reason_phrase(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 413:
        return "Payload Too Large";
    case 429:
        return "Too Many Requests";
    case 500:
        return "Internal Server Error";
    case 503:
        return "Service Unavailable";
    default:
        return "Error";
    }
}

void tl__srv_access_log(struct evhttp_request *r, int status, int64_t t_start_us, int64_t n_in,
                        int64_t n_out)
{
    if (!tl_log_enabled(TL_LOG_INFO)) return;
    const char *m;
    switch (evhttp_request_get_command(r)) {
    case EVHTTP_REQ_GET:
        m = "GET";
        break;
    case EVHTTP_REQ_POST:
        m = "POST";
        break;
    case EVHTTP_REQ_HEAD:
        m = "HEAD";
        break;
    case EVHTTP_REQ_PUT:
        m = "PUT";
        break;
    case EVHTTP_REQ_DELETE:
        m = "DELETE";
        break;
    case EVHTTP_REQ_OPTIONS:
        m = "OPTIONS";
        break;
    case EVHTTP_REQ_PATCH:
        m = "PATCH";
        break;
    default:
        m = "?";
        break;
    }
    const char *uri = evhttp_request_get_uri(r);
    double ms = t_start_us ? (double)(tl_time_us() - t_start_us) / 1000.0 : 0.0;
    TL_LOGI("%s %.200s %d in=%lld out=%lld %.1fms", m, uri ? uri : "?", status, (long long)n_in,
            (long long)n_out, ms);
}

void tl__srv_send_text(struct tl_server *s, struct evhttp_request *r, int status,
                       const char *content_type, const char *text, size_t len)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(r);
    evhttp_add_header(h, "Content-Type", content_type);
    // A HEAD answer has the headers of the GET answer and no body: libevent would write the
    // body anyway, and a keep-alive client would read it as the start of the next response.
    bool head = evhttp_request_get_command(r) == EVHTTP_REQ_HEAD;
    struct evbuffer *b = head ? NULL : evbuffer_new();
    if (b) evbuffer_add(b, text, len);
    if (head) {
        char cl[32];
        snprintf(cl, sizeof(cl), "%zu", len);
        evhttp_add_header(h, "Content-Length", cl);
    }
    evhttp_send_reply(r, status, reason_phrase(status), b);
    if (b) evbuffer_free(b);
    tl_metrics_count_http(&s->metrics, status);
}

void tl__srv_send_json(struct tl_server *s, struct evhttp_request *r, int status, json_t *body,
                       int64_t t_start_us, int64_t n_in, int64_t n_out)
{
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text) {
        status = 500;
        text = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                      "\"param\":null,\"code\":null}}");
    }
    if (status == 429) evhttp_add_header(evhttp_request_get_output_headers(r), "Retry-After", "1");
    // Log first: sending may free an orphaned request.
    tl__srv_access_log(r, status, t_start_us, n_in, n_out);
    if (text)
        tl__srv_send_text(s, r, status, "application/json", text, strlen(text));
    else
        evhttp_send_reply(r, 500, "Internal Server Error", NULL);
    free(text);
}

void tl__srv_send_error(struct tl_server *s, struct evhttp_request *r,
                        const struct tl_oai_error *err, int64_t t_start_us)
{
    tl__srv_send_json(s, r, err->http_status, tl_oai_error_json(err), t_start_us, 0, 0);
}

void tl__srv_sse_send(struct tl_srv_req *q, json_t *obj, const char *raw)
{
    if (!q->http || q->conn_closed) {
        json_decref(obj);
        return;
    }
    char *text = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    const char *payload = obj ? text : raw;
    if (!payload) return;
    struct tl_sb sb;
    tl_sb_init(&sb);
    tl_sse_format(&sb, payload, strlen(payload));
    free(text);
    if (!tl_sb_ok(&sb)) {
        tl_sb_free(&sb);
        return;
    }
    struct evbuffer *b = evbuffer_new();
    if (b) {
        evbuffer_add(b, sb.buf, sb.len);
        evhttp_send_reply_chunk(q->http, b);
        evbuffer_free(b);
    }
    tl_sb_free(&sb);
    // libevent queues whatever the socket does not take, without limit: a client that stops
    // reading (TCP window full) would make its stream's memory grow with every token. Past
    // the bound the client counts as gone: its choices are cancelled, nothing more is queued,
    // and what is queued leaves with the connection (write timeout or close).
    struct evhttp_connection *conn = evhttp_request_get_connection(q->http);
    struct bufferevent *bev = conn ? evhttp_connection_get_bufferevent(conn) : NULL;
    size_t unsent = bev ? evbuffer_get_length(bufferevent_get_output(bev)) : 0;
    if (!q->client_gone && q->srv->cfg.max_unsent_bytes && unsent > q->srv->cfg.max_unsent_bytes) {
        TL_LOGW("serve: %s: the client left %zu bytes unread; cancelling", q->id, unsent);
        tl__srv_client_gone(q);
    }
}

// ---- connection close ------------------------------------------------------------------------

static void on_conn_close(struct evhttp_connection *conn, void *arg)
{
    struct tl_srv_req *q = arg;
    (void)conn;
    // libevent is freeing the connection: q->http is orphaned (not freed) and ours to end.
    q->conn_closed = true;
    q->conn = NULL;
    tl__srv_client_gone(q);
}

void tl__srv_watch_close(struct tl_srv_req *q)
{
    q->conn = evhttp_request_get_connection(q->http);
    if (q->conn) evhttp_connection_set_closecb(q->conn, on_conn_close, q);
}

void tl__srv_unwatch_close(struct tl_srv_req *q)
{
    // The callback stays on the connection after the reply (keep-alive), so it must go now.
    if (q->conn && !q->conn_closed) evhttp_connection_set_closecb(q->conn, NULL, NULL);
    q->conn = NULL;
}

// True when the peer of a connection has closed it (EOF or reset), checked without consuming
// data: a pipelined next request stays in the socket for evhttp.
static bool peer_closed(struct evhttp_connection *conn)
{
    struct bufferevent *bev = evhttp_connection_get_bufferevent(conn);
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    if (fd < 0) return false;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return true;
    return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

void tl__srv_req_link(struct tl_server *s, struct tl_srv_req *q)
{
    q->prev = NULL;
    q->next = s->reqs;
    if (s->reqs) s->reqs->prev = q;
    s->reqs = q;
}

void tl__srv_req_unlink(struct tl_server *s, struct tl_srv_req *q)
{
    if (q->prev)
        q->prev->next = q->next;
    else if (s->reqs == q)
        s->reqs = q->next;
    if (q->next) q->next->prev = q->prev;
    q->prev = q->next = NULL;
}

// ---- stopping --------------------------------------------------------------------------------

static void begin_drain(struct tl_server *s)
{
    int st = atomic_load(&s->state);
    if (st == TL_SRV_DRAINING) return;
    if (st == TL_SRV_FAILED) {
        s->exit_code = 1;
        event_base_loopbreak(s->base);
        return;
    }
    atomic_store(&s->state, TL_SRV_DRAINING);
    if (s->listener) {
        evhttp_del_accept_socket(s->http, s->listener);
        s->listener = NULL;
    }
    s->drain_deadline_us = tl_time_us() + (int64_t)(s->cfg.shutdown_timeout_s * 1e6);
    int n = 0;
    for (struct tl_srv_req *q = s->reqs; q; q = q->next)
        n++;
    TL_LOGI("serve: stopping: %d request(s) in flight, up to %.0f s to finish", n,
            s->cfg.shutdown_timeout_s);
}

static void check_drained(struct tl_server *s)
{
    if (atomic_load(&s->state) != TL_SRV_DRAINING) return;
    if (!s->reqs) {
        event_base_loopbreak(s->base);
        return;
    }
    int64_t now = tl_time_us();
    if (now < s->drain_deadline_us) return;
    if (!s->drain_cancelled) {
        TL_LOGW("serve: shutdown timeout: cancelling the requests still running");
        for (struct tl_srv_req *q = s->reqs; q; q = q->next)
            tl__srv_req_cancel(q);
        s->drain_cancelled = true;
        s->drain_deadline_us = now + 2000000; // cancellations land within a step or two
        return;
    }
    event_base_loopbreak(s->base); // the rest is finished by force in tl_server_run
}

static void on_stop(evutil_socket_t fd, short what, void *arg)
{
    struct tl_server *s = arg;
    uint64_t cnt;
    ssize_t n = read(fd, &cnt, sizeof(cnt));
    (void)n;
    if (atomic_load(&s->state) == TL_SRV_FAILED) {
        s->exit_code = 1;
        event_base_loopbreak(s->base);
        return;
    }
    if (atomic_load(&s->stop_requested)) begin_drain(s);
    check_drained(s);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct tl_server *s = arg;
    TL_LOGI("serve: got %s", sig == SIGINT ? "SIGINT" : "SIGTERM");
    atomic_store(&s->stop_requested, true);
    begin_drain(s);
    check_drained(s);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct tl_server *s = arg;
    for (struct tl_srv_req *q = s->reqs; q;) {
        struct tl_srv_req *next = q->next; // client_gone does not free q, but stay safe
        if (!q->client_gone && !q->conn_closed && q->conn && peer_closed(q->conn))
            tl__srv_client_gone(q);
        q = next;
    }
    check_drained(s);
}

void tl_server_stop(struct tl_server *s)
{
    atomic_store(&s->stop_requested, true);
    wake_loop(s);
}

// ---- lifecycle -------------------------------------------------------------------------------

struct tl_server *tl_server_create(const struct tl_server_config *c)
{
    struct tl_server *s = calloc(1, sizeof(*s));
    if (!s) {
        tl__errorf(TL_ERR_NOMEM, "serve: out of memory");
        return NULL;
    }
    s->cfg = *c;
    s->be = c->backend ? c->backend : &tl_srv_backend_default;
    s->model = c->model;
    s->engine = c->engine_handle;
    s->queue.efd = -1;
    s->stop_efd = -1;
    atomic_init(&s->state, TL_SRV_LOADING);
    tl_metrics_init(&s->metrics);
    s->started_s = tl_wall_time_us() / 1000000;
    s->rng = (uint64_t)tl_wall_time_us() ^ ((uint64_t)getpid() << 32) ^ 0x9E3779B97F4A7C15ull;
    pthread_mutex_init(&s->queue.mu, NULL);
    signal(SIGPIPE, SIG_IGN); // a vanished client must not kill the process on write

    s->queue.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    s->stop_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    s->base = event_base_new();
    s->http = s->base ? evhttp_new(s->base) : NULL;
    if (s->queue.efd < 0 || s->stop_efd < 0 || !s->http) {
        tl__errorf(TL_ERR_NOMEM, "serve: cannot set up the event loop");
        goto fail;
    }
    s->ev_queue = event_new(s->base, s->queue.efd, EV_READ | EV_PERSIST, on_queue, s);
    s->ev_stop = event_new(s->base, s->stop_efd, EV_READ | EV_PERSIST, on_stop, s);
    s->ev_tick = event_new(s->base, -1, EV_PERSIST, on_tick, s);
    if (!s->ev_queue || !s->ev_stop || !s->ev_tick) {
        tl__errorf(TL_ERR_NOMEM, "serve: cannot set up the event loop");
        goto fail;
    }
    struct timeval tick = {0, 100000};
    event_add(s->ev_queue, NULL);
    event_add(s->ev_stop, NULL);
    event_add(s->ev_tick, &tick);
    if (c->handle_signals) {
        s->ev_sigint = evsignal_new(s->base, SIGINT, on_signal, s);
        s->ev_sigterm = evsignal_new(s->base, SIGTERM, on_signal, s);
        if (s->ev_sigint) event_add(s->ev_sigint, NULL);
        if (s->ev_sigterm) event_add(s->ev_sigterm, NULL);
    }

    evhttp_set_max_body_size(s->http, (ev_ssize_t)c->max_body_bytes);
    evhttp_set_max_headers_size(s->http, 64 * 1024);
    evhttp_set_timeout(s->http, c->http_timeout_s > 0 ? c->http_timeout_s : 60);
    // Every method reaches our dispatcher, which answers 405 in the API's error format.
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                            EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                            EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
    evhttp_set_gencb(s->http, tl__srv_handle, s);
    s->listener = evhttp_bind_socket_with_handle(s->http, c->host, (ev_uint16_t)c->port);
    if (!s->listener) {
        tl__errorf(TL_ERR_IO, "serve: cannot listen on %s:%d: %s", c->host, c->port,
                   strerror(errno));
        goto fail;
    }
    evutil_socket_t lfd = evhttp_bound_socket_get_fd(s->listener);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    s->port = c->port;
    if (getsockname(lfd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET)
            s->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        else if (ss.ss_family == AF_INET6)
            s->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    if (pthread_create(&s->engine_thread, NULL, engine_main, s) != 0) {
        tl__errorf(TL_ERR_NOMEM, "serve: cannot start the engine thread");
        goto fail;
    }
    s->engine_thread_started = true;
    return s;
fail:
    tl_server_destroy(s);
    return NULL;
}

int tl_server_port(const struct tl_server *s)
{
    return s->port;
}

// Ends every request still alive after the loop stopped (forced shutdown): their replies are
// closed as they stand.
static void finish_leftovers(struct tl_server *s)
{
    while (s->reqs) {
        struct tl_srv_req *q = s->reqs;
        for (int i = 0; i < q->n_choices; i++) {
            if (q->choices[i].submitted && !q->choices[i].done) q->n_live--;
            q->choices[i].done = true;
        }
        tl__srv_unwatch_close(q);
        if (q->http) {
            if (q->streaming) {
                evhttp_send_reply_end(q->http);
            } else {
                struct tl_oai_error err;
                tl_oai_error_set(&err, 503, "server_error", "service_unavailable", NULL,
                                 "the server is shutting down");
                tl__srv_send_error(s, q->http, &err, q->t_start_us);
            }
            q->http = NULL;
        }
        tl__srv_req_free(q);
    }
}

int tl_server_run(struct tl_server *s)
{
    event_base_dispatch(s->base);
    // Stop the engine thread; after the join no event can arrive any more.
    atomic_store(&s->engine_quit, true);
    if (s->engine_thread_started) {
        if (atomic_load(&s->engine_up)) s->be->wake(s->engine);
        pthread_join(s->engine_thread, NULL);
        s->engine_thread_started = false;
    }
    on_queue(s->queue.efd, EV_READ, s); // events that arrived before the join
    finish_leftovers(s);
    // Give the last replies a moment to reach their sockets.
    struct timeval flush = {0, 200000};
    event_base_loopexit(s->base, &flush);
    event_base_dispatch(s->base);
    if (atomic_load(&s->state) == TL_SRV_FAILED) s->exit_code = 1;
    TL_LOGI("serve: stopped");
    return s->exit_code;
}

void tl_server_destroy(struct tl_server *s)
{
    if (!s) return;
    atomic_store(&s->engine_quit, true);
    if (s->engine_thread_started) {
        if (atomic_load(&s->engine_up)) s->be->wake(s->engine);
        pthread_join(s->engine_thread, NULL);
    }
    if (s->queue.efd >= 0 && s->base) on_queue(s->queue.efd, EV_READ, s);
    finish_leftovers(s);
    if (s->http) evhttp_free(s->http);
    if (s->ev_queue) event_free(s->ev_queue);
    if (s->ev_stop) event_free(s->ev_stop);
    if (s->ev_tick) event_free(s->ev_tick);
    if (s->ev_sigint) event_free(s->ev_sigint);
    if (s->ev_sigterm) event_free(s->ev_sigterm);
    if (s->base) event_base_free(s->base);
    if (s->queue.efd >= 0) close(s->queue.efd);
    if (s->stop_efd >= 0) close(s->stop_efd);
    pthread_mutex_destroy(&s->queue.mu);
    if (!s->cfg.backend) {
        tl_engine_destroy(s->engine);
        tl_model_free(s->model);
    }
    tl_chat_template_free(&s->chat);
    free(s->model_name);
    free(s->model_base);
    free(s);
}
