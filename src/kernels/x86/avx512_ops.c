/*
 * The AVX-512 kernel variant (F, BW, VL, DQ, VNNI; compiled with those -m flags and only called
 * when the CPU has them): its op table tl__ops_avx512, which kernels.c picks when the CPU has
 * them all. The top of the AVX-512 files: the table gathers the matmul kernels
 * (avx512_matmul.c), attention and the Q8_0 KV store (avx512_attn.c) and the row-wise ops
 * (avx512_rows.c), so that those files call only down (attention uses the rows' exp-sum and
 * maximum), never each other in a circle. Helpers they share inline are in avx512_impl.h.
 *
 * Thread model: a constant table; the ops are pure functions over caller-owned memory.
 */
#include "kernels/x86/avx512_impl.h"

const struct tl__kernel_ops tl__ops_avx512 = {
    .name = "avx512",
    .row_align = tl__avx512_row_align,
    .x_tile = TL_AVX512_GT,
    .quantize_x = tl__avx512_quantize_x,
    .matmul_rows = tl__avx512_matmul_rows,
    .rmsnorm = tl__avx512_rmsnorm,
    .swiglu = tl__avx512_swiglu,
    .add = tl__avx512_add,
    .softmax = tl__avx512_softmax,
    .exp_sub = tl__avx512_exp_sub,
    .attn_head = tl__avx512_attn_head,
    .f32_to_f16 = tl__avx512_f32_to_f16,
    .attn_kv_pairs = tl__avx512_attn_kv_pairs,
    .attn_kv = tl__avx512_attn_kv,
    .quantize_q8_0 = tl__avx512_quantize_q8_0,
};
