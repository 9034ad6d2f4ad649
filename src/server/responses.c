/*
 * The Responses API's requests (see responses.h): a Responses body checked and translated into
 * the chat body an OpenAI client would write, with previous_response_id's conversation read
 * from the store (what is stored, and the routes that read it: responses_stored.c).
 *
 * DESIGN
 * Every field of the Responses API is either translated, accepted as having no effect on the
 * output (user, metadata, safety_identifier, prompt_cache_key), or refused with a 400 naming it,
 * as on the chat path (openai_fields.c); a field the API does not define is a 400 too. Built-in
 * tools (web_search, file_search, computer_use, ...) are refused naming the tool. Input items:
 *   {"role", "content"} or {"type": "message", ...}: a message (content a string or a list of
 *     input_text / output_text parts, joined by newlines as the chat path joins its parts);
 *   {"type": "function_call", "call_id", "name", "arguments"}: a call of the assistant (calls in
 *     a row, and the assistant text just before them, make one assistant message);
 *   {"type": "function_call_output", "call_id", "output"}: a tool message; its call_id must
 *     name a call made before it;
 *   {"type": "reasoning", ...}: kept in the conversation, not shown to the template.
 * The conversation a response stores is its chain's items then its own output, so a
 * previous_response_id gives the model the whole conversation; instructions are not carried
 * over (as OpenAI).
 *
 * Threads: the event-loop thread.
 */
#include "server/responses.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "core/strbuf.h"
#include "server/route_checks.h"
#include "server/state.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define BAD(err, param, ...)                                                                       \
    (tl_oai_error_set((err), 400, "invalid_request_error", "invalid_value", (param), __VA_ARGS__), \
     false)

static bool absent(const json_t *v)
{
    return !v || json_is_null(v);
}

static bool str_is(const json_t *v, const char *lit)
{
    return json_is_string(v) && !strcmp(json_string_value(v), lit) &&
           strlen(lit) == json_string_length(v);
}

static bool nomem(struct tl_oai_error *err)
{
    tl_oai_error_from_status(err, TL_ERR_NOMEM, "out of memory");
    return false;
}

// ---- the fields ------------------------------------------------------------------------------

// The fields of the Responses API this server takes (translated or of no effect on the output).
static const char *const known_fields[] = {"model",
                                           "input",
                                           "instructions",
                                           "max_output_tokens",
                                           "temperature",
                                           "top_p",
                                           "tools",
                                           "tool_choice",
                                           "parallel_tool_calls",
                                           "text",
                                           "reasoning",
                                           "stream",
                                           "store",
                                           "previous_response_id",
                                           "metadata",
                                           "user",
                                           "safety_identifier",
                                           "prompt_cache_key",
                                           "include",
                                           "truncation",
                                           "service_tier",
                                           "background",
                                           "top_logprobs",
                                           "stream_options",
                                           "max_tool_calls",
                                           "prompt",
                                           "conversation",
                                           "prompt_cache_retention"};

// Known fields refused unless absent, null or neutral (see neutral()).
static const struct {
    const char *key, *why;
} refused[] = {
    {"include", "is not supported: tokenloom has no extra output to include; only [] is accepted"},
    {"truncation", "is not supported: only \"disabled\" is accepted"},
    {"service_tier", "is not supported: only \"auto\" and \"default\" are accepted"},
    {"background", "is not supported: only false is accepted"},
    {"top_logprobs", "is not supported on /v1/responses; only 0 is accepted"},
    {"stream_options", "is not supported"},
    {"max_tool_calls", "is not supported"},
    {"prompt", "(prompt templates) is not supported"},
    {"conversation", "is not supported: use 'previous_response_id'"},
    {"prompt_cache_retention", "is not supported"},
};

static bool neutral(const char *key, const json_t *v)
{
    if (!strcmp(key, "include")) return json_is_array(v) && json_array_size(v) == 0;
    if (!strcmp(key, "truncation")) return str_is(v, "disabled");
    if (!strcmp(key, "service_tier")) return str_is(v, "auto") || str_is(v, "default");
    if (!strcmp(key, "background")) return json_is_false(v);
    if (!strcmp(key, "top_logprobs")) return json_is_integer(v) && json_integer_value(v) == 0;
    return false;
}

static bool check_fields(json_t *body, struct tl_oai_error *err)
{
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v)
    {
        bool known = false;
        for (size_t i = 0; i < sizeof(known_fields) / sizeof(known_fields[0]); i++)
            known = known || !strcmp(key, known_fields[i]);
        if (!known) return BAD(err, key, "'%.60s' is not a field of the Responses API", key);
    }
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        v = json_object_get(body, refused[i].key);
        if (!absent(v) && !neutral(refused[i].key, v))
            return BAD(err, refused[i].key, "'%s' %s", refused[i].key, refused[i].why);
    }
    json_t *store = json_object_get(body, "store");
    if (!absent(store) && !json_is_boolean(store))
        return BAD(err, "store", "'store' must be a boolean");
    json_t *md = json_object_get(body, "metadata");
    if (!absent(md) && !json_is_object(md))
        return BAD(err, "metadata", "'metadata' must be an object");
    json_t *ins = json_object_get(body, "instructions");
    if (!absent(ins) && !json_is_string(ins))
        return BAD(err, "instructions", "'instructions' must be a string");
    json_t *mot = json_object_get(body, "max_output_tokens");
    if (!absent(mot) && (!json_is_integer(mot) || json_integer_value(mot) < 1 ||
                         json_integer_value(mot) > INT32_MAX))
        return BAD(err, "max_output_tokens", "'max_output_tokens' must be a positive integer");
    json_t *rs = json_object_get(body, "reasoning");
    if (!absent(rs)) {
        if (!json_is_object(rs)) return BAD(err, "reasoning", "'reasoning' must be an object");
        json_object_foreach(rs, key, v)
        {
            if (absent(v)) continue;
            char param[80];
            snprintf(param, sizeof(param), "reasoning.%.60s", key);
            return BAD(err, param,
                       "'%s' is not supported: the model decides how long it reasons, and its "
                       "reasoning comes back whole as reasoning items",
                       param);
        }
    }
    return true;
}

// ---- tools -----------------------------------------------------------------------------------

static bool translate_tool_choice(json_t *body, json_t *chat, struct tl_oai_error *err);

// tools (flat function tools) into the chat shape; built-in tools are refused by name.
static bool translate_tools(json_t *body, json_t *chat, struct tl_oai_error *err)
{
    json_t *tools = json_object_get(body, "tools");
    if (absent(tools)) return translate_tool_choice(body, chat, err);
    if (!json_is_array(tools)) return BAD(err, "tools", "'tools' must be a list");
    json_t *out = json_array();
    if (!out || json_object_set_new(chat, "tools", out)) return nomem(err);
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *t = json_array_get(tools, i);
        char param[64];
        snprintf(param, sizeof(param), "tools[%zu]", i);
        json_t *type = json_object_get(t, "type");
        if (!json_is_object(t) || !json_is_string(type))
            return BAD(err, param, "'%s' must be an object with a \"type\"", param);
        if (!str_is(type, "function"))
            return BAD(err, param,
                       "'%s' is the built-in tool '%.60s', which tokenloom does not have; only "
                       "function tools are supported",
                       param, json_string_value(type));
        json_t *fn = json_object();
        const char *key;
        json_t *v;
        json_object_foreach(t, key, v)
        {
            if (!strcmp(key, "type")) continue;
            if (strcmp(key, "name") && strcmp(key, "description") && strcmp(key, "parameters") &&
                strcmp(key, "strict")) {
                json_decref(fn);
                return BAD(err, param, "'%s.%.40s' is not a field of a function tool", param, key);
            }
            if (fn && json_object_set(fn, key, v)) {
                json_decref(fn);
                return nomem(err);
            }
        }
        if (!json_is_string(json_object_get(t, "name"))) {
            json_decref(fn);
            return BAD(err, param, "'%s.name' (a string) is required", param);
        }
        json_t *wrapped = fn ? json_pack("{s:s, s:o}", "type", "function", "function", fn) : NULL;
        if (!wrapped || json_array_append_new(out, wrapped)) return nomem(err);
    }
    return translate_tool_choice(body, chat, err);
}

// tool_choice (a named function {"type": "function", "name"} re-wrapped) and
// parallel_tool_calls; the chat parser checks them against the tools.
static bool translate_tool_choice(json_t *body, json_t *chat, struct tl_oai_error *err)
{
    json_t *tc = json_object_get(body, "tool_choice");
    if (json_is_object(tc)) {
        json_t *type = json_object_get(tc, "type");
        json_t *name = json_object_get(tc, "name");
        if (!str_is(type, "function") || !json_is_string(name))
            return BAD(err, "tool_choice",
                       "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": "
                       "\"function\", \"name\": ...}");
        json_t *c = json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", name);
        if (!c || json_object_set_new(chat, "tool_choice", c)) return nomem(err);
    } else if (!absent(tc) && json_object_set(chat, "tool_choice", tc)) {
        return nomem(err);
    }
    json_t *ptc = json_object_get(body, "parallel_tool_calls");
    if (!absent(ptc) && json_object_set(chat, "parallel_tool_calls", ptc)) return nomem(err);
    return true;
}

// text.format into response_format.
static bool translate_text(json_t *body, json_t *chat, struct tl_oai_error *err)
{
    json_t *text = json_object_get(body, "text");
    if (absent(text)) return true;
    if (!json_is_object(text)) return BAD(err, "text", "'text' must be an object");
    const char *key;
    json_t *v;
    json_object_foreach(text, key, v)
    {
        if (!strcmp(key, "format") || absent(v)) continue;
        char param[80];
        snprintf(param, sizeof(param), "text.%.60s", key);
        return BAD(err, param, "'%s' is not supported", param);
    }
    json_t *f = json_object_get(text, "format");
    if (absent(f)) return true;
    json_t *type = json_object_get(f, "type");
    if (str_is(type, "text")) return true;
    json_t *rf = NULL;
    if (str_is(type, "json_object")) {
        rf = json_pack("{s:s}", "type", "json_object");
    } else if (str_is(type, "json_schema")) {
        json_t *schema = json_object_get(f, "schema");
        json_t *name = json_object_get(f, "name");
        if (!json_is_object(schema))
            return BAD(err, "text.format.schema", "'text.format.schema' (an object) is required");
        if (!absent(name) && !json_is_string(name))
            return BAD(err, "text.format.name", "'text.format.name' must be a string");
        json_t *js = json_pack("{s:O}", "schema", schema);
        json_t *strict = json_object_get(f, "strict");
        if (js && ((json_is_string(name) && json_object_set(js, "name", name)) ||
                   (!absent(strict) && json_object_set(js, "strict", strict)))) {
            json_decref(js);
            js = NULL;
        }
        rf = js ? json_pack("{s:s, s:o}", "type", "json_schema", "json_schema", js) : NULL;
    } else {
        return BAD(err, "text.format.type",
                   "'text.format.type' must be \"text\", \"json_object\" or \"json_schema\"");
    }
    if (!rf || json_object_set_new(chat, "response_format", rf)) return nomem(err);
    return true;
}

// ---- input items -----------------------------------------------------------------------------

// A message's content (string or parts) as one string (new reference).
static json_t *content_text(json_t *c, const char *param, struct tl_oai_error *err)
{
    if (json_is_string(c)) return json_incref(c);
    if (!json_is_array(c)) {
        (void)BAD(err, param, "'%s' must be a string or a list of content parts", param);
        return NULL;
    }
    struct tl_sb sb;
    tl_sb_init(&sb);
    for (size_t j = 0; j < json_array_size(c); j++) {
        json_t *part = json_array_get(c, j);
        json_t *type = json_object_get(part, "type");
        json_t *text = json_object_get(part, "text");
        if (!(str_is(type, "input_text") || str_is(type, "output_text")) || !json_is_string(text)) {
            tl_sb_free(&sb);
            char p2[96];
            snprintf(p2, sizeof(p2), "%s[%zu]", param, j);
            (void)BAD(
                err, p2,
                "'%s' must be {\"type\": \"input_text\" or \"output_text\", \"text\": ...}; only "
                "text content is supported",
                p2);
            return NULL;
        }
        if (j) tl_sb_add(&sb, "\n", 1);
        tl_sb_add(&sb, json_string_value(text), json_string_length(text));
    }
    json_t *s = tl_sb_ok(&sb) ? json_stringn(sb.buf ? sb.buf : "", sb.len) : NULL;
    tl_sb_free(&sb);
    if (!s) nomem(err);
    return s;
}

// The last message if it is an assistant message that calls may join.
static json_t *open_assistant(json_t *msgs)
{
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    return last && str_is(json_object_get(last, "role"), "assistant") ? last : NULL;
}

static bool call_known(json_t *msgs, const char *id)
{
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        json_t *calls = json_object_get(json_array_get(msgs, i), "tool_calls");
        for (size_t k = 0; k < json_array_size(calls); k++)
            if (!strcmp(json_string_value(json_object_get(json_array_get(calls, k), "id")), id))
                return true;
    }
    return false;
}

// One input item (the conversation's i-th) appended to the chat messages.
static bool add_item(json_t *msgs, json_t *item, size_t i, struct tl_oai_error *err)
{
    char param[64];
    snprintf(param, sizeof(param), "input[%zu]", i);
    if (!json_is_object(item)) return BAD(err, param, "'%s' must be an object", param);
    json_t *type = json_object_get(item, "type");
    if (absent(type) || str_is(type, "message")) {
        json_t *role = json_object_get(item, "role");
        if (!(str_is(role, "user") || str_is(role, "system") || str_is(role, "developer") ||
              str_is(role, "assistant")))
            return BAD(err, param,
                       "'%s.role' must be \"user\", \"system\", \"developer\" or \"assistant\"",
                       param);
        char cp[80];
        snprintf(cp, sizeof(cp), "%s.content", param);
        json_t *text = content_text(json_object_get(item, "content"), cp, err);
        if (!text) return false;
        json_t *m = json_pack("{s:O, s:o}", "role", role, "content", text);
        return (m && !json_array_append_new(msgs, m)) || nomem(err);
    }
    if (str_is(type, "function_call")) {
        json_t *id = json_object_get(item, "call_id");
        json_t *name = json_object_get(item, "name");
        json_t *args = json_object_get(item, "arguments");
        if (!json_is_string(id) || !json_is_string(name) || !json_is_string(args))
            return BAD(err, param,
                       "'%s' (a function_call) needs \"call_id\", \"name\" and \"arguments\" "
                       "(strings)",
                       param);
        json_t *call = json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", id, "type", "function",
                                 "function", "name", name, "arguments", args);
        json_t *m = open_assistant(msgs);
        if (!m) {
            m = json_pack("{s:s, s:s}", "role", "assistant", "content", "");
            if (!m || json_array_append_new(msgs, m)) return json_decref(call), nomem(err);
        }
        json_t *calls = json_object_get(m, "tool_calls");
        if (!calls) {
            calls = json_array();
            if (!calls || json_object_set_new(m, "tool_calls", calls))
                return json_decref(call), nomem(err);
        }
        return (call && !json_array_append_new(calls, call)) || nomem(err);
    }
    if (str_is(type, "function_call_output")) {
        json_t *id = json_object_get(item, "call_id");
        json_t *out = json_object_get(item, "output");
        if (!json_is_string(id))
            return BAD(err, param, "'%s.call_id' (a string) is required", param);
        if (!call_known(msgs, json_string_value(id)))
            return BAD(err, param,
                       "'%s' answers call_id '%.80s', but no function_call with that call_id "
                       "comes before it",
                       param, json_string_value(id));
        char cp[80];
        snprintf(cp, sizeof(cp), "%s.output", param);
        json_t *text = content_text(out, cp, err);
        if (!text) return false;
        json_t *m =
            json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", id, "content", text);
        return (m && !json_array_append_new(msgs, m)) || nomem(err);
    }
    if (str_is(type, "reasoning")) return true;
    return BAD(err, param,
               "'%s.type' '%.60s' is not supported (message, function_call, "
               "function_call_output and reasoning items are)",
               param, json_is_string(type) ? json_string_value(type) : "?");
}

// The conversation: the previous response's, then this input (string -> one user message).
static bool build_conversation(struct tl_server *s, json_t *body, json_t *ctx,
                               struct tl_oai_error *err)
{
    json_t *conv = json_array();
    if (!conv || json_object_set_new(ctx, "conversation", conv)) return nomem(err);
    json_t *prev = json_object_get(body, "previous_response_id");
    int depth = 0;
    if (!absent(prev)) {
        if (!json_is_string(prev))
            return BAD(err, "previous_response_id", "'previous_response_id' must be a string");
        json_t *pconv = NULL;
        if (!s->resp_store || !tl_resp_store_get(s->resp_store, json_string_value(prev),
                                                 tl_time_us(), NULL, &pconv, &depth)) {
            tl_oai_error_set(err, 404, "invalid_request_error", "not_found", "previous_response_id",
                             "Previous response with id '%.100s' not found (unknown, deleted, "
                             "evicted or expired from the store)",
                             json_string_value(prev));
            return false;
        }
        if (depth + 1 > TL_RESP_MAX_DEPTH)
            return BAD(err, "previous_response_id",
                       "'previous_response_id' continues a chain of %d responses; at most %d "
                       "are allowed",
                       depth + 1, TL_RESP_MAX_DEPTH);
        if (json_array_extend(conv, pconv)) return nomem(err);
        depth++;
    }
    if (json_object_set_new(ctx, "depth", json_integer(depth))) return nomem(err);
    json_t *input = json_object_get(body, "input");
    if (json_is_string(input)) {
        json_t *m =
            json_pack("{s:s, s:s, s:O}", "type", "message", "role", "user", "content", input);
        return (m && !json_array_append_new(conv, m)) || nomem(err);
    }
    if (!json_is_array(input))
        return BAD(err, "input", "'input' (a string or a list of items) is required");
    if (json_array_size(input) == 0 && absent(prev))
        return BAD(err, "input", "'input' must not be empty");
    return !json_array_extend(conv, input) || nomem(err);
}

static bool build_messages(json_t *body, json_t *ctx, json_t *chat, struct tl_oai_error *err)
{
    json_t *msgs = json_array();
    if (!msgs || json_object_set_new(chat, "messages", msgs)) return nomem(err);
    json_t *ins = json_object_get(body, "instructions");
    if (json_is_string(ins)) {
        json_t *m = json_pack("{s:s, s:O}", "role", "system", "content", ins);
        if (!m || json_array_append_new(msgs, m)) return nomem(err);
    }
    json_t *conv = json_object_get(ctx, "conversation");
    size_t n_prev = json_array_size(conv) - (json_is_array(json_object_get(body, "input"))
                                                 ? json_array_size(json_object_get(body, "input"))
                                                 : 1);
    for (size_t i = 0; i < json_array_size(conv); i++) {
        // Items of earlier responses were checked when they were stored; errors name this
        // request's input by its own index.
        if (!add_item(msgs, json_array_get(conv, i), i >= n_prev ? i - n_prev : i, err))
            return false;
    }
    if (json_array_size(msgs) == 0) return BAD(err, "input", "'input' must not be empty");
    return true;
}

// ---- the whole request -----------------------------------------------------------------------

static void new_id(char *out, size_t size)
{
    tl_srv_resp_item_id(out, size, "resp");
}

bool tl_srv_resp_translate(struct tl_server *s, json_t *body, json_t **chat_out, json_t **ctx_out,
                           struct tl_oai_error *err)
{
    *chat_out = *ctx_out = NULL;
    if (!check_fields(body, err)) return false;
    json_t *chat = json_object();
    json_t *ctx = json_object();
    if (!chat || !ctx) goto nomem;
    char id[64];
    new_id(id, sizeof(id));
    if (json_object_set_new(ctx, "id", json_string(id)) ||
        json_object_set_new(ctx, "created_at", json_integer(tl_wall_time_us() / 1000000)) ||
        json_object_set_new(ctx, "model", json_string(s->model_name)))
        goto nomem;
    static const char *const echoed[] = {"instructions",
                                         "max_output_tokens",
                                         "temperature",
                                         "top_p",
                                         "tools",
                                         "tool_choice",
                                         "parallel_tool_calls",
                                         "text",
                                         "reasoning",
                                         "store",
                                         "previous_response_id",
                                         "metadata",
                                         "user",
                                         "safety_identifier",
                                         "prompt_cache_key"};
    for (size_t i = 0; i < sizeof(echoed) / sizeof(echoed[0]); i++) {
        json_t *v = json_object_get(body, echoed[i]);
        if (v && json_object_set(ctx, echoed[i], v)) goto nomem;
    }
    if (!build_conversation(s, body, ctx, err) || !build_messages(body, ctx, chat, err) ||
        !translate_tools(body, chat, err) || !translate_text(body, chat, err))
        goto fail;
    static const char *const copied[] = {"model", "temperature", "top_p", "stream", "user"};
    for (size_t i = 0; i < sizeof(copied) / sizeof(copied[0]); i++) {
        json_t *v = json_object_get(body, copied[i]);
        if (!absent(v) && json_object_set(chat, copied[i], v)) goto nomem;
    }
    json_t *mot = json_object_get(body, "max_output_tokens");
    if (!absent(mot) && json_object_set(chat, "max_completion_tokens", mot)) goto nomem;
    *chat_out = chat;
    *ctx_out = ctx;
    return true;
nomem:
    nomem(err);
fail:
    json_decref(chat);
    json_decref(ctx);
    return false;
}

void tl_srv_resp_fix_error(struct tl_oai_error *err)
{
    static const struct {
        const char *chat, *resp;
    } names[] = {
        {"max_completion_tokens", "max_output_tokens"},
        {"max_tokens", "max_output_tokens"},
        {"response_format", "text.format"},
        {"messages", "input"},
        {"tools", "tools"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        size_t n = strlen(names[i].chat);
        if (strncmp(err->param, names[i].chat, n)) continue;
        char rest[64];
        snprintf(rest, sizeof(rest), "%s", err->param + n);
        if (!strncmp(names[i].chat, "response_format", n) && !strncmp(rest, ".json_schema", 12))
            memmove(rest, rest + 12, strlen(rest + 12) + 1);
        snprintf(err->param, sizeof(err->param), "%s%s", names[i].resp, rest);
        return;
    }
}
