/*
 * The AVX-512 (F, BW, VL, DQ, VNNI) matmul of the extra weight types of kernels/quants.h, and
 * the AVX-512 activation quantizer. Compiled with those -m flags, called only when the CPU has
 * them.
 *
 * Design: micro-tiles of R weight rows x T tokens walk the row in 128-value superchunks. For
 * each row of the tile a per-type loader decodes the superchunk once into registers -- the
 * unsigned quants of the first halves of its four 32-blocks in one register and the second
 * halves in another (the activation layout, struct tl__qa_chunk), and the per-half scales D
 * (and minimums M) spread so that lane 4g+k belongs to block g -- and the tile uses it for all
 * T tokens. VNNI vpdpbusd multiplies the unsigned quants with the signed activation bytes; the
 * integer offset of type-0 formats (q - 8, q - 32, ...) is folded into the accumulator's start
 * value, off * (-sum of the activation bytes), which the activation row carries, so each
 * (row, token) pair costs per superchunk:
 *   - one scale per 32-block (Q4_0, Q5_0, Q4_1, Q5_1, Q4_K, Q5_K): two chained vpdpbusd, one
 *     int-to-float conversion, acc = fma(float(sum), D * d_x, acc), plus for type-1 formats
 *     acc -= M * (d_x * -sum(x bytes)) -- 5 or 6 ops per 128 multiply-adds;
 *   - one scale per 16 values (Q6_K, Q3_K, Q2_K): one vpdpbusd per half; the halves' sums of 4
 *     products fit int16, so one packs + madd scales them with the integer sub-scales, then
 *     one conversion and acc = fma(float(sum), d * d_x, acc) -- 7 ops (9 with Q2_K's mins).
 * Every type has a vectorized loader (nibble masks, 64-bit permutes, bit tests into mask
 * registers); K-quants decode a super-block's scales once for its two superchunks. A partial
 * last superchunk (32-block types whose row is not a multiple of 128) goes through the scalar
 * decoder tl__qx_unpack, which gives the same values.
 *
 * Rows stream from memory with a software prefetch 512 bytes ahead (measured: one token on Q4_K
 * went from ~1050 to ~800 us on a 1B ffn matrix; 256-768 bytes alike). Tiles are 4 x 4 (4 x 8
 * measured no faster: registers run out).
 *
 * Determinism: every (row, token) element sees the same instruction sequence in every tile
 * shape (full, token tail, row tail) and is reduced by one fixed horizontal sum, so results do
 * not depend on the batch or the thread count.
 *
 * Thread model: pure functions over caller-owned memory; re-entrant.
 */
#include "kernels/cb4.h"
#include "kernels/quants.h"
#include "kernels/tiles.h"
#include "kernels/x86/avx512_impl.h"

#include "core/error.h"

#include <immintrin.h>
#include <string.h>

// ---- helpers ----------------------------------------------------------------------------------

// Lane 4g+k <- lane g of a 4-float vector.
static ALWAYS_INLINE __m512 expand4(__m128 v)
{
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(v));
}

// From 8 per-half floats (h = 2g + half): lanes 4g+k <- element 2g (the first halves).
static ALWAYS_INLINE __m512 expand_lo(__m256 v)
{
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6);
    return _mm512_permutexvar_ps(idx, _mm512_castps256_ps512(v));
}

static ALWAYS_INLINE uint32_t rd32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static ALWAYS_INLINE uint16_t rd16(const void *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

// Four 16-byte pieces into one register, lane g <- p[g].
static ALWAYS_INLINE __m512i join4(const void *p0, const void *p1, const void *p2, const void *p3)
{
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p0));
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)p1), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)p2), 2);
    return _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)p3), 3);
}

static ALWAYS_INLINE __m512i bcast16(const void *p)
{
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)p));
}

// ---- activation quantization ------------------------------------------------------------------

static void quantize(const float *x, int64_t n, void *dst)
{
    TL_ASSERT(n % 32 == 0);
    struct tl__qa_chunk *c = dst;
    const int64_t n_super = (n + TL__QA_SUPER - 1) / TL__QA_SUPER;
    const __m512 sign = _mm512_set1_ps(-0.f);
    const __m512i ones = _mm512_set1_epi8(1);
    for (int64_t s = 0; s < n_super; s++, c++) {
        _Alignas(16) float d[4];
        for (int g = 0; g < 4; g++) {
            int64_t i0 = s * 128 + g * 32;
            __m512 v0 = _mm512_setzero_ps(), v1 = _mm512_setzero_ps();
            if (i0 < n) v0 = _mm512_loadu_ps(x + i0), v1 = _mm512_loadu_ps(x + i0 + 16);
            float amax = _mm512_reduce_max_ps(
                _mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1)));
            d[g] = amax / 127.f;
            __m512 id = _mm512_set1_ps(amax != 0.f ? 127.f / amax : 0.f);
            // cvtps rounds to nearest even (MXCSR default), like the reference's nearbyintf
            _mm_storeu_si128((__m128i *)(c->qs + 16 * g),
                             _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, id))));
            _mm_storeu_si128((__m128i *)(c->qs + 64 + 16 * g),
                             _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, id))));
        }
        _mm512_store_ps(c->d, expand4(_mm_load_ps(d)));
        __m512i lo = _mm512_load_si512(c->qs), hi = _mm512_load_si512(c->qs + 64);
        __m512i z = _mm512_setzero_si512();
        _mm512_store_si512(c->nslo, _mm512_sub_epi32(z, _mm512_dpbusd_epi32(z, ones, lo)));
        _mm512_store_si512(c->nshi, _mm512_sub_epi32(z, _mm512_dpbusd_epi32(z, ones, hi)));
    }
}

// ---- weight loaders -----------------------------------------------------------------------------

// One superchunk of one weight row, decoded: quants of the first / second halves of the four
// 32-blocks (lane group g = block g), and per lane 4g+k the D and M of block g's halves.
struct wsc {
    __m512i lo, hi;
    __m512 dlo;      // 32-value blocks (one scale per block)
    __m512 mlo, mhi; // has_min types only (mhi: split16)
    __m512i s16;     // split16 (K-quants with 16-value sub-blocks): per 128-bit lane g, the int16
                     // sub-scales [first half x4, second half x4] of block g
    __m512 dsb;      // split16: the super-block scale d, broadcast
};

// Any type, any superchunk (also a partial last one), through the scalar decoder.
static void load_generic(enum tl_dtype type, const void *row, int64_t n_in, int64_t s,
                         struct wsc *w)
{
    _Alignas(64) struct tl__qx_chunk c;
    tl__qx_unpack(type, row, n_in, s, &c);
    __m512i z0 = _mm512_load_si512(c.q), z1 = _mm512_load_si512(c.q + 64);
    w->lo = _mm512_shuffle_i64x2(z0, z1, _MM_SHUFFLE(2, 0, 2, 0));
    w->hi = _mm512_shuffle_i64x2(z0, z1, _MM_SHUFFLE(3, 1, 3, 1));
    __m256 D = _mm256_load_ps(c.D), M = _mm256_load_ps(c.M);
    // used for 32-block types only, whose two halves share D and M
    w->dlo = expand_lo(D), w->mlo = expand_lo(M);
}

static const __m512i *nib_mask(void)
{
    static const _Alignas(64) uint8_t m[64] = {
        15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15,
        15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15,
        15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15};
    return (const __m512i *)m;
}

// Bytes of lane group g = 1 << (base + g): selects bit base+g of bytes broadcast to 4 lanes.
static ALWAYS_INLINE __m512i bit_sel(int base)
{
    // unsigned shifts: 0x01010101 << 7 does not fit an int
    const int b0 = (int)(0x01010101u << base), b1 = (int)(0x01010101u << (base + 1));
    const int b2 = (int)(0x01010101u << (base + 2)), b3 = (int)(0x01010101u << (base + 3));
    return _mm512_set_epi32(b3, b3, b3, b3, b2, b2, b2, b2, b1, b1, b1, b1, b0, b0, b0, b0);
}

// Per 16-bit lane: shift counts 0, 2, 4, 6 for lane groups 0..3 (2-bit fields of a byte).
static ALWAYS_INLINE __m512i shift_2g(void)
{
    return _mm512_set_epi16(6, 6, 6, 6, 6, 6, 6, 6, 4, 4, 4, 4, 4, 4, 4, 4, 2, 2, 2, 2, 2, 2, 2, 2,
                            0, 0, 0, 0, 0, 0, 0, 0);
}

// 32-block types, full superchunk: blocks 4s .. 4s+3 of `bsz` bytes each, with the f16 d (and
// m) at the start, then (Q5) qh[4], then qs[16].
static ALWAYS_INLINE void load_q4q5(const int type, const uint8_t *b, struct wsc *w)
{
    const int bsz = type == TL_DTYPE_Q4_0   ? 18
                    : type == TL_DTYPE_Q4_1 ? 20
                    : type == TL_DTYPE_Q5_0 ? 22
                                            : 24;
    const int has_m = type == TL_DTYPE_Q4_1 || type == TL_DTYPE_Q5_1;
    const int q5 = type == TL_DTYPE_Q5_0 || type == TL_DTYPE_Q5_1;
    const int qs_off = 2 + 2 * has_m + 4 * q5;
    __m512i q = join4(b + qs_off, b + bsz + qs_off, b + 2 * bsz + qs_off, b + 3 * bsz + qs_off);
    __m512i lo = _mm512_and_si512(q, *nib_mask());
    __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), *nib_mask());
    if (q5) {
        const int qh_off = 2 + 2 * has_m;
        uint64_t h[4];
        for (int g = 0; g < 4; g++)
            h[g] = rd32(b + g * bsz + qh_off);
        __mmask64 klo =
            (h[0] & 0xffff) | (h[1] & 0xffff) << 16 | (h[2] & 0xffff) << 32 | (h[3] & 0xffff) << 48;
        __mmask64 khi = (h[0] >> 16) | (h[1] >> 16) << 16 | (h[2] >> 16) << 32 | (h[3] >> 16) << 48;
        const __m512i bit4 = _mm512_set1_epi8(0x10);
        lo = _mm512_or_si512(lo, _mm512_maskz_mov_epi8(klo, bit4));
        hi = _mm512_or_si512(hi, _mm512_maskz_mov_epi8(khi, bit4));
    }
    w->lo = lo, w->hi = hi;
    __m128i hd = _mm_setr_epi16((short)rd16(b), (short)rd16(b + bsz), (short)rd16(b + 2 * bsz),
                                (short)rd16(b + 3 * bsz), 0, 0, 0, 0);
    w->dlo = expand4(_mm_cvtph_ps(hd));
    if (has_m) {
        __m128i hm =
            _mm_setr_epi16((short)rd16(b + 2), (short)rd16(b + bsz + 2),
                           (short)rd16(b + 2 * bsz + 2), (short)rd16(b + 3 * bsz + 2), 0, 0, 0, 0);
        w->mlo = w->mhi = expand4(_mm_cvtph_ps(hm));
    }
}

// K-quants are walked a super-block (two superchunks) at a time: the scales and minimums of
// all its sub-blocks are decoded once into `struct ksc` (lane j = sub-block j: 8 sub-blocks of
// 32 for Q4_K/Q5_K, 16 of 16 for Q6_K/Q3_K/Q2_K) and each half picks its lanes with a permute.
struct ksc {
    __m512 d, m; // lane j: D and M of 32-value sub-block j (Q4_K/Q5_K); Q2_K: M of 16-value j
    __m256i
        s16;    // 16-value sub-blocks: the integer sub-scales (Q6_K sc, Q3_K sc - 32, Q2_K sc & 15)
    __m512 dsb; // 16-value sub-blocks: d, broadcast
};

// d and dmin are adjacent f16: one conversion, then broadcast one of them.
static ALWAYS_INLINE __m512 f16_pair(const uint8_t *p, int which)
{
    __m128 v = _mm_cvtph_ps(_mm_cvtsi32_si128((int)rd32(p)));
    return _mm512_broadcastss_ps(which ? _mm_movehdup_ps(v) : v);
}

// Q4_K/Q5_K: 6-bit scales and mins of the 8 sub-blocks (j < 4: low 6 bits of bytes j, j+4;
// j >= 4: low 4 bits in byte j+4, high 2 bits atop bytes j-4 and j).
static ALWAYS_INLINE void kscales_q4k(const uint8_t *blk, struct ksc *S)
{
    const uint8_t *sc = blk + 4;
    uint32_t a0 = rd32(sc), a1 = rd32(sc + 4), a2 = rd32(sc + 8);
    uint64_t scv =
        (uint64_t)((a2 & 0x0f0f0f0f) | ((a0 >> 2) & 0x30303030)) << 32 | (a0 & 0x3f3f3f3f);
    uint64_t mnv =
        (uint64_t)(((a2 >> 4) & 0x0f0f0f0f) | ((a1 >> 2) & 0x30303030)) << 32 | (a1 & 0x3f3f3f3f);
    __m512 scf = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_cvtsi64_si128((long long)scv)));
    __m512 mnf = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_cvtsi64_si128((long long)mnv)));
    S->d = _mm512_mul_ps(f16_pair(blk, 0), scf);
    // M = -(dmin * m), as the scalar decoder
    S->m = _mm512_xor_ps(_mm512_mul_ps(f16_pair(blk, 1), mnf), _mm512_set1_ps(-0.f));
}

// Q6_K: 16 int8 scales times d.
static ALWAYS_INLINE void kscales_q6k(const uint8_t *blk, struct ksc *S)
{
    S->s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 192)));
    S->dsb = _mm512_set1_ps(_cvtsh_ss(rd16(blk + 208)));
}

// Q3_K: 16 scales of 6 bits (low 4 bits: low nibbles of bytes 0-7 for scales 0-7, high nibbles
// for 8-15; high 2 bits: bits 2(j/4) of byte 8 + j%4), minus 32, times d.
static ALWAYS_INLINE void kscales_q3k(const uint8_t *blk, struct ksc *S)
{
    const uint8_t *sc = blk + 96;
    uint32_t a0 = rd32(sc), a1 = rd32(sc + 4), t = rd32(sc + 8);
    uint32_t s0 = (a0 & 0x0f0f0f0f) | ((t & 0x03030303) << 4);
    uint32_t s1 = (a1 & 0x0f0f0f0f) | (((t >> 2) & 0x03030303) << 4);
    uint32_t s2 = ((a0 >> 4) & 0x0f0f0f0f) | (((t >> 4) & 0x03030303) << 4);
    uint32_t s3 = ((a1 >> 4) & 0x0f0f0f0f) | (((t >> 6) & 0x03030303) << 4);
    __m256i v = _mm256_cvtepu8_epi16(_mm_setr_epi32((int)s0, (int)s1, (int)s2, (int)s3));
    S->s16 = _mm256_sub_epi16(v, _mm256_set1_epi16(32));
    S->dsb = _mm512_set1_ps(_cvtsh_ss(rd16(blk + 108)));
}

// Q2_K: per 16 values a byte: scale in the low nibble, min in the high one.
static ALWAYS_INLINE void kscales_q2k(const uint8_t *blk, struct ksc *S)
{
    __m128i b = _mm_loadu_si128((const __m128i *)blk);
    S->s16 = _mm256_and_si256(_mm256_cvtepu8_epi16(b), _mm256_set1_epi16(15));
    S->dsb = f16_pair(blk + 80, 0);
    __m512 mn = _mm512_cvtepi32_ps(_mm512_srli_epi32(_mm512_cvtepu8_epi32(b), 4));
    S->m = _mm512_xor_ps(_mm512_mul_ps(f16_pair(blk + 80, 1), mn), _mm512_set1_ps(-0.f));
}

// Lanes 4g+k <- lane base+g (Q4_K/Q5_K: sub-block 4n+g), or lane base+2g (16-value sub-blocks:
// base 8n for the first halves of half n's blocks, 8n+1 for the second halves).
static ALWAYS_INLINE __m512 pick4(__m512 v, int base)
{
    __m512i idx = _mm512_add_epi32(
        _mm512_set1_epi32(base), _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
    return _mm512_permutexvar_ps(idx, v);
}
// Half n of 16 int16 sub-scales: 128-bit lane g <- [s[8n+2g] x4, s[8n+2g+1] x4].
static ALWAYS_INLINE __m512i pick_s16(__m256i s, int n)
{
    const __m512i idx = _mm512_set_epi16(7, 7, 7, 7, 6, 6, 6, 6, 5, 5, 5, 5, 4, 4, 4, 4, 3, 3, 3, 3,
                                         2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    return _mm512_permutexvar_epi16(_mm512_add_epi16(idx, _mm512_set1_epi16((short)(8 * n))),
                                    _mm512_castsi256_si512(s));
}

static ALWAYS_INLINE __m512 pick_even(__m512 v, int base)
{
    __m512i idx = _mm512_add_epi32(
        _mm512_set1_epi32(base), _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6));
    return _mm512_permutexvar_ps(idx, v);
}

// Q4_K / Q5_K, half n: sub-blocks 4n..4n+3, qs[64n .. 64n+63]. Block g takes the low (even g)
// or high (odd g) nibbles of qs[64n + 32(g/2) ..], bit 4n+g of qh.
static ALWAYS_INLINE void load_q4k_q5k(const int type, const uint8_t *blk, int n,
                                       const struct ksc *S, struct wsc *w)
{
    const int q5 = type == TL_DTYPE_Q5_K;
    const uint8_t *qh = blk + 16, *qs = blk + (q5 ? 48 : 16) + 64 * n;
    __m512i q = _mm512_loadu_si512(qs);
    __m512i nl = _mm512_and_si512(q, *nib_mask());
    __m512i nh = _mm512_and_si512(_mm512_srli_epi16(q, 4), *nib_mask());
    // lo = [nl.L0, nh.L0, nl.L2, nh.L2], hi = [nl.L1, nh.L1, nl.L3, nh.L3] (64-bit indices)
    __m512i lo = _mm512_permutex2var_epi64(nl, _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), nh);
    __m512i hi = _mm512_permutex2var_epi64(nl, _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15), nh);
    if (q5) {
        __m512i sel = bit_sel(4 * n), bit4 = _mm512_set1_epi8(0x10);
        __mmask64 klo = _mm512_test_epi8_mask(bcast16(qh), sel);
        __mmask64 khi = _mm512_test_epi8_mask(bcast16(qh + 16), sel);
        lo = _mm512_or_si512(lo, _mm512_maskz_mov_epi8(klo, bit4));
        hi = _mm512_or_si512(hi, _mm512_maskz_mov_epi8(khi, bit4));
    }
    w->lo = lo, w->hi = hi;
    w->dlo = pick4(S->d, 4 * n);
    w->mlo = w->mhi = pick4(S->m, 4 * n);
}

// Q6_K, half n: ql[64n ..], qh[32n ..]. Block 0/1 take the low nibbles of ql[64n + 0 / 32 + l],
// blocks 2/3 the high nibbles; bits 2g..2g+1 of qh[32n + l] on top.
static ALWAYS_INLINE void load_q6k(const uint8_t *blk, int n, const struct ksc *S, struct wsc *w)
{
    const uint8_t *ql = blk + 64 * n, *qh = blk + 128 + 32 * n;
    __m512i q = _mm512_loadu_si512(ql);
    __m512i nl = _mm512_and_si512(q, *nib_mask());
    __m512i nh = _mm512_and_si512(_mm512_srli_epi16(q, 4), *nib_mask());
    __m512i lo = _mm512_shuffle_i64x2(nl, nh, _MM_SHUFFLE(2, 0, 2, 0));
    __m512i hi = _mm512_shuffle_i64x2(nl, nh, _MM_SHUFFLE(3, 1, 3, 1));
    const __m512i three = _mm512_set1_epi8(3), cnt = shift_2g();
    __m512i hl = _mm512_and_si512(_mm512_srlv_epi16(bcast16(qh), cnt), three);
    __m512i hh = _mm512_and_si512(_mm512_srlv_epi16(bcast16(qh + 16), cnt), three);
    w->lo = _mm512_or_si512(lo, _mm512_slli_epi16(hl, 4));
    w->hi = _mm512_or_si512(hi, _mm512_slli_epi16(hh, 4));
    w->s16 = pick_s16(S->s16, n), w->dsb = S->dsb;
}

// Q3_K / Q2_K, half n: block j takes bits 2j..2j+1 of qs[32n + l] (l < 16 first half).
static ALWAYS_INLINE void load_2bit(const uint8_t *qs, __m512i *lo, __m512i *hi)
{
    const __m512i three = _mm512_set1_epi8(3), cnt = shift_2g();
    *lo = _mm512_and_si512(_mm512_srlv_epi16(bcast16(qs), cnt), three);
    *hi = _mm512_and_si512(_mm512_srlv_epi16(bcast16(qs + 16), cnt), three);
}

static ALWAYS_INLINE void load_q3k(const uint8_t *blk, int n, const struct ksc *S, struct wsc *w)
{
    __m512i lo, hi;
    load_2bit(blk + 32 + 32 * n, &lo, &hi);
    __m512i sel = bit_sel(4 * n), bit2 = _mm512_set1_epi8(4);
    __mmask64 klo = _mm512_test_epi8_mask(bcast16(blk), sel);
    __mmask64 khi = _mm512_test_epi8_mask(bcast16(blk + 16), sel);
    w->lo = _mm512_or_si512(lo, _mm512_maskz_mov_epi8(klo, bit2));
    w->hi = _mm512_or_si512(hi, _mm512_maskz_mov_epi8(khi, bit2));
    w->s16 = pick_s16(S->s16, n), w->dsb = S->dsb;
}

static ALWAYS_INLINE void load_q2k(const uint8_t *blk, int n, const struct ksc *S, struct wsc *w)
{
    load_2bit(blk + 16 + 32 * n, &w->lo, &w->hi);
    w->s16 = pick_s16(S->s16, n), w->dsb = S->dsb;
    w->mlo = pick_even(S->m, 8 * n), w->mhi = pick_even(S->m, 8 * n + 1);
}

// Bytes of one block of the type (K-quants: a 256-value super-block).
static ALWAYS_INLINE size_t blk_bytes_of(int type)
{
    switch (type) {
    case TL_DTYPE_Q4_0:
        return 18;
    case TL_DTYPE_Q4_1:
        return 20;
    case TL_DTYPE_Q5_0:
        return 22;
    case TL_DTYPE_Q5_1:
        return 24;
    case TL_DTYPE_Q2_K:
        return 84;
    case TL_DTYPE_Q3_K:
        return 110;
    case TL_DTYPE_Q4_K:
        return 144;
    case TL_DTYPE_Q5_K:
        return 176;
    default:
        return 210;
    }
}

static ALWAYS_INLINE int is_k_of(int type)
{
    return type == TL_DTYPE_Q2_K || type == TL_DTYPE_Q3_K || type == TL_DTYPE_Q4_K ||
           type == TL_DTYPE_Q5_K || type == TL_DTYPE_Q6_K;
}

// The per-super-block part of a K-quant row (nothing for 32-block types).
static ALWAYS_INLINE void load_scales(const int type, const uint8_t *row, int64_t sb, struct ksc *S)
{
    const uint8_t *blk = row + (size_t)sb * blk_bytes_of(type);
    switch (type) {
    case TL_DTYPE_Q4_K:
    case TL_DTYPE_Q5_K:
        kscales_q4k(blk, S);
        break;
    case TL_DTYPE_Q6_K:
        kscales_q6k(blk, S);
        break;
    case TL_DTYPE_Q3_K:
        kscales_q3k(blk, S);
        break;
    case TL_DTYPE_Q2_K:
        kscales_q2k(blk, S);
        break;
    default:
        (void)blk;
        break;
    }
}

// Superchunk s of a row (for K-quants, half s % 2 of the super-block whose scales are S).
static ALWAYS_INLINE void load_w(const int type, const uint8_t *row, int64_t n_in, int64_t s,
                                 const struct ksc *S, struct wsc *w)
{
    const size_t bb = blk_bytes_of(type);
    const uint8_t *blk = row + (size_t)(s / 2) * bb;
    const int n = (int)(s % 2);
    switch (type) {
    case TL_DTYPE_Q4_0:
    case TL_DTYPE_Q4_1:
    case TL_DTYPE_Q5_0:
    case TL_DTYPE_Q5_1:
        if ((s + 1) * 128 <= n_in)
            load_q4q5(type, row + (size_t)s * 4 * bb, w);
        else
            load_generic(type, row, n_in, s, w);
        break;
    case TL_DTYPE_Q4_K:
    case TL_DTYPE_Q5_K:
        load_q4k_q5k(type, blk, n, S, w);
        break;
    case TL_DTYPE_Q6_K:
        load_q6k(blk, n, S, w);
        break;
    case TL_DTYPE_Q3_K:
        load_q3k(blk, n, S, w);
        break;
    case TL_DTYPE_Q2_K:
        load_q2k(blk, n, S, w);
        break;
    default:
        TL_ASSERT(!"unsupported weight type");
    }
}

// ---- tiles ------------------------------------------------------------------------------------

#ifndef TL_AVX512_XPF
#define TL_AVX512_XPF 512
#endif
// Tile shapes (rows x tokens): 4 x 4 while a token chunk has fewer than 8 tokens (a one-token
// call shares the per-token work among 4 rows), 2 x 8 for batches (each row's decode serves
// 8 tokens, and 16 accumulators + 2 rows' operands fit the 32 registers). Measured on the 1B
// ffn shape at 32 tokens: 2 x 8 beat 4 x 4 by 8-15%, 4 x 3, 3 x 4 and 2 x 6 were slower. The
// per-element arithmetic is the same in every shape, so the choice cannot change a result.
enum { XR = 4, XT = 4, WR = 2, WT = 8 };

static ALWAYS_INLINE int split16_of(int type)
{
    return type == TL_DTYPE_Q6_K || type == TL_DTYPE_Q3_K || type == TL_DTYPE_Q2_K;
}

static ALWAYS_INLINE void tile(const struct tl__qx_mm *m, int64_t r, int64_t t, const int type,
                               const int R, const int T)
{
    const struct tl_weight *w = m->w;
    const int64_t n = w->n_in, n_super = (n + 127) / 128;
    const int k = tl__qx_off_shift(type), has_min = tl__qx_has_min(type), split = split16_of(type);
    const size_t scb = is_k_of(type) ? blk_bytes_of(type) / 2 : 4 * blk_bytes_of(type);
    const uint8_t *wr[8];
    const struct tl__qa_chunk *xr[8];
    __m512 acc[8][8];
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
        wr[i] = (const uint8_t *)w->data + (size_t)(r + i) * w->row_bytes;
#pragma GCC unroll 8
    for (int j = 0; j < T; j++)
        xr[j] = m->xa + (t + j) * m->xa_stride;
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 8
        for (int j = 0; j < T; j++)
            acc[i][j] = _mm512_setzero_ps();
    // K-quants step a super-block at a time (scales decoded once), then its two superchunks
    const int per = is_k_of(type) ? 2 : 1;
    for (int64_t s0 = 0; s0 < n_super; s0 += per) {
        struct ksc S[8];
#pragma GCC unroll 8
        for (int i = 0; i < R; i++)
            load_scales(type, wr[i], s0 / 2, &S[i]);
#pragma GCC unroll 2
        for (int hh = 0; hh < per; hh++) {
            const int64_t s = s0 + hh;
            struct wsc W[8];
#pragma GCC unroll 8
            for (int i = 0; i < R; i++) {
                if (TL_AVX512_XPF) {
                    // software prefetch TL_AVX512_XPF bytes ahead, two lines per superchunk
                    const char *pf = (const char *)wr[i] + (size_t)s * scb + TL_AVX512_XPF;
                    _mm_prefetch(pf, _MM_HINT_T0);
                    _mm_prefetch(pf + 64, _MM_HINT_T0);
                }
                load_w(type, wr[i], n, s, &S[i], &W[i]);
            }
#pragma GCC unroll 8
            for (int j = 0; j < T; j++) {
                const struct tl__qa_chunk *a = xr[j] + s;
                const __m512i xlo = _mm512_load_si512(a->qs), xhi = _mm512_load_si512(a->qs + 64);
                const __m512i nslo = _mm512_load_si512(a->nslo), nshi = _mm512_load_si512(a->nshi);
                const __m512 dx = _mm512_load_ps(a->d);
                if (!split) {
                    const __m512i ns = _mm512_add_epi32(nslo, nshi);
                    // bias = off * -sum(x): the integer offset of the quants, exactly
                    const __m512i bias = k >= 0 ? _mm512_slli_epi32(ns, k) : _mm512_setzero_si512();
                    const __m512 nsx = has_min ? _mm512_mul_ps(_mm512_cvtepi32_ps(ns), dx) : dx;
#pragma GCC unroll 8
                    for (int i = 0; i < R; i++) {
                        __m512i v = _mm512_dpbusd_epi32(bias, W[i].lo, xlo);
                        v = _mm512_dpbusd_epi32(v, W[i].hi, xhi);
                        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v),
                                                    _mm512_mul_ps(W[i].dlo, dx), acc[i][j]);
                        if (has_min) acc[i][j] = _mm512_fnmadd_ps(W[i].mlo, nsx, acc[i][j]);
                    }
                } else {
                    const __m512i blo =
                        k >= 0 ? _mm512_slli_epi32(nslo, k) : _mm512_setzero_si512();
                    const __m512i bhi =
                        k >= 0 ? _mm512_slli_epi32(nshi, k) : _mm512_setzero_si512();
                    const __m512 nsxlo = has_min ? _mm512_mul_ps(_mm512_cvtepi32_ps(nslo), dx) : dx;
                    const __m512 nsxhi = has_min ? _mm512_mul_ps(_mm512_cvtepi32_ps(nshi), dx) : dx;
#pragma GCC unroll 8
                    for (int i = 0; i < R; i++) {
                        // sums of 4 products fit int16 (|q - off| <= 32, |x| <= 127): pack the
                        // halves' sums and scale them with the integer sub-scales in one madd
                        // (exact: |sum| < 2^24), then one float scaling by d * d_x
                        __m512i vlo = _mm512_dpbusd_epi32(blo, W[i].lo, xlo);
                        __m512i vhi = _mm512_dpbusd_epi32(bhi, W[i].hi, xhi);
                        __m512i v = _mm512_madd_epi16(_mm512_packs_epi32(vlo, vhi), W[i].s16);
                        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v),
                                                    _mm512_mul_ps(W[i].dsb, dx), acc[i][j]);
                        if (has_min) {
                            acc[i][j] = _mm512_fnmadd_ps(W[i].mlo, nsxlo, acc[i][j]);
                            acc[i][j] = _mm512_fnmadd_ps(W[i].mhi, nsxhi, acc[i][j]);
                        }
                    }
                }
            }
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < T; j++)
#pragma GCC unroll 8
        for (int i = 0; i < R; i++)
            m->y[(t + j) * w->n_out + r + i] = hsum512(acc[i][j]);
}

// [0]: one row x 1..WT, [1]: XR x 1..XT, [2]: WR x 1..WT; index = token count
#define DEF_TILES(NAME, TYPE)                                                                      \
    TL__TILES_8(TL__QX_DEF_TILE, NAME, TYPE, 1)                                                    \
    TL__TILES_4(TL__QX_DEF_TILE, NAME, TYPE, 4)                                                    \
    TL__TILES_8(TL__QX_DEF_TILE, NAME, TYPE, 2)                                                    \
    static const tl__qx_tile_fn tiles_##NAME[3][9] = {                                             \
        TL__TILE_LIST_8(NAME, 1), TL__TILE_LIST_4(NAME, 4), TL__TILE_LIST_8(NAME, 2)};

_Static_assert(XR == 4 && XT == 4 && WR == 2 && WT == 8, "the tile lists assume these shapes");

TL__QX_TYPES(DEF_TILES)

TL__QX_DEF_TILES_FOR(9)

// Bytes of activations a token chunk may occupy: they stay in L2 while the rows stream.
enum { CHUNK_BYTES = 512 * 1024 };

static void matmul_rows(const struct tl__qx_mm *m, int64_t r0, int64_t r1)
{
    const tl__qx_tile_fn(*tiles)[9] = tiles_for(m->w->type);
    const size_t tok_bytes = (size_t)m->xa_stride * sizeof(struct tl__qa_chunk);
    int64_t chunk = (int64_t)(CHUNK_BYTES / tok_bytes) / WT * WT;
    if (chunk < WT) chunk = WT;
    for (int64_t c0 = 0; c0 < m->n_tok; c0 += chunk) {
        const int64_t c1 = c0 + chunk < m->n_tok ? c0 + chunk : m->n_tok;
        const int wide = c1 - c0 >= WT;
        TL__TILE_CHUNK(m, r0, r1, wide ? WR : XR, wide ? WT : XT, c0, c1, tiles[wide ? 2 : 1],
                       tiles[0]);
    }
}

static int row_align(enum tl_dtype type)
{
    (void)type;
    return XR;
}

const struct tl__qx_ops tl__qx_ops_avx512 = {
    .row_align = row_align,
    .quantize = quantize,
    .matmul_rows = matmul_rows,
    .matmul_packed_rows = tl__kq_avx512_packed_rows,
    .matmul_cb4_rows = tl__cb4_avx512_rows,
};
