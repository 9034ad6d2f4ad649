/*
 * Logging to stderr with a level threshold taken once from TOKENLOOM_LOG (error, warn, info,
 * debug; default info). Thread-safe: each call writes one line with one fputs.
 */
#ifndef TL_CORE_LOG_H
#define TL_CORE_LOG_H

#include "core/error.h"

enum tl_log_level { TL_LOG_ERROR = 0, TL_LOG_WARN = 1, TL_LOG_INFO = 2, TL_LOG_DEBUG = 3 };

void tl_log(enum tl_log_level level, const char *fmt, ...) TL_PRINTF(2, 3);
void tl_log_set_level(enum tl_log_level level);
int tl_log_enabled(enum tl_log_level level);

#define TL_LOGE(...) tl_log(TL_LOG_ERROR, __VA_ARGS__)
#define TL_LOGW(...) tl_log(TL_LOG_WARN, __VA_ARGS__)
#define TL_LOGI(...) tl_log(TL_LOG_INFO, __VA_ARGS__)
#define TL_LOGD(...) tl_log(TL_LOG_DEBUG, __VA_ARGS__)

#endif
