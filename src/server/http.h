/*
 * The server's HTTP transport: libevent's evhttp bound to a socket, the replies (whole, or a
 * chunked stream), request ids, the access log, and connection watching (close callbacks, a
 * liveness probe, the output still unsent). It knows nothing of endpoints or of requests in
 * flight: whoever creates it hands it the request handler, and a watcher hands it a close
 * callback.
 *
 * Request ids: every request gets one before the handler runs, the client's X-Request-Id when
 * it is 1-128 visible ASCII characters (0x21-0x7e), else 32 random hex digits; it is echoed in
 * the X-Request-Id response header of every reply and written in the access log.
 *
 * Threads: everything runs on the event-loop thread that owns the event_base.
 */
#ifndef TL_SERVER_HTTP_H
#define TL_SERVER_HTTP_H

#include "front/metrics.h"

#include <tokenloom.h>

#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tl_http_config {
    const char *host;
    int port;              // 0 = any free port
    size_t max_body_bytes; // larger bodies get 413
    int timeout_s;         // per-connection read/write idle timeout
};

struct tl_http_conn; // a watched connection (http.c)

typedef void (*tl_http_handler_fn)(struct evhttp_request *r, void *arg);
typedef void (*tl_http_close_fn)(void *arg);

// What the access log says of a finished request beyond its status. A negative count or
// duration means "not applicable" (null in the JSON log).
struct tl_http_usage {
    int64_t t_start_us;       // when the handler got the request (tl_time_us); 0 = unknown
    int64_t n_in, n_out;      // prompt and completion tokens
    int64_t queue_us;         // the engine's queueing time (generation only)
    int64_t t_first_token_us; // when the first token came (tl_time_us; generation only)
};

struct tl_http {
    struct evhttp *evh;                   // owned
    struct evhttp_bound_socket *listener; // owned by evh; NULL once closed
    struct tl_metrics *metrics;           // borrowed: every reply counts its status here
    struct tl_http_conn *conns;           // owned: watched connections (doubly linked)
    tl_http_handler_fn handler;           // the server's request handler and its argument
    void *handler_arg;
    uint64_t id_state; // splitmix64 state for generated request ids (seeded from getrandom)
    bool draining;     // every reply closes its connection (tl_http_set_draining)
    size_t max_body_bytes;
    int port; // the port actually bound
};

// Creates the evhttp on base with the limits of c, binds it and routes every request (any
// method) to handler. Fails with TL_ERR_IO when the address cannot be bound.
tl_status tl_http_open(struct tl_http *h, struct event_base *base, const struct tl_http_config *c,
                       struct tl_metrics *metrics, tl_http_handler_fn handler, void *arg);
// Stops accepting new connections; open connections stay.
void tl_http_stop_listening(struct tl_http *h);
// From now on every reply carries "Connection: close" (a draining server keeps accepting, so
// a gateway gets 503s it can retry elsewhere instead of refused connections, but lets no
// keep-alive connection outlive it).
void tl_http_set_draining(struct tl_http *h);
// Closes every connection and frees evh (pending output is dropped: drain first).
void tl_http_close(struct tl_http *h);

// ---- replies (each counts its status in h->metrics) -------------------------------------------

// 32 fresh random hex digits (a generated request id) into out.
void tl_http_new_request_id(struct tl_http *h, char out[33]);
// The bufferevent of a new connection (evhttp_set_bevcb; arg = the struct tl_http): it turns
// libevent's own HTML error pages (413 body too large, 400 malformed request, ...) into the
// API's JSON error with an X-Request-Id, counted and logged (http_errors.c).
struct bufferevent *tl_http_new_bufferevent(struct event_base *base, void *arg);
// "Payload Too Large" for 413, etc. ("Error" for a status without a phrase here).
const char *tl_http_reason_phrase(int status);
// The request's id (see above; "" for a request that never reached the handler).
const char *tl_http_request_id(struct evhttp_request *r);
// Writes the access-log line of r (call before the reply that may free r).
void tl_http_access_log(struct evhttp_request *r, int status, int64_t t_start_us, int64_t n_in,
                        int64_t n_out);
void tl_http_access_log_usage(struct evhttp_request *r, int status, const struct tl_http_usage *u);
// A whole reply (a HEAD request gets the headers only).
void tl_http_send_text(struct tl_http *h, struct evhttp_request *r, int status,
                       const char *content_type, const char *text, size_t len);
// A JSON reply (body stolen; NULL or unserialisable -> 500), logged first. 429 and 503 add
// Retry-After: 1.
void tl_http_send_json(struct tl_http *h, struct evhttp_request *r, int status, json_t *body,
                       int64_t t_start_us, int64_t n_in, int64_t n_out);
void tl_http_send_json_usage(struct tl_http *h, struct evhttp_request *r, int status, json_t *body,
                             const struct tl_http_usage *u);
// Starts a 200 text/event-stream reply.
void tl_http_stream_start(struct tl_http *h, struct evhttp_request *r);
// Sends one SSE event with data text; returns the bytes the connection holds unsent (0 when
// it is gone). False when memory ran out (nothing was sent).
bool tl_http_stream_event(struct evhttp_request *r, const char *data, size_t len, size_t *unsent);
// The same with an event name ("event: NAME" before the data, as the Responses API streams).
bool tl_http_stream_named(struct evhttp_request *r, const char *name, const char *data, size_t len,
                          size_t *unsent);
// One named SSE event with the compact JSON of obj (stolen); as tl_http_stream_json.
bool tl_http_stream_json_named(struct evhttp_request *r, const char *name, json_t *obj,
                               size_t *unsent);
// Sends one SSE event with the compact JSON of obj (stolen); as tl_http_stream_event.
bool tl_http_stream_json(struct evhttp_request *r, json_t *obj, size_t *unsent);
// Sends bytes already framed as SSE (no allocation of ours); returns the bytes unsent.
size_t tl_http_stream_raw(struct evhttp_request *r, const char *framed, size_t len);
// Sends a copy of bytes already framed as SSE (the caller may free them at once); as
// tl_http_stream_event.
bool tl_http_stream_copy(struct evhttp_request *r, const char *framed, size_t len, size_t *unsent);
// Ends a streamed reply (frees r, also an orphaned one).
void tl_http_stream_end(struct tl_http *h, struct evhttp_request *r);

// ---- connections ------------------------------------------------------------------------------

// Calls fn(arg) when r's connection closes (libevent then leaves r orphaned, ours to end with
// the usual reply call). Returns the watch, NULL when r has no connection (already gone).
struct tl_http_conn *tl_http_watch_close(struct tl_http *h, struct evhttp_request *r,
                                         tl_http_close_fn fn, void *arg);
// Stops watching (before the last reply call). NULL is a no-op.
void tl_http_unwatch(struct tl_http *h, struct tl_http_conn *w);
// True when the peer closed the watched connection (EOF or reset), checked without consuming
// what it sent (a pipelined next request stays for evhttp).
bool tl_http_peer_closed(const struct tl_http_conn *w);
// Bytes of the watched connection's output not yet handed to the kernel.
size_t tl_http_unsent(const struct tl_http_conn *w);
// Connections whose finished replies still have bytes in libevent's buffers (a draining
// server waits for 0 before it frees them).
int tl_http_unflushed(struct tl_http *h);

#endif
