/*
 * A /v1/responses stream (see responses.h): the chat.completion.chunk objects the chat path
 * produces, turned into the Responses API's semantic events.
 *
 * DESIGN
 * One item is open at a time. The first chunk (the chat path's role chunk) opens the response:
 * response.created and response.in_progress. Then, as deltas come:
 *   reasoning_content -> a reasoning item: output_item.added, content_part.added (reasoning_text),
 *                        reasoning_text.delta ...
 *   content           -> a message item: output_item.added, content_part.added (output_text),
 *                        output_text.delta ...
 *   tool_calls        -> a function_call item per call (its first delta carries call_id and
 *                        name): output_item.added, function_call_arguments.delta ...
 * A delta of another kind closes the open item (output_text.done / reasoning_text.done,
 * content_part.done, function_call_arguments.done, output_item.done). The end closes what is
 * open and sends response.completed (or .incomplete when max_output_tokens cut it, .failed
 * for an error) carrying the whole Response, built by responses_reply.c from the items as
 * sent, so that it equals the non-streamed Response of the same generation (ids aside). As on
 * the non-streamed side, a reply with neither text nor calls still has one (empty) message.
 * Every event carries "type" and a "sequence_number" counting from 0.
 *
 * Pure over JSON (no sockets); event-loop thread.
 */
#include "server/responses.h"

#include "core/alloc.h"
#include "core/strbuf.h"

#include <string.h>

enum open_kind { OPEN_NONE, OPEN_MESSAGE, OPEN_REASONING, OPEN_CALL };

struct tl_resp_stream {
    json_t *ctx;    // owned reference
    json_t *output; // owned: the items closed so far
    int64_t seq;
    bool started;
    enum open_kind open;
    char item_id[64];
    struct tl_sb text; // the open item's text or arguments
    json_t *call;      // owned: the open function_call item (arguments filled when closed)
    char finish[32];   // the chat finish reason, "" until seen
    bool failed;       // out of memory
};

struct tl_resp_stream *tl_resp_stream_create(json_t *ctx)
{
    struct tl_resp_stream *st = tl_calloc_array(1, sizeof(*st));
    if (!st) return NULL;
    st->output = json_array();
    if (!st->output) {
        free(st);
        return NULL;
    }
    st->ctx = json_incref(ctx);
    tl_sb_init(&st->text);
    return st;
}

void tl_resp_stream_destroy(struct tl_resp_stream *st)
{
    if (!st) return;
    json_decref(st->ctx);
    json_decref(st->output);
    json_decref(st->call);
    tl_sb_free(&st->text);
    free(st);
}

// Appends event ev (stolen) of the given type to evs.
static void emit(struct tl_resp_stream *st, json_t *evs, const char *type, json_t *ev)
{
    if (!ev || json_object_set_new(ev, "type", json_string(type)) ||
        json_object_set_new(ev, "sequence_number", json_integer(st->seq++)) ||
        json_array_append_new(evs, ev)) {
        json_decref(ev);
        st->failed = true;
    }
}

static int out_index(const struct tl_resp_stream *st)
{
    return (int)json_array_size(st->output);
}

static json_t *text_json(struct tl_resp_stream *st)
{
    return tl_oai_string(st->text.buf ? st->text.buf : "", st->text.len);
}

// A part of the open message or reasoning item with the text so far.
static json_t *part(struct tl_resp_stream *st, bool message)
{
    return message ? json_pack("{s:s, s:o, s:[], s:[]}", "type", "output_text", "text",
                               text_json(st), "annotations", "logprobs")
                   : json_pack("{s:s, s:o}", "type", "reasoning_text", "text", text_json(st));
}

// Closes the open item: its done events, and the item joins the output.
static void close_item(struct tl_resp_stream *st, json_t *evs, const char *msg_status)
{
    int oi = out_index(st);
    json_t *item = NULL;
    if (st->open == OPEN_MESSAGE || st->open == OPEN_REASONING) {
        bool message = st->open == OPEN_MESSAGE;
        emit(st, evs, message ? "response.output_text.done" : "response.reasoning_text.done",
             message
                 ? json_pack("{s:s, s:i, s:i, s:o, s:[]}", "item_id", st->item_id, "output_index",
                             oi, "content_index", 0, "text", text_json(st), "logprobs")
                 : json_pack("{s:s, s:i, s:i, s:o}", "item_id", st->item_id, "output_index", oi,
                             "content_index", 0, "text", text_json(st)));
        emit(st, evs, "response.content_part.done",
             json_pack("{s:s, s:i, s:i, s:o}", "item_id", st->item_id, "output_index", oi,
                       "content_index", 0, "part", part(st, message)));
        item = message
                   ? json_pack("{s:s, s:s, s:s, s:s, s:[o]}", "id", st->item_id, "type", "message",
                               "status", msg_status, "role", "assistant", "content", part(st, true))
                   : json_pack("{s:s, s:s, s:[], s:[o]}", "id", st->item_id, "type", "reasoning",
                               "summary", "content", part(st, false));
    } else if (st->open == OPEN_CALL) {
        json_t *args = text_json(st);
        emit(st, evs, "response.function_call_arguments.done",
             json_pack("{s:s, s:i, s:O, s:O}", "item_id", st->item_id, "output_index", oi, "name",
                       json_object_get(st->call, "name"), "arguments", args));
        item = st->call;
        st->call = NULL;
        if (item && (json_object_set(item, "arguments", args) ||
                     json_object_set_new(item, "status", json_string("completed")))) {
            json_decref(item);
            item = NULL;
        }
        json_decref(args);
    } else {
        return;
    }
    emit(st, evs, "response.output_item.done",
         json_pack("{s:i, s:O}", "output_index", oi, "item", item));
    if (!item || json_array_append_new(st->output, item)) st->failed = true;
    st->open = OPEN_NONE;
    tl_sb_free(&st->text);
    tl_sb_init(&st->text);
}

// Opens a message or reasoning item (closing another kind first).
static void open_text_item(struct tl_resp_stream *st, json_t *evs, enum open_kind kind)
{
    if (st->open == kind) return;
    close_item(st, evs, "completed");
    bool message = kind == OPEN_MESSAGE;
    st->open = kind;
    tl_srv_resp_item_id(st->item_id, sizeof(st->item_id), message ? "msg" : "rs");
    int oi = out_index(st);
    json_t *item =
        message ? json_pack("{s:s, s:s, s:s, s:s, s:[]}", "id", st->item_id, "type", "message",
                            "status", "in_progress", "role", "assistant", "content")
                : json_pack("{s:s, s:s, s:[], s:[]}", "id", st->item_id, "type", "reasoning",
                            "summary", "content");
    emit(st, evs, "response.output_item.added",
         json_pack("{s:i, s:o}", "output_index", oi, "item", item));
    emit(st, evs, "response.content_part.added",
         json_pack("{s:s, s:i, s:i, s:o}", "item_id", st->item_id, "output_index", oi,
                   "content_index", 0, "part", part(st, message)));
}

static void text_delta(struct tl_resp_stream *st, json_t *evs, enum open_kind kind, json_t *d)
{
    open_text_item(st, evs, kind);
    tl_sb_add(&st->text, json_string_value(d), json_string_length(d));
    bool message = kind == OPEN_MESSAGE;
    json_t *ev = json_pack("{s:s, s:i, s:i, s:O}", "item_id", st->item_id, "output_index",
                           out_index(st), "content_index", 0, "delta", d);
    if (ev && message) json_object_set_new(ev, "logprobs", json_array());
    emit(st, evs, message ? "response.output_text.delta" : "response.reasoning_text.delta", ev);
}

static void call_delta(struct tl_resp_stream *st, json_t *evs, json_t *tc)
{
    json_t *fn = json_object_get(tc, "function");
    json_t *id = json_object_get(tc, "id");
    if (json_is_string(id)) { // a new call
        close_item(st, evs, "completed");
        st->open = OPEN_CALL;
        tl_srv_resp_item_id(st->item_id, sizeof(st->item_id), "fc");
        const char *name = json_string_value(json_object_get(fn, "name"));
        st->call = json_pack("{s:s, s:s, s:s, s:O, s:s, s:s}", "id", st->item_id, "type",
                             "function_call", "status", "in_progress", "call_id", id, "name",
                             name ? name : "", "arguments", "");
        if (!st->call) st->failed = true;
        emit(st, evs, "response.output_item.added",
             json_pack("{s:i, s:O}", "output_index", out_index(st), "item", st->call));
    }
    json_t *args = json_object_get(fn, "arguments");
    if (st->open != OPEN_CALL || !json_is_string(args) || !json_string_length(args)) return;
    tl_sb_add(&st->text, json_string_value(args), json_string_length(args));
    emit(st, evs, "response.function_call_arguments.delta",
         json_pack("{s:s, s:i, s:O}", "item_id", st->item_id, "output_index", out_index(st),
                   "delta", args));
}

json_t *tl_resp_stream_chunk(struct tl_resp_stream *st, json_t *chunk)
{
    json_t *evs = json_array();
    if (!evs || !chunk) st->failed = true;
    if (!st->failed && !st->started) {
        st->started = true;
        json_t *r = tl_srv_resp_object(st->ctx, "in_progress", NULL, NULL, json_array(), 0, 0, 0);
        if (r) json_object_set_new(r, "usage", json_null());
        emit(st, evs, "response.created", json_pack("{s:O}", "response", r));
        emit(st, evs, "response.in_progress", json_pack("{s:o}", "response", r));
    }
    json_t *choice = json_array_get(json_object_get(chunk, "choices"), 0);
    json_t *delta = json_object_get(choice, "delta");
    json_t *rc = json_object_get(delta, "reasoning_content");
    json_t *content = json_object_get(delta, "content");
    json_t *calls = json_object_get(delta, "tool_calls");
    if (!st->failed && json_is_string(rc) && json_string_length(rc))
        text_delta(st, evs, OPEN_REASONING, rc);
    if (!st->failed && json_is_string(content) && json_string_length(content))
        text_delta(st, evs, OPEN_MESSAGE, content);
    for (size_t i = 0; !st->failed && i < json_array_size(calls); i++)
        call_delta(st, evs, json_array_get(calls, i));
    json_t *fin = json_object_get(choice, "finish_reason");
    if (json_is_string(fin)) snprintf(st->finish, sizeof(st->finish), "%s", json_string_value(fin));
    json_decref(chunk);
    if (st->failed || !tl_sb_ok(&st->text)) {
        json_decref(evs);
        return NULL;
    }
    return evs;
}

// Whether the output holds a message or a call (else an empty message is added at the end).
static bool has_answer(const struct tl_resp_stream *st)
{
    for (size_t i = 0; i < json_array_size(st->output); i++) {
        const char *t = json_string_value(json_object_get(json_array_get(st->output, i), "type"));
        if (t && (!strcmp(t, "message") || !strcmp(t, "function_call"))) return true;
    }
    return false;
}

json_t *tl_resp_stream_end(struct tl_resp_stream *st, int64_t n_in, int64_t n_out, int64_t n_cached,
                           json_t **final)
{
    *final = NULL;
    json_t *evs = json_array();
    if (!evs) return NULL;
    const char *status, *reason;
    tl_srv_resp_status(st->finish[0] ? st->finish : NULL, &status, &reason);
    const char *msg_status = strcmp(status, "completed") ? "incomplete" : "completed";
    close_item(st, evs, msg_status);
    if (!has_answer(st)) {
        open_text_item(st, evs, OPEN_MESSAGE);
        close_item(st, evs, msg_status);
    }
    char err[80];
    snprintf(err, sizeof(err), "generation ended with '%s'", st->finish);
    json_t *r = tl_srv_resp_object(st->ctx, status, reason, strcmp(status, "failed") ? NULL : err,
                                   json_incref(st->output), n_in, n_out, n_cached);
    const char *type = !strcmp(status, "completed")    ? "response.completed"
                       : !strcmp(status, "incomplete") ? "response.incomplete"
                                                       : "response.failed";
    emit(st, evs, type, r ? json_pack("{s:O}", "response", r) : NULL);
    if (st->failed || !r) {
        json_decref(r);
        json_decref(evs);
        return NULL;
    }
    *final = r;
    return evs;
}
