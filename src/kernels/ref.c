/*
 * Scalar reference for every kernel op, and the "scalar" ISA variant built from it.
 *
 * Design: the plainest correct code, one output element at a time, in a fixed order: the
 * tests compare every SIMD variant with these functions, and the scalar variant *is* these
 * functions (so it is bit-identical to the reference and deterministic by construction).
 * Accuracy over speed: reductions that are cheap (norms, softmax sums) accumulate in double.
 * The Q8_0 matmul quantizes activations to Q8_0 (as llama.cpp does) and accumulates exact int32
 * block dot products, scaled per block by d_w * d_x.
 *
 * Thread model: pure functions over caller-owned buffers; re-entrant. No allocation.
 */
#include "kernels/kernels_impl.h"

#include "core/error.h"

#include <math.h>
#include <string.h>

// ---- activation quantization ------------------------------------------------------------------

// Round to nearest even in the default FP environment, clamped; NaN maps to 0. The SIMD
// quantizers use the same rule (hardware RNE), so all ISAs produce identical bytes.
static inline int8_t q8_rne(float v)
{
    v = nearbyintf(v);
    if (!(v == v)) return 0;
    if (v > 127.f) v = 127.f;
    if (v < -127.f) v = -127.f;
    return (int8_t)v;
}

void tl__ref_quantize_x(const float *x, int64_t n, void *dst)
{
    struct tl__xq_row r = tl__xq_view(dst, n);
    tl__xq_clear_pad(dst, n);
    int64_t n_super = (n + TL__XQ_SUPER - 1) / TL__XQ_SUPER;
    for (int64_t b = 0; b < n_super * 4; b++) {
        int64_t i0 = b * TL_QK8_0;
        int64_t len = n - i0 < TL_QK8_0 ? (n - i0 > 0 ? n - i0 : 0) : TL_QK8_0;
        float amax = 0.f;
        for (int64_t j = 0; j < len; j++) {
            float a = fabsf(x[i0 + j]);
            amax = a > amax ? a : amax;
        }
        float d = amax / 127.f;
        float id = amax != 0.f ? 127.f / amax : 0.f;
        int8_t q[TL_QK8_0];
        for (int64_t j = 0; j < TL_QK8_0; j++)
            q[j] = j < len ? q8_rne(x[i0 + j] * id) : 0;
        int8_t *lo = (int8_t *)tl__xq_lo(r, b), *hi = (int8_t *)tl__xq_hi(r, b);
        memcpy(lo, q, 16);
        memcpy(hi, q + 16, 16);
        int64_t s = b / 4, g = b % 4;
        int32_t total = 0;
        for (int j = 0; j < TL_QK8_0; j++)
            total += q[j];
        r.bsum[b] = -128 * total;
        for (int k = 0; k < 4; k++) {
            r.d[s * 16 + g * 4 + k] = d;
            int32_t sum = 0;
            for (int e = 0; e < 4; e++)
                sum += q[4 * k + e] + q[16 + 4 * k + e];
            r.bias[s * 16 + g * 4 + k] = -128 * sum;
        }
    }
}

// ---- matmul -----------------------------------------------------------------------------------

// Dot products of one weight row with one activation row, per weight type. Eight running
// partial sums (lane i takes elements i, i+8, ...) summed pairwise at the end.
static inline float hsum8(const float *a)
{
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

static float dot_f32(const float *w, const float *x, int64_t n)
{
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++)
            acc[l] += w[i + l] * x[i + l];
    for (int l = 0; i < n; i++, l++)
        acc[l] += w[i] * x[i];
    return hsum8(acc);
}

static float dot_f16(const uint16_t *w, const float *x, int64_t n)
{
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++)
            acc[l] += tl_fp16_to_f32(w[i + l]) * x[i + l];
    for (int l = 0; i < n; i++, l++)
        acc[l] += tl_fp16_to_f32(w[i]) * x[i];
    return hsum8(acc);
}

static float dot_bf16(const uint16_t *w, const float *x, int64_t n)
{
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++)
            acc[l] += tl_bf16_to_f32(w[i + l]) * x[i + l];
    for (int l = 0; i < n; i++, l++)
        acc[l] += tl_bf16_to_f32(w[i]) * x[i];
    return hsum8(acc);
}

static float dot_q8_0(const struct tl_block_q8_0 *w, struct tl__xq_row xq, int64_t n)
{
    float acc = 0.f;
    for (int64_t b = 0; b < n / TL_QK8_0; b++) {
        int32_t sumi = 0;
        const int8_t *lo = tl__xq_lo(xq, b), *hi = tl__xq_hi(xq, b);
        for (int j = 0; j < 16; j++)
            sumi += (int32_t)w[b].qs[j] * lo[j] + (int32_t)w[b].qs[16 + j] * hi[j];
        float da = tl__xq_d(xq, b);
        acc += (float)sumi * (tl_fp16_to_f32(w[b].d) * da);
    }
    return acc;
}

// The same for row r of a packed weight (kernels_impl.h): the same integers and the same
// float operations in the same order, so the result is bit-identical to dot_q8_0.
static float dot_q8_0_packed(const struct tl_weight *w, int64_t r, struct tl__xq_row xq, int64_t n)
{
    const uint8_t *qs = tl__qp_qs(w, r / TL__QP_ROWS) + (r % TL__QP_ROWS) * 4;
    const uint16_t *d = tl__qp_d(w, r / TL__QP_ROWS) + r % TL__QP_ROWS;
    float acc = 0.f;
    for (int64_t b = 0; b < n / TL_QK8_0; b++) {
        int32_t sumi = 0;
        const int8_t *lo = tl__xq_lo(xq, b), *hi = tl__xq_hi(xq, b);
        for (int c = 0; c < 8; c++)
            for (int e = 0; e < 4; e++) {
                int32_t wv = (int8_t)(qs[b * 512 + c * 64 + e] ^ 0x80); // stored as w + 128
                int j = 4 * c + e;
                sumi += wv * (j < 16 ? lo[j] : hi[j - 16]);
            }
        float da = tl__xq_d(xq, b);
        acc += (float)sumi * (tl_fp16_to_f32(d[b * TL__QP_ROWS]) * da);
    }
    return acc;
}

// Element k of row r of a packed F32/F16/BF16 weight, as f32.
static inline float packed_elem(const struct tl_weight *w, int64_t r, int64_t k)
{
    size_t idx = (size_t)k * TL__QP_ROWS + (size_t)(r % TL__QP_ROWS);
    const void *g = tl__pk_group(w, r / TL__QP_ROWS);
    if (w->type == TL_DTYPE_F32) return ((const float *)g)[idx];
    uint16_t h = ((const uint16_t *)g)[idx];
    return w->type == TL_DTYPE_F16 ? tl_fp16_to_f32(h) : tl_bf16_to_f32(h);
}

// dot_f32/f16/bf16 for row r of a packed weight: the same values in the same order.
static float dot_packed_float(const struct tl_weight *w, int64_t r, const float *x, int64_t n)
{
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++)
            acc[l] += packed_elem(w, r, i + l) * x[i + l];
    for (int l = 0; i < n; i++, l++)
        acc[l] += packed_elem(w, r, i) * x[i];
    return hsum8(acc);
}

void tl__ref_matmul_rows(const struct tl__mm *m, int64_t r0, int64_t r1)
{
    const struct tl_weight *w = m->w;
    int64_t n = w->n_in;
    for (int64_t t = 0; t < m->n_tok; t++) {
        const float *x = m->x + t * n; // x_tile is 0 for this variant
        struct tl__xq_row xq = {0};
        if (w->type == TL_DTYPE_Q8_0) xq = tl__xq_view((char *)m->xq + (size_t)t * m->xq_stride, n);
        for (int64_t r = r0; r < r1; r++) {
            const void *row = (const char *)w->data + (size_t)r * w->row_bytes;
            const bool packed = w->layout == TL_WEIGHT_PACKED;
            float v = 0.f;
            switch (w->type) {
            case TL_DTYPE_F32:
                v = packed ? dot_packed_float(w, r, x, n) : dot_f32(row, x, n);
                break;
            case TL_DTYPE_F16:
                v = packed ? dot_packed_float(w, r, x, n) : dot_f16(row, x, n);
                break;
            case TL_DTYPE_BF16:
                v = packed ? dot_packed_float(w, r, x, n) : dot_bf16(row, x, n);
                break;
            case TL_DTYPE_Q8_0:
                v = packed ? dot_q8_0_packed(w, r, xq, n) : dot_q8_0(row, xq, n);
                break;
            default:
                TL_ASSERT(!"unsupported weight type");
            }
            m->y[t * w->n_out + r] = v;
        }
    }
}

void tl__ref_matmul(const struct tl_weight *w, const float *x, int64_t n_tok, float *y, void *work)
{
    struct tl__mm m = {.w = w, .x = x, .n_tok = n_tok, .y = y};
    if (w->type == TL_DTYPE_Q8_0) {
        m.xq = work;
        m.xq_stride = tl__xq_row_bytes(w->n_in);
        for (int64_t t = 0; t < n_tok; t++)
            tl__ref_quantize_x(x + t * w->n_in, w->n_in, (char *)work + (size_t)t * m.xq_stride);
    }
    tl__ref_matmul_rows(&m, 0, w->n_out);
}

// ---- row-wise ops -----------------------------------------------------------------------------

void tl__ref_rmsnorm(const float *x, const float *w, float eps, int64_t n, float *y)
{
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    float s = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * s * w[i];
}

double tl__rope_freq(float freq_base, int head_dim, int i)
{
    return pow(freq_base, -2.0 * i / head_dim);
}

void tl__rope_table(int64_t pos, float freq_scale, const double *freq, int half, float *c, float *s)
{
    double p = (double)pos * freq_scale;
    for (int i = 0; i < half; i++) {
        double theta = p * freq[i];
        c[i] = (float)cos(theta);
        s[i] = (float)sin(theta);
    }
}

void tl__rope_apply(float *x, int n_heads, int head_dim, const float *c, const float *s,
                    enum tl_rope_mode mode)
{
    // each pair independently, heads outer so the inner loop walks memory (and vectorizes)
    int half = head_dim / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * head_dim;
        if (mode == TL_ROPE_NEOX) {
            for (int i = 0; i < half; i++) {
                float a = v[i], b = v[i + half];
                v[i] = a * c[i] - b * s[i];
                v[i + half] = a * s[i] + b * c[i];
            }
        } else {
            for (int i = 0; i < half; i++) {
                float a = v[2 * i], b = v[2 * i + 1];
                v[2 * i] = a * c[i] - b * s[i];
                v[2 * i + 1] = a * s[i] + b * c[i];
            }
        }
    }
}

void tl__ref_rope(float *x, int n_heads, int head_dim, int64_t pos, float freq_base,
                  float freq_scale, enum tl_rope_mode mode)
{
    // cos/sin depend on (pos, i) only: computed once per pair index, applied to every head.
    int half = head_dim / 2;
    for (int i = 0; i < half; i++) {
        double freq = tl__rope_freq(freq_base, head_dim, i);
        float c, s;
        tl__rope_table(pos, freq_scale, &freq, 1, &c, &s);
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (size_t)h * head_dim;
            int i0 = mode == TL_ROPE_NEOX ? i : 2 * i;
            int i1 = mode == TL_ROPE_NEOX ? i + half : 2 * i + 1;
            float a = v[i0], b = v[i1];
            v[i0] = a * c - b * s;
            v[i1] = a * s + b * c;
        }
    }
}

void tl__ref_swiglu(const float *gate, const float *up, float *out, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.f + expf(-g)) * up[i];
    }
}

void tl__ref_add(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += x[i];
}

void tl__ref_exp_sub(const float *x, float m, float *out, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = expf(x[i] - m);
}

void tl__ref_softmax(float *x, int64_t n)
{
    if (n <= 0) return;
    float mx = x[0];
    for (int64_t i = 1; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++)
        x[i] *= inv;
}

// ---- attention --------------------------------------------------------------------------------

// Element idx of a K or V pool as f32. Q8_0: d * q, which is exact in f32 (an 11-bit f16
// mantissa times a 7-bit integer), so every ISA's dequantization gives the same value.
static inline float kv_get(const struct tl_kv_layer *kv, const void *base, size_t idx)
{
    if (kv->type == TL_DTYPE_F16) return tl_fp16_to_f32(((const uint16_t *)base)[idx]);
    if (kv->type == TL_DTYPE_Q8_0) {
        const struct tl_block_q8_0 *b = (const struct tl_block_q8_0 *)base + idx / TL_QK8_0;
        return tl_fp16_to_f32(b->d) * (float)b->qs[idx % TL_QK8_0];
    }
    return ((const float *)base)[idx];
}

void tl__ref_attn_head(const struct tl_kv_layer *kv, const int32_t *block_table, int64_t lo,
                       int64_t n_ctx, int kv_head, const float *q, float scale, float softcap,
                       float *out, float *scores, float *acc)
{
    int hd = kv->head_dim;
    int64_t n = n_ctx - lo; // scores[i] is position lo + i
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        size_t base = tl__kv_index(kv, block_table, lo + i, kv_head);
        float s = 0.f;
        for (int d = 0; d < hd; d++)
            s += q[d] * kv_get(kv, kv->k, base + d);
        scores[i] = s * scale;
        if (softcap > 0.f) scores[i] = tl__softcap(scores[i], softcap);
        mx = scores[i] > mx ? scores[i] : mx;
    }
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        scores[i] = expf(scores[i] - mx);
        sum += scores[i];
    }
    for (int d = 0; d < hd; d++)
        acc[d] = 0.f;
    for (int64_t i = 0; i < n; i++) {
        size_t base = tl__kv_index(kv, block_table, lo + i, kv_head);
        for (int d = 0; d < hd; d++)
            acc[d] += scores[i] * kv_get(kv, kv->v, base + d);
    }
    float inv = n > 0 ? (float)(1.0 / sum) : 0.f;
    for (int d = 0; d < hd; d++)
        out[d] = acc[d] * inv;
}

// ---- the scalar variant -----------------------------------------------------------------------

static int scalar_row_align(enum tl_dtype type)
{
    (void)type;
    return 1;
}

const struct tl__kernel_ops tl__ops_scalar = {
    .name = "scalar",
    .row_align = scalar_row_align,
    .quantize_x = tl__ref_quantize_x,
    .matmul_rows = tl__ref_matmul_rows,
    .rmsnorm = tl__ref_rmsnorm,
    .swiglu = tl__ref_swiglu,
    .add = tl__ref_add,
    .softmax = tl__ref_softmax,
    .exp_sub = tl__ref_exp_sub,
    .attn_head = tl__ref_attn_head,
};
