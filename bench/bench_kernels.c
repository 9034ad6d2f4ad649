/*
 * Kernel benchmark. First checks every ISA variant against the scalar reference (exit 1 on a
 * mismatch), then measures the machine's ceilings (kernels/ceilings.c: streaming read bandwidth,
 * peak f32 FMA and int8 dot-product rate of the active kernel ISA on 1 and 2 threads) and times
 * tl_matmul for the shapes of a 110M and a 1B Llama at n_tok = 1..128 for each weight type, ISA and thread count, then attention (1B-like with
 * grouped-query heads, and 110M-like without).
 *
 * Weights are "cold": each timed call uses the next copy of the matrix in a 1 GiB arena, so a
 * single-token matmul reads from DRAM rather than from this machine's large L3, as it would in
 * a real model whose layers do not fit in cache. --hot reuses one copy (cache-resident).
 * Weights are prepared (tl_weight_prepare: repacked) as the model loader does; --raw times the
 * file layout instead.
 *
 * Usage: bench_kernels [--quick] [--hot] [--raw] [--no-ceilings] [--isa NAME] [--type NAME]
 *                      [--threads N] [--shape i | --dims N_OUTxN_IN] [--tok N (1..128)]
 *                      [--kv-type f16|f32|q8_0|all] (--type attn: attention only)
 * Each configuration is timed in 5 rounds and the fastest round is reported (other processes
 * on a shared machine can only make a round slower); single-thread runs are timed in thread CPU
 * time, which excludes time slices taken by other processes.
 */
#include "bench_common.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "core/dtype.h"
#include "core/pool.h"
#include "kernels/kernels.h"
#include "kernels/kernels_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// ---- correctness ------------------------------------------------------------------------------

static const char *const isas[] = {"scalar", "avx2", "avx512"};
static const enum tl_dtype types[] = {TL_DTYPE_F32, TL_DTYPE_F16, TL_DTYPE_BF16, TL_DTYPE_Q8_0};

static void make_weight(struct tl_weight *w, enum tl_dtype type, int64_t n_out, int64_t n_in,
                        void *data)
{
    size_t rb;
    if (!tl_dtype_row_bytes(type, n_in, &rb)) abort();
    float *row = malloc(sizeof(float) * (size_t)n_in);
    for (int64_t r = 0; r < n_out; r++) {
        for (int64_t i = 0; i < n_in; i++)
            row[i] = rnd();
        tl_quantize_row(type, row, (char *)data + rb * (size_t)r, n_in);
    }
    free(row);
    *w = (struct tl_weight){
        .type = type, .n_in = n_in, .n_out = n_out, .row_bytes = rb, .data = data};
}

static int check_correctness(struct tl_pool *pool)
{
    int bad = 0;
    const int64_t n_in = 352, n_out = 75, n_tok = 19;
    float *x = malloc(sizeof(float) * n_in * n_tok);
    float *y = malloc(sizeof(float) * n_out * n_tok), *ref = malloc(sizeof(float) * n_out * n_tok);
    for (int64_t i = 0; i < n_in * n_tok; i++)
        x[i] = rnd();
    void *data = tl_aligned_alloc((size_t)n_in * n_out * 4);
    void *work = tl_aligned_alloc((size_t)n_tok * (tl__xq_row_bytes(n_in) + 4 * (size_t)n_in + 64));
    printf("correctness vs scalar reference (n_in %lld, n_out %lld, n_tok %lld; file layout, "
           "then prepared):\n",
           (long long)n_in, (long long)n_out, (long long)n_tok);
    for (int k = 0; k < 8; k++) {
        struct tl_weight w;
        make_weight(&w, types[k % 4], n_out, n_in, data);
        tl__ref_matmul(&w, x, n_tok, ref, work);
        void *owned = NULL;
        if (k >= 4 && tl_weight_prepare(&w, &owned)) return 1;
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
            printf("  %-6s %-5s %-8s nmse %.2e %s\n", isas[s], tl_dtype_name(types[k % 4]),
                   k >= 4 ? "prepared" : "file", num / den, ok ? "ok" : "FAIL");
        }
        tl_aligned_free(owned);
    }
    free(x), free(y), free(ref);
    tl_aligned_free(data);
    tl_aligned_free(work);
    return bad;
}

// ---- matmul timing ----------------------------------------------------------------------------

struct shape {
    const char *name;
    int64_t n_out, n_in;
};
static const struct shape shapes[] = {
    {"110M qkvo", 768, 768},     {"110M ffn up", 2048, 768}, {"110M ffn down", 768, 2048},
    {"110M logits", 32000, 768}, {"1B attn", 2048, 2048},    {"1B ffn up", 5632, 2048},
};
static const int64_t toks[] = {1, 4, 16, 32, 64, 128};

// ---- attention timing -------------------------------------------------------------------------

// Decode-style attention: n_tok tokens of different sequences, each attending to n_ctx
// positions of a layer of N_HEAD heads, N_KV KV heads, head_dim 64, KV type kv_type (F16 by
// default, --kv-type), blocks of 16.
static void bench_attention(struct tl_pool *pool, int threads, const char *only_isa, int N_HEAD,
                            int N_KV, enum tl_dtype kv_type)
{
    enum { HD = 64, BS = 16, MAX_TOK = 16, MAX_HEAD = 32 };
    const int64_t ctxs[] = {256, 1024, 4096};
    int64_t max_ctx = 4096, blocks_per_seq = max_ctx / BS;
    size_t n_blocks = (size_t)(MAX_TOK * blocks_per_seq);
    size_t elems = n_blocks * BS * N_KV * HD;
    const size_t row_bytes = tl_kv_row_bytes(kv_type, HD); // per (position, KV head)
    const size_t kv_bytes = elems / HD * row_bytes;
    void *k = tl_aligned_alloc(kv_bytes), *v = tl_aligned_alloc(kv_bytes);
    float *kf = malloc(elems * 4), *vf = malloc(elems * 4);
    int32_t *tables = malloc(sizeof(int32_t) * n_blocks);
    float *q = tl_aligned_alloc(sizeof(float) * MAX_TOK * MAX_HEAD * HD);
    float *out = tl_aligned_alloc(sizeof(float) * MAX_TOK * MAX_HEAD * HD);
    void *work = tl_aligned_alloc(tl_attention_work_bytes(threads, max_ctx, HD));
    for (size_t i = 0; i < elems; i++) {
        kf[i] = rnd();
        vf[i] = rnd();
    }
    if (!tl_quantize_row(kv_type, kf, k, (int64_t)elems) ||
        !tl_quantize_row(kv_type, vf, v, (int64_t)elems)) {
        fprintf(stderr, "bench_kernels: cannot store KV of type %s\n", tl_dtype_name(kv_type));
        exit(1);
    }
    free(kf), free(vf);
    for (size_t i = 0; i < n_blocks; i++)
        tables[i] = (int32_t)((i * 7919) % n_blocks); // scattered
    for (int i = 0; i < MAX_TOK * N_HEAD * HD; i++)
        q[i] = rnd();
    struct tl_kv_layer kv = {kv_type, BS, N_KV, HD, k, v};
    printf("\nattention (%d heads, %d KV heads, head_dim 64, %s KV; per layer; KV GB/s = K+V "
           "bytes of each token's context / time)\n",
           N_HEAD, N_KV, tl_dtype_name(kv_type));
    printf("%-6s %5s %4s %3s %10s %9s\n", "isa", "ctx", "tok", "thr", "us/call", "KV GB/s");
    for (int s = 0; s < 3; s++) {
        if (only_isa && strcmp(only_isa, isas[s])) continue;
        if (!tl_kernels_force_isa(isas[s])) continue;
        for (size_t ci = 0; ci < sizeof(ctxs) / sizeof(ctxs[0]); ci++) {
            for (int n_tok = 1; n_tok <= MAX_TOK; n_tok *= 16) {
                struct tl_attn_query qs[MAX_TOK];
                for (int t = 0; t < n_tok; t++) {
                    qs[t].block_table = tables + t * blocks_per_seq;
                    qs[t].n_ctx = ctxs[ci];
                }
                double per = 1e30;
                for (int round = 0; round < 5; round++) {
                    int calls = 0;
                    double t0 = now_s(), el;
                    do {
                        tl_attention(pool, &kv, q, qs, n_tok, N_HEAD, 0.125f, out, work);
                        calls++;
                        el = now_s() - t0;
                    } while (el < 0.03 || calls < 2);
                    if (el / calls < per) per = el / calls;
                }
                double bytes = (double)n_tok * ctxs[ci] * N_KV * row_bytes * 2;
                printf("%-6s %5lld %4d %3d %10.1f %9.1f\n", isas[s], (long long)ctxs[ci], n_tok,
                       threads, per * 1e6, bytes / per / 1e9);
            }
        }
    }
    tl_aligned_free(k), tl_aligned_free(v), tl_aligned_free(q), tl_aligned_free(out);
    tl_aligned_free(work);
    free(tables);
}

int main(int argc, char **argv)
{
    int quick = 0, hot = 0, raw = 0, no_ceil = 0, only_threads = 0, only_shape = -1, only_tok = 0;
    struct shape custom = {0};
    const char *only_isa = NULL, *only_type = NULL, *kv_type_arg = "f16";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--hot"))
            hot = 1;
        else if (!strcmp(argv[i], "--raw"))
            raw = 1;
        else if (!strcmp(argv[i], "--no-ceilings"))
            no_ceil = 1;
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc)
            only_isa = argv[++i];
        else if (!strcmp(argv[i], "--type") && i + 1 < argc)
            only_type = argv[++i];
        else if (!strcmp(argv[i], "--kv-type") && i + 1 < argc)
            kv_type_arg = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            only_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc)
            only_shape = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dims") && i + 1 < argc) {
            // a custom shape N_OUTxN_IN (n_in at most 2048), timed instead of the list
            long o = 0, in = 0;
            if (sscanf(argv[++i], "%ldx%ld", &o, &in) != 2 || o < 1 || o > 32000 || in < 32 ||
                in > 2048 || in % 32) {
                fprintf(stderr,
                        "--dims wants N_OUTxN_IN, n_out <= 32000, n_in <= 2048, n_in %% 32 == 0\n");
                return 2;
            }
            custom = (struct shape){"custom", o, in};
            only_shape = 0;
        } else if (!strcmp(argv[i], "--tok") && i + 1 < argc)
            only_tok = atoi(argv[++i]);
        else {
            fprintf(
                stderr,
                "usage: %s [--quick] [--hot] [--raw] [--no-ceilings] [--isa NAME] [--type NAME] "
                "[--threads N] [--shape i | --dims OxI] [--tok N]\n",
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
    if (!no_ceil) {
        printf("\nceilings:\n");
        printf("  stream read, 1 GiB: 1 thread %.1f GB/s, 2 threads %.1f GB/s\n",
               stream_read_gbs(pools[0], arena, arena_bytes),
               stream_read_gbs(pools[1], arena, arena_bytes));
        printf("  stream read, 4 MiB (cache): 1 thread %.1f GB/s\n",
               stream_read_gbs(pools[0], arena, 4 << 20));
        // kernels/ceilings.c: the same probes the server divides its counted work by
        for (int th = 1; th <= 2; th++)
            printf("  peak, %d thread(s), %s kernels: f32 FMA %.1f GFLOP/s, int8 dot %.1f GOP/s\n",
                   th, tl_kernels_isa(), tl_ceiling_fp32_flops_per_s(pools[th - 1], 5, 0.05) / 1e9,
                   tl_ceiling_int8_ops_per_s(pools[th - 1], 5, 0.05) / 1e9);
    }

    int64_t max_tok = toks[sizeof(toks) / sizeof(toks[0]) - 1];
    int64_t max_in = 2048;
    float *x = tl_aligned_alloc(sizeof(float) * (size_t)(max_tok * max_in));
    float *y = tl_aligned_alloc(sizeof(float) * (size_t)(max_tok * 32000));
    // room for the quantized (Q8_0) or restrided (packed float) activations
    void *work =
        tl_aligned_alloc((size_t)max_tok * (tl__xq_row_bytes(max_in) + 4 * (size_t)max_in + 64));
    for (int64_t i = 0; i < max_tok * max_in; i++)
        x[i] = rnd();

    printf("\nmatmul (%s%s weights; GFLOP/s = 2*n_in*n_out*n_tok/s; GB/s = weight bytes/s; "
           "x1 = tokens/s relative to n_tok=1)\n",
           hot ? "hot" : "cold", raw ? ", file-layout" : ", prepared");
    printf("%-6s %-5s %-14s %4s %3s %9s %8s %7s %10s %6s\n", "isa", "type", "shape", "tok", "thr",
           "us/call", "GFLOP/s", "GB/s", "tok/s", "x1");
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
        if (only_shape >= 0 && (size_t)only_shape != si) continue;
        if (quick && si != 1 && si != 5) continue;
        const struct shape *sh = custom.n_out ? &custom : &shapes[si];
        for (int k = 0; k < 4; k++) {
            if (only_type && strcasecmp(only_type, tl_dtype_name(types[k]))) continue;
            struct tl_weight w;
            make_weight(&w, types[k], sh->n_out, sh->n_in, arena);
            if (!raw) {
                // as the model loader does: repack once (Q8_0), then time the packed copies
                void *owned;
                if (tl_weight_prepare(&w, &owned)) return 1;
                if (owned) {
                    memcpy(arena, owned, tl_weight_data_bytes(&w));
                    tl_aligned_free(owned);
                    w.data = arena;
                }
            }
            size_t mbytes = tl_weight_data_bytes(&w);
            size_t stride = (mbytes + 4095) & ~(size_t)4095;
            int copies = hot ? 1 : (int)(arena_bytes / stride);
            for (int c = 1; c < copies; c++)
                memcpy(arena + (size_t)c * stride, arena, mbytes);
            for (int s = 1; s < 3; s++) {
                if (only_isa && strcmp(only_isa, isas[s])) continue;
                if (!tl_kernels_force_isa(isas[s])) continue;
                for (int th = 1; th <= 2; th++) {
                    if (only_threads && th != only_threads) continue;
                    double tps1 = 0;
                    for (size_t ti = 0; ti < sizeof(toks) / sizeof(toks[0]); ti++) {
                        int64_t n_tok = only_tok > 0 && only_tok <= max_tok ? only_tok : toks[ti];
                        if (only_tok && ti > 0) break;
                        if (quick && n_tok != 1 && n_tok != 32) continue;
                        if (only_tok && n_tok != only_tok) continue;
                        double per = best_matmul_s(pools[th - 1], &w, arena, stride, copies, x,
                                                   n_tok, y, work, th == 1, quick ? 0.02 : 0.06);
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
    if (!only_type || !strcasecmp(only_type, "attn"))
        for (int th = 1; th <= 2; th++)
            if (!only_threads || th == only_threads) {
                for (int kt = 0; kt < 3; kt++) {
                    const char *kvn[3] = {"f16", "q8_0", "f32"};
                    if (strcasecmp(kv_type_arg, "all") && strcasecmp(kv_type_arg, kvn[kt]))
                        continue;
                    enum tl_dtype kvt;
                    if (!tl_dtype_from_name(kvn[kt], &kvt)) continue;
                    bench_attention(pools[th - 1], th, only_isa, 32, 4, kvt);  // 1B-like: GQA 8
                    bench_attention(pools[th - 1], th, only_isa, 12, 12, kvt); // 110M: no sharing
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
