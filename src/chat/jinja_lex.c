/*
 * The Jinja lexer: template source -> tokens (text runs, tag delimiters, names, literals,
 * operators), with Jinja2's whitespace rules as transformers sets them: trim_blocks (the first
 * newline after a block or comment tag is dropped), lstrip_blocks (spaces and tabs between the
 * start of a line and a block or comment tag are dropped), "-" on a delimiter strips all
 * whitespace on that side, "+" disables lstrip / trim for that tag. As Jinja2 does by default,
 * \r\n and \r become \n and one trailing newline of the source is dropped (keep_trailing_newline
 * is false). {% raw %} ... {% endraw %} becomes one text token.
 *
 * Errors (an unterminated tag or string, a stray character) name the line and column and unwind
 * through tl__jparse_fail, which lives here, the lowest of the parser's files, for the lexer and
 * both parsers (jinja_parse.c, jinja_parse_expr.c) to call without a circle among them. Tokens
 * live in the parser's arena. Not thread-safe per parser.
 */
#include "chat/jinja_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Writes "line L, column C: message" into the parser's error buffer and unwinds to
// tl_jinja_parse's setjmp.
_Noreturn void tl__jparse_fail(struct jparser *p, int line, int col, const char *fmt, ...)
{
    if (p->err && p->err_size) {
        int n = snprintf(p->err, p->err_size, "line %d, column %d: ", line, col);
        if (n < 0) n = 0;
        if ((size_t)n < p->err_size) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(p->err + n, p->err_size - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    longjmp(p->fail, 1);
}

struct lexer {
    struct jparser *p;
    const char *s; // normalized source (arena)
    size_t n, i;
    int line;
    size_t line_start; // byte offset of the current line
};

static int col_of(const struct lexer *L, size_t pos)
{
    return (int)(pos - L->line_start) + 1;
}

static void advance_to(struct lexer *L, size_t pos)
{
    for (; L->i < pos; L->i++) {
        if (L->s[L->i] == '\n') {
            L->line++;
            L->line_start = L->i + 1;
        }
    }
}

static struct jtok *push(struct lexer *L, enum jtok_kind kind, size_t pos)
{
    struct jparser *p = L->p;
    if (p->n_toks == p->cap_toks) {
        int64_t cap = p->cap_toks ? p->cap_toks * 2 : 256;
        struct jtok *t = tl__jarena_alloc(p->arena, (size_t)cap * sizeof(*t));
        if (p->n_toks) memcpy(t, p->toks, (size_t)p->n_toks * sizeof(*t));
        p->toks = t;
        p->cap_toks = cap;
    }
    struct jtok *t = &p->toks[p->n_toks++];
    memset(t, 0, sizeof(*t));
    t->kind = (uint8_t)kind;
    t->line = L->line;
    t->col = col_of(L, pos);
    return t;
}

static char *dup(struct lexer *L, const char *s, size_t n)
{
    char *d = tl__jarena_alloc(L->p->arena, n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static bool is_name_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool starts(const struct lexer *L, size_t pos, const char *lit)
{
    size_t n = strlen(lit);
    return pos + n <= L->n && !memcmp(L->s + pos, lit, n);
}

// Emits text [from, to) (possibly shortened by the whitespace rules) as a JT_TEXT token.
static void emit_text(struct lexer *L, size_t from, size_t to)
{
    if (to <= from) return;
    struct jtok *t = push(L, JT_TEXT, from);
    t->s = dup(L, L->s + from, to - from);
    t->len = to - from;
}

// Decodes \uXXXX into UTF-8 at out; returns bytes written.
static size_t put_utf8(char *out, unsigned cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// A quoted string literal at L->i with Python's escapes.
static void lex_string(struct lexer *L)
{
    size_t start = L->i;
    char q = L->s[L->i];
    char *out = tl__jarena_alloc(L->p->arena, L->n - start + 1);
    size_t n = 0, i = start + 1;
    for (;; i++) {
        if (i >= L->n)
            tl__jparse_fail(L->p, L->line, col_of(L, start), "unterminated string literal");
        char c = L->s[i];
        if (c == q) break;
        if (c != '\\' || i + 1 >= L->n) {
            out[n++] = c;
            continue;
        }
        char e = L->s[++i];
        int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (digits) {
            unsigned cp = 0;
            for (int k = 0; k < digits; k++) {
                int h = i + 1 + (size_t)k < L->n ? hexval(L->s[i + 1 + (size_t)k]) : -1;
                if (h < 0)
                    tl__jparse_fail(L->p, L->line, col_of(L, i), "bad \\%c escape in string", e);
                cp = cp * 16 + (unsigned)h;
            }
            if (cp > 0x10ffff) tl__jparse_fail(L->p, L->line, col_of(L, i), "bad code point");
            i += (size_t)digits;
            n += put_utf8(out + n, cp);
            continue;
        }
        switch (e) {
        case 'n':
            out[n++] = '\n';
            break;
        case 't':
            out[n++] = '\t';
            break;
        case 'r':
            out[n++] = '\r';
            break;
        case '\\':
        case '\'':
        case '"':
            out[n++] = e;
            break;
        case '\n':
            break;
        case 'a':
            out[n++] = '\a';
            break;
        case 'b':
            out[n++] = '\b';
            break;
        case 'f':
            out[n++] = '\f';
            break;
        case 'v':
            out[n++] = '\v';
            break;
        case '0':
            out[n++] = '\0';
            break;
        default: // Python keeps unknown escapes as written
            out[n++] = '\\';
            out[n++] = e;
        }
    }
    struct jtok *t = push(L, JT_STRING, start);
    out[n] = 0;
    t->s = out;
    t->len = n;
    advance_to(L, i + 1);
}

static void lex_number(struct lexer *L)
{
    size_t start = L->i, i = L->i;
    char buf[64];
    size_t nb = 0;
    bool is_float = false;
    while (i < L->n && (is_digit(L->s[i]) || L->s[i] == '_')) {
        if (L->s[i] != '_' && nb < sizeof(buf) - 1) buf[nb++] = L->s[i];
        i++;
    }
    if (i + 1 < L->n && L->s[i] == '.' && is_digit(L->s[i + 1])) {
        is_float = true;
        buf[nb++] = '.';
        i++;
        while (i < L->n && (is_digit(L->s[i]) || L->s[i] == '_')) {
            if (L->s[i] != '_' && nb < sizeof(buf) - 1) buf[nb++] = L->s[i];
            i++;
        }
    }
    if (i < L->n && (L->s[i] == 'e' || L->s[i] == 'E')) {
        size_t j = i + 1;
        if (j < L->n && (L->s[j] == '+' || L->s[j] == '-')) j++;
        if (j < L->n && is_digit(L->s[j])) {
            is_float = true;
            while (i < j && nb < sizeof(buf) - 1)
                buf[nb++] = L->s[i++];
            while (i < L->n && is_digit(L->s[i]) && nb < sizeof(buf) - 1)
                buf[nb++] = L->s[i++];
        }
    }
    buf[nb] = 0;
    struct jtok *t = push(L, is_float ? JT_FLOAT : JT_INT, start);
    if (is_float) {
        t->f = strtod(buf, NULL);
    } else {
        char *end;
        unsigned long long v = strtoull(buf, &end, 10);
        if (nb > 18 && v > (unsigned long long)INT64_MAX)
            tl__jparse_fail(L->p, L->line, col_of(L, start), "integer literal too large");
        t->i = (int64_t)v;
    }
    advance_to(L, i);
}

static const char *const ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                  "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                  "]",  "{",  "}",  ",",  ".",  ":",  "|", NULL};

// Tokens inside {{ }} or {% %} up to and including the closing delimiter. Returns the strip
// sign of the closing delimiter ('-', '+' or 0) and leaves L->i after it.
static char lex_tag(struct lexer *L, bool is_block, size_t open_pos)
{
    const char *close = is_block ? "%}" : "}}";
    int depth = 0; // brackets: a "}}" inside {{ {'a': {'b': 1}} }} closes a dict first
    for (;;) {
        while (L->i < L->n && is_space(L->s[L->i]))
            advance_to(L, L->i + 1);
        if (L->i >= L->n)
            tl__jparse_fail(L->p, L->line, col_of(L, open_pos), "unclosed '%s' tag",
                            is_block ? "{%" : "{{");
        size_t pos = L->i;
        if (depth == 0) {
            char sign = L->s[pos];
            if ((sign == '-' || sign == '+') && starts(L, pos + 1, close)) {
                push(L, is_block ? JT_BLOCK_END : JT_VAR_END, pos);
                advance_to(L, pos + 3);
                return sign;
            }
            if (starts(L, pos, close)) {
                push(L, is_block ? JT_BLOCK_END : JT_VAR_END, pos);
                advance_to(L, pos + 2);
                return 0;
            }
        }
        char c = L->s[pos];
        if (c == '\'' || c == '"') {
            lex_string(L);
        } else if (is_digit(c)) {
            lex_number(L);
        } else if (is_name_start(c)) {
            size_t e = pos;
            while (e < L->n && (is_name_start(L->s[e]) || is_digit(L->s[e])))
                e++;
            struct jtok *t = push(L, JT_NAME, pos);
            t->s = dup(L, L->s + pos, e - pos);
            t->len = e - pos;
            advance_to(L, e);
        } else {
            const char *op = NULL;
            for (int k = 0; ops[k]; k++) {
                if (starts(L, pos, ops[k])) {
                    op = ops[k];
                    break;
                }
            }
            if (!op) tl__jparse_fail(L->p, L->line, col_of(L, pos), "unexpected character '%c'", c);
            if (op[0] == '(' || op[0] == '[' || op[0] == '{') depth++;
            if ((op[0] == ')' || op[0] == ']' || op[0] == '}') && depth > 0) depth--;
            struct jtok *t = push(L, JT_OP, pos);
            t->s = op;
            t->len = strlen(op);
            advance_to(L, pos + t->len);
        }
    }
}

// After a closing delimiter with sign `sign`: "-" eats all whitespace, none (on a block or
// comment) eats one newline (trim_blocks). Returns whether the consumed text ended a line.
static bool after_close(struct lexer *L, char sign, bool block_like)
{
    if (sign == '-') {
        while (L->i < L->n && is_space(L->s[L->i]))
            advance_to(L, L->i + 1);
    } else if (sign != '+' && block_like && L->i < L->n && L->s[L->i] == '\n') {
        advance_to(L, L->i + 1);
    }
    return L->i > 0 && L->s[L->i - 1] == '\n';
}

// {% raw %} starting at open_pos (the tag's inner part begins at inner): text up to endraw.
static bool try_raw(struct lexer *L, size_t inner, bool *line_starting)
{
    size_t i = inner;
    while (i < L->n && is_space(L->s[i]))
        i++;
    if (!starts(L, i, "raw")) return false;
    i += 3;
    while (i < L->n && is_space(L->s[i]))
        i++;
    char sign = 0;
    if (i < L->n && (L->s[i] == '-' || L->s[i] == '+') && starts(L, i + 1, "%}")) sign = L->s[i++];
    if (!starts(L, i, "%}")) return false;
    advance_to(L, i + 2);
    if (sign == '-') after_close(L, '-', true);
    size_t body = L->i;
    for (size_t j = body; j + 1 < L->n; j++) {
        if (L->s[j] != '{' || L->s[j + 1] != '%') continue;
        size_t k = j + 2;
        char open_sign = k < L->n && (L->s[k] == '-' || L->s[k] == '+') ? L->s[k++] : 0;
        while (k < L->n && is_space(L->s[k]))
            k++;
        if (!starts(L, k, "endraw")) continue;
        k += 6;
        while (k < L->n && is_space(L->s[k]))
            k++;
        char close_sign = 0;
        if (k < L->n && (L->s[k] == '-' || L->s[k] == '+') && starts(L, k + 1, "%}"))
            close_sign = L->s[k++];
        if (!starts(L, k, "%}")) continue;
        size_t end = j;
        if (open_sign == '-') {
            while (end > body && is_space(L->s[end - 1]))
                end--;
        } else if (open_sign != '+') {
            size_t l = end;
            while (l > body && (L->s[l - 1] == ' ' || L->s[l - 1] == '\t'))
                l--;
            if (l > body && L->s[l - 1] == '\n') end = l;
        }
        emit_text(L, body, end);
        advance_to(L, k + 2);
        *line_starting = after_close(L, close_sign, true);
        return true;
    }
    tl__jparse_fail(L->p, L->line, col_of(L, inner), "missing {%% endraw %%}");
}

void tl__jlex(struct jparser *p, const char *src, size_t len)
{
    // Normalize newlines and drop one trailing newline, as Jinja2 does.
    char *s = tl__jarena_alloc(p->arena, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n && s[n - 1] == '\n') n--;
    s[n] = 0;
    struct lexer L = {.p = p, .s = s, .n = n, .line = 1};
    bool line_starting = true;
    while (L.i < L.n) {
        // The next tag opener.
        size_t t = L.i;
        const char *hit = NULL;
        for (; t + 1 < L.n; t++) {
            if (L.s[t] != '{') continue;
            char c = L.s[t + 1];
            if (c == '{' || c == '%' || c == '#') {
                hit = L.s + t;
                break;
            }
        }
        if (!hit) {
            emit_text(&L, L.i, L.n);
            advance_to(&L, L.n);
            break;
        }
        char kind = hit[1];
        char sign = t + 2 < L.n && (L.s[t + 2] == '-' || L.s[t + 2] == '+') ? L.s[t + 2] : 0;
        size_t text_end = t;
        if (sign == '-') {
            while (text_end > L.i && is_space(L.s[text_end - 1]))
                text_end--;
        } else if (sign != '+' && kind != '{') {
            // lstrip_blocks: only spaces and tabs between the line start and the tag.
            size_t l = text_end;
            while (l > L.i && L.s[l - 1] != '\n' && is_space(L.s[l - 1]))
                l--;
            bool at_line = (l > L.i && L.s[l - 1] == '\n') || (l == L.i && line_starting);
            if (at_line && l < text_end) text_end = l;
        }
        emit_text(&L, L.i, text_end);
        advance_to(&L, t);
        size_t inner = t + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            size_t e = inner;
            while (e + 1 < L.n && !(L.s[e] == '#' && L.s[e + 1] == '}'))
                e++;
            if (e + 1 >= L.n) tl__jparse_fail(p, L.line, col_of(&L, t), "unclosed comment");
            char csign = e > inner && (L.s[e - 1] == '-' || L.s[e - 1] == '+') ? L.s[e - 1] : 0;
            advance_to(&L, e + 2);
            line_starting = after_close(&L, csign, true);
            continue;
        }
        if (kind == '%' && try_raw(&L, inner, &line_starting)) continue;
        push(&L, kind == '%' ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, t);
        advance_to(&L, inner);
        char close = lex_tag(&L, kind == '%', t);
        line_starting = after_close(&L, close, kind == '%');
    }
    push(&L, JT_EOF, L.i);
}
