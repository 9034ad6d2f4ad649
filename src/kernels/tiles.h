/*
 * ISA-neutral scaffolding of the tiled matmul kernels (x86/avx2_matmul.c, x86/avx512_matmul*.c,
 * and the quantized ones, x86/avx2_quants.c, x86/avx512_quants.c): the macro ladders that
 * instantiate one always-inline tile template per shape, the tables of those instances indexed
 * by token count, the list of quantized types, and the walk of a row range over token chunks and
 * tiles. The tiles themselves (the intrinsics) stay in each ISA file.
 *
 * Instances: a file defines DEF(NAME, TYPE, R, T) as a one-line static function NAME_RxT that
 * calls its template with those constants; TL__TILES_<N>(DEF, NAME, TYPE, R) instantiates
 * T = 1..N and TL__TILE_LIST_<N>(NAME, R) is the initializer {0, NAME_Rx1, ..., NAME_RxN} (index
 * = tokens in the tile). R may be a macro: both expand it before pasting.
 *
 * Determinism: the walk only decides which tile computes which (row, token) elements; every
 * element goes through the same arithmetic in every tile shape (kernels_impl.h), so the walk's
 * order does not change any value.
 *
 * Thread model: pure functions over caller-owned memory; re-entrant.
 */
#ifndef TL_KERNELS_TILES_H
#define TL_KERNELS_TILES_H

#include "kernels/kernels_impl.h"

#include <stdint.h>

// ---- instance ladders and tables --------------------------------------------------------------

#define TL__TILES_3(DEF, NAME, TYPE, R)                                                            \
    DEF(NAME, TYPE, R, 1) DEF(NAME, TYPE, R, 2) DEF(NAME, TYPE, R, 3)
#define TL__TILES_4(DEF, NAME, TYPE, R) TL__TILES_3(DEF, NAME, TYPE, R) DEF(NAME, TYPE, R, 4)
#define TL__TILES_6(DEF, NAME, TYPE, R)                                                            \
    TL__TILES_4(DEF, NAME, TYPE, R) DEF(NAME, TYPE, R, 5) DEF(NAME, TYPE, R, 6)
#define TL__TILES_8(DEF, NAME, TYPE, R)                                                            \
    TL__TILES_6(DEF, NAME, TYPE, R) DEF(NAME, TYPE, R, 7) DEF(NAME, TYPE, R, 8)
#define TL__TILES_12(DEF, NAME, TYPE, R)                                                           \
    TL__TILES_8(DEF, NAME, TYPE, R)                                                                \
    DEF(NAME, TYPE, R, 9) DEF(NAME, TYPE, R, 10) DEF(NAME, TYPE, R, 11) DEF(NAME, TYPE, R, 12)

#define TL__TILE_NAMES_3_(NAME, R) NAME##_##R##x1, NAME##_##R##x2, NAME##_##R##x3
#define TL__TILE_NAMES_4_(NAME, R) TL__TILE_NAMES_3_(NAME, R), NAME##_##R##x4
#define TL__TILE_NAMES_6_(NAME, R) TL__TILE_NAMES_4_(NAME, R), NAME##_##R##x5, NAME##_##R##x6
#define TL__TILE_NAMES_8_(NAME, R) TL__TILE_NAMES_6_(NAME, R), NAME##_##R##x7, NAME##_##R##x8
#define TL__TILE_NAMES_12_(NAME, R)                                                                \
    TL__TILE_NAMES_8_(NAME, R), NAME##_##R##x9, NAME##_##R##x10, NAME##_##R##x11, NAME##_##R##x12
// clang-format off
#define TL__TILE_LIST_3(NAME, R) {0, TL__TILE_NAMES_3_(NAME, R)}
#define TL__TILE_LIST_4(NAME, R) {0, TL__TILE_NAMES_4_(NAME, R)}
#define TL__TILE_LIST_6(NAME, R) {0, TL__TILE_NAMES_6_(NAME, R)}
#define TL__TILE_LIST_8(NAME, R) {0, TL__TILE_NAMES_8_(NAME, R)}
#define TL__TILE_LIST_12(NAME, R) {0, TL__TILE_NAMES_12_(NAME, R)}
// clang-format on

// The three float weight types, in the order of a [type] table index (F32 0, F16 1, BF16 2):
// the instances NAME_f32_RxT, NAME_f16_RxT, NAME_bf16_RxT for T = 1..N, and the table
// [type][r_full][nt] with r_full 1 = R rows (or groups), 0 = one.
// clang-format off
#define TL__FLOAT_TILES(N, DEF, NAME, R)                                                           \
    TL__TILES_##N(DEF, NAME##_f32, TL_DTYPE_F32, R)                                                \
    TL__TILES_##N(DEF, NAME##_f16, TL_DTYPE_F16, R)                                                \
    TL__TILES_##N(DEF, NAME##_bf16, TL_DTYPE_BF16, R)
#define TL__FLOAT_TILE_TABLE(N, NAME, R) {                                                         \
    {TL__TILE_LIST_##N(NAME##_f32, 1), TL__TILE_LIST_##N(NAME##_f32, R)},                          \
    {TL__TILE_LIST_##N(NAME##_f16, 1), TL__TILE_LIST_##N(NAME##_f16, R)},                          \
    {TL__TILE_LIST_##N(NAME##_bf16, 1), TL__TILE_LIST_##N(NAME##_bf16, R)}}
// clang-format on

// The quantized weight types of the quant kernels as X(name, TL_DTYPE_...), in the order of
// enum tl_dtype: a file instantiates its tiles and tables for each with one line.
#define TL__QX_TYPES(X)                                                                            \
    X(q4_0, TL_DTYPE_Q4_0)                                                                         \
    X(q4_1, TL_DTYPE_Q4_1)                                                                         \
    X(q5_0, TL_DTYPE_Q5_0)                                                                         \
    X(q5_1, TL_DTYPE_Q5_1)                                                                         \
    X(q2_k, TL_DTYPE_Q2_K)                                                                         \
    X(q3_k, TL_DTYPE_Q3_K)                                                                         \
    X(q4_k, TL_DTYPE_Q4_K)                                                                         \
    X(q5_k, TL_DTYPE_Q5_K)                                                                         \
    X(q6_k, TL_DTYPE_Q6_K)

// The quant kernels' instances and their lookup: each ISA file has an always-inline template
// `tile(m, r, t, type, R, T)` over struct tl__qx_mm; TL__QX_DEF_TILE is the DEF for it, and
// TL__QX_DEF_TILES_FOR(N) defines `tiles_for(type)`, returning that file's table tiles_<name>
// (of rows [..][N]) for a quantized type (TL_ASSERT on any other).
struct tl__qx_mm;
typedef void (*tl__qx_tile_fn)(const struct tl__qx_mm *m, int64_t r, int64_t t);
#define TL__QX_DEF_TILE(NAME, TYPE, R, T)                                                          \
    static void NAME##_##R##x##T(const struct tl__qx_mm *m, int64_t r, int64_t t)                  \
    {                                                                                              \
        tile(m, r, t, TYPE, R, T);                                                                 \
    }
#define TL__QX_TILES_CASE_(NAME, TYPE)                                                             \
    case TYPE:                                                                                     \
        return tiles_##NAME;
#define TL__QX_DEF_TILES_FOR(N)                                                                    \
    static const tl__qx_tile_fn(*tiles_for(enum tl_dtype type))[N]                                 \
    {                                                                                              \
        switch (type) {                                                                            \
            TL__QX_TYPES(TL__QX_TILES_CASE_)                                                       \
        default:                                                                                   \
            TL_ASSERT(!"unsupported weight type");                                                 \
            return NULL;                                                                           \
        }                                                                                          \
    }

// ---- the walk over token chunks and tiles -----------------------------------------------------

// Units [U0, U1) times tokens [C0, C1) of one token chunk: units in groups of R (the units left
// over one at a time), and within a group, token tiles of T (the last may be shorter). FULL[nt]
// computes R units x nt tokens, ONE[nt] 1 unit x nt tokens (nt in 1..T). A macro so that it
// serves every kind of tile (struct tl__mm here, struct tl__qx_mm in the quant kernels).
#define TL__TILE_CHUNK(M, U0, U1, R, T, C0, C1, FULL, ONE)                                         \
    do {                                                                                           \
        for (int64_t u_ = (U0); u_ < (U1);) {                                                      \
            const int ru_ = (U1)-u_ >= (R) ? (R) : 1;                                              \
            for (int64_t t_ = (C0); t_ < (C1); t_ += (T)) {                                        \
                const int nt_ = (C1)-t_ < (T) ? (int)((C1)-t_) : (T);                              \
                (ru_ == (R) ? (FULL) : (ONE))[nt_]((M), u_, t_);                                   \
            }                                                                                      \
            u_ += ru_;                                                                             \
        }                                                                                          \
    } while (0)

// A tile: rows (or row units: packed halves, groups) from u, tokens [t, t + its token count).
typedef void (*tl__tile_fn)(const struct tl__mm *m, int64_t u, int64_t t);

// Units [u0, u1) times all m->n_tok tokens: token chunks of `chunk` (a multiple of T, from
// tl__even_chunk) in order, so a chunk's activations stay in cache while the units stream;
// within a chunk, TL__TILE_CHUNK.
static inline __attribute__((always_inline)) void
tl__tile_walk(const struct tl__mm *m, int64_t u0, int64_t u1, int R, int T, int64_t chunk,
              const tl__tile_fn *full, const tl__tile_fn *one)
{
    for (int64_t c0 = 0; c0 < m->n_tok; c0 += chunk) {
        const int64_t c1 = c0 + chunk < m->n_tok ? c0 + chunk : m->n_tok;
        TL__TILE_CHUNK(m, u0, u1, R, T, c0, c1, full, one);
    }
}

#endif
