/*
 * The avx2 matmul of the extra weight types (see kernels/quants.h). Placeholder: the scalar
 * reference until the SIMD kernels land.
 */
#include "kernels/quants.h"

static int row_align(enum tl_dtype type)
{
    (void)type;
    return 1;
}

const struct tl__qx_ops tl__qx_ops_avx2 = {
    .row_align = row_align,
    .quantize = tl__qa_quantize_ref,
    .matmul_rows = tl__qx_ref_matmul_rows,
};
