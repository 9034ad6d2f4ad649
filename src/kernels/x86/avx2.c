/*
 * The avx2 kernel variant (placeholder: scalar inner loops until the SIMD ones land).
 */
#include "kernels/kernels_impl.h"

static int row_align(enum tl_dtype type)
{
    (void)type;
    return 1;
}

const struct tl__kernel_ops tl__ops_avx2 = {
    .name = "avx2",
    .row_align = row_align,
    .quantize_x = tl__ref_quantize_x,
    .matmul_rows = tl__ref_matmul_rows,
    .rmsnorm = tl__ref_rmsnorm,
    .swiglu = tl__ref_swiglu,
    .add = tl__ref_add,
    .softmax = tl__ref_softmax,
    .attn_head = tl__ref_attn_head,
};
