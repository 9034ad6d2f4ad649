/*
 * The matmul of the AVX2 kernel variant (AVX2 + FMA + F16C; compiled with those -m flags and
 * only called when the CPU has them): the F32/F16/BF16 and Q8_0 paths, file layout and packed,
 * their row drivers, and the activation quantizer they read (quantize_x). avx2_ops.c publishes
 * them in the op table; shared helpers are in avx2_impl.h.
 *
 * Matmul design: micro-tiles of R weight rows x T tokens as in avx512_matmul.c, 8 lanes per
 * step and 16 registers: each (row, token) pair owns an accumulator; a weight vector loaded
 * (and for F16/BF16 converted to f32) once per step serves all T tokens.
 *   - F32/F16/BF16: acc = fma(w, x, acc); the tail (n_in % 8) goes through a zero-padded copy
 *     of the last partial vector, so it is the same arithmetic as a full step.
 *   - Q8_0: one 32-block per step: maddubs(|w|, sign(x, w)) gives exact int16 pair sums
 *     (|w| <= 128, |x| <= 127: no saturation), madd with ones widens to int32, then
 *     acc = fma(float(sumi), d_w * d_x, acc).
 * Every (row, token) element sees the same instruction sequence in every tile shape, and the
 * final horizontal sum is one fixed function, so results do not depend on the batch.
 * The packed-weight kernels (tl_weight_prepare) are described in their sections below.
 *
 * Thread model: pure functions over caller-owned memory; re-entrant.
 */
#include "kernels/x86/avx2_impl.h"

#include "kernels/tiles.h"

#include "core/error.h"

#include <string.h>

// ---- activation quantization ------------------------------------------------------------------

void tl__avx2_quantize_x(const float *x, int64_t n, void *dst)
{
    struct tl__xq_row row = tl__xq_view(dst, n);
    tl__xq_clear_pad(dst, n);
    int64_t n_super = (n + TL__XQ_SUPER - 1) / TL__XQ_SUPER;
    const __m256 sign = _mm256_set1_ps(-0.f);
    for (int64_t b = 0; b < n_super * 4; b++) {
        int64_t i0 = b * 32;
        __m256 v[4];
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            int64_t left = n - i0 - 8 * k;
            v[k] = left >= 8 ? _mm256_loadu_ps(x + i0 + 8 * k)
                             : (left > 0 ? load_tail(x + i0 + 8 * k, left) : _mm256_setzero_ps());
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[k]));
        }
        float amax = hmax256(m);
        float d = amax / 127.f;
        float id = amax != 0.f ? 127.f / amax : 0.f;
        __m256 vid = _mm256_set1_ps(id);
        __m256i q[4];
        for (int k = 0; k < 4; k++)
            q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], vid)); // RNE
        // pack 32 int32 to 32 int8; packs interleave 128-bit lanes, the permute restores order
        __m256i p16a = _mm256_packs_epi32(q[0], q[1]), p16b = _mm256_packs_epi32(q[2], q[3]);
        __m256i p8 = _mm256_packs_epi16(p16a, p16b);
        p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm_storeu_si128((__m128i *)tl__xq_lo(row, b), _mm256_castsi256_si128(p8));
        _mm_storeu_si128((__m128i *)tl__xq_hi(row, b), _mm256_extracti128_si256(p8, 1));
        int64_t s = b / 4, g = b % 4;
        _mm_storeu_ps(row.d + s * 16 + g * 4, _mm_set1_ps(d));
        // bias: -128 * (group of four bytes in the low half + the same group in the high half);
        // used only by the VNNI kernel, kept byte-identical across ISAs
        __m256i s4 =
            _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), p8), _mm256_set1_epi16(1));
        __m128i s8 = _mm_add_epi32(_mm256_castsi256_si128(s4), _mm256_extracti128_si256(s4, 1));
        _mm_storeu_si128((__m128i *)(row.bias + s * 16 + g * 4),
                         _mm_sub_epi32(_mm_setzero_si128(), _mm_slli_epi32(s8, 7)));
        const int32_t *bl = row.bias + s * 16 + g * 4;
        row.bsum[b] = bl[0] + bl[1] + bl[2] + bl[3];
    }
}

// ---- matmul: F32 / F16 / BF16 weights ---------------------------------------------------------

enum { FR = 4, FT = 3 }; // float tile: rows x tokens
enum { QR = 2, QT = 4 }; // Q8_0 tile
enum { TMAX = 4 };

static ALWAYS_INLINE __m256 load_w(int type, const void *w, int64_t k)
{
    if (type == TL_DTYPE_F32) return _mm256_loadu_ps((const float *)w + k);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + k));
    if (type == TL_DTYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static ALWAYS_INLINE void ftile(const struct tl__mm *m, int64_t r, int64_t t, const int type,
                                const int R, const int T)
{
    const struct tl_weight *w = m->w;
    const int64_t n = w->n_in;
    const size_t esz = type == TL_DTYPE_F32 ? 4 : 2;
    const void *wr[FR];
    const float *xr[TMAX];
    __m256 acc[FR][TMAX];
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
        wr[i] = (const char *)w->data + (size_t)(r + i) * w->row_bytes;
#pragma GCC unroll 8
    for (int j = 0; j < T; j++)
        xr[j] = m->x + (t + j) * n;
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 8
        for (int j = 0; j < T; j++)
            acc[i][j] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        __m256 xv[TMAX];
#pragma GCC unroll 8
        for (int j = 0; j < T; j++)
            xv[j] = _mm256_loadu_ps(xr[j] + k);
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            __m256 wv = load_w(type, wr[i], k);
#pragma GCC unroll 8
            for (int j = 0; j < T; j++)
                acc[i][j] = _mm256_fmadd_ps(wv, xv[j], acc[i][j]);
        }
    }
    if (k < n) {
        // zero-padded copies of the partial last vector: zeros add nothing to any lane
        _Alignas(32) float xt[TMAX][8];
        _Alignas(32) uint8_t wt[8 * 4];
        int64_t left = n - k;
#pragma GCC unroll 8
        for (int j = 0; j < T; j++)
            _mm256_store_ps(xt[j], load_tail(xr[j] + k, left));
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            memset(wt, 0, sizeof(wt));
            memcpy(wt, (const char *)wr[i] + (size_t)k * esz, (size_t)left * esz);
            __m256 wv = load_w(type, wt, 0);
#pragma GCC unroll 8
            for (int j = 0; j < T; j++)
                acc[i][j] = _mm256_fmadd_ps(wv, _mm256_load_ps(xt[j]), acc[i][j]);
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < T; j++)
#pragma GCC unroll 8
        for (int i = 0; i < R; i++)
            m->y[(t + j) * w->n_out + r + i] = hsum256(acc[i][j]);
}

// ---- matmul: Q8_0 weights ---------------------------------------------------------------------

static ALWAYS_INLINE void qtile(const struct tl__mm *m, int64_t r, int64_t t, const int R,
                                const int T)
{
    const struct tl_weight *w = m->w;
    const int64_t n = w->n_in, nb = n / TL_QK8_0;
    const struct tl_block_q8_0 *wr[QR];
    struct tl__xq_row xr[TMAX];
    __m256 acc[QR][TMAX];
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
        wr[i] =
            (const struct tl_block_q8_0 *)((const char *)w->data + (size_t)(r + i) * w->row_bytes);
#pragma GCC unroll 8
    for (int j = 0; j < T; j++)
        xr[j] = tl__xq_view((char *)m->xq + (size_t)(t + j) * m->xq_stride, n);
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 8
        for (int j = 0; j < T; j++)
            acc[i][j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i wq[QR], wa[QR];
        __m256 dw[QR];
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            wq[i] = _mm256_loadu_si256((const __m256i *)wr[i][b].qs);
            wa[i] = _mm256_sign_epi8(wq[i], wq[i]);
            dw[i] = _mm256_set1_ps(_cvtsh_ss(wr[i][b].d));
        }
        const int64_t doff = (b / 4) * 16 + (b % 4) * 4;
#pragma GCC unroll 8
        for (int j = 0; j < T; j++) {
            __m256i xq = _mm256_loadu2_m128i((const __m128i *)tl__xq_hi(xr[j], b),
                                             (const __m128i *)tl__xq_lo(xr[j], b));
            __m256 dx = _mm256_broadcast_ss(xr[j].d + doff);
#pragma GCC unroll 8
            for (int i = 0; i < R; i++) {
                __m256i p16 = _mm256_maddubs_epi16(wa[i], _mm256_sign_epi8(xq, wq[i]));
                __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
                acc[i][j] = _mm256_fmadd_ps(f, _mm256_mul_ps(dw[i], dx), acc[i][j]);
            }
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < T; j++)
#pragma GCC unroll 8
        for (int i = 0; i < R; i++)
            m->y[(t + j) * w->n_out + r + i] = hsum256(acc[i][j]);
}

// ---- tile instances and the row driver --------------------------------------------------------

#define DEF_FTILE(NAME, TYPE, R, T)                                                                \
    static void NAME##_##R##x##T(const struct tl__mm *m, int64_t r, int64_t t)                     \
    {                                                                                              \
        ftile(m, r, t, TYPE, R, T);                                                                \
    }
#define DEF_QTILE(NAME, TYPE, R, T)                                                                \
    static void NAME##_##R##x##T(const struct tl__mm *m, int64_t r, int64_t t)                     \
    {                                                                                              \
        qtile(m, r, t, R, T);                                                                      \
    }
_Static_assert(FR == 4 && FT == 3 && QR == 2 && QT == 4, "tile tables below assume these");
TL__FLOAT_TILES(3, DEF_FTILE, ft, 4)
TL__FLOAT_TILES(3, DEF_FTILE, ft, 1)
TL__TILES_4(DEF_QTILE, q8, TL_DTYPE_Q8_0, 2)
TL__TILES_4(DEF_QTILE, q8, TL_DTYPE_Q8_0, 1)

struct tileset {
    int R, T;
    tl__tile_fn full[TMAX + 1]; // R rows x j tokens
    tl__tile_fn one[TMAX + 1];  // 1 row x j tokens (row tail)
};

static const struct tileset tiles_f32 = {4, 3, TL__TILE_LIST_3(ft_f32, 4),
                                         TL__TILE_LIST_3(ft_f32, 1)};
static const struct tileset tiles_f16 = {4, 3, TL__TILE_LIST_3(ft_f16, 4),
                                         TL__TILE_LIST_3(ft_f16, 1)};
static const struct tileset tiles_bf16 = {4, 3, TL__TILE_LIST_3(ft_bf16, 4),
                                          TL__TILE_LIST_3(ft_bf16, 1)};
static const struct tileset tiles_q8 = {2, 4, TL__TILE_LIST_4(q8, 2), TL__TILE_LIST_4(q8, 1)};

static const struct tileset *tiles_for(enum tl_dtype type)
{
    switch (type) {
    case TL_DTYPE_F32:
        return &tiles_f32;
    case TL_DTYPE_F16:
        return &tiles_f16;
    case TL_DTYPE_BF16:
        return &tiles_bf16;
    case TL_DTYPE_Q8_0:
        return &tiles_q8;
    default:
        TL_ASSERT(!"unsupported weight type");
        return NULL;
    }
}

int tl__avx2_row_align(enum tl_dtype type)
{
    return tiles_for(type)->R;
}

enum { CHUNK_BYTES = 256 * 1024 };
// Packed weights: a token chunk's activations (at most this many bytes) stay in L2 while every
// row group is multiplied with all of them, so the weights stream from memory once per chunk.
enum { P_CHUNK_BYTES = 512 * 1024 };

// ---- matmul: packed Q8_0 weights (tl_weight_prepare) ------------------------------------------
//
// A 32-byte register holds 4 consecutive weights of 8 rows (half of a packed 16-row group,
// layout in kernels_impl.h), so the accumulator lanes are rows: a tile is RH halves x T tokens
// of ymm accumulators, with no horizontal sums. Per 32-block and (half, token): 8 steps of
// maddubs(|w|, sign(x, w)) on the token's 4 activation bytes broadcast, widened by madd with
// ones and summed in int32 (|w| and w's sign computed once per weight vector for the T
// tokens), then acc = fma(float(sumi), d_w * d_x, acc). Each (row, token) lane goes through
// the same sequence in every tile shape.

#ifndef TL_AVX2_PH
#define TL_AVX2_PH 1
#define TL_AVX2_PT 4
#endif
#ifndef TL_AVX2_QPF
#define TL_AVX2_QPF 4096
#endif
enum { PH = TL_AVX2_PH, PT = TL_AVX2_PT }; // packed tile: 8-row halves x tokens

static ALWAYS_INLINE void ptile(const struct tl__mm *m, int64_t u, int64_t t, const int RH,
                                const int T)
{
    const struct tl_weight *w = m->w;
    const int64_t n = w->n_in, nb = n / TL_QK8_0, n_out = w->n_out;
    const uint8_t *wq[2];
    const uint16_t *wd[2];
    const int8_t *xq[4];
    const float *xd[4];
    __m256 acc[2][4];
    const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8((char)0x80);
#pragma GCC unroll 2
    for (int i = 0; i < RH; i++) {
        int64_t h = u + i;
        wq[i] = tl__qp_qs(w, h / 2) + (h & 1) * 32;
        wd[i] = tl__qp_d(w, h / 2) + (h & 1) * 8;
    }
#pragma GCC unroll 4
    for (int j = 0; j < T; j++) {
        struct tl__xq_row v = tl__xq_view((char *)m->xq + (size_t)(t + j) * m->xq_stride, n);
        xq[j] = v.qs;
        xd[j] = v.d;
    }
#pragma GCC unroll 2
    for (int i = 0; i < RH; i++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++)
            acc[i][j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i ai[2][4];
#pragma GCC unroll 2
        for (int i = 0; i < RH; i++)
#pragma GCC unroll 4
            for (int j = 0; j < T; j++)
                ai[i][j] = _mm256_setzero_si256();
        const int64_t xo = (b >> 2) * 128 + (b & 3) * 16;
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) {
            __m256i ws[2], wa[2];
#pragma GCC unroll 2
            for (int i = 0; i < RH; i++) {
                const uint8_t *p = wq[i] + b * 512 + c * 64;
                _mm_prefetch((const char *)p + TL_AVX2_QPF, _MM_HINT_T0);
                ws[i] = _mm256_xor_si256(_mm256_load_si256((const __m256i *)p), flip);
                wa[i] = _mm256_abs_epi8(ws[i]);
            }
            const int64_t off = xo + (c >> 2) * 64 + (c & 3) * 4;
#pragma GCC unroll 4
            for (int j = 0; j < T; j++) {
                int32_t x4;
                memcpy(&x4, xq[j] + off, 4);
                __m256i xv = _mm256_set1_epi32(x4);
#pragma GCC unroll 2
                for (int i = 0; i < RH; i++) {
                    __m256i p16 = _mm256_maddubs_epi16(wa[i], _mm256_sign_epi8(xv, ws[i]));
                    ai[i][j] = _mm256_add_epi32(ai[i][j], _mm256_madd_epi16(p16, ones));
                }
            }
        }
        __m256 dw[2];
#pragma GCC unroll 2
        for (int i = 0; i < RH; i++)
            dw[i] = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(wd[i] + b * 16)));
        const int64_t dofs = (b >> 2) * 16 + (b & 3) * 4;
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) {
            __m256 dx = _mm256_broadcast_ss(xd[j] + dofs);
#pragma GCC unroll 2
            for (int i = 0; i < RH; i++)
                acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ai[i][j]), _mm256_mul_ps(dw[i], dx),
                                            acc[i][j]);
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < T; j++)
#pragma GCC unroll 2
        for (int i = 0; i < RH; i++) {
            int64_t r = (u + i) * 8;
            float *y = m->y + (t + j) * n_out + r;
            if (n_out - r >= 8)
                _mm256_storeu_ps(y, acc[i][j]);
            else
                store_tail(y, n_out - r, acc[i][j]);
        }
}

#define DEF_PTILE(NAME, TYPE, R, T)                                                                \
    static void NAME##_##R##x##T(const struct tl__mm *m, int64_t u, int64_t t)                     \
    {                                                                                              \
        ptile(m, u, t, R, T);                                                                      \
    }
TL__TILES_4(DEF_PTILE, qp, TL_DTYPE_Q8_0, TL_AVX2_PH)
#if TL_AVX2_PH != 1
TL__TILES_4(DEF_PTILE, qp, TL_DTYPE_Q8_0, 1)
#endif
static const tl__tile_fn qp_table[2][5] = {TL__TILE_LIST_4(qp, 1), TL__TILE_LIST_4(qp, TL_AVX2_PH)};

static void qp_rows(const struct tl__mm *m, int64_t r0, int64_t r1)
{
    TL_ASSERT(r0 % TL__QP_ROWS == 0 && PT <= 4 && PH <= 2);
    const int64_t h0 = r0 / 8, h1 = (r1 + 7) / 8; // 8-row halves (the last may be partial)
    const int64_t chunk =
        tl__even_chunk(m->n_tok, (int64_t)(P_CHUNK_BYTES / m->xq_stride) / PT * PT, PT);
    tl__tile_walk(m, h0, h1, PH, PT, chunk, qp_table[1], qp_table[0]);
}

// ---- matmul: packed F32 / F16 / BF16 weights (tl_weight_prepare) -------------------------------
//
// Column k of 8 rows (half a packed group) is one load, converted to f32 once and multiplied by
// x[t][k] broadcast for the T tokens: RH halves x T accumulators with rows in the lanes. Each
// (row, token) lane computes acc = fma(w[k], x[k], acc) for k in order in every tile shape.

// (TL_AVX2_GH and TL_AVX2_GT, the tile shape, are set in avx2_impl.h: the op table publishes GT
// as x_tile.)
#ifndef TL_AVX2_GPF
#define TL_AVX2_GPF 4096
#endif
enum { GH = TL_AVX2_GH, GT = TL_AVX2_GT };

static ALWAYS_INLINE __m256 load_col8(const int type, const void *p)
{
    if (type == TL_DTYPE_F32) return _mm256_load_ps(p);
    __m128i h = _mm_load_si128((const __m128i *)p);
    if (type == TL_DTYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static ALWAYS_INLINE void gtile(const struct tl__mm *m, int64_t u, int64_t t, const int type,
                                const int RH, const int T)
{
    const struct tl_weight *w = m->w;
    const int64_t n = w->n_in, n_out = w->n_out;
    const size_t col = TL__QP_ROWS * (type == TL_DTYPE_F32 ? 4 : 2); // bytes per column
    const char *wp[2];
    __m256 acc[2][6];
    // token j's x[k] at xs[k * S + j] (an interleaved tile, or one token's row)
    const int64_t S = m->x_tile ? m->x_tile : 1;
    const float *xs = m->x + t * n;
#pragma GCC unroll 2
    for (int i = 0; i < RH; i++)
        wp[i] = (const char *)tl__pk_group(w, (u + i) / 2) + ((u + i) & 1) * (col / 2);
#pragma GCC unroll 2
    for (int i = 0; i < RH; i++)
#pragma GCC unroll 6
        for (int j = 0; j < T; j++)
            acc[i][j] = _mm256_setzero_ps();
    for (int64_t k = 0; k < n; k++) {
        __m256 wv[2];
#pragma GCC unroll 2
        for (int i = 0; i < RH; i++) {
            _mm_prefetch(wp[i] + k * col + TL_AVX2_GPF, _MM_HINT_T0);
            wv[i] = load_col8(type, wp[i] + k * col);
        }
#pragma GCC unroll 6
        for (int j = 0; j < T; j++) {
            __m256 xv = _mm256_broadcast_ss(xs + k * S + j);
#pragma GCC unroll 2
            for (int i = 0; i < RH; i++)
                acc[i][j] = _mm256_fmadd_ps(wv[i], xv, acc[i][j]);
        }
    }
#pragma GCC unroll 6
    for (int j = 0; j < T; j++)
#pragma GCC unroll 2
        for (int i = 0; i < RH; i++) {
            int64_t r = (u + i) * 8;
            float *y = m->y + (t + j) * n_out + r;
            if (n_out - r >= 8)
                _mm256_storeu_ps(y, acc[i][j]);
            else
                store_tail(y, n_out - r, acc[i][j]);
        }
}

#define DEF_GTILE(NAME, TYPE, R, T)                                                                \
    static void NAME##_##R##x##T(const struct tl__mm *m, int64_t u, int64_t t)                     \
    {                                                                                              \
        gtile(m, u, t, TYPE, R, T);                                                                \
    }
TL__FLOAT_TILES(6, DEF_GTILE, gk, TL_AVX2_GH)
#if TL_AVX2_GH != 1
TL__FLOAT_TILES(6, DEF_GTILE, gk, 1)
#endif
// [type][r_full][nt]: r_full 1 = GH halves, 0 = one half.
static const tl__tile_fn gk_table[3][2][7] = TL__FLOAT_TILE_TABLE(6, gk, TL_AVX2_GH);

static void gp_rows(const struct tl__mm *m, int64_t r0, int64_t r1)
{
    TL_ASSERT(r0 % TL__QP_ROWS == 0 && GT <= 6 && GH <= 2);
    TL_ASSERT(m->x_tile == GT || (m->x_tile == 0 && m->n_tok == 1));
    const struct tl_weight *w = m->w;
    const int ti = w->type == TL_DTYPE_F32 ? 0 : w->type == TL_DTYPE_F16 ? 1 : 2;
    const int64_t h0 = r0 / 8, h1 = (r1 + 7) / 8; // 8-row halves (the last may be partial)
    const int64_t chunk =
        tl__even_chunk(m->n_tok, (int64_t)(P_CHUNK_BYTES / ((size_t)w->n_in * 4)) / GT * GT, GT);
    tl__tile_walk(m, h0, h1, GH, GT, chunk, gk_table[ti][1], gk_table[ti][0]);
}

void tl__avx2_matmul_rows(const struct tl__mm *m, int64_t r0, int64_t r1)
{
    if (m->w->layout == TL_WEIGHT_PACKED) {
        (m->w->type == TL_DTYPE_Q8_0 ? qp_rows : gp_rows)(m, r0, r1);
        return;
    }
    const struct tileset *ts = tiles_for(m->w->type);
    size_t tok_bytes = m->w->type == TL_DTYPE_Q8_0 ? m->xq_stride : (size_t)m->w->n_in * 4;
    const int64_t chunk =
        tl__even_chunk(m->n_tok, (int64_t)(CHUNK_BYTES / tok_bytes) / ts->T * ts->T, ts->T);
    tl__tile_walk(m, r0, r1, ts->R, ts->T, chunk, ts->full, ts->one);
}
