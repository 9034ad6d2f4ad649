/*
 * The AVX2 (+ FMA, F16C) matmul of the 4-bit codebook weight types of kernels/cb4.h (IQ4_NL,
 * IQ4_XS, MXFP4). Compiled with those -m flags, called only when the CPU has them.
 *
 * Design: tiles of 2 rows x up to 4 tokens; a row's superchunk (four 32-blocks) is decoded once
 * per tile: per pair of blocks one register of 32 nibbles (block 2p in the low 128 bits, 2p+1 in
 * the high), whose low and high nibbles a vpshufb turns into the int8 codebook values of the first
 * and second 16 values of each block -- the order in which struct tl__qa_chunk keeps the activation
 * bytes, so the activations load as they are. The products are signed x signed: maddubs of
 * |x| with w carrying x's sign gives exact int16 pair sums (|w|, |x| <= 127: no saturation),
 * madd with ones widens them to 8 int32 sums of 4 products (lanes 0-3: block 2p, 4-7: 2p+1),
 * and acc = fma(float(sum), D * d_x, acc) per pair; one fixed horizontal sum at the end.
 *
 * Determinism: every (row, token) element sees the same instruction sequence whatever tile it
 * lands in, and is reduced by hsum256.
 *
 * Thread model: pure functions over caller-owned memory; re-entrant.
 */
#include "kernels/cb4.h"
#include "kernels/tiles.h"
#include "kernels/x86/avx2_impl.h"
#include "kernels/x86/cb4_simd.h"

#ifndef TL_AVX2_XPF
#define TL_AVX2_XPF 512
#endif
enum { XR = 2, XT = 4 };           // rows x tokens per tile
enum { CHUNK_BYTES = 256 * 1024 }; // activations of a token chunk stay in L2

// Pair p (blocks 2p, 2p+1) of a decoded superchunk of a row.
struct wpair {
    __m256i lo, hi; // codebook values of the first / second 16 values (block 2p low 128 bits)
    __m256 D;       // lanes 0-3: D of block 2p, 4-7: D of block 2p+1
};

static ALWAYS_INLINE void decode_pair(const enum tl_dtype type, __m256i tbl, __m128 D,
                                      const uint8_t *const qs[4], int p, struct wpair *w)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    // IQ4_XS: the blocks of a superchunk are contiguous
    __m256i q = type == TL_DTYPE_IQ4_XS ? _mm256_loadu_si256((const __m256i *)qs[2 * p])
                                        : _mm256_loadu2_m128i((const __m128i *)qs[2 * p + 1],
                                                              (const __m128i *)qs[2 * p]);
    w->lo = _mm256_shuffle_epi8(tbl, _mm256_and_si256(q, m4));
    w->hi = _mm256_shuffle_epi8(tbl, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
    const __m256i idx =
        _mm256_setr_epi32(2 * p, 2 * p, 2 * p, 2 * p, 2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1);
    w->D = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(D), idx);
}

// 8 int32 sums of 4 products of signed bytes w and x, given |x|: maddubs(|x|, w * sign(x)).
static ALWAYS_INLINE __m256i dot4(__m256i w, __m256i x, __m256i ax)
{
    __m256i p = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(w, x));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

// Tile of R rows x T tokens starting at (r, t), a pair of blocks at a time (each (row, token)
// still takes its pairs in order, so the tile shape does not change a result).
static ALWAYS_INLINE void tile(const struct tl__qx_mm *m, __m256i tbl, int64_t r, int64_t t,
                               const enum tl_dtype type, const int R, const int T)
{
    const struct tl_weight *w = m->w;
    const int64_t n_in = w->n_in, n_super = (n_in + 127) / 128;
    const size_t scb = type == TL_DTYPE_IQ4_NL ? 72 : 68; // bytes per superchunk
    const uint8_t *wr[XR];
    const struct tl__qa_chunk *xr[XT];
    __m256 acc[XR][XT];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
        wr[i] = (const uint8_t *)w->data + (size_t)(r + i) * w->row_bytes;
#pragma GCC unroll 4
    for (int u = 0; u < T; u++)
        xr[u] = m->xa + (t + u) * m->xa_stride;
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int u = 0; u < T; u++)
            acc[i][u] = _mm256_setzero_ps();
    for (int64_t s = 0; s < n_super; s++) {
        __m128 D[XR];
        const uint8_t *qs[XR][4];
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            if (TL_AVX2_XPF) {
                // software prefetch TL_AVX2_XPF bytes ahead, two lines per superchunk
                const char *pf = (const char *)wr[i] + (size_t)s * scb + TL_AVX2_XPF;
                _mm_prefetch(pf, _MM_HINT_T0);
                _mm_prefetch(pf + 64, _MM_HINT_T0);
            }
            tl__cb4_scales4(type, wr[i], n_in, s, &D[i], qs[i]);
        }
#pragma GCC unroll 2
        for (int p = 0; p < 2; p++) {
            struct wpair wp[XR];
#pragma GCC unroll 4
            for (int i = 0; i < R; i++)
                decode_pair(type, tbl, D[i], qs[i], p, &wp[i]);
#pragma GCC unroll 4
            for (int u = 0; u < T; u++) {
                const struct tl__qa_chunk *a = xr[u] + s;
                const __m256i xlo = _mm256_loadu_si256((const __m256i *)(a->qs + 32 * p));
                const __m256i xhi = _mm256_loadu_si256((const __m256i *)(a->qs + 64 + 32 * p));
                const __m256i alo = _mm256_abs_epi8(xlo), ahi = _mm256_abs_epi8(xhi);
                const __m256 dx = _mm256_loadu_ps(a->d + 8 * p);
#pragma GCC unroll 4
                for (int i = 0; i < R; i++) {
                    __m256i q =
                        _mm256_add_epi32(dot4(wp[i].lo, xlo, alo), dot4(wp[i].hi, xhi, ahi));
                    acc[i][u] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), _mm256_mul_ps(wp[i].D, dx),
                                                acc[i][u]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int u = 0; u < T; u++)
#pragma GCC unroll 4
        for (int i = 0; i < R; i++)
            m->y[(t + u) * w->n_out + r + i] = hsum256(acc[i][u]);
}

typedef void (*tile_fn)(const struct tl__qx_mm *m, __m256i tbl, int64_t r, int64_t t);

#define DEF_TILE(NAME, TYPE, R, T)                                                                 \
    static void NAME##_##R##x##T(const struct tl__qx_mm *m, __m256i tbl, int64_t r, int64_t t)     \
    {                                                                                              \
        tile(m, tbl, r, t, TYPE, R, T);                                                            \
    }
// [0]: one row, [1]: XR rows; index = token count (tiles.h's ladders and lists)
#define DEF_TILES(NAME, TYPE)                                                                      \
    TL__TILES_4(DEF_TILE, NAME, TYPE, 1)                                                           \
    TL__TILES_4(DEF_TILE, NAME, TYPE, 2)                                                           \
    static const tile_fn tiles_##NAME[2][XT + 1] = {TL__TILE_LIST_4(NAME, 1),                      \
                                                    TL__TILE_LIST_4(NAME, 2)};

_Static_assert(XR == 2 && XT == 4 && TL__CB4_ROWS % XR == 0, "the tile lists assume these shapes");

DEF_TILES(iq4_nl, TL_DTYPE_IQ4_NL)
DEF_TILES(iq4_xs, TL_DTYPE_IQ4_XS)
DEF_TILES(mxfp4, TL_DTYPE_MXFP4)

void tl__cb4_avx2_rows(const struct tl__qx_mm *m, int64_t r0, int64_t r1)
{
    const enum tl_dtype type = m->w->type;
    const tile_fn(*tiles)[XT + 1] = type == TL_DTYPE_IQ4_NL   ? tiles_iq4_nl
                                    : type == TL_DTYPE_IQ4_XS ? tiles_iq4_xs
                                                              : tiles_mxfp4;
    const __m256i tbl =
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)tl__cb4_codebook(type)));
    const size_t tok_bytes = (size_t)m->xa_stride * sizeof(struct tl__qa_chunk);
    int64_t chunk = (int64_t)(CHUNK_BYTES / tok_bytes) / XT * XT;
    if (chunk < XT) chunk = XT;
    for (int64_t c0 = 0; c0 < m->n_tok; c0 += chunk) {
        const int64_t c1 = c0 + chunk < m->n_tok ? c0 + chunk : m->n_tok;
        for (int64_t r = r0; r < r1;) {
            const int rows = r1 - r >= XR ? XR : 1;
            for (int64_t t = c0; t < c1; t += XT)
                tiles[rows == XR][c1 - t < XT ? c1 - t : XT](m, tbl, r, t);
            r += rows;
        }
    }
}
