/*
 * Internals shared by the Jinja engine's files (jinja_*.c): the arena, the value type, the AST
 * and the render context. Callers use chat/jinja.h instead.
 *
 * Memory: everything is arena-allocated. A parsed template owns one arena (its AST and constant
 * values, read-only after parsing, so renders on several threads may share it); each render owns
 * another, freed whole when the render ends. Values are therefore plain structs passed by value
 * with no reference counts, and an error anywhere unwinds with longjmp to the entry point
 * (tl_jinja_parse / tl_jinja_render), which frees the arena: nothing leaks on any error path.
 * Lists and mappings are immutable once built (as in Jinja2's ImmutableSandboxedEnvironment);
 * only a namespace() object is written after creation.
 */
#ifndef TL_CHAT_JINJA_IMPL_H
#define TL_CHAT_JINJA_IMPL_H

#include "chat/jinja.h"

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// ---- arena (jinja_arena.c)

struct jarena_chunk;
struct jarena {
    struct jarena_chunk *head; // owned list of chunks, newest first
    size_t used_bytes;         // total allocated from malloc
    size_t max_bytes;          // allocation beyond this fails the render / parse
    jmp_buf *on_fail;          // where an allocation failure jumps (set by the entry point)
    char *err;                 // buffer the failure message is written to
    size_t err_size;
};

void tl__jarena_init(struct jarena *a, size_t max_bytes);
void tl__jarena_free(struct jarena *a);
void *tl__jarena_alloc(struct jarena *a, size_t n);     // zeroed; longjmps on failure
void *tl__jarena_alloc_raw(struct jarena *a, size_t n); // not zeroed

// ---- values

enum jv_kind {
    JV_UNDEF = 0, // Jinja2's default Undefined
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST, // also tuples (l->is_tuple)
    JV_MAP,  // insertion-ordered
    JV_FUNC, // macro, builtin global, bound method
    JV_NS,   // namespace(): a mutable mapping
};

struct jstr {
    size_t len;
    char p[]; // len bytes + NUL (may contain NUL bytes)
};

struct jv;
struct jlist {
    int64_t n, cap;
    struct jv *v;
    bool is_tuple;
};

struct jmap {
    int64_t n, cap;
    struct jv *k; // keys (strings in practice; any value compares)
    struct jv *v;
};

struct jfunc;
// Python types the value stands for beyond its kind (Jinja2 semantics that templates observe).
enum jv_flag {
    JVF_MARKUP = 1,      // JV_STR: a Markup string (|safe, |escape): + escapes plain operands
    JVF_GENERATOR = 2,   // JV_LIST: a generator (map, select, ...): always true, no len/index/JSON
    JVF_DICT_ITEMS = 4,  // JV_LIST: dict.items() view: no index/JSON
    JVF_DICT_KEYS = 8,   // JV_LIST: dict.keys() view
    JVF_DICT_VALUES = 16 // JV_LIST: dict.values() view
};
#define JVF_VIEWS (JVF_DICT_ITEMS | JVF_DICT_KEYS | JVF_DICT_VALUES)

struct jv {
    uint8_t kind;  // enum jv_kind
    uint8_t flags; // enum jv_flag bits
    union {
        bool b;
        int64_t i;
        double f;
        const struct jstr *s;   // JV_STR
        const char *undef_name; // JV_UNDEF: the missing name, or NULL
        struct jlist *l;
        struct jmap *m; // JV_MAP, JV_NS
        const struct jfunc *fn;
    };
};

// ---- AST

enum jn_kind {
    // statements
    JN_BODY,    // items: statements
    JN_TEXT,    // value: the text
    JN_OUTPUT,  // a: expression
    JN_IF,      // a: cond, b: body, c: else body (an IF for elif) or NULL
    JN_FOR,     // names: targets, a: iterable, b: body, c: else body, d: filter cond
    JN_SET,     // names: targets (or a: namespace expr + name: attribute), b: value
    JN_SETBLK,  // names[0]: target (or a + name), b: body, d: filter chain (input NULL)
    JN_MACRO,   // name, names: params, items: defaults (NULL entries), b: body
    JN_CALLBLK, // a: the call, names/items: caller's params and defaults, b: body
    JN_FILTBLK, // a: filter chain whose innermost input is NULL, b: body
    JN_BREAK,
    JN_CONTINUE,
    // expressions
    JN_CONST,   // value
    JN_NAME,    // name
    JN_LIST,    // items
    JN_TUPLE,   // items
    JN_DICT,    // items: keys, args.pos: values
    JN_GETATTR, // a.name
    JN_GETITEM, // a[b]
    JN_SLICE,   // a[b:c:d] (NULL parts omitted)
    JN_CALL,    // a(args)
    JN_FILTER,  // a|name(args); a NULL inside a filter block
    JN_TEST,    // a is [not] name(args); flag: negated
    JN_NEG,     // -a
    JN_POS,     // +a
    JN_NOT,     // not a
    JN_BINOP,   // a op b; op: one of JOP_*
    JN_AND,     // a and b
    JN_OR,      // a or b
    JN_COND,    // a if b else c (c may be NULL)
};

enum jop {
    JOP_ADD = 1,
    JOP_SUB,
    JOP_MUL,
    JOP_DIV,
    JOP_FLOORDIV,
    JOP_MOD,
    JOP_POW,
    JOP_CONCAT,
    JOP_EQ,
    JOP_NE,
    JOP_LT,
    JOP_LE,
    JOP_GT,
    JOP_GE,
    JOP_IN,
    JOP_NOTIN,
};

struct jnode;
struct jargs {
    struct jnode **pos; // positional arguments
    int n_pos;
    const char **kw; // keyword names
    struct jnode **kwv;
    int n_kw;
};

struct jnode {
    uint8_t kind; // enum jn_kind
    uint8_t op;   // enum jop (JN_BINOP)
    bool flag;    // JN_TEST: negated
    int line, col;
    const char *name;
    struct jv value;
    struct jnode *a, *b, *c, *d;
    struct jnode **items;
    int n_items;
    const char **names;
    int n_names;
    struct jargs args;
};

struct tl_jinja_template {
    struct jarena arena; // owns the AST and constants
    struct jnode *root;  // JN_BODY
};

// ---- render context

struct jframe {
    struct jframe *parent;
    const char **names;
    struct jv *vals;
    int n, cap;
};

struct jcall;
struct jctx {
    struct jarena arena;
    jmp_buf fail;
    char *err; // caller's error buffer
    size_t err_size;
    int err_line, err_col;
    struct tl_jinja_limits lim;
    int64_t deadline_us; // 0 = none
    int64_t steps;       // loop iterations + calls, for the step and time limits
    int depth;           // evaluation nesting
    // output: the current buffer (filter and set blocks capture into a fresh one)
    char *out;
    size_t out_len, out_cap;
    size_t out_total;         // bytes written to any buffer, against lim.max_output_bytes
    struct jframe *root;      // the render's variables
    struct jframe *frame;     // the current scope
    const struct jnode *cur;  // node being evaluated (error positions)
    int loop_ctl;             // 1 = break, 2 = continue pending
    int macro_depth;          // macro calls in progress
    bool raised;              // the failure came from raise_exception
    struct jv pending_caller; // a call block's caller() for the macro about to be called
    // The one upward seam of the evaluator's layers (listed below): calling a macro or caller()
    // runs its body, and statements live in the top file (jinja_exec.c), above the expression
    // evaluator. tl_jinja_render sets this to its macro runner; tl__jcall_value (jinja_eval.c)
    // calls through it. Every other call between the evaluator's files goes downward.
    struct jv (*call_macro)(struct jctx *c, const struct jfunc *fn, const struct jcall *a);
};

// ---- values (jinja_value.c; printing in jinja_print.c)

struct jv tl__jv_undef(const char *name);
struct jv tl__jv_none(void);
struct jv tl__jv_bool(bool b);
struct jv tl__jv_int(int64_t i);
struct jv tl__jv_float(double f);
struct jv tl__jv_str(struct jarena *a, const char *s, size_t n);
struct jv tl__jv_cstr(struct jarena *a, const char *s);
struct jv tl__jv_list(struct jarena *a, int64_t cap);
struct jv tl__jv_map(struct jarena *a, int64_t cap);
void tl__jv_list_push(struct jarena *a, struct jv list, struct jv item);
void tl__jv_map_set(struct jarena *a, struct jv map, struct jv key, struct jv val); // replaces
bool tl__jv_map_get(struct jv map, const char *key, size_t key_len, struct jv *out);
bool tl__jv_map_getv(struct jv map, struct jv key, struct jv *out);
struct jv tl__jv_items(struct jarena *a, struct jv map); // (key, value) tuples, in order

bool tl__jv_truthy(struct jv v);
bool tl__jv_equal(struct jv a, struct jv b);
// <0, 0, >0; false when the two cannot be ordered (as Python's TypeError).
bool tl__jv_compare(struct jv a, struct jv b, int *out);
const char *tl__jv_type_name(struct jv v);
bool tl__jv_is_num(struct jv v); // int, float or bool (Python's Number)
double tl__jv_as_double(struct jv v);

// Python's str() and repr() appended to a growable buffer (jinja_print.c).
struct jbuf {
    struct jarena *arena;
    char *p;
    size_t len, cap;
};
void tl__jbuf_add(struct jbuf *b, const char *s, size_t n);
void tl__jbuf_adds(struct jbuf *b, const char *s);
struct jv tl__jbuf_value(struct jbuf *b);
void tl__jv_write_str(struct jbuf *b, struct jv v);  // str(v); Undefined prints nothing
void tl__jv_write_repr(struct jbuf *b, struct jv v); // repr(v)
void tl__jv_write_float(struct jbuf *b, double f);   // Python's repr of a float
struct jv tl__jv_to_str(struct jarena *a, struct jv v);

// json.dumps(v, ensure_ascii=False, indent, separators, sort_keys). indent < 0 = none; item_sep
// and key_sep NULL = Python's defaults. false (with *bad set) when v holds an unserialisable
// value.
bool tl__jv_write_json(struct jbuf *b, struct jv v, int indent, const char *item_sep,
                       const char *key_sep, bool sort_keys, struct jv *bad);

// UTF-8 code point helpers (strings index by code point, as Python's str does).
int64_t tl__jstr_cp_len(const char *s, size_t n);
size_t tl__jstr_cp_offset(const char *s, size_t n, int64_t cp); // byte offset of code point cp

// ---- the evaluator, in layers: each file calls only the files listed before it.
//   jinja_ctx.c      failing the render, steps, a call's arguments, iteration
//   jinja_text.c     string helpers: strip, case, replace, % formatting, Markup escape
//   jinja_names.c    the built-in filter and test names (a leaf)
//   jinja_methods.c  str and dict methods, loop.cycle, the globals
//   jinja_access.c   x.name, x[key], x[a:b:c]
//   jinja_tests.c    `is` tests
//   jinja_filters.c  filters
//   jinja_eval.c     expressions
//   jinja_exec.c     statements, macros, the JSON import, tl_jinja_render
// The layers below jinja_eval.c take values already evaluated (Jinja2's map / select name a
// filter or test, never a macro). The recursion of an interpreter (a call expression runs a
// macro's statements, which evaluate expressions) goes up through one seam, jctx.call_macro.

struct jcall {
    int n_pos;
    const struct jv *pos;
    int n_kw;
    const char *const *kw;
    const struct jv *kwv;
};

// jinja_ctx.c
// Fails the render: formats the message (prefixed with the current line) and longjmps.
_Noreturn void tl__jfail(struct jctx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
// Fails for an Undefined operand: "'name' is undefined (what)".
_Noreturn void tl__jfail_undefined(struct jctx *c, struct jv u, const char *what);
void tl__jstep(struct jctx *c); // counts a step; fails past the step or time limit
// The argument named `name` at position `i` (or keyword); *found false when absent.
struct jv tl__jarg(struct jctx *c, const struct jcall *a, int i, const char *name, bool *found);
struct jv tl__jiterable_to_list(struct jctx *c, struct jv v); // list, tuple, map keys, string chars

// jinja_text.c: string helpers shared by filters, methods and operators: strip (chars JV_STR or
// whitespace), case beyond ASCII (mode 0 lower, 1 upper, 2 capitalize), replace (count < 0 =
// all).
struct jv tl__jstr_strip(struct jctx *c, struct jv s, struct jv chars, bool left, bool right);
struct jv tl__jstr_case(struct jctx *c, struct jv s, int mode);
struct jv tl__jstr_replace(struct jctx *c, struct jv s, struct jv old, struct jv new,
                           int64_t count);
// Python's fmt % args (args a tuple, a mapping for %(name)s, or one value).
struct jv tl__jstr_percent(struct jctx *c, struct jv fmt, struct jv args);
struct jv tl__jescape(struct jctx *c, struct jv v); // Markup escape (|escape)

// Python's str.isspace for one byte (ASCII whitespace), as strip / split / title use it.
static inline bool tl__jis_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f';
}

// jinja_names.c
bool tl__jname_in(const char *const *list, const char *name); // list NULL-terminated
bool tl__jfilter_exists(const char *name);
bool tl__jtest_exists(const char *name);

// jinja_methods.c
// A method bound to obj (str, map methods) or JV_UNDEF when obj has no such method.
struct jv tl__jmethod_bind(struct jctx *c, struct jv obj, const char *name);
struct jv tl__jglobal(const char *name); // range, namespace, dict, raise_exception, strftime_now
struct jv tl__jcall_builtin(struct jctx *c, const struct jfunc *fn, const struct jcall *a);

// jinja_access.c
struct jv tl__jgetattr(struct jctx *c, struct jv obj, const char *name);
struct jv tl__jgetitem(struct jctx *c, struct jv obj, struct jv key);
struct jv tl__jslice(struct jctx *c, struct jv obj, struct jv start, struct jv stop,
                     struct jv step); // NONE / UNDEF parts omitted

// jinja_tests.c, jinja_filters.c
bool tl__jtest(struct jctx *c, const char *name, struct jv in, const struct jcall *a);
struct jv tl__jfilter(struct jctx *c, const char *name, struct jv in, const struct jcall *a);

// jinja_eval.c
struct jv tl__jeval(struct jctx *c, const struct jnode *n);
struct jcall tl__jeval_args(struct jctx *c, const struct jargs *a);
struct jv tl__jcall_value(struct jctx *c, struct jv fn, int n_pos, const struct jv *pos, int n_kw,
                          const char *const *kw, const struct jv *kwv);

// jinja_exec.c
void tl__jframe_set(struct jctx *c, struct jframe *f, const char *name, struct jv v);
struct jv tl__jv_from_json(struct jarena *a, const json_t *j, int depth);

enum jfunc_kind { JF_MACRO, JF_GLOBAL, JF_METHOD, JF_CALLER };
struct jfunc {
    uint8_t kind;
    const char *name;
    const struct jnode *macro; // JF_MACRO, JF_CALLER: the macro / call block
    struct jv self;            // JF_METHOD: bound object
    struct jv caller;          // JF_CALLER's outer caller chain; unused otherwise
    struct jframe *scope;      // JF_CALLER: the frame the call block was written in
};

// ---- parsing (jinja_lex.c, jinja_parse.c)

enum jtok_kind {
    JT_EOF = 0,
    JT_TEXT,
    JT_VAR_BEGIN,
    JT_VAR_END,
    JT_BLOCK_BEGIN,
    JT_BLOCK_END,
    JT_NAME,
    JT_STRING,
    JT_INT,
    JT_FLOAT,
    JT_OP,
};

struct jtok {
    uint8_t kind;
    int line, col;
    const char *s; // TEXT, NAME, STRING (unescaped), OP text; arena-owned, NUL-terminated
    size_t len;
    int64_t i;
    double f;
};

struct jparser {
    struct jarena *arena;
    jmp_buf fail;
    char *err;
    size_t err_size;
    struct jtok *toks;
    int64_t n_toks, cap_toks, pos;
    int depth;
};

_Noreturn void tl__jparse_fail(struct jparser *p, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void tl__jlex(struct jparser *p, const char *src, size_t len); // fills p->toks

// Parser helpers (jinja_parse_expr.c), shared by the statement parser.
struct vec {
    void **v;
    int n, cap;
};
const struct jtok *tl__jp_peek(struct jparser *p);
const struct jtok *tl__jp_peek2(struct jparser *p);
const struct jtok *tl__jp_next(struct jparser *p);
bool tl__jp_is_op(const struct jtok *t, const char *op);
bool tl__jp_is_name(const struct jtok *t, const char *name);
_Noreturn void tl__jp_fail_at(struct jparser *p, const struct jtok *t, const char *what);
void tl__jp_expect_op(struct jparser *p, const char *op);
const char *tl__jp_expect_name(struct jparser *p);
void tl__jp_expect_block_end(struct jparser *p);
struct jnode *tl__jp_node(struct jparser *p, enum jn_kind kind, const struct jtok *at);
void tl__jp_vec_push(struct jparser *p, struct vec *v, void *x);
void tl__jp_enter(struct jparser *p);
bool tl__jp_starts_primary(const struct jtok *t);
struct jnode *tl__jp_parse_expr(struct jparser *p, bool with_cond);
struct jnode *tl__jp_parse_tuple_expr(struct jparser *p, bool with_cond);
void tl__jp_parse_call_args(struct jparser *p, struct jargs *a);
struct jnode *tl__jp_parse_filter(struct jparser *p, struct jnode *input);

#endif
