/*
 * The AVX-512 (F, BW, VL, DQ, VNNI) matmul of packed K-quant weights (Q4_K, Q5_K, Q6_K in the
 * 16-row layout of quants.h, written by kquant_pack.c). Compiled with those -m flags, called
 * only when the CPU has them.
 *
 * Design: a tile is one group of 16 rows x T tokens (T = 16, 8, 4, 2, 1), the rows in the 16
 * lanes of each accumulator. Per 32-block the tile decodes the group's 8 weight vectors once
 * (nibble mask or shift, Q5_K's fifth bit from a 64-bit mask register, Q6_K's two high bits
 * from a shifted byte) and the block's per-row scales (bytes -> f32, times the row's f16 d);
 * then for each token 8 vpdpbusd with the token's activation dwords broadcast from memory give
 * the 16 rows' exact integer sums, and the float steps of tl__kq_step follow lane by lane:
 *   Q4_K/Q5_K: acc = fma(float(isum), D * dx, acc); acc = fma(-(dmin * m), dsx, acc)
 *   Q6_K:      per 16-value half, acc = fma(float(isum_h), D_h * dx, acc), the offset of 32
 *              folded into the integer start value b6lo / b6hi
 * so every lane computes exactly the scalar reference's operations: results are bit-identical
 * to tl__qx_ref_matmul_rows on the file layout, whatever the tile, batch or thread count.
 *
 * The group's records stream with a software prefetch one super-block ahead; the token loop
 * walks chunks whose activations stay in L2, and for each chunk every group once.
 *
 * Thread model: pure functions over caller-owned memory; re-entrant.
 */
#include "kernels/quants.h"
#include "kernels/x86/avx512_impl.h"

#include "core/error.h"

#include <immintrin.h>
#include <string.h>

static ALWAYS_INLINE int32_t rd32s(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

static ALWAYS_INLINE uint64_t rd64(const void *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

// dpbusd with an activation dword broadcast from memory.
static ALWAYS_INLINE __m512i dot4(__m512i acc, __m512i w, const int8_t *x)
{
    return _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(rd32s(x)));
}

enum { KT_MAX = 16 };

static ALWAYS_INLINE void kq_tile(const struct tl__qx_mm *m, int64_t grp, int64_t t0,
                                  const int type, const int T)
{
    const struct tl_weight *w = m->w;
    const int64_t n_sb = w->n_in / 256;
    const size_t sbb = tl__kq_sb_bytes(type);
    const int q6 = type == TL_DTYPE_Q6_K, q5 = type == TL_DTYPE_Q5_K;
    const uint8_t *rec = (const uint8_t *)w->data + (size_t)grp * (size_t)n_sb * sbb;
    const __m512i m0f = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);
    const __m512i b16 = _mm512_set1_epi8(16);
    __m512 acc[KT_MAX];
#pragma GCC unroll 16
    for (int t = 0; t < T; t++)
        acc[t] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < n_sb; sb++, rec += sbb) {
        const __m512 dv = _mm512_cvtph_ps(
            _mm256_load_si256((const __m256i *)(rec + (q6 ? TL__KQ6_D : TL__KQ4_D))));
        const __m512 dmv =
            q6 ? dv : _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(rec + TL__KQ4_DMIN)));
        for (int j = 0; j < 8; j++) {
            // prefetch the next record, spread over the 8 blocks (it spans up to 53 lines)
            const char *pf = (const char *)rec + sbb + (size_t)j * 448;
            _mm_prefetch(pf, _MM_HINT_T0);
            _mm_prefetch(pf + 64, _MM_HINT_T0);
            _mm_prefetch(pf + 128, _MM_HINT_T0);
            _mm_prefetch(pf + 192, _MM_HINT_T0);
            _mm_prefetch(pf + 256, _MM_HINT_T0);
            _mm_prefetch(pf + 320, _MM_HINT_T0);
            _mm_prefetch(pf + 384, _MM_HINT_T0);
            const uint8_t *qs = rec + TL__KQ_QS + (size_t)(j >> 1) * 512;
            const __m128i shift = _mm_cvtsi32_si128(4 * (j & 1));
            __m512i wv[8];
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                __m512i v = _mm512_load_si512(qs + 64 * k);
                wv[k] = _mm512_and_si512(_mm512_srl_epi16(v, shift), m0f);
                if (q5) {
                    __mmask64 hb = rd64(rec + TL__KQ5_QH + (size_t)(j * 8 + k) * 8);
                    wv[k] = _mm512_mask_add_epi8(wv[k], hb, wv[k], b16);
                }
                if (q6) {
                    // bits 2f..2f+1 (f = k % 4) of the qh byte -> bits 4..5
                    __m512i h = _mm512_load_si512(rec + TL__KQ6_QH + (size_t)(j * 2 + k / 4) * 64);
                    const int f = k % 4;
                    h = f == 0   ? _mm512_slli_epi16(h, 4)
                        : f == 1 ? _mm512_slli_epi16(h, 2)
                        : f == 2 ? h
                                 : _mm512_srli_epi16(h, 2);
                    wv[k] = _mm512_or_si512(wv[k], _mm512_and_si512(h, m30));
                }
            }
            __m512 D0, D1, Mv;
            if (q6) {
                const int8_t *sc = (const int8_t *)rec + TL__KQ6_SC + 32 * j;
                D0 = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                           _mm_load_si128((const __m128i *)sc))));
                D1 = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                           _mm_load_si128((const __m128i *)(sc + 16)))));
                Mv = D1;
            } else {
                D0 = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_load_si128(
                                           (const __m128i *)(rec + TL__KQ4_SC + 16 * j)))));
                Mv = _mm512_mul_ps(dmv, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_load_si128(
                                            (const __m128i *)(rec + TL__KQ4_MN + 16 * j)))));
                D1 = D0;
            }
            const int64_t jj = sb * 8 + j; // the row's 32-block
#pragma GCC unroll 16
            for (int t = 0; t < T; t++) {
                const struct tl__qa_chunk *a = m->xa + (t0 + t) * m->xa_stride + (jj >> 2);
                const int8_t *xlo = a->qs + 16 * (jj & 3), *xhi = xlo + 64;
                const struct tl__kq_aux *ax = m->aux + (t0 + t) * m->aux_stride + jj;
                const __m512 dx = _mm512_set1_ps(ax->dx);
                if (q6) {
                    __m512i lo = _mm512_set1_epi32(ax->b6lo), hi = _mm512_set1_epi32(ax->b6hi);
                    lo = dot4(lo, wv[0], xlo);
                    hi = dot4(hi, wv[4], xhi);
                    lo = dot4(lo, wv[1], xlo + 4);
                    hi = dot4(hi, wv[5], xhi + 4);
                    lo = dot4(lo, wv[2], xlo + 8);
                    hi = dot4(hi, wv[6], xhi + 8);
                    lo = dot4(lo, wv[3], xlo + 12);
                    hi = dot4(hi, wv[7], xhi + 12);
                    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), _mm512_mul_ps(D0, dx), acc[t]);
                    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), _mm512_mul_ps(D1, dx), acc[t]);
                } else {
                    // two chains of 4 for latency; the integer sum is exact either way
                    __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
                    lo = dot4(lo, wv[0], xlo);
                    hi = dot4(hi, wv[4], xhi);
                    lo = dot4(lo, wv[1], xlo + 4);
                    hi = dot4(hi, wv[5], xhi + 4);
                    lo = dot4(lo, wv[2], xlo + 8);
                    hi = dot4(hi, wv[6], xhi + 8);
                    lo = dot4(lo, wv[3], xlo + 12);
                    hi = dot4(hi, wv[7], xhi + 12);
                    const __m512 s = _mm512_cvtepi32_ps(_mm512_add_epi32(lo, hi));
                    acc[t] = _mm512_fmadd_ps(s, _mm512_mul_ps(D0, dx), acc[t]);
                    // fnmadd(dmin * m, dsx, acc) = fma(-(dmin * m), dsx, acc): the reference's M
                    acc[t] = _mm512_fnmadd_ps(Mv, _mm512_set1_ps(ax->dsx), acc[t]);
                }
            }
        }
    }
    const int64_t r = grp * TL__KQ_ROWS, left = w->n_out - r;
    const __mmask16 keep = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
#pragma GCC unroll 16
    for (int t = 0; t < T; t++)
        _mm512_mask_storeu_ps(m->y + (t0 + t) * w->n_out + r, keep, acc[t]);
}

typedef void (*kq_tile_fn)(const struct tl__qx_mm *m, int64_t grp, int64_t t0);

#define DEF_KQ(NAME, TYPE)                                                                         \
    static void NAME##_1(const struct tl__qx_mm *m, int64_t g, int64_t t)                          \
    {                                                                                              \
        kq_tile(m, g, t, TYPE, 1);                                                                 \
    }                                                                                              \
    static void NAME##_2(const struct tl__qx_mm *m, int64_t g, int64_t t)                          \
    {                                                                                              \
        kq_tile(m, g, t, TYPE, 2);                                                                 \
    }                                                                                              \
    static void NAME##_4(const struct tl__qx_mm *m, int64_t g, int64_t t)                          \
    {                                                                                              \
        kq_tile(m, g, t, TYPE, 4);                                                                 \
    }                                                                                              \
    static void NAME##_8(const struct tl__qx_mm *m, int64_t g, int64_t t)                          \
    {                                                                                              \
        kq_tile(m, g, t, TYPE, 8);                                                                 \
    }                                                                                              \
    static void NAME##_16(const struct tl__qx_mm *m, int64_t g, int64_t t)                         \
    {                                                                                              \
        kq_tile(m, g, t, TYPE, 16);                                                                \
    }                                                                                              \
    static const kq_tile_fn NAME##_tiles[5] = {NAME##_1, NAME##_2, NAME##_4, NAME##_8, NAME##_16};

DEF_KQ(q4k, TL_DTYPE_Q4_K)
DEF_KQ(q5k, TL_DTYPE_Q5_K)
DEF_KQ(q6k, TL_DTYPE_Q6_K)

// Bytes of activations (quantized rows + aux) a token chunk may occupy: they stay in L2 while
// the groups stream.
enum { CHUNK_BYTES = 768 * 1024 };

void tl__kq_avx512_packed_rows(const struct tl__qx_mm *m, int64_t r0, int64_t r1)
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
            for (int64_t t = c0; t < c1;) {
                const int64_t left = c1 - t;
                const int k = left >= 16 ? 4 : left >= 8 ? 3 : left >= 4 ? 2 : left >= 2 ? 1 : 0;
                tiles[k](m, g, t);
                t += (int64_t)1 << k;
            }
    }
}
