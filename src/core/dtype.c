/*
 * The table of known element types: block size and bytes per block, as defined by the GGUF
 * format (ggml's type traits). Gaps in the numbering are types that ggml removed.
 */
#include "core/dtype.h"

#include "core/alloc.h"

#include <strings.h>

static const struct tl_dtype_info infos[TL_DTYPE_COUNT] = {
    [TL_DTYPE_F32] = {"F32", 1, 4},
    [TL_DTYPE_F16] = {"F16", 1, 2},
    [TL_DTYPE_Q4_0] = {"Q4_0", 32, 18},
    [TL_DTYPE_Q4_1] = {"Q4_1", 32, 20},
    [TL_DTYPE_Q5_0] = {"Q5_0", 32, 22},
    [TL_DTYPE_Q5_1] = {"Q5_1", 32, 24},
    [TL_DTYPE_Q8_0] = {"Q8_0", 32, 34},
    [TL_DTYPE_Q8_1] = {"Q8_1", 32, 36},
    [TL_DTYPE_Q2_K] = {"Q2_K", 256, 84},
    [TL_DTYPE_Q3_K] = {"Q3_K", 256, 110},
    [TL_DTYPE_Q4_K] = {"Q4_K", 256, 144},
    [TL_DTYPE_Q5_K] = {"Q5_K", 256, 176},
    [TL_DTYPE_Q6_K] = {"Q6_K", 256, 210},
    [TL_DTYPE_Q8_K] = {"Q8_K", 256, 292},
    [TL_DTYPE_IQ2_XXS] = {"IQ2_XXS", 256, 66},
    [TL_DTYPE_IQ2_XS] = {"IQ2_XS", 256, 74},
    [TL_DTYPE_IQ3_XXS] = {"IQ3_XXS", 256, 98},
    [TL_DTYPE_IQ1_S] = {"IQ1_S", 256, 50},
    [TL_DTYPE_IQ4_NL] = {"IQ4_NL", 32, 18},
    [TL_DTYPE_IQ3_S] = {"IQ3_S", 256, 110},
    [TL_DTYPE_IQ2_S] = {"IQ2_S", 256, 82},
    [TL_DTYPE_IQ4_XS] = {"IQ4_XS", 256, 136},
    [TL_DTYPE_I8] = {"I8", 1, 1},
    [TL_DTYPE_I16] = {"I16", 1, 2},
    [TL_DTYPE_I32] = {"I32", 1, 4},
    [TL_DTYPE_I64] = {"I64", 1, 8},
    [TL_DTYPE_F64] = {"F64", 1, 8},
    [TL_DTYPE_IQ1_M] = {"IQ1_M", 256, 56},
    [TL_DTYPE_BF16] = {"BF16", 1, 2},
    [TL_DTYPE_TQ1_0] = {"TQ1_0", 256, 54},
    [TL_DTYPE_TQ2_0] = {"TQ2_0", 256, 66},
    [TL_DTYPE_MXFP4] = {"MXFP4", 32, 17},
};

const struct tl_dtype_info *tl_dtype_info(uint32_t type)
{
    if (type >= TL_DTYPE_COUNT || !infos[type].name) return NULL;
    return &infos[type];
}

const char *tl_dtype_name(uint32_t type)
{
    const struct tl_dtype_info *in = tl_dtype_info(type);
    return in ? in->name : "?";
}

bool tl_dtype_from_name(const char *name, enum tl_dtype *out)
{
    for (uint32_t t = 0; t < TL_DTYPE_COUNT; t++) {
        if (infos[t].name && !strcasecmp(infos[t].name, name)) {
            *out = (enum tl_dtype)t;
            return true;
        }
    }
    return false;
}

bool tl_dtype_row_bytes(uint32_t type, int64_t n, size_t *out)
{
    const struct tl_dtype_info *in = tl_dtype_info(type);
    if (!in || n < 0 || n % in->block_size) return false;
    return tl_mul_size((size_t)(n / in->block_size), in->block_bytes, out);
}
