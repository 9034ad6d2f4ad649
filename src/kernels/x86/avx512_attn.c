/*
 * Attention of the AVX-512 kernel variant (F, BW, VL, DQ, VNNI; compiled with those -m flags and
 * only called when the CPU has them): attn_head (one token, one head; two passes over the
 * context) and attn_kv (all the query heads of a range of KV heads of a run of tokens of one
 * sequence in one pass over its context, with an online softmax), each a table of always-inline
 * templates instantiated per KV type (F32, F16, Q8_0) and head size; and the Q8_0 KV store's
 * quantizer. Q8_0: attn_head widens int8 * d to f32 exactly as it loads (bit-identical to F32
 * over the dequantized cache); attn_kv widens the int8 unscaled and applies the block's d once
 * per block ((q . k8) * d, (p * d) * v8), the same operations in its direct and buffered paths.
 * avx512_ops.c publishes them in the op table.
 *
 * Determinism: every (token, head) goes through the same operations over its context whatever
 * else shares the call (see the two sections below), so results do not depend on the batch or
 * the threads.
 *
 * Thread model: pure functions over caller-owned memory; re-entrant.
 */
#include "kernels/x86/avx512_impl.h"

#include "kernels/attn_iter.h"

#include "core/error.h"

#include <math.h>
#include <string.h>

// ---- attention --------------------------------------------------------------------------------
//
// Two passes per (token, head) over the context in position order: scores (q . k_j * scale) in
// groups of 16 positions, whose 16 partial-product vectors are summed by one transpose-add tree
// (the add order for position j depends only on (j - lo) mod 16, lo the first position of the
// token's window, 0 without one), then exp/sum, then
// out = sum_j p_j v_j with the head's output dims in registers. Positions are walked through
// the block table without divisions.

// KV element types of the templates below.
// KT_Q8F: Q8_0 in attn_kv with the block scale folded out of the sums (one query head per KV
// head); KT_Q8 widens int8 * d exactly as it loads.
enum { KT_F32 = 0, KT_F16 = 1, KT_Q8 = 2, KT_Q8F = 3 };

// 16 K or V values at element index idx, lanes off in m read as zero. Q8_0: idx is a multiple
// of 16 and head_dim of 32, so the 16 values are one half of a block and m is always full (it
// is not applied); d * q is exact in f32, the same value as the scalar reference's.
static ALWAYS_INLINE __m512 load_kv(int kt, const void *base, size_t idx, __mmask16 m)
{
    if (kt == KT_Q8 || kt == KT_Q8F) {
        const struct tl_block_q8_0 *b = (const struct tl_block_q8_0 *)base + idx / TL_QK8_0;
        __m128i q8 = _mm_loadu_si128((const __m128i *)(b->qs + idx % TL_QK8_0));
        __m512 x = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q8));
        return _mm512_mul_ps(x, _mm512_set1_ps(_cvtsh_ss(b->d)));
    }
    if (kt == KT_F16)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)base + idx));
    return _mm512_maskz_loadu_ps(m, (const float *)base + idx);
}

// Bytes spanned by the first n elements of a pool of element type kt (see tl__kv_elem_bytes).
static ALWAYS_INLINE size_t kv_bytes(int kt, size_t n)
{
    return kt >= KT_Q8 ? n / TL_QK8_0 * sizeof(struct tl_block_q8_0) : n * (kt == KT_F16 ? 2 : 4);
}

// Q8_0 in attn_kv: the 16 int8 of half c of a row's block c / 2, widened to f32 without the
// scale (exact), and that block's scale; `row` is the row's first block (element offset / 32,
// computed once per row: (off + 16 c) / 32 per load was a division chain per vector).
static ALWAYS_INLINE __m512 q8_raw(const struct tl_block_q8_0 *row, int c)
{
    __m128i q8 = _mm_loadu_si128((const __m128i *)(row[c / 2].qs + (c % 2) * 16));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q8));
}

static ALWAYS_INLINE float q8_d(const struct tl_block_q8_0 *row, int b)
{
    return _cvtsh_ss(row[b].d);
}

// head_dim <= 128: NQ = ceil(head_dim / 16) vectors per row, held in registers. Positions
// [lo, n_ctx) (scores[j] is position lo + j; the chunks of 16 count from lo).
static ALWAYS_INLINE void attn_small(const struct tl_kv_layer *kv, const int32_t *table, int64_t lo,
                                     int64_t n_ctx, int kv_head, const float *q, float scale,
                                     float softcap, float *out, float *scores, const int kt,
                                     const int NQ)
{
    const int hd = kv->head_dim;
    n_ctx -= lo;
    const __mmask16 last = tail_mask16(hd - (NQ - 1) * 16);
    __m512 qv[8];
#pragma GCC unroll 8
    for (int c = 0; c < NQ; c++)
        qv[c] = _mm512_maskz_loadu_ps(c == NQ - 1 ? last : 0xffff, q + 16 * c);
    struct tl__kv_pos p;
    tl__kv_pos_init_at(&p, kv, table, kv_head, lo);
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    for (int64_t j0 = 0; j0 < n_ctx; j0 += 16) {
        const int64_t nu = n_ctx - j0 < 16 ? n_ctx - j0 : 16;
        __m512 part[16];
#pragma GCC unroll 16
        for (int u = 0; u < 16; u++) {
            part[u] = _mm512_setzero_ps();
            if (u < nu) {
                size_t off = tl__kv_pos_next(&p);
#pragma GCC unroll 8
                for (int c = 0; c < NQ; c++)
                    part[u] = _mm512_fmadd_ps(
                        qv[c], load_kv(kt, kv->k, off + 16 * c, c == NQ - 1 ? last : 0xffff),
                        part[u]);
            }
        }
        __mmask16 m = tail_mask16(nu);
        __m512 s = _mm512_mul_ps(reduce16(part), _mm512_set1_ps(scale));
        _mm512_mask_storeu_ps(scores + j0, m, s);
        vmax = _mm512_mask_max_ps(vmax, m, vmax, s);
    }
    float mx = _mm512_reduce_max_ps(vmax);
    if (softcap > 0.f) {
        for (int64_t j = 0; j < n_ctx; j++)
            scores[j] = tl__softcap(scores[j], softcap);
        mx = tl__avx512_max_of(scores, n_ctx);
    }
    float sum = tl__avx512_exp_sum(scores, n_ctx, mx);
    __m512 acc[8];
#pragma GCC unroll 8
    for (int c = 0; c < NQ; c++)
        acc[c] = _mm512_setzero_ps();
    tl__kv_pos_init_at(&p, kv, table, kv_head, lo);
    for (int64_t j = 0; j < n_ctx; j++) {
        size_t off = tl__kv_pos_next(&p);
        __m512 pj = _mm512_set1_ps(scores[j]);
#pragma GCC unroll 8
        for (int c = 0; c < NQ; c++)
            acc[c] = _mm512_fmadd_ps(
                pj, load_kv(kt, kv->v, off + 16 * c, c == NQ - 1 ? last : 0xffff), acc[c]);
    }
    __m512 inv = _mm512_set1_ps(1.f / sum);
#pragma GCC unroll 8
    for (int c = 0; c < NQ; c++)
        _mm512_mask_storeu_ps(out + 16 * c, c == NQ - 1 ? last : 0xffff,
                              _mm512_mul_ps(acc[c], inv));
}

// Any head_dim: the same arithmetic order per element, vectors streamed from memory.
static ALWAYS_INLINE void attn_large(const struct tl_kv_layer *kv, const int32_t *table, int64_t lo,
                                     int64_t n_ctx, int kv_head, const float *q, float scale,
                                     float softcap, float *out, float *scores, float *acc,
                                     const int kt)
{
    const int hd = kv->head_dim;
    n_ctx -= lo;
    struct tl__kv_pos p;
    tl__kv_pos_init_at(&p, kv, table, kv_head, lo);
    for (int64_t j = 0; j < n_ctx; j++) {
        size_t off = tl__kv_pos_next(&p);
        __m512 s = _mm512_setzero_ps();
        for (int d = 0; d < hd; d += 16) {
            __mmask16 m = tail_mask16(hd - d);
            s = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + d), load_kv(kt, kv->k, off + d, m), s);
        }
        scores[j] = hsum512(s) * scale;
        if (softcap > 0.f) scores[j] = tl__softcap(scores[j], softcap);
    }
    float sum = tl__avx512_exp_sum(scores, n_ctx, tl__avx512_max_of(scores, n_ctx));
    for (int d = 0; d < hd; d += 16)
        _mm512_mask_storeu_ps(acc + d, tail_mask16(hd - d), _mm512_setzero_ps());
    tl__kv_pos_init_at(&p, kv, table, kv_head, lo);
    for (int64_t j = 0; j < n_ctx; j++) {
        size_t off = tl__kv_pos_next(&p);
        __m512 pj = _mm512_set1_ps(scores[j]);
        for (int d = 0; d < hd; d += 16) {
            __mmask16 m = tail_mask16(hd - d);
            __m512 a = _mm512_maskz_loadu_ps(m, acc + d);
            _mm512_mask_storeu_ps(acc + d, m,
                                  _mm512_fmadd_ps(pj, load_kv(kt, kv->v, off + d, m), a));
        }
    }
    __m512 inv = _mm512_set1_ps(1.f / sum);
    for (int d = 0; d < hd; d += 16) {
        __mmask16 m = tail_mask16(hd - d);
        _mm512_mask_storeu_ps(out + d, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, acc + d), inv));
    }
}

typedef void (*attn_fn)(const struct tl_kv_layer *kv, const int32_t *table, int64_t lo,
                        int64_t n_ctx, int kv_head, const float *q, float scale, float softcap,
                        float *out, float *scores);
#define DEF_ATTN(KT, NQ)                                                                           \
    static void attn_##KT##_##NQ(const struct tl_kv_layer *kv, const int32_t *table, int64_t lo,   \
                                 int64_t n_ctx, int kv_head, const float *q, float scale,          \
                                 float softcap, float *out, float *scores)                         \
    {                                                                                              \
        attn_small(kv, table, lo, n_ctx, kv_head, q, scale, softcap, out, scores, KT, NQ);         \
    }
#define DEF_ATTN_NQ(KT)                                                                            \
    DEF_ATTN(KT, 1)                                                                                \
    DEF_ATTN(KT, 2)                                                                                \
    DEF_ATTN(KT, 3)                                                                                \
    DEF_ATTN(KT, 4) DEF_ATTN(KT, 5) DEF_ATTN(KT, 6) DEF_ATTN(KT, 7) DEF_ATTN(KT, 8)
DEF_ATTN_NQ(0)
DEF_ATTN_NQ(1)
DEF_ATTN_NQ(2)
// [kt][nq]
static const attn_fn attn_table[3][9] = {
    {0, attn_0_1, attn_0_2, attn_0_3, attn_0_4, attn_0_5, attn_0_6, attn_0_7, attn_0_8},
    {0, attn_1_1, attn_1_2, attn_1_3, attn_1_4, attn_1_5, attn_1_6, attn_1_7, attn_1_8},
    {0, attn_2_1, attn_2_2, attn_2_3, attn_2_4, attn_2_5, attn_2_6, attn_2_7, attn_2_8},
};

static int kv_kt(const struct tl_kv_layer *kv)
{
    return kv->type == TL_DTYPE_Q8_0 ? KT_Q8 : kv->type == TL_DTYPE_F16 ? KT_F16 : KT_F32;
}

void tl__avx512_attn_head(const struct tl_kv_layer *kv, const int32_t *block_table, int64_t lo,
                          int64_t n_ctx, int kv_head, const float *q, float scale, float softcap,
                          float *out, float *scores, float *acc)
{
    const int kt = kv_kt(kv), nq = (kv->head_dim + 15) / 16;
    if (nq <= 8)
        attn_table[kt][nq](kv, block_table, lo, n_ctx, kv_head, q, scale, softcap, out, scores);
    else if (kt == KT_Q8)
        attn_large(kv, block_table, lo, n_ctx, kv_head, q, scale, softcap, out, scores, acc, KT_Q8);
    else if (kt == KT_F16)
        attn_large(kv, block_table, lo, n_ctx, kv_head, q, scale, softcap, out, scores, acc,
                   KT_F16);
    else
        attn_large(kv, block_table, lo, n_ctx, kv_head, q, scale, softcap, out, scores, acc,
                   KT_F32);
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
// position j depends only on j mod 16, whatever the window); a token's chunks are those of its own
// context, masked the same way whoever shares the call, and every (token, head) goes through the
// same operations on the same values whichever others share its call, so results do not depend on
// the batch or the threads. A sliding window (tl_attn_opts) starts the walk at the chunk
// holding the first token's first key; each token skips the chunks wholly before its window
// and masks the lanes before it in the chunk where it starts, so a token's chunks are the
// same multiples of 16 alone or in a run. Soft-capping goes through scalar tanhf per score.

#ifndef TL_AVX512_AKPF
#define TL_AVX512_AKPF _MM_HINT_T0
#endif
// (token, head) pairs per call, and their accumulators
enum { AK_MAX_PAIRS = 256, AK_ACC_FLOATS = 8192 };
#ifndef TL_AVX512_AKPF_MIN
#define TL_AVX512_AKPF_MIN 1024
#endif
enum { AK_PF_MIN_CTX = TL_AVX512_AKPF_MIN }; // contexts from which K/V rows are prefetched ahead

static ALWAYS_INLINE void attn_kv_t(const struct tl_kv_layer *kv, const int32_t *table,
                                    int64_t n_ctx0, int n_q, int kvh0, int n_kvh, int group,
                                    const float *q, size_t q_stride, float scale, int64_t window,
                                    float softcap, float *out, const int kt, const int NQ,
                                    const int DIRECT)
{
    const int hd = kv->head_dim, nh = n_kvh * group, hp = NQ * 16;
    const __mmask16 last = tail_mask16(hd - (NQ - 1) * 16);
    const int64_t n_ctx_max = n_ctx0 + n_q - 1;
    const int pf_kv = n_ctx_max >= AK_PF_MIN_CTX;
    _Alignas(64) float acc[AK_ACC_FLOATS];                 // (token, head) x hp output accumulators
    _Alignas(64) float kbuf[16][8 * 16], vbuf[16][8 * 16]; // (unused when DIRECT)
    float kd[16][4], vd[16][4]; // Q8_0: the buffered rows' block scales (kbuf/vbuf unscaled)
    _Alignas(64) float pbuf[16];
    float m[AK_MAX_PAIRS], l[AK_MAX_PAIRS];
    size_t offs[16], next[16]; // this chunk's and the next one's (position, KV head 0) offsets
    const size_t row_bytes = kv_bytes(kt, (size_t)hd);
    for (int th = 0; th < n_q * nh; th++) {
        m[th] = -INFINITY;
        l[th] = 0.f;
        for (int c = 0; c < NQ; c++)
            _mm512_store_ps(acc + th * hp + 16 * c, _mm512_setzero_ps());
    }
    // the walk starts at the chunk (a multiple of 16 positions, as for a token alone) holding
    // the first token's first position; later tokens' windows start no earlier
    const int64_t jstart = tl__attn_lo(n_ctx0, window) / 16 * 16;
    struct tl__kv_pos p;
    tl__kv_pos_init_at(&p, kv, table, 0, jstart);
    int n_next = n_ctx_max - jstart < 16 ? (int)(n_ctx_max - jstart) : 16;
    for (int u = 0; u < n_next; u++)
        next[u] = tl__kv_pos_next(&p); // K and V share the layout
    for (int64_t j0 = jstart; j0 < n_ctx_max; j0 += 16) {
        const int nu = n_next;
        memcpy(offs, next, sizeof(offs));
        int64_t left = n_ctx_max - j0 - 16;
        n_next = left <= 0 ? 0 : left < 16 ? (int)left : 16;
        for (int u = 0; u < n_next; u++)
            next[u] = tl__kv_pos_next(&p);
        for (int kh = 0; kh < n_kvh; kh++) {
            const size_t hoff = (size_t)(kvh0 + kh) * hd;
            // the next chunk's rows of this KV head, while this one computes: a head's rows
            // are short runs a position apart, which the hardware prefetchers follow badly
            // from DRAM (long contexts: 1.3-1.6x faster) but well enough from the caches
            // (short ones: the prefetches only cost)
            for (int u = 0; u < (pf_kv ? n_next : 0); u++)
                for (size_t b = 0; b < row_bytes; b += 64) {
                    _mm_prefetch((const char *)kv->k + kv_bytes(kt, next[u] + hoff) + b,
                                 TL_AVX512_AKPF);
                    _mm_prefetch((const char *)kv->v + kv_bytes(kt, next[u] + hoff) + b,
                                 TL_AVX512_AKPF);
                }
            if (!DIRECT && kt == KT_Q8F) {
                for (int u = 0; u < nu; u++) {
                    const struct tl_block_q8_0 *kr =
                        (const struct tl_block_q8_0 *)kv->k + (offs[u] + hoff) / TL_QK8_0;
                    const struct tl_block_q8_0 *vr =
                        (const struct tl_block_q8_0 *)kv->v + (offs[u] + hoff) / TL_QK8_0;
#pragma GCC unroll 8
                    for (int c = 0; c < NQ; c++) {
                        _mm512_store_ps(kbuf[u] + 16 * c, q8_raw(kr, c));
                        _mm512_store_ps(vbuf[u] + 16 * c, q8_raw(vr, c));
                    }
#pragma GCC unroll 4
                    for (int b = 0; b < NQ / 2; b++) {
                        kd[u][b] = q8_d(kr, b);
                        vd[u][b] = q8_d(vr, b);
                    }
                }
            } else if (!DIRECT) {
                for (int u = 0; u < nu; u++)
#pragma GCC unroll 8
                    for (int c = 0; c < NQ; c++) {
                        __mmask16 mk = c == NQ - 1 ? last : 0xffff;
                        _mm512_store_ps(kbuf[u] + 16 * c,
                                        load_kv(kt, kv->k, offs[u] + hoff + 16 * c, mk));
                        _mm512_store_ps(vbuf[u] + 16 * c,
                                        load_kv(kt, kv->v, offs[u] + hoff + 16 * c, mk));
                    }
            }
            for (int qi = 0; qi < n_q; qi++) {
                const int64_t n_ctx = n_ctx0 + qi, lo = tl__attn_lo(n_ctx, window);
                if (j0 >= n_ctx) continue;   // this chunk is past the token's context
                if (j0 + 16 <= lo) continue; // or wholly before its window
                const int nt = n_ctx - j0 < 16 ? (int)(n_ctx - j0) : 16;
                // positions j0 + u0 .. of the chunk are in the window (u0 > 0 only in the
                // chunk where the window starts)
                const int u0 = lo > j0 ? (int)(lo - j0) : 0;
                const __mmask16 um = tail_mask16(nt) & (__mmask16)(0xffffu << u0);
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
                        if (u < nt && kt == KT_Q8F) {
                            // per block: (q . k8 over its 32 values) * d, one multiply by the
                            // scale per block, the same arithmetic from the cache or the buffer
                            const struct tl_block_q8_0 *kr =
                                (const struct tl_block_q8_0 *)kv->k + (offs[u] + hoff) / TL_QK8_0;
#pragma GCC unroll 4
                            for (int b = 0; b < NQ / 2; b++) {
                                __m512 k0 =
                                    DIRECT ? q8_raw(kr, 2 * b) : _mm512_load_ps(kbuf[u] + 32 * b);
                                __m512 k1 = DIRECT ? q8_raw(kr, 2 * b + 1)
                                                   : _mm512_load_ps(kbuf[u] + 32 * b + 16);
                                __m512 t = _mm512_fmadd_ps(qv[2 * b + 1], k1,
                                                           _mm512_mul_ps(qv[2 * b], k0));
                                __m512 db = _mm512_set1_ps(DIRECT ? q8_d(kr, b) : kd[u][b]);
                                part[u] =
                                    b == 0 ? _mm512_mul_ps(t, db) : _mm512_fmadd_ps(t, db, part[u]);
                            }
                        } else if (u < nt) {
#pragma GCC unroll 8
                            for (int c = 0; c < NQ; c++) {
                                __m512 kv_ = DIRECT ? load_kv(kt, kv->k, offs[u] + hoff + 16 * c,
                                                              c == NQ - 1 ? last : 0xffff)
                                                    : _mm512_load_ps(kbuf[u] + 16 * c);
                                part[u] = _mm512_fmadd_ps(qv[c], kv_, part[u]);
                            }
                        }
                    }
                    __m512 sv = _mm512_mul_ps(reduce16(part), _mm512_set1_ps(scale));
                    if (softcap > 0.f) {
                        _Alignas(64) float sc[16];
                        _mm512_store_ps(sc, sv);
                        for (int u = u0; u < nt; u++)
                            sc[u] = tl__softcap(sc[u], softcap);
                        sv = _mm512_load_ps(sc);
                    }
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
                    for (int u = u0; u < nt && kt == KT_Q8F; u++) {
                        // p_u * d per block (a scalar product), then one FMA per 16 values
                        const struct tl_block_q8_0 *vr =
                            (const struct tl_block_q8_0 *)kv->v + (offs[u] + hoff) / TL_QK8_0;
#pragma GCC unroll 4
                        for (int b = 0; b < NQ / 2; b++) {
                            __m512 pb = _mm512_set1_ps(pbuf[u] * (DIRECT ? q8_d(vr, b) : vd[u][b]));
                            __m512 v0 =
                                DIRECT ? q8_raw(vr, 2 * b) : _mm512_load_ps(vbuf[u] + 32 * b);
                            __m512 v1 = DIRECT ? q8_raw(vr, 2 * b + 1)
                                               : _mm512_load_ps(vbuf[u] + 32 * b + 16);
                            a[2 * b] = _mm512_fmadd_ps(pb, v0, a[2 * b]);
                            a[2 * b + 1] = _mm512_fmadd_ps(pb, v1, a[2 * b + 1]);
                        }
                    }
                    for (int u = u0; u < nt && kt != KT_Q8F; u++) {
                        __m512 pu = _mm512_set1_ps(pbuf[u]);
#pragma GCC unroll 8
                        for (int c = 0; c < NQ; c++) {
                            __m512 vv = DIRECT ? load_kv(kt, kv->v, offs[u] + hoff + 16 * c,
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
                       int64_t window, float softcap, float *out);
#define DEF_AKV(KT, NQ, D)                                                                         \
    static void akv_##KT##_##NQ##_##D(const struct tl_kv_layer *kv, const int32_t *table,          \
                                      int64_t n_ctx0, int n_q, int kvh0, int n_kvh, int group,     \
                                      const float *q, size_t q_stride, float scale,                \
                                      int64_t window, float softcap, float *out)                   \
    {                                                                                              \
        attn_kv_t(kv, table, n_ctx0, n_q, kvh0, n_kvh, group, q, q_stride, scale, window, softcap, \
                  out, KT, NQ, D);                                                                 \
    }
#define DEF_AKV_NQ(KT, D)                                                                          \
    DEF_AKV(KT, 1, D)                                                                              \
    DEF_AKV(KT, 2, D)                                                                              \
    DEF_AKV(KT, 3, D)                                                                              \
    DEF_AKV(KT, 4, D)                                                                              \
    DEF_AKV(KT, 5, D) DEF_AKV(KT, 6, D) DEF_AKV(KT, 7, D) DEF_AKV(KT, 8, D)
DEF_AKV_NQ(0, 0)
DEF_AKV_NQ(1, 0)
DEF_AKV_NQ(2, 0)
DEF_AKV_NQ(3, 0)
DEF_AKV_NQ(0, 1)
DEF_AKV_NQ(1, 1)
DEF_AKV_NQ(2, 1)
DEF_AKV_NQ(3, 1)
#define AKV_LIST(KT, D)                                                                            \
    {                                                                                              \
        0, akv_##KT##_1_##D, akv_##KT##_2_##D, akv_##KT##_3_##D, akv_##KT##_4_##D,                 \
            akv_##KT##_5_##D, akv_##KT##_6_##D, akv_##KT##_7_##D, akv_##KT##_8_##D                 \
    }
// [direct][kt][nq]
static const akv_fn akv_table[2][4][9] = {
    {AKV_LIST(0, 0), AKV_LIST(1, 0), AKV_LIST(2, 0), AKV_LIST(3, 0)},
    {AKV_LIST(0, 1), AKV_LIST(1, 1), AKV_LIST(2, 1), AKV_LIST(3, 1)}};

int tl__avx512_attn_kv_pairs(int head_dim)
{
    int nq = (head_dim + 15) / 16;
    if (nq > 8) return 0;
    int by_acc = AK_ACC_FLOATS / (nq * 16);
    return by_acc < AK_MAX_PAIRS ? by_acc : AK_MAX_PAIRS;
}

void tl__avx512_attn_kv(const struct tl_kv_layer *kv, const int32_t *block_table, int64_t n_ctx0,
                        int n_q, int kvh0, int n_kvh, int group, const float *q, size_t q_stride,
                        float scale, int64_t window, float softcap, float *out)
{
    int nq = (kv->head_dim + 15) / 16;
    TL_ASSERT(nq <= 8 && n_q >= 1 && n_q * n_kvh * group <= tl__avx512_attn_kv_pairs(kv->head_dim));
    // one query head of one token per KV head reads K and V straight from the cache; otherwise
    // they are converted once into a buffer
    const int direct = n_q == 1 && group == 1;
    // Q8_0: the scale folded out when each KV head has one query head (the K/V widening is
    // then per (token, head) and the fold saves a multiply per vector: 1.2-1.3x faster); with
    // grouped heads the rows are widened once for the group, exactly, and the fold would only
    // add work per head (1.1x slower measured). A model's group is fixed, so each (token, head)
    // always gets the same arithmetic.
    int kt = kv_kt(kv);
    if (kt == KT_Q8 && group == 1) kt = KT_Q8F;
    akv_table[direct][kt][nq](kv, block_table, n_ctx0, n_q, kvh0, n_kvh, group, q, q_stride, scale,
                              window, softcap, out);
}

// ---- the Q8_0 KV store --------------------------------------------------------------------------
//
// tl_quantize_row(Q8_0) step for step, so the bytes are the same for every input but a signaling
// NaN (which no arithmetic makes; glibc's fmaxf returns NaN for it, a vector max does not): amax by
// max(|x|, amax) (a NaN |x| leaves amax, as fmaxf), d and 1 / d in scalar f32 as there, x * id
// rounded half away from zero (trunc, then +-1 where the exact remainder |v - trunc(v)| >= 0.5,
// which is roundf), clamped to [-127, 127], NaN -> 0.
void tl__avx512_quantize_q8_0(const float *src, struct tl_block_q8_0 *dst, int64_t n)
{
    const __m512 absm = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    const __m512 signm = _mm512_castsi512_ps(_mm512_set1_epi32((int)0x80000000u));
    const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.f);
    const __m512 hi = _mm512_set1_ps(127.f), lo = _mm512_set1_ps(-127.f);
    for (int64_t b = 0; b < n / TL_QK8_0; b++) {
        const float *x = src + b * TL_QK8_0;
        __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
        __m512 a = _mm512_max_ps(_mm512_and_ps(x0, absm), _mm512_setzero_ps());
        a = _mm512_max_ps(_mm512_and_ps(x1, absm), a);
        float amax = _mm512_reduce_max_ps(a);
        float d = amax / 127.f;
        float id = d != 0.f ? 1.f / d : 0.f;
        dst[b].d = tl_f32_to_fp16(d);
        const __m512 vid = _mm512_set1_ps(id);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m512 v = _mm512_mul_ps(h ? x1 : x0, vid);
            __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            __mmask16 up =
                _mm512_cmp_ps_mask(_mm512_and_ps(_mm512_sub_ps(v, t), absm), half, _CMP_GE_OQ);
            t = _mm512_mask_add_ps(t, up, t, _mm512_or_ps(_mm512_and_ps(v, signm), one));
            t = _mm512_max_ps(_mm512_min_ps(t, hi), lo);
            __mmask16 ord = _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
            __m512i qi = _mm512_maskz_cvtps_epi32(ord, t);
            __m128i q8 = _mm512_cvtepi32_epi8(qi);
            __asm__("" : "+v"(q8)); // narrow in a register, then store (see f32_to_f16)
            _mm_storeu_si128((__m128i *)(dst[b].qs + 16 * h), q8);
        }
    }
}
