/*
 * The AVX-512 (F, BW, VL, DQ, VNNI) matmul of the 4-bit codebook weight types of
 * kernels/cb4.h (IQ4_NL, IQ4_XS, MXFP4). Compiled with those -m flags, called only when the CPU
 * has them.
 *
 * Design: tiles of rows x tokens (4 x 4, or 2 x 8 for batches) walk the rows in superchunks
 * (four 32-blocks). A row's superchunk is decoded once per tile into two registers: the 16 nibble
 * bytes of block g in 128-bit lane g, whose low nibbles (the first 16 values of each block) and
 * high nibbles (the last 16) a vpshufb turns into codebook values
 * + 128, unsigned -- the layout in which struct tl__qa_chunk keeps the activation bytes, so one
 * vpdpbusd per half covers the four blocks. The +128 is cancelled exactly by starting the sums
 * at 128 * (-sum of the activation bytes), which the activation row carries per lane
 * (nslo/nshi), so lane 4g+k holds the exact signed dot of bytes 4k..4k+3 of both halves of
 * block g; then acc = fma(float(sum), D * d_x, acc) and one fixed horizontal sum at the end. A
 * token's activation bytes and bias are loaded once per superchunk for all the rows of a tile.
 *
 * Determinism: every (row, token) element sees the same instruction sequence whatever tile it
 * lands in, and is reduced by hsum512.
 *
 * Thread model: pure functions over caller-owned memory; re-entrant.
 */
#include "kernels/cb4.h"
#include "kernels/tiles.h"
#include "kernels/x86/avx512_impl.h"
#include "kernels/x86/cb4_simd.h"

#ifndef TL_AVX512_XPF
#define TL_AVX512_XPF 512
#endif
// Tile shapes (rows x tokens), as in avx512_quants.c: 4 x 4 while a token chunk has fewer than 8
// tokens, 2 x 8 for batches. The per-element arithmetic is the same in every shape.
enum { XR = 4, XT = 4, WR = 2, WT = 8 };
enum { CHUNK_BYTES = 512 * 1024 }; // activations of a token chunk stay in L2

// One decoded superchunk of a row.
struct wdec {
    __m512i lo, hi; // lane g: codebook values + 128 of block g, first / second 16 values
    __m512 D;       // lane 4g+k: D of block g
};

// Lane 4g+k <- lane g of a 4-float vector.
static ALWAYS_INLINE __m512 expand4(__m128 v)
{
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(v));
}

static ALWAYS_INLINE void nibbles(__m512i tbl, const uint8_t *q0, const uint8_t *q1,
                                  const uint8_t *q2, const uint8_t *q3, struct wdec *w)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i q = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)q0));
    q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)q1), 1);
    q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)q2), 2);
    q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)q3), 3);
    w->lo = _mm512_shuffle_epi8(tbl, _mm512_and_si512(q, m4));
    w->hi = _mm512_shuffle_epi8(tbl, _mm512_and_si512(_mm512_srli_epi16(q, 4), m4));
}

// Superchunk s of a row, decoded (the scales: cb4_simd.h; IQ4_XS's four blocks are contiguous).
static ALWAYS_INLINE void load_w(const enum tl_dtype type, __m512i tbl, const uint8_t *row,
                                 int64_t n_in, int64_t s, struct wdec *w)
{
    __m128 D;
    const uint8_t *qs[4];
    tl__cb4_scales4(type, row, n_in, s, &D, qs);
    if (type == TL_DTYPE_IQ4_XS) {
        const __m512i m4 = _mm512_set1_epi8(0x0F), q = _mm512_loadu_si512(qs[0]);
        w->lo = _mm512_shuffle_epi8(tbl, _mm512_and_si512(q, m4));
        w->hi = _mm512_shuffle_epi8(tbl, _mm512_and_si512(_mm512_srli_epi16(q, 4), m4));
    } else {
        nibbles(tbl, qs[0], qs[1], qs[2], qs[3], w);
    }
    w->D = expand4(D);
}

// Tile of R rows x T tokens starting at (r, t): each row's superchunk is decoded once for the T
// tokens, each token's activations and bias loaded once for the R rows.
static ALWAYS_INLINE void tile(const struct tl__qx_mm *m, __m512i tbl, int64_t r, int64_t t,
                               const enum tl_dtype type, const int R, const int T)
{
    const struct tl_weight *w = m->w;
    const int64_t n_in = w->n_in, n_super = (n_in + 127) / 128;
    const size_t scb = type == TL_DTYPE_IQ4_XS ? 68 : type == TL_DTYPE_IQ4_NL ? 72 : 68;
    const uint8_t *wr[8];
    const struct tl__qa_chunk *xr[8];
    __m512 acc[8][8];
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
        wr[i] = (const uint8_t *)w->data + (size_t)(r + i) * w->row_bytes;
#pragma GCC unroll 8
    for (int u = 0; u < T; u++)
        xr[u] = m->xa + (t + u) * m->xa_stride;
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 8
        for (int u = 0; u < T; u++)
            acc[i][u] = _mm512_setzero_ps();
    for (int64_t s = 0; s < n_super; s++) {
        struct wdec wd[8];
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            if (TL_AVX512_XPF) {
                // software prefetch TL_AVX512_XPF bytes ahead, two lines per superchunk
                const char *pf = (const char *)wr[i] + (size_t)s * scb + TL_AVX512_XPF;
                _mm_prefetch(pf, _MM_HINT_T0);
                _mm_prefetch(pf + 64, _MM_HINT_T0);
            }
            load_w(type, tbl, wr[i], n_in, s, &wd[i]);
        }
#pragma GCC unroll 8
        for (int u = 0; u < T; u++) {
            const struct tl__qa_chunk *a = xr[u] + s;
            const __m512i bias = _mm512_slli_epi32(
                _mm512_add_epi32(_mm512_load_si512(a->nslo), _mm512_load_si512(a->nshi)), 7);
            const __m512i xlo = _mm512_load_si512(a->qs), xhi = _mm512_load_si512(a->qs + 64);
            const __m512 dx = _mm512_load_ps(a->d);
#pragma GCC unroll 8
            for (int i = 0; i < R; i++) {
                __m512i q = _mm512_dpbusd_epi32(bias, wd[i].lo, xlo);
                q = _mm512_dpbusd_epi32(q, wd[i].hi, xhi);
                acc[i][u] =
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(q), _mm512_mul_ps(wd[i].D, dx), acc[i][u]);
            }
        }
    }
#pragma GCC unroll 8
    for (int u = 0; u < T; u++)
#pragma GCC unroll 8
        for (int i = 0; i < R; i++)
            m->y[(t + u) * w->n_out + r + i] = hsum512(acc[i][u]);
}

typedef void (*tile_fn)(const struct tl__qx_mm *m, __m512i tbl, int64_t r, int64_t t);

#define DEF_TILE(NAME, TYPE, R, T)                                                                 \
    static void NAME##_##R##x##T(const struct tl__qx_mm *m, __m512i tbl, int64_t r, int64_t t)     \
    {                                                                                              \
        tile(m, tbl, r, t, TYPE, R, T);                                                            \
    }
// [0]: one row, [1]: XR x 1..XT, [2]: WR x 1..WT; index = token count (tiles.h's ladders and
// lists; the XR row stops at XT, the rest of it is zero)
#define DEF_TILES(NAME, TYPE)                                                                      \
    TL__TILES_4(DEF_TILE, NAME, TYPE, 4)                                                           \
    TL__TILES_8(DEF_TILE, NAME, TYPE, 2)                                                           \
    TL__TILES_8(DEF_TILE, NAME, TYPE, 1)                                                           \
    static const tile_fn tiles_##NAME[3][9] = {TL__TILE_LIST_8(NAME, 1), TL__TILE_LIST_4(NAME, 4), \
                                               TL__TILE_LIST_8(NAME, 2)};

_Static_assert(XR == 4 && XT == 4 && WR == 2 && WT == 8 && TL__CB4_ROWS % XR == 0 &&
                   TL__CB4_ROWS % WR == 0,
               "the tile lists assume these shapes");

DEF_TILES(iq4_nl, TL_DTYPE_IQ4_NL)
DEF_TILES(iq4_xs, TL_DTYPE_IQ4_XS)
DEF_TILES(mxfp4, TL_DTYPE_MXFP4)

void tl__cb4_avx512_rows(const struct tl__qx_mm *m, int64_t r0, int64_t r1)
{
    const enum tl_dtype type = m->w->type;
    const tile_fn(*tiles)[9] = type == TL_DTYPE_IQ4_NL   ? tiles_iq4_nl
                               : type == TL_DTYPE_IQ4_XS ? tiles_iq4_xs
                                                         : tiles_mxfp4;
    // the codebook + 128 as unsigned bytes, in every 128-bit lane
    const int8_t *K = tl__cb4_codebook(type);
    uint8_t ku[16];
    for (int i = 0; i < 16; i++)
        ku[i] = (uint8_t)(K[i] + 128);
    const __m512i tbl = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)ku));
    const size_t tok_bytes = (size_t)m->xa_stride * sizeof(struct tl__qa_chunk);
    int64_t chunk = (int64_t)(CHUNK_BYTES / tok_bytes) / WT * WT;
    if (chunk < WT) chunk = WT;
    for (int64_t c0 = 0; c0 < m->n_tok; c0 += chunk) {
        const int64_t c1 = c0 + chunk < m->n_tok ? c0 + chunk : m->n_tok;
        const int wide = c1 - c0 >= WT;
        const int R = wide ? WR : XR, T = wide ? WT : XT;
        for (int64_t r = r0; r < r1;) {
            const int rows = r1 - r >= R ? R : 1;
            const tile_fn *list = tiles[rows == 1 ? 0 : wide ? 2 : 1];
            for (int64_t t = c0; t < c1; t += T)
                list[c1 - t < T ? c1 - t : T](m, tbl, r, t);
            r += rows;
        }
    }
}
