/*
 * stderr logger. The level is read lazily from TOKENLOOM_LOG; a racy first read is harmless
 * because every thread computes the same value.
 */
#include "core/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <string.h>

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
    int n = snprintf(line, sizeof(line), "tokenloom %s: ", names[level]);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = strlen(line);
    line[len] = '\n';
    line[len + 1] = '\0';
    fputs(line, stderr);
}
