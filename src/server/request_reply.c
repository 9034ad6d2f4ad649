/*
 * A generating request's end (see request_impl.h): a stream's usage chunk and [DONE]; a whole
 * reply's JSON (every choice's text, echo first, and logprobs, with usage), or the /v2 generate
 * reply of the KServe routes; a 500 when a choice failed or memory ran out, never a partial
 * 200. The request is freed after.
 *
 * THREADS: the event-loop thread.
 */
#include "server/request_impl.h"
#include "server/responses.h"

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

void tl__req_finish(struct tl_srv_req *q)
{
    struct tl_server *s = q->srv;
    tl__req_unwatch(q);
    if (q->http) {
        int64_t np, nc, ncached;
        usage_totals(q, &np, &nc, &ncached);
        if (q->streaming) {
            if (q->params.include_usage && !q->client_gone) {
                json_t *o = tl_oai_envelope(q->id, tl__req_chunk_object(q), q->created,
                                            s->model_name, json_array());
                tl__req_sse_send(q, NULL, with_usage(o, tl_oai_usage_json(np, nc, ncached)));
            }
            if (q->resp_stream && !q->client_gone) { // /v1/responses: its closing events
                json_t *final = NULL;
                json_t *evs = tl_resp_stream_end(q->resp_stream, np, nc, ncached, &final);
                // Without its last event a client could not tell the stream was cut.
                if (!tl__req_sse_events(q, NULL, evs)) tl__req_sse_oom(q);
                tl_srv_resp_keep(s, q->params.responses, final);
                json_decref(final);
            } else if (!q->params.kserve && !q->params.anthropic && !q->params.responses) {
                tl__req_sse_done(q);
            }
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
            if (o && q->params.responses) { // /v1/responses: the chat reply as a Response
                json_t *chat = o;
                o = tl_srv_resp_from_chat(q->params.responses, chat);
                json_decref(chat);
                tl_srv_resp_keep(s, q->params.responses, o);
            }
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
    tl__req_free(q);
}
