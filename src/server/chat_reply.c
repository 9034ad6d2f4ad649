/*
 * Chat replies with reasoning and tool calls (see chat_reply.h).
 *
 * The parser's events arrive in reply order; non-streaming they are gathered into the message,
 * streaming each becomes one or two delta objects queued until the route sends them (after
 * each engine TOKEN event and at DONE). Arguments go out in one delta once the call is complete
 * and valid: the parser only reports calls it has checked, so a client never receives the
 * start of a call that then turns out to be plain text.
 *
 * Event-loop thread only; the struct owns its parser, buffers and JSON.
 */
#include "server/chat_reply.h"

#include "core/alloc.h"
#include "core/hash.h"
#include "server/openai.h"
#include "server/request.h"

#include <stdlib.h>
#include <string.h>

static json_t *call_json(const struct tl_tool_call *c, int index, bool with_index)
{
    json_t *fn = json_pack("{s:s, s:s}", "name", c->name, "arguments", c->arguments);
    json_t *o = json_pack("{s:s, s:s, s:o}", "id", c->id, "type", "function", "function", fn);
    if (o && with_index) json_object_set_new(o, "index", json_integer(index));
    return o;
}

static void add_delta(struct tl_srv_chat_reply *r, json_t *delta)
{
    if (!delta || json_array_append_new(r->deltas, delta)) r->failed = true;
}

static void on_event(void *user, const struct tl_toolcall_event *ev)
{
    struct tl_srv_chat_reply *r = user;
    if (ev->kind == TL_TOOLCALL_CALL) {
        if (r->single_call && r->n_calls >= 1) return;
        int index = r->n_calls++;
        if (!r->streaming) {
            if (json_array_append_new(r->tool_calls, call_json(ev->call, index, false)))
                r->failed = true;
            return;
        }
        // First delta: index, id, type, name and empty arguments; then the arguments.
        json_t *head =
            json_pack("{s:i, s:s, s:s, s:{s:s, s:s}}", "index", index, "id", ev->call->id, "type",
                      "function", "function", "name", ev->call->name, "arguments", "");
        add_delta(r, head ? json_pack("{s:[o]}", "tool_calls", head) : NULL);
        json_t *args = json_pack("{s:i, s:{s:s}}", "index", index, "function", "arguments",
                                 ev->call->arguments);
        add_delta(r, args ? json_pack("{s:[o]}", "tool_calls", args) : NULL);
        return;
    }
    bool reasoning = ev->kind == TL_TOOLCALL_REASONING;
    if (!r->streaming) {
        struct tl_sb *sb = reasoning ? &r->reasoning : &r->content;
        tl_sb_add(sb, ev->text, ev->len);
        if (!tl_sb_ok(sb)) r->failed = true; // else a reply would go out with its text missing
        return;
    }
    json_t *d = json_object();
    if (d && json_object_set_new(d, reasoning ? "reasoning_content" : "content",
                                 tl_oai_string(ev->text, ev->len))) {
        json_decref(d); // not an empty delta: the text would be missing from the stream
        d = NULL;
    }
    add_delta(r, d);
}

bool tl_srv_chat_reply_init(struct tl_srv_chat_reply *r, const struct tl_toolcall_config *cfg,
                            bool streaming, bool single_call)
{
    memset(r, 0, sizeof(*r));
    r->streaming = streaming;
    r->single_call = single_call;
    tl_sb_init(&r->content);
    tl_sb_init(&r->reasoning);
    r->tool_calls = json_array();
    r->deltas = json_array();
    r->parser = tl_toolcall_parser_create(cfg, on_event, r);
    if (!r->parser || !r->tool_calls || !r->deltas) {
        tl_srv_chat_reply_free(r);
        return false;
    }
    return true;
}

void tl_srv_chat_reply_free(struct tl_srv_chat_reply *r)
{
    tl_toolcall_parser_destroy(r->parser);
    tl_sb_free(&r->content);
    tl_sb_free(&r->reasoning);
    json_decref(r->tool_calls);
    json_decref(r->deltas);
    memset(r, 0, sizeof(*r));
}

bool tl_srv_chat_reply_feed(struct tl_srv_chat_reply *r, const char *text, size_t len)
{
    if (r->failed || tl_toolcall_parser_feed(r->parser, text, len)) r->failed = true;
    return !r->failed;
}

bool tl_srv_chat_reply_finish(struct tl_srv_chat_reply *r)
{
    if (r->failed || tl_toolcall_parser_finish(r->parser)) r->failed = true;
    return !r->failed;
}

json_t *tl_srv_chat_reply_take_deltas(struct tl_srv_chat_reply *r)
{
    json_t *d = r->deltas;
    r->deltas = json_array();
    if (!r->deltas) r->failed = true;
    return d;
}

json_t *tl_srv_chat_reply_message(struct tl_srv_chat_reply *r)
{
    json_t *m = json_object();
    if (!m) return NULL;
    json_object_set_new(m, "role", json_string("assistant"));
    if (r->content.len || r->n_calls == 0)
        json_object_set_new(m, "content",
                            tl_oai_string(r->content.buf ? r->content.buf : "", r->content.len));
    else
        json_object_set_new(m, "content", json_null());
    if (r->reasoning.len)
        json_object_set_new(m, "reasoning_content",
                            tl_oai_string(r->reasoning.buf, r->reasoning.len));
    if (r->n_calls) json_object_set(m, "tool_calls", r->tool_calls);
    return m;
}

const char *tl_srv_chat_reply_finish_str(const struct tl_srv_chat_reply *r, const char *finish)
{
    return r->n_calls > 0 && finish && !strcmp(finish, "stop") ? "tool_calls" : finish;
}

// ---- the request's side -----------------------------------------------------------------------

bool tl_srv_chat_replies_setup(struct tl_server *s, struct tl_srv_req *q)
{
    const struct tl_oai_params *p = &q->params;
    bool calls = p->kind == TL_OAI_CHAT && p->tool_choice_auto && p->n_tool_names > 0;
    if (p->kind != TL_OAI_CHAT ||
        (!calls && !s->reasoning.open && !tl_tool_syntax_always_parsed(s->tool_syntax)))
        return true;
    // Did the prompt open the reasoning block? Its last tokens, with control tokens' text.
    bool inside = false;
    if (s->reasoning.open && q->prompts.n_tokens[0] > 0) {
        int64_t n = q->prompts.n_tokens[0] < 8 ? q->prompts.n_tokens[0] : 8;
        char *tail =
            s->be->detokenize(s->model, q->prompts.tokens[0] + q->prompts.n_tokens[0] - n, n, true);
        if (!tail) return false;
        inside = tl_reasoning_prompt_opens(s->reasoning, tail, strlen(tail));
        free(tail);
    }
    struct tl_toolcall_config cfg = {.syntax = s->tool_syntax,
                                     .parse_calls = calls,
                                     .tool_names = p->tool_names,
                                     .n_tool_names = p->n_tool_names,
                                     .reasoning = s->reasoning,
                                     .reasoning_start_inside = inside};
    for (int i = 0; i < q->n_choices; i++) {
        struct tl_srv_choice *c = &q->choices[i];
        cfg.id_seed = tl_splitmix64(&s->rng);
        c->reply = malloc(sizeof(*c->reply));
        if (!c->reply) return false;
        // A Messages reply is folded from the stream's deltas even when whole (its block order).
        if (!tl_srv_chat_reply_init(c->reply, &cfg, p->stream || p->anthropic,
                                    !p->parallel_tool_calls)) {
            free(c->reply);
            c->reply = NULL;
            return false;
        }
    }
    return true;
}

void tl_srv_chat_reply_destroy(struct tl_srv_chat_reply *r)
{
    if (!r) return;
    tl_srv_chat_reply_free(r);
    free(r);
}

static json_t *chunk_choice(int index, json_t *delta, json_t *lp, const char *finish)
{
    json_t *c = json_pack("{s:i, s:o, s:o, s:o}", "index", index, "delta", delta, "logprobs",
                          lp ? lp : json_null(), "finish_reason",
                          finish ? json_string(finish) : json_null());
    return c;
}

json_t *tl_srv_chat_reply_stream(struct tl_srv_chat_reply *r, int index, const char *text,
                                 size_t len, json_t *lp, const char *finish)
{
    if (len) tl_srv_chat_reply_feed(r, text, len);
    if (finish) tl_srv_chat_reply_finish(r);
    json_t *deltas = tl_srv_chat_reply_take_deltas(r);
    json_t *out = json_array();
    if (!deltas || !out || r->failed) goto nomem;
    size_t n = json_array_size(deltas);
    if (n == 0 && (lp || finish)) {
        json_decref(deltas);
        deltas = json_pack("[{}]");
        if (!deltas) goto nomem;
        n = 1;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *c = chunk_choice(index, json_incref(json_array_get(deltas, i)), i == 0 ? lp : NULL,
                                 i + 1 == n ? tl_srv_chat_reply_finish_str(r, finish) : NULL);
        if (i == 0) lp = NULL;
        if (!c || json_array_append_new(out, c)) goto nomem;
    }
    json_decref(deltas);
    return out;
nomem:
    json_decref(lp);
    json_decref(deltas);
    json_decref(out);
    return NULL;
}

json_t *tl_srv_chat_reply_whole(struct tl_srv_chat_reply *r, int index, const char *text,
                                size_t len, json_t *lp, const char *finish)
{
    json_t *msg = NULL;
    if (tl_srv_chat_reply_feed(r, text, len) && tl_srv_chat_reply_finish(r))
        msg = tl_srv_chat_reply_message(r);
    if (!msg) {
        json_decref(lp);
        return NULL;
    }
    return json_pack("{s:i, s:o, s:o, s:o}", "index", index, "message", msg, "logprobs",
                     lp ? lp : json_null(), "finish_reason",
                     finish ? json_string(tl_srv_chat_reply_finish_str(r, finish)) : json_null());
}
