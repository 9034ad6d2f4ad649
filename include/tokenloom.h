/*
 * tokenloom public C API.
 *
 * A model is loaded once (tl_model_load) and shared read-only. An engine (tl_engine_create) owns
 * a paged KV cache and a scheduler over that model; requests are submitted from any thread and
 * advanced by calling tl_engine_step from one thread (the "engine thread"), which also invokes
 * each request's event callback. Every function that can fail returns a tl_status (0 = OK,
 * negative = error); tl_last_error() then holds a one-line description for the calling thread.
 */
#ifndef TOKENLOOM_H
#define TOKENLOOM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TL_WARN_UNUSED __attribute__((warn_unused_result))
#else
#define TL_WARN_UNUSED
#endif

// ---- status --------------------------------------------------------------------------------

typedef enum tl_status {
    TL_OK = 0,
    TL_ERR_INVALID_ARG = -1, // a caller-supplied value is out of range or malformed
    TL_ERR_NOMEM = -2,       // an allocation failed
    TL_ERR_IO = -3,          // open/read/write/mmap failed
    TL_ERR_FORMAT = -4,      // a file is malformed (bad magic, truncated, inconsistent)
    TL_ERR_UNSUPPORTED = -5, // valid but not supported (architecture, tensor type, version)
    TL_ERR_TOO_LONG = -6,    // a prompt or request exceeds the context or the KV pool
    TL_ERR_FULL = -7,        // a queue or capacity limit is reached; retry later
    TL_ERR_NOT_FOUND = -8,   // no such key, tensor, request
    TL_ERR_STATE = -9,       // the object is in the wrong state for this call (e.g. shutting down)
} tl_status;

// A short constant name for a status ("TL_ERR_FORMAT" -> "format error").
const char *tl_status_str(tl_status st);

// The message of the last error raised on the calling thread (never NULL; "" if none).
// Thread-safe: each thread has its own.
const char *tl_last_error(void);

#ifdef __cplusplus
}
#endif
#endif // TOKENLOOM_H
