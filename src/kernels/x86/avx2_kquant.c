/*
 * The AVX2 (+ FMA, F16C) matmul of packed K-quant weights (Q4_K, Q5_K, Q6_K in the 16-row
 * layout of quants.h, written by kquant_pack.c). Compiled with those -m flags, called only when
 * the CPU has them.
 *
 * Design: a 256-bit register holds 4 consecutive values of 8 rows (half of a packed 64-byte
 * vector), so a tile is half a group (8 rows, in the 8 lanes) x T tokens (4, 2, 1). Per
 * 32-block the tile decodes the 8 weight vectors of its half once (nibbles; Q5_K's fifth bit
 * expanded from its 32 mask bits; Q6_K's two high bits shifted into place) and the per-row
 * scales; then per token `maddubs(weights, activation dword broadcast)` gives exact int16 sums
 * of 2 products (quants <= 63, |x| <= 127: no saturation), added in int16 for as many steps as
 * cannot overflow (8 for Q4_K, 4 for Q5_K, 2 for Q6_K), widened by `madd` with ones. The float
 * steps are tl__kq_step's, lane by lane:
 *   Q4_K/Q5_K: acc = fma(float(isum), D * dx, acc); acc = fma(-(dmin * m), dsx, acc)
 *   Q6_K:      per 16-value half, acc = fma(float(isum_h), D_h * dx, acc)
 * so results are bit-identical to the scalar reference on the file layout, in every tile shape.
 *
 * Thread model: pure functions over caller-owned memory; re-entrant.
 */
#include "kernels/quants.h"
#include "kernels/x86/avx2_impl.h"

#include "core/error.h"

#include <immintrin.h>
#include <string.h>

static ALWAYS_INLINE int32_t rd32s(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

// maddubs of the weights with an activation dword broadcast.
static ALWAYS_INLINE __m256i mul4(__m256i w, const int8_t *x)
{
    return _mm256_maddubs_epi16(w, _mm256_set1_epi32(rd32s(x)));
}

// Bytes of a 32-bit mask: byte b = 0x10 where bit b is set.
static ALWAYS_INLINE __m256i bits_to_0x10(uint32_t bits)
{
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                            2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i sel = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), spread);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, sel), sel);
    return _mm256_and_si256(v, _mm256_set1_epi8(16));
}

enum { KT_MAX = 4 };

static ALWAYS_INLINE void kq_tile(const struct tl__qx_mm *m, int64_t grp, int half, int64_t t0,
                                  const int type, const int T)
{
    const struct tl_weight *w = m->w;
    const int64_t n_sb = w->n_in / 256;
    const size_t sbb = tl__kq_sb_bytes(type);
    const int q6 = type == TL_DTYPE_Q6_K, q5 = type == TL_DTYPE_Q5_K;
    const uint8_t *rec = (const uint8_t *)w->data + (size_t)grp * (size_t)n_sb * sbb;
    const __m256i m0f = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[KT_MAX];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
        acc[t] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < n_sb; sb++, rec += sbb) {
        const __m256 dv = _mm256_cvtph_ps(
            _mm_loadu_si128((const __m128i *)(rec + (q6 ? TL__KQ6_D : TL__KQ4_D) + 16 * half)));
        const __m256 dmv = q6 ? dv
                              : _mm256_cvtph_ps(_mm_loadu_si128(
                                    (const __m128i *)(rec + TL__KQ4_DMIN + 16 * half)));
        for (int j = 0; j < 8; j++) {
            const uint8_t *qs = rec + TL__KQ_QS + (size_t)(j >> 1) * 512 + 32 * half;
            const __m128i shift = _mm_cvtsi32_si128(4 * (j & 1));
            // prefetch the next record, spread over the 8 blocks (it spans up to 53 lines)
            const char *pf = (const char *)rec + sbb + (size_t)j * 448;
            for (int l = 0; l < 7; l++)
                _mm_prefetch(pf + 64 * l, _MM_HINT_T0);
            __m256i wv[8];
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                __m256i v = _mm256_load_si256((const __m256i *)(qs + 64 * k));
                wv[k] = _mm256_and_si256(_mm256_srl_epi16(v, shift), m0f);
                if (q5) {
                    uint32_t hb;
                    memcpy(&hb, rec + TL__KQ5_QH + (size_t)(j * 8 + k) * 8 + 4 * half, 4);
                    wv[k] = _mm256_or_si256(wv[k], bits_to_0x10(hb));
                }
                if (q6) {
                    __m256i h = _mm256_load_si256((const __m256i *)(rec + TL__KQ6_QH +
                                                                    (size_t)(j * 2 + k / 4) * 64 +
                                                                    32 * half));
                    const int f = k % 4;
                    h = f == 0   ? _mm256_slli_epi16(h, 4)
                        : f == 1 ? _mm256_slli_epi16(h, 2)
                        : f == 2 ? h
                                 : _mm256_srli_epi16(h, 2);
                    wv[k] = _mm256_or_si256(wv[k], _mm256_and_si256(h, m30));
                }
            }
            __m256 D0, D1, Mv;
            if (q6) {
                const uint8_t *sc = rec + TL__KQ6_SC + 32 * j + 8 * half;
                D0 = _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                           _mm_loadl_epi64((const __m128i *)sc))));
                D1 = _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                           _mm_loadl_epi64((const __m128i *)(sc + 16)))));
                Mv = D1;
            } else {
                D0 = _mm256_mul_ps(dv,
                                   _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
                                       (const __m128i *)(rec + TL__KQ4_SC + 16 * j + 8 * half)))));
                Mv = _mm256_mul_ps(dmv,
                                   _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
                                       (const __m128i *)(rec + TL__KQ4_MN + 16 * j + 8 * half)))));
                D1 = D0;
            }
            const int64_t jj = sb * 8 + j;
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                const struct tl__qa_chunk *a = m->xa + (t0 + t) * m->xa_stride + (jj >> 2);
                const int8_t *xlo = a->qs + 16 * (jj & 3), *xhi = xlo + 64;
                const struct tl__kq_aux *ax = m->aux + (t0 + t) * m->aux_stride + jj;
                const __m256 dx = _mm256_set1_ps(ax->dx);
                if (q6) {
                    // int16 pairs <= 2 * 63 * 127: two steps fit before widening
                    __m256i lo = _mm256_add_epi32(
                        _mm256_madd_epi16(_mm256_add_epi16(mul4(wv[0], xlo), mul4(wv[1], xlo + 4)),
                                          ones),
                        _mm256_madd_epi16(
                            _mm256_add_epi16(mul4(wv[2], xlo + 8), mul4(wv[3], xlo + 12)), ones));
                    __m256i hi = _mm256_add_epi32(
                        _mm256_madd_epi16(_mm256_add_epi16(mul4(wv[4], xhi), mul4(wv[5], xhi + 4)),
                                          ones),
                        _mm256_madd_epi16(
                            _mm256_add_epi16(mul4(wv[6], xhi + 8), mul4(wv[7], xhi + 12)), ones));
                    lo = _mm256_add_epi32(lo, _mm256_set1_epi32(ax->b6lo));
                    hi = _mm256_add_epi32(hi, _mm256_set1_epi32(ax->b6hi));
                    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo), _mm256_mul_ps(D0, dx), acc[t]);
                    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi), _mm256_mul_ps(D1, dx), acc[t]);
                } else {
                    __m256i s0 = _mm256_add_epi16(mul4(wv[0], xlo), mul4(wv[1], xlo + 4));
                    __m256i s1 = _mm256_add_epi16(mul4(wv[4], xhi), mul4(wv[5], xhi + 4));
                    s0 = _mm256_add_epi16(
                        s0, _mm256_add_epi16(mul4(wv[2], xlo + 8), mul4(wv[3], xlo + 12)));
                    s1 = _mm256_add_epi16(
                        s1, _mm256_add_epi16(mul4(wv[6], xhi + 8), mul4(wv[7], xhi + 12)));
                    __m256i s;
                    if (q5) // pairs <= 2 * 31 * 127: four steps per int16 sum
                        s = _mm256_add_epi32(_mm256_madd_epi16(s0, ones),
                                             _mm256_madd_epi16(s1, ones));
                    else // pairs <= 2 * 15 * 127: all eight steps fit
                        s = _mm256_madd_epi16(_mm256_add_epi16(s0, s1), ones);
                    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(D0, dx), acc[t]);
                    acc[t] = _mm256_fnmadd_ps(Mv, _mm256_set1_ps(ax->dsx), acc[t]);
                }
            }
        }
    }
    const int64_t r = grp * TL__KQ_ROWS + 8 * half, left = w->n_out - r;
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) {
        float *dst = m->y + (t0 + t) * w->n_out + r;
        if (left >= 8)
            _mm256_storeu_ps(dst, acc[t]);
        else
            store_tail(dst, left, acc[t]);
    }
}

typedef void (*kq_tile_fn)(const struct tl__qx_mm *m, int64_t grp, int half, int64_t t0);

#define DEF_KQ(NAME, TYPE)                                                                         \
    static void NAME##_1(const struct tl__qx_mm *m, int64_t g, int h, int64_t t)                   \
    {                                                                                              \
        kq_tile(m, g, h, t, TYPE, 1);                                                              \
    }                                                                                              \
    static void NAME##_2(const struct tl__qx_mm *m, int64_t g, int h, int64_t t)                   \
    {                                                                                              \
        kq_tile(m, g, h, t, TYPE, 2);                                                              \
    }                                                                                              \
    static void NAME##_4(const struct tl__qx_mm *m, int64_t g, int h, int64_t t)                   \
    {                                                                                              \
        kq_tile(m, g, h, t, TYPE, 4);                                                              \
    }                                                                                              \
    static const kq_tile_fn NAME##_tiles[3] = {NAME##_1, NAME##_2, NAME##_4};

DEF_KQ(q4k, TL_DTYPE_Q4_K)
DEF_KQ(q5k, TL_DTYPE_Q5_K)
DEF_KQ(q6k, TL_DTYPE_Q6_K)

// Bytes of activations (quantized rows + aux) a token chunk may occupy: they stay in L2.
enum { CHUNK_BYTES = 512 * 1024 };

void tl__kq_avx2_packed_rows(const struct tl__qx_mm *m, int64_t r0, int64_t r1)
{
    const struct tl_weight *w = m->w;
    const kq_tile_fn *tiles = w->type == TL_DTYPE_Q4_K   ? q4k_tiles
                              : w->type == TL_DTYPE_Q5_K ? q5k_tiles
                                                         : q6k_tiles;
    const size_t tok_bytes = (size_t)m->xa_stride * sizeof(struct tl__qa_chunk) +
                             (size_t)m->aux_stride * sizeof(struct tl__kq_aux);
    const int64_t chunk = tl__even_chunk(m->n_tok, (int64_t)(CHUNK_BYTES / tok_bytes), KT_MAX);
    const int64_t g0 = r0 / TL__KQ_ROWS, g1 = (r1 + TL__KQ_ROWS - 1) / TL__KQ_ROWS;
    for (int64_t c0 = 0; c0 < m->n_tok; c0 += chunk) {
        const int64_t c1 = c0 + chunk < m->n_tok ? c0 + chunk : m->n_tok;
        for (int64_t g = g0; g < g1; g++)
            for (int h = 0; h < 2 && g * TL__KQ_ROWS + 8 * h < w->n_out; h++)
                for (int64_t t = c0; t < c1;) {
                    const int64_t left = c1 - t;
                    const int k = left >= 4 ? 2 : left >= 2 ? 1 : 0;
                    tiles[k](m, g, h, t);
                    t += (int64_t)1 << k;
                }
    }
}
