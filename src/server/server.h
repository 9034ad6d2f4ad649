/*
 * The tokenloom HTTP server: an OpenAI-compatible API (completions, chat completions, models),
 * tokenize/detokenize, health and Prometheus metrics, served by one libevent event loop while
 * one engine thread runs the continuous-batching engine.
 *
 * Usage: tl_server_create (binds the socket, starts the engine thread, which loads the model),
 * tl_server_run (serves until tl_server_stop or SIGINT/SIGTERM, then drains), tl_server_destroy.
 */
#ifndef TL_SERVER_H
#define TL_SERVER_H

#include <tokenloom.h>

#include "front/engine_share.h"
#include "front/machine.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tl_server_config {
    const char *host;               // listen address (default "127.0.0.1")
    int port;                       // 0 = any free port (see tl_server_port)
    const char *api_key;            // when set, /v1/* and /tokenize, /detokenize need
                                    // "Authorization: Bearer <key>" (or "x-api-key: <key>")
    size_t max_body_bytes;          // larger bodies get 413 (default 8 MiB)
    int max_queued_requests;        // engine requests submitted but not started; past it 429
                                    // (default 256)
    double shutdown_timeout_s;      // on stop, how long in-flight requests may finish (default 30)
    int http_timeout_s;             // per-connection read/write idle timeout (default 60)
    size_t max_unsent_bytes;        // a stream whose client lets more than this pile up unread
                                    // is cancelled (default 8 MiB): memory per connection stays
                                    // bounded even for a client that reads a byte a minute
    const char *served_model_name;  // the model id clients use (default: the file's stem)
    const char *chat_template;      // a built-in template overriding the GGUF's ("chatml", ...)
    const char *chat_template_file; // a Jinja file overriding both, or NULL
    const char *tool_call_syntax;   // a tool-call syntax name overriding detection, or NULL
    // The store of /v1/responses (previous_response_id, GET /v1/responses/{id}): at most this
    // many responses (0: nothing is stored), this many bytes of their JSON, each kept this
    // long (defaults 1000, 64 MiB, 3600 s).
    int responses_store_max;
    size_t responses_store_bytes;
    double responses_store_ttl_s;
    bool handle_signals; // stop on SIGINT/SIGTERM (the CLI sets it)
    // The machine (kernel ISA, measured ceilings) as the caller finds it (cmd_serve.c), for
    // /metrics and /stats; zero: ISA "unknown", no ceilings (utilization and machine_* gauges
    // absent).
    struct tl_machine machine;
    // When set (and no test backend), called on the engine thread once the model is loaded,
    // before the server turns READY (a measurement must not share the machine with the load):
    // fills the ceilings for n_threads threads and returns true, or false when there are none.
    bool (*find_ceilings)(int32_t n_threads, struct tl_machine_ceilings *out);

    // Loading (on the engine thread, while /health says 503):
    const char *model_path;
    struct tl_model_params model_params;
    struct tl_engine_config engine;

    // Tests: with a backend, model and engine are used as given (nothing is loaded or freed).
    const struct tl_srv_backend *backend;
    tl_model *model;
    tl_engine *engine_handle;
};
void tl_server_config_default(struct tl_server_config *c);

struct tl_server;

// Binds the listening socket and starts the engine thread (which loads the model). NULL on
// failure (message in tl_last_error()). c is copied; its strings must outlive the server.
struct tl_server *tl_server_create(const struct tl_server_config *c);
// The port actually bound.
int tl_server_port(const struct tl_server *s);
// Runs the event loop until stopped and drained. Returns 0 after a clean shutdown, 1 when the
// model failed to load. Call once, from one thread.
int tl_server_run(struct tl_server *s);
// Begins a graceful shutdown: stop accepting, let in-flight requests finish within the
// shutdown timeout, then return from tl_server_run. Thread-safe and async-signal-safe.
void tl_server_stop(struct tl_server *s);
// Frees everything (after tl_server_run returned, or instead of running). NULL is a no-op.
void tl_server_destroy(struct tl_server *s);

// ---- other fronts on the same engine (the gRPC server, src/grpc) ----------------------------
// The HTTP server owns the engine and the shutdown. Another front reaches it through this
// share (front/engine_share.h) and registers its hooks before tl_server_run; a drain then also
// waits for its requests, and /metrics appends its counters. Valid until tl_server_destroy.
void tl_server_engine_share(struct tl_server *s, struct tl_engine_share *out);

#endif
