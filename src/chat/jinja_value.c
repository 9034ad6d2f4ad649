/*
 * The Jinja engine's value type and memory: the arena every parse and render allocates from,
 * constructors for the value kinds, Python's truthiness / equality / ordering rules, and the
 * three ways a value becomes text: str() (what {{ }} prints), repr() (lists and dicts print
 * their items so) and json.dumps (the tojson filter, as transformers calls it).
 *
 * Values follow Python's semantics because the oracle is Jinja2 on Python: 1 == 1.0 == True,
 * floats print as Python's shortest repr ("1.0", "1e-05", "1e+16"), strings index by code point.
 *
 * Ownership: everything lives in the arena passed in; see jinja_impl.h. Not thread-safe per
 * arena; distinct arenas are independent.
 */
#include "chat/jinja_impl.h"

#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- arena

struct jarena_chunk {
    struct jarena_chunk *next;
    size_t size, used;
    _Alignas(16) char data[];
};

void jarena_init(struct jarena *a, size_t max_bytes)
{
    memset(a, 0, sizeof(*a));
    a->max_bytes = max_bytes;
}

// Chunks of finished arenas are kept per thread (up to 16 MiB) and reused by the next parse or
// render on that thread: fresh memory costs a page fault per 4 KiB, which measured as most of a
// render's time on a virtual machine.
// The cache is a pthread key so that a thread's chunks are freed when it exits.
#define CHUNK_CACHE_MAX ((size_t)16 << 20)
struct chunk_cache {
    struct jarena_chunk *head;
    size_t bytes;
};
static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;

static void cache_destroy(void *p)
{
    struct chunk_cache *cc = p;
    while (cc->head) {
        struct jarena_chunk *next = cc->head->next;
        free(cc->head);
        cc->head = next;
    }
    free(cc);
}

static void cache_key_create(void)
{
    if (pthread_key_create(&cache_key, cache_destroy)) abort();
}

static struct chunk_cache *thread_cache(void)
{
    pthread_once(&cache_once, cache_key_create);
    struct chunk_cache *cc = pthread_getspecific(cache_key);
    if (!cc && (cc = calloc(1, sizeof(*cc))) && pthread_setspecific(cache_key, cc)) {
        free(cc);
        cc = NULL;
    }
    return cc;
}

// A cached chunk of at least `need` bytes and at most 4x that, or NULL.
static struct jarena_chunk *cache_take(size_t need)
{
    struct chunk_cache *cc = thread_cache();
    for (struct jarena_chunk **pp = cc ? &cc->head : NULL; pp && *pp; pp = &(*pp)->next) {
        if ((*pp)->size >= need && (*pp)->size / 4 <= need) {
            struct jarena_chunk *c = *pp;
            *pp = c->next;
            cc->bytes -= c->size;
            return c;
        }
    }
    return NULL;
}

// Keeps c for reuse when the cache has room; frees it otherwise.
static void cache_put(struct jarena_chunk *c)
{
    struct chunk_cache *cc = thread_cache();
    if (cc && cc->bytes + c->size <= CHUNK_CACHE_MAX) {
        c->next = cc->head;
        cc->head = c;
        cc->bytes += c->size;
    } else {
        free(c);
    }
}

void jarena_free(struct jarena *a)
{
    struct jarena_chunk *c = a->head;
    while (c) {
        struct jarena_chunk *next = c->next;
        cache_put(c);
        c = next;
    }
    a->head = NULL;
    a->used_bytes = 0;
}

void *jarena_alloc_raw(struct jarena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    struct jarena_chunk *c = a->head;
    if (!c || c->size - c->used < n) {
        // Chunks grow with the arena (a quarter of what it holds, 32 KiB .. 4 MiB), so a big
        // render makes few allocations.
        size_t step = a->used_bytes / 4;
        step = step < 32768 ? 32768 : step > ((size_t)4 << 20) ? ((size_t)4 << 20) : step;
        size_t size = n > step ? n : step;
        struct jarena_chunk *cached = n <= ((size_t)1 << 40) ? cache_take(size) : NULL;
        if (cached) size = cached->size;
        if (n > ((size_t)1 << 40) || a->used_bytes + size > a->max_bytes ||
            !(c = cached ? cached : malloc(sizeof(*c) + size))) {
            if (cached) cache_put(cached);
            if (a->err && a->err_size)
                snprintf(a->err, a->err_size, "template used more than %zu bytes of memory",
                         a->max_bytes);
            longjmp(*a->on_fail, 1);
        }
        c->size = size;
        c->used = 0;
        a->used_bytes += size;
        if (a->head && n > step) { // a big block: keep filling the current chunk afterwards
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = a->head;
            a->head = c;
        }
    }
    void *p = c->data + c->used;
    c->used += n;
    return p;
}

void *jarena_alloc(struct jarena *a, size_t n)
{
    void *p = jarena_alloc_raw(a, n);
    memset(p, 0, n);
    return p;
}

// ---- constructors

struct jv jv_undef(const char *name)
{
    return (struct jv){.kind = JV_UNDEF, .undef_name = name};
}

struct jv jv_none(void)
{
    return (struct jv){.kind = JV_NONE};
}

struct jv jv_bool(bool b)
{
    return (struct jv){.kind = JV_BOOL, .b = b};
}

struct jv jv_int(int64_t i)
{
    return (struct jv){.kind = JV_INT, .i = i};
}

struct jv jv_float(double f)
{
    return (struct jv){.kind = JV_FLOAT, .f = f};
}

struct jv jv_str(struct jarena *a, const char *s, size_t n)
{
    struct jstr *j = jarena_alloc_raw(a, sizeof(*j) + n + 1);
    j->len = n;
    if (n) memcpy(j->p, s, n);
    j->p[n] = 0;
    return (struct jv){.kind = JV_STR, .s = j};
}

struct jv jv_cstr(struct jarena *a, const char *s)
{
    return jv_str(a, s, strlen(s));
}

struct jv jv_list(struct jarena *a, int64_t cap)
{
    struct jlist *l = jarena_alloc(a, sizeof(*l));
    l->cap = cap > 4 ? cap : 4;
    l->v = jarena_alloc_raw(a, (size_t)l->cap * sizeof(struct jv));
    return (struct jv){.kind = JV_LIST, .l = l};
}

struct jv jv_map(struct jarena *a, int64_t cap)
{
    struct jmap *m = jarena_alloc(a, sizeof(*m));
    m->cap = cap > 4 ? cap : 4;
    m->k = jarena_alloc_raw(a, (size_t)m->cap * sizeof(struct jv));
    m->v = jarena_alloc_raw(a, (size_t)m->cap * sizeof(struct jv));
    return (struct jv){.kind = JV_MAP, .m = m};
}

static void *grow(struct jarena *a, void *old, int64_t n, int64_t new_cap, size_t elem)
{
    void *p = jarena_alloc_raw(a, (size_t)new_cap * elem);
    if (n) memcpy(p, old, (size_t)n * elem);
    return p;
}

void jv_list_push(struct jarena *a, struct jv list, struct jv item)
{
    struct jlist *l = list.l;
    if (l->n == l->cap) {
        l->v = grow(a, l->v, l->n, l->cap * 2, sizeof(struct jv));
        l->cap *= 2;
    }
    l->v[l->n++] = item;
}

bool jv_map_getv(struct jv map, struct jv key, struct jv *out)
{
    const struct jmap *m = map.m;
    for (int64_t i = 0; i < m->n; i++) {
        if (jv_equal(m->k[i], key)) {
            *out = m->v[i];
            return true;
        }
    }
    return false;
}

bool jv_map_get(struct jv map, const char *key, size_t key_len, struct jv *out)
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

void jv_map_set(struct jarena *a, struct jv map, struct jv key, struct jv val)
{
    struct jmap *m = map.m;
    for (int64_t i = 0; i < m->n; i++) {
        if (jv_equal(m->k[i], key)) {
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

// ---- Python semantics

bool jv_is_num(struct jv v)
{
    return v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL;
}

double jv_as_double(struct jv v)
{
    return v.kind == JV_FLOAT  ? v.f
           : v.kind == JV_INT  ? (double)v.i
           : v.kind == JV_BOOL ? (double)v.b
                               : 0.0;
}

bool jv_truthy(struct jv v)
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

const char *jv_type_name(struct jv v)
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

bool jv_equal(struct jv a, struct jv b)
{
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.kind != JV_FLOAT && b.kind != JV_FLOAT) {
            int64_t x = a.kind == JV_INT ? a.i : a.b, y = b.kind == JV_INT ? b.i : b.b;
            return x == y;
        }
        return jv_as_double(a) == jv_as_double(b);
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
            if (!jv_equal(a.l->v[i], b.l->v[i])) return false;
        return true;
    case JV_MAP: {
        if (a.m->n != b.m->n) return false;
        for (int64_t i = 0; i < a.m->n; i++) {
            struct jv other;
            if (!jv_map_getv(b, a.m->k[i], &other) || !jv_equal(a.m->v[i], other)) return false;
        }
        return true;
    }
    default:
        return a.m == b.m;
    }
}

bool jv_compare(struct jv a, struct jv b, int *out)
{
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.kind != JV_FLOAT && b.kind != JV_FLOAT) {
            int64_t x = a.kind == JV_INT ? a.i : a.b, y = b.kind == JV_INT ? b.i : b.b;
            *out = (x > y) - (x < y);
        } else {
            double x = jv_as_double(a), y = jv_as_double(b);
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
            if (jv_equal(a.l->v[i], b.l->v[i])) continue;
            return jv_compare(a.l->v[i], b.l->v[i], out);
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

int64_t jstr_cp_len(const char *s, size_t n)
{
    int64_t count = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xc0) != 0x80) count++;
    return count;
}

size_t jstr_cp_offset(const char *s, size_t n, int64_t cp)
{
    size_t i = 0;
    while (i < n && cp > 0) {
        i += cp_bytes((unsigned char)s[i]);
        cp--;
    }
    return i < n ? i : n;
}

// ---- text

void jbuf_add(struct jbuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = jarena_alloc_raw(b->arena, cap);
        if (b->len) memcpy(p, b->p, b->len);
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void jbuf_adds(struct jbuf *b, const char *s)
{
    jbuf_add(b, s, strlen(s));
}

struct jv jbuf_value(struct jbuf *b)
{
    return jv_str(b->arena, b->p ? b->p : "", b->len);
}

void jv_write_float(struct jbuf *b, double f)
{
    char tmp[64];
    if (isnan(f)) {
        jbuf_adds(b, "nan");
        return;
    }
    if (isinf(f)) {
        jbuf_adds(b, f < 0 ? "-inf" : "inf");
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
    if (neg) jbuf_add(b, "-", 1);
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            jbuf_add(b, "0.", 2);
            for (int i = -1; i > exp; i--)
                jbuf_add(b, "0", 1);
            jbuf_add(b, digits, (size_t)nd);
        } else if (nd <= exp + 1) {
            jbuf_add(b, digits, (size_t)nd);
            for (int i = nd; i <= exp; i++)
                jbuf_add(b, "0", 1);
            jbuf_add(b, ".0", 2);
        } else {
            jbuf_add(b, digits, (size_t)exp + 1);
            jbuf_add(b, ".", 1);
            jbuf_add(b, digits + exp + 1, (size_t)(nd - exp - 1));
        }
        return;
    }
    jbuf_add(b, digits, 1);
    if (nd > 1) {
        jbuf_add(b, ".", 1);
        jbuf_add(b, digits + 1, (size_t)nd - 1);
    }
    snprintf(tmp, sizeof(tmp), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    jbuf_adds(b, tmp);
}

static void write_str_repr(struct jbuf *b, const struct jstr *s)
{
    bool has_sq = memchr(s->p, '\'', s->len) != NULL, has_dq = memchr(s->p, '"', s->len) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    jbuf_add(b, &q, 1);
    for (size_t i = 0; i < s->len; i++) {
        unsigned char ch = (unsigned char)s->p[i];
        char tmp[8];
        if (ch == '\\' || ch == (unsigned char)q) {
            tmp[0] = '\\';
            tmp[1] = (char)ch;
            jbuf_add(b, tmp, 2);
        } else if (ch == '\n') {
            jbuf_add(b, "\\n", 2);
        } else if (ch == '\r') {
            jbuf_add(b, "\\r", 2);
        } else if (ch == '\t') {
            jbuf_add(b, "\\t", 2);
        } else if (ch < 0x20 || ch == 0x7f) {
            snprintf(tmp, sizeof(tmp), "\\x%02x", ch);
            jbuf_adds(b, tmp);
        } else {
            jbuf_add(b, (const char *)&ch, 1);
        }
    }
    jbuf_add(b, &q, 1);
}

void jv_write_repr(struct jbuf *b, struct jv v)
{
    switch (v.kind) {
    case JV_STR:
        write_str_repr(b, v.s);
        return;
    case JV_UNDEF:
        jbuf_adds(b, "Undefined");
        return;
    case JV_LIST:
        if (v.flags & JVF_GENERATOR) {
            jbuf_adds(b, "<generator object>");
            return;
        }
        if (v.flags & JVF_VIEWS) { // dict_items([...])
            jbuf_adds(b, jv_type_name(v));
            jbuf_add(b, "(", 1);
            jv_write_repr(b, (struct jv){.kind = JV_LIST, .l = v.l});
            jbuf_add(b, ")", 1);
            return;
        }
        jbuf_adds(b, v.l->is_tuple ? "(" : "[");
        for (int64_t i = 0; i < v.l->n; i++) {
            if (i) jbuf_add(b, ", ", 2);
            jv_write_repr(b, v.l->v[i]);
        }
        if (v.l->is_tuple && v.l->n == 1) jbuf_add(b, ",", 1);
        jbuf_adds(b, v.l->is_tuple ? ")" : "]");
        return;
    case JV_MAP:
        jbuf_add(b, "{", 1);
        for (int64_t i = 0; i < v.m->n; i++) {
            if (i) jbuf_add(b, ", ", 2);
            jv_write_repr(b, v.m->k[i]);
            jbuf_add(b, ": ", 2);
            jv_write_repr(b, v.m->v[i]);
        }
        jbuf_add(b, "}", 1);
        return;
    default:
        jv_write_str(b, v);
    }
}

void jv_write_str(struct jbuf *b, struct jv v)
{
    char tmp[32];
    switch (v.kind) {
    case JV_UNDEF:
        return;
    case JV_NONE:
        jbuf_adds(b, "None");
        return;
    case JV_BOOL:
        jbuf_adds(b, v.b ? "True" : "False");
        return;
    case JV_INT:
        snprintf(tmp, sizeof(tmp), "%lld", (long long)v.i);
        jbuf_adds(b, tmp);
        return;
    case JV_FLOAT:
        jv_write_float(b, v.f);
        return;
    case JV_STR:
        jbuf_add(b, v.s->p, v.s->len);
        return;
    case JV_FUNC:
        jbuf_adds(b, "<function ");
        jbuf_adds(b, v.fn->name ? v.fn->name : "?");
        jbuf_adds(b, ">");
        return;
    case JV_NS:
        jbuf_adds(b, "<Namespace ");
        jv_write_repr(b, (struct jv){.kind = JV_MAP, .m = v.m});
        jbuf_adds(b, ">");
        return;
    default:
        jv_write_repr(b, v);
    }
}

struct jv jv_to_str(struct jarena *a, struct jv v)
{
    if (v.kind == JV_STR) return v;
    struct jbuf b = {.arena = a};
    jv_write_str(&b, v);
    return jbuf_value(&b);
}

// ---- JSON (Python's json.dumps with ensure_ascii=False)

static void json_write_string(struct jbuf *b, const char *s, size_t n)
{
    jbuf_add(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch != '"' && ch != '\\') continue;
        jbuf_add(b, s + run, i - run);
        run = i + 1;
        char tmp[8];
        switch (ch) {
        case '"':
            jbuf_add(b, "\\\"", 2);
            break;
        case '\\':
            jbuf_add(b, "\\\\", 2);
            break;
        case '\n':
            jbuf_add(b, "\\n", 2);
            break;
        case '\r':
            jbuf_add(b, "\\r", 2);
            break;
        case '\t':
            jbuf_add(b, "\\t", 2);
            break;
        case '\b':
            jbuf_add(b, "\\b", 2);
            break;
        case '\f':
            jbuf_add(b, "\\f", 2);
            break;
        default:
            snprintf(tmp, sizeof(tmp), "\\u%04x", ch);
            jbuf_adds(b, tmp);
        }
    }
    jbuf_add(b, s + run, n - run);
    jbuf_add(b, "\"", 1);
}

static void json_newline(struct jbuf *b, int indent, int level)
{
    jbuf_add(b, "\n", 1);
    for (int i = 0; i < indent * level; i++)
        jbuf_add(b, " ", 1);
}

static int key_order_cmp(const void *x, const void *y)
{
    const struct jv *a = *(const struct jv *const *)x, *b = *(const struct jv *const *)y;
    int r = 0;
    jv_compare(a[0], b[0], &r);
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
        jbuf_adds(b, "null");
        return true;
    case JV_BOOL:
        jbuf_adds(b, v.b ? "true" : "false");
        return true;
    case JV_INT:
        jv_write_str(b, v);
        return true;
    case JV_FLOAT:
        if (isnan(v.f))
            jbuf_adds(b, "NaN");
        else if (isinf(v.f))
            jbuf_adds(b, v.f < 0 ? "-Infinity" : "Infinity");
        else
            jv_write_float(b, v.f);
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
            jbuf_adds(b, "[]");
            return true;
        }
        jbuf_add(b, "[", 1);
        for (int64_t i = 0; i < v.l->n; i++) {
            if (i) jbuf_adds(b, isep);
            if (indent >= 0) json_newline(b, indent, level + 1);
            if (!json_value(b, v.l->v[i], indent, isep, ksep, sort_keys, level + 1, bad))
                return false;
        }
        if (indent >= 0) json_newline(b, indent, level);
        jbuf_add(b, "]", 1);
        return true;
    case JV_MAP: {
        if (!v.m->n) {
            jbuf_adds(b, "{}");
            return true;
        }
        // Pairs in order (sorted by key when asked): an array of pointers to (key, value).
        const struct jv **order = jarena_alloc(b->arena, (size_t)v.m->n * sizeof(*order));
        struct jv *pairs = jarena_alloc(b->arena, (size_t)v.m->n * 2 * sizeof(*pairs));
        for (int64_t i = 0; i < v.m->n; i++) {
            pairs[2 * i] = v.m->k[i];
            pairs[2 * i + 1] = v.m->v[i];
            order[i] = &pairs[2 * i];
        }
        if (sort_keys) qsort(order, (size_t)v.m->n, sizeof(*order), key_order_cmp);
        jbuf_add(b, "{", 1);
        for (int64_t i = 0; i < v.m->n; i++) {
            struct jv k = order[i][0];
            if (i) jbuf_adds(b, isep);
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
            jbuf_adds(b, ksep);
            if (!json_value(b, order[i][1], indent, isep, ksep, sort_keys, level + 1, bad))
                return false;
        }
        if (indent >= 0) json_newline(b, indent, level);
        jbuf_add(b, "}", 1);
        return true;
    }
    default:
        *bad = v;
        return false;
    }
}

bool jv_write_json(struct jbuf *b, struct jv v, int indent, const char *item_sep,
                   const char *key_sep, bool sort_keys, struct jv *bad)
{
    if (!item_sep) item_sep = indent >= 0 ? "," : ", ";
    if (!key_sep) key_sep = ": ";
    return json_value(b, v, indent, item_sep, key_sep, sort_keys, 0, bad);
}
