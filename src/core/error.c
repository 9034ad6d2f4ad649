/*
 * Per-thread error message storage and the always-on assertion. See error.h.
 */
#include "core/error.h"

#include <stdarg.h>
#include <string.h>

static _Thread_local char err_msg[512];

tl_status tl__errorf(tl_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_msg, sizeof(err_msg), fmt, ap);
    va_end(ap);
    return code;
}

tl_status tl__error_prefix(tl_status code, const char *prefix)
{
    char tmp[sizeof(err_msg)];
    snprintf(tmp, sizeof(tmp), "%s: %s", prefix, err_msg);
    memcpy(err_msg, tmp, sizeof(err_msg));
    return code;
}

void tl__error_clear(void)
{
    err_msg[0] = '\0';
}

const char *tl_last_error(void)
{
    return err_msg;
}

const char *tl_status_str(tl_status st)
{
    switch (st) {
    case TL_OK:
        return "ok";
    case TL_ERR_INVALID_ARG:
        return "invalid argument";
    case TL_ERR_NOMEM:
        return "out of memory";
    case TL_ERR_IO:
        return "i/o error";
    case TL_ERR_FORMAT:
        return "format error";
    case TL_ERR_UNSUPPORTED:
        return "unsupported";
    case TL_ERR_TOO_LONG:
        return "too long";
    case TL_ERR_FULL:
        return "full";
    case TL_ERR_NOT_FOUND:
        return "not found";
    case TL_ERR_STATE:
        return "wrong state";
    }
    return "unknown error";
}

void tl__assert_fail(const char *file, int line, const char *expr)
{
    fprintf(stderr, "tokenloom: assertion failed at %s:%d: %s\n", file, line, expr);
    fflush(stderr);
    abort();
}
