/*
 * The tool-call syntaxes: how each family marks its calls, how a region ends, and how a
 * complete region becomes calls. Learnt from the chat templates in ../shared/templates (each
 * shows what its model is trained to write back):
 *
 *   hermes           <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, repeated
 *   llama3           {"name": ..., "parameters": {...}} as the whole reply; <|python_tag|>
 *                    then name.call(k="v", ...) (built-in tools), JSON, or raw code ("python")
 *   mistral          [TOOL_CALLS][{"name": ..., "arguments": {...}, "id": "abcdefghi"}, ...]
 *   command-r        Action: ```json\n[{"tool_name": ..., "parameters": {...}}, ...]\n```
 *   command-r7b      <|START_ACTION|>[{"tool_call_id", "tool_name", "parameters"}]<|END_ACTION|>,
 *                    content wrapped in <|START_RESPONSE|> ... <|END_RESPONSE|> (dropped)
 *   functionary-v3.1 <function=name>{...}</function>; <|python_tag|>code
 *   functionary-v3.2 the prompt ends in ">>>"; the reply is recipient\nbody, more ">>>" blocks;
 *                    recipient "all" is text, "python" raw code, others a JSON object
 *   deepseek-r1      <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>name\n
 *                    ```json\n{...}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
 *   firefunction-v2  functools[{"name": ..., "arguments": {...}}, ...]
 *   generic          the whole reply is {"name", "arguments"}, {"tool_call": {...}},
 *                    {"tool_calls": [...]} or a list of calls
 *
 * A call's arguments must be a JSON object (a string holding one is accepted too); anything
 * else rejects the region. Pure functions and constant tables; thread-safe.
 */
#include "chat/toolcall_impl.h"

#include "core/alloc.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

// ---- JSON extent ------------------------------------------------------------------------------

int tl__tc_json_end(const char *s, size_t len, size_t *end)
{
    char stack[128]; // expected closers
    int depth = 0;
    bool in_str = false, esc = false;
    size_t i = 0;
    while (i < len && isspace((unsigned char)s[i]))
        i++;
    if (i == len) return 0;
    if (s[i] != '{' && s[i] != '[') return -1;
    for (; i < len; i++) {
        char c = s[i];
        if (in_str) {
            if (esc)
                esc = false;
            else if (c == '\\')
                esc = true;
            else if (c == '"')
                in_str = false;
            continue;
        }
        if (c == '"') {
            in_str = true;
        } else if (c == '{' || c == '[') {
            if (depth == (int)sizeof(stack)) return -1;
            stack[depth++] = c == '{' ? '}' : ']';
        } else if (c == '}' || c == ']') {
            if (depth == 0 || stack[depth - 1] != c) return -1;
            if (--depth == 0) {
                *end = i + 1;
                return 1;
            }
        }
    }
    return 0;
}

// ---- building calls ---------------------------------------------------------------------------

void tl__tc_list_free(struct tl__tc_list *l)
{
    for (int i = 0; i < l->n; i++) {
        free(l->v[i].name);
        free(l->v[i].id);
        json_decref(l->v[i].args);
    }
    free(l->v);
    memset(l, 0, sizeof(*l));
}

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

// json_loadb that tells running out of memory apart from bad JSON: on the first, out->nomem is
// set (the caller then fails with TL_ERR_NOMEM instead of passing the region on as text).
// Jansson 2.14 says so with json_error_out_of_memory only in some places: when its first
// allocations fail it returns NULL with the error text left empty, which a syntax error never
// does, so that counts too. (A failure inside its lexer still reads as a syntax error there.)
static json_t *load_json(struct tl__tc_list *out, const char *s, size_t len, size_t flags)
{
    json_error_t e;
    json_t *v = json_loadb(s, len, flags, &e);
    if (!v && (json_error_code(&e) == json_error_out_of_memory || !e.text[0])) out->nomem = true;
    return v;
}

// Appends a call; takes args (a new reference) in every case. false on a bad name or no memory
// (which also sets l->nomem).
static bool list_add(struct tl__tc_list *l, const char *name, size_t name_len, json_t *args,
                     const char *id)
{
    bool ok = false;
    if (!args || !json_is_object(args) || name_len == 0 || name_len > 256) goto out;
    for (size_t i = 0; i < name_len; i++)
        if ((unsigned char)name[i] < 0x21 || name[i] == '"') goto out;
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 4;
        struct tl__tc_found *v = tl_realloc_array(l->v, (size_t)cap, sizeof(*v));
        if (!v) {
            l->nomem = true;
            goto out;
        }
        l->v = v;
        l->cap = cap;
    }
    struct tl__tc_found *f = &l->v[l->n];
    f->name = dup_n(name, name_len);
    f->id = id ? strdup(id) : NULL;
    if (!f->name || (id && !f->id)) {
        l->nomem = true;
        free(f->name);
        free(f->id);
        goto out;
    }
    f->args = args;
    args = NULL;
    l->n++;
    ok = true;
out:
    json_decref(args);
    return ok;
}

// The arguments of a call object: an object, or a string holding one (new reference or NULL).
static json_t *args_of(json_t *v, struct tl__tc_list *out)
{
    if (json_is_object(v)) return json_incref(v);
    if (json_is_string(v)) {
        json_t *o = load_json(out, json_string_value(v), json_string_length(v), 0);
        if (json_is_object(o)) return o;
        json_decref(o);
    }
    return NULL;
}

// {"name"|"tool_name"|"function": {"name"}, "arguments"|"parameters", ["id"]} -> a call.
static bool add_call_object(json_t *o, struct tl__tc_list *out)
{
    if (!json_is_object(o)) return false;
    json_t *fn = json_object_get(o, "function");
    json_t *name = json_object_get(o, "name");
    if (!name) name = json_object_get(o, "tool_name");
    if (!name && json_is_object(fn)) {
        name = json_object_get(fn, "name");
        o = fn;
    }
    json_t *args = json_object_get(o, "arguments");
    if (!args) args = json_object_get(o, "parameters");
    json_t *id = json_object_get(o, "id");
    if (!json_is_string(name) || !args) return false;
    const char *ids = json_is_string(id) && json_string_length(id) > 0 &&
                              json_string_length(id) <= 64 && !strchr(json_string_value(id), '"')
                          ? json_string_value(id)
                          : NULL;
    return list_add(out, json_string_value(name), json_string_length(name), args_of(args, out),
                    ids);
}

// One call object, a list of them, or {"tool_calls": [...]} / {"tool_call": {...}}.
static bool add_json_calls(json_t *v, struct tl__tc_list *out)
{
    if (json_is_object(v)) {
        json_t *list = json_object_get(v, "tool_calls");
        if (json_is_array(list))
            v = list;
        else if (json_is_object(json_object_get(v, "tool_call")))
            return add_call_object(json_object_get(v, "tool_call"), out);
        else
            return add_call_object(v, out);
    }
    if (!json_is_array(v) || json_array_size(v) == 0) return false;
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) if (!add_call_object(e, out)) return false;
    return true;
}

static bool parse_json_text(const char *s, size_t len, struct tl__tc_list *out)
{
    json_t *v = load_json(out, s, len, 0);
    bool ok = v && add_json_calls(v, out);
    json_decref(v);
    return ok;
}

// The text between the marker and the end marker (when the region ends with it).
static void body_of(const struct tl__tc_trigger *t, const char **s, size_t *len)
{
    size_t m = strlen(t->marker);
    *s += m;
    *len -= m;
    if (t->end_marker) {
        size_t e = strlen(t->end_marker);
        if (*len >= e && !memcmp(*s + *len - e, t->end_marker, e)) *len -= e;
    }
}

static void trim(const char **s, size_t *len)
{
    while (*len && isspace((unsigned char)**s)) {
        (*s)++;
        (*len)--;
    }
    while (*len && isspace((unsigned char)(*s)[*len - 1]))
        (*len)--;
}

static bool starts(const char *s, size_t len, const char *p)
{
    size_t n = strlen(p);
    return len >= n && !memcmp(s, p, n);
}

static const char *find(const char *s, size_t len, const char *p)
{
    return memmem(s, len, p, strlen(p));
}

// ---- region parsers ---------------------------------------------------------------------------

// Markers whose bodies are JSON: Hermes, Mistral, Firefunction, Llama 3's bare JSON, generic.
static bool parse_json_body(const struct tl__tc_trigger *t, const char *s, size_t len,
                            struct tl__tc_list *out)
{
    if (t->at_start) return parse_json_text(s, len, out); // the marker is the JSON's bracket
    body_of(t, &s, &len);
    trim(&s, &len);
    return parse_json_text(s, len, out);
}

static bool parse_drop(const struct tl__tc_trigger *t, const char *s, size_t len,
                       struct tl__tc_list *out)
{
    return true;
}

static json_t *code_args(const char *s, size_t len)
{
    json_t *o = json_object();
    if (o && json_object_set_new(o, "code", json_stringn(s, len))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

// name.call(k1="v", k2=3): Llama 3.1's built-in tools. Values are JSON literals.
static bool parse_builtin_call(const char *s, size_t len, struct tl__tc_list *out)
{
    size_t n = 0;
    while (n < len && (isalnum((unsigned char)s[n]) || s[n] == '_'))
        n++;
    if (n == 0 || !starts(s + n, len - n, ".call(") || s[len - 1] != ')') return false;
    json_t *args = json_object();
    const char *p = s + n + 6, *end = s + len - 1;
    while (args && p < end) {
        while (p < end && (isspace((unsigned char)*p) || *p == ','))
            p++;
        const char *k = p;
        while (p < end && (isalnum((unsigned char)*p) || *p == '_'))
            p++;
        if (p == k || p >= end || *p != '=') goto bad;
        size_t klen = (size_t)(p - k);
        p++;
        // the value runs to the next top-level comma (strings may hold commas)
        const char *v = p;
        bool in_str = false, esc = false;
        for (; p < end; p++) {
            if (in_str) {
                if (esc)
                    esc = false;
                else if (*p == '\\')
                    esc = true;
                else if (*p == '"')
                    in_str = false;
            } else if (*p == '"') {
                in_str = true;
            } else if (*p == ',') {
                break;
            }
        }
        json_t *val = load_json(out, v, (size_t)(p - v), JSON_DECODE_ANY);
        char key[128];
        if (!val || klen >= sizeof(key)) {
            json_decref(val);
            goto bad;
        }
        memcpy(key, k, klen);
        key[klen] = 0;
        if (json_object_set_new(args, key, val)) goto bad;
    }
    return list_add(out, s, n, args, NULL);
bad:
    json_decref(args);
    return false;
}

// <|python_tag|>: JSON call(s) separated by ';', a built-in call, or code for "python".
static bool parse_python_tag(const struct tl__tc_trigger *t, const char *s, size_t len,
                             struct tl__tc_list *out)
{
    body_of(t, &s, &len);
    trim(&s, &len);
    if (len == 0) return false;
    if (*s == '{') {
        while (len) {
            size_t e;
            if (tl__tc_json_end(s, len, &e) != 1 || !parse_json_text(s, e, out)) return false;
            s += e;
            len -= e;
            while (len && (isspace((unsigned char)*s) || *s == ';')) {
                s++;
                len--;
            }
        }
        return true;
    }
    if (parse_builtin_call(s, len, out)) return true;
    return list_add(out, "python", 6, code_args(s, len), NULL);
}

// <function=name>{...}</function>
static bool parse_function_tag(const struct tl__tc_trigger *t, const char *s, size_t len,
                               struct tl__tc_list *out)
{
    body_of(t, &s, &len);
    const char *gt = memchr(s, '>', len);
    if (!gt) return false;
    size_t n = (size_t)(gt - s);
    const char *b = gt + 1;
    size_t blen = len - n - 1;
    trim(&b, &blen);
    json_t *args = load_json(out, b, blen, 0);
    return list_add(out, s, n, args, NULL);
}

// Functionary v3.2: >>>recipient\nbody.
static size_t end_functionary(const struct tl__tc_trigger *t, const char *s, size_t len, bool eos)
{
    const char *nl = memchr(s, '\n', len);
    if (!nl) return eos ? len : 0;
    size_t h = (size_t)(nl - s) + 1;
    if (h == 7 && starts(s, len, ">>>all\n")) return h;
    size_t e;
    int r = tl__tc_json_end(s + h, len - h, &e);
    if (r == 1) return h + e;
    if (r == 0 && !eos) return 0;
    if (r == 0) return len;
    const char *next = find(s + h, len - h, ">>>");
    if (next) return (size_t)(next - s);
    return eos ? len : 0;
}

static bool parse_functionary(const struct tl__tc_trigger *t, const char *s, size_t len,
                              struct tl__tc_list *out)
{
    body_of(t, &s, &len);
    const char *nl = memchr(s, '\n', len);
    if (!nl) return false;
    size_t n = (size_t)(nl - s);
    if (n == 3 && starts(s, len, "all")) return true;
    const char *b = nl + 1;
    size_t blen = len - n - 1;
    trim(&b, &blen);
    if (blen && *b == '{') return list_add(out, s, n, load_json(out, b, blen, 0), NULL);
    if (n == 6 && starts(s, len, "python") && blen)
        return list_add(out, s, n, code_args(b, blen), NULL);
    return false;
}

// DeepSeek R1: <｜tool▁call▁begin｜>type<｜tool▁sep｜>name\n```json\n{...}\n```<｜tool▁call▁end｜>
#define DS_CALL_BEGIN                                                                              \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "call\xe2\x96\x81"                                                                             \
    "begin\xef\xbd\x9c>"
#define DS_CALL_END                                                                                \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "call\xe2\x96\x81"                                                                             \
    "end\xef\xbd\x9c>"
#define DS_CALLS_BEGIN                                                                             \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "calls\xe2\x96\x81"                                                                            \
    "begin\xef\xbd\x9c>"
#define DS_CALLS_END                                                                               \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "calls\xe2\x96\x81"                                                                            \
    "end\xef\xbd\x9c>"
#define DS_SEP                                                                                     \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "sep\xef\xbd\x9c>"

static bool parse_deepseek(const struct tl__tc_trigger *t, const char *s, size_t len,
                           struct tl__tc_list *out)
{
    if (!strcmp(t->marker, DS_CALLS_BEGIN)) body_of(t, &s, &len);
    int n_calls = 0;
    for (;;) {
        trim(&s, &len);
        if (len == 0) break;
        if (!starts(s, len, DS_CALL_BEGIN)) return false;
        s += strlen(DS_CALL_BEGIN);
        len -= strlen(DS_CALL_BEGIN);
        const char *sep = find(s, len, DS_SEP);
        if (!sep) return false;
        len -= (size_t)(sep - s) + strlen(DS_SEP);
        s = sep + strlen(DS_SEP);
        const char *nl = memchr(s, '\n', len);
        if (!nl) return false;
        const char *name = s;
        size_t name_len = (size_t)(nl - s);
        len -= name_len + 1;
        s = nl + 1;
        const char *cend = find(s, len, DS_CALL_END);
        size_t blen = cend ? (size_t)(cend - s) : len;
        const char *b = s;
        trim(&b, &blen);
        if (starts(b, blen, "```json"))
            b += 7, blen -= 7;
        else if (starts(b, blen, "```"))
            b += 3, blen -= 3;
        if (blen >= 3 && !memcmp(b + blen - 3, "```", 3)) blen -= 3;
        trim(&b, &blen);
        if (!list_add(out, name, name_len, load_json(out, b, blen, 0), NULL)) return false;
        n_calls++;
        if (!cend) break;
        len -= (size_t)(cend - s) + strlen(DS_CALL_END);
        s = cend + strlen(DS_CALL_END);
    }
    return n_calls > 0;
}

// Command R+: Action: [```json] [...] [```]
static size_t end_command_r(const struct tl__tc_trigger *t, const char *s, size_t len, bool eos)
{
    size_t i = strlen(t->marker);
    while (i < len && isspace((unsigned char)s[i]))
        i++;
    bool fenced = false;
    if (i == len || (len - i < 7 && !memcmp(s + i, "```json", len - i))) {
        if (!eos) return 0; // the fence may still come
    }
    if (i + 7 <= len && !memcmp(s + i, "```json", 7))
        i += 7, fenced = true;
    else if (i + 3 <= len && !memcmp(s + i, "```", 3))
        i += 3, fenced = true;
    size_t e;
    int r = tl__tc_json_end(s + i, len - i, &e);
    if (r == 0) return eos ? len : 0;
    if (r < 0) return i < len ? i + 1 : len;
    i += e;
    if (!fenced) return i;
    size_t j = i;
    while (j < len && isspace((unsigned char)s[j]))
        j++;
    if (j + 3 <= len) return !memcmp(s + j, "```", 3) ? j + 3 : i;
    if (!eos && !memcmp(s + j, "```", len - j)) return 0;
    return i;
}

static bool parse_command_r(const struct tl__tc_trigger *t, const char *s, size_t len,
                            struct tl__tc_list *out)
{
    body_of(t, &s, &len);
    trim(&s, &len);
    if (starts(s, len, "```json"))
        s += 7, len -= 7;
    else if (starts(s, len, "```"))
        s += 3, len -= 3;
    if (len >= 3 && !memcmp(s + len - 3, "```", 3)) len -= 3;
    trim(&s, &len);
    return parse_json_text(s, len, out);
}

// ---- the table --------------------------------------------------------------------------------

#define JSON_AT_START(m)                                                                           \
    {                                                                                              \
        .marker = m, .at_start = true, .end = TL__TC_END_JSON, .parse = parse_json_body            \
    }
#define PYTHON_TAG                                                                                 \
    {                                                                                              \
        .marker = "<|python_tag|>", .end = TL__TC_END_EOS, .parse = parse_python_tag               \
    }

static const struct tl__tc_syntax syntaxes[TL_TOOL_SYNTAX_COUNT] = {
    [TL_TOOL_GENERIC] =
        {"generic", {NULL}, NULL, false, {JSON_AT_START("{"), JSON_AT_START("[")}, 2},
    [TL_TOOL_HERMES] = {"hermes",
                        {"<tool_call>", NULL},
                        NULL,
                        false,
                        {{.marker = "<tool_call>",
                          .end = TL__TC_END_MARKER,
                          .end_marker = "</tool_call>",
                          .parse = parse_json_body}},
                        1},
    [TL_TOOL_LLAMA3] = {"llama3",
                        {"<|start_header_id|>", "\"parameters\""},
                        NULL,
                        false,
                        {JSON_AT_START("{"), PYTHON_TAG},
                        2},
    [TL_TOOL_MISTRAL] =
        {"mistral",
         {"[TOOL_CALLS]", NULL},
         NULL,
         true,
         {{.marker = "[TOOL_CALLS]", .end = TL__TC_END_JSON, .parse = parse_json_body}},
         1},
    [TL_TOOL_COMMAND_R] = {"command-r",
                           {"<|START_OF_TURN_TOKEN|>", "Action:"},
                           NULL,
                           false,
                           {{.marker = "Action:",
                             .end = TL__TC_END_CUSTOM,
                             .end_fn = end_command_r,
                             .parse = parse_command_r}},
                           1},
    [TL_TOOL_COMMAND_R7B] =
        {"command-r7b",
         {"<|START_ACTION|>", NULL},
         NULL,
         false,
         {{.marker = "<|START_ACTION|>",
           .end = TL__TC_END_MARKER,
           .end_marker = "<|END_ACTION|>",
           .parse = parse_json_body},
          {.marker = "<|START_RESPONSE|>", .end = TL__TC_END_SELF, .parse = parse_drop},
          {.marker = "<|END_RESPONSE|>", .end = TL__TC_END_SELF, .parse = parse_drop}},
         3},
    [TL_TOOL_FUNCTIONARY_V31] = {"functionary-v3.1",
                                 {"<function=", "<|start_header_id|>"},
                                 NULL,
                                 false,
                                 {{.marker = "<function=",
                                   .end = TL__TC_END_MARKER,
                                   .end_marker = "</function>",
                                   .parse = parse_function_tag},
                                  PYTHON_TAG},
                                 2},
    [TL_TOOL_FUNCTIONARY_V32] = {"functionary-v3.2",
                                 {">>>all", NULL},
                                 ">>>",
                                 false,
                                 {{.marker = ">>>",
                                   .end = TL__TC_END_CUSTOM,
                                   .end_fn = end_functionary,
                                   .parse = parse_functionary}},
                                 1},
    [TL_TOOL_DEEPSEEK_R1] = {"deepseek-r1",
                             {DS_CALLS_BEGIN, NULL},
                             NULL,
                             false,
                             {{.marker = DS_CALLS_BEGIN,
                               .end = TL__TC_END_MARKER,
                               .end_marker = DS_CALLS_END,
                               .parse = parse_deepseek},
                              {.marker = DS_CALL_BEGIN,
                               .end = TL__TC_END_MARKER,
                               .end_marker = DS_CALL_END,
                               .parse = parse_deepseek}},
                             2},
    [TL_TOOL_FIREFUNCTION_V2] =
        {"firefunction-v2",
         {"functools[", NULL},
         NULL,
         false,
         {{.marker = "functools", .end = TL__TC_END_JSON, .parse = parse_json_body}},
         1},
};

// Most specific first: Functionary 3.1 and Firefunction are Llama 3 templates too.
static const enum tl_tool_syntax detect_order[] = {
    TL_TOOL_HERMES,          TL_TOOL_MISTRAL,         TL_TOOL_COMMAND_R7B,
    TL_TOOL_COMMAND_R,       TL_TOOL_FIREFUNCTION_V2, TL_TOOL_FUNCTIONARY_V32,
    TL_TOOL_FUNCTIONARY_V31, TL_TOOL_DEEPSEEK_R1,     TL_TOOL_LLAMA3,
};

const struct tl__tc_syntax *tl__tc_syntax_get(enum tl_tool_syntax s)
{
    return (unsigned)s < TL_TOOL_SYNTAX_COUNT ? &syntaxes[s] : &syntaxes[TL_TOOL_GENERIC];
}

enum tl_tool_syntax tl_tool_syntax_detect(const char *tmpl)
{
    if (!tmpl) return TL_TOOL_GENERIC;
    for (size_t i = 0; i < sizeof(detect_order) / sizeof(detect_order[0]); i++) {
        const struct tl__tc_syntax *sx = &syntaxes[detect_order[i]];
        bool all = true;
        for (int k = 0; k < 2 && sx->detect[k]; k++)
            if (!strstr(tmpl, sx->detect[k])) all = false;
        if (all) return detect_order[i];
    }
    return TL_TOOL_GENERIC;
}

const char *tl_tool_syntax_name(enum tl_tool_syntax s)
{
    return tl__tc_syntax_get(s)->name;
}

bool tl_tool_syntax_always_parsed(enum tl_tool_syntax s)
{
    return tl__tc_syntax_get(s)->prefix != NULL;
}

bool tl_tool_syntax_from_name(const char *name, enum tl_tool_syntax *out)
{
    for (int i = 0; i < TL_TOOL_SYNTAX_COUNT; i++) {
        if (!strcmp(name, syntaxes[i].name)) {
            *out = (enum tl_tool_syntax)i;
            return true;
        }
    }
    return false;
}
