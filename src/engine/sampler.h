/*
 * Token sampling for one request at a time: penalties, temperature, top-k, top-p, min-p, the
 * request's own RNG, and log-probabilities of the raw logits.
 *
 * The result depends only on the logits, the parameters, the request's token history and its
 * RNG state: never on other requests, the batch, or the thread. Each sampled (non-greedy) token
 * consumes exactly one RNG draw, so a request can be suspended and resumed (preemption) and
 * continue the same random stream.
 *
 * Thread model: a tl_sampler is scratch memory for one thread; the RNG belongs to a request.
 */
#ifndef TL_ENGINE_SAMPLER_H
#define TL_ENGINE_SAMPLER_H

#include <tokenloom.h>

#include "core/hash.h"

#include <stdint.h>

#define TL_SAMPLER_MAX_LOGPROBS 20

// A request's RNG is core's struct tl_rng (xoshiro256**, core/hash.h).

// Checks the parameters' ranges (temperature >= 0, top_p in (0, 1], min_p in [0, 1],
// repetition_penalty > 0, penalties finite, n_logprobs in [0, 20]); TL_ERR_INVALID_ARG with a
// message naming the field.
tl_status tl_sampling_validate(const struct tl_sampling *p) TL_WARN_UNUSED;

struct tl_sampler;
// Scratch for sampling over a vocabulary of n_vocab. NULL on allocation failure (error set).
struct tl_sampler *tl_sampler_create(int32_t n_vocab);
void tl_sampler_destroy(struct tl_sampler *s); // NULL is a no-op

struct tl_sample_result {
    int32_t token;
    float logprob; // log-softmax of the raw logits at `token`
    int32_t n_top; // p->n_logprobs best alternatives by raw logit, best first
    struct tl_token_logprob top[TL_SAMPLER_MAX_LOGPROBS];
};

// Samples the next token from logits (n_vocab, not modified). tokens[0..n_prompt) is the
// prompt and tokens[n_prompt..n_tokens) the tokens generated so far: the repetition penalty
// (CTRL / llama.cpp: positive logits divided, negative multiplied) applies to every distinct
// token of both; presence and frequency penalties (OpenAI: logit -= count * frequency +
// (count > 0) * presence) to the generated ones. Then: greedy argmax when temperature == 0
// (lowest id wins ties; no RNG draw); otherwise logits / temperature, top-k, top-p (smallest
// set of best tokens whose probability reaches top_p), min-p (drop tokens below min_p times
// the best one's probability), and one draw from the rest.
void tl_sampler_sample(struct tl_sampler *s, const float *logits, const struct tl_sampling *p,
                       const int32_t *tokens, int64_t n_prompt, int64_t n_tokens,
                       struct tl_rng *rng, struct tl_sample_result *out);

// As tl_sampler_sample, over the tokens whose bit is set in allowed ((n_vocab + 63) / 64 words;
// NULL = all): the others get probability 0 after the penalties, so the draw is from the
// model's distribution restricted to them (renormalized; top-k / top-p / min-p apply to the
// restricted ranking). Log-probabilities still come from the raw logits. With no allowed token
// the lowest id is returned.
void tl_sampler_sample_masked(struct tl_sampler *s, const float *logits,
                              const struct tl_sampling *p, const int32_t *tokens, int64_t n_prompt,
                              int64_t n_tokens, struct tl_rng *rng, const uint64_t *allowed,
                              struct tl_sample_result *out);

// The log-probabilities of the raw logits (n_vocab, not modified) alone, as tl_sampler_sample
// reports them, without sampling: out->token = token, out->logprob its log-softmax, out->top
// the n_top (0..TL_SAMPLER_MAX_LOGPROBS) best tokens, best first (value desc, id asc). Used for
// prompt log-probabilities: the same code, so a prompt token's logprob equals the one reported
// when the same token is sampled from the same logits. token must be in [0, n_vocab).
void tl_sampler_logprobs(struct tl_sampler *s, const float *logits, int32_t token, int32_t n_top,
                         struct tl_sample_result *out);

#endif
