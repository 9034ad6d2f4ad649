/*
 * The server's HTTP transport (see http.h): evhttp setup and binding, request ids, replies,
 * SSE events, the access log, and the connections it watches.
 *
 * DESIGN
 * evhttp parses HTTP/1.1 (keep-alive, chunked replies) and calls the one handler it was
 * given. Everything above (routing, requests, the engine) lives elsewhere and is reached only
 * through that handler and the close callbacks watchers register: this file calls nothing of
 * the server.
 *
 * A connection has one close callback slot in evhttp, so this file owns it: a watched
 * connection (struct tl_http_conn) is registered there once, and carries both the watcher's
 * callback (a request waiting on a client) and the "flushing" mark (a finished reply whose
 * bytes are still in libevent's buffer). A draining server asks tl_http_unflushed and waits
 * for 0 before freeing the connections, so the last bytes of a finished stream are not lost
 * at exit. The record lives until the connection closes (its callback frees it) or until it
 * has neither a watcher nor unsent bytes.
 *
 * A body larger than the limit: evhttp checks the declared Content-Length against it before
 * reading the body and answers 413 itself, without calling the handler; http_errors.c turns
 * that HTML page (and libevent's other error pages) into the API's JSON error. With
 * EVHTTP_SERVER_LINGERING_CLOSE it first reads and discards the declared body, as nginx's
 * lingering close does, so a client that sends the whole body before reading (most do) gets
 * the 413 instead of a reset on a socket closed with unread data. A chunked body is counted
 * as it arrives and refused the same way once over the limit (libevent then discards the
 * current chunk only). The handler's own size check (route_checks.c) stays as a backstop.
 *
 * THREADS: the event-loop thread only. Ownership: struct tl_http owns evh and the records;
 * libevent owns connections and requests.
 */
#include "server/http.h"

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/sse.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/keyvalq_struct.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct tl_http_conn {
    struct tl_http *h;
    struct evhttp_connection *conn; // libevent's; valid while this record exists
    struct tl_http_conn *prev, *next;
    tl_http_close_fn on_close; // the watcher (NULL when none)
    void *arg;
    bool flushing; // a finished reply's bytes are still buffered
};

// ---- request ids -----------------------------------------------------------------------------

enum { REQUEST_ID_MAX = 128 };

// A client's id is kept when it is 1-128 visible ASCII characters (no spaces or controls: it
// goes into a log line and the OpenAI id).
static bool request_id_acceptable(const char *id)
{
    size_t n = 0;
    for (; id[n]; n++)
        if ((unsigned char)id[n] < 0x21 || (unsigned char)id[n] > 0x7e || n >= REQUEST_ID_MAX)
            return false;
    return n > 0;
}

static void seed_ids(struct tl_http *h)
{
    uint64_t seed = 0;
    if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != (ssize_t)sizeof(seed)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 48);
    }
    h->id_state = seed;
}

// Gives r its id (the client's or a new one) in the X-Request-Id response header, then hands
// it to the server's handler. splitmix64 is a bijection of its counter, so the first 64 bits
// of generated ids never repeat within a process; the random seed separates replicas.
static void on_request(struct evhttp_request *r, void *arg)
{
    struct tl_http *h = arg;
    struct evkeyvalq *out = evhttp_request_get_output_headers(r);
    const char *given = evhttp_find_header(evhttp_request_get_input_headers(r), "X-Request-Id");
    if (given && request_id_acceptable(given)) {
        evhttp_add_header(out, "X-Request-Id", given);
    } else {
        char id[33];
        tl_http_new_request_id(h, id);
        evhttp_add_header(out, "X-Request-Id", id);
    }
    h->handler(r, h->handler_arg);
}

const char *tl_http_request_id(struct evhttp_request *r)
{
    const char *id = evhttp_find_header(evhttp_request_get_output_headers(r), "X-Request-Id");
    return id ? id : "";
}

// ---- setup -----------------------------------------------------------------------------------

// libevent's own warnings go through our log (so --log-format json holds for them too).
static void libevent_log(int severity, const char *msg)
{
    if (severity >= EVENT_LOG_ERR)
        TL_LOGE("libevent: %s", msg);
    else if (severity == EVENT_LOG_WARN)
        TL_LOGW("libevent: %s", msg);
    else
        TL_LOGD("libevent: %s", msg);
}

tl_status tl_http_open(struct tl_http *h, struct event_base *base, const struct tl_http_config *c,
                       struct tl_metrics *metrics, tl_http_handler_fn handler, void *arg)
{
    memset(h, 0, sizeof(*h));
    h->metrics = metrics;
    h->max_body_bytes = c->max_body_bytes;
    h->handler = handler;
    h->handler_arg = arg;
    seed_ids(h);
    event_set_log_callback(libevent_log);
    h->evh = evhttp_new(base);
    if (!h->evh) return tl__errorf(TL_ERR_NOMEM, "cannot set up the HTTP server");
    evhttp_set_max_body_size(h->evh, (ev_ssize_t)c->max_body_bytes);
    evhttp_set_max_headers_size(h->evh, 64 * 1024);
    evhttp_set_flags(h->evh, EVHTTP_SERVER_LINGERING_CLOSE); // see the header comment
    evhttp_set_timeout(h->evh, c->timeout_s > 0 ? c->timeout_s : 60);
    // Every method reaches the handler, which answers 405 in the API's error format.
    evhttp_set_allowed_methods(h->evh, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                           EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS |
                                           EVHTTP_REQ_PATCH);
    evhttp_set_gencb(h->evh, on_request, h);
    evhttp_set_bevcb(h->evh, tl_http_new_bufferevent, h); // libevent's errors as JSON
    h->listener = evhttp_bind_socket_with_handle(h->evh, c->host, (ev_uint16_t)c->port);
    if (!h->listener) {
        int e = errno;
        return tl__errorf(TL_ERR_IO, "cannot listen on %s:%d: %s", c->host, c->port,
                          e ? strerror(e) : "invalid address");
    }
    evutil_socket_t lfd = evhttp_bound_socket_get_fd(h->listener);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    h->port = c->port;
    if (getsockname(lfd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET)
            h->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        else if (ss.ss_family == AF_INET6)
            h->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    return TL_OK;
}

void tl_http_stop_listening(struct tl_http *h)
{
    if (h->listener) {
        evhttp_del_accept_socket(h->evh, h->listener);
        h->listener = NULL;
    }
}

void tl_http_set_draining(struct tl_http *h)
{
    h->draining = true;
}

static void record_free(struct tl_http_conn *w);

void tl_http_close(struct tl_http *h)
{
    // The records go first: evhttp_free runs the close callbacks of what it frees.
    while (h->conns) {
        evhttp_connection_set_closecb(h->conns->conn, NULL, NULL);
        record_free(h->conns);
    }
    if (h->evh) evhttp_free(h->evh);
    h->evh = NULL;
    h->listener = NULL;
}

// ---- watched connections ---------------------------------------------------------------------

static void record_free(struct tl_http_conn *w)
{
    struct tl_http *h = w->h;
    if (w->prev)
        w->prev->next = w->next;
    else
        h->conns = w->next;
    if (w->next) w->next->prev = w->prev;
    free(w);
}

static void on_conn_close(struct evhttp_connection *conn, void *arg)
{
    struct tl_http_conn *w = arg;
    (void)conn;
    tl_http_close_fn fn = w->on_close;
    void *fn_arg = w->arg;
    record_free(w); // libevent is freeing the connection
    if (fn) fn(fn_arg);
}

// The record of conn, created (and registered as its close callback) when absent.
static struct tl_http_conn *record_of(struct tl_http *h, struct evhttp_connection *conn)
{
    for (struct tl_http_conn *w = h->conns; w; w = w->next)
        if (w->conn == conn) return w;
    struct tl_http_conn *w = calloc(1, sizeof(*w));
    if (!w) return NULL;
    w->h = h;
    w->conn = conn;
    w->next = h->conns;
    if (h->conns) h->conns->prev = w;
    h->conns = w;
    evhttp_connection_set_closecb(conn, on_conn_close, w);
    return w;
}

// Frees a record that nobody needs any more (the close callback goes with it).
static void record_release_if_idle(struct tl_http_conn *w)
{
    if (w->on_close || w->flushing) return;
    evhttp_connection_set_closecb(w->conn, NULL, NULL);
    record_free(w);
}

static size_t conn_unsent(struct evhttp_connection *conn)
{
    struct bufferevent *bev = conn ? evhttp_connection_get_bufferevent(conn) : NULL;
    return bev ? evbuffer_get_length(bufferevent_get_output(bev)) : 0;
}

struct tl_http_conn *tl_http_watch_close(struct tl_http *h, struct evhttp_request *r,
                                         tl_http_close_fn fn, void *arg)
{
    struct evhttp_connection *conn = evhttp_request_get_connection(r);
    struct tl_http_conn *w = conn ? record_of(h, conn) : NULL;
    if (!w) return NULL;
    w->on_close = fn;
    w->arg = arg;
    return w;
}

void tl_http_unwatch(struct tl_http *h, struct tl_http_conn *w)
{
    (void)h;
    if (!w) return;
    w->on_close = NULL;
    w->arg = NULL;
    record_release_if_idle(w);
}

bool tl_http_peer_closed(const struct tl_http_conn *w)
{
    struct bufferevent *bev = evhttp_connection_get_bufferevent(w->conn);
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    if (fd < 0) return false;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return true;
    return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

size_t tl_http_unsent(const struct tl_http_conn *w)
{
    return w ? conn_unsent(w->conn) : 0;
}

// After the last reply call on conn: while bytes remain in libevent's buffer, the connection
// is marked so that a draining server waits for them.
static void track_flush(struct tl_http *h, struct evhttp_connection *conn)
{
    if (!conn || conn_unsent(conn) == 0) return;
    struct tl_http_conn *w = record_of(h, conn);
    if (w) w->flushing = true;
}

int tl_http_unflushed(struct tl_http *h)
{
    int n = 0;
    for (struct tl_http_conn *w = h->conns, *next; w; w = next) {
        next = w->next;
        if (!w->flushing) continue;
        if (conn_unsent(w->conn) == 0) {
            w->flushing = false;
            record_release_if_idle(w);
        } else {
            n++;
        }
    }
    return n;
}

// ---- replies ---------------------------------------------------------------------------------

static const char *method_name(enum evhttp_cmd_type cmd)
{
    switch (cmd) {
    case EVHTTP_REQ_GET:
        return "GET";
    case EVHTTP_REQ_POST:
        return "POST";
    case EVHTTP_REQ_HEAD:
        return "HEAD";
    case EVHTTP_REQ_PUT:
        return "PUT";
    case EVHTTP_REQ_DELETE:
        return "DELETE";
    case EVHTTP_REQ_OPTIONS:
        return "OPTIONS";
    case EVHTTP_REQ_PATCH:
        return "PATCH";
    default:
        return "?";
    }
}

// "addr:port" of r's peer ("[addr]:port" for IPv6) into buf; NULL when unknown.
static const char *peer_of(struct evhttp_request *r, char *buf, size_t cap)
{
    struct evhttp_connection *conn = evhttp_request_get_connection(r);
    char *addr = NULL;
    ev_uint16_t port = 0;
    if (!conn) return NULL;
    evhttp_connection_get_peer(conn, &addr, &port);
    if (!addr) return NULL;
    snprintf(buf, cap, strchr(addr, ':') ? "[%s]:%u" : "%s:%u", addr, (unsigned)port);
    return buf;
}

void tl_http_access_log_usage(struct evhttp_request *r, int status, const struct tl_http_usage *u)
{
    if (!tl_log_enabled(TL_LOG_INFO)) return;
    int64_t now = tl_time_us();
    char peer[96];
    struct tl_log_access a = {
        .request_id = tl_http_request_id(r),
        .method = method_name(evhttp_request_get_command(r)),
        .path = evhttp_request_get_uri(r),
        .client = peer_of(r, peer, sizeof(peer)),
        .status = status,
        .prompt_tokens = u->n_in,
        .completion_tokens = u->n_out,
        .queue_ms = u->queue_us >= 0 ? (double)u->queue_us / 1000.0 : -1.0,
        .ttft_ms = u->t_first_token_us > 0 && u->t_start_us > 0
                       ? (double)(u->t_first_token_us - u->t_start_us) / 1000.0
                       : -1.0,
        .total_ms = u->t_start_us > 0 ? (double)(now - u->t_start_us) / 1000.0 : -1.0,
    };
    tl_log_access(&a);
}

void tl_http_access_log(struct evhttp_request *r, int status, int64_t t_start_us, int64_t n_in,
                        int64_t n_out)
{
    struct tl_http_usage u = {t_start_us, n_in, n_out, -1, 0};
    tl_http_access_log_usage(r, status, &u);
}

void tl_http_send_text(struct tl_http *h, struct evhttp_request *r, int status,
                       const char *content_type, const char *text, size_t len)
{
    struct evkeyvalq *hdr = evhttp_request_get_output_headers(r);
    evhttp_add_header(hdr, "Content-Type", content_type);
    if (h->draining) evhttp_add_header(hdr, "Connection", "close");
    // A HEAD answer has the headers of the GET answer and no body: libevent would write the
    // body anyway, and a keep-alive client would read it as the start of the next response.
    bool head = evhttp_request_get_command(r) == EVHTTP_REQ_HEAD;
    struct evbuffer *b = head ? NULL : evbuffer_new();
    if (b) evbuffer_add(b, text, len);
    if (head) {
        char cl[32];
        snprintf(cl, sizeof(cl), "%zu", len);
        evhttp_add_header(hdr, "Content-Length", cl);
    }
    struct evhttp_connection *conn = evhttp_request_get_connection(r);
    evhttp_send_reply(r, status, tl_http_reason_phrase(status), b); // frees an orphaned r
    if (b) evbuffer_free(b);
    track_flush(h, conn);
    tl_metrics_count_http(h->metrics, status);
}

static int dump_to_sb(const char *buf, size_t size, void *data)
{
    struct tl_sb *sb = data;
    tl_sb_add(sb, buf, size);
    return tl_sb_ok(sb) ? 0 : -1;
}

// The compact text of j (NULL when memory ran out). Not json_dumps: when one of its appends
// fails while writing an object key, jansson goes on and returns text with the key missing;
// the sticky buffer here notices any failed append.
static char *dump_json(const json_t *j)
{
    struct tl_sb sb;
    tl_sb_init(&sb);
    if (!j || json_dump_callback(j, dump_to_sb, &sb, JSON_COMPACT) != 0) {
        tl_sb_free(&sb);
        return NULL;
    }
    return tl_sb_take(&sb, NULL);
}

void tl_http_send_json(struct tl_http *h, struct evhttp_request *r, int status, json_t *body,
                       int64_t t_start_us, int64_t n_in, int64_t n_out)
{
    struct tl_http_usage u = {t_start_us, n_in, n_out, -1, 0};
    tl_http_send_json_usage(h, r, status, body, &u);
}

void tl_http_send_json_usage(struct tl_http *h, struct evhttp_request *r, int status, json_t *body,
                             const struct tl_http_usage *u)
{
    char *text = dump_json(body);
    json_decref(body);
    static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                              "\"param\":null,\"code\":null}}";
    if (!text) status = 500;
    if (status == 429 || status == 503)
        evhttp_add_header(evhttp_request_get_output_headers(r), "Retry-After", "1");
    // Log first: sending may free an orphaned request.
    tl_http_access_log_usage(r, status, u);
    tl_http_send_text(h, r, status, "application/json", text ? text : oom,
                      text ? strlen(text) : sizeof(oom) - 1);
    free(text);
}

void tl_http_stream_start(struct tl_http *h, struct evhttp_request *r)
{
    struct evkeyvalq *hdr = evhttp_request_get_output_headers(r);
    evhttp_add_header(hdr, "Content-Type", "text/event-stream");
    evhttp_add_header(hdr, "Cache-Control", "no-cache");
    evhttp_add_header(hdr, "X-Accel-Buffering", "no");
    if (h->draining) evhttp_add_header(hdr, "Connection", "close");
    evhttp_send_reply_start(r, 200, "OK");
    tl_metrics_count_http(h->metrics, 200);
}

bool tl_http_stream_json(struct evhttp_request *r, json_t *obj, size_t *unsent)
{
    return tl_http_stream_json_named(r, NULL, obj, unsent);
}

bool tl_http_stream_json_named(struct evhttp_request *r, const char *name, json_t *obj,
                               size_t *unsent)
{
    char *text = dump_json(obj);
    json_decref(obj);
    bool ok = text && tl_http_stream_named(r, name, text, strlen(text), unsent);
    free(text);
    if (!ok) *unsent = conn_unsent(evhttp_request_get_connection(r));
    return ok;
}

bool tl_http_stream_event(struct evhttp_request *r, const char *data, size_t len, size_t *unsent)
{
    return tl_http_stream_named(r, NULL, data, len, unsent);
}

bool tl_http_stream_named(struct evhttp_request *r, const char *name, const char *data, size_t len,
                          size_t *unsent)
{
    *unsent = 0;
    struct tl_sb sb;
    tl_sb_init(&sb);
    if (name) tl_sb_printf(&sb, "event: %s\n", name);
    tl_sse_format(&sb, data, len);
    struct evbuffer *b = tl_sb_ok(&sb) ? evbuffer_new() : NULL;
    bool ok = b && evbuffer_add(b, sb.buf, sb.len) == 0;
    if (ok) evhttp_send_reply_chunk(r, b);
    if (b) evbuffer_free(b);
    tl_sb_free(&sb);
    *unsent = conn_unsent(evhttp_request_get_connection(r));
    return ok;
}

size_t tl_http_stream_raw(struct evhttp_request *r, const char *framed, size_t len)
{
    struct evbuffer *b = evbuffer_new();
    if (b && evbuffer_add_reference(b, framed, len, NULL, NULL) == 0) evhttp_send_reply_chunk(r, b);
    if (b) evbuffer_free(b);
    return conn_unsent(evhttp_request_get_connection(r));
}

bool tl_http_stream_copy(struct evhttp_request *r, const char *framed, size_t len, size_t *unsent)
{
    struct evbuffer *b = evbuffer_new();
    bool ok = b && evbuffer_add(b, framed, len) == 0;
    if (ok) evhttp_send_reply_chunk(r, b);
    if (b) evbuffer_free(b);
    *unsent = conn_unsent(evhttp_request_get_connection(r));
    return ok;
}

void tl_http_stream_end(struct tl_http *h, struct evhttp_request *r)
{
    struct evhttp_connection *conn = evhttp_request_get_connection(r);
    evhttp_send_reply_end(r); // also frees an orphaned request
    track_flush(h, conn);
}
