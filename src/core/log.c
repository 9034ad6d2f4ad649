/*
 * stderr logger: one line per call, "2026-01-31T12:00:00.123Z tokenloom LEVEL: message" (UTC).
 * The level is read lazily from TOKENLOOM_LOG; a racy first read is harmless because every
 * thread computes the same value.
 */
#include "core/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

static atomic_int log_level = -1;

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

void tl_log(enum tl_log_level level, const char *fmt, ...)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    if (!tl_log_enabled(level)) return;
    char line[1024];
    // UTC timestamp with milliseconds (ISO 8601), so lines from the loop and engine threads and
    // from several replicas can be ordered and matched to access logs.
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof(line),
                     "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ tokenloom %s: ", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     (int)(ts.tv_nsec / 1000000), names[level]);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = strlen(line);
    line[len] = '\n';
    line[len + 1] = '\0';
    fputs(line, stderr);
}
