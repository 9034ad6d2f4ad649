/*
 * The life of a generating request (see request.h).
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
#include "server/request.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/log.h"
#include "server/anthropic.h"

#include <event2/event.h>
#include <math.h>
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

// The text of one token, for logprobs (NUL-terminated, malloc'd, possibly a partial UTF-8
// character).
static char *token_text(struct tl_server *s, int32_t id, size_t *len)
{
    char buf[128];
    size_t n = s->be->token_text(s->model, id, buf, sizeof(buf));
    char *out = tl_malloc(n + 1);
    if (!out) {
        *len = 0;
        return NULL;
    }
    if (n < sizeof(buf))
        memcpy(out, buf, n);
    else
        s->be->token_text(s->model, id, out, n + 1);
    out[n] = '\0';
    *len = n;
    return out;
}

// Adds one token (and its alternatives) to a logprobs builder. False when memory ran out.
static bool add_logprob(struct tl_server *s, struct tl_oai_logprobs *lp, int32_t id, float logprob,
                        const struct tl_token_logprob *top, int n_top)
{
    size_t len = 0;
    char *text = token_text(s, id, &len);
    char *tops[TL_OAI_MAX_LOGPROBS];
    size_t tops_len[TL_OAI_MAX_LOGPROBS];
    if (n_top > TL_OAI_MAX_LOGPROBS) n_top = TL_OAI_MAX_LOGPROBS;
    for (int i = 0; i < n_top; i++)
        tops[i] = token_text(s, top[i].id, &tops_len[i]);
    bool ok = text != NULL;
    for (int i = 0; i < n_top; i++)
        ok = ok && tops[i];
    if (ok)
        ok = tl_oai_logprobs_add(lp, text, len, logprob, top, (const char *const *)tops, tops_len,
                                 n_top);
    free(text);
    for (int i = 0; i < n_top; i++)
        free(tops[i]);
    return ok;
}

// echo + logprobs on /v1/completions: the prompt tokens' logprobs are computed by the engine
// (PROMPT_TOKEN events) and reported before the generated tokens', as OpenAI and vLLM do.
static bool prompt_logprobs(const struct tl_srv_req *q)
{
    return q->params.kind == TL_OAI_COMPLETION && q->params.echo && q->params.logprobs;
}

static const char *chunk_object(const struct tl_srv_req *q)
{
    return q->params.kind == TL_OAI_CHAT ? "chat.completion.chunk" : "text_completion";
}

// The envelope of a chunk; with include_usage every chunk carries "usage": null. NULL when
// memory ran out.
static json_t *chunk(struct tl_srv_req *q, json_t *choice)
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
    json_t *o = tl_oai_envelope(q->id, chunk_object(q), q->created, q->srv->model_name, arr);
    if (o && q->params.include_usage && json_object_set_new(o, "usage", json_null())) {
        json_decref(o);
        return NULL;
    }
    return o;
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

static void req_free(struct tl_srv_req *q)
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
    tl_srv_prompts_free(&q->prompts);
    tl_oai_params_free(&q->params);
    free(q);
    // A draining server may be waiting for this to be the last one.
    if (atomic_load(&s->state) == TL_SRV_DRAINING && !s->reqs) event_active(s->ev_tick, 0, 0);
}

static void cancel_choices(struct tl_srv_req *q)
{
    struct tl_server *s = q->srv;
    for (int i = 0; i < q->n_choices; i++) {
        struct tl_srv_choice *c = &q->choices[i];
        if (c->submitted && !c->done) (void)s->be->cancel(s->engine, c->engine_id);
    }
}

static void client_gone(struct tl_srv_req *q)
{
    if (q->client_gone) return;
    q->client_gone = true;
    q->srv->metrics.client_disconnects++;
    TL_LOGD("serve: client of %s went away; cancelling", q->id);
    cancel_choices(q);
}

static void on_conn_close(void *arg)
{
    struct tl_srv_req *q = arg;
    // libevent is freeing the connection: q->http is orphaned (not freed) and ours to end.
    q->conn_closed = true;
    q->watch = NULL;
    client_gone(q);
}

static void unwatch(struct tl_srv_req *q)
{
    tl_http_unwatch(&q->srv->http, q->watch);
    q->watch = NULL;
}

// ---- output ----------------------------------------------------------------------------------

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
static void lose(struct tl_srv_req *q, struct tl_srv_choice *c)
{
    c->lost = true;
    if (q->streaming && c->submitted && !c->done)
        (void)q->srv->be->cancel(q->srv->engine, c->engine_id);
}

// Bounds what a client may leave unread. libevent queues whatever the socket does not take,
// without limit: a client that stops reading (TCP window full) would make its stream's memory
// grow with every token. Past the bound the client counts as gone: its choices are cancelled,
// nothing more is queued, and what is queued leaves with the connection (timeout or close).
static void check_unsent(struct tl_srv_req *q, size_t unsent)
{
    struct tl_server *s = q->srv;
    if (!q->client_gone && s->cfg.max_unsent_bytes && unsent > s->cfg.max_unsent_bytes) {
        TL_LOGW("serve: %s: the client left %zu bytes unread; cancelling", q->id, unsent);
        client_gone(q);
    }
}

// Writes one SSE event with the compact JSON of obj (stolen). NULL obj means memory ran out
// building it: choice c (when given) is lost. False when nothing was sent.
static bool sse_send(struct tl_srv_req *q, struct tl_srv_choice *c, json_t *obj)
{
    if (!q->http || q->conn_closed) {
        json_decref(obj);
        return false;
    }
    size_t unsent = 0;
    bool ok = obj && tl_http_stream_json(q->http, obj, &unsent);
    if (!ok && c) lose(q, c);
    check_unsent(q, unsent);
    return ok;
}

// Writes pre-framed SSE bytes.
static void sse_send_raw(struct tl_srv_req *q, const char *framed, size_t len)
{
    if (!q->http || q->conn_closed) return;
    check_unsent(q, tl_http_stream_raw(q->http, framed, len));
}

// Sends each choice object of a parsed chat reply (chat_reply.c) as one chunk; steals list.
static void send_choices(struct tl_srv_req *q, struct tl_srv_choice *c, json_t *list)
{
    if (!list) lose(q, c);
    for (size_t i = 0; list && i < json_array_size(list); i++)
        sse_send(q, c, chunk(q, json_incref(json_array_get(list, i))));
    json_decref(list);
}

// Sends the framed Messages events in sb (anthropic_reply.c; ok false: memory ran out, the
// choice is lost) and frees sb.
static void send_framed(struct tl_srv_req *q, struct tl_srv_choice *c, struct tl_sb *sb, bool ok)
{
    size_t unsent = 0;
    if (!ok || !tl_sb_ok(sb)) {
        lose(q, c);
    } else if (sb->len && q->http && !q->conn_closed) {
        if (!tl_http_stream_copy(q->http, sb->buf, sb->len, &unsent)) lose(q, c);
        check_unsent(q, unsent);
    }
    tl_sb_free(sb);
}

static void usage_totals(struct tl_srv_req *q, int64_t *prompt, int64_t *completion,
                         int64_t *cached)
{
    *prompt = *completion = *cached = 0;
    for (int i = 0; i < q->n_choices; i++) {
        struct tl_srv_choice *c = &q->choices[i];
        *completion += c->n_generated;
        if (i % q->params.n == 0) { // each prompt counts once, with its first choice's hits
            *prompt += c->n_prompt ? c->n_prompt : q->prompts.n_tokens[c->prompt];
            *cached += c->n_cached;
        }
    }
}

// o with "usage": usage; NULL when either is NULL or memory ran out (both are consumed).
static json_t *with_usage(json_t *o, json_t *usage)
{
    if (!o || !usage) {
        json_decref(o);
        json_decref(usage);
        return NULL;
    }
    if (json_object_set_new(o, "usage", usage)) { // (usage is freed on failure)
        json_decref(o);
        return NULL;
    }
    return o;
}

// The non-streaming reply: every choice's text (echo first) and logprobs. NULL when memory
// ran out (then nothing partial goes out).
static json_t *whole_reply(struct tl_srv_req *q, int64_t np, int64_t nc, int64_t ncached)
{
    bool chat = q->params.kind == TL_OAI_CHAT;
    json_t *choices = json_array();
    bool ok = choices != NULL;
    for (int i = 0; ok && i < q->n_choices; i++) {
        struct tl_srv_choice *c = &q->choices[i];
        struct tl_sb text;
        tl_sb_init(&text);
        if (q->params.echo && q->prompts.text && q->prompts.text[c->prompt])
            tl_sb_add(&text, q->prompts.text[c->prompt], q->prompts.text_len[c->prompt]);
        tl_sb_add(&text, c->text.buf ? c->text.buf : "", c->text.len);
        ok = tl_sb_ok(&text) && tl_sb_ok(&c->text) && !c->lost;
        json_t *lp = tl_oai_logprobs_take(&c->lp);
        ok = ok && (!q->params.logprobs || lp);
        const char *fin = tl_oai_finish_str(c->finish);
        const char *t = text.buf ? text.buf : "";
        json_t *choice = !ok ? (json_decref(lp), NULL)
                         : c->reply
                             ? tl_srv_chat_reply_whole(c->reply, c->index, t, text.len, lp, fin)
                         : chat ? tl_oai_chat_choice(c->index, t, text.len, lp, fin)
                                : tl_oai_text_choice(c->index, t, text.len, lp, fin);
        ok = choice && json_array_append_new(choices, choice) == 0;
        tl_sb_free(&text);
    }
    if (!ok) {
        json_decref(choices);
        return NULL;
    }
    json_t *o = tl_oai_envelope(q->id, chat ? "chat.completion" : "text_completion", q->created,
                                q->srv->model_name, choices);
    return with_usage(o, tl_oai_usage_json(np, nc, ncached));
}

// The /v2 generate reply (one prompt, one choice). NULL when memory ran out.
static json_t *kserve_reply(struct tl_srv_req *q)
{
    const struct tl_srv_choice *c = &q->choices[0];
    if (!tl_sb_ok(&c->text) || c->lost) return NULL;
    return tl_kserve_output_json(q->srv->model_name, c->text.buf, c->text.len,
                                 tl_oai_finish_str(c->finish), c->n_prompt, c->n_generated);
}

static void finish_request(struct tl_srv_req *q)
{
    struct tl_server *s = q->srv;
    unwatch(q);
    if (q->http) {
        int64_t np, nc, ncached;
        usage_totals(q, &np, &nc, &ncached);
        if (q->streaming) {
            if (q->params.include_usage && !q->client_gone) {
                json_t *o = tl_oai_envelope(q->id, chunk_object(q), q->created, s->model_name,
                                            json_array());
                sse_send(q, NULL, with_usage(o, tl_oai_usage_json(np, nc, ncached)));
            }
            if (!q->params.kserve && !q->params.anthropic)
                sse_send_raw(q, sse_done, sizeof(sse_done) - 1);
            struct tl_http_usage u = {q->t_start_us, np, nc, q->queue_us, q->t_first_token_us};
            tl_http_access_log_usage(q->http, 200, &u);
            tl_http_stream_end(&s->http, q->http); // also frees an orphaned request
        } else {
            const struct tl_srv_choice *failed = NULL;
            for (int i = 0; i < q->n_choices; i++)
                if (q->choices[i].finish == TL_FINISH_ERROR) failed = &q->choices[i];
            json_t *o = failed                ? NULL
                        : q->params.kserve    ? kserve_reply(q)
                        : q->params.anthropic ? tl_srv_anth_message(q, np, nc)
                                              : whole_reply(q, np, nc, ncached);
            if (o) {
                struct tl_http_usage u = {q->t_start_us, np, nc, q->queue_us, q->t_first_token_us};
                tl_http_send_json_usage(&s->http, q->http, 200, o, &u);
            } else {
                struct tl_oai_error err;
                tl_oai_error_set(&err, 500, "server_error", "internal_error", NULL, "%s",
                                 failed && failed->error ? failed->error
                                 : failed                ? "generation failed"
                                                         : "out of memory building the reply");
                tl_srv_send_error(s, q->http, &err, q->t_start_us);
            }
        }
        q->http = NULL;
    }
    req_free(q);
}

// ---- engine events ---------------------------------------------------------------------------

static void mark_started(struct tl_server *s, struct tl_srv_choice *c)
{
    if (!c->started) {
        c->started = true;
        s->n_queued--;
    }
}

static void on_token(struct tl_server *s, struct tl_srv_req *q, struct tl_srv_choice *c,
                     const struct tl_srv_msg *m)
{
    mark_started(s, c);
    if (!q->t_first_token_us) q->t_first_token_us = m->t_us;
    if (c->t_last_token_us)
        tl_hist_observe(&s->metrics.itl, (double)(m->t_us - c->t_last_token_us) / 1e6);
    c->t_last_token_us = m->t_us;
    if (!q->http || q->client_gone) return;
    const struct tl_event *ev = &m->ev;
    if (c->anth) { // the Messages API (anthropic_reply.c); non-streaming gathers text below
        struct tl_sb sb;
        tl_sb_init(&sb);
        send_framed(q, c, &sb, tl_srv_anth_token(q, c, ev, &sb));
        if (q->streaming) return;
    }
    bool chat = q->params.kind == TL_OAI_CHAT;
    if (q->streaming) {
        json_t *lp = NULL;
        if (q->params.logprobs) {
            struct tl_oai_logprobs b;
            bool ok = tl_oai_logprobs_init(&b, q->params.kind, c->lp_offset) &&
                      add_logprob(s, &b, ev->token, ev->logprob, ev->top, ev->n_top);
            if (ok) c->lp_offset = b.offset;
            lp = tl_oai_logprobs_take(&b);
            if (!ok) {
                json_decref(lp);
                lose(q, c);
                return;
            }
        } else if (ev->text_len == 0) {
            return; // text held back (possible stop string or partial character)
        }
        if (q->params.kserve) { // /v2 generate_stream: no logprobs there
            json_decref(lp);
            sse_send(q, c,
                     tl_kserve_output_json(s->model_name, ev->text, ev->text_len, NULL, 0, 0));
            return;
        }
        if (c->reply) {
            send_choices(
                q, c,
                tl_srv_chat_reply_stream(c->reply, c->index, ev->text, ev->text_len, lp, NULL));
            return;
        }
        json_t *choice = chat ? tl_oai_chat_delta(c->index, false, ev->text, ev->text_len, lp, NULL)
                              : tl_oai_text_choice(c->index, ev->text, ev->text_len, lp, NULL);
        sse_send(q, c, chunk(q, choice));
        return;
    }
    tl_sb_add(&c->text, ev->text, ev->text_len);
    if (c->lp.obj && !add_logprob(s, &c->lp, ev->token, ev->logprob, ev->top, ev->n_top))
        lose(q, c);
}

// One prompt token's logprob (echo + logprobs). The last one completes the prompt: streaming
// sends the echoed prompt text with all of them in one chunk, as vLLM does; both modes then
// continue the text offsets of generated tokens from the end of the echoed text.
static void on_prompt_token(struct tl_server *s, struct tl_srv_req *q, struct tl_srv_choice *c,
                            const struct tl_srv_msg *m)
{
    mark_started(s, c);
    if (!q->http || q->client_gone || !c->lp.obj) return;
    const struct tl_event *ev = &m->ev;
    int64_t before = c->lp.offset;
    if (!add_logprob(s, &c->lp, ev->token, ev->logprob, ev->top, ev->n_top)) lose(q, c);
    // SPM writes a space before the first word that the prompt's text does not have: the
    // offsets after that token count from the text, one less.
    json_t *toks = json_object_get(c->lp.obj, "tokens");
    const char *tok = json_string_value(json_array_get(toks, json_array_size(toks) - 1));
    const char *pt = q->prompts.text[c->prompt];
    if (before == 0 && c->lp.offset > 0 && tok && tok[0] == ' ' && pt && pt[0] != ' ')
        c->lp.offset--;
    if (ev->prompt_pos + 1 < q->prompts.n_tokens[c->prompt]) return;
    int64_t text_len = (int64_t)q->prompts.text_len[c->prompt];
    if (!q->streaming) {
        c->lp.offset = text_len;
        return;
    }
    const char *text = q->prompts.text[c->prompt] ? q->prompts.text[c->prompt] : "";
    json_t *lp = tl_oai_logprobs_take(&c->lp);
    if (c->lost) {
        json_decref(lp);
        return;
    }
    sse_send(q, c, chunk(q, tl_oai_text_choice(c->index, text, (size_t)text_len, lp, NULL)));
    c->lp_offset = text_len;
}

static void on_done(struct tl_server *s, struct tl_srv_req *q, struct tl_srv_choice *c,
                    struct tl_srv_msg *m)
{
    const struct tl_event *ev = &m->ev;
    mark_started(s, c);
    c->done = true;
    q->n_live--;
    c->finish = ev->finish;
    c->n_prompt = ev->n_prompt_tokens;
    c->n_cached = ev->n_cached_tokens;
    c->n_generated = ev->n_generated;
    if (!q->streaming && ev->text_len) tl_sb_add(&c->text, ev->text, ev->text_len);
    if (atomic_load(&c->dropped) || c->lost || !tl_sb_ok(&c->text)) {
        c->finish = TL_FINISH_ERROR;
        snprintf(m->error, sizeof(m->error), "out of memory while building the reply");
    }
    if (c->finish == TL_FINISH_ERROR) {
        c->error = tl_strndup(m->error[0] ? m->error : "generation failed",
                              strlen(m->error[0] ? m->error : "generation failed"));
    }
    if (ev->queue_us >= 0 && (q->queue_us < 0 || ev->queue_us < q->queue_us))
        q->queue_us = ev->queue_us;
    tl_metrics_observe_done(&s->metrics, ev->queue_us, ev->ttft_us, ev->total_us,
                            ev->n_prompt_tokens, ev->n_generated);
    if (q->http && !q->client_gone && q->streaming && c->anth) {
        struct tl_sb sb;
        tl_sb_init(&sb);
        size_t unsent = 0;
        // The last events carry the stop reason; without them a client could not tell a cut
        // stream from a whole one, so their failure sends the error event instead.
        if (!tl_srv_anth_done(q, c, ev, &sb) || !tl_sb_ok(&sb) || !q->http || q->conn_closed ||
            !tl_http_stream_copy(q->http, sb.buf, sb.len, &unsent))
            sse_send_raw(q, anth_oom, sizeof(anth_oom) - 1);
        check_unsent(q, unsent);
        tl_sb_free(&sb);
    } else if (q->http && !q->client_gone && q->streaming && q->params.kserve) {
        if (!sse_send(q, NULL,
                      tl_kserve_output_json(s->model_name, ev->text, ev->text_len,
                                            tl_oai_finish_str(c->finish), c->n_prompt,
                                            c->n_generated)))
            sse_send_raw(q, sse_oom, sizeof(sse_oom) - 1);
    } else if (q->http && !q->client_gone && q->streaming) {
        bool chat = q->params.kind == TL_OAI_CHAT;
        const char *fin = tl_oai_finish_str(c->finish);
        if (c->reply) {
            send_choices(
                q, c,
                tl_srv_chat_reply_stream(c->reply, c->index, ev->text, ev->text_len, NULL, fin));
            goto out;
        }
        json_t *choice =
            chat ? tl_oai_chat_delta(c->index, false, ev->text_len ? ev->text : NULL, ev->text_len,
                                     NULL, fin)
                 : tl_oai_text_choice(c->index, ev->text ? ev->text : "", ev->text_len, NULL, fin);
        // The last chunk carries the finish reason; without it the client could not tell a
        // cut stream from a whole one, so its failure sends the error event instead.
        if (!sse_send(q, NULL, chunk(q, choice))) sse_send_raw(q, sse_oom, sizeof(sse_oom) - 1);
    }
out:
    free(m->text_heap);
    m->text_heap = NULL;
    if (q->n_live == 0) finish_request(q);
}

void tl_srv_req_process_msg(struct tl_server *s, struct tl_srv_msg *m)
{
    struct tl_srv_choice *c = m->choice;
    struct tl_srv_req *q = c->req;
    if (m->ev.type == TL_EVENT_DONE) {
        on_done(s, q, c, m); // m is c's preallocated message, freed with the request
        return;
    }
    if (m->ev.type == TL_EVENT_PROMPT_TOKEN)
        on_prompt_token(s, q, c, m);
    else
        on_token(s, q, c, m);
    free(m);
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
        if (q->params.logprobs && (!q->params.stream || prompt_logprobs(q)))
            if (!tl_oai_logprobs_init(&c->lp, q->params.kind, 0)) return false;
    }
    return tl_srv_chat_replies_setup(q->srv, q) && (!q->params.anthropic || tl_srv_anth_setup(q));
}

static void start_stream(struct tl_server *s, struct tl_srv_req *q)
{
    tl_http_stream_start(&s->http, q->http);
    q->streaming = true;
    for (int i = 0; i < q->n_choices; i++) {
        struct tl_srv_choice *c = &q->choices[i];
        if (c->anth) { // message_start and ping (anthropic_reply.c)
            struct tl_sb sb;
            tl_sb_init(&sb);
            tl_srv_anth_stream_start(q, c, &sb);
            send_framed(q, c, &sb, true);
        } else if (q->params.kind == TL_OAI_CHAT) {
            sse_send(q, c, chunk(q, tl_oai_chat_delta(c->index, true, "", 0, NULL, NULL)));
        } else if (q->params.echo && q->prompts.text[c->prompt] && !prompt_logprobs(q)) {
            // (With logprobs the echo goes out with the prompt's logprobs: on_prompt_token.)
            sse_send(q, c,
                     chunk(q, tl_oai_text_choice(c->index, q->prompts.text[c->prompt],
                                                 q->prompts.text_len[c->prompt], NULL, NULL)));
            c->lp_offset = (int64_t)q->prompts.text_len[c->prompt];
        }
    }
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
        rq.prompt_logprobs = prompt_logprobs(q);
        rq.render_special = c->reply && p->tool_choice_auto; // call markers are control tokens
        rq.on_event = tl_srv_on_event;
        rq.user = c;
        tl_status st = s->be->submit(s->engine, &rq, &c->engine_id);
        if (st) {
            cancel_choices(q);
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
    q->watch = tl_http_watch_close(&s->http, r, on_conn_close, q);
    if (q->params.stream) start_stream(s, q);
    return;
refuse:
    tl_srv_send_error(s, r, &err, t0);
    q->http = NULL;
    if (q->n_live == 0) req_free(q);
}

// ---- the server's view of all requests -------------------------------------------------------

void tl_srv_reqs_probe(struct tl_server *s)
{
    for (struct tl_srv_req *q = s->reqs; q; q = q->next)
        if (!q->client_gone && q->watch && tl_http_peer_closed(q->watch)) client_gone(q);
}

void tl_srv_reqs_cancel_all(struct tl_server *s)
{
    for (struct tl_srv_req *q = s->reqs; q; q = q->next)
        cancel_choices(q);
}

int tl_srv_reqs_count(const struct tl_server *s)
{
    int n = 0;
    for (const struct tl_srv_req *q = s->reqs; q; q = q->next)
        n++;
    return n;
}

void tl_srv_reqs_abandon_all(struct tl_server *s)
{
    while (s->reqs) {
        struct tl_srv_req *q = s->reqs;
        for (int i = 0; i < q->n_choices; i++) {
            if (q->choices[i].submitted && !q->choices[i].done) q->n_live--;
            q->choices[i].done = true;
        }
        unwatch(q);
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
        req_free(q);
    }
}
