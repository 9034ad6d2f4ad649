/*
 * The Anthropic Messages API's error object and the test for its paths (see anthropic.h): every
 * answer under /v1/messages, whatever produced it (request.c's error sender, the Messages
 * stream's error event), takes Anthropic's shape. A leaf: it calls nothing of the server's but
 * the JSON string helper, so request.c can use it without a circle through the handlers.
 *
 * Pure; any thread.
 */
#include "server/anthropic.h"

#include <string.h>

bool tl_anth_is_path(struct evhttp_request *r)
{
    const struct evhttp_uri *uri = r ? evhttp_request_get_evhttp_uri(r) : NULL;
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    return path && !strncmp(path, "/v1/messages", 12) && (!path[12] || path[12] == '/');
}

json_t *tl_anth_error_json(const struct tl_oai_error *err, const char *request_id)
{
    int st = err->http_status;
    const char *type = st == 401                ? "authentication_error"
                       : st == 403              ? "permission_error"
                       : st == 404              ? "not_found_error"
                       : st == 413              ? "request_too_large"
                       : st == 429              ? "rate_limit_error"
                       : st == 503 || st == 529 ? "overloaded_error"
                       : st >= 500              ? "api_error"
                                                : "invalid_request_error";
    json_t *msg = tl_oai_string(err->message, strlen(err->message));
    json_t *o = msg ? json_pack("{s:s, s:{s:s, s:o}}", "type", "error", "error", "type", type,
                                "message", msg)
                    : NULL;
    if (o && request_id && *request_id &&
        json_object_set_new(o, "request_id", json_string(request_id))) {
        json_decref(o);
        return NULL;
    }
    return o;
}
