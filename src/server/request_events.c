/*
 * A generating request's engine events on the loop (see request_impl.h): each TOKEN becomes an
 * SSE chunk (streaming) or is appended to its choice's text and logprobs; DONE records the
 * choice's finish, counts, times and error, sends a stream's last chunk, and finishes the
 * request when its last choice is done. With echo + logprobs on /v1/completions, PROMPT_TOKEN
 * events bring the prompt tokens' logprobs, which lead the arrays; a stream sends them with the
 * echoed prompt in its first chunk, as vLLM does.
 *
 * INVARIANTS: see request.c. A message is freed here, except a choice's preallocated DONE
 * message, which is freed with its request.
 *
 * THREADS: the event-loop thread.
 */
#include "server/request_impl.h"

#include "core/alloc.h"

#include <string.h>

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
        tl__req_send_framed(q, c, &sb, tl_srv_anth_token(q, c, ev, &sb));
        if (q->streaming) return;
    }
    bool chat = q->params.kind == TL_OAI_CHAT;
    if (q->streaming) {
        json_t *lp = NULL;
        if (q->params.logprobs) {
            struct tl_oai_logprobs b;
            bool ok = tl_oai_logprobs_init(&b, q->params.kind, c->lp_offset) &&
                      tl__req_add_logprob(s, &b, ev->token, ev->logprob, ev->top, ev->n_top);
            if (ok) c->lp_offset = b.offset;
            lp = tl_oai_logprobs_take(&b);
            if (!ok) {
                json_decref(lp);
                tl__req_lose(q, c);
                return;
            }
        } else if (ev->text_len == 0) {
            return; // text held back (possible stop string or partial character)
        }
        if (q->params.kserve) { // /v2 generate_stream: no logprobs there
            json_decref(lp);
            tl__req_sse_send(
                q, c, tl_kserve_output_json(s->model_name, ev->text, ev->text_len, NULL, 0, 0));
            return;
        }
        if (c->reply) {
            tl__req_send_choices(
                q, c,
                tl_srv_chat_reply_stream(c->reply, c->index, ev->text, ev->text_len, lp, NULL));
            return;
        }
        json_t *choice = chat ? tl_oai_chat_delta(c->index, false, ev->text, ev->text_len, lp, NULL)
                              : tl_oai_text_choice(c->index, ev->text, ev->text_len, lp, NULL);
        tl__req_sse_send(q, c, tl__req_chunk(q, choice));
        return;
    }
    tl_sb_add(&c->text, ev->text, ev->text_len);
    if (c->lp.obj && !tl__req_add_logprob(s, &c->lp, ev->token, ev->logprob, ev->top, ev->n_top))
        tl__req_lose(q, c);
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
    if (!tl__req_add_logprob(s, &c->lp, ev->token, ev->logprob, ev->top, ev->n_top))
        tl__req_lose(q, c);
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
    tl__req_sse_send(
        q, c, tl__req_chunk(q, tl_oai_text_choice(c->index, text, (size_t)text_len, lp, NULL)));
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
            tl__req_anth_oom(q);
        tl__req_check_unsent(q, unsent);
        tl_sb_free(&sb);
    } else if (q->http && !q->client_gone && q->streaming && q->params.kserve) {
        if (!tl__req_sse_send(q, NULL,
                              tl_kserve_output_json(s->model_name, ev->text, ev->text_len,
                                                    tl_oai_finish_str(c->finish), c->n_prompt,
                                                    c->n_generated)))
            tl__req_sse_oom(q);
    } else if (q->http && !q->client_gone && q->streaming) {
        bool chat = q->params.kind == TL_OAI_CHAT;
        const char *fin = tl_oai_finish_str(c->finish);
        if (c->reply) {
            tl__req_send_choices(
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
        if (!tl__req_sse_send(q, NULL, tl__req_chunk(q, choice))) tl__req_sse_oom(q);
    }
out:
    free(m->text_heap);
    m->text_heap = NULL;
    if (q->n_live == 0) tl__req_finish(q);
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
