/*
 * The AVX-512 (F, BW, VL, DQ, VNNI) matmul of the 4-bit codebook weight types of
 * kernels/cb4.h (IQ4_NL, IQ4_XS, MXFP4). Compiled with those -m flags, called only when the CPU
 * has them.
 *
 * Design: a row's superchunk (four 32-blocks) is decoded once per tile of up to T tokens into
 * two registers: the 16 nibble bytes of block g in 128-bit lane g, whose low nibbles (the first
 * 16 values of each block) and high nibbles (the last 16) a vpshufb turns into codebook values
 * + 128, unsigned -- the layout in which struct tl__qa_chunk keeps the activation bytes, so one
 * vpdpbusd per half covers the four blocks. The +128 is cancelled exactly by starting the sums
 * at 128 * (-sum of the activation bytes), which the activation row carries per lane
 * (nslo/nshi), so lane 4g+k holds the exact signed dot of bytes 4k..4k+3 of both halves of
 * block g; then acc = fma(float(sum), D * d_x, acc) and one fixed horizontal sum at the end.
 *
 * Determinism: every (row, token) element sees the same instruction sequence whatever tile it
 * lands in, and is reduced by hsum512.
 *
 * Thread model: pure functions over caller-owned memory; re-entrant.
 */
#include "kernels/cb4.h"
#include "kernels/x86/avx512_impl.h"

enum { T = 4 };                    // tokens per tile
enum { CHUNK_BYTES = 256 * 1024 }; // activations of a token chunk stay in L2

static ALWAYS_INLINE float f16c(uint16_t h)
{
    return _cvtsh_ss(h);
}

// One decoded superchunk of a row.
struct wdec {
    __m512i lo, hi; // lane g: codebook values + 128 of block g, first / second 16 values
    __m512 D;       // lane 4g+k: D of block g
};

static ALWAYS_INLINE void decode(__m512i tbl, const float D[4], const uint8_t *const qs[4],
                                 struct wdec *w)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i q = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)qs[0]));
    q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)qs[1]), 1);
    q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)qs[2]), 2);
    q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)qs[3]), 3);
    w->lo = _mm512_shuffle_epi8(tbl, _mm512_and_si512(q, m4));
    w->hi = _mm512_shuffle_epi8(tbl, _mm512_and_si512(_mm512_srli_epi16(q, 4), m4));
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    w->D = _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_loadu_ps(D)));
}

static ALWAYS_INLINE __m512 step(const struct wdec *w, const struct tl__qa_chunk *a, __m512 acc)
{
    __m512i s = _mm512_slli_epi32(
        _mm512_add_epi32(_mm512_loadu_si512(a->nslo), _mm512_loadu_si512(a->nshi)), 7);
    s = _mm512_dpbusd_epi32(s, w->lo, _mm512_loadu_si512(a->qs));
    s = _mm512_dpbusd_epi32(s, w->hi, _mm512_loadu_si512(a->qs + 64));
    __m512 dd = _mm512_mul_ps(w->D, _mm512_loadu_ps(a->d));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), dd, acc);
}

// Row r against tokens [t0, t0 + nt), nt <= T.
static void row_tile(const struct tl__qx_mm *m, __m512i tbl, int64_t r, int64_t t0, int nt)
{
    const struct tl_weight *w = m->w;
    const void *row = (const char *)w->data + (size_t)r * w->row_bytes;
    const int64_t n_super = (w->n_in + 127) / 128;
    __m512 acc[T];
    for (int u = 0; u < T; u++)
        acc[u] = _mm512_setzero_ps();
    for (int64_t s = 0; s < n_super; s++) {
        float D[4];
        const uint8_t *qs[4];
        struct wdec wd;
        tl__cb4_chunk_f(w->type, row, w->n_in, s, D, qs, f16c);
        decode(tbl, D, qs, &wd);
        for (int u = 0; u < nt; u++)
            acc[u] = step(&wd, m->xa + (t0 + u) * m->xa_stride + s, acc[u]);
    }
    for (int u = 0; u < nt; u++)
        m->y[(t0 + u) * w->n_out + r] = hsum512(acc[u]);
}

void tl__cb4_avx512_rows(const struct tl__qx_mm *m, int64_t r0, int64_t r1)
{
    // the codebook + 128 as unsigned bytes, in every 128-bit lane
    const int8_t *K = tl__cb4_codebook(m->w->type);
    uint8_t ku[16];
    for (int i = 0; i < 16; i++)
        ku[i] = (uint8_t)(K[i] + 128);
    const __m512i tbl = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)ku));
    const size_t tok_bytes = (size_t)m->xa_stride * sizeof(struct tl__qa_chunk);
    int64_t chunk = (int64_t)(CHUNK_BYTES / tok_bytes) / T * T;
    if (chunk < T) chunk = T;
    for (int64_t c0 = 0; c0 < m->n_tok; c0 += chunk) {
        const int64_t c1 = c0 + chunk < m->n_tok ? c0 + chunk : m->n_tok;
        for (int64_t r = r0; r < r1; r++)
            for (int64_t t = c0; t < c1; t += T)
                row_tile(m, tbl, r, t, c1 - t < T ? (int)(c1 - t) : T);
    }
}
