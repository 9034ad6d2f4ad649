/*
 * Attention of the AVX2 kernel variant (AVX2 + FMA + F16C; compiled with those -m flags and only
 * called when the CPU has them): one (token, head) per call, two passes (scores, then exp and
 * the V sum), positions walked block by block through the block table. One template per KV
 * type (F32, F16, Q8_0: widened to f32 and scaled as they are loaded, then the same arithmetic).
 * avx2_ops.c publishes it in the op table.
 *
 * Determinism: each (token, head) is computed alone, in position order, so results do not
 * depend on the batch or the threads.
 *
 * Thread model: pure functions over caller-owned memory; re-entrant.
 */
#include "kernels/x86/avx2_impl.h"

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

// Position iterator over one KV head through a block table (no divisions per position).
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

static ALWAYS_INLINE size_t kvp_next(struct kv_pos *p)
{
    if (p->slot == p->bs) {
        p->slot = 0;
        p->blk++;
        p->base = (size_t)p->table[p->blk] * p->block_elems + p->head_off;
    }
    return p->base + (size_t)(p->slot++) * p->slot_stride;
}

static ALWAYS_INLINE void attn_head_t(const struct tl_kv_layer *kv, const int32_t *block_table,
                                      int64_t n_ctx, int kv_head, const float *q, float scale,
                                      float *out, float *scores, float *acc, const int kt)
{
    const int hd = kv->head_dim;
    struct kv_pos p;
    kvp_init(&p, kv, block_table, kv_head);
    for (int64_t j = 0; j < n_ctx; j++) {
        size_t base = kvp_next(&p);
        __m256 s = _mm256_setzero_ps();
        for (int d = 0; d < hd; d += 8) {
            int left = hd - d;
            __m256 qv = left >= 8 ? _mm256_loadu_ps(q + d) : load_tail(q + d, left);
            s = _mm256_fmadd_ps(qv, load_kv(kt, kv->k, base + d, left), s);
        }
        scores[j] = hsum256(s) * scale;
    }
    float sum = tl__avx2_exp_sum(scores, n_ctx, tl__avx2_max_of(scores, n_ctx));
    // out = sum_j p_j v_j, j in order; the running sums live in `acc` (one pass over V)
    int d = 0;
    for (; d + 8 <= hd; d += 8)
        _mm256_storeu_ps(acc + d, _mm256_setzero_ps());
    if (d < hd) store_tail(acc + d, hd - d, _mm256_setzero_ps());
    kvp_init(&p, kv, block_table, kv_head);
    for (int64_t j = 0; j < n_ctx; j++) {
        size_t base = kvp_next(&p);
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

void tl__avx2_attn_head(const struct tl_kv_layer *kv, const int32_t *block_table, int64_t n_ctx,
                        int kv_head, const float *q, float scale, float *out, float *scores,
                        float *acc)
{
    if (kv->type == TL_DTYPE_Q8_0)
        attn_head_t(kv, block_table, n_ctx, kv_head, q, scale, out, scores, acc, KT_Q8);
    else if (kv->type == TL_DTYPE_F16)
        attn_head_t(kv, block_table, n_ctx, kv_head, q, scale, out, scores, acc, KT_F16);
    else
        attn_head_t(kv, block_table, n_ctx, kv_head, q, scale, out, scores, acc, KT_F32);
}
