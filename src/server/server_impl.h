/*
 * Internals shared by the server's files: http.c (event loop, engine thread, message queue,
 * replies, shutdown) and routes.c (endpoint handlers and the per-request state machine).
 *
 * Threads: the event-loop thread owns every struct here except the message queue, which the
 * engine thread fills (producer) and the loop drains (consumer), and the atomics marked so.
 */
#ifndef TL_SERVER_IMPL_H
#define TL_SERVER_IMPL_H

#include "server/chat_template.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/server.h"
#include "server/strbuf.h"

#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>

enum tl_srv_state {
    TL_SRV_LOADING = 0, // the engine thread is loading the model
    TL_SRV_READY = 1,
    TL_SRV_DRAINING = 2, // stop requested: no new work, in-flight requests finish
    TL_SRV_FAILED = 3,   // the model or engine failed to load
};

// One engine event, copied on the engine thread for the loop. Text and alternatives live in
// the same allocation, after the struct.
struct tl_srv_msg {
    struct tl_srv_msg *next;      // queue link
    char *text_heap;              // owned: a DONE message's text (NULL when none)
    char error[256];              // a DONE message's error text
    struct tl_srv_choice *choice; // the request's user pointer; dereferenced by the loop only
    struct tl_event ev;           // text and top point into this allocation (or are NULL)
    int64_t t_us;                 // when the engine delivered it (tl_time_us)
    bool preallocated;            // the choice's DONE message: freed with the choice
};

// The handover from the engine thread to the loop: a mutex-protected list plus an eventfd
// that is written when the list goes from empty to non-empty (wake-ups coalesce).
// Producer: engine thread (tl__srv_on_event). Consumer: the loop.
struct tl_srv_queue {
    pthread_mutex_t mu;
    struct tl_srv_msg *head, *tail; // owned messages, oldest first
    int efd;                        // eventfd, owned
};

struct tl_srv_req;

// One engine request: a prompt's i-th choice.
struct tl_srv_choice {
    struct tl_srv_req *req; // the owning request
    int index;              // choice index in the response
    int prompt;             // which prompt of the request
    uint64_t engine_id;
    bool submitted;              // the engine accepted it: a DONE message will come
    bool done;                   // DONE processed
    bool started;                // first TOKEN (or DONE) seen: no longer counted as queued
    struct tl_srv_msg *done_msg; // owned, preallocated DONE message (see tl__srv_on_event)
    atomic_bool dropped;         // engine thread: a TOKEN message could not be allocated
    struct tl_sb text;           // non-streaming: the text so far
    struct tl_oai_logprobs lp;   // logprobs so far (non-streaming), lp.obj NULL when unused
    int64_t lp_offset;           // streaming: text offset for completion logprobs
    bool sent_role;              // chat streaming: the role chunk went out
    enum tl_finish_reason finish;
    char *error; // owned: the engine's message for TL_FINISH_ERROR
    int64_t n_prompt, n_cached, n_generated;
    int64_t t_last_token_us; // for inter-token latency
};

// One HTTP request to a generating endpoint.
struct tl_srv_req {
    struct tl_server *srv;
    struct tl_srv_req *prev, *next; // the server's list of live requests
    struct evhttp_request *http;    // libevent's; NULL once the reply is complete
    struct evhttp_connection *conn; // its connection while our close callback is set
    bool conn_closed; // libevent saw the connection close: http is orphaned, ours to end
    bool client_gone; // the client vanished (close callback or probe): choices cancelled
    bool streaming;   // SSE headers sent
    struct tl_oai_params params;
    int n_choices;
    struct tl_srv_choice *choices; // owned, n_choices
    int n_live;                    // choices submitted and not yet DONE
    char id[48];                   // "cmpl-..." / "chatcmpl-..."
    int64_t created;               // Unix seconds
    int64_t t_start_us;
    char **prompt_text; // owned (echo): each prompt's text, n_prompts entries
    size_t *prompt_text_len;
    int32_t **prompt_tokens; // owned, tokenized prompts (n_prompts)
    int64_t *n_prompt_tokens;
    int status; // HTTP status sent (for the access log)
};

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

    struct event_base *base;              // owned
    struct evhttp *http;                  // owned
    struct evhttp_bound_socket *listener; // owned by http; NULL once closed
    int port;
    struct event *ev_queue; // eventfd readable
    struct event *ev_tick;  // periodic: liveness probes, stop/drain checks
    struct event *ev_sigint, *ev_sigterm;
    int stop_efd; // eventfd written by tl_server_stop
    struct event *ev_stop;
    int64_t drain_deadline_us; // when draining: cancel what is left after this
    bool drain_cancelled;      // the deadline passed and everything was cancelled

    pthread_t engine_thread;
    bool engine_thread_started;
    struct tl_srv_queue queue;

    // Model facts (valid once READY):
    struct tl_model_info info;
    char *model_name;             // owned: the served id
    char *model_base;             // owned: the file's base name (also accepted)
    int32_t max_seq_len;          // prompt + generated tokens per request
    size_t max_token_bytes;       // longest text of one token (at least 64): a prompt longer
                                  // than max_seq_len * this cannot fit and is refused
                                  // before tokenizing (which would stall the loop)
    struct tl_chat_template chat; // the template chat requests are rendered with
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
};

// ---- http.c ----------------------------------------------------------------------------------

// Replies (each logs the access line and counts the status). body is stolen.
void tl__srv_send_json(struct tl_server *s, struct evhttp_request *r, int status, json_t *body,
                       int64_t t_start_us, int64_t n_in, int64_t n_out);
void tl__srv_send_error(struct tl_server *s, struct evhttp_request *r,
                        const struct tl_oai_error *err, int64_t t_start_us);
void tl__srv_send_text(struct tl_server *s, struct evhttp_request *r, int status,
                       const char *content_type, const char *text, size_t len);
// Logs "METHOD uri status in=N out=N latency" (call before the reply that may free r).
void tl__srv_access_log(struct evhttp_request *r, int status, int64_t t_start_us, int64_t n_in,
                        int64_t n_out);
// Writes an SSE event with the compact JSON of obj (stolen), or the raw text when obj is NULL.
void tl__srv_sse_send(struct tl_srv_req *q, json_t *obj, const char *raw);

// Engine-thread callback (user = struct tl_srv_choice *).
void tl__srv_on_event(void *user, const struct tl_event *ev);

// Tracks a request (for probes and shutdown) / stops tracking it.
void tl__srv_req_link(struct tl_server *s, struct tl_srv_req *q);
void tl__srv_req_unlink(struct tl_server *s, struct tl_srv_req *q);
// Sets / clears the close callback on the request's connection.
void tl__srv_watch_close(struct tl_srv_req *q);
void tl__srv_unwatch_close(struct tl_srv_req *q);

// ---- routes.c --------------------------------------------------------------------------------

// Dispatches one HTTP request (auth, routing, 404/405).
void tl__srv_handle(struct evhttp_request *r, void *arg);
// Handles one engine message on the loop.
void tl__srv_process_msg(struct tl_server *s, struct tl_srv_msg *m);
// The client of q vanished: cancel its choices.
void tl__srv_client_gone(struct tl_srv_req *q);
// Cancels every choice of q in the engine (shutdown deadline).
void tl__srv_req_cancel(struct tl_srv_req *q);
// Fills the model facts once the model is loaded; runs on the engine thread before the state
// turns READY (which publishes them to the loop). False on failure (error set).
bool tl__srv_model_ready(struct tl_server *s);
// Frees a request whose reply is complete and whose choices are all done.
void tl__srv_req_free(struct tl_srv_req *q);

#endif
