/*
 * The engine's any-thread entry points: tl_engine_submit (request validation, tokenizing a text
 * prompt, length and KV-pool checks, then the inbox), tl_engine_cancel, tl_engine_wait,
 * tl_engine_wake and tl_engine_get_stats. engine.c holds creation and the step loop that drains
 * the inbox.
 *
 * Design. Everything that can be refused is refused here, before the sequence exists, with a
 * clear error (TL_ERR_INVALID_ARG, TL_ERR_TOO_LONG for a request that could never fit even in
 * the whole KV pool, TL_ERR_FULL past max_waiting); the step loop then never sees a request it
 * cannot run. Request fields are copied at submission (tl__seq_create).
 *
 * Threads: every function here may be called from any thread and touches only the fields under
 * `mu` (inbox, live map, counters, stats snapshot); the sequence is built outside the lock.
 */
#include "engine/engine_impl.h"

#include "core/alloc.h"
#include "core/error.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// ---- id -> seq map (under mu) ---------------------------------------------------------------
// A tl_hmap from request id (never 0) to the sequence pointer.

static struct tl_seq *live_find(const tl_engine *e, uint64_t id)
{
    uint64_t v;
    return tl_hmap_get(&e->live, id, &v) ? (struct tl_seq *)(uintptr_t)v : NULL;
}

// ---- submission, cancellation, waiting (any thread) -----------------------------------------

static tl_status validate_request(const tl_engine *e, const struct tl_request *r)
{
    if (!r) return tl__errorf(TL_ERR_INVALID_ARG, "request is NULL");
    if (!r->on_event) return tl__errorf(TL_ERR_INVALID_ARG, "request has no event callback");
    if (r->max_tokens < 1)
        return tl__errorf(TL_ERR_INVALID_ARG, "max_tokens must be at least 1 (got %d)",
                          r->max_tokens);
    tl_status rc = tl_sampling_validate(&r->sampling);
    if (rc) return rc;
    if (r->n_stop_tokens < 0 || r->n_stop_tokens > 1024 || (r->n_stop_tokens && !r->stop_tokens))
        return tl__errorf(TL_ERR_INVALID_ARG, "bad stop token list (%d ids)", r->n_stop_tokens);
    for (int32_t i = 0; i < r->n_stop_tokens; i++)
        if (r->stop_tokens[i] < 0 || r->stop_tokens[i] >= e->be.n_vocab)
            return tl__errorf(TL_ERR_INVALID_ARG, "stop token %d is not in the vocabulary (0..%d)",
                              r->stop_tokens[i], e->be.n_vocab - 1);
    for (int32_t i = 0; i < r->sampling.n_logit_bias; i++)
        if (r->sampling.logit_bias[i].token < 0 || r->sampling.logit_bias[i].token >= e->be.n_vocab)
            return tl__errorf(TL_ERR_INVALID_ARG,
                              "logit_bias token %d is not in the vocabulary (0..%d)",
                              r->sampling.logit_bias[i].token, e->be.n_vocab - 1);
    if (r->timeout_ms < 0) return tl__errorf(TL_ERR_INVALID_ARG, "timeout_ms must not be negative");
    if (r->n_stop < 0 || (r->n_stop > 0 && !r->stop))
        return tl__errorf(TL_ERR_INVALID_ARG, "bad stop string list");
    return TL_OK;
}

tl_status tl_engine_submit(tl_engine *e, const struct tl_request *r, uint64_t *id)
{
    if (id) *id = 0;
    if (!e) return tl__errorf(TL_ERR_INVALID_ARG, "engine is NULL");
    tl_status rc = validate_request(e, r);
    if (rc) return rc;

    int32_t *owned = NULL;
    const int32_t *prompt = r->prompt_tokens;
    int64_t n_prompt = r->n_prompt_tokens;
    if (prompt) {
        if (n_prompt < 1) return tl__errorf(TL_ERR_INVALID_ARG, "prompt has no tokens");
        if (n_prompt > e->cfg.max_seq_len)
            return tl__errorf(TL_ERR_TOO_LONG,
                              "prompt of %lld tokens exceeds the maximum sequence length %d",
                              (long long)n_prompt, e->cfg.max_seq_len);
        for (int64_t i = 0; i < n_prompt; i++)
            if (prompt[i] < 0 || prompt[i] >= e->be.n_vocab)
                return tl__errorf(TL_ERR_INVALID_ARG,
                                  "prompt token %lld (id %d) is not in the vocabulary (0..%d)",
                                  (long long)i, prompt[i], e->be.n_vocab - 1);
    } else {
        if (!r->prompt) return tl__errorf(TL_ERR_INVALID_ARG, "request has no prompt");
        if (!e->be.tokenize)
            return tl__errorf(TL_ERR_UNSUPPORTED, "this engine takes token prompts only");
        size_t len = r->prompt_len ? r->prompt_len : strlen(r->prompt);
        rc = e->be.tokenize(e->be.ctx, r->prompt, len, r->add_special, r->parse_special, &owned,
                            &n_prompt);
        if (rc) return rc;
        if (n_prompt < 1) {
            free(owned);
            return tl__errorf(TL_ERR_INVALID_ARG, "prompt is empty");
        }
        prompt = owned;
    }
    int64_t total = n_prompt + r->max_tokens;
    if (total > e->cfg.max_seq_len) {
        free(owned);
        return tl__errorf(TL_ERR_TOO_LONG,
                          "prompt of %lld tokens + max_tokens %d = %lld exceeds the maximum "
                          "sequence length %d",
                          (long long)n_prompt, r->max_tokens, (long long)total, e->cfg.max_seq_len);
    }
    // The last generated token is never fed back, so K/V is needed for total - 1 positions.
    int64_t need = (total - 1 + e->block_size - 1) / e->block_size;
    if (need > tl_kv_cache_n_blocks(e->kv)) {
        free(owned);
        return tl__errorf(TL_ERR_TOO_LONG,
                          "prompt of %lld tokens + max_tokens %d needs %lld KV blocks; the "
                          "whole pool has %lld",
                          (long long)n_prompt, r->max_tokens, (long long)need,
                          (long long)tl_kv_cache_n_blocks(e->kv));
    }
    struct tl_seq *s = NULL;
    rc = tl__seq_create(e, r, prompt, n_prompt, &s);
    free(owned);
    if (rc) return rc;

    pthread_mutex_lock(&e->mu);
    if (e->shutting_down) {
        rc = tl__errorf(TL_ERR_STATE, "engine is shutting down");
    } else if (e->cfg.max_waiting > 0 && e->n_unadmitted >= e->cfg.max_waiting) {
        rc = tl__errorf(TL_ERR_FULL, "%lld requests are already waiting (max_waiting %d)",
                        (long long)e->n_unadmitted, e->cfg.max_waiting);
    } else if (!tl_grow((void **)&e->inbox, &e->cap_inbox, e->n_inbox + 1, sizeof(*e->inbox)) ||
               tl_hmap_put(&e->live, e->next_id, (uintptr_t)s)) {
        rc = tl__errorf(TL_ERR_NOMEM, "submit: out of memory");
    } else {
        s->id = s->arrival = e->next_id++;
        e->inbox[e->n_inbox++] = s;
        e->n_unadmitted++;
        e->wake_flag = true;
        pthread_cond_broadcast(&e->cv);
        if (id) *id = s->id;
        s = NULL;
    }
    pthread_mutex_unlock(&e->mu);
    tl__seq_destroy(s);
    return rc;
}

tl_status tl_engine_cancel(tl_engine *e, uint64_t id)
{
    if (!e) return tl__errorf(TL_ERR_INVALID_ARG, "engine is NULL");
    tl_status rc = TL_OK;
    pthread_mutex_lock(&e->mu);
    struct tl_seq *s = live_find(e, id);
    if (s) {
        atomic_store(&s->cancel, true);
        e->wake_flag = true;
        pthread_cond_broadcast(&e->cv);
    } else {
        rc = tl__errorf(TL_ERR_NOT_FOUND, "request %llu is not pending", (unsigned long long)id);
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

void tl_engine_wait(tl_engine *e, int timeout_ms)
{
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    // Pending requests are work too: the caller should step rather than sleep.
    if (!e->wake_flag && e->live.n == 0 && timeout_ms > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        while (!e->wake_flag && e->live.n == 0)
            if (pthread_cond_timedwait(&e->cv, &e->mu, &ts) == ETIMEDOUT) break;
    }
    e->wake_flag = false;
    pthread_mutex_unlock(&e->mu);
}

void tl_engine_wake(tl_engine *e)
{
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->wake_flag = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

void tl_engine_get_stats(tl_engine *e, struct tl_engine_stats *out)
{
    if (!e) {
        memset(out, 0, sizeof(*out));
        return;
    }
    pthread_mutex_lock(&e->mu);
    *out = e->snapshot;
    pthread_mutex_unlock(&e->mu);
}
