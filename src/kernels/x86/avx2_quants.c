/*
 * The AVX2 (+ FMA, F16C) matmul of the extra weight types of kernels/quants.h, and the AVX2
 * activation quantizer. Compiled with those -m flags, called only when the CPU has them.
 *
 * Design: micro-tiles of R weight rows x T tokens walk the row in 128-value superchunks. Each
 * row's superchunk is decoded once per tile into a small stack buffer: per 32-block one
 * register of 32 unsigned quants (first half in the low 128 bits, second half in the high, as
 * the activation bytes of struct tl__qa_chunk are loaded), and 8-lane vectors of D (lanes 0-3:
 * first half, 4-7: second half) and M. Per block and (row, token) pair: maddubs(quants,
 * activation bytes) gives exact int16 pair sums (quants <= 63, |x| <= 127: no saturation), madd
 * with ones widens them to 8 int32 sums of 4 products, the type-0 offset is added as
 * off * (-sum of the activation bytes) (carried by the activation row), and
 * acc = fma(float(sum), D * d_x, acc), minus M * d_x * sum(x) for type-1 formats.
 * Every type has a vectorized decoder; a partial last superchunk (32-block types whose row is
 * not a multiple of 128) uses the scalar decoder tl__qx_unpack, which gives the same values.
 *
 * Determinism: every (row, token) element sees the same instruction sequence in every tile
 * shape and is reduced by one fixed horizontal sum.
 *
 * Thread model: pure functions over caller-owned memory; re-entrant.
 */
#include "kernels/cb4.h"
#include "kernels/quants.h"
#include "kernels/tiles.h"
#include "kernels/x86/avx2_impl.h"

#include "core/error.h"

#include <immintrin.h>
#include <string.h>

static ALWAYS_INLINE uint16_t rd16(const void *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

static ALWAYS_INLINE uint32_t rd32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

// ---- activation quantization ------------------------------------------------------------------

static void quantize(const float *x, int64_t n, void *dst)
{
    TL_ASSERT(n % 32 == 0);
    struct tl__qa_chunk *c = dst;
    const int64_t n_super = (n + TL__QA_SUPER - 1) / TL__QA_SUPER;
    const __m256 sign = _mm256_set1_ps(-0.f);
    for (int64_t s = 0; s < n_super; s++, c++)
        for (int g = 0; g < 4; g++) {
            int64_t i0 = s * 128 + g * 32;
            __m256 v[4];
            __m256 m = _mm256_setzero_ps();
            for (int k = 0; k < 4; k++) {
                v[k] = i0 < n ? _mm256_loadu_ps(x + i0 + 8 * k) : _mm256_setzero_ps();
                m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[k]));
            }
            __m128 b = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
            b = _mm_max_ps(b, _mm_movehl_ps(b, b));
            b = _mm_max_ss(b, _mm_movehdup_ps(b));
            float amax = _mm_cvtss_f32(b);
            float d = amax / 127.f;
            __m256 id = _mm256_set1_ps(amax != 0.f ? 127.f / amax : 0.f);
            __m256i q[4];
            for (int k = 0; k < 4; k++)
                q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], id)); // nearest even
            // packs interleave 128-bit lanes; the permute restores value order
            __m256i p8 =
                _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
            p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm_storeu_si128((__m128i *)(c->qs + 16 * g), _mm256_castsi256_si128(p8));
            _mm_storeu_si128((__m128i *)(c->qs + 64 + 16 * g), _mm256_extracti128_si256(p8, 1));
            _mm_storeu_ps(c->d + 4 * g, _mm_set1_ps(d));
            // sums of 4 bytes: lanes 0-3 the first half, 4-7 the second
            __m256i s4 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), p8),
                                           _mm256_set1_epi16(1));
            s4 = _mm256_sub_epi32(_mm256_setzero_si256(), s4);
            _mm_storeu_si128((__m128i *)(c->nslo + 4 * g), _mm256_castsi256_si128(s4));
            _mm_storeu_si128((__m128i *)(c->nshi + 4 * g), _mm256_extracti128_si256(s4, 1));
        }
}

// ---- weight decoders --------------------------------------------------------------------------

// One superchunk of one row: per 32-block g, its quants (value order) and D, M per lane.
struct wsc {
    __m256i q[4];
    __m256 d[4];
    __m256 m[4];
};

static ALWAYS_INLINE __m256 halves(float lo, float hi)
{
    return _mm256_set_m128(_mm_set1_ps(hi), _mm_set1_ps(lo));
}

static void load_generic(enum tl_dtype type, const void *row, int64_t n_in, int64_t s,
                         struct wsc *w)
{
    _Alignas(64) struct tl__qx_chunk c;
    tl__qx_unpack(type, row, n_in, s, &c);
    for (int g = 0; g < 4; g++) {
        w->q[g] = _mm256_load_si256((const __m256i *)(c.q + 32 * g));
        w->d[g] = halves(c.D[2 * g], c.D[2 * g + 1]);
        w->m[g] = halves(c.M[2 * g], c.M[2 * g + 1]);
    }
}

// Q4_0, full superchunk: blocks of 18 bytes (f16 d, 16 bytes of nibbles).
static ALWAYS_INLINE void load_q4_0(const uint8_t *b, struct wsc *w)
{
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int g = 0; g < 4; g++, b += 18) {
        __m128i q = _mm_loadu_si128((const __m128i *)(b + 2));
        w->q[g] = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4);
        w->d[g] = _mm256_set1_ps(_cvtsh_ss(rd16(b)));
    }
}

// 32 bits to 32 bytes: byte i = 0x10 when bit i of h is set, else 0.
static ALWAYS_INLINE __m256i bits_to_0x10(uint32_t h)
{
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                            2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), spread);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

// Q4_1, Q5_0, Q5_1, full superchunk: blocks of `bsz` bytes: f16 d, (f16 m), (qh[4]), qs[16].
static ALWAYS_INLINE void load_q41_q5(const int type, const uint8_t *b, struct wsc *w)
{
    const int has_m = type != TL_DTYPE_Q5_0, q5 = type != TL_DTYPE_Q4_1;
    const int bsz = type == TL_DTYPE_Q4_1 ? 20 : type == TL_DTYPE_Q5_0 ? 22 : 24;
    const int qs_off = 2 + 2 * has_m + 4 * q5;
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int g = 0; g < 4; g++, b += bsz) {
        __m128i q = _mm_loadu_si128((const __m128i *)(b + qs_off));
        __m256i v = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4);
        if (q5) v = _mm256_or_si256(v, bits_to_0x10(rd32(b + 2 + 2 * has_m)));
        w->q[g] = v;
        w->d[g] = _mm256_set1_ps(_cvtsh_ss(rd16(b)));
        if (has_m) w->m[g] = _mm256_set1_ps(_cvtsh_ss(rd16(b + 2)));
    }
}

// Q3_K / Q2_K half n: block j takes bits 2j..2j+1 of qs[32n .. +31].
static ALWAYS_INLINE __m256i two_bits(__m256i q, int j)
{
    return _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * j)), _mm256_set1_epi8(3));
}

static ALWAYS_INLINE void load_q3k(const uint8_t *blk, int n, struct wsc *w)
{
    __m256i q = _mm256_loadu_si256((const __m256i *)(blk + 32 + 32 * n));
    __m256i hm = _mm256_loadu_si256((const __m256i *)blk);
    const __m256i one = _mm256_set1_epi8(1);
    for (int j = 0; j < 4; j++) {
        __m256i h = _mm256_and_si256(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(4 * n + j)), one);
        w->q[j] = _mm256_or_si256(two_bits(q, j), _mm256_slli_epi16(h, 2));
    }
    // scales 8n..8n+7: low 4 bits from the low (n = 0) or high nibbles of bytes 0-7, 2 high
    // bits from bytes 8-11 (scale s: bits 2(s/4) of byte 8 + s%4)
    uint32_t a0 = rd32(blk + 96), a1 = rd32(blk + 100), t = rd32(blk + 104), s0, s1;
    if (n == 0) {
        s0 = (a0 & 0x0f0f0f0f) | ((t & 0x03030303) << 4);
        s1 = (a1 & 0x0f0f0f0f) | (((t >> 2) & 0x03030303) << 4);
    } else {
        s0 = ((a0 >> 4) & 0x0f0f0f0f) | (((t >> 4) & 0x03030303) << 4);
        s1 = ((a1 >> 4) & 0x0f0f0f0f) | (((t >> 6) & 0x03030303) << 4);
    }
    uint64_t sc = (uint64_t)s1 << 32 | s0;
    float d = _cvtsh_ss(rd16(blk + 108));
    for (int j = 0; j < 4; j++)
        w->d[j] = halves(d * (float)((int)((sc >> (16 * j)) & 0xff) - 32),
                         d * (float)((int)((sc >> (16 * j + 8)) & 0xff) - 32));
}

static ALWAYS_INLINE void load_q2k(const uint8_t *blk, int n, struct wsc *w)
{
    __m256i q = _mm256_loadu_si256((const __m256i *)(blk + 16 + 32 * n));
    const uint8_t *sc = blk + 8 * n;
    float d = _cvtsh_ss(rd16(blk + 80)), dmin = _cvtsh_ss(rd16(blk + 82));
    for (int j = 0; j < 4; j++) {
        w->q[j] = two_bits(q, j);
        int a = sc[2 * j], b = sc[2 * j + 1];
        w->d[j] = halves(d * (float)(a & 15), d * (float)(b & 15));
        w->m[j] = halves(-(dmin * (float)(a >> 4)), -(dmin * (float)(b >> 4)));
    }
}

// Q4_K / Q5_K half n: block g = sub-block 4n+g, the low (even g) or high nibbles of
// qs[64n + 32(g/2) .. +31]; Q5_K: bit 4n+g of qh[0..31].
static ALWAYS_INLINE void load_q4k_q5k(const int q5, const uint8_t *blk, int n, struct wsc *w)
{
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    const uint8_t *qs = blk + (q5 ? 48 : 16) + 64 * n;
    __m256i qh = q5 ? _mm256_loadu_si256((const __m256i *)(blk + 16)) : _mm256_setzero_si256();
    uint32_t a0 = rd32(blk + 4), a1 = rd32(blk + 8), a2 = rd32(blk + 12), sc, mn;
    if (n == 0) {
        sc = a0 & 0x3f3f3f3f;
        mn = a1 & 0x3f3f3f3f;
    } else {
        sc = (a2 & 0x0f0f0f0f) | ((a0 >> 2) & 0x30303030);
        mn = ((a2 >> 4) & 0x0f0f0f0f) | ((a1 >> 2) & 0x30303030);
    }
    float d = _cvtsh_ss(rd16(blk)), dmin = _cvtsh_ss(rd16(blk + 2));
    for (int c = 0; c < 2; c++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if (q5) {
            int b0 = 4 * n + 2 * c;
            __m256i h0 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(b0)), one);
            __m256i h1 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(b0 + 1)), one);
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(h0, 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(h1, 4));
        }
        w->q[2 * c] = lo;
        w->q[2 * c + 1] = hi;
    }
    for (int g = 0; g < 4; g++) {
        w->d[g] = _mm256_set1_ps(d * (float)((sc >> (8 * g)) & 0xff));
        w->m[g] = _mm256_set1_ps(-(dmin * (float)((mn >> (8 * g)) & 0xff)));
    }
}

// Q6_K half n: block g takes the low (g < 2) or high nibbles of ql[64n + 32(g%2) .. +31] and
// bits 2g..2g+1 of qh[32n .. +31].
static ALWAYS_INLINE void load_q6k(const uint8_t *blk, int n, struct wsc *w)
{
    const __m256i m4 = _mm256_set1_epi8(15), three = _mm256_set1_epi8(3);
    const uint8_t *ql = blk + 64 * n;
    __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * n));
    __m256i q0 = _mm256_loadu_si256((const __m256i *)ql);
    __m256i q1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
    __m256i nib[4] = {_mm256_and_si256(q0, m4), _mm256_and_si256(q1, m4),
                      _mm256_and_si256(_mm256_srli_epi16(q0, 4), m4),
                      _mm256_and_si256(_mm256_srli_epi16(q1, 4), m4)};
    for (int g = 0; g < 4; g++) {
        __m256i h = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * g)), three);
        w->q[g] = _mm256_or_si256(nib[g], _mm256_slli_epi16(h, 4));
    }
    const int8_t *sc = (const int8_t *)(blk + 192 + 8 * n);
    float d = _cvtsh_ss(rd16(blk + 208));
    for (int g = 0; g < 4; g++)
        w->d[g] = halves(d * (float)sc[2 * g], d * (float)sc[2 * g + 1]);
}

static ALWAYS_INLINE void load_w(const int type, const uint8_t *row, int64_t n_in, int64_t s,
                                 struct wsc *w)
{
    switch (type) {
    case TL_DTYPE_Q4_0:
        if ((s + 1) * 128 <= n_in)
            load_q4_0(row + (size_t)s * 72, w);
        else
            load_generic(type, row, n_in, s, w);
        break;
    case TL_DTYPE_Q4_1:
    case TL_DTYPE_Q5_0:
    case TL_DTYPE_Q5_1: {
        const size_t bsz = type == TL_DTYPE_Q4_1 ? 20 : type == TL_DTYPE_Q5_0 ? 22 : 24;
        if ((s + 1) * 128 <= n_in)
            load_q41_q5(type, row + (size_t)s * 4 * bsz, w);
        else
            load_generic(type, row, n_in, s, w);
        break;
    }
    case TL_DTYPE_Q3_K:
        load_q3k(row + (size_t)(s / 2) * 110, (int)(s % 2), w);
        break;
    case TL_DTYPE_Q2_K:
        load_q2k(row + (size_t)(s / 2) * 84, (int)(s % 2), w);
        break;
    case TL_DTYPE_Q4_K:
        load_q4k_q5k(0, row + (size_t)(s / 2) * 144, (int)(s % 2), w);
        break;
    case TL_DTYPE_Q5_K:
        load_q4k_q5k(1, row + (size_t)(s / 2) * 176, (int)(s % 2), w);
        break;
    case TL_DTYPE_Q6_K:
        load_q6k(row + (size_t)(s / 2) * 210, (int)(s % 2), w);
        break;
    default:
        load_generic(type, row, n_in, s, w);
        break;
    }
}

// ---- tiles ------------------------------------------------------------------------------------

#ifndef TL_AVX2_XPF
#define TL_AVX2_XPF 512
#endif
enum { XR = 2, XT = 4 }; // rows x tokens

static ALWAYS_INLINE void tile(const struct tl__qx_mm *m, int64_t r, int64_t t, const int type,
                               const int R, const int T)
{
    const struct tl_weight *w = m->w;
    const int64_t n = w->n_in, n_super = (n + 127) / 128;
    const int k = tl__qx_off_shift(type), has_min = tl__qx_has_min(type);
    const size_t scb = w->row_bytes / (size_t)((n + 127) / 128); // bytes per superchunk (~)
    const __m256i ones = _mm256_set1_epi16(1);
    const uint8_t *wr[XR];
    const struct tl__qa_chunk *xr[XT];
    __m256 acc[XR][XT];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
        wr[i] = (const uint8_t *)w->data + (size_t)(r + i) * w->row_bytes;
#pragma GCC unroll 4
    for (int j = 0; j < T; j++)
        xr[j] = m->xa + (t + j) * m->xa_stride;
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++)
            acc[i][j] = _mm256_setzero_ps();
    for (int64_t s = 0; s < n_super; s++) {
        struct wsc W[XR];
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            if (TL_AVX2_XPF) {
                // software prefetch TL_AVX2_XPF bytes ahead, two lines per superchunk
                const char *pf = (const char *)wr[i] + (size_t)s * scb + TL_AVX2_XPF;
                _mm_prefetch(pf, _MM_HINT_T0);
                _mm_prefetch(pf + 64, _MM_HINT_T0);
            }
            load_w(type, wr[i], n, s, &W[i]);
        }
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) {
            const struct tl__qa_chunk *a = xr[j] + s;
            for (int g = 0; g < 4; g++) {
                const __m256i x = _mm256_loadu2_m128i((const __m128i *)(a->qs + 64 + 16 * g),
                                                      (const __m128i *)(a->qs + 16 * g));
                const __m256 dx = _mm256_set1_ps(a->d[4 * g]);
                const __m256i ns = _mm256_loadu2_m128i((const __m128i *)(a->nshi + 4 * g),
                                                       (const __m128i *)(a->nslo + 4 * g));
                const __m256 nsx = has_min ? _mm256_mul_ps(_mm256_cvtepi32_ps(ns), dx) : dx;
#pragma GCC unroll 4
                for (int i = 0; i < R; i++) {
                    __m256i v = _mm256_madd_epi16(_mm256_maddubs_epi16(W[i].q[g], x), ones);
                    if (k >= 0) v = _mm256_add_epi32(v, _mm256_slli_epi32(ns, k));
                    acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_mul_ps(W[i].d[g], dx),
                                                acc[i][j]);
                    if (has_min) acc[i][j] = _mm256_fnmadd_ps(W[i].m[g], nsx, acc[i][j]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < T; j++)
#pragma GCC unroll 4
        for (int i = 0; i < R; i++)
            m->y[(t + j) * w->n_out + r + i] = hsum256(acc[i][j]);
}

// [0]: one row, [1]: XR rows; index = token count
#define DEF_TILES(NAME, TYPE)                                                                      \
    TL__TILES_4(TL__QX_DEF_TILE, NAME, TYPE, 2)                                                    \
    TL__TILES_4(TL__QX_DEF_TILE, NAME, TYPE, 1)                                                    \
    static const tl__qx_tile_fn tiles_##NAME[2][5] = {TL__TILE_LIST_4(NAME, 1),                    \
                                                      TL__TILE_LIST_4(NAME, 2)};

_Static_assert(XR == 2 && XT == 4, "the tile lists below assume 2 x 4 tiles");

TL__QX_TYPES(DEF_TILES)

TL__QX_DEF_TILES_FOR(5)

enum { CHUNK_BYTES = 256 * 1024 }; // activations of a token chunk stay in L2

static void matmul_rows(const struct tl__qx_mm *m, int64_t r0, int64_t r1)
{
    const tl__qx_tile_fn(*tiles)[5] = tiles_for(m->w->type);
    const size_t tok_bytes = (size_t)m->xa_stride * sizeof(struct tl__qa_chunk);
    int64_t chunk = (int64_t)(CHUNK_BYTES / tok_bytes) / XT * XT;
    if (chunk < XT) chunk = XT;
    for (int64_t c0 = 0; c0 < m->n_tok; c0 += chunk) {
        const int64_t c1 = c0 + chunk < m->n_tok ? c0 + chunk : m->n_tok;
        TL__TILE_CHUNK(m, r0, r1, XR, XT, c0, c1, tiles[1], tiles[0]);
    }
}

static int row_align(enum tl_dtype type)
{
    (void)type;
    return XR;
}

const struct tl__qx_ops tl__qx_ops_avx2 = {
    .row_align = row_align,
    .quantize = quantize,
    .matmul_rows = matmul_rows,
    .matmul_packed_rows = tl__kq_avx2_packed_rows,
    .matmul_cb4_rows = tl__cb4_avx2_rows,
};
