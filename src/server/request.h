/*
 * A generating request (/v1/completions, /v1/chat/completions) from its parsed parameters to
 * its freeing: prompts tokenized (chat: rendered first), lengths and the queue bound checked,
 * one engine request per choice submitted, engine events turned into SSE chunks or into the
 * final JSON reply, disconnects and shutdown cancellations.
 *
 * Threads: tl_srv_on_event runs on the engine thread and only copies the event into a message
 * for the loop; everything else runs on the event-loop thread.
 */
#ifndef TL_SERVER_REQUEST_H
#define TL_SERVER_REQUEST_H

#include "server/chat_reply.h"
#include "server/openai.h"
#include "server/prompt.h"
#include "server/state.h"

#include "core/strbuf.h"
#include <event2/http.h>
#include <stdatomic.h>

struct tl_resp_stream;

// One engine request: a prompt's i-th choice.
struct tl_srv_choice {
    struct tl_srv_req *req; // the owning request
    int index;              // choice index in the response
    int prompt;             // which prompt of the request
    uint64_t engine_id;
    bool submitted;                  // the engine accepted it: a DONE message will come
    bool done;                       // DONE processed
    bool started;                    // first TOKEN (or DONE) seen: no longer counted as queued
    struct tl_srv_msg *done_msg;     // owned, preallocated DONE message (see tl_srv_on_event)
    atomic_bool dropped;             // engine thread: a TOKEN message could not be allocated
    bool lost;                       // loop: memory ran out building this choice's output
    struct tl_sb text;               // non-streaming: the text so far
    struct tl_srv_chat_reply *reply; // owned: chat reply parser (tools, reasoning), or NULL
    struct tl_srv_anth *anth;        // owned: Messages API state (anthropic_reply.c), or NULL
    struct tl_oai_logprobs lp;       // logprobs so far (non-streaming), lp.obj NULL when unused
    int64_t lp_offset;               // streaming: text offset for completion logprobs
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
    struct tl_http_conn *watch;     // its connection while watched (NULL once closed)
    bool conn_closed; // libevent saw the connection close: http is orphaned, ours to end
    bool client_gone; // the client vanished (close callback or probe): choices cancelled
    bool streaming;   // SSE headers sent
    struct tl_oai_params params;
    struct tl_resp_stream *resp_stream; // owned: a /v1/responses stream's events (responses.h)
    struct tl_srv_prompts prompts;      // owned: tokenized prompts and echo texts
    int n_choices;
    struct tl_srv_choice *choices; // owned, n_choices
    int n_live;                    // choices submitted and not yet DONE
    char id[160];                  // "cmpl-<request id>" / "chatcmpl-<request id>"
    int64_t created;               // Unix seconds
    int64_t t_start_us;
    int64_t t_first_token_us; // the first generated token of any choice (0 = none yet)
    int64_t queue_us;         // the shortest engine queueing time of its choices (-1 = none)
};

// Runs a parsed request: validates it against the model, submits it, and answers (at once
// with an error, or later from engine events). p is taken (freed in every case).
void tl_srv_req_start(struct tl_server *s, struct evhttp_request *r, int64_t t0,
                      struct tl_oai_params *p);

// The engine's event callback (engine thread; user = struct tl_srv_choice *).
void tl_srv_on_event(void *user, const struct tl_event *ev);
// Handles one message taken from the queue (frees it, or keeps a choice's DONE message).
void tl_srv_req_process_msg(struct tl_server *s, struct tl_srv_msg *m);

// Probes every watched request's connection; a vanished client cancels its choices.
void tl_srv_reqs_probe(struct tl_server *s);
// Cancels every live choice of every request (shutdown deadline).
void tl_srv_reqs_cancel_all(struct tl_server *s);
// Ends every request still alive after the engine stopped (forced shutdown): replies are
// closed as they stand and the requests freed.
void tl_srv_reqs_abandon_all(struct tl_server *s);
int tl_srv_reqs_count(const struct tl_server *s);

// Answers err (an OpenAI error object).
void tl_srv_send_error(struct tl_server *s, struct evhttp_request *r,
                       const struct tl_oai_error *err, int64_t t0);

#endif
