/*
 * Prompt log-probabilities: the step buffers, the row arithmetic the scheduler plans with, and
 * the delivery of PROMPT_TOKEN events (see prompt_logprobs.h for the state and the contract).
 *
 * Why a file of its own: the feature crosses the scheduler (which positions need logits rows,
 * how far a chunk may go), the sampling pass (logprobs of each row) and event delivery; keeping
 * its state and rules here lets sched.c and engine.c each call it in one place.
 *
 * Threads: engine thread only. Ownership: the engine owns the step buffers (init/free); rows
 * borrow their sequences for the step.
 */
#include "engine/prompt_logprobs.h"

#include "engine/engine_impl.h"

#include "core/alloc.h"
#include "core/error.h"

#include <math.h>
#include <stdlib.h>

tl_status tl__plp_step_init(struct tl_plp_step *p, int64_t n_vocab, int64_t max_tokens_per_step)
{
    // A whole 512-token chunk at a 32000 vocabulary would be 64 MB of logits: bound the bytes.
    size_t row_bytes = (size_t)n_vocab * sizeof(float);
    p->max_rows = (int64_t)(TL_ENGINE_PLP_LOGITS_BYTES / (row_bytes ? row_bytes : 1));
    if (p->max_rows < 1) p->max_rows = 1;
    if (p->max_rows > max_tokens_per_step) p->max_rows = max_tokens_per_step;
    p->items = tl_malloc_array((size_t)p->max_rows, sizeof(*p->items));
    p->res = tl_malloc_array((size_t)p->max_rows, sizeof(*p->res));
    p->n = 0;
    if (!p->items || !p->res)
        return tl__errorf(TL_ERR_NOMEM, "engine: out of memory for step buffers");
    return TL_OK;
}

void tl__plp_step_free(struct tl_plp_step *p)
{
    free(p->items);
    free(p->res);
    p->items = NULL;
    p->res = NULL;
    p->n = 0;
}

int64_t tl__plp_first_owed(const struct tl_seq *s)
{
    if (!s->plp.wanted || s->plp.n_done >= s->n_prompt) return s->n_prompt - 1;
    return s->plp.n_done > 0 ? s->plp.n_done - 1 : 0;
}

// The first position of a chunk starting at s->n_computed that needs a row (if any).
static int64_t first_row_pos(const struct tl_seq *s)
{
    int64_t lo = tl__plp_first_owed(s);
    return s->n_computed > lo ? s->n_computed : lo;
}

int64_t tl__plp_rows(const struct tl_seq *s, int64_t k)
{
    int64_t a = first_row_pos(s);
    int64_t b = s->n_computed + k < s->n_prompt - 1 ? s->n_computed + k : s->n_prompt - 1;
    return b > a ? b - a : 0;
}

int64_t tl__plp_cap_chunk(const struct tl_seq *s, int64_t k, int64_t rows)
{
    if (tl__plp_rows(s, k) <= rows) return k;
    return first_row_pos(s) + rows - s->n_computed;
}

void tl__plp_plan_rows(struct tl_plp_step *p, struct tl_seq *s, int64_t tok0, int32_t *b_out,
                       int64_t *n_out)
{
    s->plp.n = tl__plp_rows(s, s->sched_n);
    s->plp.first = p->n;
    s->plp.pos0 = s->plp.n ? first_row_pos(s) : -1;
    for (int64_t k = 0; k < s->plp.n; k++) {
        int64_t pos = s->plp.pos0 + k;
        TL_ASSERT(p->n < p->max_rows);
        p->items[p->n++] = (struct tl_plp_item){.s = s, .pos = pos, .row = *n_out};
        b_out[(*n_out)++] = (int32_t)(tok0 + (pos - s->n_computed));
    }
}

void tl__plp_deliver(const struct tl_plp_step *p, struct tl_seq *s)
{
    if (!s->plp.wanted || s->plp.n_done >= s->n_prompt) return;
    struct tl_event ev = {0};
    ev.type = TL_EVENT_PROMPT_TOKEN;
    size_t at = s->text_released;
    if (s->plp.n_done == 0) {
        ev.token = s->tokens[0];
        ev.logprob = NAN;
        ev.prompt_pos = 0;
        s->plp.n_done = 1;
        tl__seq_deliver(s, &ev, at, at);
    }
    for (int64_t k = 0; k < s->plp.n; k++) {
        const struct tl_plp_item *it = &p->items[s->plp.first + k];
        const struct tl_sample_result *r = &p->res[s->plp.first + k];
        TL_ASSERT(it->s == s && it->pos + 1 == s->plp.n_done);
        ev.token = r->token;
        ev.logprob = r->logprob;
        ev.top = r->top;
        ev.n_top = r->n_top;
        ev.prompt_pos = it->pos + 1;
        s->plp.n_done++;
        tl__seq_deliver(s, &ev, at, at);
    }
}
