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

// The generate extension's JSON: {"model_name", "model_version", "text_output"} plus, when
// finish is set (the whole reply or the last stream event), "finish_reason", "prompt_tokens"
// and "completion_tokens". NULL when memory runs out.
json_t *tl_kserve_output_json(const char *model, const char *text, size_t len, const char *finish,
                              int64_t n_prompt, int64_t n_generated);

#endif
