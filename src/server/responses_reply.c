/*
 * The Response object of the Responses API (see responses.h): the envelope with the request's
 * echoed fields, status and usage, and a chat completion's first choice turned into output
 * items (a reasoning item, a message with one output_text part, one function_call item per
 * call, in that order).
 *
 * Status: finish "stop" / "tool_calls" -> completed; "length" -> incomplete with reason
 * "max_output_tokens" (as OpenAI, also when the context ran out); a deadline, cancellation or
 * error -> failed with an error object.
 *
 * Pure builders over JSON; event-loop thread (item ids come from one splitmix64 state).
 */
#include "server/responses.h"

#include "core/clock.h"
#include "core/hash.h"

#include <stdio.h>
#include <string.h>

void tl_srv_resp_item_id(char *out, size_t size, const char *prefix)
{
    static uint64_t state;
    if (!state) state = (uint64_t)tl_wall_time_us() ^ (uint64_t)(uintptr_t)&state;
    uint64_t a = tl_splitmix64(&state), b = tl_splitmix64(&state);
    snprintf(out, size, "%s_%016llx%016llx", prefix, (unsigned long long)a, (unsigned long long)b);
}

void tl_srv_resp_status(const char *finish, const char **status, const char **reason)
{
    *reason = NULL;
    if (!finish || !strcmp(finish, "stop") || !strcmp(finish, "tool_calls")) {
        *status = "completed";
    } else if (!strcmp(finish, "length")) {
        *status = "incomplete";
        *reason = "max_output_tokens";
    } else {
        *status = "failed";
    }
}

static json_t *get_or_null(const json_t *ctx, const char *key)
{
    json_t *v = json_object_get(ctx, key);
    return v ? json_incref(v) : json_null();
}

json_t *tl_srv_resp_object(const json_t *ctx, const char *status, const char *reason,
                           const char *error, json_t *output, int64_t n_in, int64_t n_out,
                           int64_t n_cached)
{
    json_t *o = json_object();
    if (!o || !output) {
        json_decref(o);
        json_decref(output);
        return NULL;
    }
    json_t *tools = json_object_get(ctx, "tools");
    json_t *text = json_object_get(ctx, "text");
    json_t *md = json_object_get(ctx, "metadata");
    json_t *temp = json_object_get(ctx, "temperature");
    json_t *top_p = json_object_get(ctx, "top_p");
    json_t *ptc = json_object_get(ctx, "parallel_tool_calls");
    json_t *tc = json_object_get(ctx, "tool_choice");
    json_t *store = json_object_get(ctx, "store");
    int fails = 0;
    fails += json_object_set_new(o, "id", get_or_null(ctx, "id"));
    fails += json_object_set_new(o, "object", json_string("response"));
    fails += json_object_set_new(o, "created_at", get_or_null(ctx, "created_at"));
    fails += json_object_set_new(o, "status", json_string(status));
    fails += json_object_set_new(
        o, "error",
        error ? json_pack("{s:s, s:s}", "code", "server_error", "message", error) : json_null());
    fails += json_object_set_new(o, "incomplete_details",
                                 reason ? json_pack("{s:s}", "reason", reason) : json_null());
    fails += json_object_set_new(o, "instructions", get_or_null(ctx, "instructions"));
    fails += json_object_set_new(o, "max_output_tokens", get_or_null(ctx, "max_output_tokens"));
    fails += json_object_set_new(o, "model", get_or_null(ctx, "model"));
    fails += json_object_set_new(o, "output", output);
    fails += json_object_set_new(o, "parallel_tool_calls",
                                 json_boolean(!json_is_boolean(ptc) || json_is_true(ptc)));
    fails +=
        json_object_set_new(o, "previous_response_id", get_or_null(ctx, "previous_response_id"));
    fails += json_object_set_new(o, "reasoning", json_pack("{s:n, s:n}", "effort", "summary"));
    fails += json_object_set_new(o, "store", json_boolean(!json_is_false(store)));
    fails += json_object_set_new(o, "temperature",
                                 json_is_number(temp) ? json_incref(temp) : json_real(1.0));
    fails += json_object_set_new(o, "text",
                                 json_is_object(text) && json_object_get(text, "format")
                                     ? json_incref(text)
                                     : json_pack("{s:{s:s}}", "format", "type", "text"));
    fails += json_object_set_new(o, "tool_choice",
                                 tc && !json_is_null(tc) ? json_incref(tc) : json_string("auto"));
    fails +=
        json_object_set_new(o, "tools", json_is_array(tools) ? json_incref(tools) : json_array());
    fails += json_object_set_new(o, "top_p",
                                 json_is_number(top_p) ? json_incref(top_p) : json_real(1.0));
    fails += json_object_set_new(o, "truncation", json_string("disabled"));
    fails += json_object_set_new(
        o, "usage",
        json_pack("{s:I, s:{s:I}, s:I, s:{s:I}, s:I}", "input_tokens", (json_int_t)n_in,
                  "input_tokens_details", "cached_tokens", (json_int_t)n_cached, "output_tokens",
                  (json_int_t)n_out, "output_tokens_details", "reasoning_tokens", (json_int_t)0,
                  "total_tokens", (json_int_t)(n_in + n_out)));
    fails += json_object_set_new(o, "user", get_or_null(ctx, "user"));
    fails +=
        json_object_set_new(o, "metadata", json_is_object(md) ? json_incref(md) : json_object());
    if (fails) {
        json_decref(o);
        return NULL;
    }
    return o;
}

// One output item appended (stolen); false when out of memory.
static bool add(json_t *output, json_t *item)
{
    return item && !json_array_append_new(output, item);
}

json_t *tl_srv_resp_from_chat(const json_t *ctx, const json_t *completion)
{
    json_t *choice = json_array_get(json_object_get(completion, "choices"), 0);
    json_t *msg = json_object_get(choice, "message");
    json_t *usage = json_object_get(completion, "usage");
    json_t *output = json_array();
    if (!output || !msg) {
        json_decref(output);
        return NULL;
    }
    char id[64];
    bool ok = true;
    const char *status, *reason;
    json_t *fin = json_object_get(choice, "finish_reason");
    tl_srv_resp_status(json_string_value(fin), &status, &reason);
    json_t *reasoning = json_object_get(msg, "reasoning_content");
    if (json_is_string(reasoning) && json_string_length(reasoning)) {
        tl_srv_resp_item_id(id, sizeof(id), "rs");
        ok = add(output,
                 json_pack("{s:s, s:s, s:[], s:[{s:s, s:O}]}", "id", id, "type", "reasoning",
                           "summary", "content", "type", "reasoning_text", "text", reasoning));
    }
    json_t *content = json_object_get(msg, "content");
    json_t *calls = json_object_get(msg, "tool_calls");
    bool text = json_is_string(content) && json_string_length(content);
    if (ok && (text || json_array_size(calls) == 0)) {
        tl_srv_resp_item_id(id, sizeof(id), "msg");
        ok = add(output, json_pack("{s:s, s:s, s:s, s:s, s:[{s:s, s:s%, s:[], s:[]}]}", "id", id,
                                   "type", "message", "status",
                                   strcmp(status, "completed") ? "incomplete" : "completed", "role",
                                   "assistant", "content", "type", "output_text", "text",
                                   text ? json_string_value(content) : "",
                                   text ? json_string_length(content) : (size_t)0, "annotations",
                                   "logprobs"));
    }
    for (size_t i = 0; ok && i < json_array_size(calls); i++) {
        json_t *c = json_array_get(calls, i);
        json_t *fn = json_object_get(c, "function");
        tl_srv_resp_item_id(id, sizeof(id), "fc");
        ok = add(output, json_pack("{s:s, s:s, s:s, s:O, s:O, s:O}", "id", id, "type",
                                   "function_call", "status", "completed", "call_id",
                                   json_object_get(c, "id"), "name", json_object_get(fn, "name"),
                                   "arguments", json_object_get(fn, "arguments")));
    }
    if (!ok) {
        json_decref(output);
        return NULL;
    }
    char err[120];
    snprintf(err, sizeof(err), "generation ended with '%s'",
             json_is_string(fin) ? json_string_value(fin) : "?");
    int64_t n_in = json_integer_value(json_object_get(usage, "prompt_tokens"));
    int64_t n_out = json_integer_value(json_object_get(usage, "completion_tokens"));
    int64_t n_cached = json_integer_value(
        json_object_get(json_object_get(usage, "prompt_tokens_details"), "cached_tokens"));
    return tl_srv_resp_object(ctx, status, reason, strcmp(status, "failed") ? NULL : err, output,
                              n_in, n_out, n_cached);
}
