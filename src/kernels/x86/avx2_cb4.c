/*
 * The AVX2 (+ FMA, F16C) matmul of the 4-bit codebook weight types of kernels/cb4.h (IQ4_NL,
 * IQ4_XS, MXFP4). Compiled with those -m flags, called only when the CPU has them.
 *
 * Design: a row's superchunk (four 32-blocks) is decoded once per tile of up to T tokens: per
 * pair of blocks one register of 32 nibbles (block 2p in the low 128 bits, 2p+1 in the high),
 * whose low and high nibbles a vpshufb turns into the int8 codebook values of the first and
 * second 16 values of each block -- the order in which struct tl__qa_chunk keeps the activation
 * bytes, so the activations load as they are. The products are signed x signed: maddubs of
 * |w| with x carrying w's sign gives exact int16 pair sums (|w|, |x| <= 127: no saturation),
 * madd with ones widens them to 8 int32 sums of 4 products (lanes 0-3: block 2p, 4-7: 2p+1),
 * and acc = fma(float(sum), D * d_x, acc) per pair; one fixed horizontal sum at the end.
 *
 * Determinism: every (row, token) element sees the same instruction sequence whatever tile it
 * lands in, and is reduced by hsum256.
 *
 * Thread model: pure functions over caller-owned memory; re-entrant.
 */
#include "kernels/cb4.h"
#include "kernels/x86/avx2_impl.h"

enum { T = 4 };                    // tokens per tile
enum { CHUNK_BYTES = 256 * 1024 }; // activations of a token chunk stay in L2

static ALWAYS_INLINE float f16c(uint16_t h)
{
    return _cvtsh_ss(h);
}

// One decoded superchunk of a row.
struct wdec {
    __m256i lo[2], hi[2]; // pair p: codebook values of blocks 2p, 2p+1 (first / second halves)
    __m256 D[2];          // pair p: lanes 0-3 D of block 2p, 4-7 D of block 2p+1
};

static ALWAYS_INLINE void decode(__m256i tbl, const float D[4], const uint8_t *const qs[4],
                                 struct wdec *w)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int p = 0; p < 2; p++) {
        __m256i q = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)qs[2 * p + 1]),
                                     _mm_loadu_si128((const __m128i *)qs[2 * p]));
        w->lo[p] = _mm256_shuffle_epi8(tbl, _mm256_and_si256(q, m4));
        w->hi[p] = _mm256_shuffle_epi8(tbl, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
        w->D[p] = _mm256_setr_ps(D[2 * p], D[2 * p], D[2 * p], D[2 * p], D[2 * p + 1], D[2 * p + 1],
                                 D[2 * p + 1], D[2 * p + 1]);
    }
}

// 8 int32 sums of 4 products of signed bytes w and x.
static ALWAYS_INLINE __m256i dot4(__m256i w, __m256i x)
{
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

static ALWAYS_INLINE __m256 step(const struct wdec *w, const struct tl__qa_chunk *a, __m256 acc)
{
    for (int p = 0; p < 2; p++) {
        __m256i xlo = _mm256_loadu_si256((const __m256i *)(a->qs + 32 * p));
        __m256i xhi = _mm256_loadu_si256((const __m256i *)(a->qs + 64 + 32 * p));
        __m256i s = _mm256_add_epi32(dot4(w->lo[p], xlo), dot4(w->hi[p], xhi));
        __m256 dd = _mm256_mul_ps(w->D[p], _mm256_loadu_ps(a->d + 8 * p));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), dd, acc);
    }
    return acc;
}

// Row r against tokens [t0, t0 + nt), nt <= T.
static void row_tile(const struct tl__qx_mm *m, __m256i tbl, int64_t r, int64_t t0, int nt)
{
    const struct tl_weight *w = m->w;
    const void *row = (const char *)w->data + (size_t)r * w->row_bytes;
    const int64_t n_super = (w->n_in + 127) / 128;
    __m256 acc[T];
    for (int u = 0; u < T; u++)
        acc[u] = _mm256_setzero_ps();
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
        m->y[(t0 + u) * w->n_out + r] = hsum256(acc[u]);
}

void tl__cb4_avx2_rows(const struct tl__qx_mm *m, int64_t r0, int64_t r1)
{
    const __m256i tbl =
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)tl__cb4_codebook(m->w->type)));
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
