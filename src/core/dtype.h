/*
 * Tensor element types, numbered as in GGUF/ggml (the numbers are the file format). A type is
 * "known" when we know its block layout (so a file using it can be validated) and "supported"
 * when the kernels can compute with it; the kernels' dispatch table says which are supported.
 */
#ifndef TL_CORE_DTYPE_H
#define TL_CORE_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum tl_dtype {
    TL_DTYPE_F32 = 0,
    TL_DTYPE_F16 = 1,
    TL_DTYPE_Q4_0 = 2,
    TL_DTYPE_Q4_1 = 3,
    TL_DTYPE_Q5_0 = 6,
    TL_DTYPE_Q5_1 = 7,
    TL_DTYPE_Q8_0 = 8,
    TL_DTYPE_Q8_1 = 9,
    TL_DTYPE_Q2_K = 10,
    TL_DTYPE_Q3_K = 11,
    TL_DTYPE_Q4_K = 12,
    TL_DTYPE_Q5_K = 13,
    TL_DTYPE_Q6_K = 14,
    TL_DTYPE_Q8_K = 15,
    TL_DTYPE_IQ2_XXS = 16,
    TL_DTYPE_IQ2_XS = 17,
    TL_DTYPE_IQ3_XXS = 18,
    TL_DTYPE_IQ1_S = 19,
    TL_DTYPE_IQ4_NL = 20,
    TL_DTYPE_IQ3_S = 21,
    TL_DTYPE_IQ2_S = 22,
    TL_DTYPE_IQ4_XS = 23,
    TL_DTYPE_I8 = 24,
    TL_DTYPE_I16 = 25,
    TL_DTYPE_I32 = 26,
    TL_DTYPE_I64 = 27,
    TL_DTYPE_F64 = 28,
    TL_DTYPE_IQ1_M = 29,
    TL_DTYPE_BF16 = 30,
    TL_DTYPE_TQ1_0 = 34,
    TL_DTYPE_TQ2_0 = 35,
    TL_DTYPE_MXFP4 = 39,
    TL_DTYPE_COUNT = 40, // one past the largest number we know
};

struct tl_dtype_info {
    const char *name;   // "F32", "Q8_0", ...
    int64_t block_size; // elements per block (1 for plain types)
    size_t block_bytes; // bytes per block
};

// Layout of type number `type`, or NULL when the number is not a known type.
const struct tl_dtype_info *tl_dtype_info(uint32_t type);

// Name of a type ("?" when unknown).
const char *tl_dtype_name(uint32_t type);

// Parses a name such as "q8_0" or "F16" (case-insensitive); false when unknown.
bool tl_dtype_from_name(const char *name, enum tl_dtype *out);

// Bytes taken by n elements of `type` (one row). False when the type is unknown, n is not a
// multiple of the block size, or the size overflows.
bool tl_dtype_row_bytes(uint32_t type, int64_t n, size_t *out);

#endif
