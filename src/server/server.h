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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// How the server reaches the model and the engine: the public API by default
// (tl_srv_backend_default); tests substitute a scripted fake to exercise the HTTP layer alone.
// Every function has the contract of the public function of the same name.
struct tl_srv_backend {
    void (*model_info)(const tl_model *m, struct tl_model_info *out);
    tl_status (*tokenize)(const tl_model *m, const char *text, size_t len, bool add_special,
                          bool parse_special, int32_t **ids, int64_t *n_ids);
    char *(*detokenize)(const tl_model *m, const int32_t *ids, int64_t n, bool render_special);
    size_t (*token_text)(const tl_model *m, int32_t id, char *buf, size_t cap);
    tl_status (*submit)(tl_engine *e, const struct tl_request *r, uint64_t *id);
    tl_status (*cancel)(tl_engine *e, uint64_t id);
    tl_status (*step)(tl_engine *e, int64_t *n_pending);
    void (*wait)(tl_engine *e, int timeout_ms);
    void (*wake)(tl_engine *e);
    void (*get_stats)(tl_engine *e, struct tl_engine_stats *out);
};
extern const struct tl_srv_backend tl_srv_backend_default;

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
    bool handle_signals;            // stop on SIGINT/SIGTERM (the CLI sets it)
    // The machine's ceilings (kernels/ceilings.h) are measured once the model is loaded (or read
    // from the per-machine cache) for the utilization metrics; never with a test backend.
    bool no_ceilings;               // skip them: utilization and machine_* gauges are absent
    const char *ceilings_cache_dir; // NULL = $XDG_CACHE_HOME/tokenloom or ~/.cache/tokenloom

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

// ---- another front on the same engine (the gRPC server, src/grpc) ---------------------------
// The HTTP server owns the engine and the shutdown. A front registers before tl_server_run;
// a drain then also waits for its requests, and /metrics appends its counters.
struct tl_sb;
struct tl_metrics;
struct tl_server_front {
    int64_t (*in_flight)(void *arg); // its requests still running; thread-safe
    void (*cancel_all)(void *arg);   // the shutdown timeout passed; must not block
    // Appends Prometheus text, each series labelled with `labels` (`model_name="..."`, to put
    // last inside the braces); must not block.
    void (*metrics)(void *arg, const char *labels, struct tl_sb *out);
    // Adds its requests' latency histograms and counters into m (a copy of the server's, same
    // buckets) so /metrics and /stats cover every front; must not block.
    void (*add_latency)(void *arg, struct tl_metrics *m);
    void *arg;
};
void tl_server_set_front(struct tl_server *s, const struct tl_server_front *f);

enum tl_server_phase {
    TL_SERVER_LOADING = 0,
    TL_SERVER_READY = 1,
    TL_SERVER_DRAINING = 2,
    TL_SERVER_FAILED = 3,
};
enum tl_server_phase tl_server_phase(const struct tl_server *s); // thread-safe

// What a front needs to submit work, valid (and constant) once the phase has been READY.
struct tl_server_share {
    const struct tl_srv_backend *be;
    tl_engine *engine;
    const tl_model *model;
    const char *model_name;  // the served id
    int max_queued_requests; // the bound each front applies to its own queued requests
    int32_t max_seq_len;
    size_t max_token_bytes; // a prompt longer than max_seq_len * this cannot fit
};
// False while the model is loading or failed. Thread-safe.
bool tl_server_share(const struct tl_server *s, struct tl_server_share *out);

#endif
