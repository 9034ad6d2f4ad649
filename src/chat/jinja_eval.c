/*
 * The Jinja expression evaluator: names (the frames, then the globals), list / tuple / dict
 * displays, attribute, item and slice access (jinja_access.c), Python's operators, calls,
 * filters and tests. It sits above the layers that take evaluated values (text helpers, methods,
 * access, tests, filters) and below the statements (jinja_exec.c), which it reaches only through
 * the context's call_macro hook: calling a macro or caller() runs its body, the one place where
 * an expression needs statements (see struct jctx in jinja_impl.h).
 *
 * Limits (tl_jinja_limits): every call is a step, expression nesting is bounded. Any error
 * longjmps to tl_jinja_render, which frees the render's arena.
 *
 * Thread model: one render context per render; the template is only read.
 */
#include "chat/jinja_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_EVAL_NESTING 2000

static struct jv lookup(struct jctx *c, const char *name)
{
    for (struct jframe *f = c->frame; f; f = f->parent)
        for (int i = f->n - 1; i >= 0; i--)
            if (!strcmp(f->names[i], name)) return f->vals[i];
    struct jv g = tl__jglobal(name);
    if (g.kind != JV_UNDEF) return g;
    return tl__jv_undef(name);
}

// ---- operators

static bool contains(struct jctx *c, struct jv hay, struct jv needle)
{
    switch (hay.kind) {
    case JV_UNDEF:
        return false;
    case JV_STR:
        if (needle.kind != JV_STR)
            tl__jfail(c, "'in <string>' requires string as left operand, not %s",
                      tl__jv_type_name(needle));
        return needle.s->len == 0 ||
               memmem(hay.s->p, hay.s->len, needle.s->p, needle.s->len) != NULL;
    case JV_LIST:
        for (int64_t i = 0; i < hay.l->n; i++)
            if (tl__jv_equal(hay.l->v[i], needle)) return true;
        return false;
    case JV_MAP:
    case JV_NS: {
        struct jv v;
        return tl__jv_map_getv(hay, needle, &v);
    }
    default:
        tl__jfail(c, "argument of type '%s' is not iterable", tl__jv_type_name(hay));
    }
}

static struct jv repeat(struct jctx *c, struct jv seq, int64_t times)
{
    if (times < 0) times = 0;
    if (seq.kind == JV_STR) {
        if (seq.s->len && (size_t)times > c->lim.max_output_bytes / seq.s->len)
            tl__jfail(c, "string repetition too large");
        struct jbuf b = {.arena = &c->arena};
        for (int64_t i = 0; i < times; i++)
            tl__jbuf_add(&b, seq.s->p, seq.s->len);
        return tl__jbuf_value(&b);
    }
    if (seq.l->n && times > c->lim.max_steps / seq.l->n) tl__jfail(c, "list repetition too large");
    struct jv out = tl__jv_list(&c->arena, seq.l->n * times);
    for (int64_t i = 0; i < times; i++)
        for (int64_t k = 0; k < seq.l->n; k++)
            tl__jv_list_push(&c->arena, out, seq.l->v[k]);
    return out;
}

static _Noreturn void bad_operands(struct jctx *c, const char *op, struct jv a, struct jv b)
{
    if (a.kind == JV_UNDEF) tl__jfail_undefined(c, a, op);
    if (b.kind == JV_UNDEF) tl__jfail_undefined(c, b, op);
    tl__jfail(c, "unsupported operand type(s) for %s: '%s' and '%s'", op, tl__jv_type_name(a),
              tl__jv_type_name(b));
}

static struct jv arith(struct jctx *c, enum jop op, struct jv a, struct jv b)
{
    static const char *const sym[] = {"", "+", "-", "*", "/", "//", "%", "**"};
    bool nums = tl__jv_is_num(a) && tl__jv_is_num(b);
    bool ints = nums && a.kind != JV_FLOAT && b.kind != JV_FLOAT;
    int64_t x = a.kind == JV_INT ? a.i : a.kind == JV_BOOL ? a.b : 0;
    int64_t y = b.kind == JV_INT ? b.i : b.kind == JV_BOOL ? b.b : 0, r;
    double fx = tl__jv_as_double(a), fy = tl__jv_as_double(b);
    switch (op) {
    case JOP_ADD:
        if (ints) {
            if (__builtin_add_overflow(x, y, &r)) tl__jfail(c, "integer overflow");
            return tl__jv_int(r);
        }
        if (nums) return tl__jv_float(fx + fy);
        if (a.kind == JV_STR && b.kind == JV_STR) {
            // Markup + str escapes the plain side (Markup.__add__ / __radd__).
            bool markup = (a.flags | b.flags) & JVF_MARKUP;
            if (markup) {
                a = tl__jescape(c, a);
                b = tl__jescape(c, b);
            }
            struct jbuf buf = {.arena = &c->arena};
            tl__jbuf_add(&buf, a.s->p, a.s->len);
            tl__jbuf_add(&buf, b.s->p, b.s->len);
            struct jv joined = tl__jbuf_value(&buf);
            joined.flags = markup ? JVF_MARKUP : 0;
            return joined;
        }
        if (a.kind == JV_LIST && b.kind == JV_LIST && a.l->is_tuple == b.l->is_tuple) {
            struct jv out = tl__jv_list(&c->arena, a.l->n + b.l->n);
            out.l->is_tuple = a.l->is_tuple;
            for (int64_t i = 0; i < a.l->n; i++)
                tl__jv_list_push(&c->arena, out, a.l->v[i]);
            for (int64_t i = 0; i < b.l->n; i++)
                tl__jv_list_push(&c->arena, out, b.l->v[i]);
            return out;
        }
        break;
    case JOP_SUB:
        if (ints) {
            if (__builtin_sub_overflow(x, y, &r)) tl__jfail(c, "integer overflow");
            return tl__jv_int(r);
        }
        if (nums) return tl__jv_float(fx - fy);
        break;
    case JOP_MUL:
        if (ints) {
            if (__builtin_mul_overflow(x, y, &r)) tl__jfail(c, "integer overflow");
            return tl__jv_int(r);
        }
        if (nums) return tl__jv_float(fx * fy);
        if ((a.kind == JV_STR || a.kind == JV_LIST) && (b.kind == JV_INT || b.kind == JV_BOOL))
            return repeat(c, a, y);
        if ((b.kind == JV_STR || b.kind == JV_LIST) && (a.kind == JV_INT || a.kind == JV_BOOL))
            return repeat(c, b, x);
        break;
    case JOP_DIV:
        if (nums) {
            if (fy == 0) tl__jfail(c, "division by zero");
            return tl__jv_float(fx / fy);
        }
        break;
    case JOP_FLOORDIV:
    case JOP_MOD:
        if (op == JOP_MOD && a.kind == JV_STR) return tl__jstr_percent(c, a, b);
        if (nums) {
            if (fy == 0) tl__jfail(c, "%s by zero", op == JOP_MOD ? "modulo" : "division");
            if (ints) {
                if (x == INT64_MIN && y == -1) tl__jfail(c, "integer overflow");
                int64_t q = x / y, m = x % y;
                if (m && ((m < 0) != (y < 0))) {
                    q--;
                    m += y;
                }
                return tl__jv_int(op == JOP_MOD ? m : q);
            }
            double q = floor(fx / fy), m = fx - q * fy;
            return tl__jv_float(op == JOP_MOD ? m : q);
        }
        break;
    case JOP_POW:
        if (ints && y >= 0) {
            int64_t acc = 1;
            for (int64_t i = 0; i < y; i++) {
                if (__builtin_mul_overflow(acc, x, &acc)) tl__jfail(c, "integer overflow");
                if (acc == 0 || acc == 1) break;
            }
            return tl__jv_int(acc);
        }
        if (nums) return tl__jv_float(pow(fx, fy));
        break;
    default:
        break;
    }
    bad_operands(c, sym[op], a, b);
}

static struct jv binop(struct jctx *c, const struct jnode *n)
{
    struct jv a = tl__jeval(c, n->a);
    struct jv b = tl__jeval(c, n->b);
    int r;
    switch (n->op) {
    case JOP_CONCAT: {
        struct jbuf buf = {.arena = &c->arena};
        tl__jv_write_str(&buf, a);
        tl__jv_write_str(&buf, b);
        return tl__jbuf_value(&buf);
    }
    case JOP_EQ:
        return tl__jv_bool(tl__jv_equal(a, b));
    case JOP_NE:
        return tl__jv_bool(!tl__jv_equal(a, b));
    case JOP_LT:
    case JOP_LE:
    case JOP_GT:
    case JOP_GE: {
        static const char *const sym[] = {"<", "<=", ">", ">="};
        if (!tl__jv_compare(a, b, &r)) {
            if (a.kind == JV_UNDEF) tl__jfail_undefined(c, a, "comparison");
            if (b.kind == JV_UNDEF) tl__jfail_undefined(c, b, "comparison");
            tl__jfail(c, "'%s' not supported between instances of '%s' and '%s'",
                      sym[n->op - JOP_LT], tl__jv_type_name(a), tl__jv_type_name(b));
        }
        bool v = n->op == JOP_LT   ? r < 0
                 : n->op == JOP_LE ? r <= 0
                 : n->op == JOP_GT ? r > 0
                                   : r >= 0;
        return tl__jv_bool(v);
    }
    case JOP_IN:
        return tl__jv_bool(contains(c, b, a));
    case JOP_NOTIN:
        return tl__jv_bool(!contains(c, b, a));
    default:
        return arith(c, (enum jop)n->op, a, b);
    }
}

// ---- expressions

struct jcall tl__jeval_args(struct jctx *c, const struct jargs *a)
{
    struct jcall call = {.n_pos = a->n_pos, .n_kw = a->n_kw, .kw = a->kw};
    if (a->n_pos) {
        struct jv *pos = tl__jarena_alloc(&c->arena, (size_t)a->n_pos * sizeof(*pos));
        for (int i = 0; i < a->n_pos; i++)
            pos[i] = tl__jeval(c, a->pos[i]);
        call.pos = pos;
    }
    if (a->n_kw) {
        struct jv *kwv = tl__jarena_alloc(&c->arena, (size_t)a->n_kw * sizeof(*kwv));
        for (int i = 0; i < a->n_kw; i++)
            kwv[i] = tl__jeval(c, a->kwv[i]);
        call.kwv = kwv;
    }
    return call;
}

struct jv tl__jcall_value(struct jctx *c, struct jv fn, int n_pos, const struct jv *pos, int n_kw,
                          const char *const *kw, const struct jv *kwv)
{
    if (fn.kind == JV_UNDEF) tl__jfail_undefined(c, fn, "call");
    if (fn.kind != JV_FUNC) tl__jfail(c, "'%s' object is not callable", tl__jv_type_name(fn));
    struct jcall call = {.n_pos = n_pos, .pos = pos, .n_kw = n_kw, .kw = kw, .kwv = kwv};
    tl__jstep(c);
    if (fn.fn->kind == JF_MACRO || fn.fn->kind == JF_CALLER)
        return c->call_macro(c, fn.fn, &call); // the one seam up to the statements (jctx)
    return tl__jcall_builtin(c, fn.fn, &call);
}

static struct jv eval_seq(struct jctx *c, const struct jnode *n)
{
    struct jv out = tl__jv_list(&c->arena, n->n_items);
    out.l->is_tuple = n->kind == JN_TUPLE;
    for (int i = 0; i < n->n_items; i++)
        tl__jv_list_push(&c->arena, out, tl__jeval(c, n->items[i]));
    return out;
}

static struct jv eval_dict(struct jctx *c, const struct jnode *n)
{
    struct jv out = tl__jv_map(&c->arena, n->n_items);
    for (int i = 0; i < n->n_items; i++) {
        struct jv k = tl__jeval(c, n->items[i]);
        if (k.kind == JV_LIST && !k.l->is_tuple) tl__jfail(c, "unhashable type: 'list'");
        if (k.kind == JV_MAP || k.kind == JV_NS) tl__jfail(c, "unhashable type: 'dict'");
        tl__jv_map_set(&c->arena, out, k, tl__jeval(c, n->args.pos[i]));
    }
    return out;
}

static struct jv eval_unary(struct jctx *c, const struct jnode *n)
{
    struct jv v = tl__jeval(c, n->a);
    if (v.kind == JV_FLOAT) return tl__jv_float(n->kind == JN_NEG ? -v.f : v.f);
    if (v.kind == JV_INT || v.kind == JV_BOOL) {
        int64_t i = v.kind == JV_INT ? v.i : v.b;
        if (n->kind == JN_NEG && i == INT64_MIN) tl__jfail(c, "integer overflow");
        return tl__jv_int(n->kind == JN_NEG ? -i : i);
    }
    if (v.kind == JV_UNDEF) tl__jfail_undefined(c, v, "unary operator");
    tl__jfail(c, "bad operand type for unary %s: '%s'", n->kind == JN_NEG ? "-" : "+",
              tl__jv_type_name(v));
}

struct jv tl__jeval(struct jctx *c, const struct jnode *n)
{
    if (++c->depth > MAX_EVAL_NESTING || c->depth > c->lim.max_depth * 16)
        tl__jfail(c, "template nesting too deep");
    const struct jnode *saved = c->cur;
    c->cur = n;
    struct jv v;
    switch (n->kind) {
    case JN_CONST:
        v = n->value;
        break;
    case JN_NAME:
        v = lookup(c, n->name);
        break;
    case JN_LIST:
    case JN_TUPLE:
        v = eval_seq(c, n);
        break;
    case JN_DICT:
        v = eval_dict(c, n);
        break;
    case JN_GETATTR:
        v = tl__jgetattr(c, tl__jeval(c, n->a), n->name);
        break;
    case JN_GETITEM: {
        struct jv obj = tl__jeval(c, n->a);
        v = tl__jgetitem(c, obj, tl__jeval(c, n->b));
        break;
    }
    case JN_SLICE: {
        struct jv obj = tl__jeval(c, n->a);
        struct jv parts[3];
        const struct jnode *pn[3] = {n->b, n->c, n->d};
        for (int i = 0; i < 3; i++)
            parts[i] = pn[i] ? tl__jeval(c, pn[i]) : tl__jv_none();
        v = tl__jslice(c, obj, parts[0], parts[1], parts[2]);
        break;
    }
    case JN_CALL: {
        struct jv fn = tl__jeval(c, n->a);
        struct jcall a = tl__jeval_args(c, &n->args);
        c->cur = n;
        v = tl__jcall_value(c, fn, a.n_pos, a.pos, a.n_kw, a.kw, a.kwv);
        break;
    }
    case JN_FILTER: {
        struct jv in = tl__jeval(c, n->a);
        struct jcall a = tl__jeval_args(c, &n->args);
        c->cur = n;
        v = tl__jfilter(c, n->name, in, &a);
        break;
    }
    case JN_TEST: {
        struct jv in = tl__jeval(c, n->a);
        struct jcall a = tl__jeval_args(c, &n->args);
        c->cur = n;
        v = tl__jv_bool(tl__jtest(c, n->name, in, &a) != n->flag);
        break;
    }
    case JN_NEG:
    case JN_POS:
        v = eval_unary(c, n);
        break;
    case JN_NOT:
        v = tl__jv_bool(!tl__jv_truthy(tl__jeval(c, n->a)));
        break;
    case JN_BINOP:
        v = binop(c, n);
        break;
    case JN_AND:
        v = tl__jeval(c, n->a);
        if (tl__jv_truthy(v)) v = tl__jeval(c, n->b);
        break;
    case JN_OR:
        v = tl__jeval(c, n->a);
        if (!tl__jv_truthy(v)) v = tl__jeval(c, n->b);
        break;
    case JN_COND:
        if (tl__jv_truthy(tl__jeval(c, n->b)))
            v = tl__jeval(c, n->a);
        else
            v = n->c ? tl__jeval(c, n->c) : tl__jv_undef(NULL);
        break;
    default:
        tl__jfail(c, "internal error: statement node %d in an expression", n->kind);
    }
    c->cur = saved;
    c->depth--;
    return v;
}
