/*
 * The continuous-batching scheduler: each step decides which tokens of which sequences go into
 * the one forward pass, within the token budget (max_tokens_per_step), the running-sequence
 * limit (max_batch_size) and the KV blocks.
 *
 * Policy (one step):
 *   1. Decodes: every running sequence whose prompt is fully computed feeds its newest token,
 *      best first. A sequence that needs a new block and finds none preempts the worst running
 *      sequence (lowest priority = highest value, then most recently admitted), repeatedly,
 *      possibly itself.
 *   2. Prefill chunks of running sequences still computing their prompt, best first, as much
 *      of the remaining prompt as the budget allows (chunked prefill). Short of blocks, such a
 *      sequence may preempt worse sequences not yet scheduled this step; else its chunk shrinks
 *      to the blocks it can get. In a step that decodes, passes 2 and 3 share at most
 *      max(max_prefill_tokens_decoding, prefill_tokens_per_decode x decoding sequences) tokens
 *      (every decode waits for the step's prefill), unless more than prefill_backlog_tokens
 *      prompt tokens wait (docs/internals/engine.md, "Serving latency").
 *   3. Admission: waiting sequences in (priority, arrival) order while a slot and budget remain.
 *      Full prompt blocks already in the prefix cache are taken by reference (never the block
 *      holding the last token, so at least one token is computed and there are logits to
 *      sample). A sequence is admitted only if the blocks for its first chunk are available
 *      now; otherwise admission stops (no overtaking, so a large request is not starved by
 *      small ones).
 * "Best first" for running sequences is (priority, admission order); victims come from the
 * other end, so a victim is never one already scheduled this step in pass 1.
 *
 * A preempted sequence releases all its blocks (its full ones stay findable in the prefix
 * cache while unreferenced), goes back to waiting with its generated tokens as part of the
 * tokens to recompute, and keeps its RNG state, so its output is unchanged.
 *
 * Invariant: a running sequence holds exactly ceil(n_computed' / block_size) blocks after the
 * step, where n_computed' includes this step's tokens: at most one partly filled block.
 *
 * Thread model: engine thread only; no locks.
 */
#include "engine/engine_impl.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"

#include <string.h>

static int64_t blocks_for(const tl_engine *e, int64_t n_pos)
{
    return (n_pos + e->block_size - 1) / e->block_size;
}

// Prefix key of full block j of s (memoized; keys depend only on the tokens).
static uint64_t block_key(tl_engine *e, struct tl_seq *s, int32_t j)
{
    while (s->n_keyed <= j) {
        int32_t k = s->n_keyed;
        uint64_t parent = k ? s->block_key[k - 1] : 0;
        s->block_key[k] =
            tl_kv_block_hash(parent, s->tokens + (int64_t)k * e->block_size, e->block_size);
        s->n_keyed++;
    }
    return s->block_key[j];
}

// Preempts running sequence s: blocks back to the pool, back to waiting for recompute.
static void preempt(tl_engine *e, struct tl_seq *s)
{
    tl__sched_remove(e, s);
    tl__seq_release_blocks(e, s);
    s->n_preempted++;
    e->stats.preemptions_total++;
    tl__sched_enqueue(e, s); // never allocates: room for every live seq is reserved
}

// The worst running sequence at index >= min_index that is not scheduled this step, or -1.
static int64_t find_victim(const tl_engine *e, int64_t min_index)
{
    for (int64_t i = e->n_running - 1; i >= min_index; i--)
        if (e->running[i]->sched_n == 0) return i;
    return -1;
}

// Gives running[*idx] blocks for positions [0, n_pos). Short of blocks, preempts victims at
// index >= min_victim (the sequence itself included when min_victim == *idx). Returns true when
// the blocks are there; false when it ran out of victims (*idx may then be stale if the
// sequence preempted itself: check its state).
static bool grow_blocks(tl_engine *e, struct tl_seq *s, int64_t n_pos, int64_t min_victim)
{
    int64_t need = blocks_for(e, n_pos);
    TL_ASSERT(need <= s->max_blocks);
    while (s->n_blocks < need) {
        int32_t b = tl_kv_block_alloc(e->kv);
        if (b >= 0) {
            s->block_table[s->n_blocks++] = b;
            continue;
        }
        int64_t v = find_victim(e, min_victim);
        if (v < 0) return false;
        struct tl_seq *victim = e->running[v];
        preempt(e, victim);
        if (victim == s) return false;
    }
    return true;
}

// ---- admission with prefix-cache lookup -----------------------------------------------------

// Takes references to the cached full blocks at the start of s's tokens (never the block
// holding the last token). Returns the number of blocks found.
static int32_t take_cached_prefix(tl_engine *e, struct tl_seq *s, int32_t *n_looked_up)
{
    TL_ASSERT(s->n_blocks == 0 && s->n_computed == 0);
    *n_looked_up = 0;
    if (!e->cfg.prefix_caching) return 0;
    // Positions whose logits are still owed for prompt logprobs must be computed: only blocks
    // wholly before them may come from the cache (cached blocks have K/V, no logits).
    int64_t n_pos = s->n_tokens - 1, lo = tl__plp_first_owed(s);
    if (lo < s->n_prompt - 1 && lo < n_pos) n_pos = lo;
    int32_t n_full = (int32_t)(n_pos / e->block_size), j = 0;
    for (; j < n_full; j++) {
        uint64_t key = block_key(e, s, j), parent = j ? s->block_key[j - 1] : 0;
        int32_t b = tl_kv_prefix_find(e->kv, key, parent, s->tokens + (int64_t)j * e->block_size);
        if (b < 0) break;
        s->block_table[s->n_blocks++] = b;
    }
    *n_looked_up = n_full;
    s->n_computed = (int64_t)j * e->block_size;
    s->n_published = j;
    return j;
}

// True when more than limit prompt tokens (limit >= 0) wait for prefill, in running and waiting
// sequences together.
static bool prefill_backlog_over(const tl_engine *e, int64_t limit)
{
    if (limit < 0) return false;
    int64_t n = 0;
    for (int64_t i = 0; i < e->n_running && n <= limit; i++)
        if (e->running[i]->n_computed < e->running[i]->n_tokens - 1)
            n += e->running[i]->n_tokens - e->running[i]->n_computed;
    for (size_t i = 0; i < e->n_waiting && n <= limit; i++)
        n += e->waiting[i]->n_tokens - e->waiting[i]->n_computed;
    return n > limit;
}

static void schedule(tl_engine *e, struct tl_seq *s, int64_t n)
{
    s->sched_n = n;
    if (!s->t_first_sched_us) s->t_first_sched_us = tl_time_us();
}

// ---- the plan -------------------------------------------------------------------------------

void tl__sched_plan(tl_engine *e)
{
    int64_t budget = e->cfg.max_tokens_per_step, plp_budget = e->plp.max_rows;
    const int64_t preempted_before = e->stats.preemptions_total;
    int64_t n_decoding = 0;
    for (int64_t i = 0; i < e->n_running; i++) {
        e->running[i]->sched_n = 0;
        e->running[i]->out_row = -1;
    }

    // 1. Decodes, best first; a sequence short of a block preempts from the worst end.
    for (int64_t i = 0; i < e->n_running && budget > 0; i++) {
        struct tl_seq *s = e->running[i];
        if (s->n_computed != s->n_tokens - 1) continue;
        TL_ASSERT(tl__plp_rows(s, 1) == 0); // the last prompt position predicts no prompt token
        if (!grow_blocks(e, s, s->n_computed + 1, i)) break; // it preempted itself: all done
        schedule(e, s, 1);
        budget--;
        n_decoding++;
    }
    // While sequences decode, every one of them waits for the step's prefill: cap it, less so
    // the more of them there are (their own work already makes the step long).
    int64_t cap = e->cfg.max_prefill_tokens_decoding;
    if (e->cfg.prefill_tokens_per_decode > 0 && e->cfg.prefill_tokens_per_decode * n_decoding > cap)
        cap = e->cfg.prefill_tokens_per_decode * n_decoding;
    if (n_decoding > 0 && budget > cap && !prefill_backlog_over(e, e->cfg.prefill_backlog_tokens))
        budget = cap;

    // 2. Prefill chunks of admitted sequences.
    for (int64_t i = 0; i < e->n_running && budget > 0; i++) {
        struct tl_seq *s = e->running[i];
        if (s->sched_n || s->n_computed >= s->n_tokens - 1) continue;
        int64_t chunk = s->n_tokens - s->n_computed;
        if (chunk > budget) chunk = budget;
        chunk = tl__plp_cap_chunk(s, chunk, plp_budget);
        if (chunk <= 0) continue;
        if (!grow_blocks(e, s, s->n_computed + chunk, i + 1)) {
            // Out of victims: take what the blocks it holds allow.
            int64_t room = (int64_t)s->n_blocks * e->block_size - s->n_computed;
            chunk = room < chunk ? room : chunk;
        }
        if (chunk <= 0) continue;
        schedule(e, s, chunk);
        budget -= chunk;
        plp_budget -= tl__plp_rows(s, chunk);
    }

    // 3. Admission in (priority, arrival) order, no overtaking; none in a step that had to
    //    preempt (the pool is under pressure; the preempted come back first next step).
    while (e->stats.preemptions_total == preempted_before && e->n_waiting > 0 &&
           e->n_running < e->cfg.max_batch_size && budget > 0) {
        struct tl_seq *s = e->waiting[0];
        int32_t n_looked_up, n_hit = take_cached_prefix(e, s, &n_looked_up);
        int64_t chunk = s->n_tokens - s->n_computed;
        if (chunk > budget) chunk = budget;
        chunk = tl__plp_cap_chunk(s, chunk, plp_budget);
        int64_t need = blocks_for(e, s->n_computed + chunk) - s->n_blocks;
        if (chunk <= 0 || need > tl_kv_cache_n_available(e->kv)) {
            // No blocks (or no prompt-logprob rows left this step) for its first chunk: undo
            // the lookup (the blocks go back to the cache) and wait, no overtaking.
            tl__seq_release_blocks(e, s);
            break;
        }
        for (int64_t k = 0; k < need; k++) {
            int32_t b = tl_kv_block_alloc(e->kv);
            TL_ASSERT(b >= 0);
            s->block_table[s->n_blocks++] = b;
        }
        memmove(e->waiting, e->waiting + 1, (e->n_waiting - 1) * sizeof(*e->waiting));
        e->n_waiting--;
        e->stats.prefix_queries_total += (int64_t)n_looked_up * e->block_size;
        e->stats.prefix_hits_total += (int64_t)n_hit * e->block_size;
        if (!s->admitted_once) {
            s->n_cached_tokens = s->n_computed;
            s->admitted_once = true;
        }
        s->admitted = ++e->admit_counter;
        tl__sched_running_insert(e, s);
        s->out_row = -1;
        schedule(e, s, chunk);
        budget -= chunk;
        plp_budget -= tl__plp_rows(s, chunk);
    }
    TL_ASSERT(plp_budget >= 0);

    // Build the flat batch in running order. A sequence's prompt-logprob rows come before its
    // row to sample, so out_idx stays increasing.
    int64_t n_tok = 0, n_out = 0, n_sample = 0;
    e->n_b_seqs = 0;
    e->plp.n = 0;
    for (int64_t i = 0; i < e->n_running; i++) {
        struct tl_seq *s = e->running[i];
        if (!s->sched_n) continue;
        int32_t si = (int32_t)e->n_b_seqs;
        e->b_seqs[e->n_b_seqs++] = s;
        e->b_tables[si] = s->block_table;
        TL_ASSERT(s->n_computed + s->sched_n <= (int64_t)s->n_blocks * e->block_size);
        for (int64_t k = 0; k < s->sched_n; k++) {
            e->b_token[n_tok] = s->tokens[s->n_computed + k];
            e->b_pos[n_tok] = (int32_t)(s->n_computed + k);
            e->b_seq[n_tok] = si;
            n_tok++;
        }
        tl__plp_plan_rows(&e->plp, s, n_tok - s->sched_n, e->b_out, &n_out);
        if (s->n_computed + s->sched_n == s->n_tokens) {
            s->out_row = n_out;
            e->b_out[n_out++] = (int32_t)(n_tok - 1);
            n_sample++;
        }
    }
    TL_ASSERT(n_tok <= e->cfg.max_tokens_per_step && n_sample <= e->max_out &&
              e->plp.n <= e->plp.max_rows);
    e->batch.n_tok = n_tok;
    e->batch.token = e->b_token;
    e->batch.pos = e->b_pos;
    e->batch.seq = e->b_seq;
    e->batch.block_tables = e->b_tables;
    e->batch.n_out = n_out;
    e->batch.out_idx = e->b_out;
}

void tl__sched_publish(tl_engine *e, struct tl_seq *s)
{
    if (!e->cfg.prefix_caching) return;
    int32_t n_full = (int32_t)(s->n_computed / e->block_size);
    for (int32_t j = s->n_published; j < n_full; j++) {
        uint64_t key = block_key(e, s, j), parent = j ? s->block_key[j - 1] : 0;
        tl_kv_prefix_publish(e->kv, s->block_table[j], key, parent,
                             s->tokens + (int64_t)j * e->block_size);
    }
    if (n_full > s->n_published) s->n_published = n_full;
}
