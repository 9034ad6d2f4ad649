/*
 * The AVX-512 kernel variant (F, BW, VL, DQ, VNNI; compiled with those -m flags and only called
 * when the CPU has them).
 *
 * Matmul design: micro-tiles of R weight rows x T tokens. Each weight vector loaded (and, for
 * F16/BF16, converted to f32 in registers) is used for all T tokens of the tile; each (row,
 * token) pair owns one accumulator register. Over a matmul, a thread walks its rows in blocks
 * of R and, for each block, every token tile of a token chunk sized to stay in L2, so a weight
 * row block is read from memory once per chunk and then hits L1.
 *   - F32/F16/BF16: 16 lanes per step; acc = fma(w, x, acc); the tail (n_in % 16) uses masked
 *     loads that read zeros, so it is the same arithmetic as a full step.
 *   - Q8_0: two 32-blocks (64 bytes) per step. The weights are made unsigned (w ^ 0x80 =
 *     w + 128) so VNNI vpdpbusd (u8 x s8) can multiply them with the signed activation bytes;
 *     the surplus 128 * sum(x) is cancelled exactly by starting the int32 accumulator from the
 *     activation row's precomputed bias (-128 * the lane's sum of four x bytes). Then
 *     acc = fma(float(sumi), d_w * d_x, acc) per lane, lanes 0-7 holding one block, 8-15 the next.
 * Every (row, token) element sees the same instruction sequence in every tile shape (full tile,
 * token tail, row tail), and the final horizontal sum is one fixed function, so results do not
 * depend on the batch. Tile shapes come from one always-inline template instantiated per shape.
 *
 * Elementwise ops use a vectorized exp (Cody-Waite reduction, degree-7 polynomial, scalef),
 * accurate to about 1 ulp; attention walks the context in a fixed order per (token, head).
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

// ---- activation quantization ------------------------------------------------------------------

static void quantize_x(const float *x, int64_t n, void *dst)
{
    struct tl__xq_row row = tl__xq_view(dst, n);
    int64_t n_chunk = (n + TL__XQ_CHUNK - 1) / TL__XQ_CHUNK;
    const __m512 sign = _mm512_set1_ps(-0.f);
    for (int64_t c = 0; c < n_chunk; c++) {
        float d[2];
        __m128i q8[4];
        for (int h = 0; h < 2; h++) {
            int64_t i0 = c * 64 + h * 32;
            __m512 v0 = _mm512_maskz_loadu_ps(tail_mask16(n - i0), x + i0);
            __m512 v1 = _mm512_maskz_loadu_ps(n - i0 > 16 ? tail_mask16(n - i0 - 16) : 0, x + i0 + 16);
            __m512 m = _mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1));
            float amax = _mm512_reduce_max_ps(m);
            d[h] = amax / 127.f;
            float id = amax != 0.f ? 127.f / amax : 0.f;
            __m512 vid = _mm512_set1_ps(id);
            // cvtps rounds with MXCSR's mode: nearest even, like the reference's nearbyintf
            __m512i i0v = _mm512_cvtps_epi32(_mm512_mul_ps(v0, vid));
            __m512i i1v = _mm512_cvtps_epi32(_mm512_mul_ps(v1, vid));
            q8[h * 2] = _mm512_cvtsepi32_epi8(i0v);
            q8[h * 2 + 1] = _mm512_cvtsepi32_epi8(i1v);
        }
        __m512i q = _mm512_inserti32x4(_mm512_castsi128_si512(q8[0]), q8[1], 1);
        q = _mm512_inserti32x4(q, q8[2], 2);
        q = _mm512_inserti32x4(q, q8[3], 3);
        _mm512_store_si512(row.qs + c * 64, q);
        __m512i sum4 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), q);
        _mm512_store_si512(row.bias + c * 16, _mm512_sub_epi32(_mm512_setzero_si512(),
                                                               _mm512_slli_epi32(sum4, 7)));
        __m512 dv = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(d[0])),
                                       _mm256_set1_ps(d[1]), 1);
        _mm512_store_ps(row.d + c * 16, dv);
    }
}

// ---- matmul: F32 / F16 / BF16 weights ---------------------------------------------------------

enum { FR = 4, FT = 4 };           // float tile: rows x tokens
enum { QR = 4, QT = 4 };           // Q8_0 tile
enum { TMAX = 4 };                 // largest T of any tile

// 16 weights of `type` from row w at element k, converted to f32 (lanes >= valid read 0).
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

static ALWAYS_INLINE void ftile(const struct tl__mm *m, int64_t r, int64_t t, const int type,
                                const int R, const int T)
{
    const struct tl_weight *w = m->w;
    const int64_t n = w->n_in;
    const void *wr[FR];
    const float *xr[TMAX];
    __m512 acc[FR][TMAX];
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) wr[i] = (const char *)w->data + (size_t)(r + i) * w->row_bytes;
#pragma GCC unroll 8
    for (int j = 0; j < T; j++) xr[j] = m->x + (t + j) * n;
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 8
        for (int j = 0; j < T; j++) acc[i][j] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        __m512 wv[FR];
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) wv[i] = load_w(type, wr[i], k, 0, 1);
#pragma GCC unroll 8
        for (int j = 0; j < T; j++) {
            __m512 xv = _mm512_loadu_ps(xr[j] + k);
#pragma GCC unroll 8
            for (int i = 0; i < R; i++) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
        }
    }
    if (k < n) {
        __mmask16 mask = tail_mask16(n - k);
        __m512 wv[FR];
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) wv[i] = load_w(type, wr[i], k, mask, 0);
#pragma GCC unroll 8
        for (int j = 0; j < T; j++) {
            __m512 xv = _mm512_maskz_loadu_ps(mask, xr[j] + k);
#pragma GCC unroll 8
            for (int i = 0; i < R; i++) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < T; j++)
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) m->y[(t + j) * w->n_out + r + i] = hsum512(acc[i][j]);
}

// ---- matmul: Q8_0 weights ---------------------------------------------------------------------

// The two blocks of chunk c of a Q8_0 row: 64 weight bytes made unsigned, and their scales
// (lanes 0-7 block 2c, lanes 8-15 block 2c+1; a missing odd block reads as zero weights).
static ALWAYS_INLINE void q8_load_w(const struct tl_block_q8_0 *b, int two, __m512i *wu, __m512 *dw)
{
    __m256i lo = _mm256_loadu_si256((const __m256i *)b[0].qs);
    __m256i hi = two ? _mm256_loadu_si256((const __m256i *)b[1].qs) : _mm256_setzero_si256();
    *wu = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1),
                           _mm512_set1_epi8((char)0x80));
    __m256i h = _mm256_inserti128_si256(_mm256_set1_epi16((short)b[0].d),
                                        _mm_set1_epi16(two ? (short)b[1].d : 0), 1);
    *dw = _mm512_cvtph_ps(h);
}

static ALWAYS_INLINE void qtile(const struct tl__mm *m, int64_t r, int64_t t, const int R,
                                const int T)
{
    const struct tl_weight *w = m->w;
    const int64_t n = w->n_in, nb = n / TL_QK8_0;
    const struct tl_block_q8_0 *wr[QR];
    struct tl__xq_row xr[TMAX];
    __m512 acc[QR][TMAX];
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
        wr[i] = (const struct tl_block_q8_0 *)((const char *)w->data +
                                               (size_t)(r + i) * w->row_bytes);
#pragma GCC unroll 8
    for (int j = 0; j < T; j++) xr[j] = tl__xq_view((char *)m->xq + (size_t)(t + j) * m->xq_stride, n);
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 8
        for (int j = 0; j < T; j++) acc[i][j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b += 2) {
        const int two = b + 1 < nb;
        __m512i wu[QR];
        __m512 dw[QR];
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) q8_load_w(wr[i] + b, two, &wu[i], &dw[i]);
        const int64_t c = b / 2;
#pragma GCC unroll 8
        for (int j = 0; j < T; j++) {
            __m512i xq = _mm512_load_si512(xr[j].qs + c * 64);
            __m512i bias = _mm512_load_si512(xr[j].bias + c * 16);
            __m512 dx = _mm512_load_ps(xr[j].d + c * 16);
#pragma GCC unroll 8
            for (int i = 0; i < R; i++) {
                __m512i s = _mm512_dpbusd_epi32(bias, wu[i], xq);
                acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw[i], dx),
                                            acc[i][j]);
            }
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < T; j++)
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) m->y[(t + j) * w->n_out + r + i] = hsum512(acc[i][j]);
}

// ---- tile instances and the row driver --------------------------------------------------------

typedef void (*tile_fn)(const struct tl__mm *m, int64_t r, int64_t t);

#define DEF_FTILE(NAME, TYPE, R, T)                                                                \
    static void NAME##_##R##x##T(const struct tl__mm *m, int64_t r, int64_t t)                     \
    {                                                                                              \
        ftile(m, r, t, TYPE, R, T);                                                                \
    }
// FR/FT are enum constants, so the instance names are spelled out through a second macro level.
#define DEF_FTILE_(NAME, TYPE, R, T) DEF_FTILE(NAME, TYPE, R, T)
DEF_FTILE_(f32, TL_DTYPE_F32, 4, 1)
DEF_FTILE_(f32, TL_DTYPE_F32, 4, 2)
DEF_FTILE_(f32, TL_DTYPE_F32, 4, 3)
DEF_FTILE_(f32, TL_DTYPE_F32, 4, 4)
DEF_FTILE_(f32, TL_DTYPE_F32, 1, 1)
DEF_FTILE_(f32, TL_DTYPE_F32, 1, 2)
DEF_FTILE_(f32, TL_DTYPE_F32, 1, 3)
DEF_FTILE_(f32, TL_DTYPE_F32, 1, 4)
DEF_FTILE_(f16, TL_DTYPE_F16, 4, 1)
DEF_FTILE_(f16, TL_DTYPE_F16, 4, 2)
DEF_FTILE_(f16, TL_DTYPE_F16, 4, 3)
DEF_FTILE_(f16, TL_DTYPE_F16, 4, 4)
DEF_FTILE_(f16, TL_DTYPE_F16, 1, 1)
DEF_FTILE_(f16, TL_DTYPE_F16, 1, 2)
DEF_FTILE_(f16, TL_DTYPE_F16, 1, 3)
DEF_FTILE_(f16, TL_DTYPE_F16, 1, 4)
DEF_FTILE_(bf16, TL_DTYPE_BF16, 4, 1)
DEF_FTILE_(bf16, TL_DTYPE_BF16, 4, 2)
DEF_FTILE_(bf16, TL_DTYPE_BF16, 4, 3)
DEF_FTILE_(bf16, TL_DTYPE_BF16, 4, 4)
DEF_FTILE_(bf16, TL_DTYPE_BF16, 1, 1)
DEF_FTILE_(bf16, TL_DTYPE_BF16, 1, 2)
DEF_FTILE_(bf16, TL_DTYPE_BF16, 1, 3)
DEF_FTILE_(bf16, TL_DTYPE_BF16, 1, 4)

#define DEF_QTILE(R, T)                                                                            \
    static void q8_##R##x##T(const struct tl__mm *m, int64_t r, int64_t t)                         \
    {                                                                                              \
        qtile(m, r, t, R, T);                                                                      \
    }
DEF_QTILE(4, 1)
DEF_QTILE(4, 2)
DEF_QTILE(4, 3)
DEF_QTILE(4, 4)
DEF_QTILE(1, 1)
DEF_QTILE(1, 2)
DEF_QTILE(1, 3)
DEF_QTILE(1, 4)

struct tileset {
    int R, T;
    tile_fn full[TMAX + 1]; // R rows x j tokens
    tile_fn one[TMAX + 1];  // 1 row x j tokens (row tail)
};

static const struct tileset tiles_f32 = {4, 4, {0, f32_4x1, f32_4x2, f32_4x3, f32_4x4},
                                         {0, f32_1x1, f32_1x2, f32_1x3, f32_1x4}};
static const struct tileset tiles_f16 = {4, 4, {0, f16_4x1, f16_4x2, f16_4x3, f16_4x4},
                                         {0, f16_1x1, f16_1x2, f16_1x3, f16_1x4}};
static const struct tileset tiles_bf16 = {4, 4, {0, bf16_4x1, bf16_4x2, bf16_4x3, bf16_4x4},
                                          {0, bf16_1x1, bf16_1x2, bf16_1x3, bf16_1x4}};
static const struct tileset tiles_q8 = {4, 4, {0, q8_4x1, q8_4x2, q8_4x3, q8_4x4},
                                        {0, q8_1x1, q8_1x2, q8_1x3, q8_1x4}};

static const struct tileset *tiles_for(enum tl_dtype type)
{
    switch (type) {
    case TL_DTYPE_F32: return &tiles_f32;
    case TL_DTYPE_F16: return &tiles_f16;
    case TL_DTYPE_BF16: return &tiles_bf16;
    case TL_DTYPE_Q8_0: return &tiles_q8;
    default: TL_ASSERT(!"unsupported weight type"); return NULL;
    }
}

static int row_align(enum tl_dtype type)
{
    return tiles_for(type)->R;
}

// Bytes of activations a token chunk may occupy: chunks stay in L2 while rows stream past.
enum { CHUNK_BYTES = 512 * 1024 };

static void matmul_rows(const struct tl__mm *m, int64_t r0, int64_t r1)
{
    const struct tileset *ts = tiles_for(m->w->type);
    size_t tok_bytes = m->w->type == TL_DTYPE_Q8_0 ? m->xq_stride : (size_t)m->w->n_in * 4;
    int64_t chunk = (int64_t)(CHUNK_BYTES / tok_bytes) / ts->T * ts->T;
    if (chunk < ts->T) chunk = ts->T;
    for (int64_t c0 = 0; c0 < m->n_tok; c0 += chunk) {
        int64_t c1 = c0 + chunk < m->n_tok ? c0 + chunk : m->n_tok;
        int64_t r = r0;
        for (; r + ts->R <= r1; r += ts->R)
            for (int64_t t = c0; t < c1; t += ts->T) {
                int64_t nt = c1 - t < ts->T ? c1 - t : ts->T;
                ts->full[nt](m, r, t);
            }
        for (; r < r1; r++)
            for (int64_t t = c0; t < c1; t += ts->T) {
                int64_t nt = c1 - t < ts->T ? c1 - t : ts->T;
                ts->one[nt](m, r, t);
            }
    }
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

static void softmax(float *x, int64_t n)
{
    if (n <= 0) return;
    float sum = exp_sum(x, n, max_of(x, n));
    scale_by(x, n, 1.f / sum);
}

// ---- attention --------------------------------------------------------------------------------

static ALWAYS_INLINE __m512 load_kv(int f16, const void *base, size_t idx, __mmask16 m)
{
    if (f16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)base + idx));
    return _mm512_maskz_loadu_ps(m, (const float *)base + idx);
}

static ALWAYS_INLINE void attn_head_t(const struct tl_kv_layer *kv, const int32_t *block_table,
                                      int64_t n_ctx, int kv_head, const float *q, float scale,
                                      float *out, float *scores, float *acc, const int f16)
{
    const int hd = kv->head_dim;
    // scores: q . k_j, one fixed lane order per j
    for (int64_t j = 0; j < n_ctx; j++) {
        size_t base = tl__kv_index(kv, block_table, j, kv_head);
        __m512 s = _mm512_setzero_ps();
        for (int d = 0; d < hd; d += 16) {
            __mmask16 m = tail_mask16(hd - d);
            s = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + d), load_kv(f16, kv->k, base + d, m), s);
        }
        scores[j] = hsum512(s) * scale;
    }
    float sum = exp_sum(scores, n_ctx, max_of(scores, n_ctx));
    // out = sum_j p_j v_j, 16 dims at a time, j in order
    for (int d = 0; d < hd; d += 16) {
        __mmask16 m = tail_mask16(hd - d);
        __m512 a = _mm512_setzero_ps();
        for (int64_t j = 0; j < n_ctx; j++) {
            size_t base = tl__kv_index(kv, block_table, j, kv_head);
            a = _mm512_fmadd_ps(_mm512_set1_ps(scores[j]), load_kv(f16, kv->v, base + d, m), a);
        }
        _mm512_mask_storeu_ps(out + d, m, _mm512_mul_ps(a, _mm512_set1_ps(1.f / sum)));
    }
    (void)acc;
}

static void attn_head(const struct tl_kv_layer *kv, const int32_t *block_table, int64_t n_ctx,
                      int kv_head, const float *q, float scale, float *out, float *scores,
                      float *acc)
{
    if (kv->type == TL_DTYPE_F16)
        attn_head_t(kv, block_table, n_ctx, kv_head, q, scale, out, scores, acc, 1);
    else
        attn_head_t(kv, block_table, n_ctx, kv_head, q, scale, out, scores, acc, 0);
}

const struct tl__kernel_ops tl__ops_avx512 = {
    .name = "avx512",
    .row_align = row_align,
    .quantize_x = quantize_x,
    .matmul_rows = matmul_rows,
    .rmsnorm = rmsnorm,
    .swiglu = swiglu,
    .add = add,
    .softmax = softmax,
    .attn_head = attn_head,
};
