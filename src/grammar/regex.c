/*
 * Regular expressions to GBNF: the subset the common structured-output APIs use (literals,
 * escapes, classes with ranges and negation, \d \w \s and their negations, '.', groups, (?:...),
 * alternation, the quantifiers * + ? {m} {m,} {m,n} and their lazy forms, '^' / '$' at the very
 * start / end). Anything else (back-references, look-around, word boundaries, inline flags) is
 * an error naming it, never silently ignored.
 *
 * Two modes: a whole output must match (vLLM's guided_regex), or the regex is a JSON Schema
 * `pattern`, matched with search semantics inside a JSON string: then characters are emitted in
 * their JSON-escaped form where JSON requires it, and an unanchored end is padded with any
 * string characters.
 *
 * Thread model: pure functions.
 */
#include "grammar/grammar_impl.h"

#include "core/alloc.h"
#include "core/error.h"

#include <stdio.h>
#include <string.h>

struct rx {
    const char *s;
    size_t n, i;
    bool json; // inside a JSON string
    struct gstr *out;
    int depth;
};

static tl_status rerr(struct rx *r, const char *what)
{
    return tl__errorf(TL_ERR_INVALID_ARG, "regex: at offset %zu: %s", r->i, what);
}

// Emits a code point range list as a GBNF class (plain) or, in JSON mode, as the class of what
// may appear raw plus the escaped forms of included quote, backslash and control characters.
static void emit_ranges(struct rx *r, const uint32_t *rg, size_t n_pairs)
{
    struct gstr *o = r->out;
    bool any_raw = false;
    struct gstr cls = {0};
    tl__gstr_puts(&cls, "[");
    struct gstr esc = {0};
    for (size_t i = 0; i < n_pairs; i++) {
        uint32_t lo = rg[2 * i], hi = rg[2 * i + 1];
        if (r->json) {
            for (uint32_t c = lo; c <= hi && c < 0x20; c++) {
                const char *e = c == '\n'   ? "\"\\\\n\""
                                : c == '\t' ? "\"\\\\t\""
                                : c == '\r' ? "\"\\\\r\""
                                            : NULL;
                if (e) {
                    tl__gstr_puts(&esc, " | ");
                    tl__gstr_puts(&esc, e);
                }
            }
            if (lo <= '"' && '"' <= hi) tl__gstr_puts(&esc, " | \"\\\\\\\"\"");
            if (lo <= '\\' && '\\' <= hi) tl__gstr_puts(&esc, " | \"\\\\\\\\\"");
            if (lo < 0x20) lo = 0x20;
            if (lo > hi) continue;
            // Raw part without '"' and '\\'.
            uint32_t cut[3][2] = {{lo, hi < '"' - 1 ? hi : '"' - 1},
                                  {lo > '"' + 1 ? lo : '"' + 1, hi < '\\' - 1 ? hi : '\\' - 1},
                                  {lo > '\\' + 1 ? lo : '\\' + 1, hi}};
            for (int k = 0; k < 3; k++)
                if (cut[k][0] <= cut[k][1]) {
                    tl__gstr_printf(&cls, "\\U%08X-\\U%08X", cut[k][0], cut[k][1]);
                    any_raw = true;
                }
        } else {
            tl__gstr_printf(&cls, "\\U%08X-\\U%08X", lo, hi);
            any_raw = true;
        }
    }
    tl__gstr_puts(&cls, "]");
    tl__gstr_puts(o, "(");
    if (any_raw)
        tl__gstr_puts(o, cls.p);
    else if (!esc.n)
        tl__gstr_puts(o, "[^\\x00-\\U0010FFFF]"); // empty: a compile error later
    if (esc.n) tl__gstr_puts(o, any_raw ? esc.p : esc.p + 3);
    tl__gstr_puts(o, ")");
    if (cls.failed || esc.failed) o->failed = true;
    free(cls.p);
    free(esc.p);
}

static void emit_cp(struct rx *r, uint32_t c)
{
    uint32_t rg[2] = {c, c};
    emit_ranges(r, rg, 1);
}

static int cmp_pair(const void *a, const void *b)
{
    const uint32_t *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

struct ranges {
    uint32_t v[512];
    size_t n; // pairs
};

static bool add_range(struct ranges *rs, uint32_t lo, uint32_t hi)
{
    if (rs->n >= 256) return false;
    rs->v[2 * rs->n] = lo;
    rs->v[2 * rs->n + 1] = hi;
    rs->n++;
    return true;
}

// Sorted, merged, optionally complemented (over all code points but surrogates).
static void finish_ranges(struct ranges *rs, bool negate)
{
    qsort(rs->v, rs->n, 2 * sizeof(uint32_t), cmp_pair);
    size_t m = 0;
    for (size_t i = 0; i < rs->n; i++) {
        if (m && rs->v[2 * i] <= rs->v[2 * (m - 1) + 1] + 1) {
            if (rs->v[2 * i + 1] > rs->v[2 * (m - 1) + 1])
                rs->v[2 * (m - 1) + 1] = rs->v[2 * i + 1];
        } else {
            rs->v[2 * m] = rs->v[2 * i];
            rs->v[2 * m + 1] = rs->v[2 * i + 1];
            m++;
        }
    }
    rs->n = m;
    if (!negate) return;
    struct ranges c = {.n = 0};
    uint32_t next = 0;
    for (size_t i = 0; i < m; i++) {
        if (rs->v[2 * i] > next) add_range(&c, next, rs->v[2 * i] - 1);
        next = rs->v[2 * i + 1] + 1;
    }
    if (next <= 0x10FFFF) add_range(&c, next, 0x10FFFF);
    *rs = c;
}

static void drop_surrogates(struct ranges *rs)
{
    struct ranges c = {.n = 0};
    for (size_t i = 0; i < rs->n; i++) {
        uint32_t lo = rs->v[2 * i], hi = rs->v[2 * i + 1];
        if (lo < 0xD800) add_range(&c, lo, hi < 0xD7FF ? hi : 0xD7FF);
        if (hi > 0xDFFF) add_range(&c, lo > 0xE000 ? lo : 0xE000, hi);
    }
    *rs = c;
}

// Decodes one UTF-8 code point of the pattern; -1 if invalid.
static int64_t next_cp(struct rx *r)
{
    const unsigned char *u = (const unsigned char *)r->s + r->i;
    size_t left = r->n - r->i;
    uint32_t c = u[0];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || (size_t)len > left) return -1;
    uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; k < len; k++) {
        if ((u[k] & 0xC0) != 0x80) return -1;
        cp = (cp << 6) | (u[k] & 0x3F);
    }
    r->i += (size_t)len;
    return cp;
}

// A class escape (\d \w \s and negations) into rs; returns false if e is not one.
static bool class_escape(char e, struct ranges *rs, bool *negated)
{
    *negated = e == 'D' || e == 'W' || e == 'S';
    switch (e) {
    case 'd':
    case 'D':
        add_range(rs, '0', '9');
        return true;
    case 'w':
    case 'W':
        add_range(rs, '0', '9');
        add_range(rs, 'A', 'Z');
        add_range(rs, '_', '_');
        add_range(rs, 'a', 'z');
        return true;
    case 's':
    case 'S':
        add_range(rs, '\t', '\r');
        add_range(rs, ' ', ' ');
        return true;
    default:
        return false;
    }
}

// A single escaped character after '\' (r->i at the character). -1 with error set if unknown.
static int64_t escaped_char(struct rx *r)
{
    char e = r->s[r->i++];
    switch (e) {
    case 'n':
        return '\n';
    case 't':
        return '\t';
    case 'r':
        return '\r';
    case 'f':
        return '\f';
    case 'v':
        return '\v';
    case '0':
        return 0;
    case 'x':
    case 'u': {
        int k = e == 'x' ? 2 : 4;
        uint32_t v = 0;
        for (int j = 0; j < k; j++) {
            if (r->i >= r->n) return rerr(r, "unfinished hex escape"), -1;
            char h = r->s[r->i++];
            int d = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
            if (d < 0) return rerr(r, "bad hex digit"), -1;
            v = v * 16 + (uint32_t)d;
        }
        if (v >= 0xD800 && v <= 0xDFFF) return rerr(r, "surrogate escape"), -1;
        return v;
    }
    default:
        if ((unsigned char)e < 0x80 &&
            !((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')))
            return (unsigned char)e;
        {
            char msg[80];
            snprintf(msg, sizeof(msg), "unsupported escape '\\%c'", e);
            r->i--;
            rerr(r, msg);
        }
        return -1;
    }
}

static tl_status parse_class(struct rx *r)
{
    r->i++; // [
    struct ranges rs = {.n = 0};
    bool negate = r->i < r->n && r->s[r->i] == '^';
    if (negate) r->i++;
    bool first = true;
    for (;;) {
        if (r->i >= r->n) return rerr(r, "unterminated character class");
        if (r->s[r->i] == ']' && !first) break;
        first = false;
        int64_t lo;
        if (r->s[r->i] == '\\' && r->i + 1 < r->n) {
            r->i++;
            bool neg;
            struct ranges sub = {.n = 0};
            if (class_escape(r->s[r->i], &sub, &neg)) {
                r->i++;
                finish_ranges(&sub, neg);
                for (size_t k = 0; k < sub.n; k++)
                    if (!add_range(&rs, sub.v[2 * k], sub.v[2 * k + 1]))
                        return rerr(r, "character class too complex");
                continue;
            }
            lo = escaped_char(r);
        } else if (r->s[r->i] == '[' && r->i + 1 < r->n && r->s[r->i + 1] == ':') {
            return rerr(r, "POSIX classes [:name:] are not supported");
        } else {
            lo = next_cp(r);
        }
        if (lo < 0) return TL_ERR_INVALID_ARG;
        int64_t hi = lo;
        if (r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
            r->i++;
            if (r->s[r->i] == '\\') {
                r->i++;
                hi = escaped_char(r);
            } else {
                hi = next_cp(r);
            }
            if (hi < 0) return TL_ERR_INVALID_ARG;
            if (hi < lo) return rerr(r, "reversed range in character class");
        }
        if (!add_range(&rs, (uint32_t)lo, (uint32_t)hi)) return rerr(r, "class too complex");
    }
    r->i++; // ]
    finish_ranges(&rs, negate);
    drop_surrogates(&rs);
    emit_ranges(r, rs.v, rs.n);
    return TL_OK;
}

static tl_status parse_alt(struct rx *r);

static tl_status parse_atom(struct rx *r)
{
    char c = r->s[r->i];
    if (c == '(') {
        if (++r->depth > 100) return rerr(r, "groups nested too deeply");
        r->i++;
        if (r->i < r->n && r->s[r->i] == '?') {
            if (r->i + 1 < r->n && r->s[r->i + 1] == ':') {
                r->i += 2;
            } else if (r->i + 2 < r->n && r->s[r->i + 1] == 'P' && r->s[r->i + 2] == '<') {
                while (r->i < r->n && r->s[r->i] != '>')
                    r->i++;
                r->i++;
            } else {
                return rerr(r, "look-around, inline flags and other (?...) groups are not "
                               "supported");
            }
        }
        tl__gstr_puts(r->out, "(");
        tl_status rc = parse_alt(r);
        if (rc) return rc;
        if (r->i >= r->n || r->s[r->i] != ')') return rerr(r, "unclosed '('");
        r->i++;
        r->depth--;
        tl__gstr_puts(r->out, ")");
        return TL_OK;
    }
    if (c == '[') return parse_class(r);
    if (c == '.') {
        r->i++;
        uint32_t rg[4] = {0, '\n' - 1, '\n' + 1, 0x10FFFF};
        struct ranges rs = {.n = 0};
        add_range(&rs, rg[0], rg[1]);
        add_range(&rs, rg[2], rg[3]);
        drop_surrogates(&rs);
        emit_ranges(r, rs.v, rs.n);
        return TL_OK;
    }
    if (c == '^' || c == '$')
        return rerr(r, "anchors are supported only at the very start ('^') and end ('$')");
    if (c == '*' || c == '+' || c == '?' || c == '{') return rerr(r, "quantifier without a target");
    if (c == '\\') {
        if (r->i + 1 >= r->n) return rerr(r, "trailing backslash");
        r->i++;
        bool neg;
        struct ranges rs = {.n = 0};
        if (class_escape(r->s[r->i], &rs, &neg)) {
            r->i++;
            finish_ranges(&rs, neg);
            drop_surrogates(&rs);
            emit_ranges(r, rs.v, rs.n);
            return TL_OK;
        }
        if (r->s[r->i] >= '1' && r->s[r->i] <= '9')
            return rerr(r, "back-references are not supported");
        if (r->s[r->i] == 'b' || r->s[r->i] == 'B' || r->s[r->i] == 'A' || r->s[r->i] == 'Z' ||
            r->s[r->i] == 'z')
            return rerr(r, "word boundaries and \\A \\Z anchors are not supported");
        int64_t cp = escaped_char(r);
        if (cp < 0) return TL_ERR_INVALID_ARG;
        emit_cp(r, (uint32_t)cp);
        return TL_OK;
    }
    int64_t cp = next_cp(r);
    if (cp < 0) return rerr(r, "invalid UTF-8");
    emit_cp(r, (uint32_t)cp);
    return TL_OK;
}

static tl_status parse_seq(struct rx *r)
{
    bool any = false;
    while (r->i < r->n && r->s[r->i] != '|' && r->s[r->i] != ')') {
        if (r->s[r->i] == '$' && r->i + 1 == r->n) break; // the end anchor
        tl__gstr_puts(r->out, " (");
        tl_status rc = parse_atom(r);
        if (rc) return rc;
        tl__gstr_puts(r->out, ")");
        any = true;
        if (r->i >= r->n) break;
        char q = r->s[r->i];
        if (q == '*' || q == '+' || q == '?') {
            char op[2] = {q, 0};
            tl__gstr_puts(r->out, op);
            r->i++;
        } else if (q == '{' && r->i + 1 < r->n && r->s[r->i + 1] >= '0' && r->s[r->i + 1] <= '9') {
            size_t j = r->i;
            while (j < r->n && r->s[j] != '}')
                j++;
            if (j >= r->n) return rerr(r, "unterminated {m,n}");
            tl__gstr_putn(r->out, r->s + r->i, j + 1 - r->i);
            r->i = j + 1;
        } else {
            continue;
        }
        if (r->i < r->n && r->s[r->i] == '?')
            r->i++; // lazy: same language
        else if (r->i < r->n && r->s[r->i] == '+')
            return rerr(r, "possessive quantifiers are not supported");
    }
    if (!any) tl__gstr_puts(r->out, " \"\"");
    return TL_OK;
}

static tl_status parse_alt(struct rx *r)
{
    for (;;) {
        tl_status rc = parse_seq(r);
        if (rc) return rc;
        if (r->i < r->n && r->s[r->i] == '|') {
            r->i++;
            tl__gstr_puts(r->out, " |");
            continue;
        }
        return TL_OK;
    }
}

tl_status tl__regex_emit(struct gstr *out, const char *re, size_t len, bool json_string)
{
    struct rx r = {.s = re, .n = len, .json = json_string, .out = out};
    bool start = len && re[0] == '^';
    if (start) r.i = 1;
    bool end = len > r.i && re[len - 1] == '$' && (len < 2 || re[len - 2] != '\\');
    const char *pad = "jchar*";
    tl__gstr_puts(out, "(");
    if (json_string && !start) tl__gstr_printf(out, "%s ", pad);
    tl__gstr_puts(out, "(");
    tl_status rc = parse_alt(&r);
    if (rc) return rc;
    if (end && r.i == len - 1) r.i++;
    if (r.i != len) return rerr(&r, r.s[r.i] == ')' ? "unmatched ')'" : "unexpected character");
    tl__gstr_puts(out, " )");
    if (json_string && !end) tl__gstr_printf(out, " %s", pad);
    tl__gstr_puts(out, ")");
    return TL_OK;
}

tl_status tl_grammar_regex_to_gbnf(const char *re, size_t len, char **gbnf)
{
    struct gstr s = {0};
    tl__gstr_puts(&s, "root ::= ");
    tl_status rc = tl__regex_emit(&s, re, len, false);
    if (rc) {
        free(s.p);
        return rc;
    }
    tl__gstr_puts(&s, "\n");
    if (s.failed) {
        free(s.p);
        return tl__errorf(TL_ERR_NOMEM, "regex: out of memory");
    }
    *gbnf = s.p;
    return TL_OK;
}
