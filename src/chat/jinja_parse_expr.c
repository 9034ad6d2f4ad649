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

const struct jtok *jp_peek(struct jparser *p)
{
    return &p->toks[p->pos];
}

const struct jtok *jp_peek2(struct jparser *p)
{
    return p->pos + 1 < p->n_toks ? &p->toks[p->pos + 1] : &p->toks[p->n_toks - 1];
}

const struct jtok *jp_next(struct jparser *p)
{
    const struct jtok *t = &p->toks[p->pos];
    if (t->kind != JT_EOF) p->pos++;
    return t;
}

bool jp_is_op(const struct jtok *t, const char *op)
{
    return t->kind == JT_OP && !strcmp(t->s, op);
}

bool jp_is_name(const struct jtok *t, const char *name)
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

_Noreturn void jp_fail_at(struct jparser *p, const struct jtok *t, const char *what)
{
    jparse_fail(p, t->line, t->col, "expected %s, got %s", what, describe(t));
}

void jp_expect_op(struct jparser *p, const char *op)
{
    if (!jp_is_op(jp_peek(p), op)) {
        char what[16];
        snprintf(what, sizeof(what), "'%s'", op);
        jp_fail_at(p, jp_peek(p), what);
    }
    jp_next(p);
}

const char *jp_expect_name(struct jparser *p)
{
    if (jp_peek(p)->kind != JT_NAME) jp_fail_at(p, jp_peek(p), "a name");
    return jp_next(p)->s;
}

void jp_expect_block_end(struct jparser *p)
{
    if (jp_peek(p)->kind != JT_BLOCK_END) jp_fail_at(p, jp_peek(p), "'%}'");
    jp_next(p);
}

struct jnode *jp_node(struct jparser *p, enum jn_kind kind, const struct jtok *at)
{
    struct jnode *n = jarena_alloc(p->arena, sizeof(*n));
    n->kind = (uint8_t)kind;
    n->line = at->line;
    n->col = at->col;
    return n;
}

// A growable array of pointers in the arena.

void jp_vec_push(struct jparser *p, struct vec *v, void *x)
{
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 4;
        void **nv = jarena_alloc(p->arena, (size_t)cap * sizeof(*nv));
        if (v->n) memcpy(nv, v->v, (size_t)v->n * sizeof(*nv));
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = x;
}

// ---- expressions

struct jnode *jp_parse_expr(struct jparser *p, bool with_cond);
static struct jnode *parse_unary(struct jparser *p, bool with_filter);

void jp_enter(struct jparser *p)
{
    if (++p->depth > MAX_PARSE_DEPTH)
        jparse_fail(p, jp_peek(p)->line, jp_peek(p)->col, "expression nested too deeply");
}

void jp_parse_call_args(struct jparser *p, struct jargs *a)
{
    jp_expect_op(p, "(");
    struct vec pos = {0}, kw = {0}, kwv = {0};
    while (!jp_is_op(jp_peek(p), ")")) {
        if (pos.n + kw.n) jp_expect_op(p, ",");
        if (jp_is_op(jp_peek(p), ")")) break; // trailing comma
        if (jp_peek(p)->kind == JT_NAME && jp_is_op(jp_peek2(p), "=")) {
            jp_vec_push(p, &kw, (void *)jp_next(p)->s);
            jp_next(p);
            jp_vec_push(p, &kwv, jp_parse_expr(p, true));
        } else {
            if (kw.n) jp_fail_at(p, jp_peek(p), "a keyword argument (positional after keyword)");
            jp_vec_push(p, &pos, jp_parse_expr(p, true));
        }
    }
    jp_next(p);
    a->pos = (struct jnode **)pos.v;
    a->n_pos = pos.n;
    a->kw = (const char **)kw.v;
    a->kwv = (struct jnode **)kwv.v;
    a->n_kw = kw.n;
}

struct jnode *jp_parse_filter(struct jparser *p, struct jnode *input)
{
    const struct jtok *at = jp_next(p); // '|'
    struct jnode *f = jp_node(p, JN_FILTER, at);
    f->a = input;
    f->name = jp_expect_name(p);
    if (jp_is_op(jp_peek(p), "(")) jp_parse_call_args(p, &f->args);
    return f;
}

bool jp_starts_primary(const struct jtok *t)
{
    if (t->kind == JT_NAME)
        return strcmp(t->s, "else") && strcmp(t->s, "or") && strcmp(t->s, "and");
    return t->kind == JT_STRING || t->kind == JT_INT || t->kind == JT_FLOAT || jp_is_op(t, "(") ||
           jp_is_op(t, "[") || jp_is_op(t, "{");
}

static struct jnode *parse_primary(struct jparser *p);
static struct jnode *parse_postfix(struct jparser *p, struct jnode *n);

static struct jnode *parse_test(struct jparser *p, struct jnode *input)
{
    const struct jtok *at = jp_next(p); // 'is'
    struct jnode *t = jp_node(p, JN_TEST, at);
    t->a = input;
    if (jp_is_name(jp_peek(p), "not")) {
        jp_next(p);
        t->flag = true;
    }
    const struct jtok *nt = jp_peek(p);
    if (nt->kind == JT_NAME) {
        t->name = jp_next(p)->s;
    } else if (jp_is_op(nt, "==") || jp_is_op(nt, "!=") || jp_is_op(nt, "<") || jp_is_op(nt, ">") ||
               jp_is_op(nt, "<=") || jp_is_op(nt, ">=")) {
        t->name = jp_next(p)->s;
    } else {
        jp_fail_at(p, nt, "a test name");
    }
    if (jp_is_op(jp_peek(p), "(")) {
        jp_parse_call_args(p, &t->args);
    } else if (jp_starts_primary(jp_peek(p)) && !jp_is_name(jp_peek(p), "is")) {
        t->args.pos = jarena_alloc(p->arena, sizeof(*t->args.pos));
        t->args.pos[0] = parse_postfix(p, parse_primary(p));
        t->args.n_pos = 1;
    }
    return t;
}

static struct jnode *parse_filter_expr(struct jparser *p, struct jnode *n)
{
    for (;;) {
        if (jp_is_op(jp_peek(p), "|")) {
            n = jp_parse_filter(p, n);
        } else if (jp_is_name(jp_peek(p), "is")) {
            n = parse_test(p, n);
        } else if (jp_is_op(jp_peek(p), "(")) {
            struct jnode *c = jp_node(p, JN_CALL, jp_peek(p));
            c->a = n;
            jp_parse_call_args(p, &c->args);
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
        if (jp_is_op(jp_peek(p), "]")) break;
        if (jp_is_op(jp_peek(p), ":")) {
            jp_next(p);
            is_slice = true;
            if (++k > 2) jp_fail_at(p, jp_peek(p), "']'");
            continue;
        }
        if (parts[k]) jp_fail_at(p, jp_peek(p), "':' or ']'");
        parts[k] = jp_parse_expr(p, true);
    }
    jp_next(p);
    if (!is_slice) {
        if (!parts[0]) jp_fail_at(p, jp_peek(p), "an index");
        struct jnode *g = jp_node(p, JN_GETITEM, at);
        g->a = obj;
        g->b = parts[0];
        return g;
    }
    struct jnode *s = jp_node(p, JN_SLICE, at);
    s->a = obj;
    s->b = parts[0];
    s->c = parts[1];
    s->d = parts[2];
    return s;
}

static struct jnode *parse_postfix(struct jparser *p, struct jnode *n)
{
    for (;;) {
        const struct jtok *t = jp_peek(p);
        if (jp_is_op(t, ".")) {
            jp_next(p);
            const struct jtok *a = jp_next(p);
            if (a->kind == JT_NAME) {
                struct jnode *g = jp_node(p, JN_GETATTR, t);
                g->a = n;
                g->name = a->s;
                n = g;
            } else if (a->kind == JT_INT) {
                struct jnode *g = jp_node(p, JN_GETITEM, t);
                g->a = n;
                g->b = jp_node(p, JN_CONST, a);
                g->b->value = jv_int(a->i);
                n = g;
            } else {
                jp_fail_at(p, a, "an attribute name");
            }
        } else if (jp_is_op(t, "[")) {
            jp_next(p);
            n = parse_subscript(p, n, t);
        } else if (jp_is_op(t, "(")) {
            struct jnode *c = jp_node(p, JN_CALL, t);
            c->a = n;
            jp_parse_call_args(p, &c->args);
            n = c;
        } else {
            return n;
        }
    }
}

// Items up to the closing `close`, comma separated (trailing comma allowed).
static void parse_items(struct jparser *p, const char *close, struct vec *items)
{
    while (!jp_is_op(jp_peek(p), close)) {
        if (items->n) jp_expect_op(p, ",");
        if (jp_is_op(jp_peek(p), close)) break;
        jp_vec_push(p, items, jp_parse_expr(p, true));
    }
    jp_next(p);
}

static struct jnode *parse_primary(struct jparser *p)
{
    jp_enter(p);
    const struct jtok *t = jp_next(p);
    struct jnode *n;
    if (t->kind == JT_NAME) {
        n = jp_node(p, JN_CONST, t);
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True")) {
            n->value = jv_bool(true);
        } else if (!strcmp(t->s, "false") || !strcmp(t->s, "False")) {
            n->value = jv_bool(false);
        } else if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) {
            n->value = jv_none();
        } else {
            n->kind = JN_NAME;
            n->name = t->s;
        }
    } else if (t->kind == JT_STRING) {
        n = jp_node(p, JN_CONST, t);
        if (jp_peek(p)->kind != JT_STRING) {
            n->value = jv_str(p->arena, t->s, t->len);
        } else { // adjacent literals concatenate
            struct jbuf b = {.arena = p->arena};
            jbuf_add(&b, t->s, t->len);
            while (jp_peek(p)->kind == JT_STRING) {
                const struct jtok *s = jp_next(p);
                jbuf_add(&b, s->s, s->len);
            }
            n->value = jbuf_value(&b);
        }
    } else if (t->kind == JT_INT) {
        n = jp_node(p, JN_CONST, t);
        n->value = jv_int(t->i);
    } else if (t->kind == JT_FLOAT) {
        n = jp_node(p, JN_CONST, t);
        n->value = jv_float(t->f);
    } else if (jp_is_op(t, "(")) {
        if (jp_is_op(jp_peek(p), ")")) {
            jp_next(p);
            n = jp_node(p, JN_TUPLE, t);
        } else {
            struct jnode *first = jp_parse_expr(p, true);
            if (jp_is_op(jp_peek(p), ")")) {
                jp_next(p);
                n = first;
            } else {
                struct vec items = {0};
                jp_vec_push(p, &items, first);
                jp_expect_op(p, ",");
                while (!jp_is_op(jp_peek(p), ")")) {
                    jp_vec_push(p, &items, jp_parse_expr(p, true));
                    if (!jp_is_op(jp_peek(p), ")")) jp_expect_op(p, ",");
                }
                jp_next(p);
                n = jp_node(p, JN_TUPLE, t);
                n->items = (struct jnode **)items.v;
                n->n_items = items.n;
            }
        }
    } else if (jp_is_op(t, "[")) {
        struct vec items = {0};
        parse_items(p, "]", &items);
        n = jp_node(p, JN_LIST, t);
        n->items = (struct jnode **)items.v;
        n->n_items = items.n;
    } else if (jp_is_op(t, "{")) {
        struct vec keys = {0}, vals = {0};
        while (!jp_is_op(jp_peek(p), "}")) {
            if (keys.n) jp_expect_op(p, ",");
            if (jp_is_op(jp_peek(p), "}")) break;
            jp_vec_push(p, &keys, jp_parse_expr(p, true));
            jp_expect_op(p, ":");
            jp_vec_push(p, &vals, jp_parse_expr(p, true));
        }
        jp_next(p);
        n = jp_node(p, JN_DICT, t);
        n->items = (struct jnode **)keys.v;
        n->n_items = keys.n;
        n->args.pos = (struct jnode **)vals.v;
        n->args.n_pos = vals.n;
    } else {
        jp_fail_at(p, t, "an expression");
    }
    p->depth--;
    return n;
}

static struct jnode *parse_unary(struct jparser *p, bool with_filter)
{
    jp_enter(p);
    const struct jtok *t = jp_peek(p);
    struct jnode *n;
    if (jp_is_op(t, "-") || jp_is_op(t, "+")) {
        jp_next(p);
        n = jp_node(p, jp_is_op(t, "-") ? JN_NEG : JN_POS, t);
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
    struct jnode *n = jp_node(p, JN_BINOP, at);
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    return n;
}

static struct jnode *parse_pow(struct jparser *p)
{
    struct jnode *n = parse_unary(p, true);
    while (jp_is_op(jp_peek(p), "**")) {
        const struct jtok *t = jp_next(p);
        n = binop(p, t, JOP_POW, n, parse_unary(p, true));
    }
    return n;
}

static struct jnode *parse_math2(struct jparser *p)
{
    struct jnode *n = parse_pow(p);
    for (;;) {
        const struct jtok *t = jp_peek(p);
        enum jop op = jp_is_op(t, "*")    ? JOP_MUL
                      : jp_is_op(t, "/")  ? JOP_DIV
                      : jp_is_op(t, "//") ? JOP_FLOORDIV
                      : jp_is_op(t, "%")  ? JOP_MOD
                                          : 0;
        if (!op) return n;
        jp_next(p);
        n = binop(p, t, op, n, parse_pow(p));
    }
}

static struct jnode *parse_concat(struct jparser *p)
{
    struct jnode *n = parse_math2(p);
    while (jp_is_op(jp_peek(p), "~")) {
        const struct jtok *t = jp_next(p);
        n = binop(p, t, JOP_CONCAT, n, parse_math2(p));
    }
    return n;
}

static struct jnode *parse_math1(struct jparser *p)
{
    struct jnode *n = parse_concat(p);
    for (;;) {
        const struct jtok *t = jp_peek(p);
        enum jop op = jp_is_op(t, "+") ? JOP_ADD : jp_is_op(t, "-") ? JOP_SUB : 0;
        if (!op) return n;
        jp_next(p);
        n = binop(p, t, op, n, parse_concat(p));
    }
}

static struct jnode *parse_compare(struct jparser *p)
{
    struct jnode *n = parse_math1(p);
    struct jnode *result = NULL; // a chain a < b < c becomes (a < b) and (b < c)
    for (;;) {
        const struct jtok *t = jp_peek(p);
        enum jop op = jp_is_op(t, "==")     ? JOP_EQ
                      : jp_is_op(t, "!=")   ? JOP_NE
                      : jp_is_op(t, "<")    ? JOP_LT
                      : jp_is_op(t, "<=")   ? JOP_LE
                      : jp_is_op(t, ">")    ? JOP_GT
                      : jp_is_op(t, ">=")   ? JOP_GE
                      : jp_is_name(t, "in") ? JOP_IN
                                            : 0;
        if (!op && jp_is_name(t, "not") && jp_is_name(jp_peek2(p), "in")) {
            jp_next(p);
            op = JOP_NOTIN;
        }
        if (!op) return result ? result : n;
        jp_next(p);
        struct jnode *right = parse_math1(p);
        struct jnode *cmp = binop(p, t, op, n, right);
        if (result) {
            struct jnode *both = jp_node(p, JN_AND, t);
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
    if (jp_is_name(jp_peek(p), "not")) {
        jp_enter(p);
        struct jnode *n = jp_node(p, JN_NOT, jp_next(p));
        n->a = parse_not(p);
        p->depth--;
        return n;
    }
    return parse_compare(p);
}

static struct jnode *parse_and(struct jparser *p)
{
    struct jnode *n = parse_not(p);
    while (jp_is_name(jp_peek(p), "and")) {
        struct jnode *a = jp_node(p, JN_AND, jp_next(p));
        a->a = n;
        a->b = parse_not(p);
        n = a;
    }
    return n;
}

static struct jnode *parse_or(struct jparser *p)
{
    struct jnode *n = parse_and(p);
    while (jp_is_name(jp_peek(p), "or")) {
        struct jnode *o = jp_node(p, JN_OR, jp_next(p));
        o->a = n;
        o->b = parse_and(p);
        n = o;
    }
    return n;
}

struct jnode *jp_parse_expr(struct jparser *p, bool with_cond)
{
    jp_enter(p);
    struct jnode *n = parse_or(p);
    while (with_cond && jp_is_name(jp_peek(p), "if")) {
        struct jnode *c = jp_node(p, JN_COND, jp_next(p));
        c->a = n;
        c->b = parse_or(p);
        if (jp_is_name(jp_peek(p), "else")) {
            jp_next(p);
            c->c = jp_parse_expr(p, true);
        }
        n = c;
    }
    p->depth--;
    return n;
}

// An expression, or a tuple when commas follow ({{ a, b }}, for x in a, b).
struct jnode *jp_parse_tuple_expr(struct jparser *p, bool with_cond)
{
    const struct jtok *at = jp_peek(p);
    struct jnode *first = jp_parse_expr(p, with_cond);
    if (!jp_is_op(jp_peek(p), ",")) return first;
    struct vec items = {0};
    jp_vec_push(p, &items, first);
    while (jp_is_op(jp_peek(p), ",")) {
        jp_next(p);
        if (!jp_starts_primary(jp_peek(p)) && !jp_is_op(jp_peek(p), "-") &&
            !jp_is_name(jp_peek(p), "not"))
            break;
        jp_vec_push(p, &items, jp_parse_expr(p, with_cond));
    }
    struct jnode *t = jp_node(p, JN_TUPLE, at);
    t->items = (struct jnode **)items.v;
    t->n_items = items.n;
    return t;
}
