/*
 * Methods and globals: Python's str methods that templates call (startswith, split, strip,
 * format, ...), dict methods (items, keys, values, get), loop.cycle, and the globals
 * transformers provides (range, namespace, dict, raise_exception, strftime_now).
 *
 * Only non-mutating methods exist, as in Jinja2's ImmutableSandboxedEnvironment (list.append
 * and dict.update are refused there too). Case mapping is ASCII. raise_exception fails the render
 * with the template's own message and marks it as raised (the server answers 400 with it).
 * Memory: the render's arena. Thread model: per render (strftime_now uses localtime_r).
 */
#include "chat/jinja_impl.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

// ---- binding

static const char *const str_methods[] = {
    "capitalize",   "count",        "endswith", "find",    "format", "isalnum", "isalpha",
    "isdigit",      "islower",      "isspace",  "isupper", "join",   "lower",   "lstrip",
    "removeprefix", "removesuffix", "replace",  "rfind",   "rsplit", "rstrip",  "split",
    "splitlines",   "startswith",   "strip",    "title",   "upper",  NULL};
static const char *const map_methods[] = {"get", "items", "keys", "values", NULL};

struct jv tl__jmethod_bind(struct jctx *c, struct jv obj, const char *name)
{
    bool ok = (obj.kind == JV_STR && tl__jname_in(str_methods, name)) ||
              (obj.kind == JV_MAP && tl__jname_in(map_methods, name));
    if (!ok) return tl__jv_undef(name);
    struct jfunc *fn = tl__jarena_alloc(&c->arena, sizeof(*fn));
    fn->kind = JF_METHOD;
    fn->name = name;
    fn->self = obj;
    return (struct jv){.kind = JV_FUNC, .fn = fn};
}

static const struct jfunc globals[] = {
    {.kind = JF_GLOBAL, .name = "range"},        {.kind = JF_GLOBAL, .name = "namespace"},
    {.kind = JF_GLOBAL, .name = "dict"},         {.kind = JF_GLOBAL, .name = "raise_exception"},
    {.kind = JF_GLOBAL, .name = "strftime_now"},
};

struct jv tl__jglobal(const char *name)
{
    for (size_t i = 0; i < sizeof(globals) / sizeof(globals[0]); i++)
        if (!strcmp(globals[i].name, name)) return (struct jv){.kind = JV_FUNC, .fn = &globals[i]};
    return tl__jv_undef(name);
}

// ---- str methods

static struct jv str_arg(struct jctx *c, const struct jcall *a, int i, const char *name)
{
    bool found;
    struct jv v = tl__jarg(c, a, i, name, &found);
    if (!found || v.kind != JV_STR) tl__jfail(c, "argument %d must be a string", i + 1);
    return v;
}

// Python's str.split / str.rsplit.
static struct jv split(struct jctx *c, struct jv s, struct jv sep, int64_t maxsplit, bool right)
{
    struct jarena *ar = &c->arena;
    struct jv parts = tl__jv_list(ar, 8);
    const char *p = s.s->p;
    int64_t n = (int64_t)s.s->len;
    if (sep.kind == JV_STR && sep.s->len == 0) tl__jfail(c, "empty separator");
    // Collect pieces left to right, or right to left then reverse.
    int64_t splits = 0;
    if (sep.kind != JV_STR) {
        int64_t i = right ? n - 1 : 0;
        while (right ? i >= 0 : i < n) {
            while ((right ? i >= 0 : i < n) && tl__jis_space(p[i]))
                i += right ? -1 : 1;
            if (right ? i < 0 : i >= n) break;
            if (maxsplit >= 0 && splits == maxsplit) {
                // The rest (stripped on the scanning side only).
                if (right)
                    tl__jv_list_push(ar, parts, tl__jv_str(ar, p, (size_t)i + 1));
                else
                    tl__jv_list_push(ar, parts, tl__jv_str(ar, p + i, (size_t)(n - i)));
                break;
            }
            int64_t j = i;
            while ((right ? j >= 0 : j < n) && !tl__jis_space(p[j]))
                j += right ? -1 : 1;
            if (right)
                tl__jv_list_push(ar, parts, tl__jv_str(ar, p + j + 1, (size_t)(i - j)));
            else
                tl__jv_list_push(ar, parts, tl__jv_str(ar, p + i, (size_t)(j - i)));
            splits++;
            i = j;
        }
    } else {
        const char *sp = sep.s->p;
        int64_t sl = (int64_t)sep.s->len;
        if (!right) {
            int64_t i = 0;
            for (;;) {
                const char *hit = maxsplit >= 0 && splits == maxsplit
                                      ? NULL
                                      : memmem(p + i, (size_t)(n - i), sp, (size_t)sl);
                if (!hit) {
                    tl__jv_list_push(ar, parts, tl__jv_str(ar, p + i, (size_t)(n - i)));
                    break;
                }
                tl__jv_list_push(ar, parts, tl__jv_str(ar, p + i, (size_t)(hit - (p + i))));
                i = hit - p + sl;
                splits++;
            }
        } else {
            int64_t e = n;
            for (;;) {
                int64_t k = e - sl;
                while (k >= 0 && memcmp(p + k, sp, (size_t)sl))
                    k--;
                if (k < 0 || (maxsplit >= 0 && splits == maxsplit)) {
                    tl__jv_list_push(ar, parts, tl__jv_str(ar, p, (size_t)e));
                    break;
                }
                tl__jv_list_push(ar, parts, tl__jv_str(ar, p + k + sl, (size_t)(e - k - sl)));
                e = k;
                splits++;
            }
        }
    }
    if (right) { // collected right to left
        for (int64_t i = 0, j = parts.l->n - 1; i < j; i++, j--) {
            struct jv t = parts.l->v[i];
            parts.l->v[i] = parts.l->v[j];
            parts.l->v[j] = t;
        }
    }
    return parts;
}

// Python's str.format with {} / {0} / {name} fields (format specs are not supported).
static struct jv format(struct jctx *c, struct jv fmt, const struct jcall *a)
{
    struct jbuf b = {.arena = &c->arena};
    const char *p = fmt.s->p, *end = p + fmt.s->len;
    int auto_index = 0;
    while (p < end) {
        if (*p == '{' && p + 1 < end && p[1] == '{') {
            tl__jbuf_add(&b, "{", 1);
            p += 2;
        } else if (*p == '}' && p + 1 < end && p[1] == '}') {
            tl__jbuf_add(&b, "}", 1);
            p += 2;
        } else if (*p == '{') {
            const char *close = memchr(p, '}', (size_t)(end - p));
            if (!close) tl__jfail(c, "single '{' encountered in format string");
            const char *field = p + 1;
            size_t flen = (size_t)(close - field);
            const char *colon = memchr(field, ':', flen);
            if (colon) flen = (size_t)(colon - field);
            struct jv v;
            if (flen == 0) {
                v = tl__jarg(c, a, auto_index++, NULL, NULL);
            } else if (field[0] >= '0' && field[0] <= '9') {
                v = tl__jarg(c, a, atoi(field), NULL, NULL);
            } else {
                char name[128];
                snprintf(name, sizeof(name), "%.*s", (int)flen, field);
                v = tl__jarg(c, a, -1, name, NULL);
            }
            tl__jv_write_str(&b, v);
            p = close + 1;
        } else {
            tl__jbuf_add(&b, p, 1);
            p++;
        }
    }
    return tl__jbuf_value(&b);
}

static struct jv str_pred(struct jv s, int kind)
{
    if (!s.s->len) return tl__jv_bool(false);
    bool cased = false, lower = false, upper = false;
    for (size_t i = 0; i < s.s->len; i++) {
        char ch = s.s->p[i];
        bool d = ch >= '0' && ch <= '9', l = ch >= 'a' && ch <= 'z', u = ch >= 'A' && ch <= 'Z';
        lower |= l;
        upper |= u;
        cased |= l || u;
        if (kind == 0 && !d) return tl__jv_bool(false);
        if (kind == 1 && !(l || u)) return tl__jv_bool(false);
        if (kind == 2 && !tl__jis_space(ch)) return tl__jv_bool(false);
        if (kind == 3 && !(l || u || d)) return tl__jv_bool(false);
    }
    if (kind == 4) return tl__jv_bool(cased && !upper); // islower
    if (kind == 5) return tl__jv_bool(cased && !lower); // isupper
    return tl__jv_bool(true);
}

static bool affix(struct jctx *c, struct jv s, struct jv x, bool end)
{
    if (x.kind == JV_LIST && x.l->is_tuple) {
        for (int64_t i = 0; i < x.l->n; i++)
            if (affix(c, s, x.l->v[i], end)) return true;
        return false;
    }
    if (x.kind != JV_STR)
        tl__jfail(c, "%swith arg must be str or a tuple of str", end ? "ends" : "starts");
    if (x.s->len > s.s->len) return false;
    return !memcmp(s.s->p + (end ? s.s->len - x.s->len : 0), x.s->p, x.s->len);
}

static struct jv python_title(struct jctx *c, struct jv s)
{
    struct jv out = tl__jv_str(&c->arena, s.s->p, s.s->len);
    char *p = ((struct jstr *)out.s)->p;
    bool prev_cased = false;
    for (size_t i = 0; i < s.s->len; i++) {
        char ch = p[i];
        bool l = ch >= 'a' && ch <= 'z', u = ch >= 'A' && ch <= 'Z';
        if (l && !prev_cased) p[i] = (char)(ch - 32);
        if (u && prev_cased) p[i] = (char)(ch + 32);
        prev_cased = l || u;
    }
    return out;
}

static struct jv str_method(struct jctx *c, struct jv s, const char *m, const struct jcall *a)
{
    struct jarena *ar = &c->arena;
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith"))
        return tl__jv_bool(affix(c, s, tl__jarg(c, a, 0, NULL, NULL), m[0] == 'e'));
    if (!strcmp(m, "split") || !strcmp(m, "rsplit")) {
        struct jv ms = tl__jarg(c, a, 1, "maxsplit", NULL);
        return split(c, s, tl__jarg(c, a, 0, "sep", NULL), ms.kind == JV_INT ? ms.i : -1,
                     m[0] == 'r');
    }
    if (!strcmp(m, "strip"))
        return tl__jstr_strip(c, s, tl__jarg(c, a, 0, "chars", NULL), true, true);
    if (!strcmp(m, "lstrip"))
        return tl__jstr_strip(c, s, tl__jarg(c, a, 0, "chars", NULL), true, false);
    if (!strcmp(m, "rstrip"))
        return tl__jstr_strip(c, s, tl__jarg(c, a, 0, "chars", NULL), false, true);
    if (!strcmp(m, "lower")) return tl__jstr_case(c, s, 0);
    if (!strcmp(m, "upper")) return tl__jstr_case(c, s, 1);
    if (!strcmp(m, "capitalize")) return tl__jstr_case(c, s, 2);
    if (!strcmp(m, "title")) return python_title(c, s);
    if (!strcmp(m, "replace")) {
        struct jv cnt = tl__jarg(c, a, 2, "count", NULL);
        return tl__jstr_replace(c, s, str_arg(c, a, 0, "old"), str_arg(c, a, 1, "new"),
                                cnt.kind == JV_INT ? cnt.i : -1);
    }
    if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "count")) {
        struct jv sub = str_arg(c, a, 0, "sub");
        int64_t found = -1, count = 0;
        for (size_t i = 0; i + sub.s->len <= s.s->len;) {
            if (!memcmp(s.s->p + i, sub.s->p, sub.s->len)) {
                if (found < 0 || m[0] == 'r') found = (int64_t)i;
                count++;
                if (m[0] == 'f') break;
                i += sub.s->len ? sub.s->len : 1;
            } else {
                i++;
            }
        }
        if (m[0] == 'c') return tl__jv_int(count);
        return tl__jv_int(found < 0 ? -1 : tl__jstr_cp_len(s.s->p, (size_t)found));
    }
    if (!strcmp(m, "format")) return format(c, s, a);
    if (!strcmp(m, "join")) {
        struct jv items = tl__jiterable_to_list(c, tl__jarg(c, a, 0, NULL, NULL));
        struct jbuf b = {.arena = ar};
        for (int64_t i = 0; i < items.l->n; i++) {
            if (items.l->v[i].kind != JV_STR)
                tl__jfail(c, "sequence item %lld: expected str instance, %s found", (long long)i,
                          tl__jv_type_name(items.l->v[i]));
            if (i) tl__jbuf_add(&b, s.s->p, s.s->len);
            tl__jbuf_add(&b, items.l->v[i].s->p, items.l->v[i].s->len);
        }
        return tl__jbuf_value(&b);
    }
    if (!strcmp(m, "isdigit")) return str_pred(s, 0);
    if (!strcmp(m, "isalpha")) return str_pred(s, 1);
    if (!strcmp(m, "isspace")) return str_pred(s, 2);
    if (!strcmp(m, "isalnum")) return str_pred(s, 3);
    if (!strcmp(m, "islower")) return str_pred(s, 4);
    if (!strcmp(m, "isupper")) return str_pred(s, 5);
    if (!strcmp(m, "removeprefix") || !strcmp(m, "removesuffix")) {
        struct jv x = str_arg(c, a, 0, "prefix");
        bool end = m[6] == 's';
        if (!affix(c, s, x, end)) return s;
        return tl__jv_str(ar, s.s->p + (end ? 0 : x.s->len), s.s->len - x.s->len);
    }
    if (!strcmp(m, "splitlines")) {
        struct jv out = tl__jv_list(ar, 4);
        const char *p = s.s->p, *end = p + s.s->len;
        while (p < end) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            const char *le = nl ? nl : end;
            tl__jv_list_push(ar, out, tl__jv_str(ar, p, (size_t)(le - p)));
            p = nl ? nl + 1 : end;
        }
        return out;
    }
    tl__jfail(c, "'str' object has no attribute '%s'", m);
}

static struct jv map_method(struct jctx *c, struct jv map, const char *m, const struct jcall *a)
{
    if (!strcmp(m, "get")) {
        struct jv v;
        if (tl__jv_map_getv(map, tl__jarg(c, a, 0, "key", NULL), &v)) return v;
        bool found;
        struct jv d = tl__jarg(c, a, 1, "default", &found);
        return found ? d : tl__jv_none();
    }
    struct jv out;
    if (!strcmp(m, "items")) {
        out = tl__jv_items(&c->arena, map);
        out.flags = JVF_DICT_ITEMS;
        return out;
    }
    out = tl__jv_list(&c->arena, map.m->n);
    for (int64_t i = 0; i < map.m->n; i++)
        tl__jv_list_push(&c->arena, out, m[0] == 'k' ? map.m->k[i] : map.m->v[i]);
    out.flags = m[0] == 'k' ? JVF_DICT_KEYS : JVF_DICT_VALUES;
    return out;
}

// ---- globals

static struct jv g_range(struct jctx *c, const struct jcall *a)
{
    int64_t v[3] = {0, 0, 1};
    if (a->n_pos < 1 || a->n_pos > 3) tl__jfail(c, "range expected 1 to 3 arguments");
    for (int i = 0; i < a->n_pos; i++) {
        struct jv x = a->pos[i];
        if (x.kind != JV_INT && x.kind != JV_BOOL)
            tl__jfail(c, "'%s' object cannot be interpreted as an integer", tl__jv_type_name(x));
        v[a->n_pos == 1 ? 1 : i] = x.kind == JV_INT ? x.i : x.b;
    }
    if (v[2] == 0) tl__jfail(c, "range() arg 3 must not be zero");
    double count = ((double)v[1] - (double)v[0]) / (double)v[2];
    if (count > 100000)
        tl__jfail(c, "Range too big. The sandbox blocks ranges larger than 100000.");
    struct jv out = tl__jv_list(&c->arena, count > 0 ? (int64_t)count + 1 : 0);
    for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2])
        tl__jv_list_push(&c->arena, out, tl__jv_int(i));
    return out;
}

static struct jv g_dict(struct jctx *c, const struct jcall *a, enum jv_kind kind)
{
    struct jv out = tl__jv_map(&c->arena, a->n_kw);
    if (a->n_pos > 1) tl__jfail(c, "expected at most 1 positional argument");
    if (a->n_pos == 1) {
        struct jv src = a->pos[0];
        if (src.kind != JV_MAP && src.kind != JV_NS) tl__jfail(c, "cannot convert to a mapping");
        for (int64_t i = 0; i < src.m->n; i++)
            tl__jv_map_set(&c->arena, out, src.m->k[i], src.m->v[i]);
    }
    for (int i = 0; i < a->n_kw; i++)
        tl__jv_map_set(&c->arena, out, tl__jv_cstr(&c->arena, a->kw[i]), a->kwv[i]);
    out.kind = (uint8_t)kind;
    return out;
}

static struct jv g_strftime_now(struct jctx *c, const struct jcall *a)
{
    struct jv fmt = str_arg(c, a, 0, "format");
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char buf[512];
    size_t n = fmt.s->len < 200 ? strftime(buf, sizeof(buf), fmt.s->p, &tm) : 0;
    if (!n && fmt.s->len) tl__jfail(c, "strftime_now: bad or too long format");
    return tl__jv_str(&c->arena, buf, n);
}

struct jv tl__jcall_builtin(struct jctx *c, const struct jfunc *fn, const struct jcall *a)
{
    if (fn->kind == JF_METHOD) {
        if (fn->self.kind == JV_STR) return str_method(c, fn->self, fn->name, a);
        if (fn->self.kind == JV_MAP) return map_method(c, fn->self, fn->name, a);
        if (!strcmp(fn->name, "cycle") && fn->self.kind == JV_INT) {
            if (!a->n_pos) tl__jfail(c, "no items for cycling given");
            return a->pos[fn->self.i % a->n_pos];
        }
        tl__jfail(c, "no method '%s'", fn->name);
    }
    if (!strcmp(fn->name, "range")) return g_range(c, a);
    if (!strcmp(fn->name, "namespace")) return g_dict(c, a, JV_NS);
    if (!strcmp(fn->name, "dict")) return g_dict(c, a, JV_MAP);
    if (!strcmp(fn->name, "strftime_now")) return g_strftime_now(c, a);
    if (!strcmp(fn->name, "raise_exception")) {
        struct jv msg = tl__jv_to_str(&c->arena, tl__jarg(c, a, 0, "message", NULL));
        c->raised = true;
        tl__jfail(c, "%s", msg.s->p);
    }
    tl__jfail(c, "'%s' is not callable", fn->name);
}
