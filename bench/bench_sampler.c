/*
 * Sampler benchmark: the cost of one tl_sampler_sample call over a 32000-token vocabulary, the
 * per-sequence work of every decode step (64 sequences: 64 calls a step).
 *
 * Logits are seeded pseudo-Gaussian rows (a sum of uniforms) of a given spread, 64 distinct
 * rows; each configuration samples every row in 5 rounds, timed in thread CPU time (other
 * processes on a shared machine cannot inflate it), and reports the best round in us per call.
 * It also prints a hash of every sampled token and log-probability: two builds that print the
 * same hashes sample identically (the check to run before and after changing the sampler).
 *
 * Usage: bench_sampler [--vocab N] [--rows N] [--rounds N]
 */
#include "bench_common.h"
#include "core/hash.h"
#include "engine/sampler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct config {
    const char *name;
    float temperature, top_p, min_p;
    int32_t top_k, n_logprobs;
    float repetition_penalty;
};

static const struct config configs[] = {
    {"greedy", 0.0f, 1.0f, 0.0f, 0, 0, 1.0f},
    {"temp 0.8, top-p 0.95 (bench_engine)", 0.8f, 0.95f, 0.0f, 0, 0, 1.0f},
    {"temp 1 (plain)", 1.0f, 1.0f, 0.0f, 0, 0, 1.0f},
    {"temp 0.7, top-k 40, top-p 0.9", 0.7f, 0.9f, 0.0f, 40, 0, 1.0f},
    {"temp 0.8, min-p 0.05", 0.8f, 1.0f, 0.05f, 0, 0, 1.0f},
    {"temp 0.8, top-p 0.95, 5 logprobs, rep 1.1", 0.8f, 0.95f, 0.0f, 0, 5, 1.1f},
};

int main(int argc, char **argv)
{
    int32_t n_vocab = 32000;
    int rows = 64, rounds = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--vocab") && i + 1 < argc)
            n_vocab = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc)
            rows = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_sampler [--vocab N] [--rows N] [--rounds N]\n");
            return 2;
        }
    }
    if (n_vocab < 2 || rows < 1 || rounds < 1) {
        fprintf(stderr, "bench_sampler: vocab >= 2, rows >= 1, rounds >= 1\n");
        return 2;
    }
    struct tl_sampler *s = tl_sampler_create(n_vocab);
    float *logits = malloc(sizeof(float) * (size_t)n_vocab * (size_t)rows);
    int32_t history[64];
    for (int i = 0; i < 64; i++)
        history[i] = (int32_t)((i * 7919) % n_vocab);
    if (!s || !logits) {
        fprintf(stderr, "bench_sampler: out of memory\n");
        return 1;
    }
    static const float spreads[] = {1.0f, 3.0f, 10.0f};
    printf("vocabulary %d, %d rows, best of %d rounds, us per call (thread CPU time)\n", n_vocab,
           rows, rounds);
    printf("%-44s %10s %10s %10s   %s\n", "parameters", "spread 1", "spread 3", "spread 10",
           "hash of the samples");
    for (size_t c = 0; c < sizeof(configs) / sizeof(configs[0]); c++) {
        const struct config *cf = &configs[c];
        struct tl_sampling p;
        memset(&p, 0, sizeof(p));
        p.temperature = cf->temperature;
        p.top_p = cf->top_p;
        p.min_p = cf->min_p;
        p.top_k = cf->top_k;
        p.n_logprobs = cf->n_logprobs;
        p.repetition_penalty = cf->repetition_penalty;
        if (tl_sampling_validate(&p)) {
            fprintf(stderr, "bench_sampler: %s\n", tl_last_error());
            return 1;
        }
        double us[3];
        uint64_t h = TL_FNV64_OFFSET;
        for (int sp = 0; sp < 3; sp++) {
            rng = 88172645463325252ull; // the same logits for every configuration
            for (size_t i = 0; i < (size_t)n_vocab * (size_t)rows; i++)
                logits[i] = spreads[sp] * (rnd() + rnd() + rnd() + rnd()) * 0.866f;
            double best = 1e30;
            for (int r = 0; r < rounds; r++) {
                struct tl_rng g;
                tl_rng_seed(&g, 1234);
                double t0 = thread_cpu_s();
                for (int row = 0; row < rows; row++) {
                    struct tl_sample_result res;
                    tl_sampler_sample(s, logits + (size_t)row * n_vocab, &p, history, 32, 64, &g,
                                      &res);
                    if (r == 0) {
                        h = tl_fnv1a64_more(h, &res.token, sizeof(res.token));
                        h = tl_fnv1a64_more(h, &res.logprob, sizeof(res.logprob));
                        for (int k = 0; k < res.n_top; k++)
                            h = tl_fnv1a64_more(h, &res.top[k], sizeof(res.top[k]));
                    }
                }
                double dt = thread_cpu_s() - t0;
                if (dt < best) best = dt;
            }
            us[sp] = best * 1e6 / rows;
        }
        printf("%-44s %10.1f %10.1f %10.1f   %016llx\n", cf->name, us[0], us[1], us[2],
               (unsigned long long)h);
    }
    free(logits);
    tl_sampler_destroy(s);
    return 0;
}
