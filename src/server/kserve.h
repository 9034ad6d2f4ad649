/*
 * The HTTP side of the Open Inference Protocol (KServe v2) on the OpenAI server: health,
 * model metadata and readiness, and Triton's generate extension (/v2/models/NAME/generate and
 * /generate_stream, SSE). Generation reuses the completions pipeline (request.c): the body is
 * turned into a completions request and only the reply's JSON shape differs.
 *
 * Threads: the event-loop thread.
 */
#ifndef TL_SERVER_KSERVE_H
#define TL_SERVER_KSERVE_H

#include "server/state.h"

#include <event2/http.h>
#include <jansson.h>

// Handles any path under /v2 (routes.c sends them here): 404/405 for the rest.
void tl_srv_kserve_route(struct tl_server *s, struct evhttp_request *r, int64_t t0,
                         const char *path);

#endif
