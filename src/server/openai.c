/*
 * OpenAI request parsing and validation (see openai.h); the fields beyond the basics are read
 * in openai_fields.c, the error object is filled in openai_error.c, and the response objects
 * are built in openai_reply.c.
 *
 * Validation names the offending field in both the message and the error's "param", the way
 * the OpenAI API does ("'temperature' must be between 0 and 2"), so a client can tell what to
 * fix. Fields we do not know are ignored (clients send many optional ones); fields we know are
 * type- and range-checked strictly: an integer field does not take 1.5 or "3". Fields of the
 * OpenAI API that tokenloom does not implement are refused by name (openai_fields.c).
 *
 * The JSON parser is jansson's: it rejects invalid UTF-8, numbers out of range and nesting
 * deeper than its fixed limit, so none of those reach this code. Prompt and message strings
 * may contain NUL (JSON "\u0000"); they are carried with explicit lengths.
 *
 * Ownership: a tl_oai_params owns the parsed document and everything it allocated; strings it
 * exposes point into the document. Pure functions; thread-safe.
 */
#include "server/openai.h"

#include "core/alloc.h"
#include "core/error.h"
#include "core/utf8.h"
#include "core/strbuf.h"
#include "grammar/grammar.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

// Memory ran out while parsing: 503, not the client's fault.
static bool no_memory(struct tl_oai_error *err)
{
    tl_oai_error_from_status(err, TL_ERR_NOMEM, "out of memory parsing the request");
    return false;
}

static bool bad(struct tl_oai_error *err, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool bad(struct tl_oai_error *err, const char *param, const char *fmt, ...)
{
    err->http_status = 400;
    err->type = "invalid_request_error";
    err->code = "invalid_value";
    snprintf(err->param, sizeof(err->param), "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
    return false;
}

// ---- field readers: absent or null keeps the default -----------------------------------------

static bool get_number(json_t *root, const char *key, double lo, double hi, bool lo_open,
                       float *out, struct tl_oai_error *err)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_number(v)) return bad(err, key, "'%s' must be a number", key);
    double d = json_number_value(v);
    if (!(lo_open ? d > lo : d >= lo) || !(d <= hi))
        return bad(err, key, "'%s' must be %s %g and at most %g, got %g", key,
                   lo_open ? "greater than" : "at least", lo, hi, d);
    *out = (float)d;
    return true;
}

static bool get_int(json_t *root, const char *key, int64_t lo, int64_t hi, int64_t *out,
                    bool *present, struct tl_oai_error *err)
{
    json_t *v = json_object_get(root, key);
    if (present) *present = false;
    if (!v || json_is_null(v)) return true;
    if (!json_is_integer(v)) return bad(err, key, "'%s' must be an integer", key);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return bad(err, key, "'%s' must be between %lld and %lld, got %lld", key, (long long)lo,
                   (long long)hi, (long long)x);
    *out = x;
    if (present) *present = true;
    return true;
}

static bool get_bool(json_t *root, const char *key, bool *out, struct tl_oai_error *err)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_boolean(v)) return bad(err, key, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return true;
}

// True when v is a JSON string equal to lit. Strings may hold NUL ("\u0000"), so a plain
// strcmp would take "user\u0000anything" for "user".
static bool str_is(json_t *v, const char *lit)
{
    return json_is_string(v) && json_string_length(v) == strlen(lit) &&
           memcmp(json_string_value(v), lit, json_string_length(v)) == 0;
}

// ---- prompts and messages --------------------------------------------------------------------

static bool token_array(json_t *arr, const char *param, const struct tl_oai_limits *lim,
                        struct tl_oai_prompt *out, struct tl_oai_error *err)
{
    size_t n = json_array_size(arr);
    if (n == 0) return bad(err, param, "'%s' must not be an empty token list", param);
    out->tokens = tl_malloc_array(n, sizeof(int32_t));
    if (!out->tokens) return no_memory(err);
    out->n_tokens = (int64_t)n;
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(arr, i);
        if (!json_is_integer(t))
            return bad(err, param, "'%s' must be a list of token ids (integers)", param);
        json_int_t id = json_integer_value(t);
        if (id < 0 || id >= lim->n_vocab)
            return bad(err, param, "'%s': token id %lld is out of range [0, %d)", param,
                       (long long)id, (int)lim->n_vocab);
        out->tokens[i] = (int32_t)id;
    }
    return true;
}

static bool parse_prompt(json_t *root, const struct tl_oai_limits *lim, struct tl_oai_params *p,
                         struct tl_oai_error *err)
{
    json_t *v = json_object_get(root, "prompt");
    if (!v || json_is_null(v)) return bad(err, "prompt", "'prompt' is required");
    if (json_is_string(v)) {
        if (json_string_length(v) == 0)
            return bad(err, "prompt",
                       "'prompt' must not be empty (as vLLM, an empty prompt is "
                       "refused)");
        p->prompts = tl_calloc_array(1, sizeof(*p->prompts));
        if (!p->prompts) return no_memory(err);
        p->n_prompts = 1;
        p->prompts[0].text = json_string_value(v);
        p->prompts[0].text_len = json_string_length(v);
        return true;
    }
    if (!json_is_array(v))
        return bad(err, "prompt",
                   "'prompt' must be a string, a list of strings, a list of token ids or a "
                   "list of token-id lists");
    size_t n = json_array_size(v);
    if (n == 0) return bad(err, "prompt", "'prompt' must not be empty");
    json_t *first = json_array_get(v, 0);
    if (json_is_integer(first)) { // one prompt of token ids
        p->prompts = tl_calloc_array(1, sizeof(*p->prompts));
        if (!p->prompts) return no_memory(err);
        p->n_prompts = 1;
        return token_array(v, "prompt", lim, &p->prompts[0], err);
    }
    if (n > TL_OAI_MAX_PROMPTS)
        return bad(err, "prompt", "'prompt' has %zu entries; at most %d are allowed", n,
                   TL_OAI_MAX_PROMPTS);
    p->prompts = tl_calloc_array(n, sizeof(*p->prompts));
    if (!p->prompts) return no_memory(err);
    p->n_prompts = (int)n;
    bool strings = json_is_string(first);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(v, i);
        if (strings && json_is_string(e)) {
            if (json_string_length(e) == 0)
                return bad(err, "prompt", "'prompt' must not hold an empty string");
            p->prompts[i].text = json_string_value(e);
            p->prompts[i].text_len = json_string_length(e);
        } else if (!strings && json_is_array(e)) {
            if (!token_array(e, "prompt", lim, &p->prompts[i], err)) return false;
        } else {
            return bad(err, "prompt",
                       "'prompt' must be a string, a list of strings, a list of token ids or "
                       "a list of token-id lists (entries may not be mixed)");
        }
    }
    return true;
}

static bool own_string(struct tl_oai_params *p, char *s)
{
    char **grown = tl_realloc_array(p->owned, (size_t)p->n_owned + 1, sizeof(*grown));
    if (!grown) {
        free(s);
        return false;
    }
    p->owned = grown;
    p->owned[p->n_owned++] = s;
    return true;
}

static bool parse_content(json_t *c, int i, struct tl_chat_msg *m, struct tl_oai_params *p,
                          struct tl_oai_error *err)
{
    char param[64];
    snprintf(param, sizeof(param), "messages[%d].content", i);
    if (!c || json_is_null(c)) {
        if (m->role != TL_CHAT_ASSISTANT) return bad(err, param, "'%s' is required", param);
        m->content = "";
        m->content_len = 0;
        return true;
    }
    if (json_is_string(c)) {
        m->content = json_string_value(c);
        m->content_len = json_string_length(c);
        return true;
    }
    if (!json_is_array(c))
        return bad(err, param, "'%s' must be a string or a list of content parts", param);
    // A list of parts: the text parts are joined with newlines (as vLLM does).
    struct tl_sb sb;
    tl_sb_init(&sb);
    for (size_t j = 0; j < json_array_size(c); j++) {
        json_t *part = json_array_get(c, j);
        json_t *type = json_object_get(part, "type");
        json_t *text = json_object_get(part, "text");
        if (!json_is_object(part) || !str_is(type, "text") || !json_is_string(text)) {
            tl_sb_free(&sb);
            snprintf(param, sizeof(param), "messages[%d].content[%zu]", i, j);
            return bad(err, param,
                       "'%s' must be {\"type\": \"text\", \"text\": ...}; only text content is "
                       "supported",
                       param);
        }
        if (j) tl_sb_add(&sb, "\n", 1);
        tl_sb_add(&sb, json_string_value(text), json_string_length(text));
    }
    size_t len;
    char *s = tl_sb_take(&sb, &len);
    if (!s || !own_string(p, s)) return no_memory(err);
    m->content = s;
    m->content_len = len;
    return true;
}

static bool parse_messages(json_t *root, struct tl_oai_params *p, struct tl_oai_error *err)
{
    json_t *v = json_object_get(root, "messages");
    if (!v || json_is_null(v)) return bad(err, "messages", "'messages' is required");
    if (!json_is_array(v)) return bad(err, "messages", "'messages' must be a list");
    size_t n = json_array_size(v);
    if (n == 0) return bad(err, "messages", "'messages' must not be empty");
    if (n > TL_OAI_MAX_MESSAGES)
        return bad(err, "messages", "'messages' has %zu entries; at most %d are allowed", n,
                   TL_OAI_MAX_MESSAGES);
    p->msgs = tl_calloc_array(n, sizeof(*p->msgs));
    if (!p->msgs) return no_memory(err);
    p->n_msgs = (int)n;
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(v, i);
        char param[64];
        snprintf(param, sizeof(param), "messages[%zu]", i);
        if (!json_is_object(m)) return bad(err, param, "'%s' must be an object", param);
        json_t *role = json_object_get(m, "role");
        snprintf(param, sizeof(param), "messages[%zu].role", i);
        if (!json_is_string(role)) return bad(err, param, "'%s' must be a string", param);
        if (str_is(role, "system") || str_is(role, "developer"))
            p->msgs[i].role = TL_CHAT_SYSTEM;
        else if (str_is(role, "user"))
            p->msgs[i].role = TL_CHAT_USER;
        else if (str_is(role, "assistant"))
            p->msgs[i].role = TL_CHAT_ASSISTANT;
        else if (str_is(role, "tool"))
            p->msgs[i].role = TL_CHAT_TOOL;
        else
            return bad(err, param, "'%s' must be one of system, developer, user, assistant, tool",
                       param);
        bool tool = p->msgs[i].role == TL_CHAT_TOOL;
        if ((tool || p->msgs[i].role == TL_CHAT_ASSISTANT) &&
            !tl__oai_check_tool_message(m, i, tool, err))
            return false;
        if (!parse_content(json_object_get(m, "content"), (int)i, &p->msgs[i], p, err))
            return false;
    }
    return true;
}

static bool parse_stop(json_t *root, struct tl_oai_params *p, struct tl_oai_error *err)
{
    json_t *v = json_object_get(root, "stop");
    if (!v || json_is_null(v)) return true;
    json_t *one[1] = {v};
    size_t n = 1;
    if (json_is_array(v)) {
        n = json_array_size(v);
        if (n > TL_OAI_MAX_STOP)
            return bad(err, "stop", "'stop' may hold at most %d strings, got %zu", TL_OAI_MAX_STOP,
                       n);
    } else if (!json_is_string(v)) {
        return bad(err, "stop", "'stop' must be a string or a list of strings");
    }
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_array(v) ? json_array_get(v, i) : one[0];
        if (!json_is_string(s)) return bad(err, "stop", "'stop' must hold only strings");
        size_t len = json_string_length(s);
        if (len > TL_OAI_MAX_STOP_LEN)
            return bad(err, "stop", "a 'stop' string may be at most %d bytes", TL_OAI_MAX_STOP_LEN);
        if (strlen(json_string_value(s)) != len)
            return bad(err, "stop", "a 'stop' string may not contain NUL");
        if (len == 0) continue; // an empty stop string would end every request at once
        p->stop[p->n_stop++] = json_string_value(s);
    }
    return true;
}

// ---- the whole request -----------------------------------------------------------------------

bool tl_oai_model_field(json_t *root, const char **model, struct tl_oai_error *err)
{
    *model = NULL;
    json_t *m = json_object_get(root, "model");
    if (!m || json_is_null(m)) return true;
    if (!json_is_string(m)) return bad(err, "model", "'model' must be a string");
    if (strlen(json_string_value(m)) != json_string_length(m))
        return bad(err, "model", "'model' may not contain NUL");
    *model = json_string_value(m);
    return true;
}

static bool parse_fields(json_t *root, const struct tl_oai_limits *lim, struct tl_oai_params *p,
                         struct tl_oai_error *err)
{
    bool chat = p->kind == TL_OAI_CHAT;
    if (!tl_oai_model_field(root, &p->model, err)) return false;
    if (!tl__oai_check_refused(root, p->kind, err)) return false;
    if (chat ? !parse_messages(root, p, err) : !parse_prompt(root, lim, p, err)) return false;
    if (!tl__oai_parse_logit_bias(root, lim, p, err)) return false;
    if (chat && !tl__oai_parse_tools(root, p, err)) return false;

    int64_t v = 0;
    bool present = false;
    if (!get_int(root, "max_tokens", 1, INT32_MAX, &v, &present, err)) return false;
    if (present) p->max_tokens = (int32_t)v;
    if (chat) {
        if (!get_int(root, "max_completion_tokens", 1, INT32_MAX, &v, &present, err)) return false;
        if (present) p->max_tokens = (int32_t)v;
    }
    struct tl_sampling *s = &p->sampling;
    if (!get_number(root, "temperature", 0, 2, false, &s->temperature, err) ||
        !get_number(root, "top_p", 0, 1, true, &s->top_p, err) ||
        !get_number(root, "min_p", 0, 1, false, &s->min_p, err) ||
        !get_number(root, "presence_penalty", -2, 2, false, &s->presence_penalty, err) ||
        !get_number(root, "frequency_penalty", -2, 2, false, &s->frequency_penalty, err) ||
        !get_number(root, "repetition_penalty", 0, 10, true, &s->repetition_penalty, err))
        return false;
    if (!get_int(root, "top_k", -1, INT32_MAX, &v, &present, err)) return false;
    if (present) s->top_k = v < 0 ? 0 : (int32_t)v; // -1 means off, as in vLLM
    if (!get_int(root, "seed", INT64_MIN, INT64_MAX, &v, &p->seed_set, err)) return false;
    if (p->seed_set) s->seed = (uint64_t)v;
    if (!get_int(root, "n", 1, TL_OAI_MAX_N, &v, &present, err)) return false;
    if (present) p->n = (int)v;
    if (!chat && (int64_t)p->n * p->n_prompts > TL_OAI_MAX_CHOICES)
        return bad(err, "n", "'n' times the number of prompts may be at most %d",
                   TL_OAI_MAX_CHOICES);
    if (!parse_stop(root, p, err)) return false;
    if (!get_bool(root, "stream", &p->stream, err)) return false;
    json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so))
            return bad(err, "stream_options", "'stream_options' must be an object");
        if (!p->stream)
            return bad(err, "stream_options",
                       "'stream_options' is only allowed when 'stream' is true");
        json_t *iu = json_object_get(so, "include_usage");
        if (iu && !json_is_null(iu) && !json_is_boolean(iu))
            return bad(err, "stream_options.include_usage",
                       "'stream_options.include_usage' must be a boolean");
        p->include_usage = json_is_true(iu);
    }
    if (chat) {
        if (!get_bool(root, "logprobs", &p->logprobs, err)) return false;
        if (!get_int(root, "top_logprobs", 0, TL_OAI_MAX_LOGPROBS, &v, &present, err)) return false;
        if (present) {
            if (!p->logprobs && v > 0)
                return bad(err, "top_logprobs", "'top_logprobs' needs 'logprobs' to be true");
            p->top_logprobs = (int32_t)v;
        }
    } else {
        if (!get_int(root, "logprobs", 0, TL_OAI_MAX_LOGPROBS, &v, &present, err)) return false;
        if (present) {
            p->logprobs = true;
            p->top_logprobs = (int32_t)v;
        }
        if (!get_bool(root, "echo", &p->echo, err)) return false;
    }
    s->n_logprobs = p->top_logprobs;
    if (!get_bool(root, "ignore_eos", &p->ignore_eos, err)) return false;
    if (!get_int(root, "priority", INT32_MIN, INT32_MAX, &v, &present, err)) return false;
    if (present) p->priority = (int32_t)v;
    json_t *to = json_object_get(root, "timeout");
    if (to && !json_is_null(to)) {
        if (!json_is_number(to)) return bad(err, "timeout", "'timeout' must be a number (seconds)");
        double sec = json_number_value(to);
        if (!(sec > 0) || sec > 86400.0 * 7)
            return bad(err, "timeout",
                       "'timeout' must be greater than 0 and at most 604800 "
                       "seconds");
        p->timeout_ms = (int64_t)ceil(sec * 1000.0);
    }
    // Structured output (src/grammar/fields.c): from the LRU, else compiled here (bounded in
    // size and time) or, with lim->defer_grammar, left to the caller to compile off the loop.
    const char *gparam = NULL;
    tl_status grc;
    if (lim->defer_grammar) {
        enum tl_grammar_kind gk;
        char *gsrc;
        size_t glen;
        grc = tl_grammar_fields_source(root, &gk, &gsrc, &glen, &gparam);
        if (!grc && gk != TL_GRAMMAR_NONE) {
            p->grammar = tl_grammar_lookup(gk, gsrc, glen);
            if (p->grammar) {
                free(gsrc);
            } else {
                p->grammar_kind = gk;
                p->grammar_src = gsrc;
                p->grammar_len = glen;
                p->grammar_param = gparam;
            }
        }
    } else {
        grc = tl_grammar_from_fields(root, &p->grammar, &gparam);
    }
    if (grc) {
        tl_oai_error_from_status(err, grc, tl_last_error());
        snprintf(err->param, sizeof(err->param), "%s", gparam ? gparam : "");
        return false;
    }
    return true;
}

bool tl_oai_parse_root(enum tl_oai_kind kind, json_t *root, const struct tl_oai_limits *lim,
                       struct tl_oai_params *p, struct tl_oai_error *err)
{
    memset(p, 0, sizeof(*p));
    p->kind = kind;
    p->n = 1;
    tl_sampling_default(&p->sampling);
    p->root = root;
    if (!json_is_object(p->root)) {
        bad(err, NULL, "the request body must be a JSON object");
        tl_oai_params_free(p);
        return false;
    }
    if (!parse_fields(p->root, lim, p, err)) {
        tl_oai_params_free(p);
        return false;
    }
    return true;
}

// jansson's parser does not survive a failed allocation (2.14 asserts in lex_scan_string, or
// reports a syntax error), so while parsing on this thread its allocations bypass fault
// injection; everything it builds or dumps for us goes through tl_malloc.
static _Thread_local bool json_parsing;

static void *json_alloc(size_t n)
{
    return json_parsing ? malloc(n) : tl_malloc(n);
}

void tl_oai_use_tl_alloc(void)
{
    json_set_alloc_funcs(json_alloc, free);
}

json_t *tl_oai_load_body(const char *body, size_t len, struct tl_oai_error *err)
{
    json_error_t jerr;
    json_parsing = true;
    json_t *root = json_loadb(body ? body : "", len, JSON_ALLOW_NUL, &jerr);
    json_parsing = false;
    if (!root && json_error_code(&jerr) == json_error_out_of_memory)
        tl_oai_error_from_status(err, TL_ERR_NOMEM, "out of memory reading the body");
    else if (!root)
        bad(err, NULL, "malformed JSON body: %s (line %d, column %d)", jerr.text, jerr.line,
            jerr.column);
    return root;
}

bool tl_oai_parse(enum tl_oai_kind kind, const char *body, size_t len,
                  const struct tl_oai_limits *lim, struct tl_oai_params *p,
                  struct tl_oai_error *err)
{
    memset(p, 0, sizeof(*p));
    json_t *root = tl_oai_load_body(body, len, err);
    return root && tl_oai_parse_root(kind, root, lim, p, err);
}

void tl_oai_params_free(struct tl_oai_params *p)
{
    for (int i = 0; i < p->n_prompts; i++)
        free(p->prompts[i].tokens);
    free(p->prompts);
    free(p->msgs);
    free(p->logit_bias);
    free(p->tool_names);
    for (int i = 0; i < p->n_owned; i++)
        free(p->owned[i]);
    free(p->owned);
    json_decref(p->root);
    tl_grammar_unref(p->grammar);
    free(p->grammar_src);
    json_decref(p->responses);
    memset(p, 0, sizeof(*p));
}
