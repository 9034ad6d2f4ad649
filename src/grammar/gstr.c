/*
 * The growable string the generators write GBNF into (schema.c, schema_number.c, regex.c,
 * toolcall_gbnf.c, compile.c's choices): appends that never fail loudly but set `failed`, so a
 * generator writes its whole text and checks once at the end.
 *
 * A leaf of src/grammar: it depends on core only, so every generator can use it without
 * depending on the builder.
 *
 * Thread model: a gstr belongs to one thread.
 */
#include "grammar/grammar_impl.h"

#include "core/alloc.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void tl__gstr_putn(struct gstr *s, const char *t, size_t n)
{
    if (s->failed) return;
    if (!tl_grow((void **)&s->p, &s->cap, s->n + n + 1, 1)) {
        s->failed = true;
        return;
    }
    memcpy(s->p + s->n, t, n);
    s->n += n;
    s->p[s->n] = 0;
}

void tl__gstr_puts(struct gstr *s, const char *t)
{
    tl__gstr_putn(s, t, strlen(t));
}

void tl__gstr_printf(struct gstr *s, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(buf)) {
        s->failed = true;
        return;
    }
    tl__gstr_putn(s, buf, (size_t)n);
}

void tl__gstr_literal(struct gstr *s, const char *t, size_t n)
{
    tl__gstr_putn(s, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)t[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            tl__gstr_putn(s, e, 2);
        } else if (c < 0x20 || c == 0x7f) {
            tl__gstr_printf(s, "\\x%02X", c);
        } else {
            tl__gstr_putn(s, (const char *)&t[i], 1);
        }
    }
    tl__gstr_putn(s, "\"", 1);
}
