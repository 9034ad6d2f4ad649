/*
 * Internals shared by the gRPC front's files: grpc_server.c (thread, completion queue, call
 * plumbing, the small RPCs, metrics), grpc_generate.c (ModelInfer / ModelStreamInfer: engine
 * submission and the engine -> gRPC thread hand-over) and grpc_names.c (method and status
 * names).
 *
 * Threads: the gRPC thread owns every struct here, except the message queue (engine thread
 * produces, gRPC thread consumes) and the fields marked atomic.
 */
#ifndef TL_GRPC_IMPL_H
#define TL_GRPC_IMPL_H

#include "grpc/grpc_front.h"
#include "grpc/grpc_infer.h"
#include "core/strbuf.h"
#include "front/metrics.h"

#include <grpc/grpc.h>
#include <pthread.h>
#include <stdatomic.h>

enum tl_grpc_method {
    TL_GM_LIVE,
    TL_GM_READY,
    TL_GM_MODEL_READY,
    TL_GM_SERVER_META,
    TL_GM_MODEL_META,
    TL_GM_INFER,
    TL_GM_STREAM,
    TL_GM_HEALTH, // /grpc.health.v1.Health/Check
    TL_GM_OTHER,
    TL_GM_COUNT
};
#define TL_GRPC_N_CODES 17 // grpc_status_code 0..16

struct tl_grpc_call;

enum tl_grpc_op { TL_GOP_NEW, TL_GOP_RECV, TL_GOP_SEND, TL_GOP_CLOSE, TL_GOP_SHUTDOWN };

// A completion-queue tag: which call, which operation.
struct tl_grpc_tag {
    struct tl_grpc_call *call;
    enum tl_grpc_op op;
};

// A packed response waiting for its turn (one send at a time per call).
struct tl_grpc_out {
    struct tl_grpc_out *next;
    uint8_t *data; // owned
    size_t len;
};

// One engine event for the gRPC thread; the text lives after the struct.
struct tl_grpc_msg {
    struct tl_grpc_msg *next;
    struct tl_grpc_gen_req *req;
    struct tl_event ev; // text points into this allocation or to text_heap; no top / error
    int64_t t_us;       // TOKEN: when the engine delivered it (tl_time_us), for the ITL
    char *text_heap;    // owned: a DONE message's text
    char error[200];
    bool preallocated; // the request's DONE message, freed with the request
};

// One generation (one ModelInferRequest) submitted to the engine.
struct tl_grpc_gen_req {
    struct tl_grpc_call *call;
    struct tl_grpc_gen_req *next; // the call's list
    uint64_t engine_id;
    bool started;            // first event seen: no longer counted as queued
    bool stream;             // deltas as they come (else one response with the whole text)
    int64_t t_last_token_us; // the previous TOKEN's delivery time (0 = none yet)
    struct tl_grpc_msg *done_msg;
    atomic_bool dropped; // a TOKEN message could not be allocated: ends as an error
    struct tl_sb text;   // the text so far (not streaming)
    char id[128];        // the request's id, echoed
};

struct tl_grpc_call {
    struct tl_grpc_front *g;
    struct tl_grpc_call *prev, *next; // the front's live calls
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array md;
    enum tl_grpc_method method;
    struct tl_grpc_tag t_new, t_recv, t_send, t_close;
    int pending;                // operations started and not completed
    grpc_byte_buffer *recv_buf; // the receive operation's message
    int cancelled;              // RECV_CLOSE_ON_SERVER: the call failed (client, deadline)
    bool closed;                // the close operation completed: nothing more goes out
    bool half_closed;           // the client sent its last message
    bool sending;
    bool sent_md;
    grpc_byte_buffer *send_buf;
    struct tl_grpc_out *out_head, *out_tail;
    size_t out_bytes; // queued, not yet handed to gRPC
    bool want_status, status_sent;
    grpc_status_code status;
    char status_msg[256];
    grpc_slice status_slice; // ours until the call is freed (the core keeps its own ref)
    bool has_status_slice;
    struct tl_grpc_gen_req *gens; // live generations
    int n_live;
};

struct tl_grpc_front {
    struct tl_engine_share share; // the engine's owner (the HTTP server)
    struct tl_grpc_config cfg;
    grpc_server *server;
    grpc_completion_queue *cq;
    int port;
    pthread_t thread;
    bool thread_started;
    atomic_bool quit;       // tl_grpc_stop
    atomic_bool cancel_all; // the server's shutdown timeout passed
    atomic_llong busy;      // calls with work in progress (drain waits for 0)
    atomic_llong counts[TL_GM_COUNT][TL_GRPC_N_CODES]; // finished calls by method and status
    atomic_llong stream_requests;                      // generations started on ModelStreamInfer

    pthread_mutex_t lat_mu; // guards lat: the gRPC thread observes, /metrics (loop thread) adds
    struct tl_metrics lat;  // TTFT, ITL, e2e, queue time of gRPC generations (same buckets)

    pthread_mutex_t mu; // the engine -> gRPC thread queue
    struct tl_grpc_msg *q_head, *q_tail;

    // gRPC thread only:
    struct tl_grpc_call *calls;
    int n_waiting;      // request_call operations outstanding
    int64_t n_live;     // generations submitted and not done
    int64_t n_queued;   // of which not started
    bool cancelled_all; // cancel_all handled
    bool shutdown_done;
    uint64_t rng;
};

// ---- grpc_names.c ----------------------------------------------------------------------------

// A method's name ("ModelInfer"; "other" for TL_GM_OTHER), and a status code's ("NOT_FOUND").
const char *tl__grpc_method_name(enum tl_grpc_method m);
const char *tl__grpc_code_name(grpc_status_code code);
// The method a call's path names (TL_GM_OTHER for any other path).
enum tl_grpc_method tl__grpc_method_of(const grpc_slice *path);

// ---- grpc_server.c ---------------------------------------------------------------------------

// Queues a packed response (stolen) on the call and starts sending.
void tl__grpc_send(struct tl_grpc_call *c, uint8_t *data, size_t len);
// Ends the call with this status after what is queued (counted in the metrics).
void tl__grpc_finish(struct tl_grpc_call *c, grpc_status_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
// Frees the call once nothing refers to it any more.
void tl__grpc_maybe_free(struct tl_grpc_call *c);

// ---- grpc_generate.c -------------------------------------------------------------------------

// Handles one ModelInferRequest of a ModelInfer or ModelStreamInfer call.
void tl__grpc_infer(struct tl_grpc_call *c, const uint8_t *data, size_t len);
// Processes the engine's messages (gRPC thread).
void tl__grpc_drain_queue(struct tl_grpc_front *g);
// Cancels the call's generations in the engine (client gone, shutdown).
void tl__grpc_cancel_gens(struct tl_grpc_call *c);
// After the engine thread is gone: frees the generations still live.
void tl__grpc_abandon_gens(struct tl_grpc_call *c);
// A stream whose client finished sending and whose generations are done ends OK.
void tl__grpc_maybe_end_stream(struct tl_grpc_call *c);

#endif
