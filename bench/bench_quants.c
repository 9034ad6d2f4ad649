/*
 * Benchmark of the extra weight types (Q4_0 .. Q6_K, IQ4_NL, IQ4_XS, MXFP4). First checks every ISA variant against
 * the scalar reference (exit 1 on a mismatch), then measures the streaming read bandwidth of
 * one and two threads, then times tl_matmul for 110M and 1B Llama shapes at n_tok = 1..128 for
 * each type, ISA and thread count, printing GFLOP/s (2 * n_in * n_out * n_tok / s) and the
 * weight bytes read per second. Q8_0 is timed too, as the point of comparison.
 *
 * Weights are "cold" by default: each timed call uses the next copy of the matrix in a 1 GiB
 * arena, so a one-token matmul streams from DRAM as in a model larger than the L3; --hot reuses
 * one copy. Each configuration is the best of 5 rounds; single-thread runs are timed in thread
 * CPU time (other processes on a shared machine only make a round slower).
 *
 * Weights are prepared as the model prepares them (tl_weight_prepare: Q4_K, Q5_K, Q6_K and Q8_0
 * repacked into 16-row groups); --raw times the file layout instead.
 *
 * Usage: bench_quants [--quick] [--hot] [--raw] [--isa NAME] [--type NAME] [--threads N] [--shape i]
 *                     [--tok N]
 */
#include "bench_common.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "core/pool.h"
#include "kernels/kernels.h"
#include "kernels/quants.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static const char *const isas[] = {"scalar", "avx2", "avx512"};
static const enum tl_dtype types[] = {TL_DTYPE_Q4_0, TL_DTYPE_Q4_1, TL_DTYPE_Q5_0, TL_DTYPE_Q5_1,
                                      TL_DTYPE_Q2_K, TL_DTYPE_Q3_K, TL_DTYPE_Q4_K, TL_DTYPE_Q5_K,
                                      TL_DTYPE_Q6_K, TL_DTYPE_IQ4_NL, TL_DTYPE_IQ4_XS,
                                      TL_DTYPE_MXFP4, TL_DTYPE_Q8_0};
enum { N_TYPES = sizeof(types) / sizeof(types[0]) };

// ---- correctness ------------------------------------------------------------------------------

static void make_weight(struct tl_weight *w, enum tl_dtype type, int64_t n_out, int64_t n_in,
                        void *data)
{
    size_t rb;
    if (!tl_dtype_row_bytes(type, n_in, &rb)) abort();
    float *row = malloc(sizeof(float) * (size_t)n_in);
    for (int64_t r = 0; r < n_out; r++) {
        for (int64_t i = 0; i < n_in; i++)
            row[i] = rnd();
        if (!tl_quantize_row(type, row, (char *)data + rb * (size_t)r, n_in)) abort();
    }
    free(row);
    memset(w, 0, sizeof(*w));
    w->type = type;
    w->n_in = n_in;
    w->n_out = n_out;
    w->row_bytes = rb;
    w->data = data;
}

static int check_correctness(struct tl_pool *pool)
{
    int bad = 0;
    const int64_t n_in = 768, n_out = 75, n_tok = 19;
    float *x = malloc(sizeof(float) * n_in * n_tok);
    float *y = malloc(sizeof(float) * n_out * n_tok), *ref = malloc(sizeof(float) * n_out * n_tok);
    for (int64_t i = 0; i < n_in * n_tok; i++)
        x[i] = rnd();
    void *data = tl_aligned_alloc((size_t)n_in * n_out * 2);
    void *work = tl_aligned_alloc((size_t)n_tok * tl__qa_row_bytes(n_in) * 2);
    printf("correctness vs scalar reference (n_in %lld, n_out %lld, n_tok %lld):\n",
           (long long)n_in, (long long)n_out, (long long)n_tok);
    for (int k = 0; k < N_TYPES - 1; k++) {
        struct tl_weight w;
        make_weight(&w, types[k], n_out, n_in, data);
        tl__qx_ref_matmul(&w, x, n_tok, ref, work);
        for (int s = 0; s < 3; s++) {
            if (!tl_kernels_force_isa(isas[s])) continue;
            tl_matmul(pool, &w, x, n_tok, y, work);
            double num = 0, den = 0;
            for (int64_t i = 0; i < n_out * n_tok; i++) {
                num += ((double)y[i] - ref[i]) * ((double)y[i] - ref[i]);
                den += (double)ref[i] * ref[i];
            }
            int ok = num / den < 1e-10;
            bad += !ok;
            printf("  %-6s %-5s nmse %.2e %s\n", isas[s], tl_dtype_name(types[k]), num / den,
                   ok ? "ok" : "FAIL");
        }
        if (!tl__kq_packable(types[k])) continue;
        // the packed layout must give the reference's bits on every ISA
        void *owned;
        if (tl_weight_prepare(&w, &owned)) abort();
        for (int s = 0; s < 3; s++) {
            if (!tl_kernels_force_isa(isas[s])) continue;
            tl_matmul(pool, &w, x, n_tok, y, work);
            int ok = !memcmp(y, ref, sizeof(float) * (size_t)(n_out * n_tok));
            bad += !ok;
            printf("  %-6s %-5s packed: %s\n", isas[s], tl_dtype_name(types[k]),
                   ok ? "bit-identical" : "FAIL (differs from the reference)");
        }
        tl_aligned_free(owned);
    }
    free(x), free(y), free(ref);
    tl_aligned_free(data);
    tl_aligned_free(work);
    return bad;
}

// ---- timing -----------------------------------------------------------------------------------

struct shape {
    const char *name;
    int64_t n_out, n_in;
};
static const struct shape shapes[] = {
    {"110M qkvo", 768, 768}, {"110M ffn up", 2048, 768}, {"110M ffn down", 768, 2048},
    {"1B attn", 2048, 2048}, {"1B ffn up", 5632, 2048},  {"1B ffn down", 2048, 5632},
};
static const int64_t toks[] = {1, 4, 16, 32, 64, 128};

int main(int argc, char **argv)
{
    int quick = 0, hot = 0, raw = 0, only_threads = 0, only_shape = -1, only_tok = 0;
    const char *only_isa = NULL, *only_type = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--hot"))
            hot = 1;
        else if (!strcmp(argv[i], "--raw"))
            raw = 1;
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc)
            only_isa = argv[++i];
        else if (!strcmp(argv[i], "--type") && i + 1 < argc)
            only_type = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            only_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc)
            only_shape = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tok") && i + 1 < argc)
            only_tok = atoi(argv[++i]);
        else {
            fprintf(stderr,
                    "usage: %s [--quick] [--hot] [--raw] [--isa NAME] [--type NAME] [--threads N] "
                    "[--shape i] [--tok N]\n",
                    argv[0]);
            return 2;
        }
    }
    struct tl_pool *pools[2] = {tl_pool_create(1), tl_pool_create(2)};
    if (!pools[0] || !pools[1]) return 1;
    if (check_correctness(pools[1])) {
        fprintf(stderr, "correctness check failed: not timing\n");
        return 1;
    }
    const size_t arena_bytes = (size_t)1 << 30;
    char *arena = tl_aligned_alloc(arena_bytes);
    if (!arena) return 1;
    memset(arena, 1, arena_bytes);
    printf("\nstream read, 1 GiB: 1 thread %.1f GB/s, 2 threads %.1f GB/s\n",
           stream_read_gbs(pools[0], arena, arena_bytes),
           stream_read_gbs(pools[1], arena, arena_bytes));

    const int64_t max_tok = 128, max_in = 5632;
    float *x = tl_aligned_alloc(sizeof(float) * (size_t)(max_tok * max_in));
    float *y = tl_aligned_alloc(sizeof(float) * (size_t)(max_tok * 5632));
    void *work = tl_aligned_alloc((size_t)max_tok * tl__qa_row_bytes(max_in) * 2);
    for (int64_t i = 0; i < max_tok * max_in; i++)
        x[i] = rnd();
    printf("\nmatmul (%s %s weights; GFLOP/s = 2*n_in*n_out*n_tok/s; GB/s = weight bytes/s; "
           "x1 = tokens/s relative to n_tok=1)\n",
           hot ? "hot" : "cold", raw ? "file-layout" : "prepared");
    printf("%-6s %-5s %-14s %4s %3s %9s %8s %7s %10s %6s\n", "isa", "type", "shape", "tok", "thr",
           "us/call", "GFLOP/s", "GB/s", "tok/s", "x1");
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
        if (only_shape >= 0 && (size_t)only_shape != si) continue;
        if (quick && si != 4) continue;
        const struct shape *sh = &shapes[si];
        for (int k = 0; k < N_TYPES; k++) {
            if (only_type && strcasecmp(only_type, tl_dtype_name(types[k]))) continue;
            struct tl_weight w;
            make_weight(&w, types[k], sh->n_out, sh->n_in, arena);
            // as the model loads it (repacked where a packed layout exists) unless --raw
            void *owned = NULL;
            if (!raw && tl_weight_prepare(&w, &owned)) abort();
            size_t mbytes = tl_weight_data_bytes(&w);
            size_t stride = (mbytes + 4095) & ~(size_t)4095;
            int copies = hot ? 1 : (int)(arena_bytes / stride);
            for (int c = owned ? 0 : 1; c < copies; c++)
                memcpy(arena + (size_t)c * stride, owned ? owned : (void *)arena, mbytes);
            tl_aligned_free(owned);
            for (int s = 1; s < 3; s++) {
                if (only_isa && strcmp(only_isa, isas[s])) continue;
                if (!tl_kernels_force_isa(isas[s])) continue;
                for (int th = 1; th <= 2; th++) {
                    if (only_threads && th != only_threads) continue;
                    double tps1 = 0;
                    for (size_t ti = 0; ti < sizeof(toks) / sizeof(toks[0]); ti++) {
                        int64_t n_tok = toks[ti];
                        if (quick && n_tok != 1 && n_tok != 32) continue;
                        if (only_tok && n_tok != only_tok) continue;
                        double per = best_matmul_s(pools[th - 1], &w, arena, stride, copies, x,
                                                   n_tok, y, work, th == 1, quick ? 0.02 : 0.05);
                        double gflops = 2.0 * sh->n_in * sh->n_out * n_tok / per / 1e9;
                        double gbs = (double)mbytes / per / 1e9;
                        double tps = n_tok / per;
                        if (n_tok == 1) tps1 = tps;
                        printf("%-6s %-5s %-14s %4lld %3d %9.1f %8.1f %7.1f %10.0f %6.1f\n",
                               isas[s], tl_dtype_name(types[k]), sh->name, (long long)n_tok, th,
                               per * 1e6, gflops, gbs, tps, tps1 > 0 ? tps / tps1 : 0.0);
                        fflush(stdout);
                    }
                }
            }
        }
    }
    tl_aligned_free(x);
    tl_aligned_free(y);
    tl_aligned_free(work);
    tl_aligned_free(arena);
    tl_pool_destroy(pools[0]);
    tl_pool_destroy(pools[1]);
    return 0;
}
