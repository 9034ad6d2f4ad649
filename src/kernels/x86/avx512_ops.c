/*
 * The AVX-512 kernel variant (F, BW, VL, DQ, VNNI; compiled with those -m flags and only called
 * when the CPU has them).
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
 * Matmul, file layout (weights not prepared): micro-tiles of R rows x T tokens where each
 * (row, token) pair owns a 16-lane accumulator summed horizontally at the end.
 *   - F32/F16/BF16: 16 lanes per step; acc = fma(w, x, acc); the tail (n_in % 16) uses masked
 *     loads that read zeros, so it is the same arithmetic as a full step. Rows are cut into
 *     k-blocks of 512 (accumulators parked bitwise between blocks); with more tokens than one
 *     tile, an F16/BF16 weight block is converted to f32 once into an L1 buffer.
 *   - Q8_0: a superchunk of four 32-blocks per step (layout in kernels_impl.h). The weights
 *     are made unsigned (w ^ 0x80 = w + 128) so VNNI vpdpbusd (u8 x s8) can multiply them with
 *     the signed activation bytes; the surplus 128 * sum(x) is cancelled exactly by starting
 *     the int32 accumulator from the activation row's precomputed bias. Two vpdpbusd (bytes
 *     0-15 and 16-31 of the four blocks) leave each block's exact sum spread over 4 lanes; then
 *     acc = fma(float(sumi), d_w * d_x, acc): 5 ALU ops per 128 MACs and (row, token) pair.
 * Every (row, token) element sees the same instruction sequence in every tile shape (full tile,
 * token tail, row tail, k-block), and the final horizontal sums (one transpose-add tree for 16
 * accumulators, or the same order for one) give each element the same value whatever it is
 * reduced with, so results do not depend on the batch. Tile shapes come from one always-inline
 * template instantiated per shape.
 *
 * Elementwise ops use a vectorized exp (Cody-Waite reduction, degree-7 polynomial, scalef),
 * accurate to about 1 ulp. Attention handles all the query heads of a range of KV heads of one
 * token in one pass over its context, with an online softmax (see the attention sections).
 *
 * Thread model: pure functions over caller-owned memory; re-entrant.
 */
#include "kernels/kernels_impl.h"

#include "core/error.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

// ---- helpers ----------------------------------------------------------------------------------

static ALWAYS_INLINE __mmask16 tail_mask16(int64_t n)
{
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
}

// Fixed-order horizontal sum (the same for every caller: part of the determinism contract).
static ALWAYS_INLINE float hsum512(__m512 v)
{
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

// exp(x) for 16 lanes; NaN maps to 0 (inputs here are differences from a maximum).
static ALWAYS_INLINE __m512 exp512(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-200.f)); // NaN -> -200; far below the denormals
    x = _mm512_min_ps(x, _mm512_set1_ps(100.f));  // beyond 88.73 the result is inf anyway
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
    __m512 p = _mm512_set1_ps(1.f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
    return _mm512_scalef_ps(p, n);
}

// r[i] = sum of the lanes of v[i], for 16 vectors. Every output is summed in the same order:
// per 128-bit lane (x0 + x2) + (x1 + x3), then (L0 + L1) + (L2 + L3); hsum_tree() below gives
// the identical value for one vector, so results do not depend on how vectors are grouped.
static ALWAYS_INLINE __m512 reduce16(const __m512 *v)
{
    __m512 t[8], u[4], w[2];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
        t[k] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * k], v[2 * k + 1]),
                             _mm512_unpackhi_ps(v[2 * k], v[2 * k + 1]));
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        __m512d a = _mm512_castps_pd(t[2 * k]), b = _mm512_castps_pd(t[2 * k + 1]);
        u[k] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
#pragma GCC unroll 2
    for (int k = 0; k < 2; k++)
        w[k] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * k], u[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(u[2 * k], u[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// The sum of one vector's lanes in reduce16's order.
static ALWAYS_INLINE float hsum_tree(__m512 v)
{
    __m512 a = _mm512_add_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(1, 0, 3, 2)));
    a = _mm512_add_ps(a, _mm512_permute_ps(a, _MM_SHUFFLE(2, 3, 0, 1)));
    a = _mm512_add_ps(a, _mm512_shuffle_f32x4(a, a, _MM_SHUFFLE(2, 3, 0, 1)));
    a = _mm512_add_ps(a, _mm512_shuffle_f32x4(a, a, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm512_cvtss_f32(a);
}

// Sums each accumulator of an R x T tile and stores it at y[j * y_stride + i]. A 4-row tile
// reduces 4 tokens x 4 rows at once (one transpose-add tree for 16 vectors); other shapes sum
// vector by vector in the same order, so every element gets the same value in every shape.
static ALWAYS_INLINE void store_tile(__m512 acc[8][8], float *y, int64_t y_stride, const int R,
                                     const int T)
{
    if (R == 4) {
#pragma GCC unroll 2
        for (int j0 = 0; j0 < T; j0 += 4) {
            __m512 v[16];
#pragma GCC unroll 4
            for (int jj = 0; jj < 4; jj++)
#pragma GCC unroll 4
                for (int i = 0; i < 4; i++)
                    v[jj * 4 + i] = j0 + jj < T ? acc[i][j0 + jj] : _mm512_setzero_ps();
            _Alignas(64) float r[16];
            _mm512_store_ps(r, reduce16(v));
#pragma GCC unroll 4
            for (int jj = 0; jj < 4; jj++)
                if (j0 + jj < T) memcpy(y + (j0 + jj) * y_stride, r + 4 * jj, 4 * sizeof(float));
        }
    } else {
#pragma GCC unroll 8
        for (int j = 0; j < T; j++)
#pragma GCC unroll 8
            for (int i = 0; i < R; i++)
                y[j * y_stride + i] = hsum_tree(acc[i][j]);
    }
}

// ---- activation quantization ------------------------------------------------------------------

static void quantize_x(const float *x, int64_t n, void *dst)
{
    struct tl__xq_row row = tl__xq_view(dst, n);
    tl__xq_clear_pad(dst, n);
    int64_t n_super = (n + TL__XQ_SUPER - 1) / TL__XQ_SUPER;
    const __m512 sign = _mm512_set1_ps(-0.f);
    const __m512i expand4 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    for (int64_t s = 0; s < n_super; s++) {
        _Alignas(16) float d[4];
        __m128i q8[2][4]; // [half][block]
        for (int g = 0; g < 4; g++) {
            int64_t i0 = s * 128 + g * 32;
            __m512 v0 = _mm512_maskz_loadu_ps(n - i0 > 0 ? tail_mask16(n - i0) : 0, x + i0);
            __m512 v1 =
                _mm512_maskz_loadu_ps(n - i0 > 16 ? tail_mask16(n - i0 - 16) : 0, x + i0 + 16);
            __m512 m = _mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1));
            float amax = _mm512_reduce_max_ps(m);
            d[g] = amax / 127.f;
            float id = amax != 0.f ? 127.f / amax : 0.f;
            __m512 vid = _mm512_set1_ps(id);
            // cvtps rounds with MXCSR's mode: nearest even, like the reference's nearbyintf
            q8[0][g] = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, vid)));
            q8[1][g] = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, vid)));
        }
        __m512i half[2];
        for (int h = 0; h < 2; h++) {
            half[h] = _mm512_inserti32x4(_mm512_castsi128_si512(q8[h][0]), q8[h][1], 1);
            half[h] = _mm512_inserti32x4(half[h], q8[h][2], 2);
            half[h] = _mm512_inserti32x4(half[h], q8[h][3], 3);
            _mm512_store_si512(row.qs + s * 128 + h * 64, half[h]);
        }
        const __m512i ones = _mm512_set1_epi8(1);
        __m512i sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, half[0]);
        sum = _mm512_dpbusd_epi32(sum, ones, half[1]);
        _mm512_store_si512(row.bias + s * 16,
                           _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, 7)));
        for (int g = 0; g < 4; g++) // per-block totals for the packed-weight kernel
            row.bsum[s * 4 + g] = row.bias[s * 16 + 4 * g] + row.bias[s * 16 + 4 * g + 1] +
                                  row.bias[s * 16 + 4 * g + 2] + row.bias[s * 16 + 4 * g + 3];
        _mm512_store_ps(row.d + s * 16,
                        _mm512_permutexvar_ps(expand4, _mm512_castps128_ps512(_mm_load_ps(d))));
    }
}

// ---- matmul: F32 / F16 / BF16 weights ---------------------------------------------------------
//
// One template, fk(), computes an R x T tile over one k-block: each step loads (for F16/BF16
// converts) 16 elements of the R weight rows into registers once and uses them for T tokens.
// Accumulators of an unfinished tile are parked in memory between k-blocks (bitwise exact), so
// k-blocking changes no arithmetic. For F16/BF16 with more tokens than one tile, a row block's
// k-block is first converted to an f32 buffer once and the F32 template runs on it; the values and
// the operation sequence are the same as converting in registers.

// Tile shape and blocking, measured on Sapphire Rapids (bench_kernels): 4 x 4 with the weight
// vectors in registers beat 8 x 3 with the activations in registers, and 4 x 6. The -D hooks
// let the benchmark try other shapes without editing the file.
#ifndef TL_AVX512_FR
#define TL_AVX512_FR 4
#define TL_AVX512_FT 4
#define TL_AVX512_KC 512
#endif
enum { FR = TL_AVX512_FR, FT = TL_AVX512_FT }; // float tile: rows x tokens (each <= 8)
enum { KC = TL_AVX512_KC }; // k-block (elements, a multiple of 16): FR x KC f32 weights in L1
enum { CHUNK_TOK = FT * (48 / FT) }; // tokens per chunk: their parked accumulators stay in L1
enum { ACC_LOAD = 1, ACC_REDUCE = 2 };

// 16 weights of `type` at element k of row w, converted to f32 (lanes past `mask` read 0).
static ALWAYS_INLINE __m512 load_w(int type, const void *w, int64_t k, __mmask16 mask, int full)
{
    if (type == TL_DTYPE_F32) {
        const float *p = (const float *)w + k;
        return full ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(mask, p);
    }
    const uint16_t *p = (const uint16_t *)w + k;
    __m256i h = full ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi16(mask, p);
    if (type == TL_DTYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

struct fblock {
    const void *w;    // row 0 of the tile at the k-block start, elements of `type`
    size_t w_stride;  // elements between rows
    const float *x;   // token 0 of the tile at the k-block start
    size_t x_stride;  // elements between tokens (n_in)
    int64_t kn;       // elements in this k-block (only the last block may end in a partial step)
    __m512 *acc;      // R x T parked accumulators (ACC_LOAD: read first; else start at 0)
    float *y;         // (ACC_REDUCE) output of row 0, token 0
    int64_t y_stride; // n_out
    int prefetch;     // w streams from memory (not a converted block): prefetch ahead
};

// One k-step of a tile: 16 elements of R weight rows and T tokens. `full` = 0 is the partial
// last step: masked loads read zeros, so it is the same arithmetic as a full step.
static ALWAYS_INLINE void fk_step(__m512 acc[8][8], const char *const *wp, const float *const *xp,
                                  int64_t k, __mmask16 mask, const int full, const int pf,
                                  const int type, const int R, const int T)
{
    const size_t esz = type == TL_DTYPE_F32 ? 4 : 2;
    __m512 wv[8];
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) {
        if (pf) _mm_prefetch(wp[i] + k * esz + 1024, _MM_HINT_T0);
        wv[i] = load_w(type, wp[i], k, mask, full);
    }
#pragma GCC unroll 8
    for (int j = 0; j < T; j++) {
        __m512 xv = full ? _mm512_loadu_ps(xp[j] + k) : _mm512_maskz_loadu_ps(mask, xp[j] + k);
#pragma GCC unroll 8
        for (int i = 0; i < R; i++)
            acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
    }
}

static ALWAYS_INLINE void fk(const struct fblock *b, int mode, const int type, const int R,
                             const int T)
{
    const size_t esz = type == TL_DTYPE_F32 ? 4 : 2;
    const char *wp[8];
    const float *xp[8];
    __m512 acc[8][8];
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
        wp[i] = (const char *)b->w + i * b->w_stride * esz;
#pragma GCC unroll 8
    for (int j = 0; j < T; j++)
        xp[j] = b->x + j * b->x_stride;
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 8
        for (int j = 0; j < T; j++)
            acc[i][j] = (mode & ACC_LOAD) ? b->acc[i * T + j] : _mm512_setzero_ps();
    const int64_t kfull = b->kn & ~(int64_t)15;
    int64_t k = 0;
    // the loops are split so the main one carries no masks or flags
    if (b->prefetch)
        for (; k < kfull; k += 16)
            fk_step(acc, wp, xp, k, 0xffff, 1, 1, type, R, T);
    else
        for (; k < kfull; k += 16)
            fk_step(acc, wp, xp, k, 0xffff, 1, 0, type, R, T);
    if (k < b->kn) fk_step(acc, wp, xp, k, tail_mask16(b->kn - k), 0, 0, type, R, T);
    if (mode & ACC_REDUCE) {
        store_tile(acc, b->y, b->y_stride, R, T);
    } else {
#pragma GCC unroll 8
        for (int i = 0; i < R; i++)
#pragma GCC unroll 8
            for (int j = 0; j < T; j++)
                b->acc[i * T + j] = acc[i][j];
    }
}

typedef void (*fk_fn)(const struct fblock *b, int mode);

#define DEF_FK(NAME, TYPE, R, T)                                                                   \
    static void NAME##_##R##x##T(const struct fblock *b, int mode)                                 \
    {                                                                                              \
        fk(b, mode, TYPE, R, T);                                                                   \
    }
#define DEF_FK_R(NAME, TYPE, R)                                                                    \
    DEF_FK(NAME, TYPE, R, 1)                                                                       \
    DEF_FK(NAME, TYPE, R, 2)                                                                       \
    DEF_FK(NAME, TYPE, R, 3)                                                                       \
    DEF_FK(NAME, TYPE, R, 4)                                                                       \
    DEF_FK(NAME, TYPE, R, 5)                                                                       \
    DEF_FK(NAME, TYPE, R, 6) DEF_FK(NAME, TYPE, R, 7) DEF_FK(NAME, TYPE, R, 8)
#define DEF_FK_R_(NAME, TYPE, R) DEF_FK_R(NAME, TYPE, R)
#define FK_LIST(NAME, R)                                                                           \
    {                                                                                              \
        0, NAME##_##R##x1, NAME##_##R##x2, NAME##_##R##x3, NAME##_##R##x4, NAME##_##R##x5,         \
            NAME##_##R##x6, NAME##_##R##x7, NAME##_##R##x8                                         \
    }
#define FK_LIST_(NAME, R) FK_LIST(NAME, R)
DEF_FK_R_(fk_f32, TL_DTYPE_F32, TL_AVX512_FR)
DEF_FK_R(fk_f32, TL_DTYPE_F32, 1)
DEF_FK_R_(fk_f16, TL_DTYPE_F16, TL_AVX512_FR)
DEF_FK_R(fk_f16, TL_DTYPE_F16, 1)
DEF_FK_R_(fk_bf16, TL_DTYPE_BF16, TL_AVX512_FR)
DEF_FK_R(fk_bf16, TL_DTYPE_BF16, 1)

// [type][r_full][nt]: r_full 1 = FR rows, 0 = one row.
static const fk_fn fk_table[3][2][9] = {
    {FK_LIST(fk_f32, 1), FK_LIST_(fk_f32, TL_AVX512_FR)},
    {FK_LIST(fk_f16, 1), FK_LIST_(fk_f16, TL_AVX512_FR)},
    {FK_LIST(fk_bf16, 1), FK_LIST_(fk_bf16, TL_AVX512_FR)},
};

// Converts rows x kn elements of F16/BF16 (row stride `stride` elements) to f32 rows of KC.
static void convert_block(int type, const uint16_t *src, size_t stride, int rows, int64_t kn,
                          float *dst)
{
    for (int i = 0; i < rows; i++)
        for (int64_t k = 0; k < kn; k += 16) {
            __mmask16 m = tail_mask16(kn - k);
            _mm512_store_ps(dst + i * KC + k, load_w(type, src + i * stride, k, m, 0));
        }
}

static void float_rows(const struct tl__mm *m, int64_t r0, int64_t r1)
{
    const struct tl_weight *w = m->w;
    const int64_t n = w->n_in;
    const int ti = w->type == TL_DTYPE_F32 ? 0 : w->type == TL_DTYPE_F16 ? 1 : 2;
    const size_t esz = ti == 0 ? 4 : 2, w_stride = w->row_bytes / esz;
    _Alignas(64) float wbuf[FR * KC];
    _Alignas(64) __m512 accbuf[(CHUNK_TOK + FT - 1) / FT * FR * FT];
    for (int64_t c0 = 0; c0 < m->n_tok; c0 += CHUNK_TOK) {
        const int64_t c1 = c0 + CHUNK_TOK < m->n_tok ? c0 + CHUNK_TOK : m->n_tok;
        // With several token tiles, converting a weight block once beats converting per tile.
        const int convert = ti != 0 && c1 - c0 > FT;
        for (int64_t r = r0; r < r1;) {
            const int rows = r1 - r >= FR ? FR : 1;
            const char *wrow = (const char *)w->data + (size_t)r * w->row_bytes;
            for (int64_t kb = 0; kb < n; kb += KC) {
                const int64_t kn = n - kb < KC ? n - kb : KC;
                const int mode = (kb > 0 ? ACC_LOAD : 0) | (kb + KC >= n ? ACC_REDUCE : 0);
                struct fblock b = {.kn = kn, .x_stride = (size_t)n, .y_stride = w->n_out};
                int tt = ti;
                if (convert) {
                    convert_block(w->type, (const uint16_t *)wrow + kb, w_stride, rows, kn, wbuf);
                    b.w = wbuf;
                    b.w_stride = KC;
                    tt = 0;
                } else {
                    b.w = wrow + (size_t)kb * esz;
                    b.w_stride = w_stride;
                    b.prefetch = 1;
                }
                for (int64_t t = c0; t < c1; t += FT) {
                    const int nt = c1 - t < FT ? (int)(c1 - t) : FT;
                    b.x = m->x + t * n + kb;
                    b.acc = accbuf + (t - c0) / FT * (FR * FT);
                    b.y = m->y + t * w->n_out + r;
                    fk_table[tt][rows == FR][nt](&b, mode);
                }
            }
            r += rows;
        }
    }
}

// ---- matmul: Q8_0 weights ---------------------------------------------------------------------

#ifndef TL_AVX512_QR
#define TL_AVX512_QR 4
#define TL_AVX512_QT 8
#endif
// 4 x 8 measured best on Sapphire Rapids (167 GOP/s vs 144 for 4 x 4, 153 for 4 x 6, 141 for
// 3 x 8), although its 32 accumulators do not all fit in registers.
enum { QR = TL_AVX512_QR, QT = TL_AVX512_QT }; // Q8_0 tile: rows x tokens (each <= 8)

// Four blocks (a superchunk) of a Q8_0 row as the kernel wants them: bytes 0-15 of each block
// in one register and bytes 16-31 in another, made unsigned (w ^ 0x80 = w + 128), and the four
// scales expanded to 4 lanes each. Blocks past the row's end (nbl < 4) read as zero.
static ALWAYS_INLINE void q8_load_w(const struct tl_block_q8_0 *b, int nbl, __m512i *wlo,
                                    __m512i *whi, __m512 *dw)
{
    __m128i lo[4], hi[4];
    uint16_t d[8] = {0};
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        if (g < nbl) {
            lo[g] = _mm_loadu_si128((const __m128i *)b[g].qs);
            hi[g] = _mm_loadu_si128((const __m128i *)(b[g].qs + 16));
            d[g] = b[g].d;
        } else {
            lo[g] = hi[g] = _mm_setzero_si128();
        }
    }
    __m512i l = _mm512_inserti32x4(_mm512_castsi128_si512(lo[0]), lo[1], 1);
    l = _mm512_inserti32x4(l, lo[2], 2);
    l = _mm512_inserti32x4(l, lo[3], 3);
    __m512i h = _mm512_inserti32x4(_mm512_castsi128_si512(hi[0]), hi[1], 1);
    h = _mm512_inserti32x4(h, hi[2], 2);
    h = _mm512_inserti32x4(h, hi[3], 3);
    *wlo = _mm512_xor_si512(l, _mm512_set1_epi8((char)0x80));
    *whi = _mm512_xor_si512(h, _mm512_set1_epi8((char)0x80));
    __m128 df = _mm_cvtph_ps(_mm_loadu_si128((const __m128i *)d));
    *dw = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                                _mm512_castps128_ps512(df));
}

static ALWAYS_INLINE void qtile(const struct tl__mm *m, int64_t r, int64_t t, const int R,
                                const int T)
{
    const struct tl_weight *w = m->w;
    const int64_t n = w->n_in, nb = n / TL_QK8_0;
    const struct tl_block_q8_0 *wr[8];
    struct tl__xq_row xr[8];
    __m512 acc[8][8];
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
            acc[i][j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b += 4) {
        const int nbl = nb - b < 4 ? (int)(nb - b) : 4;
        __m512i wlo[8], whi[8];
        __m512 dw[8];
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            // software prefetch half a KiB ahead: measured +25% at n_tok = 1 from DRAM
            _mm_prefetch((const char *)(wr[i] + b) + 512, _MM_HINT_T0);
            _mm_prefetch((const char *)(wr[i] + b) + 576, _MM_HINT_T0);
            _mm_prefetch((const char *)(wr[i] + b) + 640, _MM_HINT_T0);
            if (nbl == 4) // full superchunks get a branch-free copy of the loader
                q8_load_w(wr[i] + b, 4, &wlo[i], &whi[i], &dw[i]);
            else
                q8_load_w(wr[i] + b, nbl, &wlo[i], &whi[i], &dw[i]);
        }
        const int64_t s = b / 4;
#pragma GCC unroll 8
        for (int j = 0; j < T; j++) {
            __m512i xlo = _mm512_load_si512(xr[j].qs + s * 128);
            __m512i xhi = _mm512_load_si512(xr[j].qs + s * 128 + 64);
            __m512i bias = _mm512_load_si512(xr[j].bias + s * 16);
            __m512 dx = _mm512_load_ps(xr[j].d + s * 16);
#pragma GCC unroll 8
            for (int i = 0; i < R; i++) {
                __m512i a = _mm512_dpbusd_epi32(bias, wlo[i], xlo);
                a = _mm512_dpbusd_epi32(a, whi[i], xhi);
                acc[i][j] =
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), _mm512_mul_ps(dw[i], dx), acc[i][j]);
            }
        }
    }
    store_tile(acc, m->y + t * w->n_out + r, w->n_out, R, T);
}

typedef void (*qk_fn)(const struct tl__mm *m, int64_t r, int64_t t);

#define DEF_QK(NAME, TYPE, R, T)                                                                   \
    static void NAME##_##R##x##T(const struct tl__mm *m, int64_t r, int64_t t)                     \
    {                                                                                              \
        qtile(m, r, t, R, T);                                                                      \
    }
#define DEF_QK_R(R)                                                                                \
    DEF_QK(q8, 0, R, 1)                                                                            \
    DEF_QK(q8, 0, R, 2)                                                                            \
    DEF_QK(q8, 0, R, 3)                                                                            \
    DEF_QK(q8, 0, R, 4)                                                                            \
    DEF_QK(q8, 0, R, 5) DEF_QK(q8, 0, R, 6) DEF_QK(q8, 0, R, 7) DEF_QK(q8, 0, R, 8)
#define DEF_QK_R_(R) DEF_QK_R(R)
DEF_QK_R_(TL_AVX512_QR)
DEF_QK_R(1)
static const qk_fn qk_table[2][9] = {FK_LIST(q8, 1), FK_LIST_(q8, TL_AVX512_QR)};

// Bytes of quantized activations a token chunk may occupy: it stays in L2 while rows stream.
enum { Q_CHUNK_BYTES = 512 * 1024 };

static void q8_rows(const struct tl__mm *m, int64_t r0, int64_t r1)
{
    const int64_t chunk =
        tl__even_chunk(m->n_tok, (int64_t)(Q_CHUNK_BYTES / m->xq_stride) / QT * QT, QT);
    for (int64_t c0 = 0; c0 < m->n_tok; c0 += chunk) {
        int64_t c1 = c0 + chunk < m->n_tok ? c0 + chunk : m->n_tok;
        for (int64_t r = r0; r < r1;) {
            const int rows = r1 - r >= QR ? QR : 1;
            for (int64_t t = c0; t < c1; t += QT) {
                int nt = c1 - t < QT ? (int)(c1 - t) : QT;
                qk_table[rows == QR][nt](m, r, t);
            }
            r += rows;
        }
    }
}

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
#define DEF_PK(R, T)                                                                               \
    static void qp_##R##x##T(const struct tl__mm *m, const struct pblock *pb)                      \
    {                                                                                              \
        ptile(m, pb, R, T);                                                                        \
    }
#define DEF_PK_R(R)                                                                                \
    DEF_PK(R, 1)                                                                                   \
    DEF_PK(R, 2)                                                                                   \
    DEF_PK(R, 3)                                                                                   \
    DEF_PK(R, 4)                                                                                   \
    DEF_PK(R, 5) DEF_PK(R, 6) DEF_PK(R, 7) DEF_PK(R, 8)
#define DEF_PK_R_(R) DEF_PK_R(R)
DEF_PK_R_(TL_AVX512_PR)
#if TL_AVX512_PR != 1
DEF_PK_R(1)
#endif
static const qp_fn qp_table[2][9] = {FK_LIST(qp, 1), FK_LIST_(qp, TL_AVX512_PR)};

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

static void qp_rows(const struct tl__mm *m, int64_t r0, int64_t r1)
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

#ifndef TL_AVX512_GR
#define TL_AVX512_GR 2
#define TL_AVX512_GT 12
#endif
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
#define DEF_GK_R(NAME, TYPE, R)                                                                    \
    DEF_GK(NAME, TYPE, R, 1)                                                                       \
    DEF_GK(NAME, TYPE, R, 2)                                                                       \
    DEF_GK(NAME, TYPE, R, 3)                                                                       \
    DEF_GK(NAME, TYPE, R, 4)                                                                       \
    DEF_GK(NAME, TYPE, R, 5)                                                                       \
    DEF_GK(NAME, TYPE, R, 6)                                                                       \
    DEF_GK(NAME, TYPE, R, 7)                                                                       \
    DEF_GK(NAME, TYPE, R, 8)                                                                       \
    DEF_GK(NAME, TYPE, R, 9)                                                                       \
    DEF_GK(NAME, TYPE, R, 10) DEF_GK(NAME, TYPE, R, 11) DEF_GK(NAME, TYPE, R, 12)
#define DEF_GK_R_(NAME, TYPE, R) DEF_GK_R(NAME, TYPE, R)
#define GK_LIST(NAME, R)                                                                           \
    {                                                                                              \
        0, NAME##_##R##x1, NAME##_##R##x2, NAME##_##R##x3, NAME##_##R##x4, NAME##_##R##x5,         \
            NAME##_##R##x6, NAME##_##R##x7, NAME##_##R##x8, NAME##_##R##x9, NAME##_##R##x10,       \
            NAME##_##R##x11, NAME##_##R##x12                                                       \
    }
#define GK_LIST_(NAME, R) GK_LIST(NAME, R)
DEF_GK_R_(gk_f32, TL_DTYPE_F32, TL_AVX512_GR)
DEF_GK_R_(gk_f16, TL_DTYPE_F16, TL_AVX512_GR)
DEF_GK_R_(gk_bf16, TL_DTYPE_BF16, TL_AVX512_GR)
#if TL_AVX512_GR != 1
DEF_GK_R(gk_f32, TL_DTYPE_F32, 1)
DEF_GK_R(gk_f16, TL_DTYPE_F16, 1)
DEF_GK_R(gk_bf16, TL_DTYPE_BF16, 1)
#endif
// [type][r_full][nt]: r_full 1 = GR groups, 0 = one group.
static const qp_fn gk_table[3][2][13] = {
    {GK_LIST(gk_f32, 1), GK_LIST_(gk_f32, TL_AVX512_GR)},
    {GK_LIST(gk_f16, 1), GK_LIST_(gk_f16, TL_AVX512_GR)},
    {GK_LIST(gk_bf16, 1), GK_LIST_(gk_bf16, TL_AVX512_GR)},
};

static void gp_rows(const struct tl__mm *m, int64_t r0, int64_t r1)
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

static int row_align(enum tl_dtype type)
{
    return type == TL_DTYPE_Q8_0 ? QR : FR;
}

static void matmul_rows(const struct tl__mm *m, int64_t r0, int64_t r1)
{
    const bool packed = m->w->layout == TL_WEIGHT_PACKED;
    if (m->w->type == TL_DTYPE_Q8_0)
        (packed ? qp_rows : q8_rows)(m, r0, r1);
    else
        (packed ? gp_rows : float_rows)(m, r0, r1);
}

// ---- row-wise ops -----------------------------------------------------------------------------

static void rmsnorm(const float *x, const float *w, float eps, int64_t n, float *y)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
        a0 = _mm512_fmadd_ps(v0, v0, a0);
        a1 = _mm512_fmadd_ps(v1, v1, a1);
    }
    for (; i < n; i += 16) {
        __m512 v = _mm512_maskz_loadu_ps(tail_mask16(n - i), x + i);
        a0 = _mm512_fmadd_ps(v, v, a0);
    }
    float ss = hsum512(_mm512_add_ps(a0, a1));
    __m512 s = _mm512_set1_ps((float)(1.0 / sqrt((double)ss / (double)n + eps)));
    for (i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask16(n - i);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), s);
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + i)));
    }
}

static void swiglu(const float *gate, const float *up, float *out, int64_t n)
{
    const __m512 one = _mm512_set1_ps(1.f);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask16(n - i);
        __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
        __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
        __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, up + i)));
    }
}

static void add(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask16(n - i);
        __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i), _mm512_maskz_loadu_ps(m, x + i));
        _mm512_mask_storeu_ps(y + i, m, v);
    }
}

// exp(x - max) in place; returns the sum (fixed order: 16 lane sums, then hsum512).
static float exp_sum(float *x, int64_t n, float mx)
{
    __m512 vmx = _mm512_set1_ps(mx), sum = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask16(n - i);
        __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vmx));
        e = _mm512_maskz_mov_ps(m, e);
        sum = _mm512_add_ps(sum, e);
        _mm512_mask_storeu_ps(x + i, m, e);
    }
    return hsum512(sum);
}

static float max_of(const float *x, int64_t n)
{
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int64_t i = 0; i < n; i += 16)
        mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(mx, tail_mask16(n - i), x + i));
    return _mm512_reduce_max_ps(mx);
}

static void scale_by(float *x, int64_t n, float s)
{
    __m512 v = _mm512_set1_ps(s);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask16(n - i);
        _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), v));
    }
}

static void exp_sub(const float *x, float m, float *out, int64_t n)
{
    __m512 vm = _mm512_set1_ps(m);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm));
        _mm512_mask_storeu_ps(out + i, k, e);
    }
}

static void softmax(float *x, int64_t n)
{
    if (n <= 0) return;
    float sum = exp_sum(x, n, max_of(x, n));
    scale_by(x, n, 1.f / sum);
}

// ---- attention --------------------------------------------------------------------------------
//
// Two passes per (token, head) over the context in position order: scores (q . k_j * scale) in
// groups of 16 positions, whose 16 partial-product vectors are summed by one transpose-add tree
// (the add order for position j depends only on j mod 16), then exp/sum, then
// out = sum_j p_j v_j with the head's output dims in registers. Positions are walked through
// the block table without divisions.

static ALWAYS_INLINE __m512 load_kv(int f16, const void *base, size_t idx, __mmask16 m)
{
    if (f16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)base + idx));
    return _mm512_maskz_loadu_ps(m, (const float *)base + idx);
}

// Position iterator over one KV head through a block table.
struct kv_pos {
    const int32_t *table;
    size_t slot_stride, block_elems, head_off, base;
    int64_t blk;
    int slot, bs;
};

static ALWAYS_INLINE void kvp_init(struct kv_pos *p, const struct tl_kv_layer *kv,
                                   const int32_t *table, int kv_head)
{
    p->table = table;
    p->bs = kv->block_size;
    p->slot_stride = (size_t)kv->n_kv_head * kv->head_dim;
    p->block_elems = (size_t)kv->block_size * p->slot_stride;
    p->head_off = (size_t)kv_head * kv->head_dim;
    p->blk = 0;
    p->slot = 0;
    p->base = (size_t)table[0] * p->block_elems + p->head_off;
}

// Element offset of the next position (the table entry of a block is read only when needed).
static ALWAYS_INLINE size_t kvp_next(struct kv_pos *p)
{
    if (p->slot == p->bs) {
        p->slot = 0;
        p->blk++;
        p->base = (size_t)p->table[p->blk] * p->block_elems + p->head_off;
    }
    return p->base + (size_t)(p->slot++) * p->slot_stride;
}

// head_dim <= 128: NQ = ceil(head_dim / 16) vectors per row, held in registers.
static ALWAYS_INLINE void attn_small(const struct tl_kv_layer *kv, const int32_t *table,
                                     int64_t n_ctx, int kv_head, const float *q, float scale,
                                     float *out, float *scores, const int f16, const int NQ)
{
    const int hd = kv->head_dim;
    const __mmask16 last = tail_mask16(hd - (NQ - 1) * 16);
    __m512 qv[8];
#pragma GCC unroll 8
    for (int c = 0; c < NQ; c++)
        qv[c] = _mm512_maskz_loadu_ps(c == NQ - 1 ? last : 0xffff, q + 16 * c);
    struct kv_pos p;
    kvp_init(&p, kv, table, kv_head);
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    for (int64_t j0 = 0; j0 < n_ctx; j0 += 16) {
        const int64_t nu = n_ctx - j0 < 16 ? n_ctx - j0 : 16;
        __m512 part[16];
#pragma GCC unroll 16
        for (int u = 0; u < 16; u++) {
            part[u] = _mm512_setzero_ps();
            if (u < nu) {
                size_t off = kvp_next(&p);
#pragma GCC unroll 8
                for (int c = 0; c < NQ; c++)
                    part[u] = _mm512_fmadd_ps(
                        qv[c], load_kv(f16, kv->k, off + 16 * c, c == NQ - 1 ? last : 0xffff),
                        part[u]);
            }
        }
        __mmask16 m = tail_mask16(nu);
        __m512 s = _mm512_mul_ps(reduce16(part), _mm512_set1_ps(scale));
        _mm512_mask_storeu_ps(scores + j0, m, s);
        vmax = _mm512_mask_max_ps(vmax, m, vmax, s);
    }
    float sum = exp_sum(scores, n_ctx, _mm512_reduce_max_ps(vmax));
    __m512 acc[8];
#pragma GCC unroll 8
    for (int c = 0; c < NQ; c++)
        acc[c] = _mm512_setzero_ps();
    kvp_init(&p, kv, table, kv_head);
    for (int64_t j = 0; j < n_ctx; j++) {
        size_t off = kvp_next(&p);
        __m512 pj = _mm512_set1_ps(scores[j]);
#pragma GCC unroll 8
        for (int c = 0; c < NQ; c++)
            acc[c] = _mm512_fmadd_ps(
                pj, load_kv(f16, kv->v, off + 16 * c, c == NQ - 1 ? last : 0xffff), acc[c]);
    }
    __m512 inv = _mm512_set1_ps(1.f / sum);
#pragma GCC unroll 8
    for (int c = 0; c < NQ; c++)
        _mm512_mask_storeu_ps(out + 16 * c, c == NQ - 1 ? last : 0xffff,
                              _mm512_mul_ps(acc[c], inv));
}

// Any head_dim: the same arithmetic order per element, vectors streamed from memory.
static ALWAYS_INLINE void attn_large(const struct tl_kv_layer *kv, const int32_t *table,
                                     int64_t n_ctx, int kv_head, const float *q, float scale,
                                     float *out, float *scores, float *acc, const int f16)
{
    const int hd = kv->head_dim;
    struct kv_pos p;
    kvp_init(&p, kv, table, kv_head);
    for (int64_t j = 0; j < n_ctx; j++) {
        size_t off = kvp_next(&p);
        __m512 s = _mm512_setzero_ps();
        for (int d = 0; d < hd; d += 16) {
            __mmask16 m = tail_mask16(hd - d);
            s = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + d), load_kv(f16, kv->k, off + d, m),
                                s);
        }
        scores[j] = hsum512(s) * scale;
    }
    float sum = exp_sum(scores, n_ctx, max_of(scores, n_ctx));
    for (int d = 0; d < hd; d += 16)
        _mm512_mask_storeu_ps(acc + d, tail_mask16(hd - d), _mm512_setzero_ps());
    kvp_init(&p, kv, table, kv_head);
    for (int64_t j = 0; j < n_ctx; j++) {
        size_t off = kvp_next(&p);
        __m512 pj = _mm512_set1_ps(scores[j]);
        for (int d = 0; d < hd; d += 16) {
            __mmask16 m = tail_mask16(hd - d);
            __m512 a = _mm512_maskz_loadu_ps(m, acc + d);
            _mm512_mask_storeu_ps(acc + d, m,
                                  _mm512_fmadd_ps(pj, load_kv(f16, kv->v, off + d, m), a));
        }
    }
    __m512 inv = _mm512_set1_ps(1.f / sum);
    for (int d = 0; d < hd; d += 16) {
        __mmask16 m = tail_mask16(hd - d);
        _mm512_mask_storeu_ps(out + d, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, acc + d), inv));
    }
}

typedef void (*attn_fn)(const struct tl_kv_layer *kv, const int32_t *table, int64_t n_ctx,
                        int kv_head, const float *q, float scale, float *out, float *scores);
#define DEF_ATTN(F16, NQ)                                                                          \
    static void attn_##F16##_##NQ(const struct tl_kv_layer *kv, const int32_t *table,              \
                                  int64_t n_ctx, int kv_head, const float *q, float scale,         \
                                  float *out, float *scores)                                       \
    {                                                                                              \
        attn_small(kv, table, n_ctx, kv_head, q, scale, out, scores, F16, NQ);                     \
    }
#define DEF_ATTN_NQ(F16)                                                                           \
    DEF_ATTN(F16, 1)                                                                               \
    DEF_ATTN(F16, 2)                                                                               \
    DEF_ATTN(F16, 3)                                                                               \
    DEF_ATTN(F16, 4) DEF_ATTN(F16, 5) DEF_ATTN(F16, 6) DEF_ATTN(F16, 7) DEF_ATTN(F16, 8)
DEF_ATTN_NQ(0)
DEF_ATTN_NQ(1)
static const attn_fn attn_table[2][9] = {
    {0, attn_0_1, attn_0_2, attn_0_3, attn_0_4, attn_0_5, attn_0_6, attn_0_7, attn_0_8},
    {0, attn_1_1, attn_1_2, attn_1_3, attn_1_4, attn_1_5, attn_1_6, attn_1_7, attn_1_8},
};

static void attn_head(const struct tl_kv_layer *kv, const int32_t *block_table, int64_t n_ctx,
                      int kv_head, const float *q, float scale, float *out, float *scores,
                      float *acc)
{
    const int f16 = kv->type == TL_DTYPE_F16, nq = (kv->head_dim + 15) / 16;
    if (nq <= 8)
        attn_table[f16][nq](kv, block_table, n_ctx, kv_head, q, scale, out, scores);
    else if (f16)
        attn_large(kv, block_table, n_ctx, kv_head, q, scale, out, scores, acc, 1);
    else
        attn_large(kv, block_table, n_ctx, kv_head, q, scale, out, scores, acc, 0);
}

// ---- attention over all the heads of a run of tokens (online softmax) -------------------------
//
// One call handles the query heads of a range of KV heads for a run of n_q consecutive query
// tokens of one sequence (positions n_ctx0 - 1, n_ctx0, ...: a prefill), walking the context
// in chunks of 16 positions: for each chunk and KV head, the chunk's K and V rows are read once
// (converted to f32 once into a buffer when several query heads or tokens share them) and used
// by every query head and token of the call. A chunk of a KV-cache block holds every head of
// its positions contiguously, so the walk streams whole blocks (prefetched a chunk ahead)
// instead of one head's 128 bytes per position. The softmax is online: per (token, head) a
// running max m, sum l and output accumulators, rescaled by exp(m_old - m_new) whenever a chunk
// raises the max. q.k for 16 positions is reduced by one transpose-add tree (the add order for
// position j depends only on j mod 16); a token's chunks are those of its own context, masked
// the same way whoever shares the call, and every (token, head) goes through the same
// operations on the same values whichever others share its call, so results do not depend on
// the batch or the threads.

#ifndef TL_AVX512_AKPF
#define TL_AVX512_AKPF _MM_HINT_T0
#endif
// (token, head) pairs per call, and their accumulators
enum { AK_MAX_PAIRS = 256, AK_ACC_FLOATS = 8192 };
enum { AK_PF_MIN_CTX = 1024 }; // contexts from which K/V rows are prefetched a chunk ahead

static ALWAYS_INLINE void attn_kv_t(const struct tl_kv_layer *kv, const int32_t *table,
                                    int64_t n_ctx0, int n_q, int kvh0, int n_kvh, int group,
                                    const float *q, size_t q_stride, float scale, float *out,
                                    const int f16, const int NQ, const int DIRECT)
{
    const int hd = kv->head_dim, nh = n_kvh * group, hp = NQ * 16;
    const __mmask16 last = tail_mask16(hd - (NQ - 1) * 16);
    const int64_t n_ctx_max = n_ctx0 + n_q - 1;
    const int pf_kv = n_ctx_max >= AK_PF_MIN_CTX;
    _Alignas(64) float acc[AK_ACC_FLOATS];                 // (token, head) x hp output accumulators
    _Alignas(64) float kbuf[16][8 * 16], vbuf[16][8 * 16]; // (unused when DIRECT)
    _Alignas(64) float pbuf[16];
    float m[AK_MAX_PAIRS], l[AK_MAX_PAIRS];
    size_t offs[16], next[16]; // this chunk's and the next one's (position, KV head 0) offsets
    const size_t esz = f16 ? 2 : 4, row_bytes = (size_t)hd * esz;
    for (int th = 0; th < n_q * nh; th++) {
        m[th] = -INFINITY;
        l[th] = 0.f;
        for (int c = 0; c < NQ; c++)
            _mm512_store_ps(acc + th * hp + 16 * c, _mm512_setzero_ps());
    }
    struct kv_pos p;
    kvp_init(&p, kv, table, 0);
    int n_next = n_ctx_max < 16 ? (int)n_ctx_max : 16;
    for (int u = 0; u < n_next; u++)
        next[u] = kvp_next(&p); // K and V share the layout
    for (int64_t j0 = 0; j0 < n_ctx_max; j0 += 16) {
        const int nu = n_next;
        memcpy(offs, next, sizeof(offs));
        int64_t left = n_ctx_max - j0 - 16;
        n_next = left <= 0 ? 0 : left < 16 ? (int)left : 16;
        for (int u = 0; u < n_next; u++)
            next[u] = kvp_next(&p);
        for (int kh = 0; kh < n_kvh; kh++) {
            const size_t hoff = (size_t)(kvh0 + kh) * hd;
            // the next chunk's rows of this KV head, while this one computes: a head's rows
            // are short runs a position apart, which the hardware prefetchers follow badly
            // from DRAM (long contexts: 1.3-1.6x faster) but well enough from the caches
            // (short ones: the prefetches only cost)
            for (int u = 0; u < (pf_kv ? n_next : 0); u++)
                for (size_t b = 0; b < row_bytes; b += 64) {
                    _mm_prefetch((const char *)kv->k + (next[u] + hoff) * esz + b, TL_AVX512_AKPF);
                    _mm_prefetch((const char *)kv->v + (next[u] + hoff) * esz + b, TL_AVX512_AKPF);
                }
            if (!DIRECT) {
                for (int u = 0; u < nu; u++)
#pragma GCC unroll 8
                    for (int c = 0; c < NQ; c++) {
                        __mmask16 mk = c == NQ - 1 ? last : 0xffff;
                        _mm512_store_ps(kbuf[u] + 16 * c,
                                        load_kv(f16, kv->k, offs[u] + hoff + 16 * c, mk));
                        _mm512_store_ps(vbuf[u] + 16 * c,
                                        load_kv(f16, kv->v, offs[u] + hoff + 16 * c, mk));
                    }
            }
            for (int qi = 0; qi < n_q; qi++) {
                const int64_t n_ctx = n_ctx0 + qi;
                if (j0 >= n_ctx) continue; // this chunk is past the token's context
                const int nt = n_ctx - j0 < 16 ? (int)(n_ctx - j0) : 16;
                const __mmask16 um = tail_mask16(nt);
                for (int g = 0; g < group; g++) {
                    const int th = qi * nh + kh * group + g; // (token, head) pair
                    const float *qh = q + qi * q_stride + (size_t)((kvh0 + kh) * group + g) * hd;
                    __m512 qv[8];
#pragma GCC unroll 8
                    for (int c = 0; c < NQ; c++)
                        qv[c] = _mm512_maskz_loadu_ps(c == NQ - 1 ? last : 0xffff, qh + 16 * c);
                    __m512 part[16];
#pragma GCC unroll 16
                    for (int u = 0; u < 16; u++) {
                        part[u] = _mm512_setzero_ps();
                        if (u < nt) {
#pragma GCC unroll 8
                            for (int c = 0; c < NQ; c++) {
                                __m512 kv_ = DIRECT ? load_kv(f16, kv->k, offs[u] + hoff + 16 * c,
                                                              c == NQ - 1 ? last : 0xffff)
                                                    : _mm512_load_ps(kbuf[u] + 16 * c);
                                part[u] = _mm512_fmadd_ps(qv[c], kv_, part[u]);
                            }
                        }
                    }
                    __m512 sv = _mm512_mul_ps(reduce16(part), _mm512_set1_ps(scale));
                    float cmax = _mm512_mask_reduce_max_ps(um, sv);
                    float m_new = cmax > m[th] ? cmax : m[th];
                    // rescale factor exp(m_old - m_new) (0 on the first chunk); probabilities
                    float corr = 0.f;
                    if (m[th] != -INFINITY)
                        corr = _mm_cvtss_f32(
                            _mm512_castps512_ps128(exp512(_mm512_set1_ps(m[th] - m_new))));
                    __m512 pr =
                        _mm512_maskz_mov_ps(um, exp512(_mm512_sub_ps(sv, _mm512_set1_ps(m_new))));
                    l[th] = l[th] * corr + hsum512(pr);
                    m[th] = m_new;
                    _mm512_store_ps(pbuf, pr);
                    __m512 a[8];
                    const __m512 vc = _mm512_set1_ps(corr);
#pragma GCC unroll 8
                    for (int c = 0; c < NQ; c++)
                        a[c] = _mm512_mul_ps(_mm512_load_ps(acc + th * hp + 16 * c), vc);
                    for (int u = 0; u < nt; u++) {
                        __m512 pu = _mm512_set1_ps(pbuf[u]);
#pragma GCC unroll 8
                        for (int c = 0; c < NQ; c++) {
                            __m512 vv = DIRECT ? load_kv(f16, kv->v, offs[u] + hoff + 16 * c,
                                                         c == NQ - 1 ? last : 0xffff)
                                               : _mm512_load_ps(vbuf[u] + 16 * c);
                            a[c] = _mm512_fmadd_ps(pu, vv, a[c]);
                        }
                    }
#pragma GCC unroll 8
                    for (int c = 0; c < NQ; c++)
                        _mm512_store_ps(acc + th * hp + 16 * c, a[c]);
                }
            }
        }
    }
    for (int qi = 0; qi < n_q; qi++)
        for (int h = 0; h < nh; h++) {
            const int th = qi * nh + h;
            float *oh = out + qi * q_stride + (size_t)(kvh0 * group + h) * hd;
            __m512 inv = _mm512_set1_ps(1.f / l[th]);
#pragma GCC unroll 8
            for (int c = 0; c < NQ; c++)
                _mm512_mask_storeu_ps(oh + 16 * c, c == NQ - 1 ? last : 0xffff,
                                      _mm512_mul_ps(_mm512_load_ps(acc + th * hp + 16 * c), inv));
        }
}

typedef void (*akv_fn)(const struct tl_kv_layer *kv, const int32_t *table, int64_t n_ctx0, int n_q,
                       int kvh0, int n_kvh, int group, const float *q, size_t q_stride, float scale,
                       float *out);
#define DEF_AKV(F16, NQ, D)                                                                        \
    static void akv_##F16##_##NQ##_##D(const struct tl_kv_layer *kv, const int32_t *table,         \
                                       int64_t n_ctx0, int n_q, int kvh0, int n_kvh, int group,    \
                                       const float *q, size_t q_stride, float scale, float *out)   \
    {                                                                                              \
        attn_kv_t(kv, table, n_ctx0, n_q, kvh0, n_kvh, group, q, q_stride, scale, out, F16, NQ,    \
                  D);                                                                              \
    }
#define DEF_AKV_NQ(F16, D)                                                                         \
    DEF_AKV(F16, 1, D)                                                                             \
    DEF_AKV(F16, 2, D)                                                                             \
    DEF_AKV(F16, 3, D)                                                                             \
    DEF_AKV(F16, 4, D)                                                                             \
    DEF_AKV(F16, 5, D) DEF_AKV(F16, 6, D) DEF_AKV(F16, 7, D) DEF_AKV(F16, 8, D)
DEF_AKV_NQ(0, 0)
DEF_AKV_NQ(1, 0)
DEF_AKV_NQ(0, 1)
DEF_AKV_NQ(1, 1)
#define AKV_LIST(F16, D)                                                                           \
    {                                                                                              \
        0, akv_##F16##_1_##D, akv_##F16##_2_##D, akv_##F16##_3_##D, akv_##F16##_4_##D,             \
            akv_##F16##_5_##D, akv_##F16##_6_##D, akv_##F16##_7_##D, akv_##F16##_8_##D             \
    }
// [direct][f16][nq]
static const akv_fn akv_table[2][2][9] = {{AKV_LIST(0, 0), AKV_LIST(1, 0)},
                                          {AKV_LIST(0, 1), AKV_LIST(1, 1)}};

static int attn_kv_pairs(int head_dim)
{
    int nq = (head_dim + 15) / 16;
    if (nq > 8) return 0;
    int by_acc = AK_ACC_FLOATS / (nq * 16);
    return by_acc < AK_MAX_PAIRS ? by_acc : AK_MAX_PAIRS;
}

static void attn_kv(const struct tl_kv_layer *kv, const int32_t *block_table, int64_t n_ctx0,
                    int n_q, int kvh0, int n_kvh, int group, const float *q, size_t q_stride,
                    float scale, float *out)
{
    int nq = (kv->head_dim + 15) / 16;
    TL_ASSERT(nq <= 8 && n_q >= 1 && n_q * n_kvh * group <= attn_kv_pairs(kv->head_dim));
    // one query head of one token per KV head reads K and V straight from the cache; otherwise
    // they are converted once into a buffer
    const int direct = n_q == 1 && group == 1;
    akv_table[direct][kv->type == TL_DTYPE_F16][nq](kv, block_table, n_ctx0, n_q, kvh0, n_kvh,
                                                    group, q, q_stride, scale, out);
}

// ---- conversions ------------------------------------------------------------------------------

// F16C rounds to nearest even like tl_f32_to_fp16 (the tests compare them over all inputs).
static void f32_to_f16(const float *src, uint16_t *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask16(n - i);
        _mm256_mask_storeu_epi16(
            dst + i, m,
            _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), _MM_FROUND_TO_NEAREST_INT));
    }
}

const struct tl__kernel_ops tl__ops_avx512 = {
    .name = "avx512",
    .row_align = row_align,
    .x_tile = GT,
    .quantize_x = quantize_x,
    .matmul_rows = matmul_rows,
    .rmsnorm = rmsnorm,
    .swiglu = swiglu,
    .add = add,
    .softmax = softmax,
    .exp_sub = exp_sub,
    .attn_head = attn_head,
    .f32_to_f16 = f32_to_f16,
    .attn_kv_pairs = attn_kv_pairs,
    .attn_kv = attn_kv,
};
