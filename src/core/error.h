/*
 * Error reporting: a status code plus a one-line message kept per thread (like dlerror()).
 * Callers that fail set the message with tl__errorf() and return its status; the top level
 * (CLI, server) reads it with tl_last_error(). Never used for bugs: those are TL_ASSERT.
 */
#ifndef TL_CORE_ERROR_H
#define TL_CORE_ERROR_H

#include <tokenloom.h>

#include <stdio.h>
#include <stdlib.h>

#define TL_PRINTF(a, b) __attribute__((format(printf, a, b)))

// Sets the calling thread's error message (printf-style) and returns `code`, so that a failing
// function can say `return tl__errorf(TL_ERR_FORMAT, "%s: truncated header", path);`.
tl_status tl__errorf(tl_status code, const char *fmt, ...) TL_PRINTF(2, 3);

// Prefixes the current message with "<prefix>: " (e.g. the file name), keeping the code.
tl_status tl__error_prefix(tl_status code, const char *prefix);

// Clears the calling thread's error message.
void tl__error_clear(void);

// Invariant check that is always on: aborts with file, line and the expression. For bugs only,
// never for input validation.
#define TL_ASSERT(x)                                                                               \
    do {                                                                                           \
        if (!(x)) tl__assert_fail(__FILE__, __LINE__, #x);                                         \
    } while (0)

_Noreturn void tl__assert_fail(const char *file, int line, const char *expr);

#endif
