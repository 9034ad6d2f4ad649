/*
 * Attribute, item and slice access on values already evaluated: `x.name` (a bound str / dict
 * method first, then a mapping's key, as Jinja2's sandbox getattr does), `x[key]` (a mapping's
 * key, a list's or string's code-point index, else the attribute named by a string key) and
 * `x[a:b:c]` (Python's slice.indices). A miss is Undefined; names starting with "__" are never
 * found (the sandbox's rule). The evaluator and the filters that take an attribute (map,
 * selectattr, sort, join, ...) share these.
 *
 * Memory: the render's arena. Thread model: per render.
 */
#include "chat/jinja_impl.h"

#include <string.h>

struct jv tl__jgetattr(struct jctx *c, struct jv obj, const char *name)
{
    if (obj.kind == JV_UNDEF) tl__jfail_undefined(c, obj, "attribute access");
    if (!strncmp(name, "__", 2)) return tl__jv_undef(name); // the sandbox's rule
    if (obj.kind == JV_MAP || obj.kind == JV_NS) {
        struct jv m = obj.kind == JV_MAP ? tl__jmethod_bind(c, obj, name) : tl__jv_undef(NULL);
        if (m.kind != JV_UNDEF) return m;
        struct jv v;
        if (tl__jv_map_get(obj, name, strlen(name), &v)) return v;
        return tl__jv_undef(name);
    }
    struct jv m = tl__jmethod_bind(c, obj, name);
    if (m.kind != JV_UNDEF) return m;
    return tl__jv_undef(name);
}

struct jv tl__jgetitem(struct jctx *c, struct jv obj, struct jv key)
{
    if (obj.kind == JV_UNDEF) tl__jfail_undefined(c, obj, "item access");
    if (obj.kind == JV_MAP || obj.kind == JV_NS) {
        struct jv v;
        if (tl__jv_map_getv(obj, key, &v)) return v;
    } else if ((obj.kind == JV_LIST || obj.kind == JV_STR) &&
               (key.kind == JV_INT || key.kind == JV_BOOL)) {
        if (obj.kind == JV_LIST && (obj.flags & (JVF_GENERATOR | JVF_VIEWS)))
            tl__jfail(c, "'%s' object is not subscriptable", tl__jv_type_name(obj));
        int64_t i = key.kind == JV_INT ? key.i : key.b;
        int64_t n = obj.kind == JV_LIST ? obj.l->n : tl__jstr_cp_len(obj.s->p, obj.s->len);
        if (i < 0) i += n;
        if (i < 0 || i >= n) return tl__jv_undef(NULL);
        if (obj.kind == JV_LIST) return obj.l->v[i];
        size_t off = tl__jstr_cp_offset(obj.s->p, obj.s->len, i);
        size_t end = tl__jstr_cp_offset(obj.s->p, obj.s->len, i + 1);
        return tl__jv_str(&c->arena, obj.s->p + off, end - off);
    }
    if (key.kind == JV_STR) return tl__jgetattr(c, obj, key.s->p);
    return tl__jv_undef(NULL);
}

// Python's slice.indices for a sequence of length n.
static void slice_bounds(struct jctx *c, struct jv start, struct jv stop, struct jv stepv,
                         int64_t n, int64_t *b, int64_t *e, int64_t *st)
{
    int64_t s = 1;
    if (stepv.kind == JV_INT)
        s = stepv.i;
    else if (stepv.kind != JV_NONE && stepv.kind != JV_UNDEF)
        tl__jfail(c, "slice indices must be integers");
    if (s == 0) tl__jfail(c, "slice step cannot be zero");
    int64_t lo = s < 0 ? -1 : 0, hi = s < 0 ? n - 1 : n;
    struct jv in[2] = {start, stop};
    int64_t out[2] = {s < 0 ? hi : lo, s < 0 ? lo : hi};
    for (int k = 0; k < 2; k++) {
        if (in[k].kind == JV_NONE || in[k].kind == JV_UNDEF) continue;
        if (in[k].kind != JV_INT && in[k].kind != JV_BOOL)
            tl__jfail(c, "slice indices must be integers");
        int64_t v = in[k].kind == JV_INT ? in[k].i : in[k].b;
        if (v < 0) {
            v += n;
            if (v < lo) v = lo;
        } else if (v > hi) {
            v = hi;
        }
        out[k] = v;
    }
    *b = out[0];
    *e = out[1];
    *st = s;
}

struct jv tl__jslice(struct jctx *c, struct jv obj, struct jv start, struct jv stop,
                     struct jv stepv)
{
    if (obj.kind == JV_UNDEF) tl__jfail_undefined(c, obj, "slicing");
    if ((obj.kind != JV_LIST && obj.kind != JV_STR) ||
        (obj.kind == JV_LIST && (obj.flags & (JVF_GENERATOR | JVF_VIEWS))))
        tl__jfail(c, "'%s' object is not subscriptable", tl__jv_type_name(obj));
    int64_t n = obj.kind == JV_LIST ? obj.l->n : tl__jstr_cp_len(obj.s->p, obj.s->len);
    int64_t b, e, s;
    slice_bounds(c, start, stop, stepv, n, &b, &e, &s);
    if (obj.kind == JV_LIST) {
        struct jv out = tl__jv_list(&c->arena, 4);
        out.l->is_tuple = obj.l->is_tuple;
        for (int64_t i = b; s > 0 ? i < e : i > e; i += s)
            tl__jv_list_push(&c->arena, out, obj.l->v[i]);
        return out;
    }
    struct jbuf buf = {.arena = &c->arena};
    const char *p = obj.s->p;
    size_t len = obj.s->len;
    if (s == 1 && b < e) {
        size_t ob = tl__jstr_cp_offset(p, len, b), oe = tl__jstr_cp_offset(p, len, e);
        return tl__jv_str(&c->arena, p + ob, oe - ob);
    }
    for (int64_t i = b; s > 0 ? i < e : i > e; i += s) {
        size_t ob = tl__jstr_cp_offset(p, len, i), oe = tl__jstr_cp_offset(p, len, i + 1);
        tl__jbuf_add(&buf, p + ob, oe - ob);
    }
    return tl__jbuf_value(&buf);
}
