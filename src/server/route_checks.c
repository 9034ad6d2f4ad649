/*
 * The checks every route file applies (see route_checks.h).
 *
 * Threads: the event-loop thread.
 */
#include "server/route_checks.h"

#include "server/request.h"

#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>
#include <string.h>

void tl_srv_reply_error(struct tl_server *s, struct evhttp_request *r, int64_t t0, int status,
                        const char *type, const char *code, const char *param, const char *msg)
{
    struct tl_oai_error err;
    tl_oai_error_set(&err, status, type, code, param, "%s", msg);
    tl_srv_send_error(s, r, &err, t0);
}

void tl_srv_reply_status(struct tl_server *s, struct evhttp_request *r, int64_t t0, tl_status st,
                         const char *msg)
{
    struct tl_oai_error err;
    tl_oai_error_from_status(&err, st, msg);
    tl_srv_send_error(s, r, &err, t0);
}

// The served id, the file's base name or that name without its extension.
bool tl_srv_model_matches(const struct tl_server *s, const char *name)
{
    if (!strcmp(name, s->model_name) || !strcmp(name, s->model_base)) return true;
    const char *dot = strrchr(s->model_base, '.');
    size_t stem = dot ? (size_t)(dot - s->model_base) : strlen(s->model_base);
    return strlen(name) == stem && !strncmp(name, s->model_base, stem);
}

// The one check of a body's "model": absent or null is fine; anything else must be a string
// naming the served model. False after answering.
static bool check_model_field(struct tl_server *s, struct evhttp_request *r, int64_t t0,
                              json_t *root)
{
    const char *name;
    struct tl_oai_error err;
    if (!tl_oai_model_field(root, &name, &err)) {
        tl_srv_send_error(s, r, &err, t0);
        return false;
    }
    if (!name || tl_srv_model_matches(s, name)) return true;
    tl_oai_error_set(&err, 404, "invalid_request_error", "model_not_found", "model",
                     "The model '%.200s' does not exist; this server serves '%.150s'", name,
                     s->model_name);
    tl_srv_send_error(s, r, &err, t0);
    return false;
}

// The body as a JSON object with an acceptable model field (new reference), or NULL after
// answering. A body over the limit that evhttp let through (chunked) is refused here too.
json_t *tl_srv_route_body(struct tl_server *s, struct evhttp_request *r, int64_t t0)
{
    struct evbuffer *b = evhttp_request_get_input_buffer(r);
    size_t len = b ? evbuffer_get_length(b) : 0;
    if (len > s->cfg.max_body_bytes) {
        char msg[160];
        snprintf(msg, sizeof(msg), "The request body is %zu bytes; the limit is %zu", len,
                 s->cfg.max_body_bytes);
        tl_srv_reply_error(s, r, t0, 413, "invalid_request_error", "request_too_large", NULL, msg);
        return NULL;
    }
    const char *body = len ? (const char *)evbuffer_pullup(b, -1) : "";
    if (!body) {
        tl_srv_reply_status(s, r, t0, TL_ERR_NOMEM, "out of memory reading the body");
        return NULL;
    }
    struct tl_oai_error err;
    json_t *root = tl_oai_load_body(body, len, &err);
    if (root && !json_is_object(root)) {
        json_decref(root);
        root = NULL;
        tl_oai_error_set(&err, 400, "invalid_request_error", "invalid_value", NULL,
                         "the request body must be a JSON object");
    }
    if (!root) {
        tl_srv_send_error(s, r, &err, t0);
        return NULL;
    }
    if (!check_model_field(s, r, t0, root)) {
        json_decref(root);
        return NULL;
    }
    return root;
}

// Compares two strings in time independent of where they differ.
static bool same_secret(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char d = la != lb;
    for (size_t i = 0; i < la; i++)
        d |= (unsigned char)(a[i] ^ b[i % (lb ? lb : 1)]);
    return d == 0;
}

// Answers 401 unless the request carries the API key (when one is set). True when allowed.
bool tl_srv_route_auth(struct tl_server *s, struct evhttp_request *r, int64_t t0)
{
    if (!s->cfg.api_key || !*s->cfg.api_key) return true;
    const struct evkeyvalq *in = evhttp_request_get_input_headers(r);
    const char *h = evhttp_find_header(in, "Authorization");
    const char *x = evhttp_find_header(in, "x-api-key"); // Anthropic's clients send this one
    if (h && !strncmp(h, "Bearer ", 7) && same_secret(h + 7, s->cfg.api_key)) return true;
    if (x && same_secret(x, s->cfg.api_key)) return true;
    evhttp_add_header(evhttp_request_get_output_headers(r), "WWW-Authenticate", "Bearer");
    tl_srv_reply_error(s, r, t0, 401, "invalid_request_error", "invalid_api_key", NULL,
                       h || x ? "Incorrect API key provided"
                              : "Missing API key: send 'Authorization: Bearer <key>' or "
                                "'x-api-key: <key>'");
    return false;
}

// Answers 503 unless the model is loaded and the server is not stopping. True when ready.
bool tl_srv_route_ready(struct tl_server *s, struct evhttp_request *r, int64_t t0)
{
    int st = atomic_load(&s->state);
    if (st == TL_SRV_READY) return true;
    tl_srv_reply_error(s, r, t0, 503, "server_error", "service_unavailable", NULL,
                       st == TL_SRV_LOADING    ? "the model is still loading"
                       : st == TL_SRV_DRAINING ? "the server is shutting down"
                                               : "the model failed to load");
    return false;
}

bool tl_srv_route_method(struct tl_server *s, struct evhttp_request *r, int64_t t0,
                         const char *path, bool ok, const char *allowed)
{
    if (ok) return true;
    evhttp_add_header(evhttp_request_get_output_headers(r), "Allow", allowed);
    char msg[300];
    snprintf(msg, sizeof(msg), "Method not allowed: %.250s takes %s", path, allowed);
    tl_srv_reply_error(s, r, t0, 405, "invalid_request_error", "method_not_allowed", NULL, msg);
    return false;
}
