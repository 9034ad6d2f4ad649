/*
 * The gRPC front of `tokenloom serve --grpc-port`: the Open Inference Protocol's
 * inference.GRPCInferenceService (proto/grpc_service.proto) with Triton's ModelStreamInfer,
 * served on its own thread over an engine another front owns, reached through its
 * struct tl_engine_share (front/engine_share.h; the HTTP server's: tl_server_engine_share).
 * See docs/server.md ("gRPC") and docs/internals/grpc.md.
 *
 * Usage: tl_grpc_start after the owner is created (binds now; answers UNAVAILABLE while the
 * model loads), then the owner runs (its drain waits for gRPC requests too), then
 * tl_grpc_stop before the owner is destroyed.
 */
#ifndef TL_GRPC_FRONT_H
#define TL_GRPC_FRONT_H

#include "front/engine_share.h"

#include <stddef.h>

#define TL_GRPC_DEFAULT_PORT 8500 // TensorFlow Serving's gRPC port

struct tl_grpc_config {
    const char *host;         // listen address
    int port;                 // 0 = any free port (see tl_grpc_port)
    size_t max_message_bytes; // larger requests get RESOURCE_EXHAUSTED from gRPC itself
    size_t max_unsent_bytes;  // a call whose client leaves more than this unread is cancelled
                              // with RESOURCE_EXHAUSTED (0 = no bound)
    const char *api_key;      // when set, every RPC but ServerLive needs the metadata
                              // 'authorization: Bearer <key>'
};

struct tl_grpc_front;

// Binds host:port, registers with the engine's owner (its hooks, through share, which is
// copied) and starts the gRPC thread. NULL on failure (message in tl_last_error()).
struct tl_grpc_front *tl_grpc_start(const struct tl_engine_share *share,
                                    const struct tl_grpc_config *c);
int tl_grpc_port(const struct tl_grpc_front *g);
// After the owner's run returned (the engine thread is joined): ends the calls still open,
// stops the thread and frees everything. NULL is a no-op.
void tl_grpc_stop(struct tl_grpc_front *g);

#endif
