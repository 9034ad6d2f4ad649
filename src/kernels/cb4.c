/*
 * The 4-bit codebook weight types (IQ4_NL, IQ4_XS, MXFP4; cb4.h): block decoding to the common
 * form (per 32-block a scale D and 16 nibble bytes), scalar dequantization and quantization,
 * and the scalar reference matmul rows.
 *
 * Design: tl__cb4_chunk_f (cb4.h) is the one place that knows the three block layouts; the
 * dequantizer, the reference matmul and the SIMD kernels all start from it (the SIMD files decode D
 * the same way and only differ in how they turn nibbles into codebook values and sum the products).
 *
 * Quantizers (mkmodel and tests use them) are simple round-to-nearest ones: IQ4_NL puts the
 * value of largest magnitude of a block on K[0] = -127 (d = vmax / -127, as ggml's reference
 * starts from); IQ4_XS does the same per 32-block and quantizes those block scales to
 * ls - 32 in [-32, 31] against one f16 d; MXFP4 takes the smallest exponent whose largest
 * codebook value (12, doubled 6.0) covers the block's largest magnitude. Each value then takes
 * the nearest codebook entry for the scale actually stored.
 *
 * Thread model: pure functions over caller-owned memory, re-entrant.
 */
#include "kernels/cb4.h"

#include "core/error.h"

#include <math.h>
#include <string.h>

_Static_assert(sizeof(struct tl_block_iq4_nl) == 18, "IQ4_NL block");
_Static_assert(sizeof(struct tl_block_iq4_xs) == 136, "IQ4_XS block");
_Static_assert(sizeof(struct tl_block_mxfp4) == 17, "MXFP4 block");

const int8_t tl__kv_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                 1,    13,   25,  38,  53,  69,  89,  113};
const int8_t tl__kv_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

const uint8_t tl__cb4_zero16[16];

static void chunk(enum tl_dtype type, const void *row, int64_t n_in, int64_t s, float D[4],
                  const uint8_t *qs[4])
{
    TL_ASSERT(tl__cb4_type(type) && s >= 0 && s * 128 < n_in);
    tl__cb4_chunk_f(type, row, n_in, s, D, qs, tl_fp16_to_f32);
}

bool tl__cb4_dequantize_row(enum tl_dtype type, const void *src, float *dst, int64_t n)
{
    const struct tl_dtype_info *in = tl_dtype_info(type);
    if (!tl__cb4_type(type) || n < 0 || n % in->block_size) return false;
    const int8_t *K = tl__cb4_codebook(type);
    float D[4];
    const uint8_t *qs[4];
    for (int64_t s = 0; s * 128 < n; s++) {
        chunk(type, src, n, s, D, qs);
        for (int g = 0; g < 4 && s * 128 + g * 32 < n; g++) {
            float *y = dst + s * 128 + g * 32;
            for (int j = 0; j < 16; j++) { // D * K is exact: the same floats as ggml
                y[j] = D[g] * (float)K[qs[g][j] & 0xF];
                y[j + 16] = D[g] * (float)K[qs[g][j] >> 4];
            }
        }
    }
    return true;
}

// ---- quantization -----------------------------------------------------------------------------

// The codebook index nearest to v (first on ties; 0 for NaN).
static int nearest(const int8_t *K, float v)
{
    int best = 0;
    float err = fabsf(v - (float)K[0]);
    for (int i = 1; i < 16; i++) {
        float e = fabsf(v - (float)K[i]);
        if (e < err) err = e, best = i;
    }
    return best;
}

// The value of largest magnitude (first one on ties); 0 for an all-zero or NaN block.
static float signed_amax(const float *x, int n)
{
    float amax = 0.f, v = 0.f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), v = x[i];
    return v;
}

// The nibbles of one 32-block for scale D (D = 0 or not finite: every value as if 0).
static void put_nibbles(const int8_t *K, const float *x, float D, uint8_t qs[16])
{
    float id = D != 0.f && isfinite(D) ? 1.f / D : 0.f;
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)(nearest(K, x[j] * id) | nearest(K, x[j + 16] * id) << 4);
}

// round(v) clamped to [lo, hi] without undefined conversions (NaN gives lo).
static inline int qround(float v, int lo, int hi)
{
    if (!(v >= (float)lo)) return lo;
    if (v >= (float)hi) return hi;
    return (int)nearbyintf(v);
}

// The E8M0 exponent of a block whose largest magnitude is amax: the smallest e with
// 12 * 2^(e - 128) >= amax (0 for 0 or NaN, 254 when none covers it).
static uint8_t mxfp4_exponent(float amax)
{
    if (!(amax > 0.f)) return 0;
    int k = 0;
    if (isfinite(amax)) frexpf(amax / 12.f, &k); // amax / 12 < 2^k
    int e = 128 + k < 0 ? 0 : 128 + k > 254 ? 254 : 128 + k;
    while (e > 0 && 12.f * tl__e8m0_half((uint8_t)(e - 1)) >= amax)
        e--;
    while (e < 254 && 12.f * tl__e8m0_half((uint8_t)e) < amax)
        e++;
    return (uint8_t)e;
}

bool tl__cb4_quantize_row(enum tl_dtype type, const float *src, void *dst, int64_t n)
{
    const struct tl_dtype_info *in = tl_dtype_info(type);
    if (!tl__cb4_type(type) || n < 0 || n % in->block_size) return false;
    const int8_t *K = tl__cb4_codebook(type);
    if (type == TL_DTYPE_IQ4_NL) {
        struct tl_block_iq4_nl *y = dst;
        for (int64_t b = 0; b < n / 32; b++, src += 32) {
            y[b].d = tl_f32_to_fp16(signed_amax(src, 32) / -127.f);
            put_nibbles(K, src, tl_fp16_to_f32(y[b].d), y[b].qs);
        }
    } else if (type == TL_DTYPE_MXFP4) {
        struct tl_block_mxfp4 *y = dst;
        for (int64_t b = 0; b < n / 32; b++, src += 32) {
            y[b].e = mxfp4_exponent(fabsf(signed_amax(src, 32)));
            put_nibbles(K, src, tl__e8m0_half(y[b].e), y[b].qs);
        }
    } else {
        struct tl_block_iq4_xs *y = dst;
        for (int64_t b = 0; b < n / 256; b++, src += 256) {
            float s[8], smax = 0.f;
            for (int j = 0; j < 8; j++) {
                s[j] = signed_amax(src + 32 * j, 32) / -127.f;
                if (fabsf(s[j]) > fabsf(smax)) smax = s[j];
            }
            // the largest block scale maps to ls - 32 = -32
            y[b].d = tl_f32_to_fp16(smax / -32.f);
            const float d = tl_fp16_to_f32(y[b].d), id = d != 0.f && isfinite(d) ? 1.f / d : 0.f;
            y[b].scales_h = 0;
            memset(y[b].scales_l, 0, 4);
            for (int j = 0; j < 8; j++) {
                int ls = qround(s[j] * id, -32, 31) + 32;
                y[b].scales_l[j / 2] |= (uint8_t)((ls & 0xF) << (4 * (j % 2)));
                y[b].scales_h |= (uint16_t)((ls >> 4) << (2 * j));
                put_nibbles(K, src + 32 * j, d * (float)(ls - 32), y[b].qs + 16 * j);
            }
        }
    }
    return true;
}

// ---- reference matmul -------------------------------------------------------------------------

void tl__cb4_ref_rows(const struct tl__qx_mm *m, int64_t r0, int64_t r1)
{
    const struct tl_weight *w = m->w;
    const int8_t *K = tl__cb4_codebook(w->type);
    const int64_t n_super = (w->n_in + 127) / 128;
    float D[4];
    const uint8_t *qs[4];
    for (int64_t r = r0; r < r1; r++) {
        const void *row = (const char *)w->data + (size_t)r * w->row_bytes;
        for (int64_t t = 0; t < m->n_tok; t++)
            m->y[t * w->n_out + r] = 0.f;
        for (int64_t s = 0; s < n_super; s++) {
            chunk(w->type, row, w->n_in, s, D, qs);
            for (int64_t t = 0; t < m->n_tok; t++) {
                const struct tl__qa_chunk *a = m->xa + t * m->xa_stride + s;
                float y = m->y[t * w->n_out + r];
                for (int g = 0; g < 4; g++) {
                    const int8_t *xlo = a->qs + 16 * g, *xhi = a->qs + 64 + 16 * g;
                    int32_t isum = 0;
                    for (int j = 0; j < 16; j++)
                        isum += K[qs[g][j] & 0xF] * xlo[j] + K[qs[g][j] >> 4] * xhi[j];
                    y += (float)isum * (D[g] * a->d[4 * g]);
                }
                m->y[t * w->n_out + r] = y;
            }
        }
    }
}
