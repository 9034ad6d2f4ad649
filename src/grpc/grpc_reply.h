/*
 * Encoding the gRPC front's responses (proto/grpc_service.proto, protobuf-c) into malloc'd
 * wire bytes: the inference responses with text_output and their parameters, and the model
 * metadata.
 *
 * Pure functions; any thread. Each returns NULL when memory runs out.
 */
#ifndef TL_GRPC_REPLY_H
#define TL_GRPC_REPLY_H

#include "grpc_service.pb-c.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// Packs any generated message.
uint8_t *tl_grpc_pack(const ProtobufCMessage *m, size_t *len);

// One inference response. A final one carries finish_reason and the token counts
// (prompt_tokens, completion_tokens, cached_tokens as int64 parameters); a stream response also
// carries triton_final_response (bool), true on the last one.
struct tl_grpc_result {
    const char *model_name;
    const char *id; // the request's id, echoed ("" when none)
    const char *text;
    size_t text_len;
    bool final;
    const char *finish_reason; // final only
    int64_t n_prompt, n_generated, n_cached;
};

// ModelInferResponse (unary) or, with stream, ModelStreamInferResponse wrapping it.
uint8_t *tl_grpc_pack_result(const struct tl_grpc_result *r, bool stream, size_t *len);
// ModelStreamInferResponse carrying only an error for one request of the stream.
uint8_t *tl_grpc_pack_stream_error(const char *message, size_t *len);
// ModelMetadataResponse for the served model (the tensors of grpc_infer.h).
uint8_t *tl_grpc_pack_model_metadata(const char *model_name, size_t *len);

#endif
