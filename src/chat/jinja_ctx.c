/*
 * The render context's services that every layer of the evaluator uses (jinja_impl.h lists the
 * layers): failing the render with the current line, counting steps against the step and time
 * limits, reading a call's arguments by position or keyword, and iterating a value as Python's
 * iter() does. They take values already evaluated and call nothing above the value files, so
 * text helpers, methods, tests, filters and the evaluator can all sit on them.
 *
 * Memory: the render's arena. Thread model: one context per render.
 */
#include "chat/jinja_impl.h"

#include "core/clock.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

_Noreturn void tl__jfail(struct jctx *c, const char *fmt, ...)
{
    if (c->err && c->err_size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->err_size, fmt, ap);
        va_end(ap);
    }
    if (c->cur) {
        c->err_line = c->cur->line;
        c->err_col = c->cur->col;
    }
    longjmp(c->fail, 1);
}

_Noreturn void tl__jfail_undefined(struct jctx *c, struct jv u, const char *what)
{
    if (u.undef_name) tl__jfail(c, "'%s' is undefined (%s)", u.undef_name, what);
    tl__jfail(c, "undefined value (%s)", what);
}

void tl__jstep(struct jctx *c)
{
    if (++c->steps > c->lim.max_steps)
        tl__jfail(c, "template exceeded %lld steps (loop iterations and calls)",
                  (long long)c->lim.max_steps);
    if ((c->steps & 1023) == 0 && c->deadline_us && tl_time_us() > c->deadline_us)
        tl__jfail(c, "template rendering took longer than %lld ms", (long long)c->lim.max_time_ms);
}

struct jv tl__jarg(struct jctx *c, const struct jcall *a, int i, const char *name, bool *found)
{
    (void)c;
    if (found) *found = true;
    if (i >= 0 && i < a->n_pos) return a->pos[i];
    for (int k = 0; name && k < a->n_kw; k++)
        if (!strcmp(a->kw[k], name)) return a->kwv[k];
    if (found) *found = false;
    return tl__jv_undef(NULL);
}

struct jv tl__jiterable_to_list(struct jctx *c, struct jv v)
{
    switch (v.kind) {
    case JV_LIST:
        return v;
    case JV_UNDEF:
        return tl__jv_list(&c->arena, 0);
    case JV_MAP:
    case JV_NS: {
        struct jv out = tl__jv_list(&c->arena, v.m->n);
        for (int64_t i = 0; i < v.m->n; i++)
            tl__jv_list_push(&c->arena, out, v.m->k[i]);
        return out;
    }
    case JV_STR: {
        struct jv out = tl__jv_list(&c->arena, (int64_t)v.s->len);
        size_t i = 0;
        while (i < v.s->len) {
            size_t e = tl__jstr_cp_offset(v.s->p + i, v.s->len - i, 1) + i;
            tl__jv_list_push(&c->arena, out, tl__jv_str(&c->arena, v.s->p + i, e - i));
            i = e;
        }
        return out;
    }
    default:
        tl__jfail(c, "'%s' object is not iterable", tl__jv_type_name(v));
    }
}
