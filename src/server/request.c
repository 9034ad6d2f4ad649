/*
 * The life of a generating request (see request.h): starting it (prompts, bounds, one engine
 * request per choice), freeing it, and ending what is left after the engine stopped. Its other
 * jobs have files of their own (request_impl.h lists them): engine events (request_events.c),
 * the final replies (request_reply.c), streaming (request_sse.c), logprobs
 * (request_logprobs.c), and a vanished client or the shutdown deadline (request_cancel.c).
 *
 * DESIGN
 * tl_srv_req_start tokenizes each prompt (chat: renders the template first), checks prompt +
 * max_tokens against the context and the queue bound (429), then submits one engine request
 * per choice (a prompt's n samples; seeds seed, seed+1, ... when a seed is given). Engine
 * events come back as messages on the loop: a streaming request writes one SSE chunk per
 * event; the others accumulate text and logprobs and answer when the last choice is done.
 * With echo + logprobs (completions) the engine also reports each prompt token's logprob
 * (PROMPT_TOKEN events, before any generated token); they lead the logprobs arrays, and a
 * stream sends them with the echoed prompt in its first chunk.
 *
 * INVARIANTS
 * - The engine calls back with a choice until its DONE event, and DONE is last. A request is
 *   freed only on the loop, once its reply is complete (or abandoned) and every submitted
 *   choice's DONE has been processed, so the callback never sees freed memory.
 * - Every choice owns a preallocated DONE message, so DONE arrives even when memory runs out;
 *   a lost TOKEN message (engine thread) or a failed append (loop) marks the choice, and the
 *   reply becomes a 500 (non-streaming) or an error finish (streaming): never a 200 with
 *   text missing.
 * - A submission that fails midway cancels the choices already submitted, answers the mapped
 *   error at once (http becomes NULL) and keeps the request silent until their DONEs arrive.
 *
 * THREADS: tl_srv_on_event on the engine thread; everything else on the event-loop thread.
 */
#include "server/request_impl.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/hash.h"
#include "server/responses.h"

#include <event2/event.h>
#include <string.h>

// ---- the engine thread's side ----------------------------------------------------------------

void tl_srv_on_event(void *user, const struct tl_event *ev)
{
    struct tl_srv_choice *c = user;
    tl_srv_queue_post(&c->req->srv->queue, c, c->done_msg, &c->dropped, ev);
}

// ---- small helpers ---------------------------------------------------------------------------

void tl_srv_send_error(struct tl_server *s, struct evhttp_request *r,
                       const struct tl_oai_error *err, int64_t t0)
{
    // Under /v1/messages errors take Anthropic's shape (anthropic.c).
    json_t *body = tl_anth_is_path(r) ? tl_anth_error_json(err, tl_http_request_id(r))
                                      : tl_oai_error_json(err);
    tl_http_send_json(&s->http, r, err->http_status, body, t0, 0, 0);
}

// Seeds for requests that did not give one.
static uint64_t next_seed(struct tl_server *s)
{
    return tl_splitmix64(&s->rng);
}

// ---- lifecycle -------------------------------------------------------------------------------

static void req_link(struct tl_server *s, struct tl_srv_req *q)
{
    q->prev = NULL;
    q->next = s->reqs;
    if (s->reqs) s->reqs->prev = q;
    s->reqs = q;
}

static void req_unlink(struct tl_server *s, struct tl_srv_req *q)
{
    if (q->prev)
        q->prev->next = q->next;
    else if (s->reqs == q)
        s->reqs = q->next;
    if (q->next) q->next->prev = q->prev;
    q->prev = q->next = NULL;
}

void tl__req_free(struct tl_srv_req *q)
{
    struct tl_server *s = q->srv;
    req_unlink(s, q);
    for (int i = 0; i < q->n_choices; i++) {
        struct tl_srv_choice *c = &q->choices[i];
        if (c->submitted && !c->started) s->n_queued--;
        if (c->done_msg) free(c->done_msg->text_heap);
        free(c->done_msg);
        tl_sb_free(&c->text);
        tl_srv_chat_reply_destroy(c->reply);
        tl_srv_anth_destroy(c->anth);
        tl_oai_logprobs_free(&c->lp);
        free(c->error);
    }
    free(q->choices);
    tl_resp_stream_destroy(q->resp_stream);
    tl_srv_prompts_free(&q->prompts);
    tl_oai_params_free(&q->params);
    free(q);
    // A draining server may be waiting for this to be the last one.
    if (atomic_load(&s->state) == TL_SRV_DRAINING && !s->reqs) event_active(s->ev_tick, 0, 0);
}

// ---- submission ------------------------------------------------------------------------------

static bool setup_choices(struct tl_srv_req *q)
{
    int n = q->params.n;
    q->choices = tl_calloc_array((size_t)q->prompts.n * (size_t)n, sizeof(*q->choices));
    if (!q->choices) return false;
    q->n_choices = q->prompts.n * n;
    for (int i = 0; i < q->n_choices; i++) {
        struct tl_srv_choice *c = &q->choices[i];
        c->req = q;
        c->index = i;
        c->prompt = i / n;
        atomic_init(&c->dropped, false);
        tl_sb_init(&c->text);
    }
    for (int i = 0; i < q->n_choices; i++) {
        struct tl_srv_choice *c = &q->choices[i];
        c->done_msg = tl_calloc_array(1, sizeof(*c->done_msg));
        if (!c->done_msg) return false;
        c->done_msg->choice = c;
        c->done_msg->preallocated = true;
        // Non-streaming: every token's logprobs accumulate here. Streaming with echo: the
        // prompt's (PROMPT_TOKEN events) accumulate here and go out with the echoed text.
        if (q->params.logprobs && (!q->params.stream || tl__req_prompt_logprobs(q)))
            if (!tl_oai_logprobs_init(&c->lp, q->params.kind, 0)) return false;
    }
    return tl_srv_chat_replies_setup(q->srv, q) && (!q->params.anthropic || tl_srv_anth_setup(q));
}

// Submits every choice. On failure cancels those already submitted and returns the status.
static tl_status submit_all(struct tl_server *s, struct tl_srv_req *q)
{
    struct tl_oai_params *p = &q->params;
    bool chat = p->kind == TL_OAI_CHAT;
    // Stop strings: the request's plus, for chat, the template's that are not single tokens.
    const char *stops[TL_OAI_MAX_STOP + 4];
    int n_stops = 0;
    for (int i = 0; i < p->n_stop; i++)
        stops[n_stops++] = p->stop[i];
    if (chat)
        for (int i = 0; i < s->n_chat_stop_strings; i++)
            stops[n_stops++] = s->chat_stop_strings[i];
    for (int i = 0; i < q->n_choices; i++) {
        struct tl_srv_choice *c = &q->choices[i];
        struct tl_request rq;
        tl_request_default(&rq);
        rq.prompt_tokens = q->prompts.tokens[c->prompt];
        rq.n_prompt_tokens = q->prompts.n_tokens[c->prompt];
        rq.sampling = p->sampling;
        rq.sampling.seed = p->seed_set ? p->sampling.seed + (uint64_t)(i % p->n) : next_seed(s);
        rq.max_tokens = tl_srv_max_tokens(s, p, rq.n_prompt_tokens);
        rq.stop = stops;
        rq.n_stop = n_stops;
        if (chat) {
            rq.stop_tokens = s->chat_stop_tokens;
            rq.n_stop_tokens = s->n_chat_stop_tokens;
        }
        rq.ignore_eos = p->ignore_eos;
        rq.priority = p->priority;
        rq.timeout_ms = p->timeout_ms;
        rq.grammar = p->grammar;
        rq.prompt_logprobs = tl__req_prompt_logprobs(q);
        rq.render_special = c->reply && p->tool_choice_auto; // call markers are control tokens
        rq.on_event = tl_srv_on_event;
        rq.user = c;
        tl_status st = s->be->submit(s->engine, &rq, &c->engine_id);
        if (st) {
            tl__req_cancel_choices(q);
            return st;
        }
        c->submitted = true;
        q->n_live++;
        s->n_queued++;
    }
    return TL_OK;
}

void tl_srv_req_start(struct tl_server *s, struct evhttp_request *r, int64_t t0,
                      struct tl_oai_params *p)
{
    struct tl_oai_error err;
    struct tl_srv_req *q = tl_calloc_array(1, sizeof(*q));
    if (!q) {
        tl_oai_params_free(p);
        tl_srv_send_error(
            s, r, (tl_oai_error_from_status(&err, TL_ERR_NOMEM, "out of memory"), &err), t0);
        return;
    }
    q->srv = s;
    q->http = r;
    q->t_start_us = t0;
    q->params = *p; // taken
    memset(p, 0, sizeof(*p));
    q->created = tl_wall_time_us() / 1000000;
    q->queue_us = -1;
    // The OpenAI id ends with the request id (X-Request-Id), so a client's complaint quoting
    // either finds the access-log line.
    snprintf(q->id, sizeof(q->id), "%s%s",
             q->params.anthropic             ? "msg_"
             : q->params.kind == TL_OAI_CHAT ? "chatcmpl-"
                                             : "cmpl-",
             tl_http_request_id(r));
    if (q->params.responses) // /v1/responses: the Response's own id (responses.c)
        snprintf(q->id, sizeof(q->id), "%s",
                 json_string_value(json_object_get(q->params.responses, "id")));
    req_link(s, q);
    if (!tl_srv_prompts_prepare(s, &q->params, &q->prompts, &err)) goto refuse;
    int64_t n_choices = (int64_t)q->prompts.n * q->params.n;
    if (s->n_queued + n_choices > s->cfg.max_queued_requests) {
        tl_oai_error_set(&err, 429, "rate_limit_error", "rate_limit_exceeded", NULL,
                         "The server is at capacity (%d queued requests); retry later",
                         s->cfg.max_queued_requests);
        goto refuse;
    }
    if (!setup_choices(q)) {
        tl_oai_error_from_status(&err, TL_ERR_NOMEM, "out of memory");
        goto refuse;
    }
    tl_status st = submit_all(s, q);
    if (st) {
        tl_oai_error_from_status(&err, st, tl_last_error());
        if (st == TL_ERR_TOO_LONG) err.code = "context_length_exceeded";
        goto refuse; // the request stays, silent, until the DONEs of what was submitted
    }
    q->watch = tl_http_watch_close(&s->http, r, tl__req_on_conn_close, q);
    if (q->params.stream) tl__req_start_stream(s, q);
    return;
refuse:
    if (q->params.responses) tl_srv_resp_fix_error(&err); // its own field names
    tl_srv_send_error(s, r, &err, t0);
    q->http = NULL;
    if (q->n_live == 0) tl__req_free(q);
}

// ---- after the engine stopped ----------------------------------------------------------------

void tl_srv_reqs_abandon_all(struct tl_server *s)
{
    while (s->reqs) {
        struct tl_srv_req *q = s->reqs;
        for (int i = 0; i < q->n_choices; i++) {
            if (q->choices[i].submitted && !q->choices[i].done) q->n_live--;
            q->choices[i].done = true;
        }
        tl__req_unwatch(q);
        if (q->http) {
            if (q->streaming) {
                tl_http_stream_end(&s->http, q->http);
            } else {
                struct tl_oai_error err;
                tl_oai_error_set(&err, 503, "server_error", "service_unavailable", NULL,
                                 "the server is shutting down");
                tl_srv_send_error(s, q->http, &err, q->t_start_us);
            }
            q->http = NULL;
        }
        tl__req_free(q);
    }
}
