/*
 * Encoding the gRPC front's responses (see grpc_reply.h). text_output goes out as Triton does:
 * the tensor's description in `outputs` and its bytes in raw_output_contents (a 4-byte
 * little-endian length, then the text), which tritonclient and KServe's client both read.
 *
 * Ownership: every message is built on the stack over borrowed strings, packed, and only the
 * packed bytes (malloc'd) leave. Threads: none; pure.
 */
#include "grpc/grpc_reply.h"

#include "grpc/grpc_infer.h"

#include <stdlib.h>
#include <string.h>

uint8_t *tl_grpc_pack(const ProtobufCMessage *m, size_t *len)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) return NULL;
    *len = protobuf_c_message_pack(m, buf);
    return buf;
}

#define N_PARAMS 5

uint8_t *tl_grpc_pack_result(const struct tl_grpc_result *r, bool stream, size_t *len)
{
    Inference__InferParameter pv[N_PARAMS];
    Inference__ModelInferResponse__ParametersEntry pe[N_PARAMS];
    Inference__ModelInferResponse__ParametersEntry *pp[N_PARAMS];
    int np = 0;
    const char *int_keys[3] = {"prompt_tokens", "completion_tokens", "cached_tokens"};
    int64_t int_vals[3] = {r->n_prompt, r->n_generated, r->n_cached};
    for (int i = 0; i < N_PARAMS; i++) {
        inference__infer_parameter__init(&pv[i]);
        inference__model_infer_response__parameters_entry__init(&pe[i]);
        pe[i].value = &pv[i];
        pp[i] = &pe[i];
    }
    if (stream) {
        pe[np].key = "triton_final_response";
        pv[np].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
        pv[np++].bool_param = r->final;
    }
    if (r->final) {
        pe[np].key = "finish_reason";
        pv[np].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
        pv[np++].string_param = (char *)(r->finish_reason ? r->finish_reason : "");
        for (int i = 0; i < 3 && np < N_PARAMS; i++) {
            pe[np].key = (char *)int_keys[i];
            pv[np].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
            pv[np++].int64_param = int_vals[i];
        }
    }
    // text_output: shape [1], raw BYTES element.
    uint8_t *raw = malloc(4 + r->text_len);
    if (!raw) return NULL;
    uint32_t n = (uint32_t)r->text_len;
    for (int k = 0; k < 4; k++)
        raw[k] = (uint8_t)(n >> (8 * k));
    if (r->text_len) memcpy(raw + 4, r->text, r->text_len);
    int64_t shape[1] = {1};
    Inference__ModelInferResponse__InferOutputTensor out;
    inference__model_infer_response__infer_output_tensor__init(&out);
    out.name = "text_output";
    out.datatype = "BYTES";
    out.n_shape = 1;
    out.shape = shape;
    Inference__ModelInferResponse__InferOutputTensor *outs[1] = {&out};
    ProtobufCBinaryData rawd = {4 + r->text_len, raw};

    Inference__ModelInferResponse resp;
    inference__model_infer_response__init(&resp);
    resp.model_name = (char *)r->model_name;
    resp.id = (char *)(r->id ? r->id : "");
    resp.n_parameters = (size_t)np;
    resp.parameters = pp;
    resp.n_outputs = 1;
    resp.outputs = outs;
    resp.n_raw_output_contents = 1;
    resp.raw_output_contents = &rawd;
    uint8_t *buf;
    if (stream) {
        Inference__ModelStreamInferResponse sr;
        inference__model_stream_infer_response__init(&sr);
        sr.infer_response = &resp;
        buf = tl_grpc_pack(&sr.base, len);
    } else {
        buf = tl_grpc_pack(&resp.base, len);
    }
    free(raw);
    return buf;
}

uint8_t *tl_grpc_pack_stream_error(const char *message, size_t *len)
{
    Inference__ModelStreamInferResponse sr;
    inference__model_stream_infer_response__init(&sr);
    sr.error_message = (char *)message;
    return tl_grpc_pack(&sr.base, len);
}

uint8_t *tl_grpc_pack_model_metadata(const char *model_name, size_t *len)
{
    enum { N_IN = 10 };
    Inference__ModelMetadataResponse__TensorMetadata tm[N_IN + 1];
    Inference__ModelMetadataResponse__TensorMetadata *ins[N_IN], *outs[1];
    int64_t shape[1] = {1};
    int64_t stop_shape[1] = {-1};
    int n_in = tl_kserve_n_inputs < N_IN ? tl_kserve_n_inputs : N_IN;
    for (int i = 0; i <= n_in; i++) {
        inference__model_metadata_response__tensor_metadata__init(&tm[i]);
        tm[i].n_shape = 1;
        tm[i].shape = shape;
    }
    for (int i = 0; i < n_in; i++) {
        tm[i].name = (char *)tl_kserve_inputs[i].name;
        tm[i].datatype = (char *)tl_kserve_inputs[i].datatype;
        if (!strcmp(tl_kserve_inputs[i].name, "stop")) tm[i].shape = stop_shape;
        ins[i] = &tm[i];
    }
    tm[n_in].name = "text_output";
    tm[n_in].datatype = "BYTES";
    outs[0] = &tm[n_in];
    char *versions[1] = {"1"};
    Inference__ModelMetadataResponse m;
    inference__model_metadata_response__init(&m);
    m.name = (char *)model_name;
    m.n_versions = 1;
    m.versions = versions;
    m.platform = "tokenloom";
    m.n_inputs = (size_t)n_in;
    m.inputs = ins;
    m.n_outputs = 1;
    m.outputs = outs;
    return tl_grpc_pack(&m.base, len);
}
