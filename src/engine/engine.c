/*
 * The engine: public API (tokenloom.h, section "engine"), creation, the step loop and
 * statistics; submission, cancellation and waiting (any thread) are in engine_submit.c. A
 * sequence's lifecycle (creation, accepting tokens, text and events, finishing) lives in seq.c,
 * prompt log-probabilities in prompt_logprobs.c, scheduling policy in sched.c, the KV pool in
 * kvcache.c, sampling in sampler.c, stop strings in stop.c; the model is reached only through a
 * struct tl_engine_backend (backend_model.c for real models, fakes in tests).
 *
 * One step: drain the inbox into the waiting queue; end cancelled and expired requests; plan
 * the batch (sched.c); run the forward pass once; advance every scheduled sequence, offer its
 * newly full blocks to the prefix cache, and sample where a token is due; deliver TOKEN events
 * (new whole UTF-8 text, stop-string candidates held back) and DONE events; update the stats.
 * Requests with prompt_logprobs also get the logits of their prompt positions (rows bounded
 * per step, see TL_ENGINE_PLP_LOGITS_BYTES) and one PROMPT_TOKEN event per prompt token,
 * before their first TOKEN event and exactly once even across preemption (prompt_logprobs.c).
 *
 * Determinism: a request's tokens depend only on its prompt, parameters and seed. The forward
 * pass gives bit-identical logits per token whatever else is in the batch (model.h contract);
 * sampling uses only the request's logits, history and RNG; a preempted request recomputes
 * the same K/V and keeps its RNG state.
 *
 * Threads: tl_engine_submit / _cancel / _wait / _wake / _get_stats may be called from any
 * thread and touch only the fields under `mu` (inbox, live map, counters, stats snapshot).
 * Everything else, and every event callback, runs on the thread calling tl_engine_step.
 * Callbacks are invoked without holding `mu`, so they may call tl_engine_cancel.
 *
 * Ownership: the engine owns its backend context, KV cache, sampler and every sequence from
 * submission until its DONE event returns (or until destroy, which drops pending requests
 * silently). Request fields are copied at submission; the caller's request may be freed then.
 */
#include "engine/engine_impl.h"

#include "gpu/backend.h"
#include "grammar/grammar.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

// ---- small public helpers -------------------------------------------------------------------

void tl_engine_config_default(struct tl_engine_config *c)
{
    memset(c, 0, sizeof(*c));
    c->max_batch_size = 64;
    c->max_tokens_per_step = 512;
    c->max_prefill_tokens_decoding = 160;
    c->prefill_backlog_tokens = -1;
    c->prefill_tokens_per_decode = 7;
    c->max_seq_len = 0;
    c->kv_block_size = 16;
    c->kv_type = TL_KV_F16;
    c->prefix_caching = true;
}

void tl_sampling_default(struct tl_sampling *s)
{
    memset(s, 0, sizeof(*s));
    s->temperature = 1.0f;
    s->top_p = 1.0f;
    s->repetition_penalty = 1.0f;
}

void tl_request_default(struct tl_request *r)
{
    memset(r, 0, sizeof(*r));
    tl_sampling_default(&r->sampling);
    r->max_tokens = 16;
    r->add_special = true;
}

const char *tl_finish_reason_str(enum tl_finish_reason r)
{
    switch (r) {
    case TL_FINISH_NONE:
        return "none";
    case TL_FINISH_STOP:
        return "stop";
    case TL_FINISH_LENGTH:
        return "length";
    case TL_FINISH_CANCELLED:
        return "cancelled";
    case TL_FINISH_DEADLINE:
        return "deadline";
    case TL_FINISH_ERROR:
        return "error";
    }
    return "unknown";
}

// ---- creation and destruction ---------------------------------------------------------------

static int64_t physical_ram_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return 0;
    return (int64_t)pages * page;
}

// Fills the zeros of the configuration and checks the rest.
static tl_status resolve_config(const struct tl_engine_backend *be, struct tl_engine_config *c)
{
    struct tl_engine_config d;
    tl_engine_config_default(&d);
    if (c->max_batch_size == 0) c->max_batch_size = d.max_batch_size;
    if (c->max_tokens_per_step == 0) c->max_tokens_per_step = d.max_tokens_per_step;
    if (c->max_prefill_tokens_decoding == 0)
        c->max_prefill_tokens_decoding = d.max_prefill_tokens_decoding;
    if (c->prefill_backlog_tokens == 0) c->prefill_backlog_tokens = d.prefill_backlog_tokens;
    if (c->prefill_tokens_per_decode == 0)
        c->prefill_tokens_per_decode = d.prefill_tokens_per_decode;
    if (c->kv_block_size == 0) c->kv_block_size = d.kv_block_size;
    if (c->max_seq_len == 0) c->max_seq_len = be->n_ctx;
    if (c->max_batch_size < 1 || c->max_batch_size > (1 << 16))
        return tl__errorf(TL_ERR_INVALID_ARG, "max_batch_size %d is not in [1, 65536]",
                          c->max_batch_size);
    if (c->max_tokens_per_step < 1 || c->max_tokens_per_step > (1 << 20))
        return tl__errorf(TL_ERR_INVALID_ARG, "max_tokens_per_step %d is not in [1, 1048576]",
                          c->max_tokens_per_step);
    if (c->max_prefill_tokens_decoding < 1)
        return tl__errorf(TL_ERR_INVALID_ARG, "max_prefill_tokens_decoding %d is not positive",
                          c->max_prefill_tokens_decoding);
    if (c->prefill_backlog_tokens < -1)
        return tl__errorf(TL_ERR_INVALID_ARG,
                          "prefill_backlog_tokens %d is not -1 (never) or positive",
                          c->prefill_backlog_tokens);
    if (c->prefill_tokens_per_decode < -1 || c->prefill_tokens_per_decode > (1 << 20))
        return tl__errorf(TL_ERR_INVALID_ARG,
                          "prefill_tokens_per_decode %d is not -1 (off) or in [1, 1048576]",
                          c->prefill_tokens_per_decode);
    if (c->kv_block_size < 1 || c->kv_block_size > 4096)
        return tl__errorf(TL_ERR_INVALID_ARG, "kv_block_size %d is not in [1, 4096]",
                          c->kv_block_size);
    if (c->max_seq_len < 2)
        return tl__errorf(TL_ERR_INVALID_ARG, "max_seq_len %d is too small (at least 2)",
                          c->max_seq_len);
    if (c->kv_type != TL_KV_F16 && c->kv_type != TL_KV_F32 && c->kv_type != TL_KV_Q8_0)
        return tl__errorf(TL_ERR_INVALID_ARG, "kv_type %d is not f16, f32 or q8_0",
                          (int)c->kv_type);
    // Q8_0 blocks of 32 must not straddle two heads (kernels.h)
    if (c->kv_type == TL_KV_Q8_0 && be->n_layer > 0 && be->head_dim % 32 != 0)
        return tl__errorf(TL_ERR_INVALID_ARG,
                          "kv_type q8_0 needs head_dim a multiple of 32; the model's head_dim "
                          "is %d (use --kv-type f16)",
                          be->head_dim);
    if (c->kv_blocks < 0 || c->kv_bytes < 0 || c->n_threads < 0 || c->max_waiting < 0)
        return tl__errorf(TL_ERR_INVALID_ARG, "kv_blocks, kv_bytes, n_threads and max_waiting "
                                              "must not be negative");
    if (be->n_ctx > 0 && c->max_seq_len > be->n_ctx)
        TL_LOGW("max_seq_len %d exceeds the model's training context %d", c->max_seq_len,
                be->n_ctx);
    if (c->max_tokens_per_step < c->max_batch_size)
        TL_LOGW("max_tokens_per_step %d < max_batch_size %d: not every running sequence can "
                "decode in each step",
                c->max_tokens_per_step, c->max_batch_size);
    return TL_OK;
}

static tl_status size_pool(const struct tl_engine_backend *be, struct tl_engine_config *c,
                           size_t block_bytes)
{
    int64_t per_seq = ((int64_t)c->max_seq_len + c->kv_block_size - 1) / c->kv_block_size;
    if (c->kv_blocks > 0) {
        // as given
    } else if (c->kv_bytes > 0) {
        c->kv_blocks = block_bytes ? c->kv_bytes / (int64_t)block_bytes : c->kv_bytes;
        if (c->kv_blocks < 1)
            return tl__errorf(TL_ERR_INVALID_ARG,
                              "kv_bytes %lld is smaller than one KV block (%zu bytes)",
                              (long long)c->kv_bytes, block_bytes);
    } else {
        int64_t want = per_seq * c->max_batch_size, ram = physical_ram_bytes();
        int64_t cap = block_bytes && ram > 0 ? ram / 4 / (int64_t)block_bytes : want;
        c->kv_blocks = want < cap ? want : cap;
        if (c->kv_blocks < 1) c->kv_blocks = 1;
        TL_LOGI("kv cache: %lld blocks of %d positions (%.1f MiB%s) for %d sequences of %d "
                "tokens",
                (long long)c->kv_blocks, c->kv_block_size,
                (double)c->kv_blocks * (double)block_bytes / (1024.0 * 1024.0),
                want > cap ? ", capped at 1/4 of RAM" : "", c->max_batch_size, c->max_seq_len);
    }
    if (c->kv_blocks > INT32_MAX - 1)
        return tl__errorf(TL_ERR_INVALID_ARG, "kv pool of %lld blocks is too large",
                          (long long)c->kv_blocks);
    c->kv_bytes = (int64_t)block_bytes * c->kv_blocks;
    (void)be;
    return TL_OK;
}

tl_status tl__engine_create_with(const struct tl_engine_backend *be,
                                 const struct tl_engine_config *config, tl_engine **out)
{
    *out = NULL;
    tl_status rc;
    tl_engine *e = tl_malloc(sizeof(*e));
    if (!e) {
        if (be->destroy) be->destroy(be->ctx);
        return tl__errorf(TL_ERR_NOMEM, "engine: out of memory");
    }
    memset(e, 0, sizeof(*e));
    tl_hmap_init(&e->live);
    e->be = *be;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->next_id = 1;
    if (config)
        e->cfg = *config;
    else
        tl_engine_config_default(&e->cfg);
    struct tl_engine_config *c = &e->cfg;
    if ((rc = resolve_config(be, c))) goto out_destroy;
    e->block_size = c->kv_block_size;

    struct tl_kv_cache_config kc = {
        .block_size = c->kv_block_size,
        .n_layer = be->n_layer,
        .n_kv_head = be->n_kv_head,
        .head_dim = be->head_dim,
        .type = c->kv_type == TL_KV_F32    ? TL_DTYPE_F32
                : c->kv_type == TL_KV_Q8_0 ? TL_DTYPE_Q8_0
                                           : TL_DTYPE_F16,
    };
    size_t block_bytes = be->kv_block_bytes ? be->kv_block_bytes(be->ctx, kc.block_size, kc.type)
                                            : tl_kv_cache_block_bytes(&kc);
    if ((rc = size_pool(be, c, block_bytes))) goto out_destroy;
    kc.n_blocks = c->kv_blocks;
    e->kv = tl_kv_cache_create(&kc);
    if (!e->kv) {
        rc = tl__error_prefix(TL_ERR_NOMEM, "engine");
        goto out_destroy;
    }
    if (be->kv_alloc && (rc = be->kv_alloc(be->ctx, c->kv_blocks, kc.block_size, kc.type)))
        goto out_destroy;
    size_t nt = (size_t)c->max_tokens_per_step, ns = (size_t)c->max_batch_size;
    e->max_out =
        c->max_batch_size < c->max_tokens_per_step ? c->max_batch_size : c->max_tokens_per_step;
    e->b_token = tl_malloc_array(nt, sizeof(int32_t));
    e->b_pos = tl_malloc_array(nt, sizeof(int32_t));
    e->b_seq = tl_malloc_array(nt, sizeof(int32_t));
    e->b_out = tl_malloc_array(nt, sizeof(int32_t));
    e->b_tables = tl_malloc_array(ns, sizeof(*e->b_tables));
    e->b_seqs = tl_malloc_array(ns, sizeof(*e->b_seqs));
    e->running = tl_malloc_array(ns, sizeof(*e->running));
    size_t n_logits;
    rc = tl__plp_step_init(&e->plp, be->n_vocab, c->max_tokens_per_step);
    if (rc) goto out_destroy;
    e->logits = tl_mul_size((size_t)(e->max_out + e->plp.max_rows), (size_t)be->n_vocab, &n_logits)
                    ? tl_malloc_array(n_logits, sizeof(float))
                    : NULL;
    if (!e->b_token || !e->b_pos || !e->b_seq || !e->b_out || !e->b_tables || !e->b_seqs ||
        !e->running || !e->logits) {
        rc = tl__errorf(TL_ERR_NOMEM, "engine: out of memory for step buffers");
        goto out_destroy;
    }
    if (be->prepare &&
        (rc = be->prepare(be->ctx, c->max_tokens_per_step, c->max_seq_len, c->n_threads)))
        goto out_destroy;
    // One sampler scratch per compute thread: sampling of a step fans out over the pool.
    e->pool = be->pool ? be->pool(be->ctx) : NULL;
    e->n_samplers = tl_pool_size(e->pool);
    e->samplers = tl_calloc_array((size_t)e->n_samplers, sizeof(*e->samplers));
    e->to_sample = tl_malloc_array(ns, sizeof(*e->to_sample));
    e->sample_res = tl_malloc_array(ns, sizeof(*e->sample_res));
    if (!e->samplers || !e->to_sample || !e->sample_res) {
        rc = tl__errorf(TL_ERR_NOMEM, "engine: out of memory for samplers");
        goto out_destroy;
    }
    for (int i = 0; i < e->n_samplers; i++) {
        e->samplers[i] = tl_sampler_create(be->n_vocab);
        if (!e->samplers[i]) {
            rc = TL_ERR_NOMEM;
            goto out_destroy;
        }
    }
    e->stats.kv_block_size = c->kv_block_size;
    static const int64_t le[TL_STEP_HIST_BUCKETS] = {1,  2,   4,   8,   16,   32,
                                                     64, 128, 256, 512, 1024, INT64_MAX};
    memcpy(e->stats.step_hist_le, le, sizeof(le));
    e->stats.kv_blocks_total = c->kv_blocks;
    e->stats.kv_blocks_free = c->kv_blocks;
    if (be->device_stats) be->device_stats(be->ctx, &e->stats);
    e->snapshot = e->stats;
    *out = e;
    return TL_OK;

out_destroy:
    tl_engine_destroy(e);
    return rc;
}

void tl_engine_destroy(tl_engine *e)
{
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->shutting_down = true;
    pthread_mutex_unlock(&e->mu);
    for (size_t i = 0; i < e->n_inbox; i++)
        tl__seq_destroy(e->inbox[i]);
    for (size_t i = 0; i < e->n_waiting; i++)
        tl__seq_destroy(e->waiting[i]);
    for (int64_t i = 0; i < e->n_running; i++)
        tl__seq_destroy(e->running[i]);
    free(e->inbox);
    free(e->waiting);
    free(e->running);
    tl_hmap_free(&e->live);
    free(e->b_token);
    free(e->b_pos);
    free(e->b_seq);
    free(e->b_out);
    free(e->b_tables);
    free(e->b_seqs);
    free(e->logits);
    tl__plp_step_free(&e->plp);
    for (int i = 0; e->samplers && i < e->n_samplers; i++)
        tl_sampler_destroy(e->samplers[i]);
    free(e->samplers);
    free(e->to_sample);
    free(e->sample_res);
    tl_gvocab_destroy(e->gvocab);
    free(e->gmasks);
    tl_kv_cache_destroy(e->kv);
    if (e->be.destroy) e->be.destroy(e->be.ctx);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

tl_status tl_engine_create(const tl_model *m, const struct tl_engine_config *c, tl_engine **out)
{
    *out = NULL;
    if (!m) return tl__errorf(TL_ERR_INVALID_ARG, "engine: no model");
    struct tl_engine_backend be;
    tl_status rc = c && c->device && strcmp(c->device, "cpu") != 0
                       ? tl_gpu_engine_backend(m, c->device, &be)
                       : tl__engine_backend_model(m, &be);
    if (rc) return rc;
    return tl__engine_create_with(&be, c, out);
}

struct tl_kv_cache *tl__engine_kv(tl_engine *e)
{
    return e->kv;
}

tl_status tl__engine_check(const tl_engine *e)
{
    int64_t n = tl_kv_cache_n_blocks(e->kv);
    int32_t *refs = tl_calloc_array((size_t)n, sizeof(int32_t));
    if (!refs) return tl__errorf(TL_ERR_NOMEM, "check: out of memory");
    tl_status rc = TL_OK;
    for (int64_t i = 0; i < e->n_running && !rc; i++) {
        const struct tl_seq *s = e->running[i];
        for (int32_t j = 0; j < s->n_blocks; j++)
            refs[s->block_table[j]]++;
        if (s->n_blocks != (s->n_computed + e->block_size - 1) / e->block_size) {
            tl__errorf(TL_ERR_STATE, "check: request %llu holds %d blocks for %lld positions",
                       (unsigned long long)s->id, s->n_blocks, (long long)s->n_computed);
            rc = TL_ERR_STATE;
        }
        // Every computed prompt position's logits were used: the events up to the next
        // position's token went out (nothing computed is ever owed).
        int64_t due = s->n_computed + 1 < s->n_prompt ? s->n_computed + 1 : s->n_prompt;
        if (!rc && s->plp.wanted && s->n_computed > 0 && s->plp.n_done < due) {
            tl__errorf(TL_ERR_STATE,
                       "check: request %llu computed %lld positions but delivered %lld prompt "
                       "logprobs",
                       (unsigned long long)s->id, (long long)s->n_computed,
                       (long long)s->plp.n_done);
            rc = TL_ERR_STATE;
        }
    }
    for (size_t i = 0; i < e->n_waiting && !rc; i++)
        if (e->waiting[i]->n_blocks) {
            tl__errorf(TL_ERR_STATE, "check: waiting request %llu holds blocks",
                       (unsigned long long)e->waiting[i]->id);
            rc = TL_ERR_STATE;
        }
    if (!rc) rc = tl_kv_cache_check(e->kv, refs);
    free(refs);
    return rc;
}

// ---- the step -------------------------------------------------------------------------------

static void drain_inbox(tl_engine *e)
{
    pthread_mutex_lock(&e->mu);
    // Room in the waiting array for every sequence held, so that a preempted one always fits.
    // If it cannot grow, the inbox waits for a later step (submitters see no failure).
    size_t need = e->n_waiting + (size_t)e->n_running + e->n_inbox;
    if (tl_grow((void **)&e->waiting, &e->cap_waiting, need, sizeof(*e->waiting))) {
        for (size_t i = 0; i < e->n_inbox; i++)
            tl__sched_enqueue(e, e->inbox[i]);
        e->n_inbox = 0;
    }
    pthread_mutex_unlock(&e->mu);
}

// Ends cancelled and expired requests.
static void reap(tl_engine *e, int64_t now)
{
    for (int pass = 0; pass < 2; pass++) {
        size_t n = pass ? (size_t)e->n_running : e->n_waiting;
        for (size_t i = n; i-- > 0;) {
            struct tl_seq *s = pass ? e->running[i] : e->waiting[i];
            if (atomic_load(&s->cancel))
                tl__seq_finish(e, s, TL_FINISH_CANCELLED, NULL);
            else if (s->deadline_us && now >= s->deadline_us)
                tl__seq_finish(e, s, TL_FINISH_DEADLINE, NULL);
        }
    }
}

static void publish_stats(tl_engine *e)
{
    struct tl_kv_counts kc;
    tl_kv_cache_counts(e->kv, &kc);
    e->stats.n_running = e->n_running;
    e->stats.kv_blocks_total = tl_kv_cache_n_blocks(e->kv);
    e->stats.kv_blocks_free = kc.n_free;
    e->stats.kv_blocks_used = kc.n_used;
    e->stats.kv_blocks_cached = kc.n_cached;
    if (e->be.device_stats) e->be.device_stats(e->be.ctx, &e->stats);
    pthread_mutex_lock(&e->mu);
    e->n_unadmitted = (int64_t)(e->n_waiting + e->n_inbox);
    e->stats.n_waiting = e->n_unadmitted;
    e->snapshot = e->stats;
    pthread_mutex_unlock(&e->mu);
}

// Samples every sequence due a token, spread over the compute threads (each sequence's result
// depends only on its own logits, history and RNG, so which thread samples it does not matter).
// Prompt-logprob rows come after them in the same fan-out (same code as a sampled token's
// logprobs: tl_sampler_logprobs).
static void sample_worker(void *arg, int ith, int nth)
{
    tl_engine *e = arg;
    const int64_t nv = e->be.n_vocab;
    for (int64_t i = ith; i < e->n_to_sample + e->plp.n; i += nth) {
        if (i < e->n_to_sample) {
            struct tl_seq *s = e->to_sample[i];
            if (s->gm)
                tl__constrain_sample(e, ith, s, e->logits + s->out_row * nv, &e->sample_res[i]);
            else
                tl_sampler_sample(e->samplers[ith], e->logits + s->out_row * nv, &s->sampling,
                                  s->tokens, s->n_prompt, s->n_tokens, &s->rng, &e->sample_res[i]);
        } else {
            int64_t k = i - e->n_to_sample;
            const struct tl_plp_item *it = &e->plp.items[k];
            tl_sampler_logprobs(e->samplers[ith], e->logits + it->row * nv,
                                it->s->tokens[it->pos + 1], it->s->sampling.n_logprobs,
                                &e->plp.res[k]);
        }
    }
}

static void sample_all(tl_engine *e)
{
    tl__constrain_prepare(e);
    if (e->n_to_sample + e->plp.n > 1)
        tl_pool_run(e->pool, sample_worker, e);
    else if (e->n_to_sample + e->plp.n == 1)
        sample_worker(e, 0, 1);
}

tl_status tl_engine_step(tl_engine *e, int64_t *n_pending)
{
    if (!e) return tl__errorf(TL_ERR_INVALID_ARG, "engine is NULL");
    int64_t t0 = tl_time_us();
    drain_inbox(e);
    reap(e, t0);

    tl__sched_plan(e);
    const struct tl_batch *b = &e->batch;
    if (b->n_tok > 0) {
        int64_t tf = tl_time_us();
        tl_status rc = e->be.forward(e->be.ctx, b, tl_kv_cache_pages(e->kv), e->logits);
        e->stats.forward_us_total += tl_time_us() - tf;
        if (rc) {
            // The batch's requests fail; the engine goes on. Their blocks were never published
            // for the positions of this step, so no half-written K/V can be reused.
            char msg[512];
            snprintf(msg, sizeof(msg), "forward pass failed: %s", tl_last_error());
            TL_LOGE("%s", msg);
            for (int64_t i = 0; i < e->n_b_seqs; i++)
                tl__seq_finish(e, e->b_seqs[i], TL_FINISH_ERROR, msg);
        } else {
            tl__engine_count_work(e, b);
            e->n_to_sample = 0;
            for (int64_t i = 0; i < e->n_b_seqs; i++) {
                struct tl_seq *s = e->b_seqs[i];
                // Prompt tokens computed: this step's positions below n_prompt.
                int64_t end = s->n_computed + s->sched_n;
                if (s->n_computed < s->n_prompt)
                    e->stats.prompt_tokens_total +=
                        (end < s->n_prompt ? end : s->n_prompt) - s->n_computed;
                s->n_computed = end;
                tl__sched_publish(e, s);
                if (s->out_row >= 0) e->to_sample[e->n_to_sample++] = s;
            }
            sample_all(e);
            // Prompt logprobs first: a request's come before its first generated token.
            for (int64_t i = 0; i < e->n_b_seqs; i++)
                tl__plp_deliver(&e->plp, e->b_seqs[i]);
            for (int64_t i = 0; i < e->n_to_sample; i++) {
                struct tl_seq *s = e->to_sample[i];
                TL_ASSERT(!s->plp.wanted || s->plp.n_done == s->n_prompt);
                if (e->sample_res[i].token < 0) { // constrained sampling failed
                    tl__seq_finish(e, s, TL_FINISH_ERROR, s->gm_error);
                    continue;
                }
                enum tl_finish_reason why = tl__seq_accept_token(e, s, &e->sample_res[i]);
                if (why == TL_FINISH_ERROR)
                    tl__seq_finish(e, s, why,
                                   s->gm_error ? s->gm_error : "out of memory for output text");
                else if (why)
                    tl__seq_finish(e, s, why, NULL);
            }
        }
        e->stats.steps_total++;
        e->stats.step_tokens_sum += b->n_tok;
        tl__engine_hist_add(&e->stats, e->stats.step_hist_count, b->n_tok);
        e->stats.step_us_total += tl_time_us() - t0;
    }
    publish_stats(e);
    if (n_pending) {
        pthread_mutex_lock(&e->mu);
        *n_pending = (int64_t)e->live.n;
        pthread_mutex_unlock(&e->mu);
    }
    return TL_OK;
}
