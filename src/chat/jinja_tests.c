/*
 * Jinja tests ({% if x is name(args) %}): Python's type checks as Jinja2 writes them (a bool is
 * a number but not an integer; Undefined is iterable and a sequence; a mapping is a sequence),
 * comparisons, divisibility, membership, case. An unknown test is a render error.
 * Memory: the render's arena. Thread model: per render.
 */
#include "chat/jinja_impl.h"

#include <string.h>

static bool cmp_test(struct jctx *c, const char *name, struct jv a, struct jv b)
{
    int r;
    if (!tl__jv_compare(a, b, &r))
        tl__jfail(c, "'%s' not supported between instances of '%s' and '%s'", name,
                  tl__jv_type_name(a), tl__jv_type_name(b));
    if (!strcmp(name, "<") || !strcmp(name, "lt")) return r < 0;
    if (!strcmp(name, "<=") || !strcmp(name, "le")) return r <= 0;
    if (!strcmp(name, ">") || !strcmp(name, "gt")) return r > 0;
    return r >= 0;
}

static bool int_of(struct jv v, int64_t *out)
{
    if (v.kind == JV_INT)
        *out = v.i;
    else if (v.kind == JV_BOOL)
        *out = v.b;
    else
        return false;
    return true;
}

bool tl__jtest(struct jctx *c, const char *name, struct jv in, const struct jcall *a)
{
    struct jv arg = tl__jarg(c, a, 0, NULL, NULL);
    int64_t i;
    if (!strcmp(name, "defined")) return in.kind != JV_UNDEF;
    if (!strcmp(name, "undefined")) return in.kind == JV_UNDEF;
    if (!strcmp(name, "none")) return in.kind == JV_NONE;
    if (!strcmp(name, "string")) return in.kind == JV_STR;
    if (!strcmp(name, "number")) return tl__jv_is_num(in);
    if (!strcmp(name, "integer")) return in.kind == JV_INT;
    if (!strcmp(name, "float")) return in.kind == JV_FLOAT;
    if (!strcmp(name, "boolean")) return in.kind == JV_BOOL;
    if (!strcmp(name, "true")) return in.kind == JV_BOOL && in.b;
    if (!strcmp(name, "false")) return in.kind == JV_BOOL && !in.b;
    if (!strcmp(name, "mapping")) return in.kind == JV_MAP;
    if (!strcmp(name, "callable")) return in.kind == JV_FUNC;
    if (!strcmp(name, "iterable"))
        return in.kind == JV_UNDEF || in.kind == JV_STR || in.kind == JV_LIST || in.kind == JV_MAP;
    if (!strcmp(name, "sequence"))
        return in.kind == JV_UNDEF || in.kind == JV_STR || in.kind == JV_LIST || in.kind == JV_MAP;
    if (!strcmp(name, "==") || !strcmp(name, "eq") || !strcmp(name, "equalto") ||
        !strcmp(name, "sameas"))
        return tl__jv_equal(in, arg);
    if (!strcmp(name, "!=") || !strcmp(name, "ne")) return !tl__jv_equal(in, arg);
    if (!strcmp(name, "<") || !strcmp(name, "lt") || !strcmp(name, "<=") || !strcmp(name, "le") ||
        !strcmp(name, ">") || !strcmp(name, "gt") || !strcmp(name, ">=") || !strcmp(name, "ge"))
        return cmp_test(c, name, in, arg);
    if (!strcmp(name, "even") || !strcmp(name, "odd")) {
        if (!int_of(in, &i)) tl__jfail(c, "'%s' test needs an integer", name);
        return (i % 2 == 0) == (name[0] == 'e');
    }
    if (!strcmp(name, "divisibleby")) {
        int64_t d;
        if (!int_of(in, &i) || !int_of(arg, &d)) tl__jfail(c, "divisibleby needs integers");
        if (d == 0) tl__jfail(c, "integer division or modulo by zero");
        return i % d == 0;
    }
    if (!strcmp(name, "in")) {
        if (arg.kind == JV_STR && in.kind == JV_STR)
            return memmem(arg.s->p, arg.s->len, in.s->p, in.s->len) != NULL || !in.s->len;
        struct jv l = tl__jiterable_to_list(c, arg);
        for (int64_t k = 0; k < l.l->n; k++)
            if (tl__jv_equal(l.l->v[k], in)) return true;
        return false;
    }
    if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        if (in.kind != JV_STR) return false;
        bool cased = false;
        for (size_t k = 0; k < in.s->len; k++) {
            char ch = in.s->p[k];
            if (ch >= 'a' && ch <= 'z') {
                if (name[0] == 'u') return false;
                cased = true;
            } else if (ch >= 'A' && ch <= 'Z') {
                if (name[0] == 'l') return false;
                cased = true;
            }
        }
        return cased;
    }
    if (!strcmp(name, "filter")) return in.kind == JV_STR && tl__jfilter_exists(in.s->p);
    if (!strcmp(name, "test")) return in.kind == JV_STR && tl__jtest_exists(in.s->p);
    tl__jfail(c, "no test named '%s'", name);
}
