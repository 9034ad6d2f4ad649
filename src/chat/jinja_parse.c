/*
 * The Jinja statement parser: tokens (jinja_lex.c) -> AST (jinja_impl.h); expressions are
 * parsed by jinja_parse_expr.c. Statements: if/elif/else, for (targets, loop filter,
 * else), set (names, tuple unpacking, ns.attr, block set), macro, call, filter, break,
 * continue, and generation (transformers' assistant-mask block, rendered as its body).
 *
 * The entry point tl_jinja_parse owns the arena; any syntax error longjmps back to it with
 * "line L, column C: ..." (nesting is bounded so a hostile template cannot exhaust the stack).
 * Not thread-safe per parse; the resulting template is read-only.
 */
#include "chat/jinja_impl.h"

#include <stdlib.h>
#include <string.h>

// ---- statements

// Statements until a {% word %} in `ends` (NULL-terminated); consumes "{%" and the word and
// returns the word (the caller parses the rest of that tag). At top level (ends NULL) runs to
// the end of the template.
static struct jnode *parse_body(struct jparser *p, const char *const *ends, const char **hit);

static bool word_in(const char *w, const char *const *list)
{
    for (; list && *list; list++)
        if (!strcmp(w, *list)) return true;
    return false;
}

// Assignment targets: name, name.attr, or a tuple of names (optionally parenthesized).
static void parse_targets(struct jparser *p, struct jnode *n, bool allow_attr)
{
    struct vec names = {0};
    bool paren = tl__jp_is_op(tl__jp_peek(p), "(");
    if (paren) tl__jp_next(p);
    for (;;) {
        const char *name = tl__jp_expect_name(p);
        if (allow_attr && !paren && names.n == 0 && tl__jp_is_op(tl__jp_peek(p), ".")) {
            tl__jp_next(p);
            n->a = tl__jp_node(p, JN_NAME, tl__jp_peek(p));
            n->a->name = name;
            n->name = tl__jp_expect_name(p);
            return;
        }
        tl__jp_vec_push(p, &names, (void *)name);
        if (!tl__jp_is_op(tl__jp_peek(p), ",")) break;
        tl__jp_next(p);
    }
    if (paren) tl__jp_expect_op(p, ")");
    n->names = (const char **)names.v;
    n->n_names = names.n;
}

// Parameter list of a macro or call block: (a, b=default, ...).
static void parse_params(struct jparser *p, struct jnode *n)
{
    struct vec names = {0}, defaults = {0};
    tl__jp_expect_op(p, "(");
    while (!tl__jp_is_op(tl__jp_peek(p), ")")) {
        if (names.n) tl__jp_expect_op(p, ",");
        if (tl__jp_is_op(tl__jp_peek(p), ")")) break;
        tl__jp_vec_push(p, &names, (void *)tl__jp_expect_name(p));
        struct jnode *def = NULL;
        if (tl__jp_is_op(tl__jp_peek(p), "=")) {
            tl__jp_next(p);
            def = tl__jp_parse_expr(p, true);
        }
        tl__jp_vec_push(p, &defaults, def);
    }
    tl__jp_next(p);
    n->names = (const char **)names.v;
    n->n_names = names.n;
    n->items = (struct jnode **)defaults.v;
    n->n_items = defaults.n;
}

// A filter chain for {% filter %} / {% set x | f %}: f(args) | g ... applied to a hole (NULL).
static struct jnode *parse_filter_chain(struct jparser *p)
{
    struct jnode *f = tl__jp_node(p, JN_FILTER, tl__jp_peek(p));
    f->name = tl__jp_expect_name(p);
    if (tl__jp_is_op(tl__jp_peek(p), "(")) tl__jp_parse_call_args(p, &f->args);
    while (tl__jp_is_op(tl__jp_peek(p), "|"))
        f = tl__jp_parse_filter(p, f);
    return f;
}

static struct jnode *parse_if(struct jparser *p, const struct jtok *at)
{
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    struct jnode *n = tl__jp_node(p, JN_IF, at);
    n->a = tl__jp_parse_tuple_expr(p, true);
    tl__jp_expect_block_end(p);
    const char *hit;
    n->b = parse_body(p, ends, &hit);
    if (!strcmp(hit, "elif")) {
        n->c = parse_if(p, &p->toks[p->pos - 1]);
        return n;
    }
    if (!strcmp(hit, "else")) {
        static const char *const end_only[] = {"endif", NULL};
        tl__jp_expect_block_end(p);
        n->c = parse_body(p, end_only, &hit);
    }
    tl__jp_expect_block_end(p);
    return n;
}

static struct jnode *parse_for(struct jparser *p, const struct jtok *at)
{
    static const char *const ends[] = {"else", "endfor", NULL};
    struct jnode *n = tl__jp_node(p, JN_FOR, at);
    parse_targets(p, n, false);
    if (!tl__jp_is_name(tl__jp_peek(p), "in")) tl__jp_fail_at(p, tl__jp_peek(p), "'in'");
    tl__jp_next(p);
    n->a = tl__jp_parse_tuple_expr(p, false);
    if (tl__jp_is_name(tl__jp_peek(p), "if")) {
        tl__jp_next(p);
        n->d = tl__jp_parse_expr(p, true);
    }
    if (tl__jp_is_name(tl__jp_peek(p), "recursive"))
        tl__jparse_fail(p, tl__jp_peek(p)->line, tl__jp_peek(p)->col,
                        "recursive for loops are not supported");
    tl__jp_expect_block_end(p);
    const char *hit;
    n->b = parse_body(p, ends, &hit);
    if (!strcmp(hit, "else")) {
        static const char *const end_only[] = {"endfor", NULL};
        tl__jp_expect_block_end(p);
        n->c = parse_body(p, end_only, &hit);
    }
    tl__jp_expect_block_end(p);
    return n;
}

static struct jnode *parse_set(struct jparser *p, const struct jtok *at)
{
    struct jnode *n = tl__jp_node(p, JN_SET, at);
    parse_targets(p, n, true);
    if (tl__jp_is_op(tl__jp_peek(p), "=")) {
        tl__jp_next(p);
        n->b = tl__jp_parse_tuple_expr(p, true);
        tl__jp_expect_block_end(p);
        return n;
    }
    n->kind = JN_SETBLK;
    if (n->n_names > 1) tl__jp_fail_at(p, tl__jp_peek(p), "'=' (a block set takes one name)");
    if (tl__jp_is_op(tl__jp_peek(p), "|")) {
        tl__jp_next(p);
        n->d = parse_filter_chain(p);
    }
    tl__jp_expect_block_end(p);
    static const char *const ends[] = {"endset", NULL};
    const char *hit;
    n->b = parse_body(p, ends, &hit);
    tl__jp_expect_block_end(p);
    return n;
}

static struct jnode *parse_macro(struct jparser *p, const struct jtok *at)
{
    struct jnode *n = tl__jp_node(p, JN_MACRO, at);
    n->name = tl__jp_expect_name(p);
    parse_params(p, n);
    tl__jp_expect_block_end(p);
    static const char *const ends[] = {"endmacro", NULL};
    const char *hit;
    n->b = parse_body(p, ends, &hit);
    if (tl__jp_peek(p)->kind == JT_NAME) tl__jp_next(p); // {% endmacro name %}
    tl__jp_expect_block_end(p);
    return n;
}

static struct jnode *parse_call_block(struct jparser *p, const struct jtok *at)
{
    struct jnode *n = tl__jp_node(p, JN_CALLBLK, at);
    if (tl__jp_is_op(tl__jp_peek(p), "(")) parse_params(p, n);
    n->a = tl__jp_parse_expr(p, true);
    if (n->a->kind != JN_CALL) tl__jparse_fail(p, at->line, at->col, "{%% call %%} needs a call");
    tl__jp_expect_block_end(p);
    static const char *const ends[] = {"endcall", NULL};
    const char *hit;
    n->b = parse_body(p, ends, &hit);
    tl__jp_expect_block_end(p);
    return n;
}

static struct jnode *parse_statement(struct jparser *p, const struct jtok *at, const char *word)
{
    if (!strcmp(word, "if")) return parse_if(p, at);
    if (!strcmp(word, "for")) return parse_for(p, at);
    if (!strcmp(word, "set")) return parse_set(p, at);
    if (!strcmp(word, "macro")) return parse_macro(p, at);
    if (!strcmp(word, "call")) return parse_call_block(p, at);
    if (!strcmp(word, "break") || !strcmp(word, "continue")) {
        struct jnode *n = tl__jp_node(p, word[0] == 'b' ? JN_BREAK : JN_CONTINUE, at);
        tl__jp_expect_block_end(p);
        return n;
    }
    if (!strcmp(word, "filter")) {
        struct jnode *n = tl__jp_node(p, JN_FILTBLK, at);
        n->a = parse_filter_chain(p);
        tl__jp_expect_block_end(p);
        static const char *const ends[] = {"endfilter", NULL};
        const char *hit;
        n->b = parse_body(p, ends, &hit);
        tl__jp_expect_block_end(p);
        return n;
    }
    if (!strcmp(word, "generation")) {
        tl__jp_expect_block_end(p);
        static const char *const ends[] = {"endgeneration", NULL};
        const char *hit;
        struct jnode *n = parse_body(p, ends, &hit);
        tl__jp_expect_block_end(p);
        return n;
    }
    tl__jparse_fail(p, at->line, at->col, "unknown tag '%s'", word);
}

static struct jnode *parse_body(struct jparser *p, const char *const *ends, const char **hit)
{
    struct jnode *body = tl__jp_node(p, JN_BODY, tl__jp_peek(p));
    struct vec items = {0};
    tl__jp_enter(p);
    for (;;) {
        const struct jtok *t = tl__jp_next(p);
        if (t->kind == JT_EOF) {
            if (ends) {
                int last = 0;
                while (ends[last + 1])
                    last++;
                tl__jparse_fail(p, t->line, t->col,
                                "unexpected end of template, expected {%% %s %%}", ends[last]);
            }
            break;
        }
        if (t->kind == JT_TEXT) {
            struct jnode *n = tl__jp_node(p, JN_TEXT, t);
            n->value = tl__jv_str(p->arena, t->s, t->len);
            tl__jp_vec_push(p, &items, n);
        } else if (t->kind == JT_VAR_BEGIN) {
            struct jnode *n = tl__jp_node(p, JN_OUTPUT, t);
            n->a = tl__jp_parse_tuple_expr(p, true);
            if (tl__jp_peek(p)->kind != JT_VAR_END) tl__jp_fail_at(p, tl__jp_peek(p), "'}}'");
            tl__jp_next(p);
            tl__jp_vec_push(p, &items, n);
        } else if (t->kind == JT_BLOCK_BEGIN) {
            const struct jtok *w = tl__jp_peek(p);
            if (w->kind != JT_NAME) tl__jp_fail_at(p, w, "a statement name");
            if (word_in(w->s, ends)) {
                tl__jp_next(p);
                *hit = w->s;
                break;
            }
            if (!strncmp(w->s, "end", 3) || !strcmp(w->s, "elif") || !strcmp(w->s, "else"))
                tl__jparse_fail(p, w->line, w->col, "unexpected '%s'%s%s", w->s,
                                ends ? ", expected " : "", ends ? ends[0] : "");
            tl__jp_next(p);
            tl__jp_vec_push(p, &items, parse_statement(p, w, w->s));
        } else {
            tl__jp_fail_at(p, t, "text or a tag");
        }
    }
    p->depth--;
    body->items = (struct jnode **)items.v;
    body->n_items = items.n;
    return body;
}

// ---- entry point

tl_status tl_jinja_parse(const char *src, size_t len, tl_jinja_template **out, char *err,
                         size_t err_size)
{
    *out = NULL;
    if (err_size) err[0] = 0;
    struct tl_jinja_template *t = calloc(1, sizeof(*t));
    if (!t) return TL_ERR_NOMEM;
    tl__jarena_init(&t->arena, (size_t)64 << 20);
    struct jparser *p = calloc(1, sizeof(*p));
    if (!p) {
        free(t);
        return TL_ERR_NOMEM;
    }
    p->arena = &t->arena;
    p->err = err;
    p->err_size = err_size;
    t->arena.on_fail = &p->fail;
    t->arena.err = err;
    t->arena.err_size = err_size;
    if (setjmp(p->fail)) {
        free(p);
        tl_jinja_destroy(t);
        return TL_ERR_FORMAT;
    }
    tl__jlex(p, src, len);
    t->root = parse_body(p, NULL, NULL);
    t->arena.on_fail = NULL;
    free(p);
    *out = t;
    return TL_OK;
}

void tl_jinja_destroy(tl_jinja_template *t)
{
    if (!t) return;
    tl__jarena_free(&t->arena);
    free(t);
}

// ---- content format detection

static bool is_content_access(const struct jnode *n)
{
    if (!n) return false;
    if (n->kind == JN_GETATTR) return !strcmp(n->name, "content");
    if (n->kind == JN_GETITEM)
        return n->b->kind == JN_CONST && n->b->value.kind == JV_STR &&
               !strcmp(n->b->value.s->p, "content");
    return false;
}

// Walks statements: collects names set from a content access into vars (pass 0), then looks
// for a for loop over a content access or one of those names (pass 1).
static bool scan_content(const struct jnode *n, int pass, const char **vars, int *n_vars)
{
    if (!n) return false;
    if (pass == 0 && n->kind == JN_SET && n->n_names == 1 && is_content_access(n->b) &&
        *n_vars < 16)
        vars[(*n_vars)++] = n->names[0];
    if (pass == 1 && n->kind == JN_FOR) {
        if (is_content_access(n->a)) return true;
        for (int i = 0; n->a->kind == JN_NAME && i < *n_vars; i++)
            if (!strcmp(n->a->name, vars[i])) return true;
    }
    if (n->kind == JN_BODY) {
        for (int i = 0; i < n->n_items; i++)
            if (scan_content(n->items[i], pass, vars, n_vars)) return true;
        return false;
    }
    if (n->kind == JN_IF || n->kind == JN_FOR || n->kind == JN_MACRO || n->kind == JN_CALLBLK ||
        n->kind == JN_FILTBLK || n->kind == JN_SETBLK)
        return scan_content(n->b, pass, vars, n_vars) || scan_content(n->c, pass, vars, n_vars);
    return false;
}

bool tl_jinja_iterates_content(const tl_jinja_template *t)
{
    const char *vars[16];
    int n_vars = 0;
    scan_content(t->root, 0, vars, &n_vars);
    return scan_content(t->root, 1, vars, &n_vars);
}
