/*
 * What every front (the HTTP server in src/server, the gRPC server in src/grpc, the ones to
 * come) shares about the one engine they serve: how it is reached (struct tl_srv_backend), the
 * phase of its life, the facts a front needs to submit work (struct tl_front_share), and the
 * hooks through which a second front joins the owner's drain and /metrics
 * (struct tl_front_hooks). The fronts are siblings over the engine and meet here, below both:
 * neither includes the other.
 *
 * One front owns the engine, its thread and the shutdown (today the HTTP server, server.c). It
 * hands the others a struct tl_engine_share: a small table of its functions, which they call
 * instead of naming the owner. The owner also runs its engine thread's step loop with
 * tl_front_engine_loop (engine_share.c).
 *
 * Threads: the share's functions are thread-safe (see each); the hooks' contracts are stated
 * below.
 */
#ifndef TL_FRONT_ENGINE_SHARE_H
#define TL_FRONT_ENGINE_SHARE_H

#include <tokenloom.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// How a front reaches the model and the engine: the public API by default
// (tl_srv_backend_default); tests substitute a scripted fake to exercise a front alone.
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

// The engine's life as every front sees it.
enum tl_front_phase {
    TL_FRONT_LOADING = 0,  // the model is loading
    TL_FRONT_READY = 1,    // serving
    TL_FRONT_DRAINING = 2, // stopping: no new work, in-flight requests finish
    TL_FRONT_FAILED = 3,   // the model or engine failed to load
};

// What a front needs to submit work, valid (and constant) once the phase has been READY.
struct tl_front_share {
    const struct tl_srv_backend *be;
    tl_engine *engine;
    const tl_model *model;
    const char *model_name;  // the served id
    int max_queued_requests; // the bound each front applies to its own queued requests
    int32_t max_seq_len;
    size_t max_token_bytes; // a prompt longer than max_seq_len * this cannot fit
};

struct tl_sb;
struct tl_metrics;

// A second front on the owner's engine registers these before the owner runs; a drain then
// also waits for its requests, and the owner's /metrics appends its counters.
struct tl_front_hooks {
    int64_t (*in_flight)(void *arg); // its requests still running; thread-safe
    void (*cancel_all)(void *arg);   // the shutdown timeout passed; must not block
    // Appends Prometheus text, each series labelled with `labels` (`model_name="..."`, to put
    // last inside the braces); must not block.
    void (*metrics)(void *arg, const char *labels, struct tl_sb *out);
    // Adds its requests' latency histograms and counters into m (a copy of the owner's, same
    // buckets) so /metrics and /stats cover every front; must not block.
    void (*add_latency)(void *arg, struct tl_metrics *m);
    void *arg;
};

// The owner's side, as another front reaches it. Filled by the owner (tl_server_engine_share);
// valid until the owner is destroyed.
struct tl_engine_share {
    // The current phase. Thread-safe.
    enum tl_front_phase (*phase)(const void *owner);
    // The submission facts; false while the model is loading or failed. Thread-safe.
    bool (*share)(const void *owner, struct tl_front_share *out);
    // Registers a front's hooks (all zero: unregisters). Before the owner runs, or after it
    // returned.
    void (*attach)(void *owner, const struct tl_front_hooks *f);
    void *owner;
};

static inline enum tl_front_phase tl_engine_share_phase(const struct tl_engine_share *es)
{
    return es->phase(es->owner);
}

static inline bool tl_engine_share_get(const struct tl_engine_share *es, struct tl_front_share *out)
{
    return es->share(es->owner, out);
}

static inline void tl_engine_share_attach(const struct tl_engine_share *es,
                                          const struct tl_front_hooks *f)
{
    es->attach(es->owner, f);
}

// The engine thread's loop once the model is loaded: step; on an error log it (at most once a
// second) and wait 10 ms; when nothing is pending wait up to 200 ms for work; until *quit.
// Runs on the owner's engine thread.
void tl_front_engine_loop(const struct tl_srv_backend *be, tl_engine *engine,
                          const atomic_bool *quit);

#endif
