/*
 * The matmul of the AVX-512 kernel variant over packed weights (tl_weight_prepare; the model's
 * path): the Q8_0 and F32/F16/BF16 tiles and their row drivers, which avx512_matmul.c's
 * tl__avx512_matmul_rows calls for packed weights. Compiled with the AVX-512 flags and only
 * called when the CPU has them; shared helpers are in avx512_impl.h.
 *
 * Matmul, packed weights (tl_weight_prepare; the model's path): the 16 rows of a packed group
 * are the 16 lanes of an accumulator, so a tile of RG groups x T tokens needs no horizontal
 * sums; each weight vector is loaded once per tile and multiplied with each token's activation
 * broadcast from memory.
 *   - Q8_0: one vector = 4 bytes of 16 rows (stored as w + 128); vpdpbusd with the token's 4
 *     activation bytes, 8 per 32-block into an int32 accumulator started at the token's block
 *     bias (cancelling the +128), then acc = fma(float(sumi), d_w * d_x, acc). Tiles 2 x 8.
 *   - F32/F16/BF16: one vector = column k of 16 rows, converted to f32; acc = fma(w, x[k],
 *     acc). Tiles 2 x 12, over activations interleaved by kernels.c in tiles of 12 tokens.
 *   Both walk rows in k-blocks (accumulators parked bitwise between blocks) so a group pair's
 *   k-block stays in L1 for all the token tiles of a chunk, and prefetch the next k-block's
 *   weights spread over those tiles.
 * Every (row, token) lane goes through the same operations in every tile shape, k-block and
 * thread, so results do not depend on the batch.
 *
 * Thread model: pure functions over caller-owned memory; re-entrant.
 */
#include "kernels/x86/avx512_impl.h"

#include "kernels/tiles.h"

#include "core/error.h"

#include <string.h>

// ---- matmul: packed Q8_0 weights (tl_weight_prepare) ------------------------------------------
//
// The packed layout (kernels_impl.h) puts 4 consecutive weights of 16 rows in one 64-byte
// vector, so the accumulator lanes are the 16 rows of a group: a tile is RG groups x T tokens
// of zmm accumulators and needs no horizontal sums. Per 32-block and (group, token): the int32
// accumulator starts at the token's block bias (which cancels the +128 of the stored weights),
// takes 8 vpdpbusd (a weight vector, loaded once for the T tokens, times the token's 4
// activation bytes broadcast), then acc = fma(float(sumi), d_w * d_x, acc): 11 ALU ops per
// 512 MACs against 20 for the file layout, and no assembling of weight blocks. Each (row, token)
// lane computes, block after block, acc = fma(float(sumi_b), d_w,b * d_x,b, acc) whatever
// the tile shape, so results do not depend on the batch.

#ifndef TL_AVX512_PR
#define TL_AVX512_PR 2
#define TL_AVX512_PT 8
#endif
enum { PR = TL_AVX512_PR, PT = TL_AVX512_PT }; // packed tile: groups of 16 rows x tokens
enum { PF_DIST = 1024 };                       // weight prefetch distance (bytes)

// One k-block [b0, b1) of blocks of an RG x T tile; `park` holds the tile's accumulators between
// k-blocks (ACC_LOAD: resume from it; ACC_REDUCE: last k-block, store y).
struct pblock {
    int64_t g, t, b0, b1;
    const char *wbase[4]; // (packed floats) column k of group i at wbase[i] + k * column bytes
    __m512 *park;
    int mode, prefetch;
    // Prefetch of the next k-block's weights, spread over the token tiles of this one: per
    // group i, iteration k prefetches pf[i] + (k - b0) * pf_step (pf[i] NULL: nothing).
    const char *pf[4];
    size_t pf_step;
};

#ifndef TL_AVX512_PFHINT
#define TL_AVX512_PFHINT _MM_HINT_T1
#endif

// Fills pb->pf for token tile `ti` of `n_tiles`: the next slab is `bytes` bytes at next[i]
// for each of the n_next groups.
static void pblock_set_pf(struct pblock *pb, const char *const *next, int n_next, size_t bytes,
                          int64_t ti, int64_t n_tiles)
{
    size_t share = (bytes + (size_t)n_tiles - 1) / (size_t)n_tiles;
    int64_t nk = pb->b1 - pb->b0;
    pb->pf_step = (share + (size_t)nk - 1) / (size_t)nk;
    for (int i = 0; i < 4; i++)
        pb->pf[i] = i < n_next ? next[i] + (size_t)ti * share : NULL;
}

static ALWAYS_INLINE void ptile(const struct tl__mm *m, const struct pblock *pb, const int RG,
                                const int T)
{
    const struct tl_weight *w = m->w;
    const int64_t n = w->n_in, n_out = w->n_out, g = pb->g, t = pb->t;
    const uint8_t *wq[4];
    const uint16_t *wd[4];
    const int8_t *xq[8];
    const float *xd[8];
    const int32_t *xb[8];
    __m512 acc[4][8];
#pragma GCC unroll 4
    for (int i = 0; i < RG; i++) {
        wq[i] = tl__qp_qs(w, g + i);
        wd[i] = tl__qp_d(w, g + i);
    }
#pragma GCC unroll 8
    for (int j = 0; j < T; j++) {
        struct tl__xq_row v = tl__xq_view((char *)m->xq + (size_t)(t + j) * m->xq_stride, n);
        xq[j] = v.qs;
        xd[j] = v.d;
        xb[j] = v.bsum;
    }
#pragma GCC unroll 4
    for (int i = 0; i < RG; i++)
#pragma GCC unroll 8
        for (int j = 0; j < T; j++)
            acc[i][j] = (pb->mode & ACC_LOAD) ? pb->park[i * T + j] : _mm512_setzero_ps();
    const int pf = pb->prefetch;
    for (int64_t b = pb->b0; b < pb->b1; b++) {
        __m512i ai[4][8];
#pragma GCC unroll 8
        for (int j = 0; j < T; j++) {
            __m512i bias = _mm512_set1_epi32(xb[j][b]);
#pragma GCC unroll 4
            for (int i = 0; i < RG; i++)
                ai[i][j] = bias;
        }
        const int64_t xo = (b >> 2) * 128 + (b & 3) * 16;
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) {
            __m512i wv[4];
#pragma GCC unroll 4
            for (int i = 0; i < RG; i++) {
                const uint8_t *p = wq[i] + b * 512 + c * 64;
                if (pf) _mm_prefetch((const char *)p + PF_DIST, _MM_HINT_T0);
                wv[i] = _mm512_load_si512(p);
            }
            const int64_t off = xo + (c >> 2) * 64 + (c & 3) * 4;
#pragma GCC unroll 8
            for (int j = 0; j < T; j++) {
                int32_t xv;
                memcpy(&xv, xq[j] + off, 4);
                __m512i xb4 = _mm512_set1_epi32(xv);
#pragma GCC unroll 4
                for (int i = 0; i < RG; i++)
                    ai[i][j] = _mm512_dpbusd_epi32(ai[i][j], wv[i], xb4);
            }
        }
        __m512 dw[4];
#pragma GCC unroll 4
        for (int i = 0; i < RG; i++)
            dw[i] = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(wd[i] + b * 16)));
        const int64_t dofs = (b >> 2) * 16 + (b & 3) * 4;
#pragma GCC unroll 8
        for (int j = 0; j < T; j++) {
            __m512 dx = _mm512_set1_ps(xd[j][dofs]);
#pragma GCC unroll 4
            for (int i = 0; i < RG; i++)
                acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai[i][j]), _mm512_mul_ps(dw[i], dx),
                                            acc[i][j]);
        }
    }
    if (!(pb->mode & ACC_REDUCE)) {
#pragma GCC unroll 4
        for (int i = 0; i < RG; i++)
#pragma GCC unroll 8
            for (int j = 0; j < T; j++)
                pb->park[i * T + j] = acc[i][j];
        return;
    }
#pragma GCC unroll 8
    for (int j = 0; j < T; j++)
#pragma GCC unroll 4
        for (int i = 0; i < RG; i++) {
            int64_t r = (g + i) * TL__QP_ROWS;
            float *y = m->y + (t + j) * n_out + r;
            if (n_out - r >= 16)
                _mm512_storeu_ps(y, acc[i][j]);
            else
                _mm512_mask_storeu_ps(y, tail_mask16(n_out - r), acc[i][j]);
        }
}

typedef void (*qp_fn)(const struct tl__mm *m, const struct pblock *pb);
#define DEF_PK(NAME, TYPE, R, T)                                                                   \
    static void NAME##_##R##x##T(const struct tl__mm *m, const struct pblock *pb)                  \
    {                                                                                              \
        ptile(m, pb, R, T);                                                                        \
    }
TL__TILES_8(DEF_PK, qp, TL_DTYPE_Q8_0, TL_AVX512_PR)
#if TL_AVX512_PR != 1
TL__TILES_8(DEF_PK, qp, TL_DTYPE_Q8_0, 1)
#endif
static const qp_fn qp_table[2][9] = {TL__TILE_LIST_8(qp, 1), TL__TILE_LIST_8(qp, TL_AVX512_PR)};

#ifndef TL_AVX512_PKB
#define TL_AVX512_PKB 16
#endif
#ifndef TL_AVX512_PCHUNK
#define TL_AVX512_PCHUNK (512 * 1024)
#endif
#ifndef TL_AVX512_PPF
#define TL_AVX512_PPF 1
#endif
// k-block (32-blocks): PR groups' weights of one k-block (PR x PKB x 544 bytes) stay in L1
// while every token tile of the chunk uses them.
enum { PKB = TL_AVX512_PKB, P_CHUNK_BYTES = TL_AVX512_PCHUNK };
enum { P_PARK_TOK = 128 }; // tokens whose parked accumulators fit the stack buffer

void tl__avx512_qp_rows(const struct tl__mm *m, int64_t r0, int64_t r1)
{
    TL_ASSERT(r0 % TL__QP_ROWS == 0);
    const int64_t g0 = r0 / TL__QP_ROWS, g1 = (r1 + TL__QP_ROWS - 1) / TL__QP_ROWS;
    const int64_t nb = m->w->n_in / TL_QK8_0;
    int64_t max_chunk = (int64_t)(P_CHUNK_BYTES / m->xq_stride) / PT * PT;
    if (max_chunk > P_PARK_TOK / PT * PT) max_chunk = P_PARK_TOK / PT * PT;
    const int64_t chunk = tl__even_chunk(m->n_tok, max_chunk, PT);
    _Alignas(64) __m512 park[(P_PARK_TOK + PT - 1) / PT * PR * PT];
    for (int64_t c0 = 0; c0 < m->n_tok; c0 += chunk) {
        int64_t c1 = c0 + chunk < m->n_tok ? c0 + chunk : m->n_tok;
        for (int64_t g = g0; g < g1;) {
            const int rg = g1 - g >= PR ? PR : 1;
            for (int64_t b0 = 0; b0 < nb; b0 += PKB) {
                struct pblock pb = {.g = g, .b0 = b0, .b1 = b0 + PKB < nb ? b0 + PKB : nb};
                pb.mode = (b0 > 0 ? ACC_LOAD : 0) | (pb.b1 == nb ? ACC_REDUCE : 0);
                for (int64_t t = c0; t < c1; t += PT) {
                    int nt = c1 - t < PT ? (int)(c1 - t) : PT;
                    pb.t = t;
                    pb.park = park + (t - c0) / PT * (PR * PT);
                    pb.prefetch = TL_AVX512_PPF && t == c0; // the first tile streams from memory
                    qp_table[rg == PR][nt](m, &pb);
                }
            }
            g += rg;
        }
    }
}

// ---- matmul: packed F32 / F16 / BF16 weights (tl_weight_prepare) -------------------------------
//
// Column k of 16 rows is one load (kernels_impl.h), converted to f32 once and multiplied by
// x[t][k] broadcast for the T tokens of the tile: a GEMM micro-kernel with RG x T accumulators
// whose lanes are rows. Each (row, token) lane computes acc = fma(w[k], x[k], acc) for k in
// order, whatever the tile shape, k-block or thread; k-blocks park the accumulators bitwise.

// (TL_AVX512_GR and TL_AVX512_GT, the tile shape, are set in avx512_impl.h: the op table
// publishes GT as x_tile.)
#ifndef TL_AVX512_GKC
#define TL_AVX512_GKC 256
#endif
enum { GR = TL_AVX512_GR, GT = TL_AVX512_GT, GKC = TL_AVX512_GKC };
enum { G_PARK_TOK = 120, G_CHUNK_BYTES = 512 * 1024 };

static ALWAYS_INLINE __m512 load_col16(const int type, const void *p)
{
    if (type == TL_DTYPE_F32) return _mm512_load_ps(p);
    __m256i h = _mm256_load_si256((const __m256i *)p);
    if (type == TL_DTYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static ALWAYS_INLINE void gtile(const struct tl__mm *m, const struct pblock *pb, const int type,
                                const int RG, const int T)
{
    const struct tl_weight *w = m->w;
    const int64_t n_out = w->n_out;
    const size_t col = TL__QP_ROWS * (type == TL_DTYPE_F32 ? 4 : 2); // bytes per column
    const char *wp[4];
    __m512 acc[4][12];
#pragma GCC unroll 4
    for (int i = 0; i < RG; i++)
        wp[i] = pb->wbase[i];
    // token j's x[k] at xs[k * S + j] (an interleaved tile, or one token's row)
    const int64_t S = m->x_tile ? m->x_tile : 1;
    const float *xs = m->x + pb->t * w->n_in;
#pragma GCC unroll 4
    for (int i = 0; i < RG; i++)
#pragma GCC unroll 12
        for (int j = 0; j < T; j++)
            acc[i][j] = (pb->mode & ACC_LOAD) ? pb->park[i * T + j] : _mm512_setzero_ps();
    if (pb->pf[0]) {
        for (int64_t k = pb->b0; k < pb->b1; k++) {
            __m512 wv[4];
#pragma GCC unroll 4
            for (int i = 0; i < RG; i++) {
                if (pb->pf[i])
                    _mm_prefetch(pb->pf[i] + (k - pb->b0) * pb->pf_step, TL_AVX512_PFHINT);
                wv[i] = load_col16(type, wp[i] + k * col);
            }
#pragma GCC unroll 12
            for (int j = 0; j < T; j++) {
                __m512 xv = _mm512_set1_ps(xs[k * S + j]);
#pragma GCC unroll 4
                for (int i = 0; i < RG; i++)
                    acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
            }
        }
    } else {
        for (int64_t k = pb->b0; k < pb->b1; k++) {
            __m512 wv[4];
#pragma GCC unroll 4
            for (int i = 0; i < RG; i++)
                wv[i] = load_col16(type, wp[i] + k * col);
#pragma GCC unroll 12
            for (int j = 0; j < T; j++) {
                __m512 xv = _mm512_set1_ps(xs[k * S + j]);
#pragma GCC unroll 4
                for (int i = 0; i < RG; i++)
                    acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
            }
        }
    }
    if (!(pb->mode & ACC_REDUCE)) {
#pragma GCC unroll 4
        for (int i = 0; i < RG; i++)
#pragma GCC unroll 12
            for (int j = 0; j < T; j++)
                pb->park[i * T + j] = acc[i][j];
        return;
    }
#pragma GCC unroll 12
    for (int j = 0; j < T; j++)
#pragma GCC unroll 4
        for (int i = 0; i < RG; i++) {
            int64_t r = (pb->g + i) * TL__QP_ROWS;
            float *y = m->y + (pb->t + j) * n_out + r;
            if (n_out - r >= 16)
                _mm512_storeu_ps(y, acc[i][j]);
            else
                _mm512_mask_storeu_ps(y, tail_mask16(n_out - r), acc[i][j]);
        }
}

#define DEF_GK(NAME, TYPE, R, T)                                                                   \
    static void NAME##_##R##x##T(const struct tl__mm *m, const struct pblock *pb)                  \
    {                                                                                              \
        gtile(m, pb, TYPE, R, T);                                                                  \
    }
TL__FLOAT_TILES(12, DEF_GK, gk, TL_AVX512_GR)
#if TL_AVX512_GR != 1
TL__FLOAT_TILES(12, DEF_GK, gk, 1)
#endif
// [type][r_full][nt]: r_full 1 = GR groups, 0 = one group.
static const qp_fn gk_table[3][2][13] = TL__FLOAT_TILE_TABLE(12, gk, TL_AVX512_GR);

void tl__avx512_gp_rows(const struct tl__mm *m, int64_t r0, int64_t r1)
{
    TL_ASSERT(r0 % TL__QP_ROWS == 0 && GT <= 12 && GR <= 4);
    TL_ASSERT(m->x_tile == GT || (m->x_tile == 0 && m->n_tok == 1));
    const struct tl_weight *w = m->w;
    const int ti = w->type == TL_DTYPE_F32 ? 0 : w->type == TL_DTYPE_F16 ? 1 : 2;
    const int64_t g0 = r0 / TL__QP_ROWS, g1 = (r1 + TL__QP_ROWS - 1) / TL__QP_ROWS, n = w->n_in;
    int64_t max_chunk = (int64_t)(G_CHUNK_BYTES / ((size_t)n * 4)) / GT * GT;
    if (max_chunk > G_PARK_TOK / GT * GT) max_chunk = G_PARK_TOK / GT * GT;
    const int64_t chunk = tl__even_chunk(m->n_tok, max_chunk, GT);
    _Alignas(64) __m512 park[(G_PARK_TOK + GT - 1) / GT * GR * GT];
    const size_t col = TL__QP_ROWS * (ti == 0 ? 4 : 2);
    for (int64_t c0 = 0; c0 < m->n_tok; c0 += chunk) {
        int64_t c1 = c0 + chunk < m->n_tok ? c0 + chunk : m->n_tok;
        const int64_t n_tiles = (c1 - c0 + GT - 1) / GT;
        for (int64_t g = g0; g < g1;) {
            const int rg = g1 - g >= GR ? GR : 1;
            for (int64_t k0 = 0; k0 < n; k0 += GKC) {
                struct pblock pb = {.g = g, .b0 = k0, .b1 = k0 + GKC < n ? k0 + GKC : n};
                pb.mode = (k0 > 0 ? ACC_LOAD : 0) | (pb.b1 == n ? ACC_REDUCE : 0);
                // (converting an F16/BF16 k-block to f32 once for all the tiles measured no
                // faster than converting in registers per tile)
                for (int i = 0; i < rg; i++)
                    pb.wbase[i] = (const char *)tl__pk_group(w, g + i);
                // the next k-block: the rest of these rows, else the next row groups
                const char *next[4];
                int n_next = 0;
                int64_t nk0 = pb.b1, ng = g, nrg = rg;
                if (nk0 == n) {
                    nk0 = 0, ng = g + rg;
                    nrg = g1 - ng >= GR ? GR : g1 - ng;
                }
                for (; n_next < nrg; n_next++)
                    next[n_next] = (const char *)tl__pk_group(w, ng + n_next) + nk0 * col;
                size_t nbytes = (size_t)((nk0 + GKC < n ? nk0 + GKC : n) - nk0) * col;
                for (int64_t t = c0; t < c1; t += GT) {
                    int nt = c1 - t < GT ? (int)(c1 - t) : GT;
                    pb.t = t;
                    pb.park = park + (t - c0) / GT * (GR * GT);
                    pblock_set_pf(&pb, next, n_next, nbytes, (t - c0) / GT, n_tiles);
                    gk_table[ti][rg == GR][nt](m, &pb);
                }
            }
            g += rg;
        }
    }
}
