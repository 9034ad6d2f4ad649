/*
 * The Anthropic Messages API, request side (see anthropic.h): a Messages body checked and
 * translated into the equivalent OpenAI chat body (its system and messages in
 * anthropic_messages.c) and the two route handlers. The error object is anthropic_error.c's.
 *
 * DESIGN
 * The translation is the whole adapter: the chat body it builds goes through tl_oai_parse_root
 * and the chat template exactly as a /v1/chat/completions body would, so every feature of the
 * chat path (tool-call syntaxes, reasoning split, forced-call grammars, stop strings, batching)
 * serves both APIs with one implementation. Checks that need Anthropic's names happen here, so
 * a client reads "messages[1].content[0]: image blocks are not supported", never an OpenAI
 * field name; the chat parser's own checks stay as a backstop.
 *
 * Mapping: system (string or text blocks) -> a system message; a user turn's tool_result
 * blocks -> role "tool" messages (tool_call_id, the tool's name, the text; is_error adds
 * "Error: " in front) and its text blocks -> a user message; an assistant turn's text ->
 * content, thinking -> reasoning_content, tool_use -> tool_calls (input as the arguments
 * JSON); consecutive turns of one role are combined, as Anthropic does. tools -> function
 * tools (input_schema -> parameters); tool_choice auto / any / tool / none -> "auto" /
 * "required" / the named function / "none", disable_parallel_tool_use ->
 * parallel_tool_calls false; thinking enabled / disabled -> chat_template_kwargs
 * enable_thinking true / false (adaptive: the template's default); stop_sequences -> stop;
 * output_config.format (json_schema) -> response_format.
 *
 * Pure but for the handlers (event-loop thread).
 */
#include "server/anthropic.h"

#include "core/error.h"
#include "server/grammar_wait.h"
#include "server/request.h"

#include <stdio.h>
#include <string.h>

// ---- tools ------------------------------------------------------------------------------------

static bool translate_tools(json_t *body, json_t *chat, struct tl_oai_error *err)
{
    json_t *tools = json_object_get(body, "tools");
    if (tl__anth_absent(tools)) return true;
    if (!json_is_array(tools)) return tl__anth_bad(err, "tools", "'tools' must be a list");
    json_t *out = json_array();
    if (!out || json_object_set_new(chat, "tools", out)) return tl__anth_no_memory(err);
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *t = json_array_get(tools, i);
        char where[48];
        snprintf(where, sizeof(where), "tools[%zu]", i);
        if (!json_is_object(t)) return tl__anth_bad(err, where, "'%s' must be an object", where);
        json_t *type = json_object_get(t, "type"), *name = json_object_get(t, "name");
        if (!tl__anth_absent(type) && !tl__anth_str_is(type, "custom"))
            return tl__anth_bad(
                err, where,
                "'%s': the server tool '%.60s' (%.60s) is not supported: tokenloom runs "
                "no built-in tools; define a client tool with name and input_schema",
                where, json_is_string(type) ? json_string_value(type) : "?",
                tl__anth_plain(name) ? json_string_value(name) : "?");
        static const char *const keys[] = {"type",         "name",   "description",
                                           "input_schema", "strict", NULL};
        static const char *const harmless[] = {"cache_control", NULL};
        if (!tl__anth_only_keys(t, where, keys, harmless, err) ||
            !tl__anth_cache_control(json_object_get(t, "cache_control"), where, err))
            return false;
        size_t n = json_is_string(name) ? json_string_length(name) : 0;
        bool name_ok = tl__anth_plain(name) && n >= 1 && n <= 64;
        for (const char *c = name_ok ? json_string_value(name) : ""; *c; c++)
            name_ok = name_ok && (*c == '_' || *c == '-' || (*c >= '0' && *c <= '9') ||
                                  (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z'));
        if (!name_ok)
            return tl__anth_bad(err, where, "'%s.name' must match ^[a-zA-Z0-9_-]{1,64}$", where);
        for (size_t k = 0; k < i; k++)
            if (json_equal(json_object_get(json_array_get(tools, k), "name"), name))
                return tl__anth_bad(err, where, "'%s.name': tool '%s' is defined twice", where,
                                    json_string_value(name));
        json_t *d = json_object_get(t, "description"), *schema = json_object_get(t, "input_schema");
        if (!tl__anth_absent(d) && !json_is_string(d))
            return tl__anth_bad(err, where, "'%s.description' must be a string", where);
        if (!json_is_object(schema) || !tl__anth_str_is(json_object_get(schema, "type"), "object"))
            return tl__anth_bad(
                err, where,
                "'%s.input_schema' is required: a JSON Schema with \"type\": \"object\"", where);
        json_t *strict = json_object_get(t, "strict");
        if (json_is_true(strict))
            return tl__anth_bad(
                err, where,
                "'%s.strict' true is not supported: calls are parsed from the model's "
                "output (use tool_choice any or tool to force a call by grammar)",
                where);
        json_t *fn = json_pack("{s:O, s:O}", "name", name, "parameters", schema);
        if (fn && json_is_string(d) && json_object_set(fn, "description", d)) {
            json_decref(fn);
            fn = NULL;
        }
        if (!fn ||
            json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn)))
            return tl__anth_no_memory(err);
    }
    return true;
}

static bool translate_tool_choice(json_t *body, json_t *chat, struct tl_oai_error *err)
{
    json_t *tc = json_object_get(body, "tool_choice");
    if (tl__anth_absent(tc)) return true;
    if (!json_is_object(tc))
        return tl__anth_bad(
            err, "tool_choice",
            "'tool_choice' must be an object: {\"type\": \"auto\" | \"any\" | \"tool\" | "
            "\"none\"}");
    json_t *type = json_object_get(tc, "type"), *name = json_object_get(tc, "name");
    json_t *dp = json_object_get(tc, "disable_parallel_tool_use");
    bool is_tool = tl__anth_str_is(type, "tool");
    static const char *const keys_tool[] = {"type", "name", "disable_parallel_tool_use", NULL};
    static const char *const keys_any[] = {"type", "disable_parallel_tool_use", NULL};
    static const char *const keys_none[] = {"type", NULL};
    json_t *v;
    if (tl__anth_str_is(type, "auto"))
        v = json_string("auto");
    else if (tl__anth_str_is(type, "any"))
        v = json_string("required");
    else if (tl__anth_str_is(type, "none"))
        v = json_string("none");
    else if (is_tool) {
        if (!tl__anth_plain(name))
            return tl__anth_bad(err, "tool_choice", "'tool_choice.name' must name a tool");
        const json_t *tools = json_object_get(body, "tools");
        bool found = false;
        for (size_t i = 0; i < json_array_size(tools); i++)
            found = found || json_equal(json_object_get(json_array_get(tools, i), "name"), name);
        if (!found)
            return tl__anth_bad(err, "tool_choice",
                                "'tool_choice.name' names tool '%.80s', which is not "
                                "in 'tools'",
                                json_string_value(name));
        v = json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", name);
    } else {
        return tl__anth_bad(err, "tool_choice",
                            "'tool_choice.type' must be \"auto\", \"any\", \"tool\" or \"none\"");
    }
    if (!v || json_object_set_new(chat, "tool_choice", v)) return tl__anth_no_memory(err);
    const char *const *keys = is_tool                         ? keys_tool
                              : tl__anth_str_is(type, "none") ? keys_none
                                                              : keys_any;
    if (!tl__anth_only_keys(tc, "tool_choice", keys, NULL, err)) return false;
    if (!tl__anth_absent(dp)) {
        if (!json_is_boolean(dp))
            return tl__anth_bad(err, "tool_choice",
                                "'tool_choice.disable_parallel_tool_use' must be a boolean");
        if (json_object_set_new(chat, "parallel_tool_calls", json_boolean(!json_is_true(dp))))
            return tl__anth_no_memory(err);
    }
    return true;
}

// ---- the other fields -------------------------------------------------------------------------

static bool translate_thinking(json_t *body, json_t *chat, bool count_only,
                               struct tl_oai_error *err)
{
    json_t *th = json_object_get(body, "thinking");
    if (tl__anth_absent(th)) return true;
    json_t *type = json_object_get(th, "type");
    if (!json_is_object(th) || !tl__anth_plain(type))
        return tl__anth_bad(err, "thinking",
                            "'thinking' must be {\"type\": \"enabled\", ...}, "
                            "{\"type\": \"disabled\"} or {\"type\": \"adaptive\"}");
    json_t *display = json_object_get(th, "display");
    if (!tl__anth_absent(display) && !tl__anth_str_is(display, "summarized"))
        return tl__anth_bad(err, "thinking",
                            "'thinking.display' \"omitted\" is not supported: the thinking text is "
                            "returned whole");
    bool on;
    if (tl__anth_str_is(type, "enabled")) {
        static const char *const keys[] = {"type", "budget_tokens", "display", NULL};
        if (!tl__anth_only_keys(th, "thinking", keys, NULL, err)) return false;
        json_t *b = json_object_get(th, "budget_tokens");
        json_t *mt = json_object_get(body, "max_tokens");
        if (!json_is_integer(b) || json_integer_value(b) < 1024)
            return tl__anth_bad(err, "thinking",
                                "'thinking.budget_tokens' must be an integer >= 1024");
        if (!count_only && json_is_integer(mt) && json_integer_value(b) >= json_integer_value(mt))
            return tl__anth_bad(err, "thinking",
                                "'thinking.budget_tokens' must be less than 'max_tokens'");
        on = true;
    } else if (tl__anth_str_is(type, "disabled") || tl__anth_str_is(type, "adaptive")) {
        static const char *const keys[] = {"type", "display", NULL};
        if (!tl__anth_only_keys(th, "thinking", keys, NULL, err)) return false;
        if (tl__anth_str_is(type, "adaptive")) return true; // the template's default
        on = false;
    } else {
        return tl__anth_bad(err, "thinking",
                            "'thinking.type' must be \"enabled\", \"disabled\" or \"adaptive\"");
    }
    json_t *kw = json_pack("{s:b}", "enable_thinking", on);
    if (!kw || json_object_set_new(chat, "chat_template_kwargs", kw))
        return tl__anth_no_memory(err);
    return true;
}

static bool translate_sampling(json_t *body, json_t *chat, struct tl_oai_error *err)
{
    json_t *mt = json_object_get(body, "max_tokens");
    if (tl__anth_absent(mt)) return tl__anth_bad(err, "max_tokens", "'max_tokens' is required");
    if (!json_is_integer(mt) || json_integer_value(mt) < 1 || json_integer_value(mt) > INT32_MAX)
        return tl__anth_bad(err, "max_tokens", "'max_tokens' must be an integer of at least 1");
    json_t *t = json_object_get(body, "temperature");
    if (!tl__anth_absent(t) &&
        (!json_is_number(t) || json_number_value(t) < 0 || json_number_value(t) > 1))
        return tl__anth_bad(err, "temperature", "'temperature' must be a number between 0 and 1");
    json_t *tp = json_object_get(body, "top_p");
    if (!tl__anth_absent(tp) &&
        (!json_is_number(tp) || !(json_number_value(tp) > 0) || json_number_value(tp) > 1))
        return tl__anth_bad(err, "top_p", "'top_p' must be a number greater than 0 and at most 1");
    json_t *tk = json_object_get(body, "top_k");
    if (!tl__anth_absent(tk) && (!json_is_integer(tk) || json_integer_value(tk) < 1))
        return tl__anth_bad(err, "top_k", "'top_k' must be an integer of at least 1");
    json_t *st = json_object_get(body, "stream");
    if (!tl__anth_absent(st) && !json_is_boolean(st))
        return tl__anth_bad(err, "stream", "'stream' must be a boolean");
    json_t *ss = json_object_get(body, "stop_sequences");
    if (!tl__anth_absent(ss)) {
        if (!json_is_array(ss))
            return tl__anth_bad(err, "stop_sequences", "'stop_sequences' must be a list");
        if (json_array_size(ss) > TL_OAI_MAX_STOP)
            return tl__anth_bad(err, "stop_sequences",
                                "'stop_sequences' may hold at most %d strings", TL_OAI_MAX_STOP);
        for (size_t i = 0; i < json_array_size(ss); i++) {
            json_t *s = json_array_get(ss, i);
            if (!tl__anth_plain(s) || json_string_length(s) == 0 ||
                json_string_length(s) > TL_OAI_MAX_STOP_LEN)
                return tl__anth_bad(
                    err, "stop_sequences",
                    "'stop_sequences' must hold non-empty strings of at most %d bytes "
                    "(no NUL)",
                    TL_OAI_MAX_STOP_LEN);
        }
        if (json_object_set(chat, "stop", ss)) return tl__anth_no_memory(err);
    }
    json_t *md = json_object_get(body, "metadata");
    if (!tl__anth_absent(md)) { // user_id: an opaque end-user id, of no effect on the output
        static const char *const keys[] = {"user_id", NULL};
        if (!json_is_object(md))
            return tl__anth_bad(err, "metadata", "'metadata' must be an object");
        if (!tl__anth_only_keys(md, "metadata", keys, NULL, err)) return false;
        json_t *u = json_object_get(md, "user_id");
        if (!tl__anth_absent(u) && !json_is_string(u))
            return tl__anth_bad(err, "metadata", "'metadata.user_id' must be a string");
    }
    if (json_object_set(chat, "max_tokens", mt) ||
        (!tl__anth_absent(t) && json_object_set(chat, "temperature", t)) ||
        (!tl__anth_absent(tp) && json_object_set(chat, "top_p", tp)) ||
        (!tl__anth_absent(tk) && json_object_set(chat, "top_k", tk)) ||
        (!tl__anth_absent(st) && json_object_set(chat, "stream", st)))
        return tl__anth_no_memory(err);
    return true;
}

// output_config: format json_schema -> response_format (the reply's text is constrained by the
// schema's grammar, as for /v1/chat/completions); effort is refused.
static bool translate_output_config(json_t *body, json_t *chat, struct tl_oai_error *err)
{
    json_t *oc = json_object_get(body, "output_config");
    if (tl__anth_absent(oc)) return true;
    static const char *const keys[] = {"format", "effort", NULL};
    if (!json_is_object(oc))
        return tl__anth_bad(err, "output_config", "'output_config' must be an object");
    if (!tl__anth_only_keys(oc, "output_config", keys, NULL, err)) return false;
    if (!tl__anth_absent(json_object_get(oc, "effort")))
        return tl__anth_bad(err, "output_config.effort",
                            "'output_config.effort' is not supported: the model decides how long "
                            "it reasons");
    json_t *f = json_object_get(oc, "format");
    if (tl__anth_absent(f)) return true;
    static const char *const fkeys[] = {"type", "schema", NULL};
    json_t *schema = json_object_get(f, "schema");
    if (!json_is_object(f) || !tl__anth_str_is(json_object_get(f, "type"), "json_schema") ||
        !json_is_object(schema))
        return tl__anth_bad(
            err, "output_config.format",
            "'output_config.format' must be {\"type\": \"json_schema\", \"schema\": "
            "{...}}");
    if (!tl__anth_only_keys(f, "output_config.format", fkeys, NULL, err)) return false;
    json_t *tc = json_object_get(body, "tool_choice");
    json_t *tct = json_object_get(tc, "type");
    if (tl__anth_str_is(tct, "any") || tl__anth_str_is(tct, "tool"))
        return tl__anth_bad(err, "output_config.format",
                            "'output_config.format' cannot be combined with a tool_choice that "
                            "forces a call (each is a grammar on the reply)");
    json_t *rf = json_pack("{s:s, s:{s:s, s:O}}", "type", "json_schema", "json_schema", "name",
                           "output", "schema", schema);
    if (!rf || json_object_set_new(chat, "response_format", rf)) return tl__anth_no_memory(err);
    return true;
}

// Top-level fields accepted at their neutral value only.
static bool neutral_field(const char *key, json_t *v)
{
    if (tl__anth_absent(v)) return true;
    if (!strcmp(key, "service_tier"))
        return tl__anth_str_is(v, "auto") || tl__anth_str_is(v, "standard_only");
    if (!strcmp(key, "speed")) return tl__anth_str_is(v, "standard");
    if (!strcmp(key, "cache_control"))
        return tl__anth_str_is(json_object_get(v, "type"), "ephemeral");
    return false;
}

bool tl_anth_translate(json_t *body, bool count_only, json_t **chat, struct tl_oai_error *err)
{
    *chat = NULL;
    if (!json_is_object(body))
        return tl__anth_bad(err, NULL, "the request body must be a JSON object");
    static const char *const both[] = {"model",       "messages", "system",        "tools",
                                       "tool_choice", "thinking", "output_config", NULL};
    static const char *const create[] = {"max_tokens", "stop_sequences", "stream",   "temperature",
                                         "top_p",      "top_k",          "metadata", NULL};
    static const char *const neutral[] = {"service_tier",  "speed",     "cache_control",
                                          "inference_geo", "container", NULL};
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v)
    {
        bool known = false;
        for (int i = 0; both[i] && !known; i++)
            known = !strcmp(k, both[i]);
        for (int i = 0; !count_only && create[i] && !known; i++)
            known = !strcmp(k, create[i]);
        for (int i = 0; neutral[i] && !known; i++)
            if (!strcmp(k, neutral[i])) {
                if (!neutral_field(k, v))
                    return tl__anth_bad(
                        err, k, "'%s' is not supported by this server (only %s)", k,
                        !strcmp(k, "service_tier") ? "\"auto\" or \"standard_only\""
                        : !strcmp(k, "speed")      ? "\"standard\""
                        : !strcmp(k, "cache_control")
                            ? "{\"type\": \"ephemeral\", of no effect: the prefix cache "
                              "is automatic}"
                            : "null");
                known = true;
            }
        if (!known) return tl__anth_bad(err, k, "'%.60s' is not supported by this server", k);
    }
    json_t *c = json_object();
    if (!c) return tl__anth_no_memory(err);
    json_t *model = json_object_get(body, "model");
    bool ok = (tl__anth_absent(model) || !json_object_set(c, "model", model)) &&
              tl__anth_translate_messages(body, c, err) && translate_tools(body, c, err) &&
              translate_tool_choice(body, c, err) && translate_thinking(body, c, count_only, err) &&
              translate_output_config(body, c, err) &&
              (count_only || translate_sampling(body, c, err));
    if (!ok) {
        json_decref(c);
        return false;
    }
    *chat = c;
    return true;
}

// ---- the route handlers -----------------------------------------------------------------------

// The chat params of a Messages body (false after answering).
static bool parse_messages_body(struct tl_server *s, struct evhttp_request *r, int64_t t0,
                                json_t *root, bool count_only, bool defer, struct tl_oai_params *p)
{
    struct tl_oai_error err;
    json_t *chat;
    if (!tl_anth_translate(root, count_only, &chat, &err)) {
        tl_srv_send_error(s, r, &err, t0);
        return false;
    }
    struct tl_oai_limits lim = {.n_vocab = s->info.n_vocab, .defer_grammar = defer};
    if (!tl_oai_parse_root(TL_OAI_CHAT, chat, &lim, p, &err)) {
        tl_srv_send_error(s, r, &err, t0);
        return false;
    }
    p->anthropic = true;
    return true;
}

void tl_srv_h_messages(struct tl_server *s, struct evhttp_request *r, int64_t t0, json_t *root)
{
    struct tl_oai_params p;
    struct tl_oai_error err;
    if (!parse_messages_body(s, r, t0, root, false, true, &p)) return;
    if (p.tool_forced && !tl__oai_forced_call_grammar(&p, s->tool_syntax, &err)) {
        tl_oai_params_free(&p);
        tl_srv_send_error(s, r, &err, t0);
        return;
    }
    if (p.grammar_kind != TL_GRAMMAR_NONE) {
        tl_srv_gwait_start(s, r, t0, &p);
        return;
    }
    tl_srv_req_start(s, r, t0, &p);
}

// POST /v1/messages/count_tokens -> {"input_tokens": N}: the prompt /v1/messages would give the
// engine for the same body, rendered and tokenized the same way.
void tl_srv_h_count_tokens(struct tl_server *s, struct evhttp_request *r, int64_t t0, json_t *root)
{
    struct tl_oai_params p;
    struct tl_oai_error err;
    if (!parse_messages_body(s, r, t0, root, true, false, &p)) return;
    struct tl_srv_prompts pr;
    bool ok = tl_srv_prompts_prepare(s, &p, &pr, &err);
    int64_t n = ok ? pr.n_tokens[0] : 0;
    tl_srv_prompts_free(&pr);
    tl_oai_params_free(&p);
    if (!ok) {
        tl_srv_send_error(s, r, &err, t0);
        return;
    }
    tl_http_send_json(&s->http, r, 200, json_pack("{s:I}", "input_tokens", (json_int_t)n), t0, n,
                      0);
}
