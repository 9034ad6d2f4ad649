/*
 * ModelInfer and ModelStreamInfer: one ModelInferRequest becomes one engine request; its events
 * come back to the gRPC thread and become responses (see grpc_front.h, grpc_impl.h).
 *
 * DESIGN
 * The request is decoded (protobuf-c) and read (grpc_infer.c) on the gRPC thread, the prompt is
 * tokenized there too (thread-safe; a prompt that cannot fit the context is refused before it
 * is tokenized), and the engine gets token ids, as from the OpenAI routes: same tokens, same
 * output. The engine-thread callback copies each event into a message on a mutex-protected
 * list; the gRPC thread takes the whole list each turn. Streaming sends one response per text
 * delta (one per engine step for the request) and a final one flagged triton_final_response
 * with the finish reason and token counts; unary collects the text and answers once.
 * The gRPC deadline becomes the engine request's timeout, and a call that ends early (client
 * cancel, deadline) cancels its requests, so their KV blocks are freed at the next step.
 *
 * INVARIANTS: as the HTTP server's. A generation is freed only after its DONE message is
 * processed (DONE is the engine's last event for it) and every generation owns a preallocated
 * DONE message, so DONE arrives even when memory runs out.
 *
 * THREADS: tl__grpc_on_engine_event runs on the engine thread and touches only the queue and
 * the generation's atomic `dropped` flag; the rest runs on the gRPC thread.
 */
#include "grpc/grpc_impl.h"
#include "grpc/grpc_reply.h"

#include "core/clock.h"
#include "core/error.h"
#include "core/hash.h"

#include <grpc/support/time.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- the engine -> gRPC thread queue ---------------------------------------------------------

static void push(struct tl_grpc_front *g, struct tl_grpc_msg *m)
{
    m->next = NULL;
    pthread_mutex_lock(&g->mu);
    if (g->q_tail)
        g->q_tail->next = m;
    else
        g->q_head = m;
    g->q_tail = m;
    pthread_mutex_unlock(&g->mu);
}

static void on_engine_event(void *user, const struct tl_event *ev)
{
    struct tl_grpc_gen_req *r = user;
    struct tl_grpc_front *g = r->call->g;
    size_t len = ev->text ? ev->text_len : 0;
    if (ev->type == TL_EVENT_DONE) {
        struct tl_grpc_msg *m = r->done_msg; // cannot fail; r is not touched after the push
        m->ev = *ev;
        m->ev.text = NULL;
        m->ev.text_len = 0;
        m->ev.top = NULL;
        m->ev.n_top = 0;
        m->ev.error = NULL;
        if (ev->error) snprintf(m->error, sizeof(m->error), "%s", ev->error);
        if (len) {
            m->text_heap = malloc(len + 1);
            if (m->text_heap) {
                memcpy(m->text_heap, ev->text, len);
                m->text_heap[len] = 0;
                m->ev.text = m->text_heap;
                m->ev.text_len = len;
            } else {
                atomic_store(&r->dropped, true);
            }
        }
        push(g, m);
        return;
    }
    if (ev->type != TL_EVENT_TOKEN) return;
    struct tl_grpc_msg *m = malloc(sizeof(*m) + len + 1);
    if (!m) {
        atomic_store(&r->dropped, true);
        return;
    }
    memset(m, 0, sizeof(*m));
    m->req = r;
    m->ev = *ev;
    m->t_us = tl_time_us();
    char *text = (char *)(m + 1);
    if (len) memcpy(text, ev->text, len);
    text[len] = 0;
    m->ev.text = text;
    m->ev.text_len = len;
    m->ev.top = NULL;
    m->ev.n_top = 0;
    m->ev.error = NULL;
    push(g, m);
}

// ---- generations -----------------------------------------------------------------------------

static void gen_free(struct tl_grpc_gen_req *r)
{
    if (r->done_msg) free(r->done_msg->text_heap);
    free(r->done_msg);
    tl_sb_free(&r->text);
    free(r);
}

static void gen_unlink(struct tl_grpc_gen_req *r)
{
    struct tl_grpc_call *c = r->call;
    for (struct tl_grpc_gen_req **p = &c->gens; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            break;
        }
    c->n_live--;
    c->g->n_live--;
}

// A request-level failure: a status for ModelInfer, an in-band error for a stream (which
// stays open for its other requests).
static void request_error(struct tl_grpc_call *c, grpc_status_code code, const char *msg)
{
    if (c->method == TL_GM_INFER) {
        tl__grpc_finish(c, code, "%s", msg);
        return;
    }
    char buf[400];
    snprintf(buf, sizeof(buf), "%s: %s", tl__grpc_code_name(code), msg);
    size_t len = 0;
    uint8_t *data = tl_grpc_pack_stream_error(buf, &len);
    tl__grpc_send(c, data, len);
}

static grpc_status_code code_of(tl_status st)
{
    switch (st) {
    case TL_ERR_INVALID_ARG:
    case TL_ERR_TOO_LONG:
        return GRPC_STATUS_INVALID_ARGUMENT;
    case TL_ERR_FULL:
    case TL_ERR_NOMEM:
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case TL_ERR_STATE:
        return GRPC_STATUS_UNAVAILABLE;
    default:
        return GRPC_STATUS_INTERNAL;
    }
}

static uint64_t next_seed(struct tl_grpc_front *g)
{
    return tl_splitmix64(&g->rng);
}

// Milliseconds left before the call's deadline (0 = none).
static int64_t deadline_ms(const struct tl_grpc_call *c)
{
    gpr_timespec d = gpr_convert_clock_type(c->details.deadline, GPR_CLOCK_MONOTONIC);
    if (gpr_time_cmp(d, gpr_inf_future(GPR_CLOCK_MONOTONIC)) >= 0) return 0;
    int64_t ms = gpr_time_to_millis(gpr_time_sub(d, gpr_now(GPR_CLOCK_MONOTONIC)));
    return ms < 1 ? 1 : ms;
}

// Submits a read request. On failure sets *code and writes the message.
static struct tl_grpc_gen_req *submit(struct tl_grpc_call *c, const struct tl_front_share *sh,
                                      const Inference__ModelInferRequest *q,
                                      const struct tl_grpc_gen *gen, grpc_status_code *code,
                                      char *err, size_t cap)
{
    struct tl_grpc_front *g = c->g;
    *code = GRPC_STATUS_INVALID_ARGUMENT;
    if (g->n_queued >= sh->max_queued_requests) {
        *code = GRPC_STATUS_RESOURCE_EXHAUSTED;
        snprintf(err, cap,
                 "%lld gRPC requests are already queued (--max-queued-requests); "
                 "retry later",
                 (long long)g->n_queued);
        return NULL;
    }
    if (gen->prompt_len > (size_t)sh->max_seq_len * sh->max_token_bytes) {
        snprintf(err, cap, "'text_input' has %zu bytes: more than the %d-token context can hold",
                 gen->prompt_len, sh->max_seq_len);
        return NULL;
    }
    int32_t *ids = NULL;
    int64_t n_ids = 0;
    tl_status st =
        sh->be->tokenize(sh->model, gen->prompt, gen->prompt_len, true, true, &ids, &n_ids);
    if (st) {
        *code = code_of(st);
        snprintf(err, cap, "cannot tokenize 'text_input': %s", tl_last_error());
        return NULL;
    }
    if (n_ids == 0 || n_ids + gen->max_tokens > sh->max_seq_len) {
        snprintf(err, cap,
                 n_ids ? "the prompt (%lld tokens) plus max_tokens (%d) exceed the context of %d "
                         "tokens"
                       : "the prompt is empty after tokenization",
                 (long long)n_ids, gen->max_tokens, sh->max_seq_len);
        free(ids);
        return NULL;
    }
    struct tl_grpc_gen_req *r = calloc(1, sizeof(*r));
    if (r) r->done_msg = calloc(1, sizeof(*r->done_msg));
    if (!r || !r->done_msg) {
        free(ids);
        if (r) free(r);
        *code = GRPC_STATUS_RESOURCE_EXHAUSTED;
        snprintf(err, cap, "out of memory");
        return NULL;
    }
    r->call = c;
    r->done_msg->req = r;
    r->done_msg->preallocated = true;
    r->stream = c->method == TL_GM_STREAM && gen->stream;
    tl_sb_init(&r->text);
    snprintf(r->id, sizeof(r->id), "%s", q->id);
    const char *stops[TL_GRPC_MAX_STOP];
    for (int i = 0; i < gen->n_stop; i++)
        stops[i] = gen->stop[i];
    struct tl_request rq;
    tl_request_default(&rq);
    rq.prompt_tokens = ids;
    rq.n_prompt_tokens = n_ids;
    rq.sampling = gen->sampling;
    if (!gen->seed_set) rq.sampling.seed = next_seed(g);
    rq.max_tokens = gen->max_tokens;
    rq.stop = stops;
    rq.n_stop = gen->n_stop;
    rq.ignore_eos = gen->ignore_eos;
    rq.timeout_ms = deadline_ms(c);
    rq.on_event = on_engine_event;
    rq.user = r;
    st = sh->be->submit(sh->engine, &rq, &r->engine_id);
    free(ids);
    if (st) {
        *code = code_of(st);
        snprintf(err, cap, "%s", tl_last_error());
        gen_free(r);
        return NULL;
    }
    r->next = c->gens;
    c->gens = r;
    c->n_live++;
    g->n_live++;
    g->n_queued++;
    if (c->method == TL_GM_STREAM) atomic_fetch_add(&g->stream_requests, 1);
    return r;
}

void tl__grpc_infer(struct tl_grpc_call *c, const uint8_t *data, size_t len)
{
    struct tl_grpc_front *g = c->g;
    char err[400];
    struct tl_front_share sh;
    enum tl_front_phase ph = tl_engine_share_phase(&g->share);
    if (ph != TL_FRONT_READY || !tl_engine_share_get(&g->share, &sh)) {
        request_error(c, GRPC_STATUS_UNAVAILABLE,
                      ph == TL_FRONT_DRAINING ? "the server is shutting down"
                      : ph == TL_FRONT_FAILED ? "the model failed to load"
                                              : "the model is loading");
        return;
    }
    Inference__ModelInferRequest *q = inference__model_infer_request__unpack(NULL, len, data);
    if (!q) {
        request_error(c, GRPC_STATUS_INVALID_ARGUMENT,
                      "cannot decode the ModelInferRequest (malformed protobuf)");
        return;
    }
    struct tl_grpc_gen gen;
    grpc_status_code code;
    if (strcmp(q->model_name, sh.model_name) ||
        (*q->model_version && strcmp(q->model_version, "1"))) {
        snprintf(err, sizeof(err),
                 "unknown model '%.64s' version '%.16s'; this server serves '%.64s' (version 1)",
                 q->model_name, q->model_version, sh.model_name);
        request_error(c, GRPC_STATUS_NOT_FOUND, err);
    } else if (!tl_grpc_gen_parse(q, &gen, err, sizeof(err))) {
        request_error(c, GRPC_STATUS_INVALID_ARGUMENT, err);
    } else {
        if (!submit(c, &sh, q, &gen, &code, err, sizeof(err))) request_error(c, code, err);
        tl_grpc_gen_free(&gen);
    }
    inference__model_infer_request__free_unpacked(q, NULL);
}

// ---- engine events ---------------------------------------------------------------------------

static void send_result(struct tl_grpc_gen_req *r, const char *text, size_t len, bool final,
                        const struct tl_event *done)
{
    struct tl_grpc_call *c = r->call;
    struct tl_front_share sh;
    if (!tl_engine_share_get(&c->g->share, &sh)) return;
    struct tl_grpc_result res = {
        .model_name = sh.model_name, .id = r->id, .text = text, .text_len = len, .final = final};
    if (done) {
        res.finish_reason = tl_finish_reason_str(done->finish);
        res.n_prompt = done->n_prompt_tokens;
        res.n_generated = done->n_generated;
        res.n_cached = done->n_cached_tokens;
    }
    size_t n = 0;
    uint8_t *data = tl_grpc_pack_result(&res, c->method == TL_GM_STREAM, &n);
    tl__grpc_send(c, data, n);
}

static void on_done(struct tl_grpc_gen_req *r, const struct tl_grpc_msg *m)
{
    struct tl_grpc_call *c = r->call;
    const struct tl_event *ev = &m->ev;
    struct tl_grpc_front *g = c->g;
    pthread_mutex_lock(&g->lat_mu);
    tl_metrics_observe_done(&g->lat, ev->queue_us, ev->ttft_us, ev->total_us, ev->n_prompt_tokens,
                            ev->n_generated);
    pthread_mutex_unlock(&g->lat_mu);
    if (!c->closed && !c->want_status) {
        if (ev->finish == TL_FINISH_ERROR || atomic_load(&r->dropped)) {
            request_error(c, GRPC_STATUS_INTERNAL,
                          m->error[0] ? m->error : "out of memory while generating");
        } else if (ev->finish == TL_FINISH_DEADLINE) {
            request_error(c, GRPC_STATUS_DEADLINE_EXCEEDED, "the deadline passed");
        } else if (ev->finish == TL_FINISH_CANCELLED) {
            request_error(c, GRPC_STATUS_CANCELLED, "the request was cancelled");
        } else {
            if (!r->stream && ev->text_len) tl_sb_add(&r->text, ev->text, ev->text_len);
            if (!r->stream && !tl_sb_ok(&r->text))
                request_error(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
            else if (r->stream)
                send_result(r, ev->text ? ev->text : "", ev->text_len, true, ev);
            else
                send_result(r, r->text.buf ? r->text.buf : "", r->text.len, true, ev);
            if (c->method == TL_GM_INFER) tl__grpc_finish(c, GRPC_STATUS_OK, "%s", "");
        }
    }
    gen_unlink(r);
    gen_free(r); // also frees m (the preallocated DONE message)
    tl__grpc_maybe_end_stream(c);
    tl__grpc_maybe_free(c);
}

static void process(struct tl_grpc_front *g, struct tl_grpc_msg *m)
{
    struct tl_grpc_gen_req *r = m->req;
    if (!r->started) {
        r->started = true;
        g->n_queued--;
    }
    if (m->ev.type == TL_EVENT_DONE) {
        on_done(r, m);
        return;
    }
    struct tl_grpc_call *c = r->call;
    if (r->t_last_token_us) {
        pthread_mutex_lock(&g->lat_mu);
        tl_hist_observe(&g->lat.itl, (double)(m->t_us - r->t_last_token_us) / 1e6);
        pthread_mutex_unlock(&g->lat_mu);
    }
    r->t_last_token_us = m->t_us;
    if (m->ev.text_len && !c->closed && !c->want_status) {
        if (r->stream)
            send_result(r, m->ev.text, m->ev.text_len, false, NULL);
        else
            tl_sb_add(&r->text, m->ev.text, m->ev.text_len);
    }
    free(m);
}

void tl__grpc_drain_queue(struct tl_grpc_front *g)
{
    pthread_mutex_lock(&g->mu);
    struct tl_grpc_msg *m = g->q_head;
    g->q_head = g->q_tail = NULL;
    pthread_mutex_unlock(&g->mu);
    while (m) {
        struct tl_grpc_msg *next = m->next;
        process(g, m);
        m = next;
    }
}

void tl__grpc_cancel_gens(struct tl_grpc_call *c)
{
    struct tl_front_share sh;
    if (!tl_engine_share_get(&c->g->share, &sh)) return;
    for (struct tl_grpc_gen_req *r = c->gens; r; r = r->next)
        sh.be->cancel(sh.engine, r->engine_id);
}

void tl__grpc_abandon_gens(struct tl_grpc_call *c)
{
    while (c->gens) {
        struct tl_grpc_gen_req *r = c->gens;
        if (!r->started) c->g->n_queued--;
        gen_unlink(r);
        gen_free(r);
    }
    if (!c->want_status) tl__grpc_finish(c, GRPC_STATUS_UNAVAILABLE, "the server stopped");
}

void tl__grpc_maybe_end_stream(struct tl_grpc_call *c)
{
    if (c->method == TL_GM_STREAM && c->half_closed && !c->n_live && !c->want_status)
        tl__grpc_finish(c, GRPC_STATUS_OK, "%s", "");
}
