/*
 * GBNF parser (llama.cpp's grammar format): rules `name ::= alternatives`, string literals,
 * character classes (negation, ranges, \xHH \uHHHH \UHHHHHHHH escapes, any code point), `.`,
 * groups, and the postfix operators * + ? {m} {m,} {m,n}. A rule ends where the next
 * `name ::=` begins, so newlines need no special care. Errors give line and column.
 *
 * Repetition is expanded into rules (as every GBNF engine does): x* is R ::= x R | "", and
 * x{m,n} is m copies of x then a chain of n - m nested optional rules; the element bound turns a
 * huge count into an error instead of a huge grammar.
 *
 * Thread model: one call, one thread; no global state.
 */
#include "grammar/grammar_impl.h"

#include "core/alloc.h"
#include "core/error.h"
#include "core/utf8.h"

#include <stdio.h>
#include <string.h>

struct gp {
    struct gbuild *b;
    const char *s;
    size_t n, i;
    int depth; // group nesting (bounded: the parser recurses)
};

static tl_status perr(struct gp *p, size_t pos, const char *what)
{
    char where[64];
    tl__gb_where(p->s, p->n, pos, where, sizeof(where));
    return tl__errorf(TL_ERR_INVALID_ARG, "grammar: %s: %s", where, what);
}

static void skip_space(struct gp *p)
{
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            p->i++;
        } else if (c == '#') {
            while (p->i < p->n && p->s[p->i] != '\n')
                p->i++;
        } else {
            break;
        }
    }
}

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

static size_t name_len_at(const struct gp *p, size_t i)
{
    size_t j = i;
    while (j < p->n && is_name_char(p->s[j]))
        j++;
    return j - i;
}

// True when a rule definition `name ::=` starts at i.
static bool at_definition(const struct gp *p, size_t i)
{
    size_t l = name_len_at(p, i);
    if (!l) return false;
    size_t j = i + l;
    while (j < p->n && (p->s[j] == ' ' || p->s[j] == '\t' || p->s[j] == '\n' || p->s[j] == '\r'))
        j++;
    return j + 3 <= p->n && !memcmp(p->s + j, "::=", 3);
}

// Decodes one UTF-8 code point at p->i (core/utf8's decoder). Returns -1 on invalid UTF-8.
static int64_t decode_utf8(struct gp *p)
{
    uint32_t cp;
    int len = tl_utf8_decode(p->s + p->i, p->n - p->i, &cp);
    if (!len) return -1;
    p->i += (size_t)len;
    return cp;
}

// One character of a literal or class (escapes decoded). Returns the code point or -1 (error
// set).
static int64_t parse_char(struct gp *p)
{
    size_t at = p->i;
    if (p->s[p->i] != '\\') {
        int64_t cp = decode_utf8(p);
        if (cp < 0) perr(p, at, "invalid UTF-8");
        return cp;
    }
    if (p->i + 1 >= p->n) {
        perr(p, at, "unfinished escape");
        return -1;
    }
    char e = p->s[p->i + 1];
    p->i += 2;
    int hex = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (hex) {
        uint32_t v = 0;
        for (int k = 0; k < hex; k++) {
            if (p->i >= p->n) {
                perr(p, at, "unfinished hex escape");
                return -1;
            }
            char h = p->s[p->i++];
            int d = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
            if (d < 0) {
                perr(p, at, "bad hex digit in escape");
                return -1;
            }
            v = v * 16 + (uint32_t)d;
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
            perr(p, at, "escape is not a Unicode scalar value");
            return -1;
        }
        return v;
    }
    switch (e) {
    case 'n':
        return '\n';
    case 'r':
        return '\r';
    case 't':
        return '\t';
    case '0':
        return 0;
    case 'f':
        return '\f';
    case 'v':
        return '\v';
    default:
        if ((e >= 0x21 && e <= 0x2F) || (e >= 0x3A && e <= 0x40) || (e >= 0x5B && e <= 0x60) ||
            (e >= 0x7B && e <= 0x7E))
            return e; // escaped punctuation stands for itself
        perr(p, at, "unknown escape");
        return -1;
    }
}

static tl_status parse_alternatives(struct gp *p, uint32_t rule);

static int cmp_u32pair(const void *a, const void *b)
{
    const uint32_t *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

// Sorts and merges ranges in place; optionally complements them; removes surrogates. Returns
// the number of pairs (written to out, which holds up to n_pairs + 2).
static size_t normalize_ranges(uint32_t *r, size_t n_pairs, bool negate, uint32_t *out)
{
    qsort(r, n_pairs, 2 * sizeof(uint32_t), cmp_u32pair);
    size_t m = 0;
    for (size_t i = 0; i < n_pairs; i++) {
        if (m && r[2 * i] <= r[2 * (m - 1) + 1] + 1) {
            if (r[2 * i + 1] > r[2 * (m - 1) + 1]) r[2 * (m - 1) + 1] = r[2 * i + 1];
        } else {
            r[2 * m] = r[2 * i];
            r[2 * m + 1] = r[2 * i + 1];
            m++;
        }
    }
    size_t k = 0;
    if (negate) {
        uint32_t next = 0;
        for (size_t i = 0; i < m; i++) {
            if (r[2 * i] > next) {
                out[2 * k] = next;
                out[2 * k + 1] = r[2 * i] - 1;
                k++;
            }
            next = r[2 * i + 1] + 1;
        }
        if (next <= 0x10FFFF) {
            out[2 * k] = next;
            out[2 * k + 1] = 0x10FFFF;
            k++;
        }
    } else {
        memcpy(out, r, 2 * m * sizeof(uint32_t));
        k = m;
    }
    // Remove surrogates: at most one range straddles them, which may split in two.
    size_t w = 0;
    uint32_t tmp[4];
    uint32_t *res = out;
    for (size_t i = 0; i < k; i++) {
        uint32_t lo = out[2 * i], hi = out[2 * i + 1];
        size_t nt = 0;
        if (lo < 0xD800) {
            tmp[nt++] = lo;
            tmp[nt++] = hi < 0xD7FF ? hi : 0xD7FF;
        }
        if (hi > 0xDFFF) {
            tmp[nt++] = lo > 0xE000 ? lo : 0xE000;
            tmp[nt++] = hi;
        }
        for (size_t t = 0; t < nt; t += 2) {
            res[2 * w] = tmp[t];
            res[2 * w + 1] = tmp[t + 1];
            w++;
        }
    }
    return w;
}

// [...] at p->i. OUT: *el.
static tl_status parse_class(struct gp *p, uint32_t *el)
{
    size_t at = p->i++;
    bool negate = p->i < p->n && p->s[p->i] == '^';
    if (negate) p->i++;
    uint32_t *r = NULL, *norm = NULL;
    size_t n = 0, cap = 0;
    tl_status rc = TL_OK;
    while (1) {
        if (p->i >= p->n) {
            rc = perr(p, at, "unterminated character class");
            goto out;
        }
        if (p->s[p->i] == ']') break;
        int64_t lo = parse_char(p), hi = lo;
        if (lo < 0) {
            rc = TL_ERR_INVALID_ARG;
            goto out;
        }
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            hi = parse_char(p);
            if (hi < 0) {
                rc = TL_ERR_INVALID_ARG;
                goto out;
            }
            if (hi < lo) {
                rc = perr(p, at, "character range is reversed");
                goto out;
            }
        }
        if (!tl_grow((void **)&r, &cap, 2 * n + 2, sizeof(uint32_t))) {
            rc = tl__errorf(TL_ERR_NOMEM, "grammar: out of memory");
            goto out;
        }
        r[2 * n] = (uint32_t)lo;
        r[2 * n + 1] = (uint32_t)hi;
        n++;
    }
    p->i++; // ]
    norm = tl_malloc_array(2 * n + 8, sizeof(uint32_t));
    if (!norm) {
        rc = tl__errorf(TL_ERR_NOMEM, "grammar: out of memory");
        goto out;
    }
    size_t m = normalize_ranges(r ? r : norm, n, negate, norm);
    rc = tl__gb_class(p->b, norm, m, at, el);
out:
    free(r);
    free(norm);
    return rc;
}

// Wraps elements el[from..a->n) of an alternative into a new rule; they are replaced by its REF.
static tl_status wrap(struct gp *p, struct gb_alt **a, uint32_t rule, size_t alt_idx, size_t from,
                      size_t pos, uint32_t *el)
{
    int64_t r = tl__gb_new_rule(p->b, pos);
    if (r < 0) return TL_ERR_NOMEM;
    *a = &p->b->rules[rule].alts[alt_idx]; // rules may have moved
    struct gb_alt *na = tl__gb_add_alt(p->b, (uint32_t)r);
    if (!na) return TL_ERR_NOMEM;
    *a = &p->b->rules[rule].alts[alt_idx];
    for (size_t k = from; k < (*a)->n; k++)
        if (!tl__gb_push(p->b, na, (*a)->el[k], pos)) return TL_ERR_INVALID_ARG;
    p->b->n_elems -= (*a)->n - from;
    (*a)->n = from;
    *el = GE_MAKE(GE_REF, r);
    return TL_OK;
}

// Appends x repeated {m, n} (n < 0: unbounded) to alternative alt_idx of rule.
static tl_status repeat(struct gp *p, uint32_t rule, size_t alt_idx, uint32_t x, int64_t m,
                        int64_t n, size_t pos)
{
    struct gbuild *b = p->b;
#define ALT (&b->rules[rule].alts[alt_idx])
    if (m + (n > m ? n - m : 0) > TL_GRAMMAR_MAX_ELEMS)
        return perr(p, pos,
                    "repetition bound too large (the compiled grammar would exceed "
                    "1048576 elements)");
    if (m > 1 || n > 1 || n < 0) { // checked for nullability once every rule is known
        if (!tl_grow((void **)&b->reps, &b->cap_reps, b->n_reps + 1, sizeof(*b->reps)))
            return tl__errorf(TL_ERR_NOMEM, "grammar: out of memory");
        b->reps[b->n_reps++] = (struct gb_rep){x, pos};
    }
    for (int64_t k = 0; k < m; k++)
        if (!tl__gb_push(b, ALT, x, pos)) return TL_ERR_INVALID_ARG;
    if (n < 0) { // R ::= x R | ""
        int64_t r = tl__gb_new_rule(b, pos);
        if (r < 0) return TL_ERR_NOMEM;
        b->rules[r].rep = true;
        b->rules[r].rep_body = x;
        struct gb_alt *a1 = tl__gb_add_alt(b, (uint32_t)r);
        if (!a1 || !tl__gb_push(b, a1, x, pos) || !tl__gb_push(b, a1, GE_MAKE(GE_REF, r), pos) ||
            !tl__gb_add_alt(b, (uint32_t)r))
            return TL_ERR_INVALID_ARG;
        if (!tl__gb_push(b, ALT, GE_MAKE(GE_REF, r), pos)) return TL_ERR_INVALID_ARG;
        return TL_OK;
    }
    int64_t prev = -1; // O_k ::= x O_{k-1} | ""
    for (int64_t k = m; k < n; k++) {
        int64_t r = tl__gb_new_rule(b, pos);
        if (r < 0) return TL_ERR_NOMEM;
        b->rules[r].rep = true;
        b->rules[r].rep_body = x;
        struct gb_alt *a1 = tl__gb_add_alt(b, (uint32_t)r);
        if (!a1 || !tl__gb_push(b, a1, x, pos)) return TL_ERR_INVALID_ARG;
        if (prev >= 0 && !tl__gb_push(b, &b->rules[r].alts[0], GE_MAKE(GE_REF, prev), pos))
            return TL_ERR_INVALID_ARG;
        if (!tl__gb_add_alt(b, (uint32_t)r)) return TL_ERR_INVALID_ARG;
        prev = r;
    }
    if (prev >= 0 && !tl__gb_push(b, ALT, GE_MAKE(GE_REF, prev), pos)) return TL_ERR_INVALID_ARG;
    return TL_OK;
#undef ALT
}

static bool parse_uint(struct gp *p, int64_t *v)
{
    size_t at = p->i;
    *v = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        if (*v > 100000000) return false;
        *v = *v * 10 + (p->s[p->i++] - '0');
    }
    return p->i > at;
}

// One sequence (up to |, ), the end, or the next definition) into a new alternative of rule.
static tl_status parse_sequence(struct gp *p, uint32_t rule)
{
    struct gbuild *b = p->b;
    if (!tl__gb_add_alt(b, rule)) return TL_ERR_NOMEM;
    size_t alt_idx = b->rules[rule].n_alts - 1;
#define ALT (&b->rules[rule].alts[alt_idx])
    for (;;) {
        skip_space(p);
        if (p->i >= p->n) break;
        char c = p->s[p->i];
        if (c == '|' || c == ')') break;
        if (at_definition(p, p->i)) break;
        size_t at = p->i, item_from = ALT->n;
        tl_status rc = TL_OK;
        if (c == '"') {
            p->i++;
            for (;;) {
                if (p->i >= p->n) return perr(p, at, "unterminated string literal");
                if (p->s[p->i] == '"') break;
                int64_t cp = parse_char(p);
                if (cp < 0) return TL_ERR_INVALID_ARG;
                unsigned char u[4];
                int len = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
                if (len == 1) {
                    u[0] = (unsigned char)cp;
                } else {
                    for (int k = len - 1; k > 0; k--) {
                        u[k] = (unsigned char)(0x80 | (cp & 0x3F));
                        cp >>= 6;
                    }
                    u[0] = (unsigned char)((len == 2 ? 0xC0 : len == 3 ? 0xE0 : 0xF0) | cp);
                }
                for (int k = 0; k < len; k++)
                    if (!tl__gb_push(b, ALT, tl__gb_byte(b, u[k]), at)) return TL_ERR_INVALID_ARG;
            }
            p->i++;
        } else if (c == '[') {
            uint32_t el;
            rc = parse_class(p, &el);
            if (rc) return rc;
            if (!tl__gb_push(b, ALT, el, at)) return TL_ERR_INVALID_ARG;
        } else if (c == '.') {
            p->i++;
            uint32_t any[4] = {0, 0xD7FF, 0xE000, 0x10FFFF}, el;
            rc = tl__gb_class(b, any, 2, at, &el);
            if (rc) return rc;
            if (!tl__gb_push(b, ALT, el, at)) return TL_ERR_INVALID_ARG;
        } else if (c == '(') {
            if (++p->depth > 200) return perr(p, at, "groups nested too deeply");
            p->i++;
            int64_t r = tl__gb_new_rule(b, at);
            if (r < 0) return TL_ERR_NOMEM;
            rc = parse_alternatives(p, (uint32_t)r);
            if (rc) return rc;
            skip_space(p);
            if (p->i >= p->n || p->s[p->i] != ')') return perr(p, at, "unclosed '('");
            p->i++;
            p->depth--;
            if (!tl__gb_push(b, ALT, GE_MAKE(GE_REF, r), at)) return TL_ERR_INVALID_ARG;
        } else if (is_name_char(c)) {
            size_t l = name_len_at(p, p->i);
            int64_t r = tl__gb_named(b, p->s + p->i, l, p->i);
            if (r < 0) return TL_ERR_NOMEM;
            p->i += l;
            if (!tl__gb_push(b, ALT, GE_MAKE(GE_REF, r), at)) return TL_ERR_INVALID_ARG;
        } else {
            char msg[64];
            snprintf(msg, sizeof(msg), "unexpected character '%c'",
                     c >= 0x20 && c < 0x7f ? c : '?');
            return perr(p, at, msg);
        }
        // Postfix operators.
        skip_space(p);
        while (p->i < p->n &&
               (p->s[p->i] == '*' || p->s[p->i] == '+' || p->s[p->i] == '?' || p->s[p->i] == '{')) {
            size_t op_at = p->i;
            int64_t m = 0, n = -1;
            char op = p->s[p->i++];
            if (op == '+') m = 1;
            if (op == '?') n = 1;
            if (op == '{') {
                skip_space(p);
                if (!parse_uint(p, &m)) return perr(p, op_at, "expected a number after '{'");
                skip_space(p);
                n = m;
                if (p->i < p->n && p->s[p->i] == ',') {
                    p->i++;
                    skip_space(p);
                    n = -1;
                    if (p->i < p->n && p->s[p->i] != '}' && !parse_uint(p, &n))
                        return perr(p, op_at, "expected a number or '}'");
                    skip_space(p);
                }
                if (p->i >= p->n || p->s[p->i] != '}') return perr(p, op_at, "expected '}'");
                p->i++;
                if (n >= 0 && n < m) return perr(p, op_at, "repetition {m,n} has n < m");
            }
            if (ALT->n == item_from) return perr(p, op_at, "repetition of nothing");
            uint32_t x = ALT->el[item_from];
            if (ALT->n - item_from > 1) {
                struct gb_alt *a = ALT;
                rc = wrap(p, &a, rule, alt_idx, item_from, op_at, &x);
                if (rc) return rc;
            } else {
                b->n_elems--;
                ALT->n = item_from;
            }
            rc = repeat(p, rule, alt_idx, x, m, n, op_at);
            if (rc) return rc;
            // A further operator applies to the whole repetition: wrap it.
            skip_space(p);
            if (p->i < p->n &&
                (p->s[p->i] == '*' || p->s[p->i] == '+' || p->s[p->i] == '?' ||
                 p->s[p->i] == '{') &&
                ALT->n - item_from != 1) {
                struct gb_alt *a = ALT;
                uint32_t w;
                rc = wrap(p, &a, rule, alt_idx, item_from, op_at, &w);
                if (rc) return rc;
                if (!tl__gb_push(b, ALT, w, op_at)) return TL_ERR_INVALID_ARG;
            }
        }
    }
    return TL_OK;
#undef ALT
}

static tl_status parse_alternatives(struct gp *p, uint32_t rule)
{
    for (;;) {
        tl_status rc = parse_sequence(p, rule);
        if (rc) return rc;
        skip_space(p);
        if (p->i < p->n && p->s[p->i] == '|') {
            p->i++;
            continue;
        }
        return TL_OK;
    }
}

tl_status tl__gbnf_parse(struct gbuild *b)
{
    struct gp p = {.b = b, .s = b->src, .n = b->src_len};
    for (;;) {
        if (tl__gcompile_over()) return TL_ERR_INVALID_ARG;
        skip_space(&p);
        if (p.i >= p.n) break;
        if (!at_definition(&p, p.i)) return perr(&p, p.i, "expected a rule definition 'name ::='");
        size_t l = name_len_at(&p, p.i), at = p.i;
        int64_t r = tl__gb_named(b, p.s + p.i, l, p.i);
        if (r < 0) return TL_ERR_NOMEM;
        if (b->rules[r].defined) return perr(&p, at, "rule defined twice");
        b->rules[r].defined = true;
        b->rules[r].pos = at;
        p.i += l;
        skip_space(&p);
        p.i += 3; // ::=
        tl_status rc = parse_alternatives(&p, (uint32_t)r);
        if (rc) return rc;
        skip_space(&p);
        if (p.i < p.n && p.s[p.i] == ')') return perr(&p, p.i, "unmatched ')'");
    }
    return TL_OK;
}
