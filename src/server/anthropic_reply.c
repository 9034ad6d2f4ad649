/*
 * The Anthropic Messages API, reply side (see anthropic.h): the Message object and the event
 * stream of a request that took the chat path.
 *
 * DESIGN
 * The model's text is parsed by the chat path's reply parser (chat_reply.c: reasoning, content
 * and checked tool calls, in reply order), so both APIs split a reply the same way. Streaming,
 * its OpenAI-shaped deltas are rewritten as Messages events: a delta of another kind than the
 * open block closes it (content_block_stop) and opens the next (content_block_start); text is
 * a text_delta, reasoning a thinking_delta, a call a tool_use block whose input arrives whole in
 * one input_json_delta (the parser reports a call only once it is complete and valid). The
 * stream is message_start, ping, the blocks, message_delta (stop_reason, stop_sequence, usage),
 * message_stop; every event is "event: NAME" plus its JSON, as the SDKs read it. A whole reply
 * is folded from the same deltas (the parser runs in its streaming mode for Messages requests),
 * so it holds the blocks, in the order, that a client assembles from the stream.
 *
 * stop_reason: "max_tokens" for the length limit, "tool_use" when the reply made calls,
 * "stop_sequence" when one of the request's stop_sequences ended it (found as the stop string
 * that ends within the raw text of the last generated token: the engine stops at the token
 * that completes a stop string and returns the text before it), else "end_turn". A cancelled
 * or timed-out choice reports tokenloom's "abort" / "timeout".
 *
 * usage.input_tokens is the whole prompt (prefix-cache hits included: tokenloom's cache is
 * automatic, not Anthropic's cache_control), so it equals what count_tokens answers.
 *
 * Event-loop thread only.
 */
#include "server/anthropic.h"

#include "core/alloc.h"
#include "server/request.h"

#include <stdlib.h>
#include <string.h>

struct tl_srv_anth {
    struct tl_anth_stream st; // streaming: the open block
    struct tl_sb raw;         // with stop sequences: the generated tokens' raw text, its tail
    size_t last_len;          // bytes of the last token in raw
    bool failed;              // memory ran out
};

// ---- framing and the block state --------------------------------------------------------------

static int dump_to_sb(const char *buf, size_t n, void *data)
{
    tl_sb_add(data, buf, n);
    return tl_sb_ok(data) ? 0 : -1;
}

// Not json_dumps: when an append fails while it writes an object key, jansson goes on and
// returns text with the key missing; the sticky buffer notices any failed append.
bool tl_anth_sse(struct tl_sb *out, const char *name, json_t *obj)
{
    tl_sb_adds(out, "event: ");
    tl_sb_adds(out, name);
    tl_sb_adds(out, "\ndata: ");
    if (!obj || json_dump_callback(obj, dump_to_sb, out, JSON_COMPACT)) out->failed = true;
    json_decref(obj);
    tl_sb_adds(out, "\n\n");
    return tl_sb_ok(out);
}

char *tl_anth_tool_id(const char *call_id)
{
    const char *rest = !strncmp(call_id, "call_", 5) ? call_id + 5 : call_id;
    size_t n = strlen(rest);
    char *id = tl_malloc(n + 7);
    if (!id) return NULL;
    memcpy(id, "toolu_", 6);
    memcpy(id + 6, rest, n + 1);
    return id;
}

void tl_anth_stream_close(struct tl_anth_stream *st, struct tl_sb *out)
{
    if (st->open == TL_ANTH_NONE) return;
    if (!tl_anth_sse(out, "content_block_stop",
                     json_pack("{s:s, s:i}", "type", "content_block_stop", "index", st->index)))
        out->failed = true;
    st->open = TL_ANTH_NONE;
    st->index++;
}

// Opens a block of kind k (closing another first) with its content_block_start.
static bool open_block(struct tl_anth_stream *st, enum tl_anth_block k, json_t *block,
                       struct tl_sb *out)
{
    if (st->open == k && k != TL_ANTH_TOOL_USE) {
        json_decref(block);
        return true;
    }
    tl_anth_stream_close(st, out);
    st->open = k;
    json_t *ev = block ? json_pack("{s:s, s:i, s:o}", "type", "content_block_start", "index",
                                   st->index, "content_block", block)
                       : NULL;
    return tl_anth_sse(out, "content_block_start", ev);
}

static bool block_delta(struct tl_anth_stream *st, json_t *delta, struct tl_sb *out)
{
    json_t *ev = delta ? json_pack("{s:s, s:i, s:o}", "type", "content_block_delta", "index",
                                   st->index, "delta", delta)
                       : NULL;
    return tl_anth_sse(out, "content_block_delta", ev);
}

bool tl_anth_stream_delta(struct tl_anth_stream *st, json_t *delta, struct tl_sb *out)
{
    json_t *text = json_object_get(delta, "content");
    json_t *think = json_object_get(delta, "reasoning_content");
    json_t *call = json_array_get(json_object_get(delta, "tool_calls"), 0);
    if (json_string_length(text)) {
        return open_block(st, TL_ANTH_TEXT, json_pack("{s:s, s:s}", "type", "text", "text", ""),
                          out) &&
               block_delta(st, json_pack("{s:s, s:O}", "type", "text_delta", "text", text), out);
    }
    if (json_string_length(think)) {
        return open_block(st, TL_ANTH_THINKING,
                          json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "",
                                    "signature", ""),
                          out) &&
               block_delta(st, json_pack("{s:s, s:O}", "type", "thinking_delta", "thinking", think),
                           out);
    }
    if (!call) return true;
    json_t *fn = json_object_get(call, "function");
    json_t *id = json_object_get(call, "id");
    if (json_is_string(id)) {
        char *tid = tl_anth_tool_id(json_string_value(id));
        json_t *b = tid ? json_pack("{s:s, s:s, s:O, s:{}}", "type", "tool_use", "id", tid, "name",
                                    json_object_get(fn, "name"), "input")
                        : NULL;
        free(tid);
        if (!open_block(st, TL_ANTH_TOOL_USE, b, out)) return false;
    }
    json_t *args = json_object_get(fn, "arguments");
    if (json_string_length(args) && st->open == TL_ANTH_TOOL_USE)
        return block_delta(
            st, json_pack("{s:s, s:O}", "type", "input_json_delta", "partial_json", args), out);
    return true;
}

// ---- per choice -------------------------------------------------------------------------------

bool tl_srv_anth_setup(struct tl_srv_req *q)
{
    for (int i = 0; i < q->n_choices; i++) {
        struct tl_srv_anth *a = tl_calloc_array(1, sizeof(*a));
        if (!a) return false;
        tl_sb_init(&a->raw);
        q->choices[i].anth = a;
    }
    return true;
}

void tl_srv_anth_destroy(struct tl_srv_anth *a)
{
    if (!a) return;
    tl_sb_free(&a->raw);
    free(a);
}

// The message object without content (message_start's, and the base of the whole reply).
static json_t *message_base(struct tl_srv_req *q, const char *stop_reason, const char *seq,
                            int64_t n_prompt, int64_t n_generated)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:[], s:s?, s:s?, s:n, s:{s:I, s:I}}", "id", q->id,
                     "type", "message", "role", "assistant", "model", q->srv->model_name, "content",
                     "stop_reason", stop_reason, "stop_sequence", seq, "stop_details", "usage",
                     "input_tokens", (json_int_t)n_prompt, "output_tokens",
                     (json_int_t)n_generated);
}

void tl_srv_anth_stream_start(struct tl_srv_req *q, struct tl_srv_choice *c, struct tl_sb *out)
{
    json_t *m = message_base(q, NULL, NULL, q->prompts.n_tokens[c->prompt], 0);
    if (!tl_anth_sse(out, "message_start",
                     m ? json_pack("{s:s, s:o}", "type", "message_start", "message", m) : NULL) ||
        !tl_anth_sse(out, "ping", json_pack("{s:s}", "type", "ping")))
        out->failed = true;
}

// Feeds text through the choice's parser (or straight to a text block) and appends the events.
static bool stream_text(struct tl_srv_choice *c, const char *text, size_t len, bool final,
                        struct tl_sb *out)
{
    struct tl_srv_anth *a = c->anth;
    if (!c->reply) {
        json_t *d = len ? json_object() : NULL;
        if (d && json_object_set_new(d, "content", tl_oai_string(text, len))) {
            json_decref(d);
            return false;
        }
        bool ok = !len || (d && tl_anth_stream_delta(&a->st, d, out));
        json_decref(d);
        return ok;
    }
    if (len) tl_srv_chat_reply_feed(c->reply, text, len);
    if (final) tl_srv_chat_reply_finish(c->reply);
    json_t *deltas = tl_srv_chat_reply_take_deltas(c->reply);
    bool ok = deltas && !c->reply->failed;
    for (size_t i = 0; ok && i < json_array_size(deltas); i++)
        ok = tl_anth_stream_delta(&a->st, json_array_get(deltas, i), out);
    json_decref(deltas);
    return ok;
}

bool tl_srv_anth_token(struct tl_srv_req *q, struct tl_srv_choice *c, const struct tl_event *ev,
                       struct tl_sb *out)
{
    struct tl_srv_anth *a = c->anth;
    struct tl_server *s = q->srv;
    if (q->params.n_stop) { // the raw text that stop-sequence detection reads
        char buf[256];
        size_t n = s->be->token_text(s->model, ev->token, buf, sizeof(buf));
        if (n < sizeof(buf)) {
            tl_sb_add(&a->raw, buf, n);
        } else { // a long token: its text whole
            char *big = tl_malloc(n + 1);
            if (big) s->be->token_text(s->model, ev->token, big, n + 1);
            if (big) tl_sb_add(&a->raw, big, n);
            free(big);
            if (!big) a->failed = true;
        }
        a->last_len = n;
        // A match ends within the last token: the bytes before it that matter are fewer than
        // the longest stop sequence, so the buffer keeps a bounded tail.
        size_t keep = n + TL_OAI_MAX_STOP_LEN;
        if (tl_sb_ok(&a->raw) && a->raw.len > 2 * keep) {
            memmove(a->raw.buf, a->raw.buf + a->raw.len - keep, keep);
            a->raw.len = keep;
            a->raw.buf[keep] = '\0';
        }
        if (!tl_sb_ok(&a->raw)) a->failed = true;
        if (a->failed) return false;
    }
    if (!q->params.stream || !ev->text_len) return true;
    return stream_text(c, ev->text, ev->text_len, false, out);
}

// The request's stop sequence that ended the reply (borrowed), or NULL: one that ends within
// the last token's raw text, the earliest such end first.
static const char *matched_stop(const struct tl_srv_req *q, const struct tl_srv_anth *a)
{
    const char *best = NULL;
    size_t best_end = 0;
    size_t len = a->raw.len, first_end = len - a->last_len + 1; // ends in [first_end, len]
    for (int i = 0; i < q->params.n_stop; i++) {
        const char *sq = q->params.stop[i];
        size_t k = strlen(sq);
        if (!k || k > len) continue;
        size_t lo = first_end > k ? first_end - k : 0;
        for (size_t start = lo; start + k <= len; start++) {
            if (memcmp(a->raw.buf + start, sq, k)) continue;
            if (!best || start + k < best_end) {
                best = sq;
                best_end = start + k;
            }
            break;
        }
    }
    return best;
}

static const char *stop_reason(const struct tl_srv_req *q, const struct tl_srv_choice *c,
                               const char **seq)
{
    *seq = NULL;
    switch (c->finish) {
    case TL_FINISH_LENGTH:
        return "max_tokens";
    case TL_FINISH_STOP:
        if (c->reply && c->reply->n_calls > 0) return "tool_use";
        if (c->anth && c->anth->last_len && (*seq = matched_stop(q, c->anth)))
            return "stop_sequence";
        return "end_turn";
    default:
        return tl_oai_finish_str(c->finish);
    }
}

bool tl_srv_anth_done(struct tl_srv_req *q, struct tl_srv_choice *c, const struct tl_event *ev,
                      struct tl_sb *out)
{
    struct tl_srv_anth *a = c->anth;
    if (c->finish == TL_FINISH_ERROR) {
        struct tl_oai_error err;
        tl_oai_error_set(&err, 500, "server_error", "internal_error", NULL, "%s",
                         c->error ? c->error : "generation failed");
        return tl_anth_sse(out, "error", tl_anth_error_json(&err, tl_http_request_id(q->http)));
    }
    if (!stream_text(c, ev->text ? ev->text : "", ev->text_len, true, out)) return false;
    tl_anth_stream_close(&a->st, out);
    const char *seq;
    const char *reason = stop_reason(q, c, &seq);
    json_t *d = json_pack("{s:s, s:{s:s, s:s?, s:n}, s:{s:I, s:I}}", "type", "message_delta",
                          "delta", "stop_reason", reason, "stop_sequence", seq, "stop_details",
                          "usage", "input_tokens", (json_int_t)c->n_prompt, "output_tokens",
                          (json_int_t)c->n_generated);
    return tl_anth_sse(out, "message_delta", d) &&
           tl_anth_sse(out, "message_stop", json_pack("{s:s}", "type", "message_stop")) &&
           !out->failed;
}

// ---- the whole reply --------------------------------------------------------------------------

static bool push(json_t *arr, json_t *v)
{
    return v && !json_array_append_new(arr, v);
}

// The blocks of a whole reply, folded from the same deltas a stream is made of (the reply
// parser runs in its streaming mode for Messages requests), so that the blocks and their order
// are those a client assembles from the stream.
struct fold {
    json_t *blocks;
    enum tl_anth_block kind; // of the block being gathered in text (TEXT or THINKING), or NONE
    struct tl_sb text;
    bool failed;
};

static void fold_flush(struct fold *f)
{
    if ((f->kind == TL_ANTH_TEXT || f->kind == TL_ANTH_THINKING) && !tl_sb_ok(&f->text)) {
        f->failed = true;
    } else if (f->kind == TL_ANTH_TEXT || f->kind == TL_ANTH_THINKING) {
        json_t *t = tl_oai_string(f->text.buf ? f->text.buf : "", f->text.len);
        json_t *b = f->kind == TL_ANTH_TEXT ? json_pack("{s:s, s:o}", "type", "text", "text", t)
                                            : json_pack("{s:s, s:o, s:s}", "type", "thinking",
                                                        "thinking", t, "signature", "");
        if (!push(f->blocks, b)) f->failed = true;
    }
    tl_sb_free(&f->text);
    f->kind = TL_ANTH_NONE;
}

static void fold_delta(struct fold *f, json_t *delta)
{
    json_t *text = json_object_get(delta, "content");
    json_t *think = json_object_get(delta, "reasoning_content");
    json_t *call = json_array_get(json_object_get(delta, "tool_calls"), 0);
    json_t *piece = json_string_length(text) ? text : json_string_length(think) ? think : NULL;
    if (piece) {
        enum tl_anth_block k = piece == text ? TL_ANTH_TEXT : TL_ANTH_THINKING;
        if (f->kind != k) fold_flush(f);
        f->kind = k;
        tl_sb_add(&f->text, json_string_value(piece), json_string_length(piece));
        return;
    }
    if (!call) return;
    json_t *fn = json_object_get(call, "function");
    json_t *id = json_object_get(call, "id");
    json_t *args = json_object_get(fn, "arguments");
    if (json_is_string(id)) { // a call's first delta: its block
        fold_flush(f);
        char *tid = tl_anth_tool_id(json_string_value(id));
        json_t *b = tid ? json_pack("{s:s, s:s, s:O, s:{}}", "type", "tool_use", "id", tid, "name",
                                    json_object_get(fn, "name"), "input")
                        : NULL;
        free(tid);
        if (!push(f->blocks, b)) f->failed = true;
    }
    if (json_string_length(args)) { // then its arguments, whole, into the call's block
        json_t *b = json_array_get(f->blocks, json_array_size(f->blocks) - 1);
        // (tl_oai_load_body: jansson's parser does not survive a failed allocation, so it runs
        // outside fault injection, as the request parser does.)
        struct tl_oai_error perr;
        json_t *input = tl_oai_load_body(json_string_value(args), json_string_length(args), &perr);
        if (!input || !tl__anth_str_is(json_object_get(b, "type"), "tool_use")) {
            json_decref(input);
            f->failed = true;
        } else if (json_object_set_new(b, "input", input)) { // (input freed on failure)
            f->failed = true;
        }
    }
}

static json_t *content_blocks(struct tl_srv_choice *c)
{
    struct fold f = {json_array(), TL_ANTH_NONE, {0}, false};
    const char *text = c->text.buf ? c->text.buf : "";
    if (!f.blocks) return NULL;
    if (!c->reply) {
        if (c->text.len && !push(f.blocks, json_pack("{s:s, s:o}", "type", "text", "text",
                                                     tl_oai_string(text, c->text.len))))
            f.failed = true;
    } else {
        struct tl_srv_chat_reply *r = c->reply;
        json_t *deltas = NULL;
        if (tl_srv_chat_reply_feed(r, text, c->text.len) && tl_srv_chat_reply_finish(r))
            deltas = tl_srv_chat_reply_take_deltas(r);
        f.failed = !deltas || r->failed;
        for (size_t i = 0; !f.failed && i < json_array_size(deltas); i++)
            fold_delta(&f, json_array_get(deltas, i));
        fold_flush(&f);
        json_decref(deltas);
    }
    if (f.failed) {
        tl_sb_free(&f.text);
        json_decref(f.blocks);
        return NULL;
    }
    return f.blocks;
}

json_t *tl_srv_anth_message(struct tl_srv_req *q, int64_t n_prompt, int64_t n_generated)
{
    struct tl_srv_choice *c = &q->choices[0];
    if (c->lost || !tl_sb_ok(&c->text) || (c->anth && c->anth->failed)) return NULL;
    json_t *blocks = content_blocks(c);
    const char *seq;
    const char *reason = stop_reason(q, c, &seq);
    json_t *m = blocks ? message_base(q, reason, seq, n_prompt, n_generated) : NULL;
    if (!m) {
        json_decref(blocks);
        return NULL;
    }
    if (json_object_set_new(m, "content", blocks)) { // (blocks freed on failure)
        json_decref(m);
        return NULL;
    }
    return m;
}
