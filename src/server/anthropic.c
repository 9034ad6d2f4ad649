/*
 * The Anthropic Messages API, request side (see anthropic.h): a Messages body checked and
 * translated into the equivalent OpenAI chat body, and the two route handlers.
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
 * enable_thinking true / false (adaptive: the template's default); stop_sequences -> stop.
 *
 * Pure but for the handlers (event-loop thread).
 */
#include "server/anthropic.h"

#include "core/error.h"
#include "server/grammar_wait.h"
#include "server/request.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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

static bool no_memory(struct tl_oai_error *err)
{
    tl_oai_error_from_status(err, TL_ERR_NOMEM, "out of memory translating the request");
    return false;
}

static bool absent(const json_t *v)
{
    return !v || json_is_null(v);
}

static bool str_is(const json_t *v, const char *lit)
{
    return json_is_string(v) && json_string_length(v) == strlen(lit) &&
           !memcmp(json_string_value(v), lit, json_string_length(v));
}

// A string without NUL (names, ids, types).
static bool plain_string(const json_t *v)
{
    return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v);
}

// Checks that an object holds only the given keys (NULL-terminated list); a key in `harmless`
// is accepted too (it cannot change the output). False with a 400 naming the first other key.
static bool only_keys(json_t *o, const char *where, const char *const *keys,
                      const char *const *harmless, struct tl_oai_error *err)
{
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
    {
        bool known = false;
        for (int i = 0; keys && keys[i] && !known; i++)
            known = !strcmp(k, keys[i]);
        for (int i = 0; harmless && harmless[i] && !known; i++)
            known = !strcmp(k, harmless[i]);
        if (!known) {
            char param[128];
            snprintf(param, sizeof(param), "%s%s%.60s", where, *where ? "." : "", k);
            return bad(err, param, "'%s' is not supported by this server", param);
        }
    }
    return true;
}

// cache_control: {"type": "ephemeral", ["ttl"]}, accepted and of no effect (tokenloom's prefix
// cache is automatic).
static bool check_cache_control(json_t *v, const char *where, struct tl_oai_error *err)
{
    if (absent(v)) return true;
    if (!json_is_object(v) || !str_is(json_object_get(v, "type"), "ephemeral"))
        return bad(err, where, "'%s.cache_control' must be {\"type\": \"ephemeral\"}", where);
    return true;
}

// ---- content ----------------------------------------------------------------------------------

// A text block {"type": "text", "text", ["cache_control"], ["citations": null or []]}.
static bool check_text_block(json_t *b, const char *where, struct tl_oai_error *err)
{
    static const char *const keys[] = {"type", "text", "citations", NULL};
    static const char *const harmless[] = {"cache_control", NULL};
    if (!only_keys(b, where, keys, harmless, err)) return false;
    if (!json_is_string(json_object_get(b, "text")))
        return bad(err, where, "'%s.text' must be a string", where);
    json_t *cit = json_object_get(b, "citations");
    if (!absent(cit) && !(json_is_array(cit) && json_array_size(cit) == 0))
        return bad(err, where, "'%s.citations' is not supported", where);
    return check_cache_control(json_object_get(b, "cache_control"), where, err);
}

// A block's type, or a 400: blocks are objects with a string "type".
static const char *block_type(json_t *b, const char *where, struct tl_oai_error *err)
{
    if (!json_is_object(b))
        return bad(err, where, "'%s' must be a content block object", where), NULL;
    json_t *t = json_object_get(b, "type");
    if (!plain_string(t)) return bad(err, where, "'%s.type' must be a string", where), NULL;
    return json_string_value(t);
}

static bool unsupported_block(const char *type, const char *where, struct tl_oai_error *err)
{
    if (!strcmp(type, "image") || !strcmp(type, "document"))
        return bad(err, where,
                   "'%s': %s blocks are not supported: tokenloom serves text-only models", where,
                   type);
    return bad(err, where, "'%s': content blocks of type '%.60s' are not supported here", where,
               type);
}

// Content given as a string (when allowed) or as text blocks only (system, tool_result) -> the
// string or a list of text parts (a new reference); NULL with *err.
static json_t *text_content(json_t *c, const char *where, bool allow_string,
                            struct tl_oai_error *err)
{
    if (json_is_string(c) && allow_string) return json_incref(c);
    if (!json_is_array(c))
        return bad(err, where, "'%s' must be a string or a list of text blocks", where), NULL;
    json_t *parts = json_array();
    if (!parts) return no_memory(err), NULL;
    for (size_t j = 0; j < json_array_size(c); j++) {
        json_t *b = json_array_get(c, j);
        char sub[96];
        snprintf(sub, sizeof(sub), "%s[%zu]", where, j);
        const char *type = block_type(b, sub, err);
        bool ok = type && (!strcmp(type, "text") ? check_text_block(b, sub, err)
                                                 : unsupported_block(type, sub, err));
        if (!ok) {
            json_decref(parts);
            return NULL;
        }
        if (json_array_append_new(parts, json_pack("{s:s, s:O}", "type", "text", "text",
                                                   json_object_get(b, "text")))) {
            json_decref(parts);
            return no_memory(err), NULL;
        }
    }
    return parts;
}

// The plain text of a tool_result's content (string or text blocks joined with "\n").
static json_t *tool_result_text(json_t *c, const char *where, bool is_error,
                                struct tl_oai_error *err)
{
    struct tl_sb sb;
    tl_sb_init(&sb);
    if (is_error) tl_sb_adds(&sb, "Error: ");
    if (json_is_string(c)) {
        tl_sb_add(&sb, json_string_value(c), json_string_length(c));
    } else if (!absent(c)) {
        json_t *parts = text_content(c, where, false, err);
        if (!parts) {
            tl_sb_free(&sb);
            return NULL;
        }
        for (size_t j = 0; j < json_array_size(parts); j++) {
            json_t *t = json_object_get(json_array_get(parts, j), "text");
            if (j) tl_sb_add(&sb, "\n", 1);
            tl_sb_add(&sb, json_string_value(t), json_string_length(t));
        }
        json_decref(parts);
    }
    if (!tl_sb_ok(&sb)) {
        tl_sb_free(&sb);
        return no_memory(err), NULL;
    }
    json_t *s = json_stringn(sb.buf ? sb.buf : "", sb.len);
    tl_sb_free(&sb);
    if (!s) no_memory(err);
    return s;
}

// ---- messages ---------------------------------------------------------------------------------

struct conv {
    json_t *out;      // the OpenAI messages
    json_t *last_ids; // tool_use id -> name of the previous assistant turn (object)
    json_t *cur_ids;  // ... of the assistant turn being built
};

// The last output message when it has this role and no tool parts (to combine turns).
static json_t *last_of_role(struct conv *cv, const char *role)
{
    json_t *m = json_array_get(cv->out, json_array_size(cv->out) - 1);
    return str_is(json_object_get(m, "role"), role) ? m : NULL;
}

// Appends text parts to a message of this role (combined with the previous one of the same
// role, as Anthropic combines consecutive turns). parts is stolen.
static bool add_text_message(struct conv *cv, const char *role, json_t *parts,
                             struct tl_oai_error *err)
{
    json_t *m = last_of_role(cv, role);
    if (m && (!strcmp(role, "user") || !strcmp(role, "system"))) {
        json_t *c = json_object_get(m, "content");
        if (json_is_string(c)) { // becomes a list, the string its first part
            json_t *l = json_pack("[{s:s, s:O}]", "type", "text", "text", c);
            if (!l || json_object_set_new(m, "content", l))
                return json_decref(parts), no_memory(err);
            c = l;
        }
        if (json_is_string(parts)) {
            json_t *p = json_pack("{s:s, s:O}", "type", "text", "text", parts);
            bool fail = !p || json_array_append_new(c, p);
            json_decref(parts);
            return fail ? no_memory(err) : true;
        }
        bool fail = json_array_extend(c, parts) != 0;
        json_decref(parts);
        return fail ? no_memory(err) : true;
    }
    json_t *msg = json_pack("{s:s, s:o}", "role", role, "content", parts);
    if (!msg || json_array_append_new(cv->out, msg)) return no_memory(err);
    return true;
}

static bool user_turn(struct conv *cv, json_t *content, const char *where, struct tl_oai_error *err)
{
    if (json_is_string(content)) return add_text_message(cv, "user", json_incref(content), err);
    if (!json_is_array(content))
        return bad(err, where, "'%s' must be a string or a list of content blocks", where);
    json_t *parts = json_array();
    if (!parts) return no_memory(err);
    for (size_t j = 0; j < json_array_size(content); j++) {
        json_t *b = json_array_get(content, j);
        char sub[96];
        snprintf(sub, sizeof(sub), "%s[%zu]", where, j);
        const char *type = block_type(b, sub, err);
        if (!type) goto fail;
        if (!strcmp(type, "text")) {
            if (!check_text_block(b, sub, err)) goto fail;
            if (json_array_append_new(parts, json_pack("{s:s, s:O}", "type", "text", "text",
                                                       json_object_get(b, "text"))))
                goto nomem;
            continue;
        }
        if (strcmp(type, "tool_result")) {
            unsupported_block(type, sub, err);
            goto fail;
        }
        static const char *const keys[] = {"type", "tool_use_id", "content", "is_error", NULL};
        static const char *const harmless[] = {"cache_control", NULL};
        if (!only_keys(b, sub, keys, harmless, err) ||
            !check_cache_control(json_object_get(b, "cache_control"), sub, err))
            goto fail;
        json_t *id = json_object_get(b, "tool_use_id");
        json_t *is_error = json_object_get(b, "is_error");
        if (!plain_string(id)) {
            bad(err, sub, "'%s.tool_use_id' must be a string", sub);
            goto fail;
        }
        json_t *name = json_object_get(cv->last_ids, json_string_value(id));
        if (!name) {
            bad(err, sub,
                "'%s': tool_result for '%.80s' has no matching tool_use block in the previous "
                "assistant message",
                sub, json_string_value(id));
            goto fail;
        }
        if (!absent(is_error) && !json_is_boolean(is_error)) {
            bad(err, sub, "'%s.is_error' must be a boolean", sub);
            goto fail;
        }
        char csub[112];
        snprintf(csub, sizeof(csub), "%s.content", sub);
        json_t *text =
            tool_result_text(json_object_get(b, "content"), csub, json_is_true(is_error), err);
        if (!text) goto fail;
        // Text before a tool result stays before it.
        if (json_array_size(parts)) {
            if (!add_text_message(cv, "user", parts, err)) return false;
            if (!(parts = json_array())) return no_memory(err);
        }
        json_t *m = json_pack("{s:s, s:O, s:O, s:o}", "role", "tool", "tool_call_id", id, "name",
                              name, "content", text);
        if (!m || json_array_append_new(cv->out, m)) goto nomem;
    }
    if (json_array_size(parts) || json_array_size(content) == 0)
        return add_text_message(cv, "user", parts, err);
    json_decref(parts);
    return true;
nomem:
    no_memory(err);
fail:
    json_decref(parts);
    return false;
}

// An assistant turn: content (text parts), reasoning_content (thinking) and tool_calls; added
// to the previous assistant message when there is one (consecutive turns combine).
static bool assistant_turn(struct conv *cv, json_t *content, const char *where,
                           struct tl_oai_error *err)
{
    json_t *m = last_of_role(cv, "assistant");
    if (!m) {
        m = json_pack("{s:s, s:[], s:s, s:[]}", "role", "assistant", "content", "reasoning_content",
                      "", "tool_calls");
        if (!m || json_array_append_new(cv->out, m)) return no_memory(err);
    }
    json_t *parts = json_object_get(m, "content");
    json_t *calls = json_object_get(m, "tool_calls");
    if (json_is_string(content))
        return json_array_append_new(parts,
                                     json_pack("{s:s, s:O}", "type", "text", "text", content))
                   ? no_memory(err)
                   : true;
    if (!json_is_array(content))
        return bad(err, where, "'%s' must be a string or a list of content blocks", where);
    for (size_t j = 0; j < json_array_size(content); j++) {
        json_t *b = json_array_get(content, j);
        char sub[96];
        snprintf(sub, sizeof(sub), "%s[%zu]", where, j);
        const char *type = block_type(b, sub, err);
        if (!type) return false;
        if (!strcmp(type, "text")) {
            if (!check_text_block(b, sub, err)) return false;
            if (json_array_append_new(parts, json_pack("{s:s, s:O}", "type", "text", "text",
                                                       json_object_get(b, "text"))))
                return no_memory(err);
        } else if (!strcmp(type, "thinking")) {
            static const char *const keys[] = {"type", "thinking", "signature", NULL};
            if (!only_keys(b, sub, keys, NULL, err)) return false;
            json_t *t = json_object_get(b, "thinking");
            if (!json_is_string(t)) return bad(err, sub, "'%s.thinking' must be a string", sub);
            json_t *r = json_object_get(m, "reasoning_content");
            struct tl_sb sb;
            tl_sb_init(&sb);
            tl_sb_add(&sb, json_string_value(r), json_string_length(r));
            tl_sb_add(&sb, json_string_value(t), json_string_length(t));
            bool ok =
                tl_sb_ok(&sb) && !json_object_set_new(m, "reasoning_content",
                                                      json_stringn(sb.buf ? sb.buf : "", sb.len));
            tl_sb_free(&sb);
            if (!ok) return no_memory(err);
        } else if (!strcmp(type, "tool_use")) {
            static const char *const keys[] = {"type", "id", "name", "input", NULL};
            static const char *const harmless[] = {"cache_control", NULL};
            if (!only_keys(b, sub, keys, harmless, err)) return false;
            json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name");
            json_t *input = json_object_get(b, "input");
            if (!plain_string(id) || !json_string_length(id))
                return bad(err, sub, "'%s.id' must be a non-empty string", sub);
            if (!plain_string(name) || !json_string_length(name))
                return bad(err, sub, "'%s.name' must be a non-empty string", sub);
            if (!json_is_object(input)) return bad(err, sub, "'%s.input' must be an object", sub);
            char *args = json_dumps(input, JSON_COMPACT);
            json_t *call = args ? json_pack("{s:O, s:s, s:{s:O, s:s}}", "id", id, "type",
                                            "function", "function", "name", name, "arguments", args)
                                : NULL;
            free(args);
            if (!call || json_array_append_new(calls, call) ||
                json_object_set(cv->cur_ids, json_string_value(id), name))
                return no_memory(err);
        } else if (!strcmp(type, "redacted_thinking")) {
            return bad(err, sub,
                       "'%s': redacted_thinking blocks are not supported (they carry no text "
                       "a local model could read)",
                       sub);
        } else {
            return unsupported_block(type, sub, err);
        }
    }
    return true;
}

// The assistant messages built with empty parts/reasoning/calls lose the empty ones (content
// null when only calls remain), so templates see what an OpenAI client would send.
static bool tidy_assistant(json_t *m, struct tl_oai_error *err)
{
    if (!str_is(json_object_get(m, "role"), "assistant")) return true;
    json_t *parts = json_object_get(m, "content");
    if (json_is_array(parts) && json_array_size(parts) == 1) {
        if (json_object_set(m, "content", json_object_get(json_array_get(parts, 0), "text")))
            return no_memory(err);
    } else if (json_is_array(parts) && json_array_size(parts) == 0) {
        json_t *calls = json_object_get(m, "tool_calls");
        if (json_object_set_new(m, "content",
                                json_array_size(calls) ? json_null() : json_string("")))
            return no_memory(err);
    }
    if (!json_string_length(json_object_get(m, "reasoning_content")))
        json_object_del(m, "reasoning_content");
    if (!json_array_size(json_object_get(m, "tool_calls"))) json_object_del(m, "tool_calls");
    return true;
}

static bool translate_messages(json_t *body, json_t *chat, struct tl_oai_error *err)
{
    struct conv cv = {json_array(), json_object(), json_object()};
    bool ok = false;
    if (!cv.out || !cv.last_ids || !cv.cur_ids) {
        no_memory(err);
        goto out;
    }
    json_t *sys = json_object_get(body, "system");
    if (!absent(sys)) {
        json_t *c = text_content(sys, "system", true, err);
        if (!c) goto out;
        if (json_is_string(c) && json_string_length(c) == 0) {
            json_decref(c);
        } else if (!add_text_message(&cv, "system", c, err)) {
            goto out;
        }
    }
    json_t *msgs = json_object_get(body, "messages");
    if (absent(msgs)) {
        bad(err, "messages", "'messages' is required");
        goto out;
    }
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        bad(err, "messages", "'messages' must be a non-empty list");
        goto out;
    }
    if (json_array_size(msgs) > TL_OAI_MAX_MESSAGES) {
        bad(err, "messages", "'messages' may hold at most %d entries", TL_OAI_MAX_MESSAGES);
        goto out;
    }
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        json_t *m = json_array_get(msgs, i);
        char where[64];
        snprintf(where, sizeof(where), "messages[%zu]", i);
        if (!json_is_object(m)) {
            bad(err, where, "'%s' must be an object", where);
            goto out;
        }
        static const char *const keys[] = {"role", "content", NULL};
        if (!only_keys(m, where, keys, NULL, err)) goto out;
        json_t *role = json_object_get(m, "role");
        json_t *content = json_object_get(m, "content");
        char sub[80];
        snprintf(sub, sizeof(sub), "%s.content", where);
        if (absent(content)) {
            bad(err, sub, "'%s' is required", sub);
            goto out;
        }
        bool assistant = str_is(role, "assistant");
        if (!assistant) { // a turn that is not the assistant's ends its tool_use ids
            json_object_clear(cv.last_ids);
            json_object_update(cv.last_ids, cv.cur_ids);
            json_object_clear(cv.cur_ids);
        }
        if (str_is(role, "user")) {
            if (!user_turn(&cv, content, sub, err)) goto out;
            json_object_clear(cv.last_ids);
        } else if (assistant) {
            if (!assistant_turn(&cv, content, sub, err)) goto out;
        } else if (str_is(role, "system")) {
            json_t *c = text_content(content, sub, true, err);
            if (!c || !add_text_message(&cv, "system", c, err)) goto out;
        } else {
            snprintf(sub, sizeof(sub), "%s.role", where);
            bad(err, sub, "'%s' must be \"user\" or \"assistant\"", sub);
            goto out;
        }
    }
    for (size_t i = 0; i < json_array_size(cv.out); i++)
        if (!tidy_assistant(json_array_get(cv.out, i), err)) goto out;
    // A final assistant turn is a prefill: the reply continues it.
    ok = json_object_set(chat, "messages", cv.out) == 0 &&
         (!str_is(json_object_get(json_array_get(msgs, json_array_size(msgs) - 1), "role"),
                  "assistant") ||
          json_object_set_new(chat, "continue_final_message", json_true()) == 0);
    if (!ok) no_memory(err);
out:
    json_decref(cv.out);
    json_decref(cv.last_ids);
    json_decref(cv.cur_ids);
    return ok;
}

// ---- tools ------------------------------------------------------------------------------------

static bool translate_tools(json_t *body, json_t *chat, struct tl_oai_error *err)
{
    json_t *tools = json_object_get(body, "tools");
    if (absent(tools)) return true;
    if (!json_is_array(tools)) return bad(err, "tools", "'tools' must be a list");
    json_t *out = json_array();
    if (!out || json_object_set_new(chat, "tools", out)) return no_memory(err);
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *t = json_array_get(tools, i);
        char where[48];
        snprintf(where, sizeof(where), "tools[%zu]", i);
        if (!json_is_object(t)) return bad(err, where, "'%s' must be an object", where);
        json_t *type = json_object_get(t, "type"), *name = json_object_get(t, "name");
        if (!absent(type) && !str_is(type, "custom"))
            return bad(err, where,
                       "'%s': the server tool '%.60s' (%.60s) is not supported: tokenloom runs "
                       "no built-in tools; define a client tool with name and input_schema",
                       where, json_is_string(type) ? json_string_value(type) : "?",
                       plain_string(name) ? json_string_value(name) : "?");
        static const char *const keys[] = {"type",         "name",   "description",
                                           "input_schema", "strict", NULL};
        static const char *const harmless[] = {"cache_control", NULL};
        if (!only_keys(t, where, keys, harmless, err) ||
            !check_cache_control(json_object_get(t, "cache_control"), where, err))
            return false;
        size_t n = json_is_string(name) ? json_string_length(name) : 0;
        bool name_ok = plain_string(name) && n >= 1 && n <= 64;
        for (const char *c = name_ok ? json_string_value(name) : ""; *c; c++)
            name_ok = name_ok && (*c == '_' || *c == '-' || (*c >= '0' && *c <= '9') ||
                                  (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z'));
        if (!name_ok) return bad(err, where, "'%s.name' must match ^[a-zA-Z0-9_-]{1,64}$", where);
        for (size_t k = 0; k < i; k++)
            if (json_equal(json_object_get(json_array_get(tools, k), "name"), name))
                return bad(err, where, "'%s.name': tool '%s' is defined twice", where,
                           json_string_value(name));
        json_t *d = json_object_get(t, "description"), *schema = json_object_get(t, "input_schema");
        if (!absent(d) && !json_is_string(d))
            return bad(err, where, "'%s.description' must be a string", where);
        if (!json_is_object(schema) || !str_is(json_object_get(schema, "type"), "object"))
            return bad(err, where,
                       "'%s.input_schema' is required: a JSON Schema with \"type\": \"object\"",
                       where);
        json_t *strict = json_object_get(t, "strict");
        if (json_is_true(strict))
            return bad(err, where,
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
            return no_memory(err);
    }
    return true;
}

static bool translate_tool_choice(json_t *body, json_t *chat, struct tl_oai_error *err)
{
    json_t *tc = json_object_get(body, "tool_choice");
    if (absent(tc)) return true;
    if (!json_is_object(tc))
        return bad(err, "tool_choice",
                   "'tool_choice' must be an object: {\"type\": \"auto\" | \"any\" | \"tool\" | "
                   "\"none\"}");
    json_t *type = json_object_get(tc, "type"), *name = json_object_get(tc, "name");
    json_t *dp = json_object_get(tc, "disable_parallel_tool_use");
    bool is_tool = str_is(type, "tool");
    static const char *const keys_tool[] = {"type", "name", "disable_parallel_tool_use", NULL};
    static const char *const keys_any[] = {"type", "disable_parallel_tool_use", NULL};
    static const char *const keys_none[] = {"type", NULL};
    json_t *v;
    if (str_is(type, "auto"))
        v = json_string("auto");
    else if (str_is(type, "any"))
        v = json_string("required");
    else if (str_is(type, "none"))
        v = json_string("none");
    else if (is_tool) {
        if (!plain_string(name))
            return bad(err, "tool_choice", "'tool_choice.name' must name a tool");
        const json_t *tools = json_object_get(body, "tools");
        bool found = false;
        for (size_t i = 0; i < json_array_size(tools); i++)
            found = found || json_equal(json_object_get(json_array_get(tools, i), "name"), name);
        if (!found)
            return bad(err, "tool_choice",
                       "'tool_choice.name' names tool '%.80s', which is not "
                       "in 'tools'",
                       json_string_value(name));
        v = json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", name);
    } else {
        return bad(err, "tool_choice",
                   "'tool_choice.type' must be \"auto\", \"any\", \"tool\" or \"none\"");
    }
    if (!v || json_object_set_new(chat, "tool_choice", v)) return no_memory(err);
    const char *const *keys = is_tool ? keys_tool : str_is(type, "none") ? keys_none : keys_any;
    if (!only_keys(tc, "tool_choice", keys, NULL, err)) return false;
    if (!absent(dp)) {
        if (!json_is_boolean(dp))
            return bad(err, "tool_choice",
                       "'tool_choice.disable_parallel_tool_use' must be a boolean");
        if (json_object_set_new(chat, "parallel_tool_calls", json_boolean(!json_is_true(dp))))
            return no_memory(err);
    }
    return true;
}

// ---- the other fields -------------------------------------------------------------------------

static bool translate_thinking(json_t *body, json_t *chat, bool count_only,
                               struct tl_oai_error *err)
{
    json_t *th = json_object_get(body, "thinking");
    if (absent(th)) return true;
    json_t *type = json_object_get(th, "type");
    if (!json_is_object(th) || !plain_string(type))
        return bad(err, "thinking",
                   "'thinking' must be {\"type\": \"enabled\", ...}, "
                   "{\"type\": \"disabled\"} or {\"type\": \"adaptive\"}");
    json_t *display = json_object_get(th, "display");
    if (!absent(display) && !str_is(display, "summarized"))
        return bad(err, "thinking",
                   "'thinking.display' \"omitted\" is not supported: the thinking text is "
                   "returned whole");
    bool on;
    if (str_is(type, "enabled")) {
        static const char *const keys[] = {"type", "budget_tokens", "display", NULL};
        if (!only_keys(th, "thinking", keys, NULL, err)) return false;
        json_t *b = json_object_get(th, "budget_tokens");
        json_t *mt = json_object_get(body, "max_tokens");
        if (!json_is_integer(b) || json_integer_value(b) < 1024)
            return bad(err, "thinking", "'thinking.budget_tokens' must be an integer >= 1024");
        if (!count_only && json_is_integer(mt) && json_integer_value(b) >= json_integer_value(mt))
            return bad(err, "thinking", "'thinking.budget_tokens' must be less than 'max_tokens'");
        on = true;
    } else if (str_is(type, "disabled") || str_is(type, "adaptive")) {
        static const char *const keys[] = {"type", "display", NULL};
        if (!only_keys(th, "thinking", keys, NULL, err)) return false;
        if (str_is(type, "adaptive")) return true; // the template's default
        on = false;
    } else {
        return bad(err, "thinking",
                   "'thinking.type' must be \"enabled\", \"disabled\" or \"adaptive\"");
    }
    json_t *kw = json_pack("{s:b}", "enable_thinking", on);
    if (!kw || json_object_set_new(chat, "chat_template_kwargs", kw)) return no_memory(err);
    return true;
}

static bool translate_sampling(json_t *body, json_t *chat, struct tl_oai_error *err)
{
    json_t *mt = json_object_get(body, "max_tokens");
    if (absent(mt)) return bad(err, "max_tokens", "'max_tokens' is required");
    if (!json_is_integer(mt) || json_integer_value(mt) < 1 || json_integer_value(mt) > INT32_MAX)
        return bad(err, "max_tokens", "'max_tokens' must be an integer of at least 1");
    json_t *t = json_object_get(body, "temperature");
    if (!absent(t) && (!json_is_number(t) || json_number_value(t) < 0 || json_number_value(t) > 1))
        return bad(err, "temperature", "'temperature' must be a number between 0 and 1");
    json_t *tp = json_object_get(body, "top_p");
    if (!absent(tp) &&
        (!json_is_number(tp) || !(json_number_value(tp) > 0) || json_number_value(tp) > 1))
        return bad(err, "top_p", "'top_p' must be a number greater than 0 and at most 1");
    json_t *tk = json_object_get(body, "top_k");
    if (!absent(tk) && (!json_is_integer(tk) || json_integer_value(tk) < 1))
        return bad(err, "top_k", "'top_k' must be an integer of at least 1");
    json_t *st = json_object_get(body, "stream");
    if (!absent(st) && !json_is_boolean(st))
        return bad(err, "stream", "'stream' must be a boolean");
    json_t *ss = json_object_get(body, "stop_sequences");
    if (!absent(ss)) {
        if (!json_is_array(ss))
            return bad(err, "stop_sequences", "'stop_sequences' must be a list");
        if (json_array_size(ss) > TL_OAI_MAX_STOP)
            return bad(err, "stop_sequences", "'stop_sequences' may hold at most %d strings",
                       TL_OAI_MAX_STOP);
        for (size_t i = 0; i < json_array_size(ss); i++) {
            json_t *s = json_array_get(ss, i);
            if (!plain_string(s) || json_string_length(s) == 0 ||
                json_string_length(s) > TL_OAI_MAX_STOP_LEN)
                return bad(err, "stop_sequences",
                           "'stop_sequences' must hold non-empty strings of at most %d bytes "
                           "(no NUL)",
                           TL_OAI_MAX_STOP_LEN);
        }
        if (json_object_set(chat, "stop", ss)) return no_memory(err);
    }
    json_t *md = json_object_get(body, "metadata");
    if (!absent(md)) { // user_id: an opaque end-user id, of no effect on the output
        static const char *const keys[] = {"user_id", NULL};
        if (!json_is_object(md)) return bad(err, "metadata", "'metadata' must be an object");
        if (!only_keys(md, "metadata", keys, NULL, err)) return false;
        json_t *u = json_object_get(md, "user_id");
        if (!absent(u) && !json_is_string(u))
            return bad(err, "metadata", "'metadata.user_id' must be a string");
    }
    if (json_object_set(chat, "max_tokens", mt) ||
        (!absent(t) && json_object_set(chat, "temperature", t)) ||
        (!absent(tp) && json_object_set(chat, "top_p", tp)) ||
        (!absent(tk) && json_object_set(chat, "top_k", tk)) ||
        (!absent(st) && json_object_set(chat, "stream", st)))
        return no_memory(err);
    return true;
}

// Top-level fields accepted at their neutral value only.
static bool neutral_field(const char *key, json_t *v)
{
    if (absent(v)) return true;
    if (!strcmp(key, "service_tier")) return str_is(v, "auto") || str_is(v, "standard_only");
    if (!strcmp(key, "speed")) return str_is(v, "standard");
    if (!strcmp(key, "cache_control")) return str_is(json_object_get(v, "type"), "ephemeral");
    return false;
}

bool tl_anth_translate(json_t *body, bool count_only, json_t **chat, struct tl_oai_error *err)
{
    *chat = NULL;
    if (!json_is_object(body)) return bad(err, NULL, "the request body must be a JSON object");
    static const char *const both[] = {"model",       "messages", "system", "tools",
                                       "tool_choice", "thinking", NULL};
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
                    return bad(err, k, "'%s' is not supported by this server (only %s)", k,
                               !strcmp(k, "service_tier") ? "\"auto\" or \"standard_only\""
                               : !strcmp(k, "speed")      ? "\"standard\""
                               : !strcmp(k, "cache_control")
                                   ? "{\"type\": \"ephemeral\", of no effect: the prefix cache "
                                     "is automatic}"
                                   : "null");
                known = true;
            }
        if (!known) return bad(err, k, "'%.60s' is not supported by this server", k);
    }
    json_t *c = json_object();
    if (!c) return no_memory(err);
    json_t *model = json_object_get(body, "model");
    bool ok = (absent(model) || !json_object_set(c, "model", model)) &&
              translate_messages(body, c, err) && translate_tools(body, c, err) &&
              translate_tool_choice(body, c, err) && translate_thinking(body, c, count_only, err) &&
              (count_only || translate_sampling(body, c, err));
    if (!ok) {
        json_decref(c);
        return false;
    }
    *chat = c;
    return true;
}

// ---- errors -----------------------------------------------------------------------------------

bool tl_anth_is_path(struct evhttp_request *r)
{
    const struct evhttp_uri *uri = r ? evhttp_request_get_evhttp_uri(r) : NULL;
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    return path && !strncmp(path, "/v1/messages", 12) && (!path[12] || path[12] == '/');
}

json_t *tl_anth_error_json(const struct tl_oai_error *err, const char *request_id)
{
    int st = err->http_status;
    const char *type = st == 401                ? "authentication_error"
                       : st == 403              ? "permission_error"
                       : st == 404              ? "not_found_error"
                       : st == 413              ? "request_too_large"
                       : st == 429              ? "rate_limit_error"
                       : st == 503 || st == 529 ? "overloaded_error"
                       : st >= 500              ? "api_error"
                                                : "invalid_request_error";
    json_t *msg = tl_oai_string(err->message, strlen(err->message));
    json_t *o = msg ? json_pack("{s:s, s:{s:s, s:o}}", "type", "error", "error", "type", type,
                                "message", msg)
                    : NULL;
    if (o && request_id && *request_id &&
        json_object_set_new(o, "request_id", json_string(request_id))) {
        json_decref(o);
        return NULL;
    }
    return o;
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
