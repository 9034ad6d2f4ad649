/*
 * A growable byte string for building prompts, JSON fragments and metrics text inside the
 * server. The buffer is always NUL-terminated when non-empty. An allocation failure is sticky:
 * later appends do nothing and tl_sb_ok() turns false, so a builder checks once at the end.
 *
 * Ownership: the struct owns buf; tl_sb_take() hands it to the caller. Not thread-safe.
 */
#ifndef TL_CORE_STRBUF_H
#define TL_CORE_STRBUF_H

#include "core/alloc.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tl_sb {
    char *buf;   // owned, NUL-terminated, NULL until the first append
    size_t len;  // bytes used (excluding the NUL)
    size_t cap;  // bytes allocated
    bool failed; // an allocation failed; the contents are incomplete
};

static inline void tl_sb_init(struct tl_sb *sb)
{
    memset(sb, 0, sizeof(*sb));
}

static inline void tl_sb_free(struct tl_sb *sb)
{
    free(sb->buf);
    memset(sb, 0, sizeof(*sb));
}

static inline bool tl_sb_ok(const struct tl_sb *sb)
{
    return !sb->failed;
}

static inline void tl_sb_add(struct tl_sb *sb, const char *s, size_t n)
{
    size_t need;
    if (sb->failed) return;
    if (!tl_add_size(sb->len, n + 1, &need)) {
        sb->failed = true;
        return;
    }
    if (need > sb->cap) {
        void *p = sb->buf;
        size_t cap = sb->cap;
        if (!tl_grow(&p, &cap, need < 64 ? 64 : need, 1)) {
            sb->failed = true;
            return;
        }
        sb->buf = p;
        sb->cap = cap;
    }
    if (n) memcpy(sb->buf + sb->len, s, n);
    sb->len += n;
    sb->buf[sb->len] = '\0';
}

static inline void tl_sb_adds(struct tl_sb *sb, const char *s)
{
    tl_sb_add(sb, s, strlen(s));
}

static inline void tl_sb_printf(struct tl_sb *sb, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline void tl_sb_printf(struct tl_sb *sb, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0) {
        sb->failed = true;
        return;
    }
    if ((size_t)n < sizeof(tmp)) {
        tl_sb_add(sb, tmp, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        sb->failed = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    tl_sb_add(sb, big, (size_t)n);
    free(big);
}

// Hands the buffer to the caller (an empty string when nothing was appended; NULL if an
// allocation failed). The builder is reset.
static inline char *tl_sb_take(struct tl_sb *sb, size_t *len)
{
    char *out = sb->buf;
    if (sb->failed) {
        free(out);
        out = NULL;
    } else if (!out) {
        out = calloc(1, 1);
    }
    if (len) *len = out ? sb->len : 0;
    memset(sb, 0, sizeof(*sb));
    return out;
}

#endif
