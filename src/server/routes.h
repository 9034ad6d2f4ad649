/*
 * The server's endpoints: dispatch (routing, 404/405, API-key check), the body of every POST
 * parsed once and its model field checked once, and the small endpoints (/health, /metrics,
 * /v1/models, /tokenize, /detokenize). Generating requests go on to request.c.
 *
 * Threads: the event-loop thread.
 */
#ifndef TL_SERVER_ROUTES_H
#define TL_SERVER_ROUTES_H

#include <event2/http.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

// The transport's request handler (arg = struct tl_server *).
void tl_srv_routes_handle(struct evhttp_request *r, void *arg);

// For other route files (kserve.c). Each answers the error itself and returns false/NULL.
struct tl_server;
// The POST body as a JSON object (413, 400 otherwise); new reference.
json_t *tl_srv_route_body(struct tl_server *s, struct evhttp_request *r, int64_t t0);
bool tl_srv_route_auth(struct tl_server *s, struct evhttp_request *r, int64_t t0);  // 401
bool tl_srv_route_ready(struct tl_server *s, struct evhttp_request *r, int64_t t0); // 503
// 405 with Allow unless ok.
bool tl_srv_route_method(struct tl_server *s, struct evhttp_request *r, int64_t t0,
                         const char *path, bool ok, const char *allowed);

#endif
