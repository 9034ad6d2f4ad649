/*
 * Jinja statements and the render entry point: text and {{ }} output, if, for (targets, loop
 * filter, else, the loop object, break/continue), set (names, unpacking, namespace attributes,
 * block set), macros and call blocks, filter blocks; plus the JSON -> value import of the render
 * variables and tl_jinja_render itself. This is the evaluator's top file: it calls the
 * expression evaluator (jinja_eval.c) and the filters directly, and the evaluator reaches the
 * macros here only through the context's call_macro hook, which tl_jinja_render sets.
 *
 * The loop object is a mapping built per iteration (index, index0, revindex, revindex0, first,
 * last, length, previtem, nextitem, depth, depth0, cycle). A for loop gets one frame for all its
 * iterations; a macro call gets a frame whose parent is the frame the macro was defined in.
 *
 * Ownership: all memory is the render's arena (see jinja_impl.h); the result is copied to a
 * malloc'd string. Thread model: one context per render; templates are shared read-only.
 */
#include "chat/jinja_impl.h"

#include "core/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tl_jinja_limits tl_jinja_default_limits(void)
{
    return (struct tl_jinja_limits){
        .max_output_bytes = (size_t)16 << 20,
        .max_memory_bytes = (size_t)256 << 20,
        .max_steps = 10 * 1000 * 1000,
        .max_depth = 200,
        .max_time_ms = 2000,
    };
}

// ---- output

static void emit(struct jctx *c, const char *s, size_t n)
{
    if (!n) return;
    c->out_total += n;
    if (c->out_total > c->lim.max_output_bytes)
        tl__jfail(c, "template output exceeds %zu bytes", c->lim.max_output_bytes);
    if (c->out_len + n > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap * 2 : 1024;
        while (cap < c->out_len + n)
            cap *= 2;
        char *p = tl__jarena_alloc_raw(&c->arena, cap);
        if (c->out_len) memcpy(p, c->out, c->out_len);
        c->out = p;
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, s, n);
    c->out_len += n;
}

static void emit_value(struct jctx *c, struct jv v)
{
    if (v.kind == JV_STR) {
        emit(c, v.s->p, v.s->len);
        return;
    }
    struct jbuf b = {.arena = &c->arena};
    tl__jv_write_str(&b, v);
    emit(c, b.p, b.len);
}

struct saved_out {
    char *out;
    size_t len, cap;
};

static struct saved_out capture_begin(struct jctx *c)
{
    struct saved_out s = {c->out, c->out_len, c->out_cap};
    c->out = NULL;
    c->out_len = c->out_cap = 0;
    return s;
}

static struct jv capture_end(struct jctx *c, struct saved_out s)
{
    struct jv v = tl__jv_str(&c->arena, c->out ? c->out : "", c->out_len);
    c->out = s.out;
    c->out_len = s.len;
    c->out_cap = s.cap;
    return v;
}

// ---- scopes

static struct jframe *frame_new(struct jctx *c, struct jframe *parent)
{
    struct jframe *f = tl__jarena_alloc(&c->arena, sizeof(*f));
    f->parent = parent;
    return f;
}

void tl__jframe_set(struct jctx *c, struct jframe *f, const char *name, struct jv v)
{
    for (int i = 0; i < f->n; i++) {
        if (!strcmp(f->names[i], name)) {
            f->vals[i] = v;
            return;
        }
    }
    if (f->n == f->cap) {
        int cap = f->cap ? f->cap * 2 : 8;
        const char **names = tl__jarena_alloc(&c->arena, (size_t)cap * sizeof(*names));
        struct jv *vals = tl__jarena_alloc(&c->arena, (size_t)cap * sizeof(*vals));
        if (f->n) {
            memcpy(names, f->names, (size_t)f->n * sizeof(*names));
            memcpy(vals, f->vals, (size_t)f->n * sizeof(*vals));
        }
        f->names = names;
        f->vals = vals;
        f->cap = cap;
    }
    f->names[f->n] = name;
    f->vals[f->n++] = v;
}

// Binds names to v (one name) or to v's items (unpacking).
static void bind_targets(struct jctx *c, struct jframe *f, const char *const *names, int n,
                         struct jv v)
{
    if (n == 1) {
        tl__jframe_set(c, f, names[0], v);
        return;
    }
    struct jv items = tl__jiterable_to_list(c, v);
    if (items.l->n != n)
        tl__jfail(c, "%s values to unpack (expected %d, got %lld)",
                  items.l->n > n ? "too many" : "not enough", n, (long long)items.l->n);
    for (int i = 0; i < n; i++)
        tl__jframe_set(c, f, names[i], items.l->v[i]);
}

// ---- statements

static void exec_body(struct jctx *c, const struct jnode *body);

static struct jv apply_chain(struct jctx *c, const struct jnode *f, struct jv input)
{
    struct jv in = f->a ? apply_chain(c, f->a, input) : input;
    struct jcall a = tl__jeval_args(c, &f->args);
    c->cur = f;
    return tl__jfilter(c, f->name, in, &a);
}

static void set_loop_var(struct jctx *c, struct jv loop, const char *key, struct jv v)
{
    tl__jv_map_set(&c->arena, loop, tl__jv_cstr(&c->arena, key), v);
}

static void exec_for(struct jctx *c, const struct jnode *n)
{
    struct jv items = tl__jiterable_to_list(c, tl__jeval(c, n->a));
    struct jframe *outer = c->frame;
    struct jframe *f = frame_new(c, outer);
    c->frame = f;
    if (n->d) { // loop filter: the loop sees only the items that pass
        struct jv kept = tl__jv_list(&c->arena, items.l->n);
        for (int64_t i = 0; i < items.l->n; i++) {
            tl__jstep(c);
            bind_targets(c, f, n->names, n->n_names, items.l->v[i]);
            if (tl__jv_truthy(tl__jeval(c, n->d))) tl__jv_list_push(&c->arena, kept, items.l->v[i]);
        }
        items = kept;
    }
    int64_t len = items.l->n;
    // One loop object per loop, updated in place each iteration (as Jinja2's LoopContext);
    // previtem / nextitem hold Undefined where there is none.
    struct jv loop = tl__jv_map(&c->arena, 12);
    struct jfunc *cycle = tl__jarena_alloc(&c->arena, sizeof(*cycle));
    cycle->kind = JF_METHOD;
    cycle->name = "cycle";
    static const char *const keys[] = {"index",  "index0",   "revindex", "revindex0",
                                       "first",  "last",     "length",   "depth",
                                       "depth0", "previtem", "nextitem", "cycle"};
    for (int k = 0; k < 12; k++)
        set_loop_var(c, loop, keys[k], tl__jv_none());
    struct jv *lv = loop.m->v;
    tl__jframe_set(c, f, "loop", loop);
    for (int64_t i = 0; i < len; i++) {
        tl__jstep(c);
        lv[0] = tl__jv_int(i + 1);
        lv[1] = tl__jv_int(i);
        lv[2] = tl__jv_int(len - i);
        lv[3] = tl__jv_int(len - i - 1);
        lv[4] = tl__jv_bool(i == 0);
        lv[5] = tl__jv_bool(i == len - 1);
        lv[6] = tl__jv_int(len);
        lv[7] = tl__jv_int(1);
        lv[8] = tl__jv_int(0);
        lv[9] = i > 0 ? items.l->v[i - 1] : tl__jv_undef("previtem");
        lv[10] = i + 1 < len ? items.l->v[i + 1] : tl__jv_undef("nextitem");
        cycle->self = tl__jv_int(i);
        lv[11] = (struct jv){.kind = JV_FUNC, .fn = cycle};
        tl__jframe_set(c, f, "loop", loop);
        bind_targets(c, f, n->names, n->n_names, items.l->v[i]);
        exec_body(c, n->b);
        int ctl = c->loop_ctl;
        c->loop_ctl = 0;
        if (ctl == 1) break;
    }
    c->frame = outer;
    if (len == 0 && n->c) exec_body(c, n->c);
}

static void assign(struct jctx *c, const struct jnode *n, struct jv v)
{
    if (n->a) { // ns.attr
        struct jv ns = tl__jeval(c, n->a);
        if (ns.kind != JV_NS)
            tl__jfail(c, "cannot assign attribute '%s' on a %s (only on a namespace)", n->name,
                      tl__jv_type_name(ns));
        tl__jv_map_set(&c->arena, ns, tl__jv_cstr(&c->arena, n->name), v);
        return;
    }
    bind_targets(c, c->frame, n->names, n->n_names, v);
}

static void exec_call_block(struct jctx *c, const struct jnode *n)
{
    struct jfunc *caller = tl__jarena_alloc(&c->arena, sizeof(*caller));
    caller->kind = JF_CALLER;
    caller->name = "caller";
    caller->macro = n;
    caller->scope = c->frame;
    struct jv fn = tl__jeval(c, n->a->a);
    struct jcall a = tl__jeval_args(c, &n->a->args);
    c->cur = n;
    c->pending_caller = (struct jv){.kind = JV_FUNC, .fn = caller};
    struct jv r = tl__jcall_value(c, fn, a.n_pos, a.pos, a.n_kw, a.kw, a.kwv);
    c->pending_caller = tl__jv_undef(NULL);
    emit_value(c, r);
}

static void exec_node(struct jctx *c, const struct jnode *n)
{
    c->cur = n;
    switch (n->kind) {
    case JN_TEXT:
        emit(c, n->value.s->p, n->value.s->len);
        return;
    case JN_OUTPUT:
        emit_value(c, tl__jeval(c, n->a));
        return;
    case JN_BODY:
        exec_body(c, n);
        return;
    case JN_IF:
        if (tl__jv_truthy(tl__jeval(c, n->a)))
            exec_body(c, n->b);
        else if (n->c)
            exec_node(c, n->c);
        return;
    case JN_FOR:
        exec_for(c, n);
        return;
    case JN_SET:
        assign(c, n, tl__jeval(c, n->b));
        return;
    case JN_SETBLK: {
        struct saved_out s = capture_begin(c);
        exec_body(c, n->b);
        struct jv v = capture_end(c, s);
        if (n->d) v = apply_chain(c, n->d, v);
        assign(c, n, v);
        return;
    }
    case JN_FILTBLK: {
        struct saved_out s = capture_begin(c);
        exec_body(c, n->b);
        struct jv v = capture_end(c, s);
        emit_value(c, apply_chain(c, n->a, v));
        return;
    }
    case JN_MACRO: {
        struct jfunc *fn = tl__jarena_alloc(&c->arena, sizeof(*fn));
        fn->kind = JF_MACRO;
        fn->name = n->name;
        fn->macro = n;
        fn->scope = c->frame;
        tl__jframe_set(c, c->frame, n->name, (struct jv){.kind = JV_FUNC, .fn = fn});
        return;
    }
    case JN_CALLBLK:
        exec_call_block(c, n);
        return;
    case JN_BREAK:
        c->loop_ctl = 1;
        return;
    case JN_CONTINUE:
        c->loop_ctl = 2;
        return;
    default:
        tl__jfail(c, "internal error: expression node %d as a statement", n->kind);
    }
}

static void exec_body(struct jctx *c, const struct jnode *body)
{
    for (int i = 0; i < body->n_items && !c->loop_ctl; i++)
        exec_node(c, body->items[i]);
}

// ---- macros

// Runs a macro (or a call block's caller()) with evaluated arguments: its own frame over the one
// it was defined in, varargs / kwargs, its output captured as the call's value. The render
// installs it as the context's call_macro, through which the evaluator calls it.
static struct jv call_macro(struct jctx *c, const struct jfunc *fn, const struct jcall *a)
{
    struct jv caller = c->pending_caller;
    c->pending_caller = tl__jv_undef(NULL);
    if (++c->macro_depth > c->lim.max_depth)
        tl__jfail(c, "macro calls nested deeper than %d", c->lim.max_depth);
    const struct jnode *m = fn->macro;
    struct jframe *outer = c->frame;
    struct jframe *f = frame_new(c, fn->scope);
    c->frame = f;
    for (int i = 0; i < m->n_names; i++) {
        struct jv v = tl__jv_undef(m->names[i]);
        bool given = false;
        if (i < a->n_pos) {
            v = a->pos[i];
            given = true;
        }
        for (int k = 0; k < a->n_kw; k++) {
            if (!strcmp(a->kw[k], m->names[i])) {
                if (given)
                    tl__jfail(c, "macro '%s' got multiple values for argument '%s'", fn->name,
                              m->names[i]);
                v = a->kwv[k];
                given = true;
            }
        }
        if (!given && m->items[i]) v = tl__jeval(c, m->items[i]);
        tl__jframe_set(c, f, m->names[i], v);
    }
    struct jv varargs = tl__jv_list(&c->arena, 0);
    varargs.l->is_tuple = true;
    for (int i = m->n_names; i < a->n_pos; i++)
        tl__jv_list_push(&c->arena, varargs, a->pos[i]);
    tl__jframe_set(c, f, "varargs", varargs);
    struct jv kwargs = tl__jv_map(&c->arena, 0);
    for (int k = 0; k < a->n_kw; k++) {
        bool known = false;
        for (int i = 0; i < m->n_names; i++)
            known = known || !strcmp(a->kw[k], m->names[i]);
        if (!known) tl__jv_map_set(&c->arena, kwargs, tl__jv_cstr(&c->arena, a->kw[k]), a->kwv[k]);
    }
    tl__jframe_set(c, f, "kwargs", kwargs);
    if (caller.kind == JV_FUNC) tl__jframe_set(c, f, "caller", caller);
    const struct jnode *saved_cur = c->cur;
    int saved_ctl = c->loop_ctl;
    c->loop_ctl = 0;
    struct saved_out s = capture_begin(c);
    exec_body(c, m->b);
    struct jv out = capture_end(c, s);
    c->loop_ctl = saved_ctl;
    c->cur = saved_cur;
    c->frame = outer;
    c->macro_depth--;
    return out;
}

// ---- JSON import

struct jv tl__jv_from_json(struct jarena *a, const json_t *j, int depth)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        struct jv m = tl__jv_map(a, (int64_t)json_object_size(j));
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)j, key, v)
        {
            tl__jv_map_set(a, m, tl__jv_cstr(a, key), tl__jv_from_json(a, v, depth + 1));
        }
        return m;
    }
    case JSON_ARRAY: {
        struct jv l = tl__jv_list(a, (int64_t)json_array_size(j));
        for (size_t i = 0; i < json_array_size(j); i++)
            tl__jv_list_push(a, l, tl__jv_from_json(a, json_array_get(j, i), depth + 1));
        return l;
    }
    case JSON_STRING:
        return tl__jv_str(a, json_string_value(j), json_string_length(j));
    case JSON_INTEGER:
        return tl__jv_int((int64_t)json_integer_value(j));
    case JSON_REAL:
        return tl__jv_float(json_real_value(j));
    case JSON_TRUE:
        return tl__jv_bool(true);
    case JSON_FALSE:
        return tl__jv_bool(false);
    default:
        return tl__jv_none();
    }
}

// ---- entry point

static void import_vars(struct jctx *c, const json_t *vars)
{
    if (!vars || !json_is_object(vars)) return;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)vars, key, v)
    {
        const char *name = tl__jv_cstr(&c->arena, key).s->p;
        tl__jframe_set(c, c->root, name, tl__jv_from_json(&c->arena, v, 0));
    }
}

tl_status tl_jinja_render(const tl_jinja_template *t, const json_t *vars, const json_t *extra,
                          const struct tl_jinja_limits *limits, char **out, size_t *out_len,
                          enum tl_jinja_error_kind *kind, char *err, size_t err_size)
{
    *out = NULL;
    *out_len = 0;
    *kind = TL_JINJA_OK;
    if (err_size) err[0] = 0;
    struct jctx *volatile c = calloc(1, sizeof(*c));
    if (!c) {
        *kind = TL_JINJA_ERROR;
        if (err_size) snprintf(err, err_size, "out of memory");
        return TL_ERR_NOMEM;
    }
    c->lim = limits ? *limits : tl_jinja_default_limits();
    tl__jarena_init(&c->arena, c->lim.max_memory_bytes);
    c->arena.on_fail = &c->fail;
    c->arena.err = err;
    c->arena.err_size = err_size;
    c->err = err;
    c->err_size = err_size;
    if (c->lim.max_time_ms > 0) c->deadline_us = tl_time_us() + c->lim.max_time_ms * 1000;
    if (setjmp(c->fail)) {
        *kind = c->raised ? TL_JINJA_RAISED : TL_JINJA_ERROR;
        if (!c->raised && c->err_line && err_size) {
            char *msg = strdup(err);
            if (msg) {
                snprintf(err, err_size, "line %d, column %d: %s", c->err_line, c->err_col, msg);
                free(msg);
            }
        }
        tl__jarena_free(&c->arena);
        free(c);
        return TL_ERR_INVALID_ARG;
    }
    c->root = frame_new(c, NULL);
    c->frame = c->root;
    c->pending_caller = tl__jv_undef(NULL);
    c->call_macro = call_macro;
    import_vars(c, vars);
    import_vars(c, extra);
    exec_body(c, t->root);
    char *s = malloc(c->out_len + 1);
    if (!s) tl__jfail(c, "out of memory");
    if (c->out_len) memcpy(s, c->out, c->out_len);
    s[c->out_len] = 0;
    *out = s;
    *out_len = c->out_len;
    tl__jarena_free(&c->arena);
    free(c);
    return TL_OK;
}
