/*
 * The server's shared state, struct tl_server: configuration, the event loop and its events,
 * the HTTP transport, the engine thread and its queue, the model facts and the list of live
 * requests. server.c creates and frees it; routes.c and request.c read it.
 *
 * Threads: the event-loop thread owns every field except the queue (engine thread pushes) and
 * the atomics, which both threads touch. The model facts are written by the engine thread
 * before the state turns READY, which publishes them to the loop.
 */
#ifndef TL_SERVER_STATE_H
#define TL_SERVER_STATE_H

#include "chat/toolcall.h"
#include "front/metrics.h"
#include "server/chat_template.h"
#include "server/http.h"
#include "server/queue.h"
#include "server/server.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>

// The phases of front/engine_share.h, as the server has always spelled them.
enum tl_srv_state {
    TL_SRV_LOADING = TL_FRONT_LOADING, // the engine thread is loading the model
    TL_SRV_READY = TL_FRONT_READY,
    TL_SRV_DRAINING = TL_FRONT_DRAINING, // stop requested: no new work, in-flight requests finish
    TL_SRV_FAILED = TL_FRONT_FAILED,     // the model or engine failed to load
};

struct tl_srv_req;
struct tl_resp_store;

struct tl_server {
    struct tl_server_config cfg;     // copied; strings borrowed from the caller
    const struct tl_srv_backend *be; // borrowed
    tl_model *model;                 // owned unless cfg.backend
    tl_engine *engine;               // owned unless cfg.backend
    atomic_int state;                // enum tl_srv_state; written by both threads
    atomic_bool stop_requested;      // tl_server_stop (signal-safe)
    atomic_bool engine_quit;         // tells the engine thread to exit
    atomic_bool engine_up;           // model and engine exist (set once by the engine thread)
    int exit_code;

    struct event_base *base; // owned
    struct tl_http http;     // owned: the transport
    bool http_open;
    struct event *ev_queue;      // the queue's eventfd is readable
    struct event *ev_tick;       // periodic: liveness probes, stop/drain checks
    struct tl_gworker *gworker;  // owned: compiles grammars off the loop (grammar_wait.c)
    struct event *ev_gworker;    // its eventfd is readable
    struct tl_srv_gwait *gwaits; // owned: requests waiting for their grammar
    int n_gwait;
    struct event *ev_sigint, *ev_sigterm;
    int stop_efd; // eventfd written by tl_server_stop
    struct event *ev_stop;
    int64_t drain_deadline_us; // when draining: cancel what is left after this
    bool drain_cancelled;      // the deadline passed and everything was cancelled

    pthread_t engine_thread;
    bool engine_thread_started;
    struct tl_srv_queue queue;
    bool queue_open;

    // Model facts (valid once READY):
    struct tl_model_info info;
    char *model_name;                   // owned: the served id
    char *model_base;                   // owned: the file's base name (also accepted)
    int32_t max_seq_len;                // prompt + generated tokens per request
    size_t max_token_bytes;             // longest text of one token (at least 64): a prompt longer
                                        // than max_seq_len * this cannot fit and is refused
                                        // before tokenizing (which would stall the loop)
    struct tl_chat_template chat;       // the template chat requests are rendered with
    enum tl_tool_syntax tool_syntax;    // how the model writes tool calls (chat_reply.c)
    struct tl_reasoning_tags reasoning; // its reasoning tags, or none
    int32_t chat_stop_tokens[4];
    int n_chat_stop_tokens;
    const char *chat_stop_strings[4]; // static strings (not single tokens)
    int n_chat_stop_strings;

    struct tl_srv_req *reqs; // live generating requests (doubly linked)
    int64_t n_queued;        // choices submitted but not started
    uint64_t id_counter;
    uint64_t rng;      // seeds for requests without one
    int64_t started_s; // Unix seconds at start
    struct tl_metrics metrics;
    bool metrics_ready;          // the loop has given metrics the model facts (tl_srv_metrics_sync)
    struct tl_front_hooks front; // another front on the engine (gRPC); zeroed when none
    struct tl_resp_store *resp_store; // owned: finished /v1/responses (responses_store.c)
};

// Gives the metrics the model's facts once the engine is up (event-loop thread; cheap, call
// before reading s->metrics). Returns whether the engine is up (stats can be asked for).
bool tl_srv_metrics_sync(struct tl_server *s);
// The server's metrics plus the other front's requests (gRPC: its add_latency hook), what
// /metrics, /stats and the window's samples read (event-loop thread).
void tl_srv_metrics_view(const struct tl_server *s, struct tl_metrics *out);

#endif
