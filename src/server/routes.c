/*
 * The server's endpoints and the life of a generating request (see server_impl.h).
 *
 * Routes: GET /health, GET /metrics, GET /v1/models, POST /v1/completions,
 * POST /v1/chat/completions, POST /tokenize, POST /detokenize. Unknown paths get 404 and known
 * paths with the wrong method 405 (with Allow), both as OpenAI error objects; with an API key
 * set, everything but /health and /metrics needs "Authorization: Bearer <key>" (401).
 *
 * A generating request: parse and validate (openai.c), check the model name, tokenize each
 * prompt (chat: render the template first), check prompt + max_tokens against the context,
 * check the queue bound (429), then submit one engine request per choice (a prompt's n
 * samples, seeds seed, seed+1, ... when a seed is given). Events arrive as messages on the
 * loop: streaming requests write one SSE chunk per event; others accumulate text and logprobs
 * and answer when the last choice is done. With echo + logprobs (completions) the engine also
 * reports each prompt token's logprob (PROMPT_TOKEN events, before any generated token); they
 * lead the logprobs arrays, and a stream sends them with the echoed prompt in its first
 * chunk. A failed submission cancels the choices already submitted and answers with the
 * mapped error at once; the request lives on, silent, until their DONE messages arrive.
 *
 * Threads: everything here runs on the event-loop thread.
 */
#include "server/server_impl.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"

#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>
#include <math.h>
#include <string.h>

// ---- model facts -----------------------------------------------------------------------------

bool tl__srv_model_ready(struct tl_server *s)
{
    s->be->model_info(s->model, &s->info);
    const char *path = s->info.path ? s->info.path : (s->cfg.model_path ? s->cfg.model_path : "");
    const char *slash = strrchr(path, '/');
    s->model_base = strdup(slash ? slash + 1 : path);
    const char *name = s->cfg.served_model_name;
    if (!name || !*name) name = s->info.name && *s->info.name ? s->info.name : s->model_base;
    s->model_name = strdup(name ? name : "model");
    if (!s->model_base || !s->model_name) return tl__errorf(TL_ERR_NOMEM, "out of memory"), false;
    s->max_seq_len =
        s->cfg.engine.max_seq_len > 0 ? s->cfg.engine.max_seq_len : s->info.n_ctx_train;
    if (s->max_seq_len <= 0) s->max_seq_len = 2048;
    s->max_token_bytes = 64;
    for (int32_t id = 0; id < s->info.n_vocab && id < (1 << 20); id++) {
        char buf[8];
        size_t n = s->be->token_text(s->model, id, buf, sizeof(buf));
        if (n > s->max_token_bytes) s->max_token_bytes = n;
    }
    if (s->cfg.chat_template && *s->cfg.chat_template) {
        if (!tl_chat_family_from_name(s->cfg.chat_template, &s->chat_family)) {
            tl__errorf(TL_ERR_INVALID_ARG,
                       "unknown chat template '%s' (chatml, llama2, llama3, mistral, zephyr, "
                       "gemma, phi3)",
                       s->cfg.chat_template);
            return false;
        }
        s->chat_fallback = false;
    } else {
        s->chat_family = tl_chat_detect(s->info.chat_template, &s->chat_fallback);
    }
    // The family's end-of-turn texts: a stop token when the vocabulary has it as one token,
    // else a stop string.
    const char *texts[2];
    int n = tl_chat_stop_texts(s->chat_family, texts);
    for (int i = 0; i < n; i++) {
        int32_t *ids = NULL;
        int64_t n_ids = 0;
        tl_status st =
            s->be->tokenize(s->model, texts[i], strlen(texts[i]), false, true, &ids, &n_ids);
        if (!st && n_ids == 1)
            s->chat_stop_tokens[s->n_chat_stop_tokens++] = ids[0];
        else
            s->chat_stop_strings[s->n_chat_stop_strings++] = texts[i];
        free(ids);
    }
    return true;
}

static bool model_matches(const struct tl_server *s, const char *name)
{
    if (!strcmp(name, s->model_name) || !strcmp(name, s->model_base)) return true;
    const char *dot = strrchr(s->model_base, '.');
    size_t stem = dot ? (size_t)(dot - s->model_base) : strlen(s->model_base);
    return strlen(name) == stem && !strncmp(name, s->model_base, stem);
}

// ---- small helpers ---------------------------------------------------------------------------

static const char *body_of(struct evhttp_request *r, size_t *len)
{
    struct evbuffer *b = evhttp_request_get_input_buffer(r);
    *len = b ? evbuffer_get_length(b) : 0;
    if (!*len) return "";
    const char *p = (const char *)evbuffer_pullup(b, -1);
    if (!p) *len = 0;
    return p ? p : "";
}

static void send_err(struct tl_server *s, struct evhttp_request *r, int64_t t0, int status,
                     const char *type, const char *code, const char *param, const char *msg)
{
    struct tl_oai_error err;
    tl_oai_error_set(&err, status, type, code, param, "%s", msg);
    tl__srv_send_error(s, r, &err, t0);
}

// Answers 503 unless the model is loaded and the server is not stopping. True when ready.
static bool require_ready(struct tl_server *s, struct evhttp_request *r, int64_t t0)
{
    int st = atomic_load(&s->state);
    if (st == TL_SRV_READY) return true;
    send_err(s, r, t0, 503, "server_error", "service_unavailable", NULL,
             st == TL_SRV_LOADING    ? "the model is still loading"
             : st == TL_SRV_DRAINING ? "the server is shutting down"
                                     : "the model failed to load");
    return false;
}

static uint64_t next_seed(struct tl_server *s)
{
    // splitmix64: seeds for requests that did not give one.
    uint64_t z = (s->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// The text of one token, for logprobs (NUL-terminated, malloc'd, possibly a partial UTF-8
// character).
static char *token_text(struct tl_server *s, int32_t id, size_t *len)
{
    char buf[128];
    size_t n = s->be->token_text(s->model, id, buf, sizeof(buf));
    char *out = malloc(n + 1);
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

// Adds one token (and its alternatives) to a logprobs builder.
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

// Tokenizing runs on the loop, so a text that can never fit the context is refused before it
// is tokenized (megabytes would stall every client for seconds): every token is at most
// max_token_bytes long, so such a text has more than max_seq_len tokens. Fills *err.
static bool text_fits(const struct tl_server *s, size_t len, const char *param,
                      struct tl_oai_error *err)
{
    if (len / s->max_token_bytes <= (size_t)s->max_seq_len) return true;
    tl_oai_error_set(err, 400, "invalid_request_error", "context_length_exceeded", param,
                     "This model's maximum context length is %d tokens; a prompt of %zu "
                     "bytes is far longer",
                     (int)s->max_seq_len, len);
    return false;
}

// ---- simple endpoints ------------------------------------------------------------------------

static void h_health(struct tl_server *s, struct evhttp_request *r, int64_t t0)
{
    int st = atomic_load(&s->state);
    const char *word = st == TL_SRV_READY      ? "ok"
                       : st == TL_SRV_LOADING  ? "loading"
                       : st == TL_SRV_DRAINING ? "draining"
                                               : "failed";
    tl__srv_send_json(s, r, st == TL_SRV_READY ? 200 : 503, json_pack("{ss}", "status", word), t0,
                      0, 0);
}

static void h_metrics(struct tl_server *s, struct evhttp_request *r, int64_t t0)
{
    struct tl_engine_stats es;
    bool up = atomic_load(&s->engine_up);
    if (up) s->be->get_stats(s->engine, &es);
    struct tl_sb sb;
    tl_sb_init(&sb);
    tl_metrics_render(&s->metrics, up ? &es : NULL, &sb);
    if (!tl_sb_ok(&sb)) {
        tl_sb_free(&sb);
        send_err(s, r, t0, 503, "server_error", "service_unavailable", NULL, "out of memory");
        return;
    }
    tl__srv_access_log(r, 200, t0, 0, 0);
    tl__srv_send_text(s, r, 200, "text/plain; version=0.0.4; charset=utf-8", sb.buf, sb.len);
    tl_sb_free(&sb);
}

static void h_models(struct tl_server *s, struct evhttp_request *r, int64_t t0)
{
    if (!require_ready(s, r, t0)) return;
    json_t *m =
        json_pack("{ss ss sI ss sI sI ss sb ss}", "id", s->model_name, "object", "model", "created",
                  (json_int_t)s->started_s, "owned_by", "tokenloom", "max_model_len",
                  (json_int_t)s->max_seq_len, "vocab_size", (json_int_t)s->info.n_vocab,
                  "chat_template", tl_chat_family_name(s->chat_family), "chat_template_fallback",
                  s->chat_fallback, "root", s->model_base);
    tl__srv_send_json(s, r, 200, json_pack("{ss s[o]}", "object", "list", "data", m), t0, 0, 0);
}

static bool check_model_field(struct tl_server *s, struct evhttp_request *r, int64_t t0,
                              json_t *root)
{
    json_t *m = json_object_get(root, "model");
    if (!m || json_is_null(m)) return true;
    if (!json_is_string(m)) {
        send_err(s, r, t0, 400, "invalid_request_error", "invalid_value", "model",
                 "'model' must be a string");
        return false;
    }
    if (strlen(json_string_value(m)) != json_string_length(m)) {
        send_err(s, r, t0, 400, "invalid_request_error", "invalid_value", "model",
                 "'model' may not contain NUL");
        return false;
    }
    if (model_matches(s, json_string_value(m))) return true;
    char msg[400];
    snprintf(msg, sizeof(msg), "The model '%.200s' does not exist; this server serves '%.150s'",
             json_string_value(m), s->model_name);
    send_err(s, r, t0, 404, "invalid_request_error", "model_not_found", "model", msg);
    return false;
}

static json_t *parse_body_object(struct tl_server *s, struct evhttp_request *r, int64_t t0)
{
    size_t len;
    const char *body = body_of(r, &len);
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_ALLOW_NUL, &jerr);
    if (!root || !json_is_object(root)) {
        char msg[300];
        if (root)
            snprintf(msg, sizeof(msg), "the request body must be a JSON object");
        else
            snprintf(msg, sizeof(msg), "malformed JSON body: %s (line %d, column %d)", jerr.text,
                     jerr.line, jerr.column);
        json_decref(root);
        send_err(s, r, t0, 400, "invalid_request_error", "invalid_value", NULL, msg);
        return NULL;
    }
    if (!check_model_field(s, r, t0, root)) {
        json_decref(root);
        return NULL;
    }
    return root;
}

// POST /tokenize {"prompt": "..."} or {"messages": [...]}, "add_special_tokens" (default true)
// -> {"tokens": [...], "count": N, "max_model_len": M}
static void h_tokenize(struct tl_server *s, struct evhttp_request *r, int64_t t0)
{
    if (!require_ready(s, r, t0)) return;
    json_t *root = parse_body_object(s, r, t0);
    if (!root) return;
    json_t *add = json_object_get(root, "add_special_tokens");
    if (add && !json_is_null(add) && !json_is_boolean(add)) {
        json_decref(root);
        send_err(s, r, t0, 400, "invalid_request_error", "invalid_value", "add_special_tokens",
                 "'add_special_tokens' must be a boolean");
        return;
    }
    bool add_special = !add || json_is_null(add) || json_is_true(add);
    char *rendered = NULL;
    const char *text;
    size_t len;
    json_t *prompt = json_object_get(root, "prompt");
    if (json_object_get(root, "messages")) {
        struct tl_oai_params p;
        struct tl_oai_error err;
        struct tl_oai_limits lim = {.n_vocab = s->info.n_vocab};
        size_t blen;
        const char *body = body_of(r, &blen);
        if (!tl_oai_parse(TL_OAI_CHAT, body, blen, &lim, &p, &err)) {
            json_decref(root);
            tl__srv_send_error(s, r, &err, t0);
            return;
        }
        tl_status st = tl_chat_render(s->chat_family, p.msgs, p.n_msgs, &rendered, &len);
        tl_oai_params_free(&p);
        if (st) {
            json_decref(root);
            struct tl_oai_error e2;
            tl_oai_error_from_status(&e2, st, tl_last_error());
            tl__srv_send_error(s, r, &e2, t0);
            return;
        }
        text = rendered;
    } else if (json_is_string(prompt)) {
        text = json_string_value(prompt);
        len = json_string_length(prompt);
    } else {
        json_decref(root);
        send_err(s, r, t0, 400, "invalid_request_error", "invalid_value", "prompt",
                 "'prompt' (a string) or 'messages' is required");
        return;
    }
    struct tl_oai_error lerr;
    if (!text_fits(s, len, rendered ? "messages" : "prompt", &lerr)) {
        free(rendered);
        json_decref(root);
        tl__srv_send_error(s, r, &lerr, t0);
        return;
    }
    int32_t *ids = NULL;
    int64_t n = 0;
    tl_status st = s->be->tokenize(s->model, text, len, add_special, true, &ids, &n);
    free(rendered);
    json_decref(root);
    if (st) {
        struct tl_oai_error err;
        tl_oai_error_from_status(&err, st, tl_last_error());
        tl__srv_send_error(s, r, &err, t0);
        return;
    }
    json_t *arr = json_array();
    for (int64_t i = 0; i < n; i++)
        json_array_append_new(arr, json_integer(ids[i]));
    free(ids);
    tl__srv_send_json(s, r, 200,
                      json_pack("{so sI sI}", "tokens", arr, "count", (json_int_t)n,
                                "max_model_len", (json_int_t)s->max_seq_len),
                      t0, n, 0);
}

// POST /detokenize {"tokens": [...]} -> {"prompt": "..."}
static void h_detokenize(struct tl_server *s, struct evhttp_request *r, int64_t t0)
{
    if (!require_ready(s, r, t0)) return;
    json_t *root = parse_body_object(s, r, t0);
    if (!root) return;
    json_t *toks = json_object_get(root, "tokens");
    if (!json_is_array(toks)) {
        json_decref(root);
        send_err(s, r, t0, 400, "invalid_request_error", "invalid_value", "tokens",
                 "'tokens' (a list of token ids) is required");
        return;
    }
    size_t n = json_array_size(toks);
    int32_t *ids = tl_malloc_array(n ? n : 1, sizeof(int32_t));
    if (!ids) {
        json_decref(root);
        send_err(s, r, t0, 503, "server_error", "service_unavailable", NULL, "out of memory");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(toks, i);
        json_int_t id = json_is_integer(t) ? json_integer_value(t) : -1;
        if (id < 0 || id >= s->info.n_vocab) {
            char msg[160];
            snprintf(msg, sizeof(msg), "'tokens'[%zu] must be a token id in [0, %d)", i,
                     (int)s->info.n_vocab);
            free(ids);
            json_decref(root);
            send_err(s, r, t0, 400, "invalid_request_error", "invalid_value", "tokens", msg);
            return;
        }
        ids[i] = (int32_t)id;
    }
    json_decref(root);
    char *text = s->be->detokenize(s->model, ids, (int64_t)n, false);
    free(ids);
    if (!text) {
        send_err(s, r, t0, 400, "invalid_request_error", "invalid_value", "tokens",
                 "the tokens could not be detokenized");
        return;
    }
    tl__srv_send_json(s, r, 200, json_pack("{so}", "prompt", tl_oai_string(text, strlen(text))), t0,
                      0, (int64_t)n);
    free(text);
}

// ---- generating requests ---------------------------------------------------------------------

void tl__srv_req_free(struct tl_srv_req *q)
{
    if (!q) return;
    struct tl_server *s = q->srv;
    tl__srv_req_unlink(s, q);
    for (int i = 0; i < q->n_choices; i++) {
        struct tl_srv_choice *c = &q->choices[i];
        if (c->submitted && !c->started) s->n_queued--;
        if (c->done_msg) free(c->done_msg->text_heap);
        free(c->done_msg);
        tl_sb_free(&c->text);
        tl_oai_logprobs_free(&c->lp);
        free(c->error);
    }
    free(q->choices);
    int np = q->params.kind == TL_OAI_CHAT ? 1 : q->params.n_prompts;
    for (int i = 0; i < np; i++) {
        if (q->prompt_tokens) free(q->prompt_tokens[i]);
        if (q->prompt_text) free(q->prompt_text[i]);
    }
    free(q->prompt_tokens);
    free(q->n_prompt_tokens);
    free(q->prompt_text);
    free(q->prompt_text_len);
    tl_oai_params_free(&q->params);
    free(q);
}

static void cancel_choices(struct tl_srv_req *q)
{
    struct tl_server *s = q->srv;
    for (int i = 0; i < q->n_choices; i++) {
        struct tl_srv_choice *c = &q->choices[i];
        if (c->submitted && !c->done) (void)s->be->cancel(s->engine, c->engine_id);
    }
}

void tl__srv_client_gone(struct tl_srv_req *q)
{
    if (q->client_gone) return;
    q->client_gone = true;
    q->srv->metrics.client_disconnects++;
    TL_LOGD("serve: client of %s went away; cancelling", q->id);
    cancel_choices(q);
}

void tl__srv_req_cancel(struct tl_srv_req *q)
{
    cancel_choices(q);
}

static const char *model_of(struct tl_srv_req *q)
{
    return q->srv->model_name;
}

// The envelope of a chunk; with include_usage every chunk carries "usage": null.
static json_t *chunk(struct tl_srv_req *q, json_t *choice)
{
    bool chat = q->params.kind == TL_OAI_CHAT;
    json_t *o = tl_oai_envelope(q->id, chat ? "chat.completion.chunk" : "text_completion",
                                q->created, model_of(q), json_pack("[o]", choice));
    if (q->params.include_usage) json_object_set_new(o, "usage", json_null());
    return o;
}

static void usage_totals(struct tl_srv_req *q, int64_t *prompt, int64_t *completion,
                         int64_t *cached)
{
    *prompt = *completion = *cached = 0;
    for (int i = 0; i < q->n_choices; i++) {
        struct tl_srv_choice *c = &q->choices[i];
        *completion += c->n_generated;
        if (i % q->params.n == 0) { // each prompt counts once, with its first choice's hits
            *prompt += c->n_prompt ? c->n_prompt : q->n_prompt_tokens[c->prompt];
            *cached += c->n_cached;
        }
    }
}

static void finish_request(struct tl_srv_req *q)
{
    struct tl_server *s = q->srv;
    tl__srv_unwatch_close(q);
    if (q->http) {
        int64_t np, nc, ncached;
        usage_totals(q, &np, &nc, &ncached);
        if (q->streaming) {
            if (q->params.include_usage && !q->client_gone) {
                json_t *o = tl_oai_envelope(q->id,
                                            q->params.kind == TL_OAI_CHAT ? "chat.completion.chunk"
                                                                          : "text_completion",
                                            q->created, model_of(q), json_array());
                json_object_set_new(o, "usage", tl_oai_usage_json(np, nc, ncached));
                tl__srv_sse_send(q, o, NULL);
            }
            tl__srv_sse_send(q, NULL, "[DONE]");
            tl__srv_access_log(q->http, 200, q->t_start_us, np, nc);
            evhttp_send_reply_end(q->http); // also frees an orphaned request
        } else {
            const struct tl_srv_choice *failed = NULL;
            for (int i = 0; i < q->n_choices; i++)
                if (q->choices[i].finish == TL_FINISH_ERROR) failed = &q->choices[i];
            if (failed) {
                struct tl_oai_error err;
                tl_oai_error_set(&err, 500, "server_error", "internal_error", NULL, "%s",
                                 failed->error ? failed->error : "generation failed");
                tl__srv_send_error(s, q->http, &err, q->t_start_us);
            } else {
                bool chat = q->params.kind == TL_OAI_CHAT;
                json_t *choices = json_array();
                for (int i = 0; i < q->n_choices; i++) {
                    struct tl_srv_choice *c = &q->choices[i];
                    struct tl_sb text;
                    tl_sb_init(&text);
                    if (q->params.echo && q->prompt_text && q->prompt_text[c->prompt])
                        tl_sb_add(&text, q->prompt_text[c->prompt], q->prompt_text_len[c->prompt]);
                    tl_sb_add(&text, c->text.buf ? c->text.buf : "", c->text.len);
                    json_t *lp = tl_oai_logprobs_take(&c->lp);
                    const char *fin = tl_oai_finish_str(c->finish);
                    json_array_append_new(
                        choices, chat ? tl_oai_chat_choice(c->index, text.buf ? text.buf : "",
                                                           text.len, lp, fin)
                                      : tl_oai_text_choice(c->index, text.buf ? text.buf : "",
                                                           text.len, lp, fin));
                    tl_sb_free(&text);
                }
                json_t *o = tl_oai_envelope(q->id, chat ? "chat.completion" : "text_completion",
                                            q->created, model_of(q), choices);
                json_object_set_new(o, "usage", tl_oai_usage_json(np, nc, ncached));
                tl__srv_send_json(s, q->http, 200, o, q->t_start_us, np, nc);
            }
        }
        q->http = NULL;
    }
    tl__srv_req_free(q);
    // A draining server may be waiting for this to be the last one.
    if (atomic_load(&s->state) == TL_SRV_DRAINING && !s->reqs) event_base_loopbreak(s->base);
}

static void on_token(struct tl_server *s, struct tl_srv_req *q, struct tl_srv_choice *c,
                     const struct tl_srv_msg *m)
{
    if (!c->started) {
        c->started = true;
        s->n_queued--;
    }
    if (c->t_last_token_us)
        tl_hist_observe(&s->metrics.itl, (double)(m->t_us - c->t_last_token_us) / 1e6);
    c->t_last_token_us = m->t_us;
    if (!q->http || q->client_gone) return;
    const struct tl_event *ev = &m->ev;
    bool chat = q->params.kind == TL_OAI_CHAT;
    if (q->streaming) {
        json_t *lp = NULL;
        if (q->params.logprobs) {
            struct tl_oai_logprobs b;
            if (tl_oai_logprobs_init(&b, q->params.kind, c->lp_offset)) {
                if (add_logprob(s, &b, ev->token, ev->logprob, ev->top, ev->n_top))
                    c->lp_offset = b.offset;
                lp = tl_oai_logprobs_take(&b);
            }
        } else if (ev->text_len == 0) {
            return; // text held back (possible stop string or partial character)
        }
        json_t *choice = chat ? tl_oai_chat_delta(c->index, false, ev->text, ev->text_len, lp, NULL)
                              : tl_oai_text_choice(c->index, ev->text, ev->text_len, lp, NULL);
        tl__srv_sse_send(q, chunk(q, choice), NULL);
        return;
    }
    tl_sb_add(&c->text, ev->text, ev->text_len);
    if (c->lp.obj) add_logprob(s, &c->lp, ev->token, ev->logprob, ev->top, ev->n_top);
}

// One prompt token's logprob (echo + logprobs). The last one completes the prompt: streaming
// sends the echoed prompt text with all of them in one chunk, as vLLM does; both modes then
// continue the text offsets of generated tokens from the end of the echoed text.
static void on_prompt_token(struct tl_server *s, struct tl_srv_req *q, struct tl_srv_choice *c,
                            const struct tl_srv_msg *m)
{
    if (!c->started) {
        c->started = true;
        s->n_queued--;
    }
    if (!q->http || q->client_gone || !c->lp.obj) return;
    const struct tl_event *ev = &m->ev;
    add_logprob(s, &c->lp, ev->token, ev->logprob, ev->top, ev->n_top);
    if (ev->prompt_pos + 1 < q->n_prompt_tokens[c->prompt]) return;
    int64_t text_len = (int64_t)q->prompt_text_len[c->prompt];
    if (!q->streaming) {
        c->lp.offset = text_len;
        return;
    }
    const char *text = q->prompt_text[c->prompt] ? q->prompt_text[c->prompt] : "";
    json_t *lp = tl_oai_logprobs_take(&c->lp);
    tl__srv_sse_send(q, chunk(q, tl_oai_text_choice(c->index, text, (size_t)text_len, lp, NULL)),
                     NULL);
    c->lp_offset = text_len;
}

static void on_done(struct tl_server *s, struct tl_srv_req *q, struct tl_srv_choice *c,
                    struct tl_srv_msg *m)
{
    const struct tl_event *ev = &m->ev;
    if (!c->started) {
        c->started = true;
        s->n_queued--;
    }
    c->done = true;
    q->n_live--;
    c->finish = ev->finish;
    c->n_prompt = ev->n_prompt_tokens;
    c->n_cached = ev->n_cached_tokens;
    c->n_generated = ev->n_generated;
    if (atomic_load(&c->dropped)) {
        c->finish = TL_FINISH_ERROR;
        snprintf(m->error, sizeof(m->error), "out of memory while streaming events");
    }
    if (c->finish == TL_FINISH_ERROR)
        c->error = strdup(m->error[0] ? m->error : "generation failed");
    tl_metrics_observe_done(&s->metrics, ev->queue_us, ev->ttft_us, ev->total_us,
                            ev->n_prompt_tokens, ev->n_generated);
    if (q->http && !q->client_gone) {
        if (q->streaming) {
            bool chat = q->params.kind == TL_OAI_CHAT;
            const char *fin = tl_oai_finish_str(c->finish);
            json_t *choice =
                chat ? tl_oai_chat_delta(c->index, false, ev->text_len ? ev->text : NULL,
                                         ev->text_len, NULL, fin)
                     : tl_oai_text_choice(c->index, ev->text ? ev->text : "", ev->text_len, NULL,
                                          fin);
            tl__srv_sse_send(q, chunk(q, choice), NULL);
        } else if (ev->text_len) {
            tl_sb_add(&c->text, ev->text, ev->text_len);
        }
    }
    free(m->text_heap);
    m->text_heap = NULL;
    if (q->n_live == 0) finish_request(q);
}

void tl__srv_process_msg(struct tl_server *s, struct tl_srv_msg *m)
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

// Tokenizes prompt i of q (chat: the rendered conversation). On failure fills *err.
static bool prepare_prompt(struct tl_server *s, struct tl_srv_req *q, int i,
                           struct tl_oai_error *err)
{
    struct tl_oai_params *p = &q->params;
    const char *text = NULL;
    size_t len = 0;
    char *rendered = NULL;
    if (p->kind == TL_OAI_CHAT) {
        tl_status st = tl_chat_render(s->chat_family, p->msgs, p->n_msgs, &rendered, &len);
        if (st) {
            tl_oai_error_from_status(err, st, tl_last_error());
            return false;
        }
        text = rendered;
    } else if (p->prompts[i].tokens) {
        q->prompt_tokens[i] = p->prompts[i].tokens; // take ownership
        q->n_prompt_tokens[i] = p->prompts[i].n_tokens;
        p->prompts[i].tokens = NULL;
        // Echo: the prompt's text, detokenized on the loop; a prompt that cannot fit the
        // context is refused by check_lengths, so it is not detokenized first (millions of
        // ids would stall every client).
        if (p->echo && q->n_prompt_tokens[i] < s->max_seq_len) {
            q->prompt_text[i] =
                s->be->detokenize(s->model, q->prompt_tokens[i], q->n_prompt_tokens[i], false);
            q->prompt_text_len[i] = q->prompt_text[i] ? strlen(q->prompt_text[i]) : 0;
        }
        return true;
    } else {
        text = p->prompts[i].text;
        len = p->prompts[i].text_len;
    }
    if (!text_fits(s, len, p->kind == TL_OAI_CHAT ? "messages" : "prompt", err)) {
        free(rendered);
        return false;
    }
    tl_status st = s->be->tokenize(s->model, text, len, true, true, &q->prompt_tokens[i],
                                   &q->n_prompt_tokens[i]);
    if (!st && p->echo) {
        q->prompt_text[i] = tl_strndup(text, len);
        q->prompt_text_len[i] = q->prompt_text[i] ? len : 0;
    }
    free(rendered);
    if (st) {
        tl_oai_error_from_status(err, st, tl_last_error());
        return false;
    }
    if (q->n_prompt_tokens[i] == 0) {
        tl_oai_error_set(err, 400, "invalid_request_error", "invalid_value",
                         p->kind == TL_OAI_CHAT ? "messages" : "prompt",
                         "the prompt is empty after tokenization");
        return false;
    }
    return true;
}

static int32_t max_tokens_for(const struct tl_server *s, const struct tl_srv_req *q, int i)
{
    if (q->params.max_tokens > 0) return q->params.max_tokens;
    if (q->params.kind == TL_OAI_CHAT) {
        int64_t rest = (int64_t)s->max_seq_len - q->n_prompt_tokens[i];
        return rest > 0 ? (int32_t)rest : 1;
    }
    return 16;
}

static bool check_lengths(const struct tl_server *s, const struct tl_srv_req *q, int n_prompts,
                          struct tl_oai_error *err)
{
    for (int i = 0; i < n_prompts; i++) {
        int64_t np = q->n_prompt_tokens[i];
        int64_t mt = max_tokens_for(s, q, i);
        if (np + mt <= s->max_seq_len) continue;
        const char *param = q->params.max_tokens > 0
                                ? (q->params.kind == TL_OAI_CHAT ? "max_tokens" : "max_tokens")
                                : (q->params.kind == TL_OAI_CHAT ? "messages" : "prompt");
        tl_oai_error_set(err, 400, "invalid_request_error", "context_length_exceeded", param,
                         "This model's maximum context length is %d tokens. However, you "
                         "requested %lld tokens (%lld in the %s, %lld for the completion). "
                         "Please reduce the length of the %s or max_tokens.",
                         (int)s->max_seq_len, (long long)(np + mt), (long long)np,
                         q->params.kind == TL_OAI_CHAT ? "messages" : "prompt", (long long)mt,
                         q->params.kind == TL_OAI_CHAT ? "messages" : "prompt");
        return false;
    }
    return true;
}

// echo + logprobs on /v1/completions: the prompt tokens' logprobs are computed by the engine
// (PROMPT_TOKEN events) and reported before the generated tokens', as OpenAI and vLLM do.
static bool prompt_logprobs(const struct tl_srv_req *q)
{
    return q->params.kind == TL_OAI_COMPLETION && q->params.echo && q->params.logprobs;
}

static bool setup_choices(struct tl_server *s, struct tl_srv_req *q, int n_prompts)
{
    int n = q->params.n;
    q->n_choices = n_prompts * n;
    q->choices = tl_calloc_array((size_t)q->n_choices, sizeof(*q->choices));
    if (!q->choices) return false;
    for (int i = 0; i < q->n_choices; i++) {
        struct tl_srv_choice *c = &q->choices[i];
        c->req = q;
        c->index = i;
        c->prompt = i / n;
        atomic_init(&c->dropped, false);
        tl_sb_init(&c->text);
        c->done_msg = calloc(1, sizeof(*c->done_msg));
        if (!c->done_msg) return false;
        c->done_msg->choice = c;
        c->done_msg->preallocated = true;
        // Non-streaming: every token's logprobs accumulate here. Streaming with echo: the
        // prompt's (PROMPT_TOKEN events) accumulate here and go out with the echoed text.
        if (q->params.logprobs && (!q->params.stream || prompt_logprobs(q)))
            if (!tl_oai_logprobs_init(&c->lp, q->params.kind, 0)) return false;
    }
    return true;
}

static void start_stream(struct tl_server *s, struct tl_srv_req *q)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(q->http);
    evhttp_add_header(h, "Content-Type", "text/event-stream");
    evhttp_add_header(h, "Cache-Control", "no-cache");
    evhttp_add_header(h, "X-Accel-Buffering", "no");
    evhttp_send_reply_start(q->http, 200, "OK");
    tl_metrics_count_http(&s->metrics, 200);
    q->streaming = true;
    for (int i = 0; i < q->n_choices; i++) {
        struct tl_srv_choice *c = &q->choices[i];
        if (q->params.kind == TL_OAI_CHAT) {
            tl__srv_sse_send(q, chunk(q, tl_oai_chat_delta(c->index, true, "", 0, NULL, NULL)),
                             NULL);
            c->sent_role = true;
        } else if (q->params.echo && q->prompt_text[c->prompt] && !prompt_logprobs(q)) {
            // (With logprobs the echo goes out with the prompt's logprobs: on_prompt_token.)
            tl__srv_sse_send(
                q,
                chunk(q, tl_oai_text_choice(c->index, q->prompt_text[c->prompt],
                                            q->prompt_text_len[c->prompt], NULL, NULL)),
                NULL);
            c->lp_offset = (int64_t)q->prompt_text_len[c->prompt];
        }
    }
}

static void h_generate(struct tl_server *s, struct evhttp_request *r, int64_t t0,
                       enum tl_oai_kind kind)
{
    if (!require_ready(s, r, t0)) return;
    struct tl_oai_error err;
    struct tl_srv_req *q = calloc(1, sizeof(*q));
    if (!q) {
        send_err(s, r, t0, 503, "server_error", "service_unavailable", NULL, "out of memory");
        return;
    }
    q->srv = s;
    q->http = r;
    q->t_start_us = t0;
    q->created = tl_wall_time_us() / 1000000;
    snprintf(q->id, sizeof(q->id), "%s-%016llx", kind == TL_OAI_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)(next_seed(s) ^ ++s->id_counter));
    size_t len;
    const char *body = body_of(r, &len);
    struct tl_oai_limits lim = {.n_vocab = s->info.n_vocab};
    if (!tl_oai_parse(kind, body, len, &lim, &q->params, &err)) goto fail;
    struct tl_oai_params *p = &q->params;
    if (p->model && !model_matches(s, p->model)) {
        tl_oai_error_set(&err, 404, "invalid_request_error", "model_not_found", "model",
                         "The model '%.200s' does not exist; this server serves '%.150s'", p->model,
                         s->model_name);
        goto fail;
    }
    int n_prompts = kind == TL_OAI_CHAT ? 1 : p->n_prompts;
    q->prompt_tokens = tl_calloc_array((size_t)n_prompts, sizeof(*q->prompt_tokens));
    q->n_prompt_tokens = tl_calloc_array((size_t)n_prompts, sizeof(*q->n_prompt_tokens));
    q->prompt_text = tl_calloc_array((size_t)n_prompts, sizeof(*q->prompt_text));
    q->prompt_text_len = tl_calloc_array((size_t)n_prompts, sizeof(*q->prompt_text_len));
    if (!q->prompt_tokens || !q->n_prompt_tokens || !q->prompt_text || !q->prompt_text_len) {
        tl_oai_error_from_status(&err, TL_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < n_prompts; i++)
        if (!prepare_prompt(s, q, i, &err)) goto fail;
    if (!check_lengths(s, q, n_prompts, &err)) goto fail;
    if (s->n_queued + (int64_t)n_prompts * p->n > s->cfg.max_queued_requests) {
        tl_oai_error_set(&err, 429, "rate_limit_error", "rate_limit_exceeded", NULL,
                         "The server is at capacity (%d queued requests); retry later",
                         s->cfg.max_queued_requests);
        goto fail;
    }
    if (!setup_choices(s, q, n_prompts)) {
        tl_oai_error_from_status(&err, TL_ERR_NOMEM, "out of memory");
        goto fail;
    }

    // Stop strings: the request's plus, for chat, the template's that are not single tokens.
    const char *stops[TL_OAI_MAX_STOP + 4];
    int n_stops = 0;
    for (int i = 0; i < p->n_stop; i++)
        stops[n_stops++] = p->stop[i];
    if (kind == TL_OAI_CHAT)
        for (int i = 0; i < s->n_chat_stop_strings; i++)
            stops[n_stops++] = s->chat_stop_strings[i];
    tl_status st = TL_OK;
    for (int i = 0; i < q->n_choices; i++) {
        struct tl_srv_choice *c = &q->choices[i];
        struct tl_request rq;
        tl_request_default(&rq);
        rq.prompt_tokens = q->prompt_tokens[c->prompt];
        rq.n_prompt_tokens = q->n_prompt_tokens[c->prompt];
        rq.sampling = p->sampling;
        rq.sampling.seed = p->seed_set ? p->sampling.seed + (uint64_t)(i % p->n) : next_seed(s);
        rq.max_tokens = max_tokens_for(s, q, c->prompt);
        rq.stop = stops;
        rq.n_stop = n_stops;
        if (kind == TL_OAI_CHAT) {
            rq.stop_tokens = s->chat_stop_tokens;
            rq.n_stop_tokens = s->n_chat_stop_tokens;
        }
        rq.ignore_eos = p->ignore_eos;
        rq.priority = p->priority;
        rq.timeout_ms = p->timeout_ms;
        rq.grammar = p->grammar;
        rq.prompt_logprobs = prompt_logprobs(q);
        rq.on_event = tl__srv_on_event;
        rq.user = c;
        st = s->be->submit(s->engine, &rq, &c->engine_id);
        if (st) break;
        c->submitted = true;
        q->n_live++;
        s->n_queued++;
    }
    tl__srv_req_link(s, q);
    if (st) {
        tl_oai_error_from_status(&err, st, tl_last_error());
        if (st == TL_ERR_TOO_LONG) err.code = "context_length_exceeded";
        cancel_choices(q);
        tl__srv_send_error(s, r, &err, t0);
        q->http = NULL;
        if (q->n_live == 0) tl__srv_req_free(q);
        return;
    }
    tl__srv_watch_close(q);
    if (p->stream) start_stream(s, q);
    return;
fail:
    tl__srv_send_error(s, r, &err, t0);
    q->http = NULL;
    tl__srv_req_free(q);
}

static void h_completions(struct tl_server *s, struct evhttp_request *r, int64_t t0)
{
    h_generate(s, r, t0, TL_OAI_COMPLETION);
}

static void h_chat(struct tl_server *s, struct evhttp_request *r, int64_t t0)
{
    h_generate(s, r, t0, TL_OAI_CHAT);
}

// ---- dispatch --------------------------------------------------------------------------------

static const struct route {
    const char *path;
    enum evhttp_cmd_type method;
    bool auth;
    void (*fn)(struct tl_server *, struct evhttp_request *, int64_t);
} routes[] = {
    {"/health", EVHTTP_REQ_GET, false, h_health},
    {"/metrics", EVHTTP_REQ_GET, false, h_metrics},
    {"/v1/models", EVHTTP_REQ_GET, true, h_models},
    {"/v1/completions", EVHTTP_REQ_POST, true, h_completions},
    {"/v1/chat/completions", EVHTTP_REQ_POST, true, h_chat},
    {"/tokenize", EVHTTP_REQ_POST, true, h_tokenize},
    {"/detokenize", EVHTTP_REQ_POST, true, h_detokenize},
};

// Compares two strings in time independent of where they differ.
static bool same_secret(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char d = la != lb;
    for (size_t i = 0; i < la; i++)
        d |= (unsigned char)(a[i] ^ b[i % (lb ? lb : 1)]);
    return d == 0;
}

void tl__srv_handle(struct evhttp_request *r, void *arg)
{
    struct tl_server *s = arg;
    int64_t t0 = tl_time_us();
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(r);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    if (!path || !*path) path = "/";
    const struct route *match = NULL;
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
        if (!strcmp(path, routes[i].path)) match = &routes[i];
    if (!match) {
        char msg[300];
        snprintf(msg, sizeof(msg), "Not found: %.250s", path);
        send_err(s, r, t0, 404, "invalid_request_error", "not_found", NULL, msg);
        return;
    }
    enum evhttp_cmd_type cmd = evhttp_request_get_command(r);
    if (cmd == EVHTTP_REQ_HEAD) cmd = EVHTTP_REQ_GET; // answered as GET, without the body
    if (cmd != match->method) {
        evhttp_add_header(evhttp_request_get_output_headers(r), "Allow",
                          match->method == EVHTTP_REQ_GET ? "GET" : "POST");
        char msg[300];
        snprintf(msg, sizeof(msg), "Method not allowed: %s takes %s", match->path,
                 match->method == EVHTTP_REQ_GET ? "GET" : "POST");
        send_err(s, r, t0, 405, "invalid_request_error", "method_not_allowed", NULL, msg);
        return;
    }
    if (match->auth && s->cfg.api_key && *s->cfg.api_key) {
        const char *h = evhttp_find_header(evhttp_request_get_input_headers(r), "Authorization");
        bool ok = h && !strncmp(h, "Bearer ", 7) && same_secret(h + 7, s->cfg.api_key);
        if (!ok) {
            evhttp_add_header(evhttp_request_get_output_headers(r), "WWW-Authenticate", "Bearer");
            send_err(s, r, t0, 401, "invalid_request_error", "invalid_api_key", NULL,
                     h ? "Incorrect API key provided"
                       : "Missing API key: send "
                         "'Authorization: Bearer <key>'");
            return;
        }
    }
    match->fn(s, r, t0);
}
