/*
 * stderr logger (see log.h): text lines "2026-01-31T12:00:00.123Z tokenloom LEVEL: message"
 * or JSON objects, one per line, with UTC timestamps in milliseconds.
 *
 * DESIGN
 * Every line is built in a fixed buffer on the caller's stack and written with one fputs, so
 * lines of the loop and engine threads never interleave and logging never allocates (it must
 * work when memory runs out). A message longer than the buffer is cut, never the JSON syntax:
 * the escaper stops before an escape that would not fit and the closing characters have
 * room reserved.
 *
 * The level is read lazily from TOKENLOOM_LOG; a racy first read is harmless because every
 * thread computes the same value. THREADS: any.
 */
#include "core/log.h"

#include "core/utf8.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static atomic_int log_level = -1;
static atomic_int log_format = TL_LOG_FORMAT_TEXT;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

static int level_from_env(void)
{
    const char *s = getenv("TOKENLOOM_LOG");
    if (!s) return TL_LOG_INFO;
    if (!strcmp(s, "error")) return TL_LOG_ERROR;
    if (!strcmp(s, "warn")) return TL_LOG_WARN;
    if (!strcmp(s, "debug")) return TL_LOG_DEBUG;
    return TL_LOG_INFO;
}

int tl_log_enabled(enum tl_log_level level)
{
    int cur = atomic_load_explicit(&log_level, memory_order_relaxed);
    if (cur < 0) {
        cur = level_from_env();
        atomic_store_explicit(&log_level, cur, memory_order_relaxed);
    }
    return (int)level <= cur;
}

void tl_log_set_level(enum tl_log_level level)
{
    atomic_store_explicit(&log_level, (int)level, memory_order_relaxed);
}

void tl_log_set_format(enum tl_log_format format)
{
    atomic_store_explicit(&log_format, (int)format, memory_order_relaxed);
}

enum tl_log_format tl_log_get_format(void)
{
    return (enum tl_log_format)atomic_load_explicit(&log_format, memory_order_relaxed);
}

bool tl_log_format_from_name(const char *name, enum tl_log_format *out)
{
    if (!strcmp(name, "text")) {
        *out = TL_LOG_FORMAT_TEXT;
        return true;
    }
    if (!strcmp(name, "json")) {
        *out = TL_LOG_FORMAT_JSON;
        return true;
    }
    return false;
}

// ---- JSON escaping ---------------------------------------------------------------------------

size_t tl_log_json_escape(char *out, size_t cap, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)s[i];
        char esc[6];
        size_t n = 0, used = 1;
        if (c == '"' || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c, n = 2;
        } else if (c == '\n' || c == '\r' || c == '\t') {
            esc[0] = '\\', esc[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't', n = 2;
        } else if (c < 0x20 || c == 0x7f) {
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[c >> 4], esc[5] = hex[c & 15], n = 6;
        } else if (c < 0x80) {
            esc[0] = (char)c, n = 1;
        } else {
            uint32_t cp;
            int k = tl_utf8_decode(s + i, len - i, &cp);
            if (k > 0) {
                if (o + (size_t)k > cap) break;
                memcpy(out + o, s + i, (size_t)k);
                o += (size_t)k;
                i += (size_t)k;
                continue;
            }
            memcpy(esc, "\\ufffd", 6), n = 6; // one invalid byte
        }
        if (o + n > cap) break;
        memcpy(out + o, esc, n);
        o += n;
        i += used;
    }
    return o;
}

// ---- lines -----------------------------------------------------------------------------------

// A line under construction in a fixed buffer; RESERVE bytes stay free for the closing "}\n".
struct line {
    char buf[8192];
    size_t len;
};
enum { RESERVE = 8 };

static void put(struct line *l, const char *s, size_t n)
{
    size_t room = sizeof(l->buf) - RESERVE - l->len;
    if (n > room) n = room;
    memcpy(l->buf + l->len, s, n);
    l->len += n;
}

static void puts_(struct line *l, const char *s)
{
    put(l, s, strlen(s));
}

static void putf(struct line *l, const char *fmt, ...) TL_PRINTF(2, 3);
static void putf(struct line *l, const char *fmt, ...)
{
    size_t room = sizeof(l->buf) - RESERVE - l->len;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(l->buf + l->len, room + 1, fmt, ap); // +1: the NUL may use the reserve
    va_end(ap);
    if (n > 0) l->len += (size_t)n < room ? (size_t)n : room;
}

// "name":"escaped" (or "name":null), with a leading comma.
static void put_field_str(struct line *l, const char *name, const char *s, size_t len)
{
    putf(l, ",\"%s\":", name);
    if (!s) {
        puts_(l, "null");
        return;
    }
    if (sizeof(l->buf) - RESERVE - l->len < 2) return;
    l->buf[l->len++] = '"';
    size_t room = sizeof(l->buf) - RESERVE - l->len - 1; // the closing quote
    l->len += tl_log_json_escape(l->buf + l->len, room, s, len);
    l->buf[l->len++] = '"';
}

static void put_field_num(struct line *l, const char *name, double v, bool integer)
{
    if (v < 0)
        putf(l, ",\"%s\":null", name);
    else if (integer)
        putf(l, ",\"%s\":%lld", name, (long long)v);
    else
        putf(l, ",\"%s\":%.3f", name, v);
}

static void put_time(struct line *l)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    putf(l, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
         tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ts.tv_nsec / 1000000));
}

// {"time":"...","level":"...","msg":"..." (the caller adds fields and ends the line).
static void json_open(struct line *l, enum tl_log_level level, const char *msg, size_t len)
{
    puts_(l, "{\"time\":\"");
    put_time(l);
    putf(l, "\",\"level\":\"%s\"", level_names[level]);
    put_field_str(l, "msg", msg, len);
}

static void end_line(struct line *l, bool json)
{
    if (json) l->buf[l->len++] = '}';
    l->buf[l->len++] = '\n';
    l->buf[l->len] = '\0';
    fputs(l->buf, stderr);
}

void tl_log(enum tl_log_level level, const char *fmt, ...)
{
    if (!tl_log_enabled(level)) return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1;
    struct line l;
    l.len = 0;
    bool json = tl_log_get_format() == TL_LOG_FORMAT_JSON;
    if (json) {
        json_open(&l, level, msg, len);
    } else {
        // UTC timestamp with milliseconds (ISO 8601), so lines from the loop and engine
        // threads and from several replicas can be ordered and matched to access logs.
        put_time(&l);
        putf(&l, " tokenloom %s: ", level_names[level]);
        put(&l, msg, len);
    }
    end_line(&l, json);
}

void tl_log_access(const struct tl_log_access *a)
{
    if (!tl_log_enabled(TL_LOG_INFO)) return;
    const char *method = a->method ? a->method : "?";
    const char *path = a->path ? a->path : "?";
    size_t path_len = strnlen(path, 1024);
    size_t raw_path_len = a->path ? path_len : 0;
    struct line l;
    l.len = 0;
    if (tl_log_get_format() == TL_LOG_FORMAT_JSON) {
        char msg[320];
        int n = snprintf(msg, sizeof(msg), "%s %.*s %d", method,
                         (int)(path_len < 256 ? path_len : 256), path, a->status);
        if (n >= (int)sizeof(msg)) n = (int)sizeof(msg) - 1;
        json_open(&l, TL_LOG_INFO, msg, n > 0 ? (size_t)n : 0);
        put_field_str(&l, "request_id", a->request_id, a->request_id ? strlen(a->request_id) : 0);
        put_field_str(&l, "method", a->method, a->method ? strlen(a->method) : 0);
        put_field_str(&l, "path", a->path, raw_path_len);
        putf(&l, ",\"status\":%d", a->status);
        put_field_num(&l, "prompt_tokens", (double)a->prompt_tokens, true);
        put_field_num(&l, "completion_tokens", (double)a->completion_tokens, true);
        put_field_num(&l, "queue_ms", a->queue_ms, false);
        put_field_num(&l, "ttft_ms", a->ttft_ms, false);
        put_field_num(&l, "total_ms", a->total_ms, false);
        put_field_str(&l, "client", a->client, a->client ? strlen(a->client) : 0);
        end_line(&l, true);
        return;
    }
    put_time(&l);
    puts_(&l, " tokenloom info: ");
    // The text format keeps the target printable: bytes outside ASCII's printable range as \xHH.
    putf(&l, "%s ", method);
    for (size_t i = 0; i < path_len && i < 300; i++) {
        unsigned char c = (unsigned char)path[i];
        if (c >= 0x21 && c < 0x7f)
            put(&l, (const char *)&c, 1);
        else
            putf(&l, "\\x%02x", c);
    }
    putf(&l, " %d in=%lld out=%lld %.1fms", a->status,
         (long long)(a->prompt_tokens > 0 ? a->prompt_tokens : 0),
         (long long)(a->completion_tokens > 0 ? a->completion_tokens : 0),
         a->total_ms > 0 ? a->total_ms : 0.0);
    if (a->ttft_ms >= 0) putf(&l, " ttft=%.1fms", a->ttft_ms);
    putf(&l, " id=%s client=%s", a->request_id ? a->request_id : "-", a->client ? a->client : "-");
    end_line(&l, false);
}
