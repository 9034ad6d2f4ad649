/*
 * A streaming request's server-sent events (see request_impl.h): the chunk envelope, writing
 * one event (bounded by what the client leaves unread), the first chunks a stream opens with,
 * and the pre-framed end and out-of-memory events.
 *
 * INVARIANTS: memory that runs out building a choice's chunk loses that choice (it is
 * cancelled and ends with finish_reason "error"): a stream with a hole is never passed off as
 * whole.
 *
 * THREADS: the event-loop thread.
 */
#include "server/request_impl.h"
#include "server/responses.h"

#include <stdlib.h>
#include <string.h>

const char *tl__req_chunk_object(const struct tl_srv_req *q)
{
    return q->params.kind == TL_OAI_CHAT ? "chat.completion.chunk" : "text_completion";
}

// The envelope of a chunk; with include_usage every chunk carries "usage": null. NULL when
// memory ran out.
json_t *tl__req_chunk(struct tl_srv_req *q, json_t *choice)
{
    json_t *arr = choice ? json_array() : NULL;
    if (arr && json_array_append_new(arr, choice)) {
        json_decref(arr);
        return NULL;
    }
    if (!arr) {
        json_decref(choice);
        return NULL;
    }
    json_t *o =
        tl_oai_envelope(q->id, tl__req_chunk_object(q), q->created, q->srv->model_name, arr);
    if (o && q->params.include_usage && json_object_set_new(o, "usage", json_null())) {
        json_decref(o);
        return NULL;
    }
    return o;
}

// Pre-framed events that need no allocation of ours: the end of every stream, and the error
// event a stream gets when memory ran out for its last chunk.
static const char sse_done[] = "data: [DONE]\n\n";
static const char sse_oom[] = "data: {\"error\":{\"message\":\"out of memory while streaming\","
                              "\"type\":\"server_error\",\"param\":null,\"code\":"
                              "\"internal_error\"}}\n\n";
static const char anth_oom[] = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":"
                               "\"api_error\",\"message\":\"out of memory while streaming\"}}\n\n";

// Memory ran out building choice c's output. A stream with a hole is worth nothing more: the
// choice is cancelled and ends with finish_reason "error"; a whole reply becomes a 500.
void tl__req_lose(struct tl_srv_req *q, struct tl_srv_choice *c)
{
    c->lost = true;
    if (q->streaming && c->submitted && !c->done)
        (void)q->srv->be->cancel(q->srv->engine, c->engine_id);
}

// Writes one SSE event with the compact JSON of obj (stolen). NULL obj means memory ran out
// building it: choice c (when given) is lost. False when nothing was sent.
bool tl__req_sse_send(struct tl_srv_req *q, struct tl_srv_choice *c, json_t *obj)
{
    if (!q->http || q->conn_closed) {
        json_decref(obj);
        return false;
    }
    if (q->params.responses) { // /v1/responses: the chunk becomes its semantic events
        json_t *evs = obj && q->resp_stream ? tl_resp_stream_chunk(q->resp_stream, obj)
                                            : (json_decref(obj), NULL);
        tl__req_sse_events(q, c, evs);
        return evs != NULL;
    }
    size_t unsent = 0;
    bool ok = obj && tl_http_stream_json(q->http, obj, &unsent);
    if (!ok && c) tl__req_lose(q, c);
    tl__req_check_unsent(q, unsent);
    return ok;
}

bool tl__req_sse_events(struct tl_srv_req *q, struct tl_srv_choice *c, json_t *evs)
{
    bool sent = evs != NULL;
    if (!evs && c) tl__req_lose(q, c);
    for (size_t i = 0; evs && i < json_array_size(evs) && q->http && !q->conn_closed; i++) {
        json_t *ev = json_array_get(evs, i);
        const char *type = json_string_value(json_object_get(ev, "type"));
        size_t unsent = 0;
        bool ok = type && tl_http_stream_json_named(q->http, type, json_incref(ev), &unsent);
        tl__req_check_unsent(q, unsent);
        if (!ok) {
            if (c) tl__req_lose(q, c);
            sent = false;
            break;
        }
    }
    json_decref(evs);
    return sent;
}

// Writes pre-framed SSE bytes.
static void sse_send_raw(struct tl_srv_req *q, const char *framed, size_t len)
{
    if (!q->http || q->conn_closed) return;
    tl__req_check_unsent(q, tl_http_stream_raw(q->http, framed, len));
}

void tl__req_sse_done(struct tl_srv_req *q)
{
    sse_send_raw(q, sse_done, sizeof(sse_done) - 1);
}

void tl__req_sse_oom(struct tl_srv_req *q)
{
    sse_send_raw(q, sse_oom, sizeof(sse_oom) - 1);
}

void tl__req_anth_oom(struct tl_srv_req *q)
{
    sse_send_raw(q, anth_oom, sizeof(anth_oom) - 1);
}

// Sends the framed Messages events in sb (anthropic_reply.c; ok false: memory ran out, the
// choice is lost) and frees sb.
void tl__req_send_framed(struct tl_srv_req *q, struct tl_srv_choice *c, struct tl_sb *sb, bool ok)
{
    size_t unsent = 0;
    if (!ok || !tl_sb_ok(sb)) {
        tl__req_lose(q, c);
    } else if (sb->len && q->http && !q->conn_closed) {
        if (!tl_http_stream_copy(q->http, sb->buf, sb->len, &unsent)) tl__req_lose(q, c);
        tl__req_check_unsent(q, unsent);
    }
    tl_sb_free(sb);
}

// Sends each choice object of a parsed chat reply (chat_reply.c) as one chunk; steals list.
void tl__req_send_choices(struct tl_srv_req *q, struct tl_srv_choice *c, json_t *list)
{
    if (!list) tl__req_lose(q, c);
    for (size_t i = 0; list && i < json_array_size(list); i++)
        tl__req_sse_send(q, c, tl__req_chunk(q, json_incref(json_array_get(list, i))));
    json_decref(list);
}

void tl__req_start_stream(struct tl_server *s, struct tl_srv_req *q)
{
    tl_http_stream_start(&s->http, q->http);
    q->streaming = true;
    if (q->params.responses && !(q->resp_stream = tl_resp_stream_create(q->params.responses)))
        tl__req_lose(q, &q->choices[0]);
    for (int i = 0; i < q->n_choices; i++) {
        struct tl_srv_choice *c = &q->choices[i];
        if (c->anth) { // message_start and ping (anthropic_reply.c)
            struct tl_sb sb;
            tl_sb_init(&sb);
            tl_srv_anth_stream_start(q, c, &sb);
            tl__req_send_framed(q, c, &sb, true);
        } else if (q->params.kind == TL_OAI_CHAT) {
            tl__req_sse_send(
                q, c, tl__req_chunk(q, tl_oai_chat_delta(c->index, true, "", 0, NULL, NULL)));
        } else if (q->params.echo && q->prompts.text[c->prompt] && !tl__req_prompt_logprobs(q)) {
            // (With logprobs the echo goes out with the prompt's logprobs: on_prompt_token.)
            tl__req_sse_send(
                q, c,
                tl__req_chunk(q, tl_oai_text_choice(c->index, q->prompts.text[c->prompt],
                                                    q->prompts.text_len[c->prompt], NULL, NULL)));
            c->lp_offset = (int64_t)q->prompts.text_len[c->prompt];
        }
    }
}
