/*
 * Engine benchmark: continuous batching throughput on a real model.
 *
 * For each concurrency c (default 1, 4, 16, 32, 64) it runs c requests with distinct random
 * prompts of --prompt tokens (default 128) generating --gen tokens (default 64, ignore_eos,
 * temperature 0.8 / top-p 0.95 so the sampler does real work) and reports:
 *   - prefill tok/s: a separate run of the same shape with max_tokens 1 (prompt passes only);
 *   - aggregate generation tok/s: generated tokens / wall time of the whole run, and over the
 *     decode phase (the tokens made from the first step after every request has its first
 *     token, over that time: sequences admitted early may be done by then);
 *   - full-batch decode tok/s: c x steps / wall time of the steps that decoded all c sequences
 *     and nothing else (the batched-decode speed at c, free of ramp-in and ramp-out);
 *   - step overhead: the share of step time outside the forward pass (scheduling, batch
 *     building, sampling, detokenizing, events);
 *   - KV memory: peak blocks in use x block bytes vs the exact need c * (prompt + gen - 1)
 *     positions;
 *   - steady gen tok/s: an open-loop run that keeps c requests in flight (a finished one is
 *     replaced at once, as a server under constant load would see) for 4c requests, measured
 *     from the end of the first c requests to the last submission: the throughput at
 *     concurrency c without the closed batch's ramp-in and ramp-out, where one run's c
 *     requests start together and its last steps carry a shrinking batch.
 *   - full-batch decode against the DRAM bound: bytes such a step reads (every weight matrix
 *     once, plus each sequence's K/V over its context, the mean measured over those steps),
 *     the streaming-read rate measured right after the run (bench_kernels' probe, the bench's
 *     thread count), the decode tok/s those allow, and the share of it reached.
 * --prefill-cap N sets the engine's prefill tokens per step while sequences decode (its default
 * is small, for serving latency; with long prompts the first sequences then finish before the
 * last ones are in, and no step decodes all c: give the budget here to measure long contexts).
 * Each engine first runs one prefill-only request per sequence as long as a whole run
 * (warm_kv), so every KV block is touched before anything is timed: the pool is mapped lazily,
 * and a server pays those page faults once, not on every decode step.
 * Correctness first: request 0 of every run is greedy on a fixed prompt, and its tokens must
 * be the same at every concurrency (exit 1 otherwise).
 *
 * On a shared, noisy machine, --repeat N runs every concurrency N times (the levels
 * interleaved, so a burst of outside load hits one round rather than one level) and reports
 * the best round of each level, plus the spread of generation tok/s over the rounds.
 *
 * --profile replaces the runs above by, per concurrency c, a profile of the steps that decode
 * all c sequences at once
 * (after every prompt is in, before the first one finishes): the forward pass phase by phase
 * (tl_forward_profile: wall time and the engine thread's CPU time) and the rest of the step
 * (sampling, scheduling, detokenizing, events) as the step's process CPU time minus the
 * forward's. With --threads 1 the CPU columns are the whole work and are not inflated by
 * preemption, so they are the numbers to compare on a loaded machine.
 *
 * Usage: bench_engine [-m MODEL] [--threads N] [--conc 1,4,16] [--prompt N] [--gen N]
 *                     [--kv-type f16|f32|q8_0] [--budget N] [--repeat N] [--profile]
 *                     [--no-steady] [--prefill-cap N]
 */
#include <tokenloom.h>

#include "bench_common.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "core/hash.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// generated tokens kept per request (the prompt's length is the model's limit)
enum { MAX_GEN = 4096 };

struct req {
    int32_t tokens[MAX_GEN];
    int n;
    int64_t t_first_us;
    bool done;
};

static int64_t g_tokens; // TOKEN events of every request, for the steady run's window

static void on_event(void *user, const struct tl_event *ev)
{
    struct req *r = user;
    if (ev->type == TL_EVENT_TOKEN) {
        g_tokens++;
        if (!r->n) r->t_first_us = tl_time_us();
        if (r->n < MAX_GEN) r->tokens[r->n++] = ev->token;
    } else {
        r->done = true;
    }
}

static uint64_t prompt_rng = 0x9e3779b97f4a7c15ull;
static int32_t rnd_token(int32_t n_vocab)
{
    return 3 + (int32_t)(tl_xorshift64s(&prompt_rng) % (uint64_t)(n_vocab - 3));
}

// Bytes of weights one decode step of n_seq sequences reads: every matrix it multiplies (the
// token embedding only gives one row per token), in the file's bytes (a packed copy adds only
// padding rows). A mixture-of-experts layer reads its router and the experts its tokens chose:
// min(n_expert, n_seq * K) of them, exact for one sequence and an upper bound above (the
// routing decides).
static double weight_bytes(const tl_model *m, int n_seq)
{
    double b = (double)m->output.n_out * (double)m->output.row_bytes;
    for (int il = 0; il < m->hp.n_layer; il++) {
        struct tl_layer *L = &m->layers[il]; // read only
        int64_t n_w = L->n_expert > 0 ? 5 : tl_layer_n_weights(L);
        for (int64_t i = 0; i < n_w; i++) {
            const struct tl_weight *w = tl_layer_weight(L, i);
            b += (double)w->n_out * (double)w->row_bytes;
        }
        if (L->n_expert > 0) {
            int64_t read = (int64_t)n_seq * m->hp.n_expert_used;
            if (read > L->n_expert) read = L->n_expert;
            for (int64_t i = 5; i < 8; i++) { // expert 0's gate, up, down: every expert's size
                const struct tl_weight *w = tl_layer_weight(L, i);
                b += (double)read * (double)w->n_out * (double)w->row_bytes;
            }
        }
    }
    return b;
}

// The DRAM ceiling of the moment: streaming read GB/s of the bench's thread count (bench_kernels'
// probe), over `bytes` of the arena, measured right after each run.
static bool g_no_steady; // --no-steady: skip the open-loop run (long prompts: 4c more prefills)
static struct tl_pool *g_bw_pool;
static char *g_bw_arena;
static const size_t g_bw_bytes = (size_t)512 << 20;
static double probe_gbs(void)
{
    return g_bw_pool && g_bw_arena ? stream_read_gbs(g_bw_pool, g_bw_arena, g_bw_bytes) : 0;
}

struct result {
    double wall_s, decode_s, prefill_tok_s, gen_tok_s, decode_tok_s, overhead, kv_used_mib,
        kv_need_mib, steady_tok_s, dram_gbs;
    // full batch: the steps that decoded all c sequences and nothing else, their tokens / wall
    // time, and the mean context length they attended over
    double full_tok_s, full_ctx;
    int64_t steps, preemptions, full_steps;
};

// Submits request i: a random prompt, or (fixed) a fixed one for request 0, whose tokens every
// concurrency must reproduce (greedy); the others sample (temperature 0.8, top-p 0.95).
static int submit(tl_engine *e, const struct tl_model_info *info, int32_t *prompt, int n_prompt,
                  int max_tokens, int i, bool fixed, struct req *rq)
{
    for (int k = 0; k < n_prompt; k++)
        prompt[k] = i == 0 && fixed ? 3 + (k * 31) % (info->n_vocab - 3) : rnd_token(info->n_vocab);
    struct tl_request r;
    tl_request_default(&r);
    r.prompt_tokens = prompt;
    r.n_prompt_tokens = n_prompt;
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.sampling.temperature = i == 0 ? 0.0f : 0.8f;
    r.sampling.top_p = 0.95f;
    r.sampling.seed = (uint64_t)i;
    r.on_event = on_event;
    r.user = rq;
    uint64_t id;
    if (tl_engine_submit(e, &r, &id)) {
        fprintf(stderr, "bench_engine: submit: %s\n", tl_last_error());
        return -1;
    }
    return 0;
}

// The open-loop run: c requests in flight until 4c have been submitted. Returns generated
// tok/s over [first c done, last submission], or -1.
static double run_steady(tl_engine *e, const struct tl_model_info *info, int c, int n_prompt,
                         int n_gen, int32_t *prompt)
{
    const int total = 4 * c;
    struct req *rs = calloc((size_t)total, sizeof(*rs));
    if (!rs) return -1;
    int submitted = 0, done = 0;
    int64_t t_a = 0, tok_a = 0, t_b = 0, tok_b = 0, n = 1;
    for (; submitted < c; submitted++)
        if (submit(e, info, prompt, n_prompt, n_gen, submitted, false, &rs[submitted])) goto fail;
    while (n > 0) {
        if (tl_engine_step(e, &n)) {
            fprintf(stderr, "bench_engine: step: %s\n", tl_last_error());
            goto fail;
        }
        done = 0;
        for (int i = 0; i < submitted; i++)
            done += rs[i].done;
        if (!t_a && done >= c) t_a = tl_time_us(), tok_a = g_tokens;
        for (; submitted < total && submitted - done < c; submitted++)
            if (submit(e, info, prompt, n_prompt, n_gen, submitted, false, &rs[submitted]))
                goto fail;
        if (!t_b && submitted == total) t_b = tl_time_us(), tok_b = g_tokens;
        if (submitted > done) n = 1; // just submitted: the engine has work even if step said 0
    }
    free(rs);
    return t_b > t_a ? (double)(tok_b - tok_a) / ((double)(t_b - t_a) / 1e6) : 0;
fail:
    free(rs);
    return -1;
}

// Touches every KV block the runs will use: c prefill-only requests as long as a whole run's
// sequences (prompt + gen - 1 positions). The pool is mapped lazily, so without this the first
// run's decode steps also pay the page faults of fresh memory (on the 110M model at 64
// sequences: ~12% of a step's CPU time), which a server pays once in its first minutes.
static int warm_kv(tl_engine *e, const struct tl_model_info *info, int c, int n_prompt, int n_gen,
                   struct req *reqs)
{
    int n = n_prompt + n_gen - 1;
    int32_t *prompt = malloc((size_t)n * sizeof(int32_t));
    if (!prompt) return -1;
    memset(reqs, 0, (size_t)c * sizeof(*reqs));
    for (int i = 0; i < c; i++)
        if (submit(e, info, prompt, n, 1, i, false, &reqs[i])) {
            free(prompt);
            return -1;
        }
    for (int64_t left = 1; left > 0;)
        if (tl_engine_step(e, &left)) {
            fprintf(stderr, "bench_engine: step: %s\n", tl_last_error());
            free(prompt);
            return -1;
        }
    free(prompt);
    return 0;
}

static int64_t process_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// The --profile run: c requests; only steps that decode all c at once are counted.
static int run_profile(tl_model *m, const struct tl_engine_config *cfg, int c, int n_prompt,
                       int n_gen, struct req *reqs)
{
    struct tl_model_info mi;
    tl_model_get_info(m, &mi);
    tl_engine *e;
    if (tl_engine_create(m, cfg, &e)) {
        fprintf(stderr, "bench_engine: %s\n", tl_last_error());
        return -1;
    }
    if (warm_kv(e, &mi, c, n_prompt, n_gen, reqs)) return -1;
    int32_t *prompt = malloc((size_t)n_prompt * sizeof(int32_t));
    memset(reqs, 0, (size_t)c * sizeof(*reqs));
    for (int i = 0; i < c; i++)
        if (submit(e, &mi, prompt, n_prompt, n_gen, i, false, &reqs[i])) return -1;
    struct tl_forward_profile sum = {0}, p0, p1;
    int64_t steps = 0, step_wall = 0, step_cpu = 0, n = 1;
    tl_forward_profile_enable(true);
    while (n > 0) {
        tl_forward_profile_get(&p0);
        int64_t w0 = tl_time_us() * 1000, c0 = process_cpu_ns();
        if (tl_engine_step(e, &n)) {
            fprintf(stderr, "bench_engine: step: %s\n", tl_last_error());
            return -1;
        }
        int64_t w1 = tl_time_us() * 1000, c1 = process_cpu_ns();
        tl_forward_profile_get(&p1);
        if (p1.tokens - p0.tokens != c || p1.outputs - p0.outputs != c) continue;
        bool all_in = true; // a step whose batch is c tokens with c outputs, after every prompt
        for (int i = 0; i < c; i++)
            all_in = all_in && reqs[i].n >= 2 && !reqs[i].done;
        if (!all_in) continue;
        steps++;
        step_wall += w1 - w0;
        step_cpu += c1 - c0;
        for (int ph = 0; ph < TL_FWD_N_PHASES; ph++) {
            sum.wall_ns[ph] += p1.wall_ns[ph] - p0.wall_ns[ph];
            sum.cpu_ns[ph] += p1.cpu_ns[ph] - p0.cpu_ns[ph];
        }
    }
    tl_forward_profile_enable(false);
    free(prompt);
    tl_engine_destroy(e);
    if (!steps) {
        printf("profile at %d sequences: no step decoded all of them at once\n", c);
        return 0;
    }
    double fw = 0, fc = 0, d = (double)steps * 1e6;
    for (int ph = 0; ph < TL_FWD_N_PHASES; ph++)
        fw += (double)sum.wall_ns[ph], fc += (double)sum.cpu_ns[ph];
    double tw = (double)step_wall, tc = (double)step_cpu;
    printf("\nprofile of %lld steps decoding %d sequences at once (contexts %d..%d), ms per step\n",
           (long long)steps, c, n_prompt, n_prompt + n_gen);
    printf("%-34s %9s %7s %9s %7s\n", "phase", "wall ms", "wall %", "cpu ms", "cpu %");
    for (int ph = 0; ph < TL_FWD_N_PHASES; ph++)
        printf("%-34s %9.3f %6.1f%% %9.3f %6.1f%%\n", tl_forward_phase_name(ph),
               (double)sum.wall_ns[ph] / d, 100 * (double)sum.wall_ns[ph] / tw,
               (double)sum.cpu_ns[ph] / d, 100 * (double)sum.cpu_ns[ph] / tc);
    printf("%-34s %9.3f %6.1f%% %9.3f %6.1f%%\n", "forward pass", fw / d, 100 * fw / tw, fc / d,
           100 * fc / tc);
    printf("%-34s %9.3f %6.1f%% %9.3f %6.1f%%\n", "rest (sample, schedule, detok, events)",
           (tw - fw) / d, 100 * (tw - fw) / tw, (tc - fc) / d, 100 * (tc - fc) / tc);
    printf("%-34s %9.3f %6.1f%% %9.3f %6.1f%%\n", "step", tw / d, 100.0, tc / d, 100.0);
    printf("(cpu: the engine thread's in the forward phases, the process's for the step; decode "
           "at this rate: %.0f tok/s by wall, %.0f tok/s by cpu)\n",
           c * steps * 1e9 / tw, c * steps * 1e9 / tc);
    return 0;
}

static int run(tl_model *m, const struct tl_engine_config *cfg, int c, int n_prompt, int n_gen,
               struct req *reqs, struct result *res, double block_bytes, double pos_bytes)
{
    const struct tl_model_info *info = NULL;
    struct tl_model_info mi;
    tl_model_get_info(m, &mi);
    info = &mi;
    tl_engine *e;
    if (tl_engine_create(m, cfg, &e)) {
        fprintf(stderr, "bench_engine: %s\n", tl_last_error());
        return -1;
    }
    if (warm_kv(e, info, c, n_prompt, n_gen, reqs)) return -1;
    int32_t *prompt = malloc((size_t)n_prompt * sizeof(int32_t));
    int *n_before_buf = malloc((size_t)c * sizeof(int)); // each request's tokens before a step
    if (!prompt || !n_before_buf) return -1;
    // Phase A: prefill only.
    for (int pass = 0; pass < 2; pass++) {
        memset(reqs, 0, (size_t)c * sizeof(*reqs));
        int64_t t0 = tl_time_us();
        for (int i = 0; i < c; i++)
            if (submit(e, info, prompt, n_prompt, pass ? n_gen : 1, i, pass == 1, &reqs[i]))
                return -1;
        struct tl_engine_stats s0, s1;
        tl_engine_get_stats(e, &s0);
        int64_t n = 1, peak_used = 0, full_us = 0, full_steps = 0, tok_at_first = -1;
        int *n_before = n_before_buf;
        double full_ctx = 0;
        int64_t t_all_first = 0;
        while (n > 0) {
            // a full-batch decode step: every sequence had its first token and was not done
            // before it, and got exactly one token from it
            bool all_decoding = true;
            for (int i = 0; i < c; i++) {
                all_decoding = all_decoding && reqs[i].n >= 1 && !reqs[i].done;
                n_before[i] = reqs[i].n;
            }
            int64_t ts0 = tl_time_us(), g0 = g_tokens;
            if (tl_engine_step(e, &n)) {
                fprintf(stderr, "bench_engine: step: %s\n", tl_last_error());
                return -1;
            }
            int64_t ts1 = tl_time_us();
            if (pass == 1 && all_decoding) {
                if (tok_at_first < 0) tok_at_first = g0, t_all_first = ts0;
                bool one_each = true;
                for (int i = 0; i < c && one_each; i++)
                    one_each = reqs[i].n == n_before[i] + 1;
                if (one_each) {
                    full_us += ts1 - ts0, full_steps++;
                    // the step attends over prompt + tokens so far, per sequence
                    for (int i = 0; i < c; i++)
                        full_ctx += (double)(n_prompt + n_before[i]) / c;
                }
            }
            tl_engine_get_stats(e, &s1);
            if (s1.kv_blocks_used > peak_used) peak_used = s1.kv_blocks_used;
        }
        int64_t t1 = tl_time_us();
        tl_engine_get_stats(e, &s1);
        double wall = (double)(t1 - t0) / 1e6;
        if (pass == 0) {
            res->prefill_tok_s = (double)c * n_prompt / wall;
            continue;
        }
        // decode: the tokens made from the step after the last first token to the end, over
        // that time (the sequences admitted first may have finished by then: counting c x
        // (gen - 1) tokens there, as this bench once did, overstated it when admission is slow)
        res->wall_s = wall;
        res->decode_s = tok_at_first >= 0 ? (double)(t1 - t_all_first) / 1e6 : 0;
        res->gen_tok_s = (double)c * n_gen / wall;
        res->decode_tok_s =
            res->decode_s > 0 ? (double)(g_tokens - tok_at_first) / res->decode_s : 0;
        res->full_steps = full_steps;
        res->full_tok_s = full_us > 0 ? (double)c * full_steps * 1e6 / (double)full_us : 0;
        res->full_ctx = full_steps ? full_ctx / (double)full_steps : 0;
        int64_t step_us = s1.step_us_total - s0.step_us_total,
                fwd_us = s1.forward_us_total - s0.forward_us_total;
        res->overhead = step_us > 0 ? (double)(step_us - fwd_us) / (double)step_us : 0;
        res->steps = s1.steps_total - s0.steps_total;
        res->preemptions = s1.preemptions_total - s0.preemptions_total;
        res->kv_used_mib = (double)peak_used * block_bytes / (1024.0 * 1024.0);
        res->kv_need_mib = (double)c * (n_prompt + n_gen - 1) * pos_bytes / (1024.0 * 1024.0);
    }
    res->dram_gbs = probe_gbs();
    res->steady_tok_s = g_no_steady ? 0 : run_steady(e, info, c, n_prompt, n_gen, prompt);
    free(n_before_buf);
    free(prompt);
    tl_engine_destroy(e);
    return res->steady_tok_s < 0 ? -1 : 0;
}

int main(int argc, char **argv)
{
    const char *model_path = getenv("MODEL");
    int threads = 0, n_prompt = 128, n_gen = 64, budget = 512, repeat = 1, prefill_cap = 0;
    bool profile = false;
    int conc[16] = {1, 4, 16, 32, 64}, n_conc = 5;
    enum tl_kv_type kv_type = TL_KV_F16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-m") && v)
            model_path = v, i++;
        else if (!strcmp(a, "--threads") && v)
            threads = atoi(v), i++;
        else if (!strcmp(a, "--prompt") && v)
            n_prompt = atoi(v), i++;
        else if (!strcmp(a, "--gen") && v)
            n_gen = atoi(v), i++;
        else if (!strcmp(a, "--budget") && v)
            budget = atoi(v), i++;
        else if (!strcmp(a, "--repeat") && v)
            repeat = atoi(v), i++;
        else if (!strcmp(a, "--profile"))
            profile = true;
        else if (!strcmp(a, "--no-steady"))
            g_no_steady = true;
        else if (!strcmp(a, "--prefill-cap") && v)
            prefill_cap = atoi(v), i++;
        else if (!strcmp(a, "--kv-type") && v) {
            kv_type = !strcmp(v, "f32") ? TL_KV_F32 : !strcmp(v, "q8_0") ? TL_KV_Q8_0 : TL_KV_F16;
            i++;
        } else if (!strcmp(a, "--conc") && v) {
            n_conc = 0;
            for (char *s = argv[++i]; *s && n_conc < 16;) {
                conc[n_conc++] = (int)strtol(s, &s, 10);
                if (*s == ',') s++;
            }
        } else {
            fprintf(stderr,
                    "usage: bench_engine [-m MODEL] [--threads N] [--conc 1,4,16] "
                    "[--prompt N] [--gen N] [--kv-type f16|f32|q8_0] [--budget N] [--repeat N] "
                    "[--profile] [--no-steady] [--prefill-cap N]\n");
            return 2;
        }
    }
    if (!model_path || n_prompt < 1 || n_gen < 2 || n_gen > MAX_GEN || repeat < 1) {
        fprintf(stderr,
                "bench_engine: give -m MODEL (or $MODEL); prompt >= 1, 2 <= gen <= %d, "
                "repeat >= 1\n",
                MAX_GEN);
        return 2;
    }
    tl_model *m;
    if (tl_model_load(model_path, NULL, &m)) {
        fprintf(stderr, "bench_engine: %s\n", tl_last_error());
        return 1;
    }
    if (m->bert) { // an encoder: no decode steps to measure (and no decoder layers)
        fprintf(stderr, "bench_engine: %s is an embedding model (encoder); nothing to decode\n",
                model_path);
        tl_model_destroy(m);
        return 1;
    }
    struct tl_model_info mi;
    tl_model_get_info(m, &mi);
    int max_c = 1;
    for (int i = 0; i < n_conc; i++)
        max_c = conc[i] > max_c ? conc[i] : max_c;
    struct tl_engine_config cfg;
    tl_engine_config_default(&cfg);
    cfg.n_threads = threads;
    cfg.kv_type = kv_type;
    cfg.max_batch_size = max_c;
    cfg.max_tokens_per_step = budget;
    cfg.max_prefill_tokens_decoding = prefill_cap; // 0: the engine's default
    cfg.max_seq_len = n_prompt + n_gen;
    cfg.prefix_caching = false; // distinct prompts anyway; measure the plain path
    int64_t per_seq = (n_prompt + n_gen + cfg.kv_block_size - 1) / cfg.kv_block_size;
    cfg.kv_blocks = per_seq * max_c;
    // bytes per value: f32 4, f16 2, q8_0 34 per 32 (int8 + one f16 scale per block)
    double pos_bytes = (double)mi.n_layer * 2 * mi.n_head_kv * mi.head_dim *
                       (kv_type == TL_KV_F32    ? 4
                        : kv_type == TL_KV_Q8_0 ? 34.0 / 32
                                                : 2);
    double block_bytes = pos_bytes * cfg.kv_block_size;
    printf("model %s: %s, %.1fM params, %d layers, dim %d; prompt %d, gen %d, budget %d, "
           "threads %d, kv %s, best of %d\n",
           mi.name, mi.weight_type, (double)mi.n_params / 1e6, mi.n_layer, mi.n_embd, n_prompt,
           n_gen, budget, threads,
           kv_type == TL_KV_F32    ? "f32"
           : kv_type == TL_KV_Q8_0 ? "q8_0"
                                   : "f16",
           repeat);
    struct req *reqs = calloc((size_t)max_c, sizeof(*reqs));
    struct result *best = calloc((size_t)n_conc, sizeof(*best));
    double *gen_lo = calloc((size_t)n_conc, sizeof(*gen_lo));
    struct result *full_best = calloc((size_t)n_conc, sizeof(*full_best)); // by full t/s
    if (!profile) { // the bandwidth probe's threads and memory (touched once here)
        g_bw_pool = tl_pool_create(threads > 0 ? threads : 2);
        g_bw_arena = tl_aligned_alloc(g_bw_bytes);
        if (g_bw_arena) memset(g_bw_arena, 1, g_bw_bytes);
    }
    int32_t ref[4096];
    int n_ref = -1, bad = 0;
    for (int k = 0; profile && k < n_conc; k++)
        if (run_profile(m, &cfg, conc[k], n_prompt, n_gen, reqs)) return 1;
    for (int round = 0; !profile && round < repeat; round++)
        for (int k = 0; k < n_conc; k++) {
            struct result res = {0};
            if (run(m, &cfg, conc[k], n_prompt, n_gen, reqs, &res, block_bytes, pos_bytes))
                return 1;
            if (n_ref < 0) {
                n_ref = reqs[0].n;
                memcpy(ref, reqs[0].tokens, (size_t)n_ref * sizeof(int32_t));
            } else if (reqs[0].n != n_ref ||
                       memcmp(ref, reqs[0].tokens, (size_t)n_ref * sizeof(int32_t))) {
                fprintf(stderr, "bench_engine: request 0 differs at concurrency %d\n", conc[k]);
                bad = 1;
            }
            fprintf(stderr,
                    "round %d, %d sequences: gen %.1f tok/s, decode %.1f tok/s, steady %.1f\n",
                    round + 1, conc[k], res.gen_tok_s, res.decode_tok_s, res.steady_tok_s);
            if (!round || res.gen_tok_s < gen_lo[k]) gen_lo[k] = res.gen_tok_s;
            if (res.full_tok_s > full_best[k].full_tok_s) full_best[k] = res;
            // prefill and steady are runs of their own: keep the best of each independently
            double prefill = best[k].prefill_tok_s > res.prefill_tok_s ? best[k].prefill_tok_s
                                                                       : res.prefill_tok_s;
            double steady =
                best[k].steady_tok_s > res.steady_tok_s ? best[k].steady_tok_s : res.steady_tok_s;
            if (res.gen_tok_s > best[k].gen_tok_s) best[k] = res;
            best[k].prefill_tok_s = prefill;
            best[k].steady_tok_s = steady;
        }
    if (profile) n_conc = 0; // no table
    if (!profile)
        printf("%5s %12s %12s %12s %12s %8s %9s %7s %12s %12s %14s %11s\n", "conc", "prefill t/s",
               "gen t/s", "decode t/s", "full t/s", "steps", "overhead", "preempt", "KV used MiB",
               "KV need MiB", "gen t/s worst", "steady t/s");
    for (int k = 0; k < n_conc; k++) {
        const struct result *r = &best[k];
        printf("%5d %12.1f %12.1f %12.1f %12.1f %8lld %8.2f%% %7lld %12.1f %12.1f %14.1f %11.1f\n",
               conc[k], r->prefill_tok_s, r->gen_tok_s, r->decode_tok_s, full_best[k].full_tok_s,
               (long long)r->steps, 100 * r->overhead, (long long)r->preemptions, r->kv_used_mib,
               r->kv_need_mib, gen_lo[k], r->steady_tok_s);
    }
    // The DRAM bound of a full-batch decode step: it reads every weight once and every
    // sequence's K/V over its context (the mean measured over those steps), at the streaming
    // read rate measured right after the round with the best full-batch rate.
    if (n_conc)
        printf("\nfull-batch decode against the DRAM bound (weights %.1f MB per step at one "
               "sequence; stream read measured after the best round)\n%5s %10s %8s %14s %14s "
               "%10s %12s %12s %9s\n",
               weight_bytes(m, 1) / 1e6, "conc", "full steps", "ctx", "KV MB/step", "bytes MB/step",
               "DRAM GB/s", "bound t/s", "full t/s", "of bound");
    for (int k = 0; k < n_conc; k++) {
        const struct result *r = &full_best[k];
        if (!r->full_steps) {
            printf("%5d  no step decoded all %d sequences at once (try --prefill-cap %d or a "
                   "longer --gen)\n",
                   conc[k], conc[k], budget);
            continue;
        }
        double kvb = (double)conc[k] * r->full_ctx * pos_bytes, wb = weight_bytes(m, conc[k]);
        double bound = r->dram_gbs * 1e9 / (wb + kvb) * conc[k];
        printf("%5d %10lld %8.0f %14.1f %14.1f %10.1f %12.1f %12.1f %8.1f%%\n", conc[k],
               (long long)r->full_steps, r->full_ctx, kvb / 1e6, (wb + kvb) / 1e6, r->dram_gbs,
               bound, r->full_tok_s, bound > 0 ? 100 * r->full_tok_s / bound : 0);
    }
    free(full_best);
    tl_pool_destroy(g_bw_pool);
    tl_aligned_free(g_bw_arena);
    free(best);
    free(gen_lo);
    free(reqs);
    tl_model_destroy(m);
    return bad;
}
