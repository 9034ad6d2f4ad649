/*
 * Logging to stderr with a level threshold taken once from TOKENLOOM_LOG (error, warn, info,
 * debug; default info), in one of two formats chosen once at start (`serve --log-format`):
 * text ("2026-01-31T12:00:00.123Z tokenloom info: message") or JSON (one object per line:
 * {"time":"2026-01-31T12:00:00.123Z","level":"info","msg":"message"}, strings escaped, invalid
 * UTF-8 replaced by U+FFFD). The access log (one line per finished HTTP request) has its own
 * entry point so that the JSON format carries its fields as fields.
 *
 * Thread-safe: each call writes one line with one fputs; the level and format are atomics.
 */
#ifndef TL_CORE_LOG_H
#define TL_CORE_LOG_H

#include "core/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum tl_log_level { TL_LOG_ERROR = 0, TL_LOG_WARN = 1, TL_LOG_INFO = 2, TL_LOG_DEBUG = 3 };
enum tl_log_format { TL_LOG_FORMAT_TEXT = 0, TL_LOG_FORMAT_JSON = 1 };

void tl_log(enum tl_log_level level, const char *fmt, ...) TL_PRINTF(2, 3);
void tl_log_set_level(enum tl_log_level level);
int tl_log_enabled(enum tl_log_level level);

void tl_log_set_format(enum tl_log_format format);
enum tl_log_format tl_log_get_format(void);
// "text" or "json" -> *out; false for anything else.
bool tl_log_format_from_name(const char *name, enum tl_log_format *out);

// One finished HTTP request. Strings may be NULL (JSON null; "?" or "-" in text); path is the raw
// request target (any bytes). A negative count or duration means "not applicable" (null).
struct tl_log_access {
    const char *request_id;
    const char *method;
    const char *path;
    const char *client; // "addr:port" of the peer
    int status;
    int64_t prompt_tokens, completion_tokens;
    double queue_ms, ttft_ms, total_ms;
};
// Writes the access-log line at level info (nothing when info is disabled).
void tl_log_access(const struct tl_log_access *a);

// Writes s[0..len) as the body of a JSON string (no quotes) into out[0..cap): quotes,
// backslashes and control characters escaped, invalid UTF-8 bytes as \ufffd. Never splits an
// escape or a character: stops before the first one that does not fit. Returns the bytes
// written (out is not NUL-terminated).
size_t tl_log_json_escape(char *out, size_t cap, const char *s, size_t len);

#define TL_LOGE(...) tl_log(TL_LOG_ERROR, __VA_ARGS__)
#define TL_LOGW(...) tl_log(TL_LOG_WARN, __VA_ARGS__)
#define TL_LOGI(...) tl_log(TL_LOG_INFO, __VA_ARGS__)
#define TL_LOGD(...) tl_log(TL_LOG_DEBUG, __VA_ARGS__)

#endif
