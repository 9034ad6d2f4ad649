/*
 * The Jinja engine's value type: constructors for the value kinds, lists and mappings built in
 * the arena, Python's truthiness / equality / ordering rules and strings indexed by code point.
 * How a value becomes text (str, repr, json.dumps) is in jinja_print.c.
 *
 * Values follow Python's semantics because the oracle is Jinja2 on Python: 1 == 1.0 == True,
 * strings index by code point.
 *
 * Ownership: everything lives in the arena passed in; see jinja_impl.h. Not thread-safe per
 * arena; distinct arenas are independent.
 */
#include "chat/jinja_impl.h"

#include <string.h>

// ---- constructors

struct jv tl__jv_undef(const char *name)
{
    return (struct jv){.kind = JV_UNDEF, .undef_name = name};
}

struct jv tl__jv_none(void)
{
    return (struct jv){.kind = JV_NONE};
}

struct jv tl__jv_bool(bool b)
{
    return (struct jv){.kind = JV_BOOL, .b = b};
}

struct jv tl__jv_int(int64_t i)
{
    return (struct jv){.kind = JV_INT, .i = i};
}

struct jv tl__jv_float(double f)
{
    return (struct jv){.kind = JV_FLOAT, .f = f};
}

struct jv tl__jv_str(struct jarena *a, const char *s, size_t n)
{
    struct jstr *j = tl__jarena_alloc_raw(a, sizeof(*j) + n + 1);
    j->len = n;
    if (n) memcpy(j->p, s, n);
    j->p[n] = 0;
    return (struct jv){.kind = JV_STR, .s = j};
}

struct jv tl__jv_cstr(struct jarena *a, const char *s)
{
    return tl__jv_str(a, s, strlen(s));
}

struct jv tl__jv_list(struct jarena *a, int64_t cap)
{
    struct jlist *l = tl__jarena_alloc(a, sizeof(*l));
    l->cap = cap > 4 ? cap : 4;
    l->v = tl__jarena_alloc_raw(a, (size_t)l->cap * sizeof(struct jv));
    return (struct jv){.kind = JV_LIST, .l = l};
}

struct jv tl__jv_map(struct jarena *a, int64_t cap)
{
    struct jmap *m = tl__jarena_alloc(a, sizeof(*m));
    m->cap = cap > 4 ? cap : 4;
    m->k = tl__jarena_alloc_raw(a, (size_t)m->cap * sizeof(struct jv));
    m->v = tl__jarena_alloc_raw(a, (size_t)m->cap * sizeof(struct jv));
    return (struct jv){.kind = JV_MAP, .m = m};
}

static void *grow(struct jarena *a, void *old, int64_t n, int64_t new_cap, size_t elem)
{
    void *p = tl__jarena_alloc_raw(a, (size_t)new_cap * elem);
    if (n) memcpy(p, old, (size_t)n * elem);
    return p;
}

void tl__jv_list_push(struct jarena *a, struct jv list, struct jv item)
{
    struct jlist *l = list.l;
    if (l->n == l->cap) {
        l->v = grow(a, l->v, l->n, l->cap * 2, sizeof(struct jv));
        l->cap *= 2;
    }
    l->v[l->n++] = item;
}

bool tl__jv_map_getv(struct jv map, struct jv key, struct jv *out)
{
    const struct jmap *m = map.m;
    for (int64_t i = 0; i < m->n; i++) {
        if (tl__jv_equal(m->k[i], key)) {
            *out = m->v[i];
            return true;
        }
    }
    return false;
}

bool tl__jv_map_get(struct jv map, const char *key, size_t key_len, struct jv *out)
{
    const struct jmap *m = map.m;
    for (int64_t i = 0; i < m->n; i++) {
        const struct jv k = m->k[i];
        if (k.kind == JV_STR && k.s->len == key_len && !memcmp(k.s->p, key, key_len)) {
            *out = m->v[i];
            return true;
        }
    }
    return false;
}

void tl__jv_map_set(struct jarena *a, struct jv map, struct jv key, struct jv val)
{
    struct jmap *m = map.m;
    for (int64_t i = 0; i < m->n; i++) {
        if (tl__jv_equal(m->k[i], key)) {
            m->v[i] = val;
            return;
        }
    }
    if (m->n == m->cap) {
        m->k = grow(a, m->k, m->n, m->cap * 2, sizeof(struct jv));
        m->v = grow(a, m->v, m->n, m->cap * 2, sizeof(struct jv));
        m->cap *= 2;
    }
    m->k[m->n] = key;
    m->v[m->n++] = val;
}

struct jv tl__jv_items(struct jarena *a, struct jv map)
{
    struct jv out = tl__jv_list(a, map.m->n);
    for (int64_t i = 0; i < map.m->n; i++) {
        struct jv pair = tl__jv_list(a, 2);
        pair.l->is_tuple = true;
        tl__jv_list_push(a, pair, map.m->k[i]);
        tl__jv_list_push(a, pair, map.m->v[i]);
        tl__jv_list_push(a, out, pair);
    }
    return out;
}

// ---- Python semantics

bool tl__jv_is_num(struct jv v)
{
    return v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL;
}

double tl__jv_as_double(struct jv v)
{
    return v.kind == JV_FLOAT  ? v.f
           : v.kind == JV_INT  ? (double)v.i
           : v.kind == JV_BOOL ? (double)v.b
                               : 0.0;
}

bool tl__jv_truthy(struct jv v)
{
    switch (v.kind) {
    case JV_UNDEF:
    case JV_NONE:
        return false;
    case JV_BOOL:
        return v.b;
    case JV_INT:
        return v.i != 0;
    case JV_FLOAT:
        return v.f != 0.0;
    case JV_STR:
        return v.s->len != 0;
    case JV_LIST:
        return (v.flags & JVF_GENERATOR) || v.l->n != 0;
    case JV_MAP:
        return v.m->n != 0;
    default:
        return true;
    }
}

const char *tl__jv_type_name(struct jv v)
{
    static const char *const names[] = {"undefined", "NoneType", "bool", "int",      "float",
                                        "str",       "list",     "dict", "function", "Namespace"};
    if (v.kind == JV_LIST && (v.flags & JVF_GENERATOR)) return "generator";
    if (v.kind == JV_LIST && (v.flags & JVF_DICT_ITEMS)) return "dict_items";
    if (v.kind == JV_LIST && (v.flags & JVF_DICT_KEYS)) return "dict_keys";
    if (v.kind == JV_LIST && (v.flags & JVF_DICT_VALUES)) return "dict_values";
    if (v.kind == JV_LIST && v.l->is_tuple) return "tuple";
    return names[v.kind];
}

bool tl__jv_equal(struct jv a, struct jv b)
{
    if (tl__jv_is_num(a) && tl__jv_is_num(b)) {
        if (a.kind != JV_FLOAT && b.kind != JV_FLOAT) {
            int64_t x = a.kind == JV_INT ? a.i : a.b, y = b.kind == JV_INT ? b.i : b.b;
            return x == y;
        }
        return tl__jv_as_double(a) == tl__jv_as_double(b);
    }
    if (a.kind != b.kind) return false;
    switch (a.kind) {
    case JV_UNDEF:
    case JV_NONE:
        return true;
    case JV_STR:
        return a.s->len == b.s->len && !memcmp(a.s->p, b.s->p, a.s->len);
    case JV_LIST:
        if (a.l->n != b.l->n || a.l->is_tuple != b.l->is_tuple) return false;
        for (int64_t i = 0; i < a.l->n; i++)
            if (!tl__jv_equal(a.l->v[i], b.l->v[i])) return false;
        return true;
    case JV_MAP: {
        if (a.m->n != b.m->n) return false;
        for (int64_t i = 0; i < a.m->n; i++) {
            struct jv other;
            if (!tl__jv_map_getv(b, a.m->k[i], &other) || !tl__jv_equal(a.m->v[i], other))
                return false;
        }
        return true;
    }
    default:
        return a.m == b.m;
    }
}

bool tl__jv_compare(struct jv a, struct jv b, int *out)
{
    if (tl__jv_is_num(a) && tl__jv_is_num(b)) {
        if (a.kind != JV_FLOAT && b.kind != JV_FLOAT) {
            int64_t x = a.kind == JV_INT ? a.i : a.b, y = b.kind == JV_INT ? b.i : b.b;
            *out = (x > y) - (x < y);
        } else {
            double x = tl__jv_as_double(a), y = tl__jv_as_double(b);
            *out = (x > y) - (x < y);
        }
        return true;
    }
    if (a.kind == JV_STR && b.kind == JV_STR) {
        // UTF-8 byte order is code point order.
        size_t n = a.s->len < b.s->len ? a.s->len : b.s->len;
        int r = memcmp(a.s->p, b.s->p, n);
        *out = r ? (r > 0 ? 1 : -1) : (a.s->len > b.s->len) - (a.s->len < b.s->len);
        return true;
    }
    if (a.kind == JV_LIST && b.kind == JV_LIST && a.l->is_tuple == b.l->is_tuple) {
        for (int64_t i = 0; i < a.l->n && i < b.l->n; i++) {
            if (tl__jv_equal(a.l->v[i], b.l->v[i])) continue;
            return tl__jv_compare(a.l->v[i], b.l->v[i], out);
        }
        *out = (a.l->n > b.l->n) - (a.l->n < b.l->n);
        return true;
    }
    return false;
}

// ---- UTF-8 code points

static size_t cp_bytes(unsigned char c)
{
    return c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
}

int64_t tl__jstr_cp_len(const char *s, size_t n)
{
    int64_t count = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xc0) != 0x80) count++;
    return count;
}

size_t tl__jstr_cp_offset(const char *s, size_t n, int64_t cp)
{
    size_t i = 0;
    while (i < n && cp > 0) {
        i += cp_bytes((unsigned char)s[i]);
        cp--;
    }
    return i < n ? i : n;
}
