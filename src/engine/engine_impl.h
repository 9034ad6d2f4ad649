/*
 * Internals of the engine shared by engine.c (public API, inbox, step, events, stats), sched.c
 * (admission, chunked prefill, preemption, batch building) and the backends (backend_model.c:
 * the real model; tests plug in fakes through the same struct).
 *
 * Ownership and threads: everything below `mu` in struct tl_engine belongs to the thread that
 * calls tl_engine_step and is touched without locks; the fields guarded by `mu` are shared with
 * submitters and cancellers. A tl_seq is created by tl_engine_submit (any thread), handed over
 * through the inbox, and from then on owned by the engine thread until it is freed after its
 * DONE event. Its `cancel` flag is the only field other threads write (under `mu`, while the
 * seq is in the live map, which it leaves before being freed).
 */
#ifndef TL_ENGINE_IMPL_H
#define TL_ENGINE_IMPL_H

#include <tokenloom.h>

#include "engine/kvcache.h"
#include "engine/prompt_logprobs.h"
#include "core/hashmap.h"
#include "core/pool.h"
#include "engine/sampler.h"
#include "engine/stop.h"
#include "model/model.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

// ---- backend: the model as the engine sees it -----------------------------------------------

struct tl_engine_backend {
    void *ctx;                            // owned by the engine once created; freed with destroy()
    int32_t n_vocab;                      // logits per sampled token
    int32_t n_ctx;                        // the model's context length (default max_seq_len)
    int32_t n_layer, n_kv_head, head_dim; // K/V shape; n_layer 0 = the backend keeps no K/V
    // Sizes the forward scratch for up to max_tok tokens per batch and contexts up to max_ctx.
    tl_status (*prepare)(void *ctx, int64_t max_tok, int64_t max_ctx, int32_t n_threads);
    // Runs the batch: writes K/V of every token into kv, logits (b->n_out, n_vocab).
    tl_status (*forward)(void *ctx, const struct tl_batch *b, const struct tl_kv_pages *kv,
                         float *logits);
    // Adds up what the batch just run computed and read (model/work.c); NULL = not counted.
    void (*step_work)(void *ctx, const struct tl_batch *b, const struct tl_kv_pages *kv,
                      struct tl_step_work *out);
    // Text prompts; NULL when the backend has no tokenizer (token prompts only). Thread-safe.
    tl_status (*tokenize)(void *ctx, const char *text, size_t len, bool add_special,
                          bool parse_special, int32_t **ids, int64_t *n_ids);
    bool (*is_eog)(void *ctx, int32_t id); // end-of-generation token
    // The bytes token id adds to the output (0..cap), or -1 if a grammar may never produce it
    // (control tokens); NULL when the backend supports no grammars. Thread-safe.
    int (*token_bytes)(void *ctx, int32_t id, char *buf, int cap);
    // Incremental detokenizer with detok_bytes of state per sequence; push/flush append whole
    // UTF-8 characters to a growable buffer; TL_ERR_NOMEM (error set) on allocation failure.
    size_t detok_bytes;
    void (*detok_init)(void *ctx, void *state, bool render_special);
    tl_status (*detok_push)(void *ctx, void *state, int32_t id, char **out, size_t *len,
                            size_t *cap);
    tl_status (*detok_flush)(void *ctx, void *state, char **out, size_t *len, size_t *cap);
    // Backends that keep K/V themselves (n_layer 0, e.g. in device memory): the bytes of one KV
    // block of every layer, which sizes the pool from kv_bytes (NULL: 0), and a call with the
    // pool the engine chose (block ids < n_blocks index the backend's pool), before prepare.
    size_t (*kv_block_bytes)(void *ctx, int32_t block_size, enum tl_dtype type);
    tl_status (*kv_alloc)(void *ctx, int64_t n_blocks, int32_t block_size, enum tl_dtype type);
    // Fills the st->gpu_* counters (device backends; NULL = none). Engine thread.
    void (*device_stats)(void *ctx, struct tl_engine_stats *st);
    // The compute pool after prepare (sampling fans out over it too); NULL = run serially.
    struct tl_pool *(*pool)(void *ctx);
    void (*destroy)(void *ctx);
};

// Creates an engine over a backend, taking ownership of be->ctx (destroyed on failure too).
tl_status tl__engine_create_with(const struct tl_engine_backend *be,
                                 const struct tl_engine_config *c, tl_engine **out) TL_WARN_UNUSED;
// The real-model backend (backend_model.c). OUT: *be.
tl_status tl__engine_backend_model(const tl_model *m, struct tl_engine_backend *be) TL_WARN_UNUSED;

// Checks the engine's block accounting: every block's refcount equals the number of live
// sequences' block tables holding it, and free + used + cached == pool size. Engine thread.
// Returns TL_ERR_STATE (TL_ERR_NOMEM) with the error message set, else TL_OK.
tl_status tl__engine_check(const tl_engine *e) TL_WARN_UNUSED;
// The KV cache (tests). Engine thread.
struct tl_kv_cache *tl__engine_kv(tl_engine *e);

// ---- sequences ----------------------------------------------------------------------------

enum tl_seq_state { TL_SEQ_WAITING = 0, TL_SEQ_RUNNING = 1 };

struct tl_seq {
    uint64_t id;
    uint64_t arrival;  // submission order (ties in priority go to the earlier)
    uint64_t admitted; // order of the latest admission (preemption victims: the latest)
    enum tl_seq_state state;
    atomic_bool cancel; // set by tl_engine_cancel

    // The request (owned copies).
    struct tl_sampling sampling;      // .logit_bias points at logit_bias below
    struct tl_logit_bias *logit_bias; // owned copy of the request's, or NULL
    int32_t max_tokens;
    int32_t *stop_tokens; // owned, (n_stop_tokens)
    int32_t n_stop_tokens;
    struct tl_stop_set stop;
    bool ignore_eos;
    int32_t priority;
    int64_t deadline_us;    // tl_time_us() clock; 0 = none
    struct tl_gmatcher *gm; // owned: the grammar's parse state (NULL = unconstrained)
    const char *gm_error;   // static text: why constrained sampling failed this step
    tl_event_fn on_event;
    void *user;

    // Tokens: the prompt, then generated ones; capacity n_prompt + max_tokens.
    int32_t *tokens; // owned
    int64_t n_tokens;
    int64_t n_prompt;
    int64_t n_computed; // positions [0, n_computed) have K/V in the cache

    // KV blocks: logical block j holds positions [j*bs, (j+1)*bs).
    int32_t *block_table; // owned, (max_blocks)
    uint64_t *block_key;  // owned, (max_blocks): prefix key of full block j, j < n_keyed
    int32_t max_blocks;
    int32_t n_blocks;
    int32_t n_keyed;
    int32_t n_published; // leading blocks already offered to the prefix table

    struct tl_rng rng;

    // Generated text (whole UTF-8 characters), of which [0, text_released) was delivered.
    void *detok; // owned, backend detok state
    char *text;  // owned
    size_t text_len, text_cap, text_released;
    bool stop_string_hit;

    struct tl_plp_seq plp; // prompt log-probabilities (prompt_logprobs.h)

    // This step.
    int64_t sched_n; // tokens scheduled (0 = not scheduled)
    int64_t out_row; // logits row of the token to sample, or -1

    // Accounting.
    int64_t n_generated, n_preempted, n_cached_tokens;
    bool admitted_once;
    int64_t t_submit_us, t_first_sched_us, t_first_token_us;
};

// ---- the engine -----------------------------------------------------------------------------

struct tl_engine {
    struct tl_engine_config cfg; // resolved: no zeros left
    struct tl_engine_backend be;
    struct tl_kv_cache *kv;       // owned
    struct tl_sampler **samplers; // owned, (n_samplers): scratch per compute thread
    int n_samplers;
    struct tl_pool *pool;                // the backend's compute pool (borrowed), may be NULL
    struct tl_seq **to_sample;           // owned, (max_batch_size): sequences due a token
    struct tl_sample_result *sample_res; // owned, (max_batch_size): their sampled tokens
    int64_t n_to_sample;
    int32_t block_size;

    // Shared with other threads, guarded by mu.
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct tl_seq **inbox; // owned array of owned seqs
    size_t n_inbox, cap_inbox;
    struct tl_hmap live; // id -> seq (as uintptr_t) for every request not yet done
    uint64_t next_id;
    int64_t n_unadmitted; // inbox + waiting (for max_waiting)
    bool wake_flag;
    bool shutting_down;
    struct tl_engine_stats snapshot;

    // Engine thread only.
    struct tl_seq **waiting; // sorted by (priority, arrival); cap >= waiting + running
    size_t n_waiting, cap_waiting;
    struct tl_seq **running; // sorted by (priority, admitted); (max_batch_size)
    int64_t n_running;
    uint64_t admit_counter;

    // The step's batch (sized at creation).
    int32_t *b_token, *b_pos, *b_seq, *b_out; // (max_tokens_per_step)
    const int32_t **b_tables;                 // (max_batch_size)
    struct tl_seq **b_seqs;                   // (max_batch_size) scheduled, batch order
    int64_t n_b_seqs;
    struct tl_batch batch;
    float *logits;          // owned, (max_out + plp.max_rows, n_vocab)
    int64_t max_out;        // rows of tokens to sample per step
    struct tl_plp_step plp; // the step's prompt-logprob rows (prompt_logprobs.h)

    struct tl_engine_stats stats; // engine thread's running copy

    // Structured output (constrain.c), built at the first constrained request.
    struct tl_gvocab *gvocab; // owned: the vocabulary's byte trie
    uint64_t *gmasks;         // owned, (n_samplers, mask words): one mask per sampler thread
};

// constrain.c: grammar-constrained sampling.
// Makes s's matcher for r->grammar (submitter's thread); TL_ERR_UNSUPPORTED without a backend
// token_bytes.
tl_status tl__constrain_init(const tl_engine *e, struct tl_seq *s, const struct tl_request *r);
// Builds the vocabulary trie and the mask buffers if a sequence due a token is constrained
// (engine thread, before sampling fans out); on failure their gm_error is set.
void tl__constrain_prepare(tl_engine *e);
// Samples s's token from the masked logits on sampler thread ith; res->token = -1 and
// s->gm_error on failure.
void tl__constrain_sample(tl_engine *e, int ith, struct tl_seq *s, const float *logits,
                          struct tl_sample_result *res);
// Advances s's matcher over t (engine thread). Returns TL_FINISH_STOP for an end-of-generation
// token where the grammar is complete, TL_FINISH_ERROR if t does not continue the grammar,
// TL_FINISH_NONE otherwise.
enum tl_finish_reason tl__constrain_accept(tl_engine *e, struct tl_seq *s, int32_t t);

// seq.c: a sequence's lifecycle (see there).
// Builds a sequence from a validated request (submitter's thread); *out on success.
tl_status tl__seq_create(tl_engine *e, const struct tl_request *r, const int32_t *prompt,
                         int64_t n_prompt, struct tl_seq **out);
// Frees s and everything it owns (NULL is a no-op); it must be in no engine structure.
void tl__seq_destroy(struct tl_seq *s);
// Calls s's callback with ev carrying text[from, to), NUL-terminated in place.
void tl__seq_deliver(struct tl_seq *s, struct tl_event *ev, size_t from, size_t to);
// Appends a sampled token to s and delivers its TOKEN event; returns the finish reason
// (TL_FINISH_NONE to go on).
enum tl_finish_reason tl__seq_accept_token(tl_engine *e, struct tl_seq *s,
                                           const struct tl_sample_result *res);
// Ends s: removes it from its queue and the live map, releases its blocks, delivers DONE with
// whatever text is still held (unless a stop string ended it), destroys it.
void tl__seq_finish(tl_engine *e, struct tl_seq *s, enum tl_finish_reason why, const char *error);

// step_stats.c: per-step accounting (engine thread).
// Counts v in a step histogram whose bounds are st->step_hist_le (the last is a catch-all).
void tl__engine_hist_add(struct tl_engine_stats *st, int64_t *count, int64_t v);
// Adds the planned batch's work (backend step_work) and composition to e->stats; call after a
// successful forward pass, before the sequences' n_computed moves past the step.
void tl__engine_count_work(tl_engine *e, const struct tl_batch *b);

// sched.c: plans one step into e->batch (and e->b_seqs); admits, chunks, preempts.
void tl__sched_plan(tl_engine *e);
// Releases every block of s (last first) and forgets computed positions.
void tl__seq_release_blocks(tl_engine *e, struct tl_seq *s);
// Inserts s into the waiting queue at its (priority, arrival) place. Never allocates: the
// waiting array always has room for every sequence the engine holds (drain_inbox reserves it),
// so preemption cannot fail.
void tl__sched_enqueue(tl_engine *e, struct tl_seq *s);
// Removes s from whichever queue holds it.
void tl__sched_remove(tl_engine *e, struct tl_seq *s);
// Inserts s into the running queue at its (priority, admission) place (sched_queue.c).
void tl__sched_running_insert(tl_engine *e, struct tl_seq *s);
// Offers s's newly full computed blocks to the prefix table.
void tl__sched_publish(tl_engine *e, struct tl_seq *s);

#endif
