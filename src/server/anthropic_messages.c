/*
 * The Anthropic Messages API, request side: a Messages body's system prompt and messages turned
 * into OpenAI chat messages (see anthropic.h, and anthropic.c for the mapping as a whole).
 *
 * Content blocks are checked with Anthropic's names for the 400s: text (cache_control accepted,
 * citations refused), tool_result in user turns (it must answer a tool_use of the previous
 * assistant turn), tool_use and thinking in assistant turns; image, document,
 * redacted_thinking and server-tool blocks are refused by name. Consecutive turns of one role
 * combine, as Anthropic combines them; a final assistant turn is a prefill.
 *
 * Pure; thread-safe.
 */
#include "server/anthropic.h"

#include <stdio.h>
#include <string.h>

// ---- content ----------------------------------------------------------------------------------

// A text block {"type": "text", "text", ["cache_control"], ["citations": null or []]}.
static bool check_text_block(json_t *b, const char *where, struct tl_oai_error *err)
{
    static const char *const keys[] = {"type", "text", "citations", NULL};
    static const char *const harmless[] = {"cache_control", NULL};
    if (!tl__anth_only_keys(b, where, keys, harmless, err)) return false;
    if (!json_is_string(json_object_get(b, "text")))
        return tl__anth_bad(err, where, "'%s.text' must be a string", where);
    json_t *cit = json_object_get(b, "citations");
    if (!tl__anth_absent(cit) && !(json_is_array(cit) && json_array_size(cit) == 0))
        return tl__anth_bad(err, where, "'%s.citations' is not supported", where);
    return tl__anth_cache_control(json_object_get(b, "cache_control"), where, err);
}

// A block's type, or a 400: blocks are objects with a string "type".
static const char *block_type(json_t *b, const char *where, struct tl_oai_error *err)
{
    if (!json_is_object(b))
        return tl__anth_bad(err, where, "'%s' must be a content block object", where), NULL;
    json_t *t = json_object_get(b, "type");
    if (!tl__anth_plain(t))
        return tl__anth_bad(err, where, "'%s.type' must be a string", where), NULL;
    return json_string_value(t);
}

static bool unsupported_block(const char *type, const char *where, struct tl_oai_error *err)
{
    if (!strcmp(type, "image") || !strcmp(type, "document"))
        return tl__anth_bad(err, where,
                            "'%s': %s blocks are not supported: tokenloom serves text-only models",
                            where, type);
    return tl__anth_bad(err, where, "'%s': content blocks of type '%.60s' are not supported here",
                        where, type);
}

// Content given as a string (when allowed) or as text blocks only (system, tool_result) -> the
// string or a list of text parts (a new reference); NULL with *err.
static json_t *text_content(json_t *c, const char *where, bool allow_string,
                            struct tl_oai_error *err)
{
    if (json_is_string(c) && allow_string) return json_incref(c);
    if (!json_is_array(c))
        return tl__anth_bad(err, where, "'%s' must be a string or a list of text blocks", where),
               NULL;
    json_t *parts = json_array();
    if (!parts) return tl__anth_no_memory(err), NULL;
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
            return tl__anth_no_memory(err), NULL;
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
    } else if (!tl__anth_absent(c)) {
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
        return tl__anth_no_memory(err), NULL;
    }
    json_t *s = json_stringn(sb.buf ? sb.buf : "", sb.len);
    tl_sb_free(&sb);
    if (!s) tl__anth_no_memory(err);
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
    return tl__anth_str_is(json_object_get(m, "role"), role) ? m : NULL;
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
                return json_decref(parts), tl__anth_no_memory(err);
            c = l;
        }
        if (json_is_string(parts)) {
            json_t *p = json_pack("{s:s, s:O}", "type", "text", "text", parts);
            bool fail = !p || json_array_append_new(c, p);
            json_decref(parts);
            return fail ? tl__anth_no_memory(err) : true;
        }
        bool fail = json_array_extend(c, parts) != 0;
        json_decref(parts);
        return fail ? tl__anth_no_memory(err) : true;
    }
    json_t *msg = json_pack("{s:s, s:o}", "role", role, "content", parts);
    if (!msg || json_array_append_new(cv->out, msg)) return tl__anth_no_memory(err);
    return true;
}

static bool user_turn(struct conv *cv, json_t *content, const char *where, struct tl_oai_error *err)
{
    if (json_is_string(content)) return add_text_message(cv, "user", json_incref(content), err);
    if (!json_is_array(content))
        return tl__anth_bad(err, where, "'%s' must be a string or a list of content blocks", where);
    json_t *parts = json_array();
    if (!parts) return tl__anth_no_memory(err);
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
        if (!tl__anth_only_keys(b, sub, keys, harmless, err) ||
            !tl__anth_cache_control(json_object_get(b, "cache_control"), sub, err))
            goto fail;
        json_t *id = json_object_get(b, "tool_use_id");
        json_t *is_error = json_object_get(b, "is_error");
        if (!tl__anth_plain(id)) {
            tl__anth_bad(err, sub, "'%s.tool_use_id' must be a string", sub);
            goto fail;
        }
        json_t *name = json_object_get(cv->last_ids, json_string_value(id));
        if (!name) {
            tl__anth_bad(
                err, sub,
                "'%s': tool_result for '%.80s' has no matching tool_use block in the previous "
                "assistant message",
                sub, json_string_value(id));
            goto fail;
        }
        if (!tl__anth_absent(is_error) && !json_is_boolean(is_error)) {
            tl__anth_bad(err, sub, "'%s.is_error' must be a boolean", sub);
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
            if (!(parts = json_array())) return tl__anth_no_memory(err);
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
    tl__anth_no_memory(err);
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
        if (!m || json_array_append_new(cv->out, m)) return tl__anth_no_memory(err);
    }
    json_t *parts = json_object_get(m, "content");
    json_t *calls = json_object_get(m, "tool_calls");
    if (json_is_string(content))
        return json_array_append_new(parts,
                                     json_pack("{s:s, s:O}", "type", "text", "text", content))
                   ? tl__anth_no_memory(err)
                   : true;
    if (!json_is_array(content))
        return tl__anth_bad(err, where, "'%s' must be a string or a list of content blocks", where);
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
                return tl__anth_no_memory(err);
        } else if (!strcmp(type, "thinking")) {
            static const char *const keys[] = {"type", "thinking", "signature", NULL};
            if (!tl__anth_only_keys(b, sub, keys, NULL, err)) return false;
            json_t *t = json_object_get(b, "thinking");
            if (!json_is_string(t))
                return tl__anth_bad(err, sub, "'%s.thinking' must be a string", sub);
            json_t *r = json_object_get(m, "reasoning_content");
            struct tl_sb sb;
            tl_sb_init(&sb);
            tl_sb_add(&sb, json_string_value(r), json_string_length(r));
            tl_sb_add(&sb, json_string_value(t), json_string_length(t));
            bool ok =
                tl_sb_ok(&sb) && !json_object_set_new(m, "reasoning_content",
                                                      json_stringn(sb.buf ? sb.buf : "", sb.len));
            tl_sb_free(&sb);
            if (!ok) return tl__anth_no_memory(err);
        } else if (!strcmp(type, "tool_use")) {
            static const char *const keys[] = {"type", "id", "name", "input", NULL};
            static const char *const harmless[] = {"cache_control", NULL};
            if (!tl__anth_only_keys(b, sub, keys, harmless, err)) return false;
            json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name");
            json_t *input = json_object_get(b, "input");
            if (!tl__anth_plain(id) || !json_string_length(id))
                return tl__anth_bad(err, sub, "'%s.id' must be a non-empty string", sub);
            if (!tl__anth_plain(name) || !json_string_length(name))
                return tl__anth_bad(err, sub, "'%s.name' must be a non-empty string", sub);
            if (!json_is_object(input))
                return tl__anth_bad(err, sub, "'%s.input' must be an object", sub);
            char *args = json_dumps(input, JSON_COMPACT);
            json_t *call = args ? json_pack("{s:O, s:s, s:{s:O, s:s}}", "id", id, "type",
                                            "function", "function", "name", name, "arguments", args)
                                : NULL;
            free(args);
            if (!call || json_array_append_new(calls, call) ||
                json_object_set(cv->cur_ids, json_string_value(id), name))
                return tl__anth_no_memory(err);
        } else if (!strcmp(type, "redacted_thinking")) {
            return tl__anth_bad(
                err, sub,
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
    if (!tl__anth_str_is(json_object_get(m, "role"), "assistant")) return true;
    json_t *parts = json_object_get(m, "content");
    if (json_is_array(parts) && json_array_size(parts) == 1) {
        if (json_object_set(m, "content", json_object_get(json_array_get(parts, 0), "text")))
            return tl__anth_no_memory(err);
    } else if (json_is_array(parts) && json_array_size(parts) == 0) {
        json_t *calls = json_object_get(m, "tool_calls");
        if (json_object_set_new(m, "content",
                                json_array_size(calls) ? json_null() : json_string("")))
            return tl__anth_no_memory(err);
    }
    if (!json_string_length(json_object_get(m, "reasoning_content")))
        json_object_del(m, "reasoning_content");
    if (!json_array_size(json_object_get(m, "tool_calls"))) json_object_del(m, "tool_calls");
    return true;
}

bool tl__anth_translate_messages(json_t *body, json_t *chat, struct tl_oai_error *err)
{
    struct conv cv = {json_array(), json_object(), json_object()};
    bool ok = false;
    if (!cv.out || !cv.last_ids || !cv.cur_ids) {
        tl__anth_no_memory(err);
        goto out;
    }
    json_t *sys = json_object_get(body, "system");
    if (!tl__anth_absent(sys)) {
        json_t *c = text_content(sys, "system", true, err);
        if (!c) goto out;
        if (json_is_string(c) && json_string_length(c) == 0) {
            json_decref(c);
        } else if (!add_text_message(&cv, "system", c, err)) {
            goto out;
        }
    }
    json_t *msgs = json_object_get(body, "messages");
    if (tl__anth_absent(msgs)) {
        tl__anth_bad(err, "messages", "'messages' is required");
        goto out;
    }
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        tl__anth_bad(err, "messages", "'messages' must be a non-empty list");
        goto out;
    }
    if (json_array_size(msgs) > TL_OAI_MAX_MESSAGES) {
        tl__anth_bad(err, "messages", "'messages' may hold at most %d entries",
                     TL_OAI_MAX_MESSAGES);
        goto out;
    }
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        json_t *m = json_array_get(msgs, i);
        char where[64];
        snprintf(where, sizeof(where), "messages[%zu]", i);
        if (!json_is_object(m)) {
            tl__anth_bad(err, where, "'%s' must be an object", where);
            goto out;
        }
        static const char *const keys[] = {"role", "content", NULL};
        if (!tl__anth_only_keys(m, where, keys, NULL, err)) goto out;
        json_t *role = json_object_get(m, "role");
        json_t *content = json_object_get(m, "content");
        char sub[80];
        snprintf(sub, sizeof(sub), "%s.content", where);
        if (tl__anth_absent(content)) {
            tl__anth_bad(err, sub, "'%s' is required", sub);
            goto out;
        }
        bool assistant = tl__anth_str_is(role, "assistant");
        if (!assistant) { // a turn that is not the assistant's ends its tool_use ids
            json_object_clear(cv.last_ids);
            json_object_update(cv.last_ids, cv.cur_ids);
            json_object_clear(cv.cur_ids);
        }
        if (tl__anth_str_is(role, "user")) {
            if (!user_turn(&cv, content, sub, err)) goto out;
            json_object_clear(cv.last_ids);
        } else if (assistant) {
            if (!assistant_turn(&cv, content, sub, err)) goto out;
        } else if (tl__anth_str_is(role, "system")) {
            json_t *c = text_content(content, sub, true, err);
            if (!c || !add_text_message(&cv, "system", c, err)) goto out;
        } else {
            snprintf(sub, sizeof(sub), "%s.role", where);
            tl__anth_bad(err, sub, "'%s' must be \"user\" or \"assistant\"", sub);
            goto out;
        }
    }
    for (size_t i = 0; i < json_array_size(cv.out); i++)
        if (!tidy_assistant(json_array_get(cv.out, i), err)) goto out;
    // A final assistant turn is a prefill: the reply continues it.
    ok = json_object_set(chat, "messages", cv.out) == 0 &&
         (!tl__anth_str_is(json_object_get(json_array_get(msgs, json_array_size(msgs) - 1), "role"),
                           "assistant") ||
          json_object_set_new(chat, "continue_final_message", json_true()) == 0);
    if (!ok) tl__anth_no_memory(err);
out:
    json_decref(cv.out);
    json_decref(cv.last_ids);
    json_decref(cv.cur_ids);
    return ok;
}
