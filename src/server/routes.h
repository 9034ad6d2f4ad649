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

// The transport's request handler (arg = struct tl_server *).
void tl_srv_routes_handle(struct evhttp_request *r, void *arg);

#endif
