/*
 * The three ways a Jinja value becomes text: str() (what {{ }} prints), repr() (lists and dicts
 * print their items so) and json.dumps (the tojson filter, as transformers calls it), written
 * into a growable arena buffer (struct jbuf).
 *
 * Python is the oracle: floats print as Python's shortest repr ("1.0", "1e-05", "1e+16"),
 * strings repr with Python's choice of quotes and escapes, JSON as json.dumps with
 * ensure_ascii=False.
 *
 * Ownership: buffers and results live in the arena passed in; see jinja_impl.h. Not thread-safe
 * per arena; distinct arenas are independent.
 */
#include "chat/jinja_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- text

void tl__jbuf_add(struct jbuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = tl__jarena_alloc_raw(b->arena, cap);
        if (b->len) memcpy(p, b->p, b->len);
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void tl__jbuf_adds(struct jbuf *b, const char *s)
{
    tl__jbuf_add(b, s, strlen(s));
}

struct jv tl__jbuf_value(struct jbuf *b)
{
    return tl__jv_str(b->arena, b->p ? b->p : "", b->len);
}

void tl__jv_write_float(struct jbuf *b, double f)
{
    char tmp[64];
    if (isnan(f)) {
        tl__jbuf_adds(b, "nan");
        return;
    }
    if (isinf(f)) {
        tl__jbuf_adds(b, f < 0 ? "-inf" : "inf");
        return;
    }
    // Shortest digits that read back to f, then Python's repr layout: positional for exponents
    // in [-4, 16), else d.ddde+XX.
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    char digits[32];
    int nd = 0;
    const char *p = tmp;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = 0;
    if (neg) tl__jbuf_add(b, "-", 1);
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            tl__jbuf_add(b, "0.", 2);
            for (int i = -1; i > exp; i--)
                tl__jbuf_add(b, "0", 1);
            tl__jbuf_add(b, digits, (size_t)nd);
        } else if (nd <= exp + 1) {
            tl__jbuf_add(b, digits, (size_t)nd);
            for (int i = nd; i <= exp; i++)
                tl__jbuf_add(b, "0", 1);
            tl__jbuf_add(b, ".0", 2);
        } else {
            tl__jbuf_add(b, digits, (size_t)exp + 1);
            tl__jbuf_add(b, ".", 1);
            tl__jbuf_add(b, digits + exp + 1, (size_t)(nd - exp - 1));
        }
        return;
    }
    tl__jbuf_add(b, digits, 1);
    if (nd > 1) {
        tl__jbuf_add(b, ".", 1);
        tl__jbuf_add(b, digits + 1, (size_t)nd - 1);
    }
    snprintf(tmp, sizeof(tmp), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    tl__jbuf_adds(b, tmp);
}

static void write_str_repr(struct jbuf *b, const struct jstr *s)
{
    bool has_sq = memchr(s->p, '\'', s->len) != NULL, has_dq = memchr(s->p, '"', s->len) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    tl__jbuf_add(b, &q, 1);
    for (size_t i = 0; i < s->len; i++) {
        unsigned char ch = (unsigned char)s->p[i];
        char tmp[8];
        if (ch == '\\' || ch == (unsigned char)q) {
            tmp[0] = '\\';
            tmp[1] = (char)ch;
            tl__jbuf_add(b, tmp, 2);
        } else if (ch == '\n') {
            tl__jbuf_add(b, "\\n", 2);
        } else if (ch == '\r') {
            tl__jbuf_add(b, "\\r", 2);
        } else if (ch == '\t') {
            tl__jbuf_add(b, "\\t", 2);
        } else if (ch < 0x20 || ch == 0x7f) {
            snprintf(tmp, sizeof(tmp), "\\x%02x", ch);
            tl__jbuf_adds(b, tmp);
        } else {
            tl__jbuf_add(b, (const char *)&ch, 1);
        }
    }
    tl__jbuf_add(b, &q, 1);
}

void tl__jv_write_repr(struct jbuf *b, struct jv v)
{
    switch (v.kind) {
    case JV_STR:
        write_str_repr(b, v.s);
        return;
    case JV_UNDEF:
        tl__jbuf_adds(b, "Undefined");
        return;
    case JV_LIST:
        if (v.flags & JVF_GENERATOR) {
            tl__jbuf_adds(b, "<generator object>");
            return;
        }
        if (v.flags & JVF_VIEWS) { // dict_items([...])
            tl__jbuf_adds(b, tl__jv_type_name(v));
            tl__jbuf_add(b, "(", 1);
            tl__jv_write_repr(b, (struct jv){.kind = JV_LIST, .l = v.l});
            tl__jbuf_add(b, ")", 1);
            return;
        }
        tl__jbuf_adds(b, v.l->is_tuple ? "(" : "[");
        for (int64_t i = 0; i < v.l->n; i++) {
            if (i) tl__jbuf_add(b, ", ", 2);
            tl__jv_write_repr(b, v.l->v[i]);
        }
        if (v.l->is_tuple && v.l->n == 1) tl__jbuf_add(b, ",", 1);
        tl__jbuf_adds(b, v.l->is_tuple ? ")" : "]");
        return;
    case JV_MAP:
        tl__jbuf_add(b, "{", 1);
        for (int64_t i = 0; i < v.m->n; i++) {
            if (i) tl__jbuf_add(b, ", ", 2);
            tl__jv_write_repr(b, v.m->k[i]);
            tl__jbuf_add(b, ": ", 2);
            tl__jv_write_repr(b, v.m->v[i]);
        }
        tl__jbuf_add(b, "}", 1);
        return;
    default:
        tl__jv_write_str(b, v);
    }
}

void tl__jv_write_str(struct jbuf *b, struct jv v)
{
    char tmp[32];
    switch (v.kind) {
    case JV_UNDEF:
        return;
    case JV_NONE:
        tl__jbuf_adds(b, "None");
        return;
    case JV_BOOL:
        tl__jbuf_adds(b, v.b ? "True" : "False");
        return;
    case JV_INT:
        snprintf(tmp, sizeof(tmp), "%lld", (long long)v.i);
        tl__jbuf_adds(b, tmp);
        return;
    case JV_FLOAT:
        tl__jv_write_float(b, v.f);
        return;
    case JV_STR:
        tl__jbuf_add(b, v.s->p, v.s->len);
        return;
    case JV_FUNC:
        tl__jbuf_adds(b, "<function ");
        tl__jbuf_adds(b, v.fn->name ? v.fn->name : "?");
        tl__jbuf_adds(b, ">");
        return;
    case JV_NS:
        tl__jbuf_adds(b, "<Namespace ");
        tl__jv_write_repr(b, (struct jv){.kind = JV_MAP, .m = v.m});
        tl__jbuf_adds(b, ">");
        return;
    default:
        tl__jv_write_repr(b, v);
    }
}

struct jv tl__jv_to_str(struct jarena *a, struct jv v)
{
    if (v.kind == JV_STR) return v;
    struct jbuf b = {.arena = a};
    tl__jv_write_str(&b, v);
    return tl__jbuf_value(&b);
}

// ---- JSON (Python's json.dumps with ensure_ascii=False)

static void json_write_string(struct jbuf *b, const char *s, size_t n)
{
    tl__jbuf_add(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch != '"' && ch != '\\') continue;
        tl__jbuf_add(b, s + run, i - run);
        run = i + 1;
        char tmp[8];
        switch (ch) {
        case '"':
            tl__jbuf_add(b, "\\\"", 2);
            break;
        case '\\':
            tl__jbuf_add(b, "\\\\", 2);
            break;
        case '\n':
            tl__jbuf_add(b, "\\n", 2);
            break;
        case '\r':
            tl__jbuf_add(b, "\\r", 2);
            break;
        case '\t':
            tl__jbuf_add(b, "\\t", 2);
            break;
        case '\b':
            tl__jbuf_add(b, "\\b", 2);
            break;
        case '\f':
            tl__jbuf_add(b, "\\f", 2);
            break;
        default:
            snprintf(tmp, sizeof(tmp), "\\u%04x", ch);
            tl__jbuf_adds(b, tmp);
        }
    }
    tl__jbuf_add(b, s + run, n - run);
    tl__jbuf_add(b, "\"", 1);
}

static void json_newline(struct jbuf *b, int indent, int level)
{
    tl__jbuf_add(b, "\n", 1);
    for (int i = 0; i < indent * level; i++)
        tl__jbuf_add(b, " ", 1);
}

static int key_order_cmp(const void *x, const void *y)
{
    const struct jv *a = *(const struct jv *const *)x, *b = *(const struct jv *const *)y;
    int r = 0;
    tl__jv_compare(a[0], b[0], &r);
    return r;
}

static bool json_value(struct jbuf *b, struct jv v, int indent, const char *isep, const char *ksep,
                       bool sort_keys, int level, struct jv *bad)
{
    if (level > 200) {
        *bad = v;
        return false;
    }
    switch (v.kind) {
    case JV_NONE:
        tl__jbuf_adds(b, "null");
        return true;
    case JV_BOOL:
        tl__jbuf_adds(b, v.b ? "true" : "false");
        return true;
    case JV_INT:
        tl__jv_write_str(b, v);
        return true;
    case JV_FLOAT:
        if (isnan(v.f))
            tl__jbuf_adds(b, "NaN");
        else if (isinf(v.f))
            tl__jbuf_adds(b, v.f < 0 ? "-Infinity" : "Infinity");
        else
            tl__jv_write_float(b, v.f);
        return true;
    case JV_STR:
        json_write_string(b, v.s->p, v.s->len);
        return true;
    case JV_LIST:
        if (v.flags & (JVF_GENERATOR | JVF_VIEWS)) {
            *bad = v;
            return false;
        }
        if (!v.l->n) {
            tl__jbuf_adds(b, "[]");
            return true;
        }
        tl__jbuf_add(b, "[", 1);
        for (int64_t i = 0; i < v.l->n; i++) {
            if (i) tl__jbuf_adds(b, isep);
            if (indent >= 0) json_newline(b, indent, level + 1);
            if (!json_value(b, v.l->v[i], indent, isep, ksep, sort_keys, level + 1, bad))
                return false;
        }
        if (indent >= 0) json_newline(b, indent, level);
        tl__jbuf_add(b, "]", 1);
        return true;
    case JV_MAP: {
        if (!v.m->n) {
            tl__jbuf_adds(b, "{}");
            return true;
        }
        // Pairs in order (sorted by key when asked): an array of pointers to (key, value).
        const struct jv **order = tl__jarena_alloc(b->arena, (size_t)v.m->n * sizeof(*order));
        struct jv *pairs = tl__jarena_alloc(b->arena, (size_t)v.m->n * 2 * sizeof(*pairs));
        for (int64_t i = 0; i < v.m->n; i++) {
            pairs[2 * i] = v.m->k[i];
            pairs[2 * i + 1] = v.m->v[i];
            order[i] = &pairs[2 * i];
        }
        if (sort_keys) qsort(order, (size_t)v.m->n, sizeof(*order), key_order_cmp);
        tl__jbuf_add(b, "{", 1);
        for (int64_t i = 0; i < v.m->n; i++) {
            struct jv k = order[i][0];
            if (i) tl__jbuf_adds(b, isep);
            if (indent >= 0) json_newline(b, indent, level + 1);
            if (k.kind == JV_STR) {
                json_write_string(b, k.s->p, k.s->len);
            } else if (k.kind == JV_INT || k.kind == JV_FLOAT || k.kind == JV_BOOL ||
                       k.kind == JV_NONE) {
                struct jbuf kb = {.arena = b->arena};
                json_value(&kb, k, -1, ", ", ": ", false, level + 1, bad);
                json_write_string(b, kb.p, kb.len);
            } else {
                *bad = k;
                return false;
            }
            tl__jbuf_adds(b, ksep);
            if (!json_value(b, order[i][1], indent, isep, ksep, sort_keys, level + 1, bad))
                return false;
        }
        if (indent >= 0) json_newline(b, indent, level);
        tl__jbuf_add(b, "}", 1);
        return true;
    }
    default:
        *bad = v;
        return false;
    }
}

bool tl__jv_write_json(struct jbuf *b, struct jv v, int indent, const char *item_sep,
                       const char *key_sep, bool sort_keys, struct jv *bad)
{
    if (!item_sep) item_sep = indent >= 0 ? "," : ", ";
    if (!key_sep) key_sep = ": ";
    return json_value(b, v, indent, item_sep, key_sep, sort_keys, 0, bad);
}
