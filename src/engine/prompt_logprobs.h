/*
 * Prompt log-probabilities (a request's prompt_logprobs flag; the server's echo + logprobs):
 * every prompt token gets a PROMPT_TOKEN event with its log-probability given the tokens before
 * it (the first token has none: NAN), in position order, before the request's first TOKEN event,
 * and exactly once even across preemption.
 *
 * State, all of it here:
 *   struct tl_plp_seq  (in each struct tl_seq): how far its events got, and where this step's
 *                      rows are;
 *   struct tl_plp_step (in the engine): the step's rows, one per prompt position whose logits
 *                      are computed this step, and their sampler results.
 * Position p's logits give token p + 1's logprob, so a sequence owes rows for positions
 * [max(n_done - 1, 0), n_prompt - 1). Logits rows are memory (16 MiB bounds a step's rows,
 * TL_ENGINE_PLP_LOGITS_BYTES), so the scheduler cuts prefill chunks to the rows left
 * (tl__plp_cap_chunk), and a cached prefix is reused only up to the first owed position.
 *
 * Who touches what: sched.c plans the rows (tl__plp_rows, tl__plp_cap_chunk, tl__plp_plan_rows),
 * engine.c's sampling workers fill res[], prompt_logprobs.c delivers the events. All on the
 * engine thread.
 */
#ifndef TL_ENGINE_PROMPT_LOGPROBS_H
#define TL_ENGINE_PROMPT_LOGPROBS_H

#include <tokenloom.h>

#include <stdbool.h>
#include <stdint.h>

struct tl_seq;
struct tl_engine;
struct tl_sample_result;

// Per sequence.
struct tl_plp_seq {
    bool wanted;    // the request asked for prompt logprobs
    int64_t n_done; // prompt tokens [0, n_done) had their event; never goes down
    // This step's rows: positions [pos0, pos0 + n) at items[first..] of the engine's step.
    int64_t pos0, n, first;
};

// One row of a step: logits row `row` (position pos of s) gives the logprob of prompt token
// pos + 1.
struct tl_plp_item {
    struct tl_seq *s; // borrowed
    int64_t pos;
    int64_t row;
};

// Bound on the logits kept for prompt log-probabilities in one step: at most this many bytes
// of rows (and at most max_tokens_per_step rows); a prompt chunk needing more rows is cut.
// 16 MiB is 131 rows at a 32000-token vocabulary, 27 at 152064.
#define TL_ENGINE_PLP_LOGITS_BYTES ((size_t)16 << 20)

// Per engine step.
struct tl_plp_step {
    int64_t max_rows;             // from TL_ENGINE_PLP_LOGITS_BYTES and max_tokens_per_step
    struct tl_plp_item *items;    // owned, (max_rows)
    struct tl_sample_result *res; // owned, (max_rows): the sampler's logprobs of each item
    int64_t n;                    // rows this step
};

// Sizes and allocates the step buffers for a vocabulary of n_vocab and steps of at most
// max_tokens_per_step tokens. TL_ERR_NOMEM on failure (tl__plp_step_free still applies).
tl_status tl__plp_step_init(struct tl_plp_step *p, int64_t n_vocab,
                            int64_t max_tokens_per_step) TL_WARN_UNUSED;
void tl__plp_step_free(struct tl_plp_step *p);

// The first position whose logits s still needs; n_prompt - 1 (an empty range) when none are
// owed.
int64_t tl__plp_first_owed(const struct tl_seq *s);
// Rows needed by a chunk of k positions from s->n_computed.
int64_t tl__plp_rows(const struct tl_seq *s, int64_t k);
// Cuts a chunk of k positions from s->n_computed so that it needs at most `rows` rows.
int64_t tl__plp_cap_chunk(const struct tl_seq *s, int64_t k, int64_t rows);

// Adds s's rows for its scheduled chunk (s->sched_n positions from s->n_computed) to the step;
// the chunk's first token is batch row `tok0` and its rows' logits start at output row *n_out,
// recorded in b_out (advanced). Returns nothing: the scheduler's budget guarantees room.
void tl__plp_plan_rows(struct tl_plp_step *p, struct tl_seq *s, int64_t tok0, int32_t *b_out,
                       int64_t *n_out);

// Delivers the PROMPT_TOKEN events s is due after this step: the first prompt token (no
// logprob) at its first computed step, then one per row, in position order.
void tl__plp_deliver(const struct tl_plp_step *p, struct tl_seq *s);

#endif
