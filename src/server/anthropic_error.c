/*
 * The Anthropic Messages API's errors (see anthropic.h): the error object and the test for its
 * paths (every answer under /v1/messages, whatever produced it -- request.c's error sender, the
 * Messages stream's error event -- takes Anthropic's shape), and the refusal helpers both
 * translation files use (a 400 naming the field, out of memory, unknown keys, cache_control).
 * A leaf: it calls nothing of the server's but the OpenAI error and JSON string helpers, so
 * request.c, anthropic.c and anthropic_messages.c use it without a circle.
 *
 * Pure; any thread.
 */
#include "server/anthropic.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

bool tl__anth_bad(struct tl_oai_error *err, const char *param, const char *fmt, ...)
{
    err->http_status = 400;
    err->type = "invalid_request_error";
    err->code = "invalid_value";
    snprintf(err->param, sizeof(err->param), "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
    return false;
}

bool tl__anth_no_memory(struct tl_oai_error *err)
{
    tl_oai_error_from_status(err, TL_ERR_NOMEM, "out of memory translating the request");
    return false;
}

// Checks that an object holds only the given keys (NULL-terminated list); a key in `harmless`
// is accepted too (it cannot change the output). False with a 400 naming the first other key.
bool tl__anth_only_keys(json_t *o, const char *where, const char *const *keys,
                        const char *const *harmless, struct tl_oai_error *err)
{
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
    {
        bool known = false;
        for (int i = 0; keys && keys[i] && !known; i++)
            known = !strcmp(k, keys[i]);
        for (int i = 0; harmless && harmless[i] && !known; i++)
            known = !strcmp(k, harmless[i]);
        if (!known) {
            char param[128];
            snprintf(param, sizeof(param), "%s%s%.60s", where, *where ? "." : "", k);
            return tl__anth_bad(err, param, "'%s' is not supported by this server", param);
        }
    }
    return true;
}

// cache_control: {"type": "ephemeral", ["ttl"]}, accepted and of no effect (tokenloom's prefix
// cache is automatic).
bool tl__anth_cache_control(json_t *v, const char *where, struct tl_oai_error *err)
{
    if (tl__anth_absent(v)) return true;
    if (!json_is_object(v) || !tl__anth_str_is(json_object_get(v, "type"), "ephemeral"))
        return tl__anth_bad(err, where, "'%s.cache_control' must be {\"type\": \"ephemeral\"}",
                            where);
    return true;
}

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
