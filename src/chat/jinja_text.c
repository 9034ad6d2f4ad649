/*
 * String helpers of the Jinja engine shared by filters, methods and operators: strip, replace,
 * case mapping (ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic, as Python's str.lower /
 * upper do for those scripts; other code points are kept), and Python's printf-style
 * formatting ('%s: %d' % (a, b), the format filter).
 *
 * Memory: the render's arena. Thread model: per render.
 */
#include "chat/jinja_impl.h"

#include <stdio.h>
#include <string.h>

struct jv tl__jstr_strip(struct jctx *c, struct jv s, struct jv chars, bool left, bool right)
{
    const char *p = s.s->p;
    size_t b = 0, e = s.s->len;
    const char *set = chars.kind == JV_STR ? chars.s->p : NULL;
    size_t set_len = chars.kind == JV_STR ? chars.s->len : 0;
#define IN_SET(ch) (set ? memchr(set, (ch), set_len) != NULL : tl__jis_space(ch))
    while (left && b < e && IN_SET(p[b]))
        b++;
    while (right && e > b && IN_SET(p[e - 1]))
        e--;
#undef IN_SET
    return tl__jv_str(&c->arena, p + b, e - b);
}

struct jv tl__jstr_replace(struct jctx *c, struct jv s, struct jv old, struct jv new, int64_t count)
{
    if (old.kind != JV_STR || new.kind != JV_STR)
        tl__jfail(c, "replace() arguments must be strings");
    struct jbuf b = {.arena = &c->arena};
    const char *p = s.s->p, *end = p + s.s->len;
    if (old.s->len == 0) { // Python inserts new between every character
        int64_t n = 0;
        for (size_t i = 0; i <= s.s->len; i++) {
            if (count < 0 || n < count) {
                tl__jbuf_add(&b, new.s->p, new.s->len);
                n++;
            }
            if (i < s.s->len) tl__jbuf_add(&b, p + i, 1);
        }
        return tl__jbuf_value(&b);
    }
    int64_t n = 0;
    while (p < end && (count < 0 || n < count)) {
        const char *hit = memmem(p, (size_t)(end - p), old.s->p, old.s->len);
        if (!hit) break;
        tl__jbuf_add(&b, p, (size_t)(hit - p));
        tl__jbuf_add(&b, new.s->p, new.s->len);
        p = hit + old.s->len;
        n++;
    }
    tl__jbuf_add(&b, p, (size_t)(end - p));
    return tl__jbuf_value(&b);
}

// Markup's escape: & < > " ' as HTML entities; a Markup string is already escaped.
struct jv tl__jescape(struct jctx *c, struct jv v)
{
    if (v.kind == JV_STR && (v.flags & JVF_MARKUP)) return v;
    struct jv s = tl__jv_to_str(&c->arena, v);
    struct jbuf b = {.arena = &c->arena};
    for (size_t i = 0; i < s.s->len; i++) {
        switch (s.s->p[i]) {
        case '&':
            tl__jbuf_adds(&b, "&amp;");
            break;
        case '<':
            tl__jbuf_adds(&b, "&lt;");
            break;
        case '>':
            tl__jbuf_adds(&b, "&gt;");
            break;
        case '"':
            tl__jbuf_adds(&b, "&#34;");
            break;
        case '\'':
            tl__jbuf_adds(&b, "&#39;");
            break;
        default:
            tl__jbuf_add(&b, s.s->p + i, 1);
        }
    }
    struct jv out = tl__jbuf_value(&b);
    out.flags = JVF_MARKUP;
    return out;
}

// ---- case mapping (ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic)

static uint32_t cp_lower(uint32_t c)
{
    if (c >= 'A' && c <= 'Z') return c + 32;
    if (c < 0x80) return c;
    if ((c >= 0xC0 && c <= 0xDE && c != 0xD7) || (c >= 0x391 && c <= 0x3AB && c != 0x3A2) ||
        (c >= 0x410 && c <= 0x42F))
        return c + 32;
    if (c >= 0x400 && c <= 0x40F) return c + 80;
    if ((c >= 0x100 && c <= 0x137 && c != 0x130) || (c >= 0x14A && c <= 0x177)) return c | 1;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c + 1 : c;
    if (c == 0x178) return 0xFF;
    return c;
}

static uint32_t cp_upper(uint32_t c)
{
    if (c >= 'a' && c <= 'z') return c - 32;
    if (c < 0x80) return c;
    if ((c >= 0xE0 && c <= 0xFE && c != 0xF7) || (c >= 0x3B1 && c <= 0x3CB && c != 0x3C2) ||
        (c >= 0x430 && c <= 0x44F))
        return c - 32;
    if (c >= 0x450 && c <= 0x45F) return c - 80;
    if ((c >= 0x100 && c <= 0x137 && c != 0x131) || (c >= 0x14A && c <= 0x177)) return c & ~1u;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c : c - 1;
    if (c == 0xFF) return 0x178;
    return c;
}

// Decodes one UTF-8 sequence at s (n bytes left); *len gets its length (1 for invalid bytes).
static uint32_t utf8_next(const unsigned char *s, size_t n, size_t *len)
{
    if (s[0] < 0x80 || n < 2) {
        *len = 1;
        return s[0];
    }
    if ((s[0] & 0xE0) == 0xC0 && (s[1] & 0xC0) == 0x80) {
        *len = 2;
        return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    }
    if ((s[0] & 0xF0) == 0xE0 && n >= 3 && (s[1] & 0xC0) == 0x80 && (s[2] & 0xC0) == 0x80) {
        *len = 3;
        return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    }
    *len = 1; // 4-byte sequences and invalid bytes are copied as they are
    return 0xFFFFFFFF;
}

static void put_cp(struct jbuf *b, uint32_t c)
{
    char out[3];
    if (c < 0x80) {
        out[0] = (char)c;
        tl__jbuf_add(b, out, 1);
    } else if (c < 0x800) {
        out[0] = (char)(0xC0 | (c >> 6));
        out[1] = (char)(0x80 | (c & 0x3F));
        tl__jbuf_add(b, out, 2);
    } else {
        out[0] = (char)(0xE0 | (c >> 12));
        out[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        out[2] = (char)(0x80 | (c & 0x3F));
        tl__jbuf_add(b, out, 3);
    }
}

struct jv tl__jstr_case(struct jctx *c, struct jv s, int mode) // 0 lower, 1 upper, 2 capitalize
{
    struct jbuf b = {.arena = &c->arena};
    const unsigned char *p = (const unsigned char *)s.s->p;
    size_t i = 0, n = s.s->len;
    bool first = true;
    while (i < n) {
        size_t len;
        uint32_t cp = utf8_next(p + i, n - i, &len);
        if (cp == 0xFFFFFFFF) {
            tl__jbuf_add(&b, (const char *)p + i, len);
        } else {
            bool up = mode == 1 || (mode == 2 && first);
            put_cp(&b, up ? cp_upper(cp) : cp_lower(cp));
        }
        first = false;
        i += len;
    }
    return tl__jbuf_value(&b);
}

// ---- printf-style formatting: 'fmt' % args and the format filter

// One conversion of Python's %-formatting: flags/width/precision go to snprintf.
static void format_one(struct jctx *c, struct jbuf *b, const char *spec, size_t spec_len, char conv,
                       struct jv v)
{
    char f[40], tmp[512];
    if (spec_len > 20) tl__jfail(c, "format specification too long");
    if (conv == 's' || conv == 'r') {
        struct jbuf sb = {.arena = &c->arena};
        if (conv == 's')
            tl__jv_write_str(&sb, v);
        else
            tl__jv_write_repr(&sb, v);
        snprintf(f, sizeof(f), "%%%.*ss", (int)spec_len, spec);
        if (!spec_len) {
            tl__jbuf_add(b, sb.p ? sb.p : "", sb.len);
            return;
        }
        int n = snprintf(tmp, sizeof(tmp), f, sb.p ? sb.p : "");
        if (n < 0 || (size_t)n >= sizeof(tmp)) tl__jfail(c, "formatted value too long");
        tl__jbuf_add(b, tmp, (size_t)n);
        return;
    }
    if (!tl__jv_is_num(v))
        tl__jfail(c, "%%%c format: a number is required, not %s", conv, tl__jv_type_name(v));
    int n;
    if (conv == 'd' || conv == 'i' || conv == 'x' || conv == 'X' || conv == 'o') {
        long long i = v.kind == JV_FLOAT ? (long long)v.f : v.kind == JV_INT ? v.i : v.b;
        snprintf(f, sizeof(f), "%%%.*sll%c", (int)spec_len, spec, conv == 'i' ? 'd' : conv);
        n = snprintf(tmp, sizeof(tmp), f, i);
    } else {
        snprintf(f, sizeof(f), "%%%.*s%c", (int)spec_len, spec, conv);
        n = snprintf(tmp, sizeof(tmp), f, tl__jv_as_double(v));
    }
    if (n < 0 || (size_t)n >= sizeof(tmp)) tl__jfail(c, "formatted value too long");
    tl__jbuf_add(b, tmp, (size_t)n);
}

struct jv tl__jstr_percent(struct jctx *c, struct jv fmt, struct jv args)
{
    struct jbuf b = {.arena = &c->arena};
    const char *p = fmt.s->p, *end = p + fmt.s->len;
    bool tuple = args.kind == JV_LIST && args.l->is_tuple;
    int64_t next = 0;
    while (p < end) {
        const char *pct = memchr(p, '%', (size_t)(end - p));
        if (!pct) {
            tl__jbuf_add(&b, p, (size_t)(end - p));
            break;
        }
        tl__jbuf_add(&b, p, (size_t)(pct - p));
        p = pct + 1;
        if (p < end && *p == '%') {
            tl__jbuf_add(&b, "%", 1);
            p++;
            continue;
        }
        struct jv v;
        if (p < end && *p == '(') { // %(name)s
            const char *close = memchr(p, ')', (size_t)(end - p));
            if (!close || args.kind != JV_MAP) tl__jfail(c, "format requires a mapping");
            if (!tl__jv_map_get(args, p + 1, (size_t)(close - p - 1), &v))
                tl__jfail(c, "format: key '%.*s' missing", (int)(close - p - 1), p + 1);
            p = close + 1;
        } else if (tuple) {
            if (next >= args.l->n) tl__jfail(c, "not enough arguments for format string");
            v = args.l->v[next++];
        } else {
            if (next++) tl__jfail(c, "not enough arguments for format string");
            v = args;
        }
        const char *spec = p;
        while (p < end && strchr("-+ #0123456789.", *p))
            p++;
        if (p >= end || !strchr("sridxXoeEfFgG", *p))
            tl__jfail(c, "unsupported format character '%c'", p < end ? *p : '?');
        format_one(c, &b, spec, (size_t)(p - spec), *p, v);
        p++;
    }
    if (tuple && next < args.l->n)
        tl__jfail(c, "not all arguments converted during string formatting");
    return tl__jbuf_value(&b);
}
