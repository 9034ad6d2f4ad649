/*
 * The OpenAI error object (see openai.h, struct tl_oai_error): filled by every request
 * handler, and a tl_status mapped to its HTTP status and OpenAI type/code in this one place
 * (tl_oai_error_json in openai_reply.c serialises it). A leaf of the server's OpenAI files:
 * it calls none of them.
 *
 * Pure functions over the caller's object; thread-safe.
 */
#include "server/openai.h"

#include <stdarg.h>
#include <stdio.h>

void tl_oai_error_set(struct tl_oai_error *err, int http_status, const char *type, const char *code,
                      const char *param, const char *fmt, ...)
{
    err->http_status = http_status;
    err->type = type;
    err->code = code;
    snprintf(err->param, sizeof(err->param), "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
}

void tl_oai_error_from_status(struct tl_oai_error *err, tl_status st, const char *message)
{
    const char *msg = message && *message ? message : tl_status_str(st);
    switch (st) {
    case TL_ERR_INVALID_ARG:
    case TL_ERR_TOO_LONG:
    case TL_ERR_UNSUPPORTED:
        tl_oai_error_set(err, 400, "invalid_request_error", "invalid_value", NULL, "%s", msg);
        break;
    case TL_ERR_NOT_FOUND:
        tl_oai_error_set(err, 404, "invalid_request_error", "not_found", NULL, "%s", msg);
        break;
    case TL_ERR_FULL:
        tl_oai_error_set(err, 429, "rate_limit_error", "rate_limit_exceeded", NULL, "%s", msg);
        break;
    case TL_ERR_NOMEM:
    case TL_ERR_STATE:
        tl_oai_error_set(err, 503, "server_error", "service_unavailable", NULL, "%s", msg);
        break;
    default:
        tl_oai_error_set(err, 500, "server_error", "internal_error", NULL, "%s", msg);
        break;
    }
}
