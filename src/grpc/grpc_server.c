/*
 * The gRPC front's thread: one completion queue, generic call requests (any method arrives;
 * the path picks the handler), one operation of each kind in flight per call, and the small
 * RPCs (health, metadata). Generation is in grpc_generate.c. See grpc_front.h.
 *
 * DESIGN
 * The gRPC C core does the HTTP/2 and the call state; protobuf-c (code generated from
 * proto/grpc_service.proto at build time) does the messages. Each accepted call starts a
 * RECV_CLOSE_ON_SERVER operation at once: it completes when the call ends, with `cancelled`
 * set when the client cancelled or its deadline passed, which cancels the call's engine
 * requests. Sends are serialized per call (gRPC allows one SEND_MESSAGE at a time): packed
 * responses wait in a list and go one batch at a time; the status goes last.
 * The engine thread cannot wake a completion queue (the C core has no public way to post to
 * one), so while generations are live the thread waits at most 1 ms for gRPC events before it
 * takes the engine's messages (a mutex-protected list), and 50 ms when idle.
 *
 * INVARIANTS
 * - A call is freed only when its close operation completed, no operation is pending and no
 *   generation of it is live (the engine calls back with the generation until DONE).
 * - Every call ends with exactly one status, counted in the metrics by method and code.
 *
 * THREADS: the gRPC thread owns everything; tl_grpc_start / tl_grpc_stop run on the caller's;
 * the server's loop thread calls the front hooks (atomics only).
 */
#include "grpc/grpc_impl.h"
#include "grpc/grpc_reply.h"

#include "core/error.h"
#include "core/log.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_WAITING 8 // request_call operations kept outstanding

// ---- sending ---------------------------------------------------------------------------------

static void start_batch(struct tl_grpc_call *c, const grpc_op *ops, size_t n,
                        struct tl_grpc_tag *tag)
{
    grpc_call_error e = grpc_call_start_batch(c->call, ops, n, tag, NULL);
    if (e != GRPC_CALL_OK) {
        // Only a programming error gets here; the call is then treated as gone.
        TL_LOGE("grpc: start_batch failed (%d) on %s", (int)e, tl__grpc_method_name(c->method));
        return;
    }
    c->pending++;
}

static void drop_output(struct tl_grpc_call *c)
{
    c->out_bytes = 0;
    while (c->out_head) {
        struct tl_grpc_out *o = c->out_head;
        c->out_head = o->next;
        free(o->data);
        free(o);
    }
    c->out_tail = NULL;
}

// Starts the next send: queued messages in order, then the status (with the last message
// when it is the only one left).
static void pump_send(struct tl_grpc_call *c)
{
    if (c->sending || c->closed || c->status_sent) return;
    bool have_msg = c->out_head != NULL;
    bool with_status = c->want_status && (!have_msg || !c->out_head->next);
    if (!have_msg && !with_status) return;
    grpc_op ops[3];
    memset(ops, 0, sizeof(ops));
    size_t n = 0;
    if (!c->sent_md) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        c->sent_md = true;
    }
    if (have_msg) {
        struct tl_grpc_out *o = c->out_head;
        c->out_head = o->next;
        if (!c->out_head) c->out_tail = NULL;
        c->out_bytes -= o->len;
        grpc_slice s = grpc_slice_new(o->data, o->len, free); // takes o->data
        c->send_buf = grpc_raw_byte_buffer_create(&s, 1);
        grpc_slice_unref(s);
        free(o);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = c->send_buf;
    }
    if (with_status) {
        c->status_slice = grpc_slice_from_copied_string(c->status_msg);
        c->has_status_slice = true;
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n].data.send_status_from_server.status = c->status;
        ops[n++].data.send_status_from_server.status_details = &c->status_slice;
        c->status_sent = true;
    }
    c->sending = true;
    start_batch(c, ops, n, &c->t_send);
    if (!c->pending) c->sending = false;
}

void tl__grpc_send(struct tl_grpc_call *c, uint8_t *data, size_t len)
{
    if (!data) {
        tl__grpc_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    struct tl_grpc_out *o = c->closed || c->status_sent ? NULL : malloc(sizeof(*o));
    if (!o) {
        free(data);
        if (!c->closed && !c->status_sent)
            tl__grpc_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    o->next = NULL;
    o->data = data;
    o->len = len;
    if (c->out_tail)
        c->out_tail->next = o;
    else
        c->out_head = o;
    c->out_tail = o;
    c->out_bytes += len;
    pump_send(c);
    size_t cap = c->g->cfg.max_unsent_bytes;
    if (cap && c->out_bytes > cap && !c->closed) {
        // The client stopped reading (gRPC flow control holds our sends): memory per call stays
        // bounded, as on HTTP (--max-unsent-bytes). The close operation then completes.
        TL_LOGW("grpc: a %s client left %zu bytes unread; cancelling",
                tl__grpc_method_name(c->method), c->out_bytes);
        tl__grpc_cancel_gens(c);
        drop_output(c);
        if (!c->want_status) {
            c->want_status = true; // counted here; the status goes out with the cancel
            atomic_fetch_add(&c->g->counts[c->method][GRPC_STATUS_RESOURCE_EXHAUSTED], 1);
        }
        c->status_sent = true;
        grpc_call_cancel_with_status(c->call, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                     "the client left too many responses unread "
                                     "(--max-unsent-bytes)",
                                     NULL);
    }
}

void tl__grpc_finish(struct tl_grpc_call *c, grpc_status_code code, const char *fmt, ...)
{
    if (c->want_status) return;
    c->want_status = true;
    c->status = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->status_msg, sizeof(c->status_msg), fmt, ap);
    va_end(ap);
    atomic_fetch_add(&c->g->counts[c->method][code < TL_GRPC_N_CODES ? code : 2], 1);
    pump_send(c);
}

static void reply(struct tl_grpc_call *c, const ProtobufCMessage *m)
{
    size_t len = 0;
    uint8_t *data = tl_grpc_pack(m, &len);
    tl__grpc_send(c, data, len);
    if (data) tl__grpc_finish(c, GRPC_STATUS_OK, "%s", "");
}

// ---- receiving -------------------------------------------------------------------------------

static void start_recv(struct tl_grpc_call *c)
{
    if (c->closed || c->half_closed || c->want_status) return;
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &c->recv_buf;
    start_batch(c, &op, 1, &c->t_recv);
}

static bool same_secret(const char *a, size_t la, const char *b)
{
    size_t lb = strlen(b);
    unsigned char d = la != lb;
    for (size_t i = 0; i < la; i++)
        d |= (unsigned char)(a[i] ^ b[i % (lb ? lb : 1)]);
    return d == 0;
}

// The 'authorization' metadata holds "Bearer <key>" (as the HTTP header).
static bool authorized(const struct tl_grpc_call *c, const char *key)
{
    if (!key || !*key) return true;
    for (size_t i = 0; i < c->md.count; i++) {
        const grpc_metadata *m = &c->md.metadata[i];
        if (!grpc_slice_str_cmp(m->key, "authorization")) {
            const char *v = (const char *)GRPC_SLICE_START_PTR(m->value);
            size_t n = GRPC_SLICE_LENGTH(m->value);
            if (n > 7 && !memcmp(v, "Bearer ", 7)) return same_secret(v + 7, n - 7, key);
            return false;
        }
    }
    return false;
}

static bool model_matches(const struct tl_front_share *sh, const char *name, const char *version)
{
    return !strcmp(name, sh->model_name) && (!*version || !strcmp(version, "1"));
}

// grpc.health.v1.Health/Check: the whole server ("") or the inference service.
static void health_check(struct tl_grpc_call *c, const uint8_t *data, size_t len, bool serving)
{
    Inference__HealthCheckRequest *q = inference__health_check_request__unpack(NULL, len, data);
    if (!q) {
        tl__grpc_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "cannot decode the health check request");
        return;
    }
    if (*q->service && strcmp(q->service, "inference.GRPCInferenceService")) {
        tl__grpc_finish(c, GRPC_STATUS_NOT_FOUND,
                        "unknown service '%.64s'; this server checks '' and "
                        "'inference.GRPCInferenceService'",
                        q->service);
    } else {
        Inference__HealthCheckResponse r = INFERENCE__HEALTH_CHECK_RESPONSE__INIT;
        r.status = serving ? INFERENCE__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                           : INFERENCE__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
        reply(c, &r.base);
    }
    inference__health_check_request__free_unpacked(q, NULL);
}

// The unary RPCs other than ModelInfer.
static void handle_small(struct tl_grpc_call *c, const uint8_t *data, size_t len)
{
    struct tl_grpc_front *g = c->g;
    struct tl_front_share sh;
    bool up = tl_engine_share_get(&g->share, &sh);
    enum tl_front_phase ph = tl_engine_share_phase(&g->share);
    switch (c->method) {
    case TL_GM_LIVE: {
        Inference__ServerLiveResponse r = INFERENCE__SERVER_LIVE_RESPONSE__INIT;
        r.live = true;
        reply(c, &r.base);
        return;
    }
    case TL_GM_READY: {
        Inference__ServerReadyResponse r = INFERENCE__SERVER_READY_RESPONSE__INIT;
        r.ready = up && ph == TL_FRONT_READY;
        reply(c, &r.base);
        return;
    }
    case TL_GM_SERVER_META: {
        Inference__ServerMetadataResponse r = INFERENCE__SERVER_METADATA_RESPONSE__INIT;
        char *ext[1] = {"model_stream_infer"};
        r.name = "tokenloom";
        r.version = "1";
        r.n_extensions = 1;
        r.extensions = ext;
        reply(c, &r.base);
        return;
    }
    case TL_GM_HEALTH:
        health_check(c, data, len, up && ph == TL_FRONT_READY);
        return;
    default:
        break;
    }
    // ModelReady / ModelMetadata: {name, version} (the same fields in both messages).
    Inference__ModelReadyRequest *q = inference__model_ready_request__unpack(NULL, len, data);
    if (!q) {
        tl__grpc_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "cannot decode the %s request",
                        tl__grpc_method_name(c->method));
        return;
    }
    if (!up) {
        if (c->method == TL_GM_MODEL_READY) {
            Inference__ModelReadyResponse r = INFERENCE__MODEL_READY_RESPONSE__INIT;
            reply(c, &r.base); // ready = false while loading
        } else {
            tl__grpc_finish(c, GRPC_STATUS_UNAVAILABLE, "the model is %s",
                            ph == TL_FRONT_FAILED ? "not available (failed to load)" : "loading");
        }
    } else if (!model_matches(&sh, q->name, q->version)) {
        tl__grpc_finish(c, GRPC_STATUS_NOT_FOUND,
                        "unknown model '%.64s' version '%.16s'; this server serves '%.64s' "
                        "(version 1)",
                        q->name, q->version, sh.model_name);
    } else if (c->method == TL_GM_MODEL_READY) {
        Inference__ModelReadyResponse r = INFERENCE__MODEL_READY_RESPONSE__INIT;
        r.ready = ph == TL_FRONT_READY;
        reply(c, &r.base);
    } else {
        size_t n = 0;
        uint8_t *buf = tl_grpc_pack_model_metadata(sh.model_name, &n);
        tl__grpc_send(c, buf, n);
        if (buf) tl__grpc_finish(c, GRPC_STATUS_OK, "%s", "");
    }
    inference__model_ready_request__free_unpacked(q, NULL);
}

static void on_recv(struct tl_grpc_call *c, bool ok)
{
    grpc_byte_buffer *bb = c->recv_buf;
    c->recv_buf = NULL;
    if (!ok || !bb) {
        // The client sent its last message (or the call is over).
        c->half_closed = true;
        if (c->method == TL_GM_STREAM)
            tl__grpc_maybe_end_stream(c);
        else
            tl__grpc_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "no request message");
        return;
    }
    grpc_byte_buffer_reader rd;
    grpc_slice s = grpc_empty_slice();
    if (grpc_byte_buffer_reader_init(&rd, bb)) {
        s = grpc_byte_buffer_reader_readall(&rd);
        grpc_byte_buffer_reader_destroy(&rd);
    }
    grpc_byte_buffer_destroy(bb);
    const uint8_t *data = GRPC_SLICE_START_PTR(s);
    size_t len = GRPC_SLICE_LENGTH(s);
    if (c->method == TL_GM_INFER || c->method == TL_GM_STREAM)
        tl__grpc_infer(c, data, len);
    else
        handle_small(c, data, len);
    grpc_slice_unref(s);
    if (c->method == TL_GM_STREAM) start_recv(c);
}

// ---- accepting calls -------------------------------------------------------------------------

static void request_call(struct tl_grpc_front *g)
{
    struct tl_grpc_call *c = calloc(1, sizeof(*c));
    if (!c) return;
    c->g = g;
    c->t_new = (struct tl_grpc_tag){c, TL_GOP_NEW};
    c->t_recv = (struct tl_grpc_tag){c, TL_GOP_RECV};
    c->t_send = (struct tl_grpc_tag){c, TL_GOP_SEND};
    c->t_close = (struct tl_grpc_tag){c, TL_GOP_CLOSE};
    grpc_call_details_init(&c->details);
    grpc_metadata_array_init(&c->md);
    if (grpc_server_request_call(g->server, &c->call, &c->details, &c->md, g->cq, g->cq,
                                 &c->t_new) != GRPC_CALL_OK) {
        grpc_call_details_destroy(&c->details);
        grpc_metadata_array_destroy(&c->md);
        free(c);
        return;
    }
    g->n_waiting++;
}

static void free_call(struct tl_grpc_call *c)
{
    // The core took its own reference to the status text when the batch started.
    if (c->has_status_slice) grpc_slice_unref(c->status_slice);
    if (c->call) grpc_call_unref(c->call);
    grpc_call_details_destroy(&c->details);
    grpc_metadata_array_destroy(&c->md);
    free(c);
}

void tl__grpc_maybe_free(struct tl_grpc_call *c)
{
    if (!c->closed || c->pending || c->n_live) return;
    struct tl_grpc_front *g = c->g;
    if (c->prev)
        c->prev->next = c->next;
    else
        g->calls = c->next;
    if (c->next) c->next->prev = c->prev;
    drop_output(c);
    free_call(c);
}

static void on_new_call(struct tl_grpc_front *g, struct tl_grpc_call *c, bool ok)
{
    g->n_waiting--;
    if (!ok) { // the server is shutting down
        free_call(c);
        return;
    }
    if (!atomic_load(&g->quit)) request_call(g);
    c->method = tl__grpc_method_of(&c->details.method);
    c->next = g->calls;
    if (g->calls) g->calls->prev = c;
    g->calls = c;
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->cancelled;
    start_batch(c, &op, 1, &c->t_close);
    const char *key = g->cfg.api_key;
    if (c->method == TL_GM_OTHER) {
        tl__grpc_finish(c, GRPC_STATUS_UNIMPLEMENTED, "unknown method");
    } else if (c->method != TL_GM_LIVE && c->method != TL_GM_HEALTH && !authorized(c, key)) {
        // (liveness and health carry no data, and probes cannot send a key)
        tl__grpc_finish(c, GRPC_STATUS_UNAUTHENTICATED,
                        "missing or incorrect API key: send metadata 'authorization: Bearer "
                        "<key>'");
    } else if (atomic_load(&g->quit)) {
        tl__grpc_finish(c, GRPC_STATUS_UNAVAILABLE, "the server is stopping");
    } else if (c->method == TL_GM_STREAM && tl_engine_share_phase(&g->share) != TL_FRONT_READY) {
        tl__grpc_finish(c, GRPC_STATUS_UNAVAILABLE, "the server is %s",
                        tl_engine_share_phase(&g->share) == TL_FRONT_DRAINING ? "shutting down"
                                                                              : "not ready");
    } else {
        start_recv(c);
    }
}

static void on_close(struct tl_grpc_call *c)
{
    c->closed = true;
    if (c->cancelled) tl__grpc_cancel_gens(c); // client cancel or deadline: free the KV now
    drop_output(c);
    if (!c->want_status) // counted as the client saw it
        atomic_fetch_add(&c->g->counts[c->method][GRPC_STATUS_CANCELLED], 1);
}

static void on_event(struct tl_grpc_front *g, const grpc_event *ev)
{
    struct tl_grpc_tag *t = ev->tag;
    if (t->op == TL_GOP_SHUTDOWN) {
        g->shutdown_done = true;
        return;
    }
    struct tl_grpc_call *c = t->call;
    if (t->op == TL_GOP_NEW) {
        on_new_call(g, c, ev->success);
        return;
    }
    c->pending--;
    switch (t->op) {
    case TL_GOP_RECV:
        on_recv(c, ev->success);
        break;
    case TL_GOP_SEND:
        c->sending = false;
        if (c->send_buf) grpc_byte_buffer_destroy(c->send_buf);
        c->send_buf = NULL;
        if (!ev->success) drop_output(c);
        pump_send(c);
        break;
    case TL_GOP_CLOSE:
        on_close(c);
        break;
    default:
        break;
    }
    tl__grpc_maybe_free(c);
}

// ---- the thread ------------------------------------------------------------------------------

static void publish_busy(struct tl_grpc_front *g)
{
    int64_t n = 0;
    for (struct tl_grpc_call *c = g->calls; c; c = c->next)
        if (c->n_live || c->sending || c->out_head) n++;
    atomic_store(&g->busy, n);
}

static gpr_timespec in_ms(int ms)
{
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms, GPR_TIMESPAN));
}

static void *grpc_main(void *arg)
{
    struct tl_grpc_front *g = arg;
    pthread_setname_np(pthread_self(), "tl-grpc"); // tells it apart in top -H, perf, /proc
    for (int i = 0; i < N_WAITING; i++)
        request_call(g);
    while (!atomic_load(&g->quit)) {
        tl__grpc_drain_queue(g);
        if (atomic_load(&g->cancel_all) && !g->cancelled_all) {
            g->cancelled_all = true;
            for (struct tl_grpc_call *c = g->calls; c; c = c->next)
                tl__grpc_cancel_gens(c);
        }
        publish_busy(g);
        grpc_event ev = grpc_completion_queue_next(g->cq, in_ms(g->n_live ? 1 : 50), NULL);
        if (ev.type == GRPC_OP_COMPLETE) on_event(g, &ev);
    }
    // Stopping: the engine thread is gone, so its last messages are all here.
    tl__grpc_drain_queue(g);
    for (struct tl_grpc_call *c = g->calls; c; c = c->next)
        tl__grpc_abandon_gens(c);
    static struct tl_grpc_tag shutdown_tag = {NULL, TL_GOP_SHUTDOWN};
    grpc_server_shutdown_and_notify(g->server, g->cq, &shutdown_tag);
    // Calls still open get a moment to send what they have, then are cancelled.
    gpr_timespec grace = in_ms(1000);
    bool cancelled = false;
    while (!g->shutdown_done || g->calls || g->n_waiting) {
        if (!cancelled && gpr_time_cmp(gpr_now(GPR_CLOCK_MONOTONIC), grace) > 0) {
            grpc_server_cancel_all_calls(g->server);
            cancelled = true;
        }
        grpc_event ev = grpc_completion_queue_next(g->cq, in_ms(100), NULL);
        if (ev.type == GRPC_OP_COMPLETE) on_event(g, &ev);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
    }
    grpc_server_destroy(g->server);
    g->server = NULL;
    grpc_completion_queue_shutdown(g->cq);
    while (grpc_completion_queue_next(g->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(g->cq);
    g->cq = NULL;
    return NULL;
}

// ---- hooks for the HTTP server ---------------------------------------------------------------

static int64_t hook_in_flight(void *arg)
{
    struct tl_grpc_front *g = arg;
    return atomic_load(&g->busy);
}

static void hook_cancel_all(void *arg)
{
    struct tl_grpc_front *g = arg;
    atomic_store(&g->cancel_all, true);
}

static void hook_add_latency(void *arg, struct tl_metrics *m)
{
    struct tl_grpc_front *g = arg;
    pthread_mutex_lock(&g->lat_mu);
    tl_metrics_add(m, &g->lat);
    pthread_mutex_unlock(&g->lat_mu);
}

static void hook_metrics(void *arg, const char *labels, struct tl_sb *out)
{
    struct tl_grpc_front *g = arg;
    tl_sb_printf(out, "# HELP tokenloom:grpc_requests_total gRPC calls finished, by method and "
                      "status code.\n# TYPE tokenloom:grpc_requests_total counter\n");
    for (int m = 0; m < TL_GM_COUNT; m++)
        for (int k = 0; k < TL_GRPC_N_CODES; k++) {
            long long n = atomic_load(&g->counts[m][k]);
            if (n)
                tl_sb_printf(out,
                             "tokenloom:grpc_requests_total{method=\"%s\",code=\"%s\",%s} %lld\n",
                             tl__grpc_method_name((enum tl_grpc_method)m),
                             tl__grpc_code_name((grpc_status_code)k), labels, n);
        }
    tl_sb_printf(out,
                 "# HELP tokenloom:grpc_stream_generations_total generations started on "
                 "ModelStreamInfer streams.\n# TYPE tokenloom:grpc_stream_generations_total "
                 "counter\ntokenloom:grpc_stream_generations_total{%s} %lld\n"
                 "# HELP tokenloom:grpc_busy_calls gRPC calls with work in progress.\n"
                 "# TYPE tokenloom:grpc_busy_calls gauge\ntokenloom:grpc_busy_calls{%s} %lld\n",
                 labels, (long long)atomic_load(&g->stream_requests), labels,
                 (long long)atomic_load(&g->busy));
}

// ---- lifecycle -------------------------------------------------------------------------------

struct tl_grpc_front *tl_grpc_start(const struct tl_engine_share *share,
                                    const struct tl_grpc_config *c)
{
    struct tl_grpc_front *g = calloc(1, sizeof(*g));
    if (!g) {
        tl__errorf(TL_ERR_NOMEM, "grpc: out of memory");
        return NULL;
    }
    g->share = *share;
    g->cfg = *c;
    pthread_mutex_init(&g->mu, NULL);
    pthread_mutex_init(&g->lat_mu, NULL);
    tl_metrics_init(&g->lat);
    g->rng = (uint64_t)(uintptr_t)g ^ (uint64_t)gpr_now(GPR_CLOCK_REALTIME).tv_nsec ^
             0xD1B54A32D192ED03ull;
    grpc_init();
    grpc_arg args[2];
    memset(args, 0, sizeof(args));
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer =
        c->max_message_bytes > (size_t)INT32_MAX ? INT32_MAX : (int)c->max_message_bytes;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[1].value.integer = -1;
    grpc_channel_args ca = {2, args};
    g->server = grpc_server_create(&ca, NULL);
    g->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(g->server, g->cq, NULL);
    char addr[300];
    snprintf(addr, sizeof(addr), "%s:%d", c->host, c->port);
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    g->port = grpc_server_add_http2_port(g->server, addr, creds);
    grpc_server_credentials_release(creds);
    if (g->port <= 0) {
        tl__errorf(TL_ERR_IO, "grpc: cannot listen on %s", addr);
        grpc_server_destroy(g->server);
        grpc_completion_queue_shutdown(g->cq);
        while (grpc_completion_queue_next(g->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
               GRPC_QUEUE_SHUTDOWN) {
        }
        grpc_completion_queue_destroy(g->cq);
        grpc_shutdown();
        pthread_mutex_destroy(&g->mu);
        pthread_mutex_destroy(&g->lat_mu);
        free(g);
        return NULL;
    }
    grpc_server_start(g->server);
    struct tl_front_hooks f = {.in_flight = hook_in_flight,
                               .cancel_all = hook_cancel_all,
                               .metrics = hook_metrics,
                               .add_latency = hook_add_latency,
                               .arg = g};
    tl_engine_share_attach(share, &f);
    if (pthread_create(&g->thread, NULL, grpc_main, g) != 0) {
        tl__errorf(TL_ERR_NOMEM, "grpc: cannot start the gRPC thread");
        atomic_store(&g->quit, true);
        grpc_main(g); // tears down on this thread
        struct tl_front_hooks none = {0};
        tl_engine_share_attach(share, &none);
        grpc_shutdown();
        pthread_mutex_destroy(&g->mu);
        pthread_mutex_destroy(&g->lat_mu);
        free(g);
        return NULL;
    }
    g->thread_started = true;
    return g;
}

int tl_grpc_port(const struct tl_grpc_front *g)
{
    return g->port;
}

void tl_grpc_stop(struct tl_grpc_front *g)
{
    if (!g) return;
    atomic_store(&g->quit, true);
    if (g->thread_started) pthread_join(g->thread, NULL);
    struct tl_front_hooks none = {0};
    tl_engine_share_attach(&g->share, &none);
    while (g->q_head) { // messages with no request left (freed with their requests)
        struct tl_grpc_msg *m = g->q_head;
        g->q_head = m->next;
        if (!m->preallocated) free(m);
    }
    grpc_shutdown();
    pthread_mutex_destroy(&g->mu);
    pthread_mutex_destroy(&g->lat_mu);
    free(g);
}
