/*
 * Row (de)quantization for the GGUF block types the kernels support (F32, F16, BF16, Q8_0; the
 * others are handed to quants.c), and the packing of weights for the matmul kernels. The
 * element conversions f32 <-> f16/bf16 are in half.c. Q8_0 follows ggml's reference quantizer: per
 * block of 32, d = max|x| / 127 (stored as f16), q = round(x / d) with ties away from zero.
 *
 * Packing (tl_weight_prepare): Q8_0 matrices are rewritten once into the 16-row interleaved
 * layout described in kernels_impl.h; the packed copy is a new buffer the caller owns.
 *
 * Thread model: pure functions, re-entrant.
 */
#include "kernels/kernels_impl.h"
#include "kernels/quants.h"

#include "core/alloc.h"
#include "core/error.h"

#include <math.h>
#include <string.h>

// ---- rows -----------------------------------------------------------------------------------

bool tl_kernels_weight_supported(enum tl_dtype type)
{
    return type == TL_DTYPE_F32 || type == TL_DTYPE_F16 || type == TL_DTYPE_BF16 ||
           type == TL_DTYPE_Q8_0 || tl__qx_supported(type);
}

bool tl_dequantize_row(enum tl_dtype type, const void *src, float *dst, int64_t n)
{
    if (n < 0) return false;
    switch (type) {
    case TL_DTYPE_F32:
        memcpy(dst, src, (size_t)n * 4);
        return true;
    case TL_DTYPE_F16: {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++)
            dst[i] = tl_fp16_to_f32(s[i]);
        return true;
    }
    case TL_DTYPE_BF16: {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++)
            dst[i] = tl_bf16_to_f32(s[i]);
        return true;
    }
    case TL_DTYPE_Q8_0: {
        if (n % TL_QK8_0) return false;
        const struct tl_block_q8_0 *b = src;
        for (int64_t i = 0; i < n / TL_QK8_0; i++) {
            float d = tl_fp16_to_f32(b[i].d);
            for (int j = 0; j < TL_QK8_0; j++)
                dst[i * TL_QK8_0 + j] = d * (float)b[i].qs[j];
        }
        return true;
    }
    default: // Q4_0..Q6_K: quants.c
        return tl__qx_dequantize_row(type, src, dst, n);
    }
}

// Rounds half away from zero like roundf, clamped to [-127, 127]; NaN gives 0.
static inline int8_t q8_clamp(float v)
{
    v = roundf(v);
    if (!(v == v)) return 0;
    if (v > 127.f) v = 127.f;
    if (v < -127.f) v = -127.f;
    return (int8_t)v;
}

bool tl_quantize_row(enum tl_dtype type, const float *src, void *dst, int64_t n)
{
    if (n < 0) return false;
    switch (type) {
    case TL_DTYPE_F32:
        memcpy(dst, src, (size_t)n * 4);
        return true;
    case TL_DTYPE_F16: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++)
            d[i] = tl_f32_to_fp16(src[i]);
        return true;
    }
    case TL_DTYPE_BF16: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++)
            d[i] = tl_f32_to_bf16(src[i]);
        return true;
    }
    case TL_DTYPE_Q8_0: {
        if (n % TL_QK8_0) return false;
        struct tl_block_q8_0 *b = dst;
        for (int64_t i = 0; i < n / TL_QK8_0; i++) {
            const float *x = src + i * TL_QK8_0;
            float amax = 0.f;
            for (int j = 0; j < TL_QK8_0; j++)
                amax = fmaxf(amax, fabsf(x[j]));
            float d = amax / 127.f;
            float id = d != 0.f ? 1.f / d : 0.f;
            b[i].d = tl_f32_to_fp16(d);
            for (int j = 0; j < TL_QK8_0; j++)
                b[i].qs[j] = q8_clamp(x[j] * id);
        }
        return true;
    }
    default: // Q4_0..Q6_K: quants.c
        return tl__qx_quantize_row(type, src, dst, n);
    }
}

size_t tl__xq_row_bytes(int64_t n_in)
{
    int64_t n_super = (n_in + TL__XQ_SUPER - 1) / TL__XQ_SUPER;
    return ((size_t)n_super * (128 + 64 + 64 + 16) + 63) & ~(size_t)63;
}

// ---- packed weights ---------------------------------------------------------------------------

size_t tl_weight_data_bytes(const struct tl_weight *w)
{
    if (w->layout == TL_WEIGHT_PACKED) {
        int64_t n_grp = (w->n_out + TL__QP_ROWS - 1) / TL__QP_ROWS;
        if (tl__kq_packable(w->type)) return (size_t)n_grp * tl__kq_group_bytes(w->type, w->n_in);
        return (size_t)n_grp * tl__pk_group_bytes(w->type, w->n_in);
    }
    return w->row_bytes * (size_t)w->n_out;
}

// Q8_0 -> the 16-row interleaved layout of kernels_impl.h.
static void pack_q8_0(const struct tl_weight *w, uint8_t *dst)
{
    const int64_t nb = w->n_in / TL_QK8_0, n_grp = (w->n_out + TL__QP_ROWS - 1) / TL__QP_ROWS;
    const size_t gbytes = tl__qp_group_bytes(nb);
    for (int64_t g = 0; g < n_grp; g++) {
        uint8_t *qs = dst + (size_t)g * gbytes;
        uint16_t *d = (uint16_t *)(qs + (size_t)nb * 512);
        memset(qs, 0, gbytes);
        for (int i = 0; i < TL__QP_ROWS; i++) {
            int64_t r = g * TL__QP_ROWS + i;
            const struct tl_block_q8_0 *row =
                r < w->n_out ? (const void *)((const char *)w->data + (size_t)r * w->row_bytes)
                             : NULL;
            for (int64_t b = 0; b < nb; b++) {
                uint8_t *q = qs + (size_t)b * 512 + (size_t)i * 4;
                d[b * TL__QP_ROWS + i] = row ? row[b].d : 0;
                for (int c = 0; c < 8; c++)
                    for (int e = 0; e < 4; e++)
                        q[c * 64 + e] = (uint8_t)((row ? (uint8_t)row[b].qs[4 * c + e] : 0) ^ 0x80);
            }
        }
    }
}

// F32/F16/BF16 -> groups of 16 rows, k-major (kernels_impl.h).
static void pack_float(const struct tl_weight *w, uint8_t *dst)
{
    const int64_t n = w->n_in, n_grp = (w->n_out + TL__QP_ROWS - 1) / TL__QP_ROWS;
    const size_t esz = w->type == TL_DTYPE_F32 ? 4 : 2, gbytes = tl__pk_group_bytes(w->type, n);
    for (int64_t g = 0; g < n_grp; g++) {
        uint8_t *grp = dst + (size_t)g * gbytes;
        memset(grp, 0, gbytes); // padding rows are +0 in every type
        for (int i = 0; i < TL__QP_ROWS && g * TL__QP_ROWS + i < w->n_out; i++) {
            const uint8_t *row =
                (const uint8_t *)w->data + (size_t)(g * TL__QP_ROWS + i) * w->row_bytes;
            for (int64_t k = 0; k < n; k++)
                memcpy(grp + ((size_t)k * TL__QP_ROWS + i) * esz, row + (size_t)k * esz, esz);
        }
    }
}

static bool packable(enum tl_dtype type)
{
    return type == TL_DTYPE_Q8_0 || type == TL_DTYPE_F32 || type == TL_DTYPE_F16 ||
           type == TL_DTYPE_BF16 || tl__kq_packable(type); // K-quants: kquant_pack.c
}

tl_status tl_weight_packed_bytes(const struct tl_weight *w, size_t *bytes)
{
    *bytes = 0;
    if (w->layout != TL_WEIGHT_ROWS || !packable(w->type)) return TL_OK;
    size_t rb;
    if (w->n_in <= 0 || w->n_out <= 0 || !w->data || !tl_dtype_row_bytes(w->type, w->n_in, &rb) ||
        rb != w->row_bytes)
        return tl__errorf(TL_ERR_INVALID_ARG, "cannot pack a %s weight of shape [%lld, %lld]",
                          tl_dtype_name(w->type), (long long)w->n_in, (long long)w->n_out);
    int64_t n_grp = (w->n_out + TL__QP_ROWS - 1) / TL__QP_ROWS;
    size_t gbytes = tl__kq_packable(w->type) ? tl__kq_group_bytes(w->type, w->n_in)
                                             : tl__pk_group_bytes(w->type, w->n_in);
    if (!tl_mul_size((size_t)n_grp, gbytes, bytes))
        return tl__errorf(TL_ERR_NOMEM, "packed weight size overflows");
    return TL_OK;
}

void tl_weight_pack(struct tl_weight *w, void *buf)
{
    TL_ASSERT(w->layout == TL_WEIGHT_ROWS && packable(w->type) && ((uintptr_t)buf & 63) == 0);
    if (tl__kq_packable(w->type))
        tl__kq_pack(w, buf);
    else if (w->type == TL_DTYPE_Q8_0)
        pack_q8_0(w, buf);
    else
        pack_float(w, buf);
    w->data = buf;
    w->layout = TL_WEIGHT_PACKED;
}

tl_status tl_weight_prepare(struct tl_weight *w, void **owned)
{
    *owned = NULL;
    size_t bytes;
    tl_status rc = tl_weight_packed_bytes(w, &bytes);
    if (rc || !bytes) return rc;
    uint8_t *buf = tl_aligned_alloc_large(bytes); // huge pages when big: read every step
    if (!buf)
        return tl__errorf(TL_ERR_NOMEM, "out of memory packing a %lld x %lld weight",
                          (long long)w->n_out, (long long)w->n_in);
    tl_weight_pack(w, buf);
    *owned = buf;
    return TL_OK;
}
