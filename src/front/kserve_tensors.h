/*
 * The Open Inference Protocol's (KServe v2) LLM tensors, shared by both fronts that speak it:
 * the inputs the model takes, as Triton's vLLM and TensorRT-LLM backends name them (the HTTP
 * front's GET /v2/models/NAME, server/kserve.c; the gRPC front's ModelMetadata and
 * ModelInferRequest, grpc/grpc_infer.c), the protocol's datatypes, and the decoding of a
 * tensor's raw form (little-endian elements; BYTES as a 4-byte length before each element)
 * into widened elements, checked against fixed bounds.
 *
 * Pure functions and constant tables; no shared state, any thread.
 */
#ifndef TL_FRONT_KSERVE_TENSORS_H
#define TL_FRONT_KSERVE_TENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// The model's input tensors (text_input first, the only required one).
struct tl_kserve_tensor_desc {
    const char *name;
    const char *datatype;
    bool optional;
};
extern const struct tl_kserve_tensor_desc tl_kserve_inputs[];
extern const int tl_kserve_n_inputs;
// The index of the input called name in tl_kserve_inputs, or -1.
int tl_kserve_input_index(const char *name);

#define TL_KSERVE_MAX_ELEMENTS 64 // no input of ours holds more (stop holds at most 4)

enum tl_kserve_kind { TL_KSERVE_BYTES, TL_KSERVE_BOOL, TL_KSERVE_INT, TL_KSERVE_FLOAT };

// One input's elements, whatever the datatype, widened.
struct tl_kserve_elems {
    int64_t n;
    enum tl_kserve_kind kind;
    const uint8_t *bytes[TL_KSERVE_MAX_ELEMENTS]; // TL_KSERVE_BYTES
    size_t len[TL_KSERVE_MAX_ELEMENTS];
    bool b[TL_KSERVE_MAX_ELEMENTS]; // TL_KSERVE_BOOL
    int64_t i[TL_KSERVE_MAX_ELEMENTS];
    bool is_unsigned; // TL_KSERVE_INT: i holds uint64 bits
    double f[TL_KSERVE_MAX_ELEMENTS];
};

struct tl_kserve_dtype {
    const char *name;
    enum tl_kserve_kind kind;
    int size; // bytes per element in raw form (BYTES: 0)
    bool is_unsigned;
};
// The datatype called name ("INT32", "BYTES", ...), or NULL.
const struct tl_kserve_dtype *tl_kserve_dtype_find(const char *name);

// Reads the raw form of one input (p, n bytes; little-endian; BYTES as 4-byte length + bytes)
// into e (e->n set; kind and is_unsigned are the caller's). False with a one-line message
// naming the input in err on a malformed or oversized form.
bool tl_kserve_read_raw(const char *name, const struct tl_kserve_dtype *dt, const uint8_t *p,
                        size_t n, struct tl_kserve_elems *e, char *err, size_t cap);

// Checks that e holds exactly one element / elements of kind k (expected names the datatype
// wanted, for the message). False with the message in err.
bool tl_kserve_one(const char *name, const struct tl_kserve_elems *e, char *err, size_t cap);
bool tl_kserve_want_kind(const char *name, const char *datatype, const struct tl_kserve_elems *e,
                         enum tl_kserve_kind k, const char *expected, char *err, size_t cap);

#endif
