/*
 * A conversation through a chat template (see chat_render.h): adapts the OpenAI messages as
 * vLLM does (text parts joined with "\n", tool call arguments parsed from their JSON string),
 * assembles the template's variables as transformers does, renders, and applies
 * continue_final_message as transformers does (cut after the last occurrence of the final
 * message's content, or of its stripped form).
 *
 * Ownership: the caller's JSON is never modified; adapted copies are freed before returning.
 * Thread-safe.
 */
#include "chat/chat_render.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The texts of a list of content parts joined with "\n" (non-text parts are skipped: the server
// refuses them before rendering). New reference.
static json_t *join_parts(const json_t *parts)
{
    size_t total = 0, n = json_array_size(parts);
    for (size_t i = 0; i < n; i++) {
        json_t *text = json_object_get(json_array_get(parts, i), "text");
        if (json_is_string(text)) total += json_string_length(text) + 1;
    }
    char *buf = malloc(total + 1);
    if (!buf) return NULL;
    size_t len = 0;
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        json_t *text = json_object_get(json_array_get(parts, i), "text");
        if (!json_is_string(text)) continue;
        if (!first) buf[len++] = '\n';
        memcpy(buf + len, json_string_value(text), json_string_length(text));
        len += json_string_length(text);
        first = false;
    }
    json_t *s = json_stringn(buf, len);
    free(buf);
    return s;
}

// tool_calls with each function.arguments string parsed. New reference.
static json_t *adapt_tool_calls(const json_t *calls)
{
    json_t *out = json_deep_copy(calls);
    if (!out) return NULL;
    size_t i;
    json_t *call;
    json_array_foreach(out, i, call)
    {
        json_t *fn = json_object_get(call, "function");
        json_t *args = json_object_get(fn, "arguments");
        if (!json_is_string(args)) continue;
        json_t *parsed = json_loadb(json_string_value(args), json_string_length(args),
                                    JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        if (parsed) json_object_set_new(fn, "arguments", parsed);
    }
    return out;
}

// Content as a list of parts, for templates that iterate over it: a string becomes one text
// part. New reference.
static json_t *as_parts(const json_t *content)
{
    if (!json_is_string(content)) return json_incref((json_t *)content);
    return json_pack("[{s:s,s:O}]", "type", "text", "text", content);
}

static json_t *adapt_messages(const json_t *messages, bool parts)
{
    json_t *out = json_array();
    if (!out) return NULL;
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m)
    {
        json_t *copy = json_is_object(m) ? json_copy(m) : json_deep_copy(m);
        if (!copy || json_array_append_new(out, copy)) goto fail;
        if (!json_is_object(m)) continue;
        // jansson's json_copy skips a key it cannot insert (out of memory) and still succeeds.
        if (json_object_size(copy) != json_object_size(m)) goto fail;
        json_t *content = json_object_get(m, "content");
        if (parts && json_is_string(content) &&
            json_object_set_new(copy, "content", as_parts(content)))
            goto fail;
        if (!parts && json_is_array(content) &&
            json_object_set_new(copy, "content", join_parts(content)))
            goto fail;
        json_t *calls = json_object_get(m, "tool_calls");
        if (json_is_array(calls) &&
            json_object_set_new(copy, "tool_calls", adapt_tool_calls(calls)))
            goto fail;
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

// transformers' continue_final_message: keep the text up to the end of the last occurrence of
// the final message's content (or of its stripped form when the template trimmed it).
static void cut_after_final(const json_t *messages, char *out, size_t *out_len)
{
    json_t *last = json_array_get(messages, json_array_size(messages) - 1);
    json_t *content = json_object_get(last, "content");
    if (json_is_array(content)) // the last part's text, as transformers does
        content = json_object_get(json_array_get(content, json_array_size(content) - 1), "text");
    if (!json_is_string(content)) return;
    const char *s = json_string_value(content);
    size_t n = json_string_length(content);
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) { // stripped
            while (n && strchr(" \t\n\r\v\f", *s))
                s++, n--;
            while (n && strchr(" \t\n\r\v\f", s[n - 1]))
                n--;
        }
        if (n > *out_len) continue;
        for (size_t i = *out_len - n + 1; i-- > 0;) {
            if (!memcmp(out + i, s, n)) {
                *out_len = i + n;
                out[*out_len] = 0;
                return;
            }
        }
    }
}

tl_status tl_chat_render_vars(const tl_jinja_template *t, const struct tl_chat_vars *v, char **out,
                              size_t *out_len, enum tl_jinja_error_kind *kind, char *err,
                              size_t err_size)
{
    *out = NULL;
    *out_len = 0;
    *kind = TL_JINJA_ERROR;
    if (!json_is_array(v->messages)) {
        snprintf(err, err_size, "messages must be a list");
        return TL_ERR_INVALID_ARG;
    }
    if (v->add_generation_prompt && v->continue_final_message) {
        snprintf(err, err_size,
                 "continue_final_message and add_generation_prompt cannot both be true");
        return TL_ERR_INVALID_ARG;
    }
    if (v->continue_final_message && json_array_size(v->messages) == 0) {
        snprintf(err, err_size, "continue_final_message needs a final message");
        return TL_ERR_INVALID_ARG;
    }
    json_t *vars = json_object();
    json_t *extra = NULL;
    json_t *msgs = adapt_messages(v->messages, tl_jinja_iterates_content(t));
    tl_status st = TL_ERR_NOMEM;
    if (!vars || !msgs) goto out;
    // transformers: render(messages, tools, documents, add_generation_prompt, **kwargs) where
    // kwargs are the special tokens overridden by the caller's template kwargs.
    if (json_object_set(vars, "messages", msgs) ||
        json_object_set_new(vars, "tools", v->tools ? json_deep_copy(v->tools) : json_null()) ||
        json_object_set_new(vars, "documents",
                            v->documents ? json_deep_copy(v->documents) : json_null()) ||
        json_object_set_new(vars, "add_generation_prompt",
                            json_boolean(v->add_generation_prompt)) ||
        json_object_set_new(vars, "bos_token", json_string(v->bos_token ? v->bos_token : "")) ||
        json_object_set_new(vars, "eos_token", json_string(v->eos_token ? v->eos_token : "")))
        goto out;
    if (json_is_object(v->kwargs)) {
        extra = json_deep_copy(v->kwargs);
        if (!extra) goto out;
        static const char *const fixed[] = {"messages", "tools", "documents",
                                            "add_generation_prompt"};
        for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
            json_object_del(extra, fixed[i]);
    }
    st = tl_jinja_render(t, vars, extra, NULL, out, out_len, kind, err, err_size);
    if (st == TL_OK && v->continue_final_message) cut_after_final(v->messages, *out, out_len);
out:
    if (st == TL_ERR_NOMEM) snprintf(err, err_size, "out of memory");
    json_decref(vars);
    json_decref(msgs);
    json_decref(extra);
    return st;
}
