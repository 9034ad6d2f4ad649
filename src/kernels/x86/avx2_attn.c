/*
 * Attention of the AVX2 kernel variant (AVX2 + FMA + F16C; compiled with those -m flags and only
 * called when the CPU has them): one (token, head) per call, two passes (scores, then exp and
 * the V sum), positions walked block by block through the block table. One template per KV
 * type (F32, F16, Q8_0: widened to f32 and scaled as they are loaded, then the same arithmetic).
 * Also the Q8_0 KV store's vectorized quantizer. avx2_ops.c publishes both in the op table.
 *
 * Determinism: each (token, head) is computed alone, in position order, so results do not
 * depend on the batch or the threads.
 *
 * Thread model: pure functions over caller-owned memory; re-entrant.
 */
#include "kernels/x86/avx2_impl.h"

#include "kernels/attn_iter.h"

#include <string.h>

// ---- attention --------------------------------------------------------------------------------

// KV element types of the templates below.
enum { KT_F32 = 0, KT_F16 = 1, KT_Q8 = 2 };

// 8 K or V values at element index idx (the first `left` of them when left < 8; the rest read
// as zero). Q8_0: idx is a multiple of 8 and head_dim of 32, so the 8 values are one quarter of
// a block and left >= 8; d * q is exact in f32, the same value as the scalar reference's.
static ALWAYS_INLINE __m256 load_kv(int kt, const void *base, size_t idx, int left)
{
    if (kt == KT_Q8) {
        const struct tl_block_q8_0 *b = (const struct tl_block_q8_0 *)base + idx / TL_QK8_0;
        __m128i q8 = _mm_loadl_epi64((const __m128i *)(b->qs + idx % TL_QK8_0));
        __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8));
        return _mm256_mul_ps(x, _mm256_set1_ps(_cvtsh_ss(b->d)));
    }
    if (kt == KT_F16) {
        const uint16_t *p = (const uint16_t *)base + idx;
        if (left >= 8) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
        uint16_t tmp[8] = {0};
        memcpy(tmp, p, (size_t)left * 2);
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)tmp));
    }
    const float *p = (const float *)base + idx;
    return left >= 8 ? _mm256_loadu_ps(p) : load_tail(p, left);
}

// Positions [lo, n_ctx); scores[j] is position lo + j.
static ALWAYS_INLINE void attn_head_t(const struct tl_kv_layer *kv, const int32_t *block_table,
                                      int64_t lo, int64_t n_ctx, int kv_head, const float *q,
                                      float scale, float softcap, float *out, float *scores,
                                      float *acc, const int kt)
{
    const int hd = kv->head_dim;
    n_ctx -= lo;
    struct tl__kv_pos p;
    tl__kv_pos_init_at(&p, kv, block_table, kv_head, lo);
    for (int64_t j = 0; j < n_ctx; j++) {
        size_t base = tl__kv_pos_next(&p);
        __m256 s = _mm256_setzero_ps();
        for (int d = 0; d < hd; d += 8) {
            int left = hd - d;
            __m256 qv = left >= 8 ? _mm256_loadu_ps(q + d) : load_tail(q + d, left);
            s = _mm256_fmadd_ps(qv, load_kv(kt, kv->k, base + d, left), s);
        }
        scores[j] = hsum256(s) * scale;
        if (softcap > 0.f) scores[j] = tl__softcap(scores[j], softcap);
    }
    float sum = tl__avx2_exp_sum(scores, n_ctx, tl__avx2_max_of(scores, n_ctx));
    // out = sum_j p_j v_j, j in order; the running sums live in `acc` (one pass over V)
    int d = 0;
    for (; d + 8 <= hd; d += 8)
        _mm256_storeu_ps(acc + d, _mm256_setzero_ps());
    if (d < hd) store_tail(acc + d, hd - d, _mm256_setzero_ps());
    tl__kv_pos_init_at(&p, kv, block_table, kv_head, lo);
    for (int64_t j = 0; j < n_ctx; j++) {
        size_t base = tl__kv_pos_next(&p);
        __m256 pj = _mm256_set1_ps(scores[j]);
        for (d = 0; d < hd; d += 8) {
            int left = hd - d;
            __m256 a = left >= 8 ? _mm256_loadu_ps(acc + d) : load_tail(acc + d, left);
            a = _mm256_fmadd_ps(pj, load_kv(kt, kv->v, base + d, left), a);
            if (left >= 8)
                _mm256_storeu_ps(acc + d, a);
            else
                store_tail(acc + d, left, a);
        }
    }
    __m256 inv = _mm256_set1_ps(1.f / sum);
    for (d = 0; d < hd; d += 8) {
        int left = hd - d;
        __m256 a =
            _mm256_mul_ps(left >= 8 ? _mm256_loadu_ps(acc + d) : load_tail(acc + d, left), inv);
        if (left >= 8)
            _mm256_storeu_ps(out + d, a);
        else
            store_tail(out + d, left, a);
    }
}

void tl__avx2_attn_head(const struct tl_kv_layer *kv, const int32_t *block_table, int64_t lo,
                        int64_t n_ctx, int kv_head, const float *q, float scale, float softcap,
                        float *out, float *scores, float *acc)
{
    if (kv->type == TL_DTYPE_Q8_0)
        attn_head_t(kv, block_table, lo, n_ctx, kv_head, q, scale, softcap, out, scores, acc,
                    KT_Q8);
    else if (kv->type == TL_DTYPE_F16)
        attn_head_t(kv, block_table, lo, n_ctx, kv_head, q, scale, softcap, out, scores, acc,
                    KT_F16);
    else
        attn_head_t(kv, block_table, lo, n_ctx, kv_head, q, scale, softcap, out, scores, acc,
                    KT_F32);
}

// ---- the Q8_0 KV store --------------------------------------------------------------------------
//
// tl_quantize_row(Q8_0) step for step, as tl__avx512_quantize_q8_0 (the same bytes for every
// input but a signaling NaN): amax by max(|x|, amax), d and 1 / d in scalar f32, x * id rounded
// half away from zero (trunc, then +-1 where |v - trunc(v)| >= 0.5), clamped to [-127, 127],
// NaN -> 0; the int32 are then packed with saturation (a no-op in that range) to bytes.
void tl__avx2_quantize_q8_0(const float *src, struct tl_block_q8_0 *dst, int64_t n)
{
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 signm = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.f);
    const __m256 hi = _mm256_set1_ps(127.f), lo = _mm256_set1_ps(-127.f);
    for (int64_t b = 0; b < n / TL_QK8_0; b++) {
        const float *x = src + b * TL_QK8_0;
        __m256 xv[4], a = _mm256_setzero_ps();
        for (int h = 0; h < 4; h++) {
            xv[h] = _mm256_loadu_ps(x + 8 * h);
            a = _mm256_max_ps(_mm256_and_ps(xv[h], absm), a);
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
        float amax = _mm_cvtss_f32(m4);
        float d = amax / 127.f;
        float id = d != 0.f ? 1.f / d : 0.f;
        dst[b].d = tl_f32_to_fp16(d);
        const __m256 vid = _mm256_set1_ps(id);
        __m256i qi[4];
        for (int h = 0; h < 4; h++) {
            __m256 v = _mm256_mul_ps(xv[h], vid);
            __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            __m256 up = _mm256_cmp_ps(_mm256_and_ps(_mm256_sub_ps(v, t), absm), half, _CMP_GE_OQ);
            t = _mm256_add_ps(t, _mm256_and_ps(up, _mm256_or_ps(_mm256_and_ps(v, signm), one)));
            t = _mm256_max_ps(_mm256_min_ps(t, hi), lo);
            t = _mm256_and_ps(t, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
            qi[h] = _mm256_cvtps_epi32(t);
        }
        // packs work per 128-bit lane: (0a 1a 0b 1b) words, then bytes (0a 1a 2a 3a 0b 1b 2b 3b)
        // in dwords; the permute puts the dwords back in element order
        __m256i w01 = _mm256_packs_epi32(qi[0], qi[1]), w23 = _mm256_packs_epi32(qi[2], qi[3]);
        __m256i b8 = _mm256_packs_epi16(w01, w23);
        b8 = _mm256_permutevar8x32_epi32(b8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)dst[b].qs, b8);
    }
}
