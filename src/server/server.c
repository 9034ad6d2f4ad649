/*
 * The tokenloom server's lifecycle (see server.h): creating the event loop, the HTTP transport
 * and the engine thread; running until stopped; draining; freeing.
 *
 * DESIGN
 * One libevent event loop (the thread calling tl_server_run) owns every socket: http.c is the
 * transport, routes.c turns HTTP requests into answers or, for generation, into request.c's
 * requests. A second thread runs the engine: load the model, then loop { step; wait while
 * idle }. Submission and cancellation go straight to the engine's thread-safe API from the
 * loop; events come back through queue.c and are handed to request_events.c here.
 * No thread per connection; the loop never blocks on the engine.
 *
 * INVARIANTS
 * - Stopping (signal or tl_server_stop): the state turns DRAINING (/health 503, new work 503
 *   with Retry-After and Connection: close), in-flight requests get until the shutdown
 *   timeout, then are cancelled and get two more seconds. The listener stays open until the
 *   loop ends: behind a gateway (nginx's proxy_next_upstream http_503, a Kubernetes Service
 *   whose readiness probe now fails) a 503 is retried elsewhere at once, while a refused
 *   connection during the seconds before the endpoint is removed would cost a failed try
 *   or, without retries, the request. Every reply while draining closes its connection. The loop
 * ends only when no request is alive AND every connection's finished reply has left libevent's
 * buffers (or the time is up), so a stream's last bytes are not lost at exit.
 * - After the loop: the engine thread is told to quit and joined, late messages are handled,
 *   anything still alive is ended by force, their replies get up to two seconds to flush, and
 *   only then are the connections, the engine and the model freed.
 *
 * THREADS: loop thread (all of tl_server but the queue, the state and the stop flags); engine
 * thread (engine, model load, tl_srv_on_event via the engine). tl_server_stop may be called
 * from any thread or a signal handler.
 */
#include "server/state.h"

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "server/grammar_wait.h"
#include "server/request.h"
#include "server/responses.h"
#include "server/routes.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

// ---- config ------------------------------------------------------------------------------------

void tl_server_config_default(struct tl_server_config *c)
{
    memset(c, 0, sizeof(*c));
    c->host = "127.0.0.1";
    c->port = 8000;
    c->max_body_bytes = 8u << 20;
    c->max_queued_requests = 256;
    c->shutdown_timeout_s = 30;
    c->http_timeout_s = 60;
    c->max_unsent_bytes = 8u << 20;
    c->responses_store_max = 1000;
    c->responses_store_bytes = 64u << 20;
    c->responses_store_ttl_s = 3600;
    tl_engine_config_default(&c->engine);
}

// ---- the engine thread -----------------------------------------------------------------------

// Fills the model facts once the model is loaded; runs on the engine thread before the state
// turns READY (which publishes them to the loop). False on failure (error set).
static bool model_ready(struct tl_server *s)
{
    s->be->model_info(s->model, &s->info);
    const char *path = s->info.path ? s->info.path : (s->cfg.model_path ? s->cfg.model_path : "");
    const char *slash = strrchr(path, '/');
    s->model_base = strdup(slash ? slash + 1 : path);
    // The id: --served-model-name, else the file's stem (as llama-server), not general.name.
    const char *dot = s->model_base ? strrchr(s->model_base, '.') : NULL;
    if (s->cfg.served_model_name && *s->cfg.served_model_name)
        s->model_name = strdup(s->cfg.served_model_name);
    else if (s->model_base && *s->model_base)
        s->model_name =
            strndup(s->model_base, dot && dot != s->model_base ? (size_t)(dot - s->model_base)
                                                               : strlen(s->model_base));
    else
        s->model_name = strdup("model");
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
    // The chat template (src/chat renders it) sees the vocabulary's BOS and EOS texts.
    char *bos = s->info.bos >= 0 ? s->be->detokenize(s->model, &s->info.bos, 1, true) : NULL;
    char *eos = s->info.eos >= 0 ? s->be->detokenize(s->model, &s->info.eos, 1, true) : NULL;
    tl_status cst = tl_chat_template_init(&s->chat, s->cfg.chat_template, s->cfg.chat_template_file,
                                          s->info.chat_template, bos, eos);
    free(bos);
    free(eos);
    if (cst) return false;
    // Tool calls and reasoning are read in the syntax the model's own (GGUF) template teaches.
    s->tool_syntax = tl_tool_syntax_detect(s->info.chat_template);
    s->reasoning = tl_reasoning_detect(s->info.chat_template);
    if (s->cfg.tool_call_syntax && *s->cfg.tool_call_syntax &&
        !tl_tool_syntax_from_name(s->cfg.tool_call_syntax, &s->tool_syntax)) {
        tl__errorf(TL_ERR_INVALID_ARG, "unknown tool-call syntax '%s'", s->cfg.tool_call_syntax);
        return false;
    }
    // The family's end-of-turn texts: a stop token when the vocabulary has it as one token,
    // else a stop string.
    const char *texts[2];
    int n = tl_chat_stop_texts(s->chat.family, texts);
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

static void wake_loop(struct tl_server *s)
{
    uint64_t one = 1;
    ssize_t n = write(s->stop_efd, &one, sizeof(one));
    (void)n;
}

// The machine's ceilings for the utilization metrics, from the caller, on the engine's thread
// count (written before engine_up, which publishes them to the loop).
static void find_ceilings(struct tl_server *s)
{
    if (!s->cfg.find_ceilings || s->cfg.backend) return;
    s->cfg.machine.have_ceilings =
        s->cfg.find_ceilings(s->cfg.engine.n_threads, &s->cfg.machine.ceilings);
}

static void *engine_main(void *arg)
{
    struct tl_server *s = arg;
    if (!s->cfg.backend) {
        int64_t t0 = tl_time_us();
        tl_status st = tl_model_load(s->cfg.model_path, &s->cfg.model_params, &s->model);
        if (!st) st = tl_engine_create(s->model, &s->cfg.engine, &s->engine);
        if (st) {
            TL_LOGE("serve: cannot load %s: %s", s->cfg.model_path ? s->cfg.model_path : "(none)",
                    tl_last_error());
            atomic_store(&s->state, TL_SRV_FAILED);
            wake_loop(s);
            return NULL;
        }
        TL_LOGI("serve: loaded %s in %.0f ms", s->cfg.model_path,
                (double)(tl_time_us() - t0) / 1000.0);
    }
    if (!model_ready(s)) {
        TL_LOGE("serve: %s", tl_last_error());
        atomic_store(&s->state, TL_SRV_FAILED);
        wake_loop(s);
        return NULL;
    }
    find_ceilings(s);
    atomic_store(&s->engine_up, true);
    int expected = TL_SRV_LOADING;
    if (atomic_compare_exchange_strong(&s->state, &expected, TL_SRV_READY))
        TL_LOGI("serve: ready: model '%s' on http://%s:%d (chat template %s%s)", s->model_name,
                s->cfg.host, s->http.port, s->chat.source_name,
                s->chat.fallback ? ": the model has none" : "");
    tl_front_engine_loop(s->be, s->engine, &s->engine_quit);
    return NULL;
}

static void on_queue(evutil_socket_t fd, short what, void *arg)
{
    struct tl_server *s = arg;
    struct tl_srv_msg *m = tl_srv_queue_take_all(&s->queue);
    while (m) {
        struct tl_srv_msg *next = m->next;
        tl_srv_req_process_msg(s, m); // frees m (or keeps a preallocated one with its choice)
        m = next;
    }
}

// ---- stopping --------------------------------------------------------------------------------

static int64_t front_in_flight(struct tl_server *s)
{
    return s->front.in_flight ? s->front.in_flight(s->front.arg) : 0;
}

static void begin_drain(struct tl_server *s)
{
    int st = atomic_load(&s->state);
    if (st == TL_SRV_DRAINING) return;
    if (st == TL_SRV_FAILED) {
        s->exit_code = 1;
        event_base_loopbreak(s->base);
        return;
    }
    atomic_store(&s->state, TL_SRV_DRAINING);
    tl_http_set_draining(&s->http); // keeps listening: new requests get 503 (see INVARIANTS)
    s->drain_deadline_us = tl_time_us() + (int64_t)(s->cfg.shutdown_timeout_s * 1e6);
    TL_LOGI("serve: stopping: %d request(s) in flight (+%lld gRPC), up to %.0f s to finish",
            tl_srv_reqs_count(s), (long long)front_in_flight(s), s->cfg.shutdown_timeout_s);
}

static void check_drained(struct tl_server *s)
{
    if (atomic_load(&s->state) != TL_SRV_DRAINING) return;
    int64_t now = tl_time_us();
    if (!s->reqs && tl_srv_gwait_count(s) == 0 && front_in_flight(s) == 0) {
        // Done once every finished reply has left libevent's buffers (or time is up).
        if (tl_http_unflushed(&s->http) == 0 || now >= s->drain_deadline_us)
            event_base_loopbreak(s->base);
        return;
    }
    if (now < s->drain_deadline_us) return;
    if (!s->drain_cancelled) {
        TL_LOGW("serve: shutdown timeout: cancelling the requests still running");
        tl_srv_reqs_cancel_all(s);
        if (s->front.cancel_all) s->front.cancel_all(s->front.arg);
        s->drain_cancelled = true;
        s->drain_deadline_us = now + 2000000; // cancellations land within a step or two
        return;
    }
    event_base_loopbreak(s->base); // the rest is finished by force in tl_server_run
}

static void on_stop(evutil_socket_t fd, short what, void *arg)
{
    struct tl_server *s = arg;
    uint64_t cnt;
    ssize_t n = read(fd, &cnt, sizeof(cnt));
    (void)n;
    if (atomic_load(&s->state) == TL_SRV_FAILED) {
        s->exit_code = 1;
        event_base_loopbreak(s->base);
        return;
    }
    if (atomic_load(&s->stop_requested)) begin_drain(s);
    check_drained(s);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct tl_server *s = arg;
    TL_LOGI("serve: got %s", sig == SIGINT ? "SIGINT" : "SIGTERM");
    atomic_store(&s->stop_requested, true);
    begin_drain(s);
    check_drained(s);
}

// Every 100 ms (and when the last request is freed while draining): liveness probes, the
// drain check, and the metrics' window samples.
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct tl_server *s = arg;
    tl_srv_reqs_probe(s);
    check_drained(s);
    // The utilization window's samples, about once a second.
    int64_t now = tl_time_us();
    if (tl_metrics_tick_due(&s->metrics, now) && tl_srv_metrics_sync(s)) {
        struct tl_engine_stats es;
        s->be->get_stats(s->engine, &es);
        // Sampled from the view, so that the window's rates count the gRPC requests too; the
        // ring itself stays in s->metrics.
        struct tl_metrics all;
        tl_srv_metrics_view(s, &all);
        tl_metrics_tick(&all, &es, now);
        memcpy(s->metrics.window, all.window, sizeof(all.window));
        s->metrics.n_window = all.n_window;
        s->metrics.i_window = all.i_window;
    }
}

void tl_server_stop(struct tl_server *s)
{
    atomic_store(&s->stop_requested, true);
    wake_loop(s);
}

// ---- lifecycle -------------------------------------------------------------------------------

struct tl_server *tl_server_create(const struct tl_server_config *c)
{
    struct tl_server *s = calloc(1, sizeof(*s));
    if (!s) {
        tl__errorf(TL_ERR_NOMEM, "serve: out of memory");
        return NULL;
    }
    s->cfg = *c;
    s->be = c->backend ? c->backend : &tl_srv_backend_default;
    s->model = c->model;
    s->engine = c->engine_handle;
    s->stop_efd = -1;
    atomic_init(&s->state, TL_SRV_LOADING);
    tl_metrics_init(&s->metrics);
    s->started_s = tl_wall_time_us() / 1000000;
    s->rng = (uint64_t)tl_wall_time_us() ^ ((uint64_t)getpid() << 32);
    signal(SIGPIPE, SIG_IGN); // a vanished client must not kill the process on write
    tl_oai_use_tl_alloc();    // JSON allocations fail (and are told apart) like ours

    if (tl_srv_queue_init(&s->queue)) goto fail;
    s->queue_open = true;
    s->stop_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    s->base = event_base_new();
    if (s->stop_efd < 0 || !s->base) {
        tl__errorf(TL_ERR_NOMEM, "serve: cannot set up the event loop");
        goto fail;
    }
    s->ev_queue = event_new(s->base, s->queue.efd, EV_READ | EV_PERSIST, on_queue, s);
    s->ev_stop = event_new(s->base, s->stop_efd, EV_READ | EV_PERSIST, on_stop, s);
    s->ev_tick = event_new(s->base, -1, EV_PERSIST, on_tick, s);
    if (!s->ev_queue || !s->ev_stop || !s->ev_tick) {
        tl__errorf(TL_ERR_NOMEM, "serve: cannot set up the event loop");
        goto fail;
    }
    if (tl_srv_gwait_open(s)) goto fail;
    if (c->responses_store_max > 0) {
        s->resp_store = tl_resp_store_create(c->responses_store_max, c->responses_store_bytes,
                                             (int64_t)(c->responses_store_ttl_s * 1e6));
        if (!s->resp_store) {
            tl__errorf(TL_ERR_NOMEM, "serve: out of memory");
            goto fail;
        }
    }
    struct timeval tick = {0, 100000};
    event_add(s->ev_queue, NULL);
    event_add(s->ev_stop, NULL);
    event_add(s->ev_tick, &tick);
    if (c->handle_signals) {
        s->ev_sigint = evsignal_new(s->base, SIGINT, on_signal, s);
        s->ev_sigterm = evsignal_new(s->base, SIGTERM, on_signal, s);
        if (s->ev_sigint) event_add(s->ev_sigint, NULL);
        if (s->ev_sigterm) event_add(s->ev_sigterm, NULL);
    }
    struct tl_http_config hc = {
        .host = c->host,
        .port = c->port,
        .max_body_bytes = c->max_body_bytes,
        .timeout_s = c->http_timeout_s,
    };
    s->http_open = true; // (tl_http_close copes with a half-open transport)
    if (tl_http_open(&s->http, s->base, &hc, &s->metrics, tl_srv_routes_handle, s)) {
        tl__error_prefix(TL_ERR_IO, "serve"); // (formatting tl_last_error() into itself garbles it)
        goto fail;
    }
    if (pthread_create(&s->engine_thread, NULL, engine_main, s) != 0) {
        tl__errorf(TL_ERR_NOMEM, "serve: cannot start the engine thread");
        goto fail;
    }
    s->engine_thread_started = true;
    return s;
fail:
    tl_server_destroy(s);
    return NULL;
}

int tl_server_port(const struct tl_server *s)
{
    return s->http.port;
}

// ---- the share other fronts reach the engine through ---------------------------------------

static void share_attach(void *owner, const struct tl_front_hooks *f)
{
    struct tl_server *s = owner;
    s->front = *f;
}

static enum tl_front_phase share_phase(const void *owner)
{
    const struct tl_server *s = owner;
    return (enum tl_front_phase)atomic_load(&((struct tl_server *)s)->state);
}

static bool share_get(const void *owner, struct tl_front_share *out)
{
    const struct tl_server *s = owner;
    int st = share_phase(s);
    // READY publishes the engine thread's writes; DRAINING follows READY unless the stop came
    // while loading, which engine_up tells apart.
    if (st == TL_SRV_LOADING || st == TL_SRV_FAILED ||
        !atomic_load(&((struct tl_server *)s)->engine_up))
        return false;
    out->be = s->be;
    out->engine = s->engine;
    out->model = s->model;
    out->model_name = s->model_name;
    out->max_queued_requests = s->cfg.max_queued_requests;
    out->max_seq_len = s->max_seq_len;
    out->max_token_bytes = s->max_token_bytes;
    return true;
}

void tl_server_engine_share(struct tl_server *s, struct tl_engine_share *out)
{
    out->phase = share_phase;
    out->share = share_get;
    out->attach = share_attach;
    out->owner = s;
}

// Stops and joins the engine thread, then handles the messages that arrived before the join.
static void stop_engine_thread(struct tl_server *s)
{
    atomic_store(&s->engine_quit, true);
    if (s->engine_thread_started) {
        if (atomic_load(&s->engine_up)) s->be->wake(s->engine);
        pthread_join(s->engine_thread, NULL);
        s->engine_thread_started = false;
    }
    if (s->queue_open && s->base) on_queue(s->queue.efd, EV_READ, s);
}

// Runs the loop until every finished reply has left libevent's buffers, at most max_us.
static void flush_replies(struct tl_server *s, int64_t max_us)
{
    int64_t end = tl_time_us() + max_us;
    while (tl_http_unflushed(&s->http) > 0 && tl_time_us() < end) {
        struct timeval slice = {0, 20000};
        event_base_loopexit(s->base, &slice);
        event_base_dispatch(s->base);
    }
}

int tl_server_run(struct tl_server *s)
{
    event_base_dispatch(s->base);
    stop_engine_thread(s); // after the join no event can arrive any more
    tl_srv_reqs_abandon_all(s);
    flush_replies(s, 2000000);
    if (atomic_load(&s->state) == TL_SRV_FAILED) s->exit_code = 1;
    TL_LOGI("serve: stopped");
    return s->exit_code;
}

void tl_server_destroy(struct tl_server *s)
{
    if (!s) return;
    stop_engine_thread(s);
    tl_srv_reqs_abandon_all(s);
    tl_srv_gwait_close(s);
    if (s->http_open) tl_http_close(&s->http);
    if (s->ev_queue) event_free(s->ev_queue);
    if (s->ev_stop) event_free(s->ev_stop);
    if (s->ev_tick) event_free(s->ev_tick);
    if (s->ev_sigint) event_free(s->ev_sigint);
    if (s->ev_sigterm) event_free(s->ev_sigterm);
    if (s->base) event_base_free(s->base);
    if (s->queue_open) tl_srv_queue_destroy(&s->queue);
    if (s->stop_efd >= 0) close(s->stop_efd);
    if (!s->cfg.backend) {
        tl_engine_destroy(s->engine);
        tl_model_destroy(s->model);
    }
    tl_chat_template_free(&s->chat);
    tl_resp_store_destroy(s->resp_store);
    free(s->model_name);
    free(s->model_base);
    free(s);
}
