/*
 * The extra weight types (Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K): block formats,
 * scalar dequantization and quantization, the activation quantizer, the scalar reference
 * matmul (its parallel driver: quants_driver.c).
 *
 * Design: one decoder per type, tl__qx_unpack, turns a 128-value superchunk of a row into the
 * common form of quants.h (unsigned quants, per-half D and M, a per-type offset). The
 * dequantizer and the reference matmul are written once over that form, so the bit layouts live
 * in one place, which the tests check against hand-built blocks. The SIMD files have their own
 * fast decoders for the common types and fall back to tl__qx_unpack for the rest.
 *
 * Quantizers are simple round-to-nearest ones (mkmodel and tests use them): type-0 blocks put
 * the value of largest magnitude at the most negative quant (as ggml's reference does), type-1
 * blocks map [min(0, min), max] onto the quant range, and the K-quants quantize their sub-block
 * scales (and mins) to 4, 6 or 8 bits against one f16 super-block scale, then requantize each
 * value with the scale actually stored. They make valid blocks for any finite input; NaN and
 * infinities give valid (if meaningless) blocks, never a crash or undefined conversion.
 *
 * Thread model: pure functions over caller-owned memory, re-entrant; tl__qx_matmul fans out
 * over the pool by output rows (and quantizes activations by tokens) like tl_matmul.
 */
#include "kernels/quants.h"
#include "kernels/cb4.h"

#include "core/error.h"

#include <math.h>
#include <string.h>

_Static_assert(sizeof(struct tl_block_q4_0) == 18, "Q4_0 block");
_Static_assert(sizeof(struct tl_block_q4_1) == 20, "Q4_1 block");
_Static_assert(sizeof(struct tl_block_q5_0) == 22, "Q5_0 block");
_Static_assert(sizeof(struct tl_block_q5_1) == 24, "Q5_1 block");
_Static_assert(sizeof(struct tl_block_q2_k) == 84, "Q2_K block");
_Static_assert(sizeof(struct tl_block_q3_k) == 110, "Q3_K block");
_Static_assert(sizeof(struct tl_block_q4_k) == 144, "Q4_K block");
_Static_assert(sizeof(struct tl_block_q5_k) == 176, "Q5_K block");
_Static_assert(sizeof(struct tl_block_q6_k) == 210, "Q6_K block");
_Static_assert(sizeof(struct tl__qa_chunk) == 320, "activation superchunk");

// ---- traits -----------------------------------------------------------------------------------

static const struct tl__qx_traits traits_q4_0 = {32, 18, 8, 3, false, false, false};
static const struct tl__qx_traits traits_q4_1 = {32, 20, 0, -1, true, false, false};
static const struct tl__qx_traits traits_q5_0 = {32, 22, 16, 4, false, false, false};
static const struct tl__qx_traits traits_q5_1 = {32, 24, 0, -1, true, false, false};
static const struct tl__qx_traits traits_q2_k = {256, 84, 0, -1, true, true, false};
static const struct tl__qx_traits traits_q3_k = {256, 110, 4, 2, false, true, false};
static const struct tl__qx_traits traits_q4_k = {256, 144, 0, -1, true, false, false};
static const struct tl__qx_traits traits_q5_k = {256, 176, 0, -1, true, false, false};
static const struct tl__qx_traits traits_q6_k = {256, 210, 32, 5, false, true, false};
static const struct tl__qx_traits traits_iq4_nl = {32, 18, 0, -1, false, false, true};
static const struct tl__qx_traits traits_iq4_xs = {256, 136, 0, -1, false, false, true};
static const struct tl__qx_traits traits_mxfp4 = {32, 17, 0, -1, false, false, true};

const struct tl__qx_traits *tl__qx_traits(enum tl_dtype type)
{
    switch (type) {
    case TL_DTYPE_Q4_0:
        return &traits_q4_0;
    case TL_DTYPE_Q4_1:
        return &traits_q4_1;
    case TL_DTYPE_Q5_0:
        return &traits_q5_0;
    case TL_DTYPE_Q5_1:
        return &traits_q5_1;
    case TL_DTYPE_Q2_K:
        return &traits_q2_k;
    case TL_DTYPE_Q3_K:
        return &traits_q3_k;
    case TL_DTYPE_Q4_K:
        return &traits_q4_k;
    case TL_DTYPE_Q5_K:
        return &traits_q5_k;
    case TL_DTYPE_Q6_K:
        return &traits_q6_k;
    case TL_DTYPE_IQ4_NL:
        return &traits_iq4_nl;
    case TL_DTYPE_IQ4_XS:
        return &traits_iq4_xs;
    case TL_DTYPE_MXFP4:
        return &traits_mxfp4;
    default:
        return NULL;
    }
}

bool tl__qx_supported(enum tl_dtype type)
{
    return tl__qx_traits(type) != NULL;
}

// ---- decoding ---------------------------------------------------------------------------------

static inline uint32_t load_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

// The 6-bit scale j (< 16) of a Q3_K super-block, as stored (0..63; the value uses it - 32).
static inline int k3_scale(const uint8_t *sc, int j)
{
    int lo = j < 8 ? sc[j] & 0xF : sc[j - 8] >> 4;
    return lo | (((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
}

// 32-blocks: block g of the superchunk is block 4s+g of the row.
static void unpack_q4_q5(enum tl_dtype type, const void *row, int64_t nb, int64_t s,
                         struct tl__qx_chunk *c)
{
    for (int g = 0; g < 4; g++) {
        int64_t b = 4 * s + g;
        uint8_t *q = c->q + 32 * g;
        if (b >= nb) {
            memset(q, 0, 32);
            c->D[2 * g] = c->D[2 * g + 1] = c->M[2 * g] = c->M[2 * g + 1] = 0.f;
            continue;
        }
        const uint8_t *qs;
        uint32_t qh = 0;
        float d, m = 0.f;
        switch (type) {
        case TL_DTYPE_Q4_0: {
            const struct tl_block_q4_0 *x = (const struct tl_block_q4_0 *)row + b;
            d = tl_fp16_to_f32(x->d), qs = x->qs;
            break;
        }
        case TL_DTYPE_Q4_1: {
            const struct tl_block_q4_1 *x = (const struct tl_block_q4_1 *)row + b;
            d = tl_fp16_to_f32(x->d), m = tl_fp16_to_f32(x->m), qs = x->qs;
            break;
        }
        case TL_DTYPE_Q5_0: {
            const struct tl_block_q5_0 *x = (const struct tl_block_q5_0 *)row + b;
            d = tl_fp16_to_f32(x->d), qs = x->qs, qh = load_u32le(x->qh);
            break;
        }
        default: {
            const struct tl_block_q5_1 *x = (const struct tl_block_q5_1 *)row + b;
            d = tl_fp16_to_f32(x->d), m = tl_fp16_to_f32(x->m), qs = x->qs;
            qh = load_u32le(x->qh);
            break;
        }
        }
        for (int j = 0; j < 16; j++) {
            q[j] = (uint8_t)((qs[j] & 0xF) | ((qh >> j) & 1) << 4);
            q[j + 16] = (uint8_t)((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
        }
        c->D[2 * g] = c->D[2 * g + 1] = d;
        c->M[2 * g] = c->M[2 * g + 1] = m;
    }
}

void tl__qx_unpack(enum tl_dtype type, const void *row, int64_t n_in, int64_t s,
                   struct tl__qx_chunk *c)
{
    const struct tl__qx_traits *tr = tl__qx_traits(type);
    TL_ASSERT(tr && !tr->cb4 && s >= 0 && s * 128 < n_in);
    if (tr->blk == 32) {
        unpack_q4_q5(type, row, n_in / 32, s, c);
        return;
    }
    // K-quants: superchunk s is half n = s % 2 of super-block s / 2.
    const int n = (int)(s % 2);
    const uint8_t *blk = (const uint8_t *)row + (size_t)(s / 2) * tr->blk_bytes;
    uint8_t *q = c->q;
    switch (type) {
    case TL_DTYPE_Q2_K: {
        const struct tl_block_q2_k *x = (const void *)blk;
        float d = tl_fp16_to_f32(x->d), dmin = tl_fp16_to_f32(x->dmin);
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++)
                q[32 * j + l] = (x->qs[32 * n + l] >> (2 * j)) & 3;
        for (int h = 0; h < 8; h++) {
            int sc = x->scales[8 * n + h];
            c->D[h] = d * (float)(sc & 0xF);
            c->M[h] = -(dmin * (float)(sc >> 4));
        }
        break;
    }
    case TL_DTYPE_Q3_K: {
        const struct tl_block_q3_k *x = (const void *)blk;
        float d = tl_fp16_to_f32(x->d);
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++)
                q[32 * j + l] = (uint8_t)(((x->qs[32 * n + l] >> (2 * j)) & 3) |
                                          (((x->hmask[l] >> (4 * n + j)) & 1) << 2));
        for (int h = 0; h < 8; h++) {
            c->D[h] = d * (float)(k3_scale(x->scales, 8 * n + h) - 32);
            c->M[h] = 0.f;
        }
        break;
    }
    case TL_DTYPE_Q4_K:
    case TL_DTYPE_Q5_K: {
        const uint8_t *scales, *qs, *qh = NULL;
        uint16_t hd, hdmin;
        if (type == TL_DTYPE_Q4_K) {
            const struct tl_block_q4_k *x = (const void *)blk;
            hd = x->d, hdmin = x->dmin, scales = x->scales, qs = x->qs;
        } else {
            const struct tl_block_q5_k *x = (const void *)blk;
            hd = x->d, hdmin = x->dmin, scales = x->scales, qs = x->qs, qh = x->qh;
        }
        float d = tl_fp16_to_f32(hd), dmin = tl_fp16_to_f32(hdmin);
        for (int g = 0; g < 4; g++) {
            // sub-block 4n + g: chunk of 64 values c = 2n + g/2, low nibbles for even g
            const uint8_t *src = qs + 32 * (2 * n + g / 2);
            for (int l = 0; l < 32; l++) {
                int v = g % 2 ? src[l] >> 4 : src[l] & 0xF;
                if (qh) v |= ((qh[l] >> (4 * n + g)) & 1) << 4;
                q[32 * g + l] = (uint8_t)v;
            }
            int sc, mn;
            tl__k4_scale_min(scales, 4 * n + g, &sc, &mn);
            c->D[2 * g] = c->D[2 * g + 1] = d * (float)sc;
            c->M[2 * g] = c->M[2 * g + 1] = -(dmin * (float)mn);
        }
        break;
    }
    case TL_DTYPE_Q6_K: {
        const struct tl_block_q6_k *x = (const void *)blk;
        float d = tl_fp16_to_f32(x->d);
        const uint8_t *ql = x->ql + 64 * n, *qh = x->qh + 32 * n;
        for (int l = 0; l < 32; l++) {
            q[l] = (uint8_t)((ql[l] & 0xF) | ((qh[l] & 3) << 4));
            q[32 + l] = (uint8_t)((ql[32 + l] & 0xF) | (((qh[l] >> 2) & 3) << 4));
            q[64 + l] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
            q[96 + l] = (uint8_t)((ql[32 + l] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
        for (int h = 0; h < 8; h++) {
            c->D[h] = d * (float)x->scales[8 * n + h];
            c->M[h] = 0.f;
        }
        break;
    }
    default:
        TL_ASSERT(!"not a K-quant");
    }
}

bool tl__qx_dequantize_row(enum tl_dtype type, const void *src, float *dst, int64_t n)
{
    const struct tl__qx_traits *tr = tl__qx_traits(type);
    if (!tr || n < 0 || n % tr->blk) return false;
    if (tr->cb4) return tl__cb4_dequantize_row(type, src, dst, n);
    struct tl__qx_chunk c;
    for (int64_t s = 0; s * 128 < n; s++) {
        tl__qx_unpack(type, src, n, s, &c);
        int64_t len = n - s * 128 < 128 ? n - s * 128 : 128;
        for (int64_t i = 0; i < len; i++) {
            // D * (q - off) is exact in f32; the one rounding is at + M, as in ggml
            float v = c.D[i / 16] * (float)(c.q[i] - tr->off);
            dst[s * 128 + i] = tr->has_min ? v + c.M[i / 16] : v;
        }
    }
    return true;
}

// ---- quantization -----------------------------------------------------------------------------

// round(v) clamped to [lo, hi] without undefined conversions (NaN gives lo).
static inline int qround(float v, int lo, int hi)
{
    if (!(v >= (float)lo)) return lo;
    if (v >= (float)hi) return hi;
    return (int)nearbyintf(v);
}

// The value of largest magnitude (first one on ties); 0 for an all-zero or NaN block.
static float signed_amax(const float *x, int n)
{
    float amax = 0.f, v = 0.f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), v = x[i];
    return v;
}

static void min_max(const float *x, int n, float *mn, float *mx)
{
    *mn = x[0], *mx = x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < *mn) *mn = x[i];
        if (x[i] > *mx) *mx = x[i];
    }
}

static inline float inv(float d)
{
    return d != 0.f ? 1.f / d : 0.f;
}

// Type-0 32-block: d = vmax / -(levels/2), so the largest magnitude lands on quant 0.
static float quant_sym32(const float *x, int half_levels, int *L)
{
    float d = signed_amax(x, 32) / (float)-half_levels;
    float dr = tl_fp16_to_f32(tl_f32_to_fp16(d)), id = inv(dr);
    for (int j = 0; j < 32; j++)
        L[j] = qround(x[j] * id, -half_levels, half_levels - 1) + half_levels;
    return d;
}

// Type-1 32-block over [min, max]; writes d and m (f16).
static void quant_asym32(const float *x, int levels, int *L, uint16_t *hd, uint16_t *hm)
{
    float mn, mx;
    min_max(x, 32, &mn, &mx);
    *hd = tl_f32_to_fp16((mx - mn) / (float)levels);
    *hm = tl_f32_to_fp16(mn);
    float dr = tl_fp16_to_f32(*hd), mr = tl_fp16_to_f32(*hm), id = inv(dr);
    for (int j = 0; j < 32; j++)
        L[j] = qround((x[j] - mr) * id, 0, levels);
}

static void quantize_q4_q5(enum tl_dtype type, const float *x, void *dst, int64_t nb)
{
    int L[32];
    for (int64_t b = 0; b < nb; b++, x += 32) {
        uint8_t *qs;
        uint8_t *qh = NULL;
        switch (type) {
        case TL_DTYPE_Q4_0: {
            struct tl_block_q4_0 *y = (struct tl_block_q4_0 *)dst + b;
            y->d = tl_f32_to_fp16(quant_sym32(x, 8, L));
            qs = y->qs;
            break;
        }
        case TL_DTYPE_Q4_1: {
            struct tl_block_q4_1 *y = (struct tl_block_q4_1 *)dst + b;
            quant_asym32(x, 15, L, &y->d, &y->m);
            qs = y->qs;
            break;
        }
        case TL_DTYPE_Q5_0: {
            struct tl_block_q5_0 *y = (struct tl_block_q5_0 *)dst + b;
            y->d = tl_f32_to_fp16(quant_sym32(x, 16, L));
            qs = y->qs, qh = y->qh;
            break;
        }
        default: {
            struct tl_block_q5_1 *y = (struct tl_block_q5_1 *)dst + b;
            quant_asym32(x, 31, L, &y->d, &y->m);
            qs = y->qs, qh = y->qh;
            break;
        }
        }
        uint32_t h = 0;
        for (int j = 0; j < 16; j++) {
            qs[j] = (uint8_t)((L[j] & 0xF) | (L[j + 16] & 0xF) << 4);
            h |= (uint32_t)(L[j] >> 4) << j | (uint32_t)(L[j + 16] >> 4) << (j + 16);
        }
        if (qh)
            for (int k = 0; k < 4; k++)
                qh[k] = (uint8_t)(h >> (8 * k));
    }
}

// Type-1 sub-block of n values: range [min(0, min), max] over `levels`; *scale and *neg_min
// (>= 0, the value of quant 0 negated).
static void sub_asym(const float *x, int n, int levels, float *scale, float *neg_min)
{
    float mn, mx;
    min_max(x, n, &mn, &mx);
    if (mn > 0.f) mn = 0.f;
    if (!(mx > mn)) mx = mn; // NaN or constant
    *scale = (mx - mn) / (float)levels;
    *neg_min = -mn;
}

// Quantizes scales v[0..n) (>= 0) to integers 0..levels against one f16 super scale.
static uint16_t super_scale(const float *v, int n, int levels, int *out)
{
    float mx = 0.f;
    for (int i = 0; i < n; i++)
        if (v[i] > mx) mx = v[i];
    uint16_t h = tl_f32_to_fp16(mx / (float)levels);
    float id = inv(tl_fp16_to_f32(h));
    for (int i = 0; i < n; i++)
        out[i] = qround(v[i] * id, 0, levels);
    return h;
}

static void quantize_q4k_q5k(enum tl_dtype type, const float *x, void *dst, int64_t nb)
{
    const int levels = type == TL_DTYPE_Q4_K ? 15 : 31;
    for (int64_t b = 0; b < nb; b++, x += 256) {
        float sc[8], mn[8];
        int isc[8], imn[8], L[256];
        for (int j = 0; j < 8; j++)
            sub_asym(x + 32 * j, 32, levels, &sc[j], &mn[j]);
        uint16_t hd = super_scale(sc, 8, 63, isc), hdmin = super_scale(mn, 8, 63, imn);
        uint8_t scales[12] = {0};
        for (int j = 0; j < 8; j++) {
            if (j < 4) {
                scales[j] = (uint8_t)isc[j];
                scales[j + 4] = (uint8_t)imn[j];
            } else {
                scales[j + 4] = (uint8_t)((isc[j] & 0xF) | (imn[j] & 0xF) << 4);
                scales[j - 4] |= (uint8_t)((isc[j] >> 4) << 6);
                scales[j] |= (uint8_t)((imn[j] >> 4) << 6);
            }
        }
        float d = tl_fp16_to_f32(hd), dmin = tl_fp16_to_f32(hdmin);
        for (int j = 0; j < 8; j++) {
            int s, m;
            tl__k4_scale_min(scales, j, &s, &m);
            float ds = d * (float)s, dm = dmin * (float)m, id = inv(ds);
            for (int i = 0; i < 32; i++)
                L[32 * j + i] = qround((x[32 * j + i] + dm) * id, 0, levels);
        }
        uint8_t *qs, *qh = NULL;
        if (type == TL_DTYPE_Q4_K) {
            struct tl_block_q4_k *y = (struct tl_block_q4_k *)dst + b;
            y->d = hd, y->dmin = hdmin;
            memcpy(y->scales, scales, 12);
            qs = y->qs;
        } else {
            struct tl_block_q5_k *y = (struct tl_block_q5_k *)dst + b;
            y->d = hd, y->dmin = hdmin;
            memcpy(y->scales, scales, 12);
            qs = y->qs, qh = y->qh;
            memset(qh, 0, 32);
        }
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                int a = L[64 * c + l], e = L[64 * c + 32 + l];
                qs[32 * c + l] = (uint8_t)((a & 0xF) | (e & 0xF) << 4);
                if (qh) qh[l] |= (uint8_t)((a >> 4) << (2 * c) | (e >> 4) << (2 * c + 1));
            }
    }
}

// Q6_K and Q3_K: type-0 sub-blocks of 16 with signed sub-scales s_j = vmax / -(levels/2),
// quantized to signed integers against d = max|s| / (scale range).
static void quantize_q6k_q3k(enum tl_dtype type, const float *x, void *dst, int64_t nb)
{
    const int half = type == TL_DTYPE_Q6_K ? 32 : 4;     // quant range [-half, half)
    const int srange = type == TL_DTYPE_Q6_K ? 128 : 32; // scale range [-srange, srange)
    for (int64_t b = 0; b < nb; b++, x += 256) {
        float s[16], smax = 0.f;
        for (int j = 0; j < 16; j++) {
            s[j] = signed_amax(x + 16 * j, 16) / (float)-half;
            if (fabsf(s[j]) > fabsf(smax)) smax = s[j];
        }
        // the largest sub-scale maps to -srange: d = smax / -srange
        uint16_t hd = tl_f32_to_fp16(smax / (float)-srange);
        float d = tl_fp16_to_f32(hd), id = inv(d);
        int isc[16], L[256];
        for (int j = 0; j < 16; j++) {
            isc[j] = qround(s[j] * id, -srange, srange - 1);
            float ids = inv(d * (float)isc[j]);
            for (int i = 0; i < 16; i++)
                L[16 * j + i] = qround(x[16 * j + i] * ids, -half, half - 1) + half;
        }
        if (type == TL_DTYPE_Q6_K) {
            struct tl_block_q6_k *y = (struct tl_block_q6_k *)dst + b;
            y->d = hd;
            for (int j = 0; j < 16; j++)
                y->scales[j] = (int8_t)isc[j];
            for (int n = 0; n < 2; n++)
                for (int l = 0; l < 32; l++) {
                    const int *v = L + 128 * n + l;
                    y->ql[64 * n + l] = (uint8_t)((v[0] & 0xF) | (v[64] & 0xF) << 4);
                    y->ql[64 * n + 32 + l] = (uint8_t)((v[32] & 0xF) | (v[96] & 0xF) << 4);
                    y->qh[32 * n + l] = (uint8_t)((v[0] >> 4) | (v[32] >> 4) << 2 |
                                                  (v[64] >> 4) << 4 | (v[96] >> 4) << 6);
                }
        } else {
            struct tl_block_q3_k *y = (struct tl_block_q3_k *)dst + b;
            y->d = hd;
            memset(y->scales, 0, 12);
            memset(y->hmask, 0, 32);
            for (int j = 0; j < 16; j++) {
                int l = isc[j] + 32; // stored 6-bit
                if (j < 8)
                    y->scales[j] |= (uint8_t)(l & 0xF);
                else
                    y->scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                y->scales[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            for (int e = 0; e < 256; e++)
                if (L[e] > 3) y->hmask[e % 32] |= (uint8_t)(1 << (e / 32));
            for (int n = 0; n < 2; n++)
                for (int l = 0; l < 32; l++) {
                    const int *v = L + 128 * n + l;
                    y->qs[32 * n + l] = (uint8_t)((v[0] & 3) | (v[32] & 3) << 2 | (v[64] & 3) << 4 |
                                                  (v[96] & 3) << 6);
                }
        }
    }
}

static void quantize_q2k(const float *x, void *dst, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++, x += 256) {
        struct tl_block_q2_k *y = (struct tl_block_q2_k *)dst + b;
        float sc[16], mn[16];
        int isc[16], imn[16], L[256];
        for (int j = 0; j < 16; j++)
            sub_asym(x + 16 * j, 16, 3, &sc[j], &mn[j]);
        y->d = super_scale(sc, 16, 15, isc);
        y->dmin = super_scale(mn, 16, 15, imn);
        float d = tl_fp16_to_f32(y->d), dmin = tl_fp16_to_f32(y->dmin);
        for (int j = 0; j < 16; j++) {
            y->scales[j] = (uint8_t)(isc[j] | imn[j] << 4);
            float ds = d * (float)isc[j], dm = dmin * (float)imn[j], id = inv(ds);
            for (int i = 0; i < 16; i++)
                L[16 * j + i] = qround((x[16 * j + i] + dm) * id, 0, 3);
        }
        for (int n = 0; n < 2; n++)
            for (int l = 0; l < 32; l++) {
                const int *v = L + 128 * n + l;
                y->qs[32 * n + l] = (uint8_t)(v[0] | v[32] << 2 | v[64] << 4 | v[96] << 6);
            }
    }
}

bool tl__qx_quantize_row(enum tl_dtype type, const float *src, void *dst, int64_t n)
{
    const struct tl__qx_traits *tr = tl__qx_traits(type);
    if (!tr || n < 0 || n % tr->blk) return false;
    if (tr->cb4) return tl__cb4_quantize_row(type, src, dst, n);
    int64_t nb = n / tr->blk;
    switch (type) {
    case TL_DTYPE_Q4_K:
    case TL_DTYPE_Q5_K:
        quantize_q4k_q5k(type, src, dst, nb);
        break;
    case TL_DTYPE_Q6_K:
    case TL_DTYPE_Q3_K:
        quantize_q6k_q3k(type, src, dst, nb);
        break;
    case TL_DTYPE_Q2_K:
        quantize_q2k(src, dst, nb);
        break;
    default:
        quantize_q4_q5(type, src, dst, nb);
        break;
    }
    return true;
}

// ---- activations ------------------------------------------------------------------------------

// Round to nearest even (the SIMD converters' rule), clamped; NaN maps to 0.
static inline int8_t rne_i8(float v)
{
    v = nearbyintf(v);
    if (!(v == v)) return 0;
    if (v > 127.f) v = 127.f;
    if (v < -127.f) v = -127.f;
    return (int8_t)v;
}

void tl__qa_quantize_ref(const float *x, int64_t n, void *dst)
{
    TL_ASSERT(n % 32 == 0);
    struct tl__qa_chunk *c = dst;
    int64_t n_super = (n + TL__QA_SUPER - 1) / TL__QA_SUPER;
    for (int64_t s = 0; s < n_super; s++, c++)
        for (int g = 0; g < 4; g++) {
            int64_t i0 = s * 128 + g * 32;
            int8_t q[32] = {0};
            float d = 0.f;
            if (i0 < n) {
                float amax = 0.f;
                for (int j = 0; j < 32; j++) {
                    float a = fabsf(x[i0 + j]);
                    amax = a > amax ? a : amax;
                }
                d = amax / 127.f;
                float id = amax != 0.f ? 127.f / amax : 0.f;
                for (int j = 0; j < 32; j++)
                    q[j] = rne_i8(x[i0 + j] * id);
            }
            memcpy(c->qs + 16 * g, q, 16);
            memcpy(c->qs + 64 + 16 * g, q + 16, 16);
            for (int k = 0; k < 4; k++) {
                c->d[4 * g + k] = d;
                c->nslo[4 * g + k] = -(q[4 * k] + q[4 * k + 1] + q[4 * k + 2] + q[4 * k + 3]);
                c->nshi[4 * g + k] =
                    -(q[16 + 4 * k] + q[17 + 4 * k] + q[18 + 4 * k] + q[19 + 4 * k]);
            }
        }
}

// ---- reference matmul -------------------------------------------------------------------------

// One superchunk's contribution to one output: per 16-value half, the exact integer dot of the
// offset quants with the activation bytes, scaled by D * d_x, plus M * d_x * sum(x bytes).
static float chunk_dot(const struct tl__qx_traits *tr, const struct tl__qx_chunk *c,
                       const struct tl__qa_chunk *a)
{
    float part = 0.f;
    for (int g = 0; g < 4; g++) {
        float dx = a->d[4 * g];
        for (int hh = 0; hh < 2; hh++) {
            const int8_t *xq = a->qs + 64 * hh + 16 * g;
            const uint8_t *q = c->q + 32 * g + 16 * hh;
            int32_t isum = 0, sx = 0;
            for (int l = 0; l < 16; l++) {
                isum += (q[l] - tr->off) * xq[l];
                sx += xq[l];
            }
            part += (float)isum * (c->D[2 * g + hh] * dx);
            if (tr->has_min) part += c->M[2 * g + hh] * (dx * (float)sx);
        }
    }
    return part;
}

// Q4_K/Q5_K/Q6_K: block by block with tl__kq_step (the order every packed kernel reproduces).
static void kq_ref_rows(const struct tl__qx_mm *m, int64_t r0, int64_t r1)
{
    const struct tl_weight *w = m->w;
    const int64_t n_super = w->n_in / 128;
    struct tl__qx_chunk c;
    for (int64_t r = r0; r < r1; r++) {
        const void *row = (const char *)w->data + (size_t)r * w->row_bytes;
        for (int64_t t = 0; t < m->n_tok; t++)
            m->y[t * w->n_out + r] = 0.f;
        for (int64_t s = 0; s < n_super; s++) {
            tl__qx_unpack(w->type, row, w->n_in, s, &c);
            for (int64_t t = 0; t < m->n_tok; t++) {
                const struct tl__qa_chunk *a = m->xa + t * m->xa_stride + s;
                const struct tl__kq_aux *ax = m->aux + t * m->aux_stride + 4 * s;
                float y = m->y[t * w->n_out + r];
                for (int g = 0; g < 4; g++)
                    y = tl__kq_step(w->type, y, c.q + 32 * g, a->qs + 16 * g, a->qs + 64 + 16 * g,
                                    c.D[2 * g], c.D[2 * g + 1], c.M[2 * g], ax + g);
                m->y[t * w->n_out + r] = y;
            }
        }
    }
}

void tl__qx_ref_matmul_rows(const struct tl__qx_mm *m, int64_t r0, int64_t r1)
{
    if (tl__kq_packable(m->w->type)) {
        kq_ref_rows(m, r0, r1);
        return;
    }
    if (m->tr->cb4) {
        tl__cb4_ref_rows(m, r0, r1);
        return;
    }
    const struct tl_weight *w = m->w;
    const int64_t n = w->n_in, n_super = (n + 127) / 128;
    struct tl__qx_chunk c;
    for (int64_t r = r0; r < r1; r++) {
        const void *row = (const char *)w->data + (size_t)r * w->row_bytes;
        for (int64_t t = 0; t < m->n_tok; t++)
            m->y[t * w->n_out + r] = 0.f;
        for (int64_t s = 0; s < n_super; s++) {
            tl__qx_unpack(w->type, row, n, s, &c);
            for (int64_t t = 0; t < m->n_tok; t++)
                m->y[t * w->n_out + r] += chunk_dot(m->tr, &c, m->xa + t * m->xa_stride + s);
        }
    }
}
