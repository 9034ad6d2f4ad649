/*
 * The AVX2 kernel variant (AVX2 + FMA + F16C; compiled with those -m flags and only called when
 * the CPU has them): its op table tl__ops_avx2, which kernels.c picks when the CPU has AVX2 but
 * not the AVX-512 set. The top of the AVX2 files: the table gathers the matmul kernels
 * (avx2_matmul.c), attention and the Q8_0 KV store (avx2_attn.c) and the row-wise ops
 * (avx2_rows.c), so that those files call only down (attention uses the rows' exp-sum), never
 * each other in a circle. Helpers they share inline are in avx2_impl.h.
 *
 * Thread model: a constant table; the ops are pure functions over caller-owned memory.
 */
#include "kernels/x86/avx2_impl.h"

const struct tl__kernel_ops tl__ops_avx2 = {
    .name = "avx2",
    .row_align = tl__avx2_row_align,
    .x_tile = TL_AVX2_GT,
    .quantize_x = tl__avx2_quantize_x,
    .matmul_rows = tl__avx2_matmul_rows,
    .rmsnorm = tl__avx2_rmsnorm,
    .swiglu = tl__avx2_swiglu,
    .add = tl__avx2_add,
    .softmax = tl__avx2_softmax,
    .exp_sub = tl__avx2_exp_sub,
    .attn_head = tl__avx2_attn_head,
    .f32_to_f16 = tl__avx2_f32_to_f16,
    .quantize_q8_0 = tl__avx2_quantize_q8_0,
};
