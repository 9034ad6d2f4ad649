/*
 * Sequence lifecycle: a request becomes a struct tl_seq at submission (tl__seq_create, on the
 * submitter's thread), takes its sampled tokens one by one (tl__seq_accept_token: EOS and stop
 * tokens, detokenized text, stop strings, the length limit) with a TOKEN event each, and ends in
 * tl__seq_finish, which takes it off every engine structure, delivers DONE and frees it.
 *
 * Text: the sequence's generated text grows in s->text; [0, text_released) went out in events.
 * Text that might still become a stop string is held back (stop.c); when a stop string
 * matches, the text ends before it and nothing after it is delivered.
 *
 * Threads: tl__seq_create runs on the submitter's thread and touches only the new sequence;
 * everything else runs on the engine thread (tl__seq_finish takes `mu` to leave the live map).
 * Events are delivered without holding `mu`. Ownership: the engine owns each sequence from
 * submission until tl__seq_finish (or engine destroy) frees it.
 */
#include "engine/engine_impl.h"
#include "grammar/grammar.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"

#include <string.h>

// ---- sequences ------------------------------------------------------------------------------

void tl__seq_destroy(struct tl_seq *s)
{
    if (!s) return;
    free(s->stop_tokens);
    free(s->logit_bias);
    tl_gmatcher_destroy(s->gm);
    tl_stop_set_free(&s->stop);
    free(s->tokens);
    free(s->block_table);
    free(s->block_key);
    free(s->detok);
    free(s->text);
    free(s);
}

tl_status tl__seq_create(tl_engine *e, const struct tl_request *r, const int32_t *prompt,
                         int64_t n_prompt, struct tl_seq **out)
{
    struct tl_seq *s = tl_malloc(sizeof(*s));
    if (!s) return tl__errorf(TL_ERR_NOMEM, "submit: out of memory");
    memset(s, 0, sizeof(*s));
    atomic_init(&s->cancel, false);
    s->sampling = r->sampling;
    s->max_tokens = r->max_tokens;
    s->ignore_eos = r->ignore_eos;
    s->plp.wanted = r->prompt_logprobs;
    s->priority = r->priority;
    s->on_event = r->on_event;
    s->user = r->user;
    s->t_submit_us = tl_time_us();
    s->deadline_us = r->timeout_ms > 0 ? s->t_submit_us + r->timeout_ms * 1000 : 0;
    s->out_row = -1;
    tl_status rc = tl_stop_set_init(&s->stop, r->stop, r->n_stop);
    if (rc) goto out_destroy;
    int64_t cap = n_prompt + r->max_tokens;
    s->max_blocks = (int32_t)((cap + e->block_size - 1) / e->block_size);
    s->tokens = tl_malloc_array((size_t)cap, sizeof(int32_t));
    s->block_table = tl_malloc_array((size_t)s->max_blocks, sizeof(int32_t));
    s->block_key = tl_malloc_array((size_t)s->max_blocks, sizeof(uint64_t));
    s->detok = tl_malloc(e->be.detok_bytes ? e->be.detok_bytes : 1);
    s->text_cap = 64;
    s->text = tl_malloc(s->text_cap);
    if (r->n_stop_tokens > 0)
        s->stop_tokens = tl_malloc_array((size_t)r->n_stop_tokens, sizeof(int32_t));
    if (!s->tokens || !s->block_table || !s->block_key || !s->detok || !s->text ||
        (r->n_stop_tokens > 0 && !s->stop_tokens)) {
        rc = tl__errorf(TL_ERR_NOMEM, "submit: out of memory");
        goto out_destroy;
    }
    if (r->sampling.n_logit_bias > 0) {
        s->logit_bias = tl_malloc_array((size_t)r->sampling.n_logit_bias, sizeof(*s->logit_bias));
        if (!s->logit_bias) {
            rc = tl__errorf(TL_ERR_NOMEM, "submit: out of memory");
            goto out_destroy;
        }
        memcpy(s->logit_bias, r->sampling.logit_bias,
               (size_t)r->sampling.n_logit_bias * sizeof(*s->logit_bias));
    }
    s->sampling.logit_bias = s->logit_bias; // the request's copy, never the caller's
    if (r->n_stop_tokens > 0)
        memcpy(s->stop_tokens, r->stop_tokens, (size_t)r->n_stop_tokens * sizeof(int32_t));
    s->n_stop_tokens = r->n_stop_tokens;
    memcpy(s->tokens, prompt, (size_t)n_prompt * sizeof(int32_t));
    s->n_tokens = s->n_prompt = n_prompt;
    if (e->be.detok_init) e->be.detok_init(e->be.ctx, s->detok, r->render_special);
    tl_rng_seed(&s->rng, r->sampling.seed);
    rc = tl__constrain_init(e, s, r);
    if (rc) goto out_destroy;
    *out = s;
    return TL_OK;
out_destroy:
    tl__seq_destroy(s);
    return rc;
}

// ---- tokens, text and events ---------------------------------------------------------------------------------

static bool text_reserve(struct tl_seq *s, size_t extra)
{
    return tl_grow((void **)&s->text, &s->text_cap, s->text_len + extra + 1, 1);
}

void tl__seq_deliver(struct tl_seq *s, struct tl_event *ev, size_t from, size_t to)
{
    char saved = s->text[to];
    s->text[to] = '\0';
    ev->request_id = s->id;
    ev->text = s->text + from;
    ev->text_len = to - from;
    s->on_event(s->user, ev);
    s->text[to] = saved;
}

void tl__seq_release_blocks(tl_engine *e, struct tl_seq *s)
{
    // Last block first: in the LRU list the tail of a prefix then ages out before its head.
    while (s->n_blocks > 0)
        tl_kv_block_release(e->kv, s->block_table[--s->n_blocks]);
    s->n_computed = 0;
    s->n_published = 0;
}

void tl__seq_finish(tl_engine *e, struct tl_seq *s, enum tl_finish_reason why, const char *error)
{
    tl__sched_remove(e, s);
    tl__seq_release_blocks(e, s);
    pthread_mutex_lock(&e->mu);
    tl_hmap_del(&e->live, s->id);
    pthread_mutex_unlock(&e->mu);

    if (!s->stop_string_hit && e->be.detok_flush && text_reserve(s, 8)) {
        e->be.detok_flush(e->be.ctx, s->detok, &s->text, &s->text_len, &s->text_cap);
        if (!text_reserve(s, 0)) s->text_len = s->text_released; // keep room for the NUL
    }
    size_t end = s->stop_string_hit ? s->text_released : s->text_len;
    int64_t now = tl_time_us();
    struct tl_event ev = {0};
    ev.type = TL_EVENT_DONE;
    ev.finish = why;
    ev.n_prompt_tokens = s->n_prompt;
    ev.n_cached_tokens = s->n_cached_tokens;
    ev.n_generated = s->n_generated;
    ev.n_preempted = s->n_preempted;
    ev.queue_us = s->t_first_sched_us ? s->t_first_sched_us - s->t_submit_us : now - s->t_submit_us;
    ev.ttft_us = s->t_first_token_us ? s->t_first_token_us - s->t_submit_us : 0;
    ev.total_us = now - s->t_submit_us;
    ev.error = why == TL_FINISH_ERROR ? (error ? error : "internal error") : NULL;
    e->stats.finished_total[why]++;
    tl__seq_deliver(s, &ev, s->text_released, end);
    tl__seq_destroy(s);
}

static bool is_stop_token(const tl_engine *e, const struct tl_seq *s, int32_t t)
{
    if (!s->ignore_eos && e->be.is_eog && e->be.is_eog(e->be.ctx, t)) return true;
    for (int32_t i = 0; i < s->n_stop_tokens; i++)
        if (s->stop_tokens[i] == t) return true;
    return false;
}

enum tl_finish_reason tl__seq_accept_token(tl_engine *e, struct tl_seq *s,
                                           const struct tl_sample_result *res)
{
    int32_t t = res->token;
    s->tokens[s->n_tokens++] = t;
    s->n_generated++;
    e->stats.generation_tokens_total++;
    if (!s->t_first_token_us) s->t_first_token_us = tl_time_us();

    enum tl_finish_reason why = TL_FINISH_NONE;
    size_t release = s->text_released;
    enum tl_finish_reason gwhy = s->gm ? tl__constrain_accept(e, s, t) : TL_FINISH_NONE;
    if (gwhy == TL_FINISH_ERROR) {
        s->gm_error = "grammar: the sampled token does not continue the grammar";
        return TL_FINISH_ERROR;
    }
    if (gwhy == TL_FINISH_STOP || is_stop_token(e, s, t)) {
        why = TL_FINISH_STOP; // its own text is not part of the output
    } else {
        if (!text_reserve(s, 64) ||
            e->be.detok_push(e->be.ctx, s->detok, t, &s->text, &s->text_len, &s->text_cap) ||
            !text_reserve(s, 0))
            return TL_FINISH_ERROR;
        size_t end;
        if (tl_stop_scan(&s->stop, s->text, s->text_len, s->text_released, &end)) {
            why = TL_FINISH_STOP;
            s->stop_string_hit = true;
            s->text_len = end;
        }
        release = end;
    }
    if (!why && (s->n_generated >= s->max_tokens || s->n_tokens >= e->cfg.max_seq_len))
        why = TL_FINISH_LENGTH;

    struct tl_event ev = {0};
    ev.type = TL_EVENT_TOKEN;
    ev.token = t;
    ev.logprob = res->logprob;
    ev.top = res->top;
    ev.n_top = res->n_top;
    size_t from = s->text_released;
    s->text_released = release;
    tl__seq_deliver(s, &ev, from, release);
    return why;
}
