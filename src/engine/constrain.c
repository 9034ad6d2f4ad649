/*
 * Grammar-constrained sampling: the glue between the engine and src/grammar.
 *
 * Each constrained sequence has a matcher (created at submission from the request's compiled
 * grammar). When its token is due, the sampler thread computes the allowed-token mask from the
 * matcher's state (the grammar's cache makes this mostly bitset ORs) and samples from the
 * masked distribution; the engine thread then advances the matcher over the chosen token.
 * Greedy requests first take the unmasked argmax and keep it when the grammar allows it: the
 * argmax of the allowed set is then that same token (ties go to the lowest id either way), so
 * this fast path picks exactly what the mask would. Sampled requests always use the full mask:
 * a draw against the unmasked total would pick a different token for the same random number.
 * End-of-generation tokens are in the mask only where the grammar is complete, and they end the
 * request even with ignore_eos.
 *
 * Everything depends only on the sequence's own state, logits and RNG: batch-invariant.
 *
 * Thread model: tl__constrain_init on the submitter's thread; prepare and accept on the engine
 * thread; sample on the sampler thread ith (its own mask buffer, the sequence's own matcher).
 */
#include "engine/engine_impl.h"

#include "grammar/grammar.h"

#include "core/alloc.h"
#include "core/error.h"

#include <string.h>

tl_status tl__constrain_init(const tl_engine *e, struct tl_seq *s, const struct tl_request *r)
{
    if (!r->grammar) return TL_OK;
    if (!e->be.token_bytes)
        return tl__errorf(TL_ERR_UNSUPPORTED, "this engine's backend supports no grammars");
    s->gm = tl_gmatcher_create(r->grammar);
    return s->gm ? TL_OK : TL_ERR_NOMEM;
}

static int be_token_bytes(void *ctx, int32_t id, char *buf, int cap)
{
    const tl_engine *e = ctx;
    return e->be.token_bytes(e->be.ctx, id, buf, cap);
}

static bool be_is_eog(void *ctx, int32_t id)
{
    const tl_engine *e = ctx;
    return e->be.is_eog && e->be.is_eog(e->be.ctx, id);
}

void tl__constrain_prepare(tl_engine *e)
{
    if (e->gvocab) return;
    bool any = false;
    for (int64_t i = 0; i < e->n_to_sample && !any; i++)
        any = e->to_sample[i]->gm != NULL;
    if (!any) return;
    size_t words = ((size_t)e->be.n_vocab + 63) / 64;
    e->gmasks = tl_malloc_array((size_t)e->n_samplers * words, sizeof(uint64_t));
    if (e->gmasks) e->gvocab = tl_gvocab_create(e->be.n_vocab, be_token_bytes, be_is_eog, e);
    if (!e->gvocab) {
        free(e->gmasks);
        e->gmasks = NULL;
        for (int64_t i = 0; i < e->n_to_sample; i++)
            e->to_sample[i]->gm_error = "grammar: out of memory for the vocabulary trie";
    }
}

void tl__constrain_sample(tl_engine *e, int ith, struct tl_seq *s, const float *logits,
                          struct tl_sample_result *res)
{
    struct tl_sampler *smp = e->samplers[ith];
    if (!e->gvocab) {
        res->token = -1;
        if (!s->gm_error) s->gm_error = "grammar: no vocabulary trie";
        return;
    }
    if (s->sampling.temperature == 0.0f || s->sampling.top_k == 1) {
        tl_sampler_sample(smp, logits, &s->sampling, s->tokens, s->n_prompt, s->n_tokens, &s->rng,
                          res);
        if (tl_gmatcher_allows(s->gm, e->gvocab, res->token)) return;
    }
    size_t words = ((size_t)e->be.n_vocab + 63) / 64;
    uint64_t *mask = e->gmasks + (size_t)ith * words;
    if (!tl_gmatcher_fill_mask(s->gm, e->gvocab, mask)) {
        res->token = -1;
        s->gm_error = "grammar: out of memory computing the allowed tokens";
        return;
    }
    uint64_t any = 0;
    for (size_t w = 0; w < words; w++)
        any |= mask[w];
    if (!any) {
        res->token = -1;
        s->gm_error = "grammar: no token of the vocabulary can continue the output";
        return;
    }
    tl_sampler_sample_masked(smp, logits, &s->sampling, s->tokens, s->n_prompt, s->n_tokens,
                             &s->rng, mask, res);
}

enum tl_finish_reason tl__constrain_accept(tl_engine *e, struct tl_seq *s, int32_t t)
{
    if (e->be.is_eog && e->be.is_eog(e->be.ctx, t))
        return tl_gmatcher_can_end(s->gm) ? TL_FINISH_STOP : TL_FINISH_ERROR;
    return tl_gmatcher_accept_token(s->gm, e->gvocab, t) ? TL_FINISH_NONE : TL_FINISH_ERROR;
}
