/*
 * Jinja filters ({{ x | name(args) }}), with Jinja2's argument
 * names and defaults and Python's behaviour underneath (str() of a value, stable sorts,
 * case-insensitive sorting by default, round() returning a float...). tojson is transformers'
 * version: json.dumps with ensure_ascii=False and its indent / separators / sort_keys options.
 *
 * An unknown filter or test is a render error (Jinja2 fails at compile time; here the render
 * that reaches it fails, with its line). Memory: the render's arena. Thread model: per render.
 */
#include "chat/jinja_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static struct jv arg_or(struct jctx *c, const struct jcall *a, int i, const char *name,
                        struct jv dflt)
{
    bool found;
    struct jv v = tl__jarg(c, a, i, name, &found);
    return found ? v : dflt;
}

// ---- sorting (stable merge sort: Python's sort is stable; the comparison may fail the render)

struct sort_spec {
    struct jctx *c;
    bool case_sensitive;
    bool reverse;
    const char *attribute; // sort items by this attribute (dotted paths not supported)
    int pair_index;        // dictsort: 0 key, 1 value; -1 none
};

static struct jv sort_key(const struct sort_spec *s, struct jv v)
{
    if (s->pair_index >= 0) v = v.l->v[s->pair_index];
    if (s->attribute) v = tl__jgetitem(s->c, v, tl__jv_cstr(&s->c->arena, s->attribute));
    if (!s->case_sensitive && v.kind == JV_STR) v = tl__jstr_case(s->c, v, 0);
    return v;
}

static int sort_cmp(const struct sort_spec *s, struct jv a, struct jv b)
{
    int r;
    struct jv ka = sort_key(s, a), kb = sort_key(s, b);
    if (!tl__jv_compare(ka, kb, &r))
        tl__jfail(s->c, "'<' not supported between instances of '%s' and '%s'",
                  tl__jv_type_name(ka), tl__jv_type_name(kb));
    return s->reverse ? -r : r;
}

static void merge_sort(const struct sort_spec *s, struct jv *v, struct jv *tmp, int64_t n)
{
    if (n < 2) return;
    int64_t h = n / 2;
    merge_sort(s, v, tmp, h);
    merge_sort(s, v + h, tmp, n - h);
    int64_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        tmp[k++] = sort_cmp(s, v[j], v[i]) < 0 ? v[j++] : v[i++];
    while (i < h)
        tmp[k++] = v[i++];
    while (j < n)
        tmp[k++] = v[j++];
    memcpy(v, tmp, (size_t)n * sizeof(*v));
}

static struct jv sorted(struct sort_spec *s, struct jv list)
{
    struct jarena *a = &s->c->arena;
    struct jv out = tl__jv_list(a, list.l->n);
    for (int64_t i = 0; i < list.l->n; i++)
        tl__jv_list_push(a, out, list.l->v[i]);
    struct jv *tmp = tl__jarena_alloc(a, (size_t)(list.l->n + 1) * sizeof(*tmp));
    merge_sort(s, out.l->v, tmp, out.l->n);
    return out;
}

// ---- filters

static struct jv length_of(struct jctx *c, struct jv v)
{
    switch (v.kind) {
    case JV_UNDEF:
        return tl__jv_int(0);
    case JV_STR:
        return tl__jv_int(tl__jstr_cp_len(v.s->p, v.s->len));
    case JV_LIST:
        if (v.flags & JVF_GENERATOR) break;
        return tl__jv_int(v.l->n);
    case JV_MAP:
    case JV_NS:
        return tl__jv_int(v.m->n);
    default:
        break;
    }
    tl__jfail(c, "object of type '%s' has no len()", tl__jv_type_name(v));
}

static struct jv do_title(struct jctx *c, struct jv s)
{
    // Jinja's title filter: words start after '-', whitespace, '(', '{', '[' or '<'.
    struct jv out = tl__jv_str(&c->arena, s.s->p, s.s->len);
    char *p = ((struct jstr *)out.s)->p;
    bool start = true;
    for (size_t i = 0; i < s.s->len; i++) {
        char ch = p[i];
        if (ch == '-' || tl__jis_space(ch) || ch == '(' || ch == '{' || ch == '[' || ch == '<') {
            start = true;
            continue;
        }
        if (start && ch >= 'a' && ch <= 'z') p[i] = (char)(ch - 32);
        if (!start && ch >= 'A' && ch <= 'Z') p[i] = (char)(ch + 32);
        start = false;
    }
    return out;
}

static struct jv do_indent(struct jctx *c, struct jv s, const struct jcall *a)
{
    struct jv width = arg_or(c, a, 0, "width", tl__jv_int(4));
    bool first = tl__jv_truthy(arg_or(c, a, 1, "first", tl__jv_bool(false)));
    bool blank = tl__jv_truthy(arg_or(c, a, 2, "blank", tl__jv_bool(false)));
    struct jv ind;
    if (width.kind == JV_STR) {
        ind = width;
    } else {
        int64_t w = width.kind == JV_INT ? width.i : 4;
        if (w < 0) w = 0;
        if (w > 4096) tl__jfail(c, "indent width too large");
        struct jbuf ib = {.arena = &c->arena};
        for (int64_t i = 0; i < w; i++)
            tl__jbuf_add(&ib, " ", 1);
        ind = tl__jbuf_value(&ib);
    }
    struct jbuf b = {.arena = &c->arena};
    if (first) tl__jbuf_add(&b, ind.s->p, ind.s->len);
    // Lines as Python's splitlines on s + "\n": the text's lines, each rejoined with "\n" + indent
    // unless it is empty (and blank is false).
    const char *p = s.s->p, *end = p + s.s->len;
    bool first_line = true;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        if (!first_line) {
            tl__jbuf_add(&b, "\n", 1);
            if (le > p || blank) tl__jbuf_add(&b, ind.s->p, ind.s->len);
        }
        tl__jbuf_add(&b, p, (size_t)(le - p));
        first_line = false;
        if (!nl) break;
        p = nl + 1;
    }
    return tl__jbuf_value(&b);
}

static struct jv do_tojson(struct jctx *c, struct jv v, const struct jcall *a)
{
    struct jv ind = arg_or(c, a, -1, "indent", tl__jv_none());
    struct jv seps = arg_or(c, a, -1, "separators", tl__jv_none());
    bool sort_keys = tl__jv_truthy(arg_or(c, a, -1, "sort_keys", tl__jv_bool(false)));
    if (a->n_pos > 0) ind = a->pos[0];
    int indent = ind.kind == JV_INT ? (int)(ind.i < 0 ? 0 : ind.i > 64 ? 64 : ind.i) : -1;
    const char *isep = NULL, *ksep = NULL;
    if (seps.kind == JV_LIST && seps.l->n == 2 && seps.l->v[0].kind == JV_STR &&
        seps.l->v[1].kind == JV_STR) {
        isep = seps.l->v[0].s->p;
        ksep = seps.l->v[1].s->p;
    }
    struct jbuf b = {.arena = &c->arena};
    struct jv bad;
    if (!tl__jv_write_json(&b, v, indent, isep, ksep, sort_keys, &bad))
        tl__jfail(c, "Object of type %s is not JSON serializable",
                  bad.kind == JV_UNDEF ? "Undefined" : tl__jv_type_name(bad));
    return tl__jbuf_value(&b);
}

static struct jv do_int(struct jctx *c, struct jv v, const struct jcall *a)
{
    struct jv dflt = arg_or(c, a, 0, "default", tl__jv_int(0));
    if (v.kind == JV_INT) return v;
    if (v.kind == JV_BOOL) return tl__jv_int(v.b);
    if (v.kind == JV_FLOAT) return isfinite(v.f) ? tl__jv_int((int64_t)v.f) : dflt;
    if (v.kind == JV_STR) {
        char *end;
        struct jv t = tl__jstr_strip(c, v, tl__jv_none(), true, true);
        long long i = strtoll(t.s->p, &end, 10);
        if (t.s->len && !*end) return tl__jv_int(i);
        double f = strtod(t.s->p, &end);
        if (t.s->len && !*end && isfinite(f)) return tl__jv_int((int64_t)f);
    }
    return dflt;
}

static struct jv do_float(struct jctx *c, struct jv v, const struct jcall *a)
{
    struct jv dflt = arg_or(c, a, 0, "default", tl__jv_float(0.0));
    if (tl__jv_is_num(v)) return tl__jv_float(tl__jv_as_double(v));
    if (v.kind == JV_STR) {
        char *end;
        struct jv t = tl__jstr_strip(c, v, tl__jv_none(), true, true);
        double f = strtod(t.s->p, &end);
        if (t.s->len && !*end) return tl__jv_float(f);
    }
    return dflt;
}

static struct jv do_round(struct jctx *c, struct jv v, const struct jcall *a)
{
    struct jv pv = arg_or(c, a, 0, "precision", tl__jv_int(0));
    int64_t prec = pv.kind == JV_INT ? pv.i : 0;
    struct jv method = arg_or(c, a, 1, "method", tl__jv_none());
    if (!tl__jv_is_num(v)) tl__jfail(c, "round() needs a number, not %s", tl__jv_type_name(v));
    if (prec < -300 || prec > 300) tl__jfail(c, "round() precision out of range");
    const char *m = method.kind == JV_STR ? method.s->p : "common";
    double f = tl__jv_as_double(v), scale = pow(10.0, (double)prec);
    if (!strcmp(m, "floor")) return tl__jv_float(floor(f * scale) / scale);
    if (!strcmp(m, "ceil")) return tl__jv_float(ceil(f * scale) / scale);
    if (strcmp(m, "common")) tl__jfail(c, "method must be common, ceil or floor");
    // Python's round(x, n): an int stays an int; a float is rounded correctly from its exact
    // binary value, half to even (glibc's %.*f does the same).
    if (v.kind != JV_FLOAT && prec >= 0) return tl__jv_int(v.kind == JV_INT ? v.i : v.b);
    if (prec >= 0 && prec <= 40 && isfinite(f)) {
        char buf[400];
        snprintf(buf, sizeof(buf), "%.*f", (int)prec, f);
        return tl__jv_float(strtod(buf, NULL));
    }
    double r = nearbyint(f * scale) / scale;
    return v.kind == JV_FLOAT ? tl__jv_float(r) : tl__jv_int((int64_t)r);
}

// select / reject / selectattr / rejectattr: keep items whose test (or truthiness) is `want`.
static struct jv do_select(struct jctx *c, struct jv seq, const struct jcall *a, bool by_attr,
                           bool want)
{
    struct jv items = tl__jiterable_to_list(c, tl__jv_truthy(seq) ? seq : tl__jv_undef(NULL));
    int first_arg = 0;
    struct jv attr = tl__jv_undef(NULL);
    if (by_attr) {
        if (a->n_pos < 1 || a->pos[0].kind != JV_STR) tl__jfail(c, "selectattr needs an attribute");
        attr = a->pos[0];
        first_arg = 1;
    }
    const char *test = NULL;
    if (a->n_pos > first_arg) {
        if (a->pos[first_arg].kind != JV_STR) tl__jfail(c, "the test name must be a string");
        test = a->pos[first_arg].s->p;
    }
    struct jcall targs = {.n_pos = a->n_pos > first_arg + 1 ? a->n_pos - first_arg - 1 : 0,
                          .pos = a->pos + first_arg + 1};
    struct jv out = tl__jv_list(&c->arena, items.l->n);
    for (int64_t i = 0; i < items.l->n; i++) {
        tl__jstep(c);
        struct jv v = items.l->v[i];
        if (by_attr) v = tl__jgetattr(c, v, attr.s->p);
        bool ok = test ? tl__jtest(c, test, v, &targs) : tl__jv_truthy(v);
        if (ok == want) tl__jv_list_push(&c->arena, out, items.l->v[i]);
    }
    out.flags = JVF_GENERATOR;
    return out;
}

static struct jv do_map(struct jctx *c, struct jv seq, const struct jcall *a)
{
    struct jv items = tl__jiterable_to_list(c, tl__jv_truthy(seq) ? seq : tl__jv_undef(NULL));
    bool has_attr;
    struct jv attr = tl__jarg(c, a, -1, "attribute", &has_attr);
    bool has_default;
    struct jv dflt = tl__jarg(c, a, -1, "default", &has_default);
    struct jv out = tl__jv_list(&c->arena, items.l->n);
    for (int64_t i = 0; i < items.l->n; i++) {
        tl__jstep(c);
        struct jv v = items.l->v[i];
        if (has_attr) {
            v = attr.kind == JV_STR ? tl__jgetattr(c, v, attr.s->p) : tl__jgetitem(c, v, attr);
            if (v.kind == JV_UNDEF && has_default) v = dflt;
        } else {
            if (a->n_pos < 1 || a->pos[0].kind != JV_STR) tl__jfail(c, "map needs a filter name");
            struct jcall fa = {.n_pos = a->n_pos - 1, .pos = a->pos + 1};
            v = tl__jfilter(c, a->pos[0].s->p, v, &fa);
        }
        tl__jv_list_push(&c->arena, out, v);
    }
    out.flags = JVF_GENERATOR;
    return out;
}

static struct jv do_join(struct jctx *c, struct jv seq, const struct jcall *a)
{
    struct jv sep = arg_or(c, a, 0, "d", tl__jv_cstr(&c->arena, ""));
    bool has_attr;
    struct jv attr = tl__jarg(c, a, 1, "attribute", &has_attr);
    struct jv items = tl__jiterable_to_list(c, seq);
    struct jbuf b = {.arena = &c->arena};
    for (int64_t i = 0; i < items.l->n; i++) {
        if (i) tl__jv_write_str(&b, sep);
        struct jv v = items.l->v[i];
        if (has_attr) v = tl__jgetattr(c, v, tl__jv_to_str(&c->arena, attr).s->p);
        tl__jv_write_str(&b, v);
    }
    return tl__jbuf_value(&b);
}

static struct jv do_items(struct jctx *c, struct jv v)
{
    if (v.kind == JV_UNDEF) {
        struct jv empty = tl__jv_list(&c->arena, 0);
        empty.flags = JVF_GENERATOR;
        return empty;
    }
    if (v.kind != JV_MAP && v.kind != JV_NS) tl__jfail(c, "can only get item pairs from a mapping");
    struct jv out = tl__jv_items(&c->arena, v);
    out.flags = JVF_GENERATOR;
    return out;
}

static struct jv do_unique(struct jctx *c, struct jv seq, const struct jcall *a)
{
    bool cs = tl__jv_truthy(arg_or(c, a, 0, "case_sensitive", tl__jv_bool(false)));
    struct jv attr = arg_or(c, a, 1, "attribute", tl__jv_none());
    struct jv items = tl__jiterable_to_list(c, seq);
    struct jv out = tl__jv_list(&c->arena, items.l->n), seen = tl__jv_list(&c->arena, items.l->n);
    for (int64_t i = 0; i < items.l->n; i++) {
        struct jv k = items.l->v[i];
        if (attr.kind == JV_STR) k = tl__jgetattr(c, k, attr.s->p);
        if (!cs && k.kind == JV_STR) k = tl__jstr_case(c, k, 0);
        bool dup = false;
        for (int64_t j = 0; j < seen.l->n && !dup; j++)
            dup = tl__jv_equal(seen.l->v[j], k);
        if (dup) continue;
        tl__jv_list_push(&c->arena, seen, k);
        tl__jv_list_push(&c->arena, out, items.l->v[i]);
    }
    out.flags = JVF_GENERATOR;
    return out;
}

static struct jv do_minmax(struct jctx *c, struct jv seq, const struct jcall *a, bool max)
{
    struct sort_spec s = {.c = c, .pair_index = -1};
    s.case_sensitive = tl__jv_truthy(arg_or(c, a, 0, "case_sensitive", tl__jv_bool(false)));
    struct jv attr = arg_or(c, a, 1, "attribute", tl__jv_none());
    if (attr.kind == JV_STR) s.attribute = attr.s->p;
    struct jv items = tl__jiterable_to_list(c, seq);
    if (!items.l->n) return tl__jv_undef(NULL);
    struct jv best = items.l->v[0];
    for (int64_t i = 1; i < items.l->n; i++) {
        int r = sort_cmp(&s, items.l->v[i], best);
        if (max ? r > 0 : r < 0) best = items.l->v[i];
    }
    return best;
}

static struct jv do_sum(struct jctx *c, struct jv seq, const struct jcall *a)
{
    struct jv attr = arg_or(c, a, 0, "attribute", tl__jv_none());
    struct jv acc = arg_or(c, a, 1, "start", tl__jv_int(0));
    struct jv items = tl__jiterable_to_list(c, seq);
    for (int64_t i = 0; i < items.l->n; i++) {
        struct jv v = items.l->v[i];
        if (attr.kind == JV_STR) v = tl__jgetattr(c, v, attr.s->p);
        if (!tl__jv_is_num(v) || !tl__jv_is_num(acc)) tl__jfail(c, "sum() needs numbers");
        if (acc.kind != JV_FLOAT && v.kind != JV_FLOAT)
            acc = tl__jv_int((acc.kind == JV_INT ? acc.i : acc.b) + (v.kind == JV_INT ? v.i : v.b));
        else
            acc = tl__jv_float(tl__jv_as_double(acc) + tl__jv_as_double(v));
    }
    return acc;
}

static struct jv need_str(struct jctx *c, struct jv v)
{
    return tl__jv_to_str(&c->arena, v);
}

struct jv tl__jfilter(struct jctx *c, const char *name, struct jv in, const struct jcall *a)
{
    tl__jstep(c);
    switch (name[0]) {
    case 'a':
        if (!strcmp(name, "abs")) {
            if (in.kind == JV_INT) return tl__jv_int(in.i < 0 ? -in.i : in.i);
            if (in.kind == JV_BOOL) return tl__jv_int(in.b);
            if (in.kind == JV_FLOAT) return tl__jv_float(fabs(in.f));
            tl__jfail(c, "bad operand type for abs(): '%s'", tl__jv_type_name(in));
        }
        if (!strcmp(name, "attr")) {
            struct jv n = arg_or(c, a, 0, "name", tl__jv_none());
            if (n.kind != JV_STR) tl__jfail(c, "attr needs a name");
            if (in.kind == JV_UNDEF) return tl__jgetattr(c, in, n.s->p);
            return tl__jmethod_bind(c, in, n.s->p); // attributes only: a key is not an attribute
        }
        break;
    case 'c':
        if (!strcmp(name, "capitalize")) return tl__jstr_case(c, need_str(c, in), 2);
        if (!strcmp(name, "count")) return length_of(c, in);
        break;
    case 'd':
        if (!strcmp(name, "d") || !strcmp(name, "default")) {
            struct jv dflt = arg_or(c, a, 0, "default_value", tl__jv_cstr(&c->arena, ""));
            bool boolean = tl__jv_truthy(arg_or(c, a, 1, "boolean", tl__jv_bool(false)));
            if (in.kind == JV_UNDEF || (boolean && !tl__jv_truthy(in))) return dflt;
            return in;
        }
        if (!strcmp(name, "dictsort")) {
            struct sort_spec s = {.c = c};
            s.case_sensitive = tl__jv_truthy(arg_or(c, a, 0, "case_sensitive", tl__jv_bool(false)));
            struct jv by = arg_or(c, a, 1, "by", tl__jv_none());
            s.pair_index = by.kind == JV_STR && !strcmp(by.s->p, "value") ? 1 : 0;
            s.reverse = tl__jv_truthy(arg_or(c, a, 2, "reverse", tl__jv_bool(false)));
            return sorted(&s, do_items(c, in));
        }
        break;
    case 'e':
        if (!strcmp(name, "e") || !strcmp(name, "escape")) return tl__jescape(c, in);
        break;
    case 'f':
        if (!strcmp(name, "first")) {
            struct jv l = tl__jiterable_to_list(c, in);
            return l.l->n ? l.l->v[0] : tl__jv_undef(NULL);
        }
        if (!strcmp(name, "float")) return do_float(c, in, a);
        if (!strcmp(name, "format")) {
            if (a->n_pos && a->n_kw) tl__jfail(c, "can't handle positional and keyword arguments");
            struct jv args;
            if (a->n_kw) {
                args = tl__jv_map(&c->arena, a->n_kw);
                for (int i = 0; i < a->n_kw; i++)
                    tl__jv_map_set(&c->arena, args, tl__jv_cstr(&c->arena, a->kw[i]), a->kwv[i]);
            } else {
                args = tl__jv_list(&c->arena, a->n_pos);
                args.l->is_tuple = true;
                for (int i = 0; i < a->n_pos; i++)
                    tl__jv_list_push(&c->arena, args, a->pos[i]);
            }
            return tl__jstr_percent(c, need_str(c, in), args);
        }
        break;
    case 'i':
        if (!strcmp(name, "indent")) return do_indent(c, need_str(c, in), a);
        if (!strcmp(name, "int")) return do_int(c, in, a);
        if (!strcmp(name, "items")) return do_items(c, in);
        break;
    case 'j':
        if (!strcmp(name, "join")) return do_join(c, in, a);
        break;
    case 'l':
        if (!strcmp(name, "last")) {
            if (in.kind == JV_LIST && (in.flags & JVF_GENERATOR))
                tl__jfail(c, "'generator' object is not reversible");
            struct jv l = tl__jiterable_to_list(c, in);
            return l.l->n ? l.l->v[l.l->n - 1] : tl__jv_undef(NULL);
        }
        if (!strcmp(name, "length")) return length_of(c, in);
        if (!strcmp(name, "list")) {
            struct jv l = tl__jiterable_to_list(c, in);
            l.flags = 0;
            if (l.kind == JV_LIST && l.l->is_tuple) {
                struct jv out = tl__jv_list(&c->arena, l.l->n);
                for (int64_t i = 0; i < l.l->n; i++)
                    tl__jv_list_push(&c->arena, out, l.l->v[i]);
                return out;
            }
            return l;
        }
        if (!strcmp(name, "lower")) return tl__jstr_case(c, need_str(c, in), 0);
        break;
    case 'm':
        if (!strcmp(name, "map")) return do_map(c, in, a);
        if (!strcmp(name, "max")) return do_minmax(c, in, a, true);
        if (!strcmp(name, "min")) return do_minmax(c, in, a, false);
        break;
    case 'r':
        if (!strcmp(name, "reject")) return do_select(c, in, a, false, false);
        if (!strcmp(name, "rejectattr")) return do_select(c, in, a, true, false);
        if (!strcmp(name, "replace")) {
            struct jv cnt = arg_or(c, a, 2, "count", tl__jv_none());
            return tl__jstr_replace(c, need_str(c, in), arg_or(c, a, 0, "old", tl__jv_none()),
                                    arg_or(c, a, 1, "new", tl__jv_none()),
                                    cnt.kind == JV_INT ? cnt.i : -1);
        }
        if (!strcmp(name, "reverse")) {
            if (in.kind == JV_STR) {
                struct jv chars = tl__jiterable_to_list(c, in);
                struct jbuf b = {.arena = &c->arena};
                for (int64_t i = chars.l->n - 1; i >= 0; i--)
                    tl__jv_write_str(&b, chars.l->v[i]);
                return tl__jbuf_value(&b);
            }
            struct jv l = tl__jiterable_to_list(c, in), out = tl__jv_list(&c->arena, l.l->n);
            for (int64_t i = l.l->n - 1; i >= 0; i--)
                tl__jv_list_push(&c->arena, out, l.l->v[i]);
            out.flags = JVF_GENERATOR; // a list_reverseiterator
            return out;
        }
        if (!strcmp(name, "round")) return do_round(c, in, a);
        break;
    case 's':
        if (!strcmp(name, "safe")) {
            struct jv m = tl__jv_to_str(&c->arena, in);
            m.flags = JVF_MARKUP;
            return m;
        }
        if (!strcmp(name, "select")) return do_select(c, in, a, false, true);
        if (!strcmp(name, "selectattr")) return do_select(c, in, a, true, true);
        if (!strcmp(name, "sort")) {
            struct sort_spec s = {.c = c, .pair_index = -1};
            s.reverse = tl__jv_truthy(arg_or(c, a, 0, "reverse", tl__jv_bool(false)));
            s.case_sensitive = tl__jv_truthy(arg_or(c, a, 1, "case_sensitive", tl__jv_bool(false)));
            struct jv attr = arg_or(c, a, 2, "attribute", tl__jv_none());
            if (attr.kind == JV_STR) s.attribute = attr.s->p;
            return sorted(&s, tl__jiterable_to_list(c, in));
        }
        if (!strcmp(name, "string")) return need_str(c, in);
        if (!strcmp(name, "sum")) return do_sum(c, in, a);
        break;
    case 't':
        if (!strcmp(name, "title")) return do_title(c, need_str(c, in));
        if (!strcmp(name, "tojson")) return do_tojson(c, in, a);
        if (!strcmp(name, "trim"))
            return tl__jstr_strip(c, need_str(c, in), arg_or(c, a, 0, "chars", tl__jv_none()), true,
                                  true);
        break;
    case 'u':
        if (!strcmp(name, "unique")) return do_unique(c, in, a);
        if (!strcmp(name, "upper")) return tl__jstr_case(c, need_str(c, in), 1);
        break;
    case 'w':
        if (!strcmp(name, "wordcount")) {
            struct jv s = need_str(c, in);
            int64_t n = 0;
            bool in_word = false;
            for (size_t i = 0; i < s.s->len; i++) {
                char ch = s.s->p[i];
                bool w = (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') ||
                         (ch >= 'A' && ch <= 'Z') || ch == '_' || (unsigned char)ch >= 0x80;
                if (w && !in_word) n++;
                in_word = w;
            }
            return tl__jv_int(n);
        }
        break;
    default:
        break;
    }
    tl__jfail(c, "no filter named '%s'", name);
}
