/*
 * The Open Inference Protocol's LLM tensors, as Triton's vLLM and TensorRT-LLM backends name
 * them, read from a ModelInferRequest (generated from proto/grpc_service.proto) into one
 * generation request. The tensors' table, datatypes and raw decoding are shared with the HTTP
 * front's KServe routes (front/kserve_tensors.h).
 *
 * Inputs: text_input (BYTES, required), stream (BOOL), max_tokens (INT32), temperature and
 * top_p (FP32), top_k (INT32), seed (UINT64), stop (BYTES, 1..4 strings), ignore_eos (BOOL),
 * sampling_parameters (BYTES: a JSON object with the same keys). Integer and float inputs also
 * accept the wider type of their kind (INT64, FP64, ...). Values come from `contents` or from
 * `raw_input_contents`. Output: text_output (BYTES).
 *
 * Pure functions over caller-owned messages; no shared state, any thread.
 */
#ifndef TL_GRPC_INFER_H
#define TL_GRPC_INFER_H

#include <tokenloom.h>

#include "front/kserve_tensors.h"
#include "grpc_service.pb-c.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TL_GRPC_MAX_STOP 4       // stop strings, as the OpenAI routes
#define TL_GRPC_MAX_STOP_LEN 256 // bytes per stop string

struct tl_grpc_gen {
    char *prompt; // owned, NUL-terminated (it may contain NULs before prompt_len)
    size_t prompt_len;
    bool stream;        // the 'stream' input (default false)
    int32_t max_tokens; // default 16
    struct tl_sampling sampling;
    bool seed_set;
    char *stop[TL_GRPC_MAX_STOP]; // owned
    int32_t n_stop;
    bool ignore_eos;
};

void tl_grpc_gen_free(struct tl_grpc_gen *g);

// Reads the generation inputs of r. False on any fault, with a one-line message in err
// ("input 'max_tokens' has datatype FP32; expected INT32"), *out then left empty.
bool tl_grpc_gen_parse(const Inference__ModelInferRequest *r, struct tl_grpc_gen *out, char *err,
                       size_t cap);

#endif
