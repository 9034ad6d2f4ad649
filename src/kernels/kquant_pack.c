/*
 * Packed K-quants (Q4_K, Q5_K, Q6_K): the repacking done once at load time by
 * tl_weight_prepare, the aux values of the quantized activations, and the scalar kernel over
 * the packed layout.
 *
 * Why: the file layout keeps each row's 256-value super-blocks together, so a SIMD kernel must
 * decode a row's nibbles and scales into registers and reduce each (row, token) horizontally.
 * Here 16 rows are interleaved 4 values at a time (quants.h, "The packed layout"), so one
 * 64-byte load feeds a VNNI dot product for 16 rows whose lanes are the rows: no shuffles, no
 * horizontal sums, and each lane can follow exactly the scalar reference's float operations
 * (tl__kq_step), which makes packed results bit-identical to the file layout's reference on
 * every ISA. The nibbles stay packed (148 / 180 / 212 bytes per row and super-block against the
 * file's 144 / 176 / 210), so a one-token matmul reads as few bytes as before.
 *
 * Ownership: tl__kq_pack writes into a buffer owned by the caller (convert.c's
 * tl_weight_prepare). Thread model: pure functions over caller-owned memory; re-entrant.
 */
#include "kernels/quants.h"

#include "core/error.h"

#include <string.h>

void tl__kq_aux_row(const struct tl__qa_chunk *xa, int64_t nb32, struct tl__kq_aux *aux)
{
    for (int64_t b = 0; b < nb32; b++) {
        const struct tl__qa_chunk *c = xa + b / 4;
        const int g = (int)(b % 4);
        int32_t lo = 0, hi = 0;
        for (int l = 0; l < 16; l++) {
            lo += c->qs[16 * g + l];
            hi += c->qs[64 + 16 * g + l];
        }
        aux[b].dx = c->d[4 * g];
        aux[b].dsx = c->d[4 * g] * (float)(lo + hi);
        aux[b].b6lo = -32 * lo;
        aux[b].b6hi = -32 * hi;
    }
}

// ---- packing ----------------------------------------------------------------------------------

// One super-block of one row, decoded: unsigned quants in value order, integer scales (and
// minimums) per sub-block, and the f16 super-block scales as stored.
struct kq_row_sb {
    uint8_t q[256];
    int sc[16]; // Q4_K/Q5_K: 8 six-bit scales; Q6_K: 16 int8 scales
    int mn[8];  // Q4_K/Q5_K
    uint16_t d, dmin;
};

static void decode_row_sb(enum tl_dtype type, const uint8_t *row, int64_t n_in, int64_t sb,
                          struct kq_row_sb *o)
{
    struct tl__qx_chunk c;
    for (int n = 0; n < 2; n++) {
        tl__qx_unpack(type, row, n_in, 2 * sb + n, &c);
        memcpy(o->q + 128 * n, c.q, 128);
    }
    const uint8_t *blk = row + (size_t)sb * tl__qx_traits(type)->blk_bytes;
    if (type == TL_DTYPE_Q6_K) {
        const struct tl_block_q6_k *x = (const void *)blk;
        for (int h = 0; h < 16; h++)
            o->sc[h] = x->scales[h];
        o->d = x->d, o->dmin = 0;
        return;
    }
    // Q4_K and Q5_K start alike: d, dmin, scales[12]
    const struct tl_block_q4_k *x = (const void *)blk;
    for (int j = 0; j < 8; j++)
        tl__k4_scale_min(x->scales, j, &o->sc[j], &o->mn[j]);
    o->d = x->d, o->dmin = x->dmin;
}

// Row i (< 16) of one packed super-block record.
static void put_row_sb(enum tl_dtype type, const struct kq_row_sb *r, int i, uint8_t *rec)
{
    for (int c = 0; c < 4; c++)
        for (int k = 0; k < 8; k++)
            for (int e = 0; e < 4; e++) {
                uint8_t lo = r->q[64 * c + 4 * k + e] & 15, hi = r->q[64 * c + 32 + 4 * k + e] & 15;
                rec[TL__KQ_QS + (c * 8 + k) * 64 + 4 * i + e] = (uint8_t)(lo | hi << 4);
            }
    if (type == TL_DTYPE_Q6_K) {
        for (int j = 0; j < 8; j++)
            for (int p = 0; p < 2; p++)
                for (int e = 0; e < 4; e++) {
                    uint8_t v = 0;
                    for (int f = 0; f < 4; f++)
                        v |= (uint8_t)(((r->q[32 * j + 4 * (4 * p + f) + e] >> 4) & 3) << (2 * f));
                    rec[TL__KQ6_QH + (j * 2 + p) * 64 + 4 * i + e] = v;
                }
        for (int h = 0; h < 16; h++)
            rec[TL__KQ6_SC + 16 * h + i] = (uint8_t)(int8_t)r->sc[h];
        memcpy(rec + TL__KQ6_D + 2 * i, &r->d, 2);
        return;
    }
    for (int j = 0; j < 8; j++) {
        rec[TL__KQ4_SC + 16 * j + i] = (uint8_t)r->sc[j];
        rec[TL__KQ4_MN + 16 * j + i] = (uint8_t)r->mn[j];
    }
    memcpy(rec + TL__KQ4_D + 2 * i, &r->d, 2);
    memcpy(rec + TL__KQ4_DMIN + 2 * i, &r->dmin, 2);
    if (type == TL_DTYPE_Q5_K)
        for (int j = 0; j < 8; j++)
            for (int k = 0; k < 8; k++)
                for (int e = 0; e < 4; e++)
                    if (r->q[32 * j + 4 * k + e] & 16)
                        rec[TL__KQ5_QH + (j * 8 + k) * 8 + (4 * i + e) / 8] |=
                            (uint8_t)(1 << ((4 * i + e) % 8));
}

void tl__kq_pack(const struct tl_weight *w, uint8_t *dst)
{
    TL_ASSERT(tl__kq_packable(w->type) && w->n_in % 256 == 0);
    const int64_t n_sb = w->n_in / 256, n_grp = (w->n_out + TL__KQ_ROWS - 1) / TL__KQ_ROWS;
    const size_t sbb = tl__kq_sb_bytes(w->type);
    struct kq_row_sb r;
    memset(dst, 0, (size_t)n_grp * (size_t)n_sb * sbb); // padding rows: all zero (d = 0)
    for (int64_t g = 0; g < n_grp; g++)
        for (int i = 0; i < TL__KQ_ROWS && g * TL__KQ_ROWS + i < w->n_out; i++) {
            const uint8_t *row =
                (const uint8_t *)w->data + (size_t)(g * TL__KQ_ROWS + i) * w->row_bytes;
            for (int64_t sb = 0; sb < n_sb; sb++) {
                decode_row_sb(w->type, row, w->n_in, sb, &r);
                put_row_sb(w->type, &r, i, dst + (size_t)(g * n_sb + sb) * sbb);
            }
        }
}

// ---- the scalar kernel ------------------------------------------------------------------------

// Row i of a packed super-block record back to quants and float scales (the inverse of
// put_row_sb; D and M exactly as tl__qx_unpack computes them).
static void get_row_sb(enum tl_dtype type, const uint8_t *rec, int i, uint8_t *q, float *D,
                       float *M)
{
    for (int c = 0; c < 4; c++)
        for (int k = 0; k < 8; k++)
            for (int e = 0; e < 4; e++) {
                uint8_t v = rec[TL__KQ_QS + (c * 8 + k) * 64 + 4 * i + e];
                q[64 * c + 4 * k + e] = v & 15;
                q[64 * c + 32 + 4 * k + e] = v >> 4;
            }
    uint16_t hd, hdmin = 0;
    if (type == TL_DTYPE_Q6_K) {
        for (int j = 0; j < 8; j++)
            for (int p = 0; p < 2; p++)
                for (int e = 0; e < 4; e++) {
                    uint8_t v = rec[TL__KQ6_QH + (j * 2 + p) * 64 + 4 * i + e];
                    for (int f = 0; f < 4; f++)
                        q[32 * j + 4 * (4 * p + f) + e] |= (uint8_t)(((v >> (2 * f)) & 3) << 4);
                }
        memcpy(&hd, rec + TL__KQ6_D + 2 * i, 2);
        float d = tl_fp16_to_f32(hd);
        for (int h = 0; h < 16; h++)
            D[h] = d * (float)(int8_t)rec[TL__KQ6_SC + 16 * h + i];
        return;
    }
    memcpy(&hd, rec + TL__KQ4_D + 2 * i, 2);
    memcpy(&hdmin, rec + TL__KQ4_DMIN + 2 * i, 2);
    float d = tl_fp16_to_f32(hd), dmin = tl_fp16_to_f32(hdmin);
    for (int j = 0; j < 8; j++) {
        D[2 * j] = D[2 * j + 1] = d * (float)rec[TL__KQ4_SC + 16 * j + i];
        M[j] = -(dmin * (float)rec[TL__KQ4_MN + 16 * j + i]);
    }
    if (type == TL_DTYPE_Q5_K)
        for (int j = 0; j < 8; j++)
            for (int k = 0; k < 8; k++)
                for (int e = 0; e < 4; e++) {
                    int bit = 4 * i + e;
                    if (rec[TL__KQ5_QH + (j * 8 + k) * 8 + bit / 8] >> (bit % 8) & 1)
                        q[32 * j + 4 * k + e] |= 16;
                }
}

void tl__kq_scalar_packed_rows(const struct tl__qx_mm *m, int64_t r0, int64_t r1)
{
    const struct tl_weight *w = m->w;
    const enum tl_dtype type = w->type;
    const int64_t n_sb = w->n_in / 256;
    const size_t sbb = tl__kq_sb_bytes(type);
    uint8_t q[256];
    float D[16], M[8] = {0};
    for (int64_t r = r0; r < r1; r++) {
        const int64_t g = r / TL__KQ_ROWS;
        const int i = (int)(r % TL__KQ_ROWS);
        for (int64_t t = 0; t < m->n_tok; t++)
            m->y[t * w->n_out + r] = 0.f;
        for (int64_t sb = 0; sb < n_sb; sb++) {
            get_row_sb(type, (const uint8_t *)w->data + (size_t)(g * n_sb + sb) * sbb, i, q, D, M);
            for (int64_t t = 0; t < m->n_tok; t++) {
                float y = m->y[t * w->n_out + r];
                for (int j = 0; j < 8; j++) {
                    const struct tl__qa_chunk *a = m->xa + t * m->xa_stride + 2 * sb + j / 4;
                    const int gg = j % 4;
                    y = tl__kq_step(type, y, q + 32 * j, a->qs + 16 * gg, a->qs + 64 + 16 * gg,
                                    D[2 * j], D[2 * j + 1], M[j],
                                    m->aux + t * m->aux_stride + 8 * sb + j);
                }
                m->y[t * w->n_out + r] = y;
            }
        }
    }
}
