/*
 * The matmul of the AVX-512 kernel variant (F, BW, VL, DQ, VNNI; compiled with those -m flags
 * and only called when the CPU has them): the F32/F16/BF16 and Q8_0 paths over weights in the
 * file layout, their row drivers, the activation quantizer they read (quantize_x), and the
 * entry point that sends packed weights (tl_weight_prepare) to avx512_matmul_packed.c.
 * avx512_ops.c publishes them in the op table; shared helpers are in avx512_impl.h.
 *
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
 * Thread model: pure functions over caller-owned memory; re-entrant.
 */
#include "kernels/x86/avx512_impl.h"

#include "kernels/tiles.h"

#include <string.h>

// ---- helpers ----------------------------------------------------------------------------------

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

void tl__avx512_quantize_x(const float *x, int64_t n, void *dst)
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
TL__FLOAT_TILES(8, DEF_FK, fk, TL_AVX512_FR)
TL__FLOAT_TILES(8, DEF_FK, fk, 1)

// [type][r_full][nt]: r_full 1 = FR rows, 0 = one row.
static const fk_fn fk_table[3][2][9] = TL__FLOAT_TILE_TABLE(8, fk, TL_AVX512_FR);

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

#define DEF_QK(NAME, TYPE, R, T)                                                                   \
    static void NAME##_##R##x##T(const struct tl__mm *m, int64_t r, int64_t t)                     \
    {                                                                                              \
        qtile(m, r, t, R, T);                                                                      \
    }
TL__TILES_8(DEF_QK, q8, TL_DTYPE_Q8_0, TL_AVX512_QR)
TL__TILES_8(DEF_QK, q8, TL_DTYPE_Q8_0, 1)
static const tl__tile_fn qk_table[2][9] = {TL__TILE_LIST_8(q8, 1),
                                           TL__TILE_LIST_8(q8, TL_AVX512_QR)};

// Bytes of quantized activations a token chunk may occupy: it stays in L2 while rows stream.
enum { Q_CHUNK_BYTES = 512 * 1024 };

static void q8_rows(const struct tl__mm *m, int64_t r0, int64_t r1)
{
    const int64_t chunk =
        tl__even_chunk(m->n_tok, (int64_t)(Q_CHUNK_BYTES / m->xq_stride) / QT * QT, QT);
    tl__tile_walk(m, r0, r1, QR, QT, chunk, qk_table[1], qk_table[0]);
}

int tl__avx512_row_align(enum tl_dtype type)
{
    return type == TL_DTYPE_Q8_0 ? QR : FR;
}

void tl__avx512_matmul_rows(const struct tl__mm *m, int64_t r0, int64_t r1)
{
    const bool packed = m->w->layout == TL_WEIGHT_PACKED;
    if (m->w->type == TL_DTYPE_Q8_0)
        (packed ? tl__avx512_qp_rows : q8_rows)(m, r0, r1);
    else
        (packed ? tl__avx512_gp_rows : float_rows)(m, r0, r1);
}
