/*
 * The OpenAI request fields beyond the basics (see openai.h): logit_bias, tools and the legacy
 * functions, tool_choice / function_call, parallel_tool_calls, the tool-calling shapes of
 * messages (assistant tool_calls, role "tool"), and the fields tokenloom refuses.
 *
 * A forced call (tool_choice "required" or a named function) becomes a grammar in the chat
 * template's tool-call syntax (tl__oai_forced_call_grammar, src/grammar/toolcall_gbnf.c).
 *
 * The rule for fields: every field the OpenAI API defines is either implemented or refused
 * with a 400 naming it (param), never silently ignored, because a client that asks for JSON
 * output or a forced tool call and gets prose back cannot tell what went wrong. A field's
 * neutral value (best_of 1, suffix "", store false...) is accepted:
 * it asks for nothing we do not do. Fields of no effect on the output (user, metadata-free
 * identifiers) are accepted. response_format is structured output (grammar/, read in openai.c).
 *
 * Pure functions over the parsed document; thread-safe.
 */
#include "server/openai.h"

#include "core/alloc.h"
#include "core/error.h"
#include "grammar/grammar.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BAD(err, param, ...)                                                                       \
    (tl_oai_error_set((err), 400, "invalid_request_error", "invalid_value", (param), __VA_ARGS__), \
     false)

static bool str_is(const json_t *v, const char *lit)
{
    return json_is_string(v) && !strcmp(json_string_value(v), lit) &&
           strlen(lit) == json_string_length(v);
}

static bool absent(const json_t *v)
{
    return !v || json_is_null(v);
}

// ---- refused fields ---------------------------------------------------------------------------

// A field is refused unless absent/null or its neutral value (checked by neutral()).
struct refused {
    const char *key;
    unsigned kinds; // 1 = completions, 2 = chat
    const char *why;
};

static const struct refused refused_fields[] = {
    {"best_of", 3, "is not supported: only 1 is accepted (use 'n' for several choices)"},
    {"suffix", 1, "is not supported (no fill-in-the-middle); only \"\" is accepted"},
    {"audio", 2, "is not supported: tokenloom generates text only"},
    {"modalities", 2, "is not supported: only [\"text\"] is accepted"},
    {"prediction", 2, "(predicted outputs) is not supported"},
    {"web_search_options", 2, "is not supported: tokenloom has no web search"},
    {"reasoning_effort", 2, "is not supported: the model decides how long it reasons"},
    {"verbosity", 2, "is not supported"},
    {"service_tier", 3, "is not supported: only \"auto\" and \"default\" are accepted"},
    {"store", 2, "is not supported: tokenloom keeps no completions; only false is accepted"},
    {"metadata", 2, "is only used with stored completions, which tokenloom does not keep"},
};

static bool neutral(const char *key, const json_t *v)
{
    if (!strcmp(key, "best_of")) return json_is_integer(v) && json_integer_value(v) == 1;
    if (!strcmp(key, "suffix")) return str_is(v, "");
    if (!strcmp(key, "modalities"))
        return json_is_array(v) && json_array_size(v) == 1 && str_is(json_array_get(v, 0), "text");
    if (!strcmp(key, "service_tier")) return str_is(v, "auto") || str_is(v, "default");
    if (!strcmp(key, "store")) return json_is_false(v);
    return false;
}

bool tl__oai_check_refused(json_t *root, enum tl_oai_kind kind, struct tl_oai_error *err)
{
    unsigned bit = kind == TL_OAI_CHAT ? 2 : 1;
    for (size_t i = 0; i < sizeof(refused_fields) / sizeof(refused_fields[0]); i++) {
        const struct refused *f = &refused_fields[i];
        if (!(f->kinds & bit)) continue;
        json_t *v = json_object_get(root, f->key);
        if (absent(v) || neutral(f->key, v)) continue;
        return BAD(err, f->key, "'%s' %s", f->key, f->why);
    }
    return true;
}

// ---- logit_bias -------------------------------------------------------------------------------

bool tl__oai_parse_logit_bias(json_t *root, const struct tl_oai_limits *lim,
                              struct tl_oai_params *p, struct tl_oai_error *err)
{
    json_t *v = json_object_get(root, "logit_bias");
    if (absent(v)) return true;
    if (!json_is_object(v))
        return BAD(err, "logit_bias", "'logit_bias' must be an object mapping token ids to biases");
    size_t n = json_object_size(v);
    if (n == 0) return true;
    if (n > TL_MAX_LOGIT_BIAS)
        return BAD(err, "logit_bias", "'logit_bias' may hold at most %d entries, got %zu",
                   TL_MAX_LOGIT_BIAS, n);
    p->logit_bias = tl_calloc_array(n, sizeof(*p->logit_bias));
    if (!p->logit_bias) return tl_oai_error_from_status(err, TL_ERR_NOMEM, "out of memory"), false;
    const char *key;
    json_t *b;
    json_object_foreach(v, key, b)
    {
        char *end = NULL;
        long long id = strtoll(key, &end, 10);
        if (!*key || *end || key[0] == '+' || key[0] == ' ' || id < 0 ||
            id >= (long long)lim->n_vocab)
            return BAD(err, "logit_bias",
                       "'logit_bias' keys must be token ids in [0, %d] written in decimal; got "
                       "'%.40s'",
                       lim->n_vocab - 1, key);
        if (!json_is_number(b))
            return BAD(err, "logit_bias", "'logit_bias' value of token %lld must be a number", id);
        double d = json_number_value(b);
        if (!(d >= -100 && d <= 100))
            return BAD(err, "logit_bias",
                       "'logit_bias' value of token %lld must be between -100 and 100, got %g", id,
                       d);
        p->logit_bias[p->n_logit_bias].token = (int32_t)id;
        p->logit_bias[p->n_logit_bias].bias = (float)d;
        p->n_logit_bias++;
    }
    p->sampling.logit_bias = p->logit_bias;
    p->sampling.n_logit_bias = p->n_logit_bias;
    return true;
}

// ---- tools ------------------------------------------------------------------------------------

#define TL_OAI_MAX_TOOLS 512

// A function definition {"name", ["description"], ["parameters"], ["strict"]}.
static bool check_function(json_t *fn, const char *param, struct tl_oai_error *err)
{
    char sub[96];
    if (!json_is_object(fn)) return BAD(err, param, "'%s' must be an object", param);
    json_t *name = json_object_get(fn, "name");
    snprintf(sub, sizeof(sub), "%s.name", param);
    if (!json_is_string(name) || json_string_length(name) == 0 || json_string_length(name) > 64 ||
        strlen(json_string_value(name)) != json_string_length(name))
        return BAD(err, sub, "'%s' must be a non-empty string of at most 64 bytes", sub);
    for (const char *c = json_string_value(name); *c; c++)
        if (!(*c == '_' || *c == '-' || *c == '.' || (*c >= '0' && *c <= '9') ||
              (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z')))
            return BAD(err, sub, "'%s' may hold only a-z, A-Z, 0-9, '_', '-' and '.'", sub);
    json_t *d = json_object_get(fn, "description");
    snprintf(sub, sizeof(sub), "%s.description", param);
    if (!absent(d) && !json_is_string(d)) return BAD(err, sub, "'%s' must be a string", sub);
    json_t *ps = json_object_get(fn, "parameters");
    snprintf(sub, sizeof(sub), "%s.parameters", param);
    if (!absent(ps) && !json_is_object(ps))
        return BAD(err, sub, "'%s' must be a JSON Schema object", sub);
    json_t *strict = json_object_get(fn, "strict");
    snprintf(sub, sizeof(sub), "%s.strict", param);
    if (json_is_true(strict))
        return BAD(err, sub,
                   "'%s' true is not supported yet (it needs constrained decoding); calls are "
                   "parsed from the model's output and checked for their function name only",
                   sub);
    return true;
}

static bool add_tool_name(struct tl_oai_params *p, json_t *fn, const char *param,
                          struct tl_oai_error *err)
{
    const char *name = json_string_value(json_object_get(fn, "name"));
    for (int i = 0; i < p->n_tool_names; i++)
        if (!strcmp(p->tool_names[i], name))
            return BAD(err, param, "'%s': function '%s' is defined twice", param, name);
    p->tool_names[p->n_tool_names++] = name;
    return true;
}

// tools (or the legacy functions): checked, and the offered names kept in p->tool_names (the
// template receives the list itself, see chat_template.c).
static bool parse_tool_list(json_t *root, struct tl_oai_params *p, struct tl_oai_error *err)
{
    json_t *tools = json_object_get(root, "tools");
    json_t *functions = json_object_get(root, "functions");
    if (!absent(tools) && !absent(functions))
        return BAD(err, "functions", "give 'tools' or the older 'functions', not both");
    bool legacy = absent(tools);
    json_t *list = legacy ? functions : tools;
    const char *key = legacy ? "functions" : "tools";
    if (absent(list)) return true;
    if (!json_is_array(list)) return BAD(err, key, "'%s' must be a list", key);
    size_t n = json_array_size(list);
    if (n == 0) return true; // an empty list offers nothing (OpenAI accepts it)
    if (n > TL_OAI_MAX_TOOLS)
        return BAD(err, key, "'%s' may hold at most %d entries, got %zu", key, TL_OAI_MAX_TOOLS, n);
    p->tool_names = tl_calloc_array(n, sizeof(*p->tool_names));
    if (!p->tool_names) return tl_oai_error_from_status(err, TL_ERR_NOMEM, "out of memory"), false;
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(list, i);
        char param[64];
        snprintf(param, sizeof(param), "%s[%zu]", key, i);
        if (legacy) {
            if (!check_function(t, param, err) || !add_tool_name(p, t, param, err)) return false;
            continue;
        }
        if (!json_is_object(t)) return BAD(err, param, "'%s' must be an object", param);
        char sub[80];
        snprintf(sub, sizeof(sub), "%s.type", param);
        if (!str_is(json_object_get(t, "type"), "function"))
            return BAD(err, sub, "'%s' must be \"function\" (the only tool type supported)", sub);
        snprintf(sub, sizeof(sub), "%s.function", param);
        json_t *fn = json_object_get(t, "function");
        if (!check_function(fn, sub, err) || !add_tool_name(p, fn, sub, err)) return false;
    }
    return true;
}

// tool_choice "required" / a named function (function_call {"name"}): the reply is forced to
// be a call (tl__oai_forced_call_grammar builds its grammar once the syntax is known).
static bool force_call(json_t *tc, const char *key, struct tl_oai_params *p,
                       struct tl_oai_error *err)
{
    if (p->n_tool_names == 0)
        return BAD(err, key, "'%s' that forces a call needs '%s'", key,
                   strcmp(key, "tool_choice") ? "functions" : "tools");
    p->tool_forced = true;
    p->tool_forced_name = NULL;
    if (json_is_object(tc)) {
        json_t *fn = strcmp(key, "tool_choice") ? tc : json_object_get(tc, "function");
        json_t *name = json_object_get(fn, "name");
        if (!json_is_string(name))
            return BAD(err, key, "'%s' must name the function: %s", key,
                       strcmp(key, "tool_choice") ? "{\"name\": ...}"
                                                  : "{\"type\": \"function\", \"function\": "
                                                    "{\"name\": ...}}");
        for (int i = 0; i < p->n_tool_names; i++)
            if (!strcmp(p->tool_names[i], json_string_value(name)))
                p->tool_forced_name = p->tool_names[i];
        if (!p->tool_forced_name)
            return BAD(err, key, "'%s' names function '%s', which is not offered", key,
                       json_string_value(name));
    }
    return true;
}

bool tl__oai_parse_tools(json_t *root, struct tl_oai_params *p, struct tl_oai_error *err)
{
    if (!parse_tool_list(root, p, err)) return false;
    p->tool_choice_auto = p->n_tool_names > 0;
    json_t *tc = json_object_get(root, "tool_choice");
    const char *key = "tool_choice";
    if (absent(tc)) {
        tc = json_object_get(root, "function_call");
        key = "function_call";
    }
    if (!absent(tc)) {
        if (str_is(tc, "none")) {
            p->tool_choice_auto = false;
        } else if (str_is(tc, "auto")) {
            if (p->n_tool_names == 0)
                return BAD(err, key, "'%s' is only allowed when '%s' are given", key,
                           strcmp(key, "tool_choice") ? "functions" : "tools");
        } else if (str_is(tc, "required") || json_is_object(tc)) {
            if (json_is_object(tc) && strcmp(key, "function_call") &&
                !str_is(json_object_get(tc, "type"), "function"))
                return BAD(err, key,
                           "'%s' must be \"none\", \"auto\", \"required\" or {\"type\": "
                           "\"function\", \"function\": {\"name\": ...}}",
                           key);
            if (!force_call(tc, key, p, err)) return false;
        } else {
            return BAD(err, key, "'%s' must be \"none\", \"auto\", \"required\" or a function",
                       key);
        }
    }
    json_t *ptc = json_object_get(root, "parallel_tool_calls");
    p->parallel_tool_calls = true;
    if (!absent(ptc)) {
        if (!json_is_boolean(ptc))
            return BAD(err, "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
        p->parallel_tool_calls = json_is_true(ptc);
    }
    return true;
}

// ---- tool-calling messages --------------------------------------------------------------------

// An assistant message's tool_calls: [{"id", "type": "function", "function": {"name",
// "arguments" (a JSON string)}}].
static bool check_tool_calls(json_t *calls, size_t i, struct tl_oai_error *err)
{
    char param[96];
    snprintf(param, sizeof(param), "messages[%zu].tool_calls", i);
    if (!json_is_array(calls)) return BAD(err, param, "'%s' must be a list", param);
    for (size_t k = 0; k < json_array_size(calls); k++) {
        json_t *c = json_array_get(calls, k);
        snprintf(param, sizeof(param), "messages[%zu].tool_calls[%zu]", i, k);
        if (!json_is_object(c)) return BAD(err, param, "'%s' must be an object", param);
        json_t *id = json_object_get(c, "id");
        json_t *type = json_object_get(c, "type");
        json_t *fn = json_object_get(c, "function");
        json_t *name = json_object_get(fn, "name");
        json_t *args = json_object_get(fn, "arguments");
        if (!json_is_string(id)) return BAD(err, param, "'%s.id' must be a string", param);
        if (!absent(type) && !str_is(type, "function"))
            return BAD(err, param, "'%s.type' must be \"function\"", param);
        if (!json_is_object(fn) || !json_is_string(name) || !json_is_string(args))
            return BAD(err, param,
                       "'%s.function' must be {\"name\": string, \"arguments\": string}", param);
    }
    return true;
}

bool tl__oai_check_tool_message(json_t *m, size_t i, bool is_tool, struct tl_oai_error *err)
{
    char param[96];
    if (is_tool) {
        json_t *id = json_object_get(m, "tool_call_id");
        snprintf(param, sizeof(param), "messages[%zu].tool_call_id", i);
        if (!json_is_string(id))
            return BAD(err, param, "'%s' is required for a tool message (a string)", param);
        return true;
    }
    json_t *fc = json_object_get(m, "function_call");
    snprintf(param, sizeof(param), "messages[%zu].function_call", i);
    if (!absent(fc)) return BAD(err, param, "'%s' is not supported: use 'tool_calls'", param);
    json_t *calls = json_object_get(m, "tool_calls");
    return absent(calls) || check_tool_calls(calls, i, err);
}

// ---- forced calls ---------------------------------------------------------------------------

// The text around calls in each syntax a forced call supports (NULL: not supported).
static bool call_form(enum tl_tool_syntax syntax, bool parallel, struct tl_gcall_form *f)
{
    *f = (struct tl_gcall_form){"", "", "", "", ", ", "arguments"};
    switch (syntax) {
    case TL_TOOL_GENERIC: // the whole reply is JSON: one call object, or a list of them
        if (parallel) *f = (struct tl_gcall_form){"[", "]", "", "", ", ", "arguments"};
        return true;
    case TL_TOOL_HERMES:
        *f = (struct tl_gcall_form){"", "", "<tool_call>\n", "\n</tool_call>", "\n", "arguments"};
        return true;
    case TL_TOOL_LLAMA3: // one bare JSON object at the start
        f->args_key = "parameters";
        return true;
    case TL_TOOL_MISTRAL:
        *f = (struct tl_gcall_form){"[TOOL_CALLS][", "]", "", "", ", ", "arguments"};
        return true;
    case TL_TOOL_FIREFUNCTION_V2:
        *f = (struct tl_gcall_form){"functools[", "]", "", "", ", ", "arguments"};
        return true;
    default:
        return false;
    }
}

bool tl__oai_forced_call_grammar(struct tl_oai_params *p, enum tl_tool_syntax syntax,
                                 struct tl_oai_error *err)
{
    const char *key = json_object_get(p->root, "tool_choice") ? "tool_choice" : "function_call";
    if (p->grammar || p->grammar_kind != TL_GRAMMAR_NONE)
        return BAD(err, key,
                   "'%s' that forces a call cannot be combined with a structured-output field "
                   "(response_format, grammar, guided_*)",
                   key);
    bool parallel = p->parallel_tool_calls && !p->tool_forced_name && syntax != TL_TOOL_LLAMA3;
    struct tl_gcall_form form;
    if (!call_form(syntax, parallel, &form))
        return BAD(err, key,
                   "'%s' that forces a call is not supported with the '%s' tool-call syntax "
                   "(supported: generic, hermes, llama3, mistral, firefunction-v2)",
                   key, tl_tool_syntax_name(syntax));
    // The offered functions ({"name", "parameters"}), or only the named one.
    json_t *tools = json_object_get(p->root, "tools"), *fns = json_array();
    bool legacy = absent(tools);
    if (legacy) tools = json_object_get(p->root, "functions");
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *fn = json_array_get(tools, i);
        if (!legacy) fn = json_object_get(fn, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!p->tool_forced_name || !strcmp(name, p->tool_forced_name)) json_array_append(fns, fn);
    }
    char *gbnf = NULL;
    tl_status st = tl_grammar_tool_call_gbnf(&form, fns, parallel, &gbnf);
    json_decref(fns);
    if (st) {
        tl_oai_error_from_status(err, st, tl_last_error());
        snprintf(err->param, sizeof(err->param), "%s", legacy ? "functions" : "tools");
        return false;
    }
    p->grammar = tl_grammar_lookup(TL_GRAMMAR_GBNF, gbnf, strlen(gbnf));
    if (p->grammar) {
        free(gbnf);
        return true;
    }
    p->grammar_kind = TL_GRAMMAR_GBNF;
    p->grammar_src = gbnf;
    p->grammar_len = strlen(gbnf);
    p->grammar_param = legacy ? "functions" : "tools";
    return true;
}
