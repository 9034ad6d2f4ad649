/*
 * The Jinja expression parser (see jinja_parse.c for statements): Jinja2's grammar and operator
 * precedence, loosest first: inline if/else, or, and, not, comparisons and in, + -, ~,
 * * / // %, **, unary - +, then primaries with their postfixes (.attr, [index or slice],
 * (call)) and filters / tests (|f, is t), which bind tighter than unary minus's operand but
 * looser than postfixes, as in Jinja2. Also the token helpers the statement parser shares.
 *
 * Nesting is bounded (MAX_PARSE_DEPTH) so a hostile template cannot exhaust the stack. Errors
 * longjmp to tl_jinja_parse. Not thread-safe per parse.
 */
#include "chat/jinja_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define MAX_PARSE_DEPTH 200

// ---- token helpers

const struct jtok *tl__jp_peek(struct jparser *p)
{
    return &p->toks[p->pos];
}

const struct jtok *tl__jp_peek2(struct jparser *p)
{
    return p->pos + 1 < p->n_toks ? &p->toks[p->pos + 1] : &p->toks[p->n_toks - 1];
}

const struct jtok *tl__jp_next(struct jparser *p)
{
    const struct jtok *t = &p->toks[p->pos];
    if (t->kind != JT_EOF) p->pos++;
    return t;
}

bool tl__jp_is_op(const struct jtok *t, const char *op)
{
    return t->kind == JT_OP && !strcmp(t->s, op);
}

bool tl__jp_is_name(const struct jtok *t, const char *name)
{
    return t->kind == JT_NAME && !strcmp(t->s, name);
}

static const char *describe(const struct jtok *t)
{
    switch (t->kind) {
    case JT_EOF:
        return "end of template";
    case JT_TEXT:
        return "text";
    case JT_VAR_BEGIN:
        return "'{{'";
    case JT_VAR_END:
        return "'}}'";
    case JT_BLOCK_BEGIN:
        return "'{%'";
    case JT_BLOCK_END:
        return "'%}'";
    case JT_STRING:
        return "a string";
    case JT_INT:
    case JT_FLOAT:
        return "a number";
    default:
        return t->s;
    }
}

_Noreturn void tl__jp_fail_at(struct jparser *p, const struct jtok *t, const char *what)
{
    tl__jparse_fail(p, t->line, t->col, "expected %s, got %s", what, describe(t));
}

void tl__jp_expect_op(struct jparser *p, const char *op)
{
    if (!tl__jp_is_op(tl__jp_peek(p), op)) {
        char what[16];
        snprintf(what, sizeof(what), "'%s'", op);
        tl__jp_fail_at(p, tl__jp_peek(p), what);
    }
    tl__jp_next(p);
}

const char *tl__jp_expect_name(struct jparser *p)
{
    if (tl__jp_peek(p)->kind != JT_NAME) tl__jp_fail_at(p, tl__jp_peek(p), "a name");
    return tl__jp_next(p)->s;
}

void tl__jp_expect_block_end(struct jparser *p)
{
    if (tl__jp_peek(p)->kind != JT_BLOCK_END) tl__jp_fail_at(p, tl__jp_peek(p), "'%}'");
    tl__jp_next(p);
}

struct jnode *tl__jp_node(struct jparser *p, enum jn_kind kind, const struct jtok *at)
{
    struct jnode *n = tl__jarena_alloc(p->arena, sizeof(*n));
    n->kind = (uint8_t)kind;
    n->line = at->line;
    n->col = at->col;
    return n;
}

// A growable array of pointers in the arena.

void tl__jp_vec_push(struct jparser *p, struct vec *v, void *x)
{
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 4;
        void **nv = tl__jarena_alloc(p->arena, (size_t)cap * sizeof(*nv));
        if (v->n) memcpy(nv, v->v, (size_t)v->n * sizeof(*nv));
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = x;
}

// ---- expressions

struct jnode *tl__jp_parse_expr(struct jparser *p, bool with_cond);
static struct jnode *parse_unary(struct jparser *p, bool with_filter);

void tl__jp_enter(struct jparser *p)
{
    if (++p->depth > MAX_PARSE_DEPTH)
        tl__jparse_fail(p, tl__jp_peek(p)->line, tl__jp_peek(p)->col,
                        "expression nested too deeply");
}

void tl__jp_parse_call_args(struct jparser *p, struct jargs *a)
{
    tl__jp_expect_op(p, "(");
    struct vec pos = {0}, kw = {0}, kwv = {0};
    while (!tl__jp_is_op(tl__jp_peek(p), ")")) {
        if (pos.n + kw.n) tl__jp_expect_op(p, ",");
        if (tl__jp_is_op(tl__jp_peek(p), ")")) break; // trailing comma
        if (tl__jp_peek(p)->kind == JT_NAME && tl__jp_is_op(tl__jp_peek2(p), "=")) {
            tl__jp_vec_push(p, &kw, (void *)tl__jp_next(p)->s);
            tl__jp_next(p);
            tl__jp_vec_push(p, &kwv, tl__jp_parse_expr(p, true));
        } else {
            if (kw.n)
                tl__jp_fail_at(p, tl__jp_peek(p), "a keyword argument (positional after keyword)");
            tl__jp_vec_push(p, &pos, tl__jp_parse_expr(p, true));
        }
    }
    tl__jp_next(p);
    a->pos = (struct jnode **)pos.v;
    a->n_pos = pos.n;
    a->kw = (const char **)kw.v;
    a->kwv = (struct jnode **)kwv.v;
    a->n_kw = kw.n;
}

struct jnode *tl__jp_parse_filter(struct jparser *p, struct jnode *input)
{
    const struct jtok *at = tl__jp_next(p); // '|'
    struct jnode *f = tl__jp_node(p, JN_FILTER, at);
    f->a = input;
    f->name = tl__jp_expect_name(p);
    if (tl__jp_is_op(tl__jp_peek(p), "(")) tl__jp_parse_call_args(p, &f->args);
    return f;
}

bool tl__jp_starts_primary(const struct jtok *t)
{
    if (t->kind == JT_NAME)
        return strcmp(t->s, "else") && strcmp(t->s, "or") && strcmp(t->s, "and");
    return t->kind == JT_STRING || t->kind == JT_INT || t->kind == JT_FLOAT ||
           tl__jp_is_op(t, "(") || tl__jp_is_op(t, "[") || tl__jp_is_op(t, "{");
}

static struct jnode *parse_primary(struct jparser *p);
static struct jnode *parse_postfix(struct jparser *p, struct jnode *n);

static struct jnode *parse_test(struct jparser *p, struct jnode *input)
{
    const struct jtok *at = tl__jp_next(p); // 'is'
    struct jnode *t = tl__jp_node(p, JN_TEST, at);
    t->a = input;
    if (tl__jp_is_name(tl__jp_peek(p), "not")) {
        tl__jp_next(p);
        t->flag = true;
    }
    const struct jtok *nt = tl__jp_peek(p);
    if (nt->kind == JT_NAME) {
        t->name = tl__jp_next(p)->s;
    } else if (tl__jp_is_op(nt, "==") || tl__jp_is_op(nt, "!=") || tl__jp_is_op(nt, "<") ||
               tl__jp_is_op(nt, ">") || tl__jp_is_op(nt, "<=") || tl__jp_is_op(nt, ">=")) {
        t->name = tl__jp_next(p)->s;
    } else {
        tl__jp_fail_at(p, nt, "a test name");
    }
    if (tl__jp_is_op(tl__jp_peek(p), "(")) {
        tl__jp_parse_call_args(p, &t->args);
    } else if (tl__jp_starts_primary(tl__jp_peek(p)) && !tl__jp_is_name(tl__jp_peek(p), "is")) {
        t->args.pos = tl__jarena_alloc(p->arena, sizeof(*t->args.pos));
        t->args.pos[0] = parse_postfix(p, parse_primary(p));
        t->args.n_pos = 1;
    }
    return t;
}

static struct jnode *parse_filter_expr(struct jparser *p, struct jnode *n)
{
    for (;;) {
        if (tl__jp_is_op(tl__jp_peek(p), "|")) {
            n = tl__jp_parse_filter(p, n);
        } else if (tl__jp_is_name(tl__jp_peek(p), "is")) {
            n = parse_test(p, n);
        } else if (tl__jp_is_op(tl__jp_peek(p), "(")) {
            struct jnode *c = tl__jp_node(p, JN_CALL, tl__jp_peek(p));
            c->a = n;
            tl__jp_parse_call_args(p, &c->args);
            n = c;
        } else {
            return n;
        }
    }
}

static struct jnode *parse_subscript(struct jparser *p, struct jnode *obj, const struct jtok *at)
{
    struct jnode *parts[3] = {NULL, NULL, NULL};
    int k = 0;
    bool is_slice = false;
    for (;;) {
        if (tl__jp_is_op(tl__jp_peek(p), "]")) break;
        if (tl__jp_is_op(tl__jp_peek(p), ":")) {
            tl__jp_next(p);
            is_slice = true;
            if (++k > 2) tl__jp_fail_at(p, tl__jp_peek(p), "']'");
            continue;
        }
        if (parts[k]) tl__jp_fail_at(p, tl__jp_peek(p), "':' or ']'");
        parts[k] = tl__jp_parse_expr(p, true);
    }
    tl__jp_next(p);
    if (!is_slice) {
        if (!parts[0]) tl__jp_fail_at(p, tl__jp_peek(p), "an index");
        struct jnode *g = tl__jp_node(p, JN_GETITEM, at);
        g->a = obj;
        g->b = parts[0];
        return g;
    }
    struct jnode *s = tl__jp_node(p, JN_SLICE, at);
    s->a = obj;
    s->b = parts[0];
    s->c = parts[1];
    s->d = parts[2];
    return s;
}

static struct jnode *parse_postfix(struct jparser *p, struct jnode *n)
{
    for (;;) {
        const struct jtok *t = tl__jp_peek(p);
        if (tl__jp_is_op(t, ".")) {
            tl__jp_next(p);
            const struct jtok *a = tl__jp_next(p);
            if (a->kind == JT_NAME) {
                struct jnode *g = tl__jp_node(p, JN_GETATTR, t);
                g->a = n;
                g->name = a->s;
                n = g;
            } else if (a->kind == JT_INT) {
                struct jnode *g = tl__jp_node(p, JN_GETITEM, t);
                g->a = n;
                g->b = tl__jp_node(p, JN_CONST, a);
                g->b->value = tl__jv_int(a->i);
                n = g;
            } else {
                tl__jp_fail_at(p, a, "an attribute name");
            }
        } else if (tl__jp_is_op(t, "[")) {
            tl__jp_next(p);
            n = parse_subscript(p, n, t);
        } else if (tl__jp_is_op(t, "(")) {
            struct jnode *c = tl__jp_node(p, JN_CALL, t);
            c->a = n;
            tl__jp_parse_call_args(p, &c->args);
            n = c;
        } else {
            return n;
        }
    }
}

// Items up to the closing `close`, comma separated (trailing comma allowed).
static void parse_items(struct jparser *p, const char *close, struct vec *items)
{
    while (!tl__jp_is_op(tl__jp_peek(p), close)) {
        if (items->n) tl__jp_expect_op(p, ",");
        if (tl__jp_is_op(tl__jp_peek(p), close)) break;
        tl__jp_vec_push(p, items, tl__jp_parse_expr(p, true));
    }
    tl__jp_next(p);
}

static struct jnode *parse_primary(struct jparser *p)
{
    tl__jp_enter(p);
    const struct jtok *t = tl__jp_next(p);
    struct jnode *n;
    if (t->kind == JT_NAME) {
        n = tl__jp_node(p, JN_CONST, t);
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True")) {
            n->value = tl__jv_bool(true);
        } else if (!strcmp(t->s, "false") || !strcmp(t->s, "False")) {
            n->value = tl__jv_bool(false);
        } else if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) {
            n->value = tl__jv_none();
        } else {
            n->kind = JN_NAME;
            n->name = t->s;
        }
    } else if (t->kind == JT_STRING) {
        n = tl__jp_node(p, JN_CONST, t);
        if (tl__jp_peek(p)->kind != JT_STRING) {
            n->value = tl__jv_str(p->arena, t->s, t->len);
        } else { // adjacent literals concatenate
            struct jbuf b = {.arena = p->arena};
            tl__jbuf_add(&b, t->s, t->len);
            while (tl__jp_peek(p)->kind == JT_STRING) {
                const struct jtok *s = tl__jp_next(p);
                tl__jbuf_add(&b, s->s, s->len);
            }
            n->value = tl__jbuf_value(&b);
        }
    } else if (t->kind == JT_INT) {
        n = tl__jp_node(p, JN_CONST, t);
        n->value = tl__jv_int(t->i);
    } else if (t->kind == JT_FLOAT) {
        n = tl__jp_node(p, JN_CONST, t);
        n->value = tl__jv_float(t->f);
    } else if (tl__jp_is_op(t, "(")) {
        if (tl__jp_is_op(tl__jp_peek(p), ")")) {
            tl__jp_next(p);
            n = tl__jp_node(p, JN_TUPLE, t);
        } else {
            struct jnode *first = tl__jp_parse_expr(p, true);
            if (tl__jp_is_op(tl__jp_peek(p), ")")) {
                tl__jp_next(p);
                n = first;
            } else {
                struct vec items = {0};
                tl__jp_vec_push(p, &items, first);
                tl__jp_expect_op(p, ",");
                while (!tl__jp_is_op(tl__jp_peek(p), ")")) {
                    tl__jp_vec_push(p, &items, tl__jp_parse_expr(p, true));
                    if (!tl__jp_is_op(tl__jp_peek(p), ")")) tl__jp_expect_op(p, ",");
                }
                tl__jp_next(p);
                n = tl__jp_node(p, JN_TUPLE, t);
                n->items = (struct jnode **)items.v;
                n->n_items = items.n;
            }
        }
    } else if (tl__jp_is_op(t, "[")) {
        struct vec items = {0};
        parse_items(p, "]", &items);
        n = tl__jp_node(p, JN_LIST, t);
        n->items = (struct jnode **)items.v;
        n->n_items = items.n;
    } else if (tl__jp_is_op(t, "{")) {
        struct vec keys = {0}, vals = {0};
        while (!tl__jp_is_op(tl__jp_peek(p), "}")) {
            if (keys.n) tl__jp_expect_op(p, ",");
            if (tl__jp_is_op(tl__jp_peek(p), "}")) break;
            tl__jp_vec_push(p, &keys, tl__jp_parse_expr(p, true));
            tl__jp_expect_op(p, ":");
            tl__jp_vec_push(p, &vals, tl__jp_parse_expr(p, true));
        }
        tl__jp_next(p);
        n = tl__jp_node(p, JN_DICT, t);
        n->items = (struct jnode **)keys.v;
        n->n_items = keys.n;
        n->args.pos = (struct jnode **)vals.v;
        n->args.n_pos = vals.n;
    } else {
        tl__jp_fail_at(p, t, "an expression");
    }
    p->depth--;
    return n;
}

static struct jnode *parse_unary(struct jparser *p, bool with_filter)
{
    tl__jp_enter(p);
    const struct jtok *t = tl__jp_peek(p);
    struct jnode *n;
    if (tl__jp_is_op(t, "-") || tl__jp_is_op(t, "+")) {
        tl__jp_next(p);
        n = tl__jp_node(p, tl__jp_is_op(t, "-") ? JN_NEG : JN_POS, t);
        n->a = parse_unary(p, false);
    } else {
        n = parse_primary(p);
    }
    n = parse_postfix(p, n);
    if (with_filter) n = parse_filter_expr(p, n);
    p->depth--;
    return n;
}

static struct jnode *binop(struct jparser *p, const struct jtok *at, enum jop op, struct jnode *a,
                           struct jnode *b)
{
    struct jnode *n = tl__jp_node(p, JN_BINOP, at);
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    return n;
}

static struct jnode *parse_pow(struct jparser *p)
{
    struct jnode *n = parse_unary(p, true);
    while (tl__jp_is_op(tl__jp_peek(p), "**")) {
        const struct jtok *t = tl__jp_next(p);
        n = binop(p, t, JOP_POW, n, parse_unary(p, true));
    }
    return n;
}

static struct jnode *parse_math2(struct jparser *p)
{
    struct jnode *n = parse_pow(p);
    for (;;) {
        const struct jtok *t = tl__jp_peek(p);
        enum jop op = tl__jp_is_op(t, "*")    ? JOP_MUL
                      : tl__jp_is_op(t, "/")  ? JOP_DIV
                      : tl__jp_is_op(t, "//") ? JOP_FLOORDIV
                      : tl__jp_is_op(t, "%")  ? JOP_MOD
                                              : 0;
        if (!op) return n;
        tl__jp_next(p);
        n = binop(p, t, op, n, parse_pow(p));
    }
}

static struct jnode *parse_concat(struct jparser *p)
{
    struct jnode *n = parse_math2(p);
    while (tl__jp_is_op(tl__jp_peek(p), "~")) {
        const struct jtok *t = tl__jp_next(p);
        n = binop(p, t, JOP_CONCAT, n, parse_math2(p));
    }
    return n;
}

static struct jnode *parse_math1(struct jparser *p)
{
    struct jnode *n = parse_concat(p);
    for (;;) {
        const struct jtok *t = tl__jp_peek(p);
        enum jop op = tl__jp_is_op(t, "+") ? JOP_ADD : tl__jp_is_op(t, "-") ? JOP_SUB : 0;
        if (!op) return n;
        tl__jp_next(p);
        n = binop(p, t, op, n, parse_concat(p));
    }
}

static struct jnode *parse_compare(struct jparser *p)
{
    struct jnode *n = parse_math1(p);
    struct jnode *result = NULL; // a chain a < b < c becomes (a < b) and (b < c)
    for (;;) {
        const struct jtok *t = tl__jp_peek(p);
        enum jop op = tl__jp_is_op(t, "==")     ? JOP_EQ
                      : tl__jp_is_op(t, "!=")   ? JOP_NE
                      : tl__jp_is_op(t, "<")    ? JOP_LT
                      : tl__jp_is_op(t, "<=")   ? JOP_LE
                      : tl__jp_is_op(t, ">")    ? JOP_GT
                      : tl__jp_is_op(t, ">=")   ? JOP_GE
                      : tl__jp_is_name(t, "in") ? JOP_IN
                                                : 0;
        if (!op && tl__jp_is_name(t, "not") && tl__jp_is_name(tl__jp_peek2(p), "in")) {
            tl__jp_next(p);
            op = JOP_NOTIN;
        }
        if (!op) return result ? result : n;
        tl__jp_next(p);
        struct jnode *right = parse_math1(p);
        struct jnode *cmp = binop(p, t, op, n, right);
        if (result) {
            struct jnode *both = tl__jp_node(p, JN_AND, t);
            both->a = result;
            both->b = cmp;
            result = both;
        } else {
            result = cmp;
        }
        n = right;
    }
}

static struct jnode *parse_not(struct jparser *p)
{
    if (tl__jp_is_name(tl__jp_peek(p), "not")) {
        tl__jp_enter(p);
        struct jnode *n = tl__jp_node(p, JN_NOT, tl__jp_next(p));
        n->a = parse_not(p);
        p->depth--;
        return n;
    }
    return parse_compare(p);
}

static struct jnode *parse_and(struct jparser *p)
{
    struct jnode *n = parse_not(p);
    while (tl__jp_is_name(tl__jp_peek(p), "and")) {
        struct jnode *a = tl__jp_node(p, JN_AND, tl__jp_next(p));
        a->a = n;
        a->b = parse_not(p);
        n = a;
    }
    return n;
}

static struct jnode *parse_or(struct jparser *p)
{
    struct jnode *n = parse_and(p);
    while (tl__jp_is_name(tl__jp_peek(p), "or")) {
        struct jnode *o = tl__jp_node(p, JN_OR, tl__jp_next(p));
        o->a = n;
        o->b = parse_and(p);
        n = o;
    }
    return n;
}

struct jnode *tl__jp_parse_expr(struct jparser *p, bool with_cond)
{
    tl__jp_enter(p);
    struct jnode *n = parse_or(p);
    while (with_cond && tl__jp_is_name(tl__jp_peek(p), "if")) {
        struct jnode *c = tl__jp_node(p, JN_COND, tl__jp_next(p));
        c->a = n;
        c->b = parse_or(p);
        if (tl__jp_is_name(tl__jp_peek(p), "else")) {
            tl__jp_next(p);
            c->c = tl__jp_parse_expr(p, true);
        }
        n = c;
    }
    p->depth--;
    return n;
}

// An expression, or a tuple when commas follow ({{ a, b }}, for x in a, b).
struct jnode *tl__jp_parse_tuple_expr(struct jparser *p, bool with_cond)
{
    const struct jtok *at = tl__jp_peek(p);
    struct jnode *first = tl__jp_parse_expr(p, with_cond);
    if (!tl__jp_is_op(tl__jp_peek(p), ",")) return first;
    struct vec items = {0};
    tl__jp_vec_push(p, &items, first);
    while (tl__jp_is_op(tl__jp_peek(p), ",")) {
        tl__jp_next(p);
        if (!tl__jp_starts_primary(tl__jp_peek(p)) && !tl__jp_is_op(tl__jp_peek(p), "-") &&
            !tl__jp_is_name(tl__jp_peek(p), "not"))
            break;
        tl__jp_vec_push(p, &items, tl__jp_parse_expr(p, with_cond));
    }
    struct jnode *t = tl__jp_node(p, JN_TUPLE, at);
    t->items = (struct jnode **)items.v;
    t->n_items = items.n;
    return t;
}
