/*
 * The checks every route file (routes.c, kserve.c) applies before its handler: the API key,
 * readiness, the method, and a POST body parsed once into a JSON object with its "model" field
 * checked once against the served names. Each answers the error itself and returns false/NULL.
 *
 * Threads: the event-loop thread.
 */
#ifndef TL_SERVER_ROUTE_CHECKS_H
#define TL_SERVER_ROUTE_CHECKS_H

#include "server/state.h"

#include <event2/http.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

// The POST body as a JSON object with an acceptable "model" (413, 400 or 404 otherwise); new
// reference.
json_t *tl_srv_route_body(struct tl_server *s, struct evhttp_request *r, int64_t t0);
bool tl_srv_route_auth(struct tl_server *s, struct evhttp_request *r, int64_t t0);  // 401
bool tl_srv_route_ready(struct tl_server *s, struct evhttp_request *r, int64_t t0); // 503
// 405 with Allow unless ok.
bool tl_srv_route_method(struct tl_server *s, struct evhttp_request *r, int64_t t0,
                         const char *path, bool ok, const char *allowed);

// Whether name is one of the served model's names (its id, file name or the file's stem).
bool tl_srv_model_matches(const struct tl_server *s, const char *name);

// An OpenAI error reply: from its fields, or from a tl_status (the one mapping in openai_error.c).
void tl_srv_reply_error(struct tl_server *s, struct evhttp_request *r, int64_t t0, int status,
                        const char *type, const char *code, const char *param, const char *msg);
void tl_srv_reply_status(struct tl_server *s, struct evhttp_request *r, int64_t t0, tl_status st,
                         const char *msg);

#endif
