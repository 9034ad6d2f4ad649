/*
 * tokenloom public C API.
 *
 * A model is loaded once (tl_model_load) and shared read-only. An engine (tl_engine_create) owns
 * a paged KV cache and a scheduler over that model; requests are submitted from any thread and
 * advanced by calling tl_engine_step from one thread (the "engine thread"), which also invokes
 * each request's event callback. Every function that can fail returns a tl_status (0 = OK,
 * negative = error); tl_last_error() then holds a one-line description for the calling thread.
 *
 * ABI of the structs below (docs/ARCHITECTURE.md): they grow only at the end. A field is never
 * removed, moved, resized or retyped; a new one is appended, and its zero value means "default"
 * or "off". tl_sampling (embedded in tl_request), tl_token_logprob and tl_logit_bias (array
 * elements) are frozen. A caller built against an older header stays correct with a newer
 * library if it zeroes TL_ABI_SLACK bytes after each struct it allocates and fills the structs
 * with the library's tl_*_default (the Python binding does); tests/python/test_layout.py checks
 * every header against the layouts of the releases before it.
 */
#ifndef TOKENLOOM_H
#define TOKENLOOM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// The release this header belongs to (`tokenloom version` prints the same numbers).
#define TL_VERSION_MAJOR 0
#define TL_VERSION_MINOR 1
#define TL_VERSION_PATCH 0
#define TL_VERSION_STR_(x) #x
#define TL_VERSION_STR(x) TL_VERSION_STR_(x)
#define TL_VERSION_STRING                                                                          \
    TL_VERSION_STR(TL_VERSION_MAJOR)                                                               \
    "." TL_VERSION_STR(TL_VERSION_MINOR) "." TL_VERSION_STR(TL_VERSION_PATCH)

// Bytes a release may add to a caller-allocated struct since the oldest release it supports
// (see the ABI note above).
#define TL_ABI_SLACK 256

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TL_WARN_UNUSED __attribute__((warn_unused_result))
#else
#define TL_WARN_UNUSED
#endif

// ---- status --------------------------------------------------------------------------------

typedef enum tl_status {
    TL_OK = 0,
    TL_ERR_INVALID_ARG = -1, // a caller-supplied value is out of range or malformed
    TL_ERR_NOMEM = -2,       // an allocation failed
    TL_ERR_IO = -3,          // open/read/write/mmap failed
    TL_ERR_FORMAT = -4,      // a file is malformed (bad magic, truncated, inconsistent)
    TL_ERR_UNSUPPORTED = -5, // valid but not supported (architecture, tensor type, version)
    TL_ERR_TOO_LONG = -6,    // a prompt or request exceeds the context or the KV pool
    TL_ERR_FULL = -7,        // a queue or capacity limit is reached; retry later
    TL_ERR_NOT_FOUND = -8,   // no such key, tensor, request
    TL_ERR_STATE = -9,       // the object is in the wrong state for this call (e.g. shutting down)
} tl_status;

// A short constant name for a status ("TL_ERR_FORMAT" -> "format error"). Thread-safe.
const char *tl_status_str(tl_status st);

// The message of the last error raised on the calling thread (never NULL; "" if none).
// Thread-safe: each thread has its own.
const char *tl_last_error(void);

// ---- models ----------------------------------------------------------------------------------

typedef struct tl_model tl_model;

struct tl_model_params {
    // For llama2.c checkpoints (.bin): the tokenizer file (tok512.bin, tokenizer.bin). When
    // NULL, "tokenizer.bin" beside the checkpoint is tried. Ignored for GGUF files.
    const char *tokenizer_path;
};

// Loads a GGUF model (the architectures docs/internals/model.md lists) or a llama2.c checkpoint.
// params may be NULL. OUT: *out. The model is immutable afterwards and may be shared by engines
// and threads. Thread-safe (each call loads its own model).
tl_status tl_model_load(const char *path, const struct tl_model_params *params,
                        tl_model **out) TL_WARN_UNUSED;
// NULL is a no-op; engines using it must be destroyed first. Not while another thread uses m.
void tl_model_destroy(tl_model *m);

struct tl_model_info {
    const char *arch; // "llama", "qwen2"
    const char *name; // general.name or the file's base name
    const char *path; // as given to tl_model_load
    int64_t n_params; // total weight elements
    int32_t n_vocab;
    int32_t n_ctx_train; // context length the model was trained for
    int32_t n_embd, n_layer, n_head, n_head_kv, n_ff, head_dim;
    const char *weight_type;   // most common weight type name ("F32", "Q8_0", ...)
    const char *chat_template; // tokenizer.chat_template, or NULL
    int32_t bos, eos, eot;     // -1 when absent
};
// Pointers in *out live with m. Thread-safe.
void tl_model_get_info(const tl_model *m, struct tl_model_info *out);

// Tokenizes text with the model's tokenizer (see tl_tokenize in src/tokenizer). OUT: *ids
// (malloc'd, caller frees) and *n_ids. Thread-safe.
tl_status tl_model_tokenize(const tl_model *m, const char *text, size_t len, bool add_special,
                            bool parse_special, int32_t **ids, int64_t *n_ids) TL_WARN_UNUSED;
// Detokenizes into a malloc'd NUL-terminated string (NULL on failure or an out-of-range id).
// Thread-safe.
char *tl_model_detokenize(const tl_model *m, const int32_t *ids, int64_t n, bool render_special);
// The text of one token (space/byte handling undone; may be a partial UTF-8 character). Writes
// up to cap bytes, returns the full length. Thread-safe.
size_t tl_model_token_text(const tl_model *m, int32_t id, char *buf, size_t cap);

// ---- engine ----------------------------------------------------------------------------------
//
// Continuous batching: every tl_engine_step runs one forward pass over the next token of every
// running sequence plus prompt chunks of waiting ones, within a token budget and the free KV
// blocks. Requests join and leave at any step.

typedef struct tl_engine tl_engine;

// KV cache element types. Q8_0: per (position, KV head), blocks of 32 int8 values with one f16
// scale each (the GGUF Q8_0 block, 34 bytes per 32 values: 0.53x the memory of F16); needs a
// model head_dim that is a multiple of 32 (tl_engine_create fails otherwise).
enum tl_kv_type { TL_KV_F32 = 0, TL_KV_F16 = 1, TL_KV_Q8_0 = 2 };

struct tl_engine_config {
    int32_t max_batch_size;      // most running sequences at once (default 64)
    int32_t max_tokens_per_step; // token budget per step: decodes + prefill chunks (default 512)
    int32_t max_seq_len;         // prompt + generated tokens per sequence; 0 = model context
    int32_t kv_block_size;       // positions per KV block (default 16)
    int64_t kv_blocks;           // KV pool size in blocks; 0 = derive from kv_bytes
    int64_t kv_bytes;            // KV pool size in bytes; 0 = default (see tl_engine_create)
    enum tl_kv_type kv_type;     // KV cache element type: F16 (default), F32, Q8_0
    bool prefix_caching;         // reuse computed prompt blocks (default true)
    int32_t n_threads;           // compute threads; 0 = online CPUs
    int32_t max_waiting;         // most waiting (not yet running) requests; 0 = unlimited
    // Prefill tokens at most in a step that also decodes (keeps steps, so inter-token latency
    // and the wait of new arrivals, short); 0 = default; >= max_tokens_per_step: no cap.
    int32_t max_prefill_tokens_decoding;
    // ... unless more prompt tokens than this wait for prefill (a burst of arrivals): then the
    // whole budget goes to prefill, which drains it fastest; 0 = default; -1 = never.
    int32_t prefill_backlog_tokens;
    // The cap grows with the batch: such a step gets at least this many prefill tokens per
    // sequence it decodes. With many sequences decoding the step is long anyway, and holding
    // the prompts behind them back cost throughput and TTFT (64 clients on the 110M model:
    // bench/README.md); at the default 7 and budget, 64 decoding sequences leave the budget
    // uncapped, 8 keep the fixed cap. 0 = default; -1 = the fixed cap only.
    int32_t prefill_tokens_per_decode;
    // Where the steps run: NULL or "cpu" = the CPU; "vulkan" / "vulkan:N" = that Vulkan device
    // (`tokenloom devices` lists them); borrowed for tl_engine_create only.
    const char *device;
};
void tl_engine_config_default(struct tl_engine_config *c); // thread-safe (fills c only)

// Creates an engine over m (borrowed; must outlive the engine). Allocates the whole KV pool
// now. OUT: *out. Thread-safe (engines over one model are independent).
tl_status tl_engine_create(const tl_model *m, const struct tl_engine_config *c,
                           tl_engine **out) TL_WARN_UNUSED;
// Destroys the engine; requests still pending get no further events. Call once, when no other
// thread uses e (after the engine thread has left tl_engine_step).
void tl_engine_destroy(tl_engine *e);

// One entry of OpenAI's logit_bias: added to the token's logit before sampling.
struct tl_logit_bias {
    int32_t token;
    float bias; // [-100, 100]
};
#define TL_MAX_LOGIT_BIAS 1024 // entries per request

struct tl_sampling {
    float temperature;        // 0 = greedy (default 1)
    int32_t top_k;            // 0 = off
    float top_p;              // 1 = off
    float min_p;              // 0 = off
    float repetition_penalty; // 1 = off (divides positive logits of seen tokens, as in CTRL)
    float presence_penalty;   // 0 = off (OpenAI definition)
    float frequency_penalty;  // 0 = off
    uint64_t seed;            // the request's own RNG seed
    int32_t n_logprobs;       // top-N alternatives to report per token (0..20)
    // Added to the logits after the penalties, before temperature and the cuts (greedy too);
    // reported logprobs stay those of the raw logits. Borrowed; tl_engine_submit copies it.
    const struct tl_logit_bias *logit_bias;
    int32_t n_logit_bias; // 0..TL_MAX_LOGIT_BIAS; a repeated token gets the sum
};
void tl_sampling_default(struct tl_sampling *s); // thread-safe (fills s only)

enum tl_finish_reason {
    TL_FINISH_NONE = 0,      // still running
    TL_FINISH_STOP = 1,      // end-of-generation token, stop token or stop string
    TL_FINISH_LENGTH = 2,    // max_tokens or the sequence length limit
    TL_FINISH_CANCELLED = 3, // tl_engine_cancel
    TL_FINISH_DEADLINE = 4,  // the request's timeout passed
    TL_FINISH_ERROR = 5,     // an internal error ended this request only
};
const char *tl_finish_reason_str(enum tl_finish_reason r); // "stop", "length", ...

struct tl_token_logprob {
    int32_t id;
    float logprob;
};

enum tl_event_type {
    TL_EVENT_TOKEN = 1, // a token was generated; text holds the new whole-UTF-8 text (may be empty
                        // while a possible stop string or partial character is held back). A
                        // token that ends generation (end-of-generation or stop token) also
                        // gets its TOKEN event, with no text; it counts in n_generated.
    TL_EVENT_DONE = 2,  // the request ended; text holds any final text; no more events follow
    // Only for requests with prompt_logprobs: prompt token number prompt_pos (token) and its
    // log-probability given the prompt tokens before it, from the log-softmax of the raw logits
    // (no penalties or temperature), with the n_logprobs best alternatives at that position in
    // top. Exactly one per prompt token, in order (prompt_pos 0, 1, ...), all before the first
    // TOKEN event, also when the request is preempted and recomputed. The first prompt token
    // has nothing to predict it: its logprob is NAN and n_top 0. text is empty.
    TL_EVENT_PROMPT_TOKEN = 3,
};

struct tl_event {
    enum tl_event_type type;
    uint64_t request_id;
    const char *text; // borrowed for the duration of the callback; NUL-terminated at text_len
    size_t text_len;
    // TOKEN and PROMPT_TOKEN:
    int32_t token;
    float logprob;                      // log-probability of the token (PROMPT_TOKEN: NAN for
                                        // the first prompt token)
    const struct tl_token_logprob *top; // n_top best alternatives (n_logprobs), borrowed
    int32_t n_top;
    // DONE only:
    enum tl_finish_reason finish;
    int64_t n_prompt_tokens;
    int64_t n_cached_tokens; // prompt tokens served from the prefix cache
    int64_t n_generated;
    int64_t n_preempted; // times this request was preempted and recomputed
    int64_t queue_us;    // submission to first scheduled
    int64_t ttft_us;     // submission to first token
    int64_t total_us;    // submission to done
    const char *error;   // message when finish == TL_FINISH_ERROR, else NULL
    // PROMPT_TOKEN only:
    int64_t prompt_pos; // the token's position in the prompt (0-based)
};

// Called on the thread running tl_engine_step. Must not call back into the engine except
// tl_engine_cancel.
typedef void (*tl_event_fn)(void *user, const struct tl_event *ev);

// Structured output: a compiled grammar the generated text must be a sentence of (tokens whose
// bytes would leave the language are masked out; end-of-generation only where it is complete).
// Compiled from a source by tl_grammar_compile (GBNF, JSON Schema, json_object, regex, choices),
// refcounted, immutable and shareable between requests and engines.
enum tl_grammar_kind {
    TL_GRAMMAR_NONE = 0,
    TL_GRAMMAR_GBNF = 1,        // llama.cpp GBNF text, rule "root"
    TL_GRAMMAR_JSON_SCHEMA = 2, // a JSON Schema document (JSON text)
    TL_GRAMMAR_JSON_OBJECT = 3, // any JSON object (source ignored)
    TL_GRAMMAR_REGEX = 4,       // a regular expression the whole output must match
    TL_GRAMMAR_CHOICE = 5,      // a JSON array of strings: the output is one of them
};
typedef struct tl_grammar tl_grammar;

// Compiles src[0..len) of the given kind (TL_GRAMMAR_JSON_OBJECT ignores src; TL_GRAMMAR_CHOICE
// takes a JSON array of strings). OUT: *out (refcount 1). Errors are TL_ERR_INVALID_ARG with a
// message that names the construct and its position (line:column for GBNF and regexes, a JSON
// pointer for schemas). Grammars are independent of models: one serves every vocabulary.
// Thread-safe.
tl_status tl_grammar_compile(enum tl_grammar_kind kind, const char *src, size_t len,
                             tl_grammar **out) TL_WARN_UNUSED;
// Takes a reference (returns g); thread-safe. Refcounted, so its release is _unref, not _destroy.
tl_grammar *tl_grammar_ref(tl_grammar *g);
// Drops a reference; the last one frees the grammar. NULL is a no-op. Thread-safe.
void tl_grammar_unref(tl_grammar *g);

struct tl_request {
    const char *prompt;           // text, tokenized by the engine, or
    size_t prompt_len;            // 0 = strlen(prompt)
    const int32_t *prompt_tokens; // tokens (used when non-NULL)
    int64_t n_prompt_tokens;
    bool add_special;   // add BOS etc. as the vocabulary says (text prompts)
    bool parse_special; // recognise special-token texts in the prompt
    struct tl_sampling sampling;
    int32_t max_tokens;         // tokens to generate at most (> 0)
    const int32_t *stop_tokens; // extra token ids that end generation (copied)
    int32_t n_stop_tokens;
    const char *const *stop; // stop strings (copied); the stop text is not returned
    int32_t n_stop;
    bool ignore_eos;    // keep going past end-of-generation tokens
    int32_t priority;   // lower value = scheduled first (as vLLM); default 0
    int64_t timeout_ms; // 0 = none; past it the request ends with TL_FINISH_DEADLINE
    // Deliver a TL_EVENT_PROMPT_TOKEN per prompt token (its logprob and sampling.n_logprobs
    // alternatives; OpenAI's echo + logprobs). The prompt is then computed rather than taken
    // from the prefix cache (cached blocks have no logits; its blocks are still published).
    bool prompt_logprobs;
    // The text of control tokens (e.g. "<|python_tag|>", "[TOOL_CALLS]") is part of the output
    // instead of nothing; the server sets it when it parses tool calls out of the reply. Stop
    // and end-of-generation tokens are never part of the text.
    bool render_special;
    tl_grammar *grammar;  // NULL = unconstrained; borrowed (the engine takes a reference)
    tl_event_fn on_event; // required
    void *user;           // passed to on_event
};
// Zeroes r and sets the defaults: tl_sampling_default, max_tokens 16, add_special true.
// Thread-safe (fills r only).
void tl_request_default(struct tl_request *r);

// Submits a request; thread-safe. Validates it (a prompt plus max_tokens that can never fit the
// sequence length or the KV pool gives TL_ERR_TOO_LONG; a full waiting queue TL_ERR_FULL) and
// copies what it needs. On error no event is ever delivered. OUT: *id.
tl_status tl_engine_submit(tl_engine *e, const struct tl_request *r, uint64_t *id) TL_WARN_UNUSED;

// Cancels a request; thread-safe; takes effect at the next step, which frees its KV blocks and
// delivers its DONE event (TL_FINISH_CANCELLED). TL_ERR_NOT_FOUND if it already ended.
tl_status tl_engine_cancel(tl_engine *e, uint64_t id);

// Runs one step (schedule, forward, sample, deliver events). Call from one thread only. Returns
// at once when there is nothing to do. OUT: *n_pending (optional) = requests not yet done.
tl_status tl_engine_step(tl_engine *e, int64_t *n_pending) TL_WARN_UNUSED;

// Blocks until there is work (a submission or cancellation) or timeout_ms passes; returns at
// once while any request is pending (tl_engine_step has work then). Thread-safe.
void tl_engine_wait(tl_engine *e, int timeout_ms);

// Wakes a thread blocked in tl_engine_wait (e.g. for shutdown). Thread-safe.
void tl_engine_wake(tl_engine *e);

#define TL_STEP_HIST_BUCKETS 12

struct tl_engine_stats {
    int64_t n_running, n_waiting;
    int64_t kv_blocks_total, kv_blocks_free, kv_blocks_used, kv_blocks_cached;
    int64_t kv_block_size;
    int64_t prompt_tokens_total; // prompt tokens computed (not cache hits)
    int64_t generation_tokens_total;
    int64_t steps_total;
    int64_t preemptions_total;
    int64_t prefix_queries_total; // prompt tokens looked up in the prefix cache
    int64_t prefix_hits_total;    // of which found
    int64_t finished_total[6];    // by tl_finish_reason
    // Tokens per step histogram: bucket i counts steps with at most step_hist_le[i] tokens.
    int64_t step_hist_le[TL_STEP_HIST_BUCKETS];
    int64_t step_hist_count[TL_STEP_HIST_BUCKETS];
    int64_t step_tokens_sum;
    int64_t step_us_total;    // wall time inside tl_engine_step
    int64_t forward_us_total; // of which the forward pass
    // Work counted from the model's shapes per step (src/model/work.c): int8 ops of
    // quantized-weight matmuls, f32 FLOPs (float matmuls, attention), bytes of weights and of
    // K/V read. Zero for backends without a model.
    double int8_ops_total, flops_total, weight_bytes_total, kv_bytes_total;
    // Batch composition, in the step_hist_le buckets: sequences per step (every step), decode
    // tokens per step (steps that decode), prefill tokens per step (steps that prefill: prompt
    // chunks and recomputation after preemption).
    int64_t seqs_hist_count[TL_STEP_HIST_BUCKETS];
    int64_t seqs_sum;
    int64_t decode_hist_count[TL_STEP_HIST_BUCKETS];
    int64_t decode_tokens_sum;
    int64_t prefill_hist_count[TL_STEP_HIST_BUCKETS];
    int64_t prefill_tokens_sum;
    // The device the steps run on (--device vulkan; all zero on the CPU), since it was opened:
    // queue submissions, host waits, kernel dispatches, host<->device bytes (the weights'
    // upload at load included), device busy time from timestamp queries (0 when the queue has
    // none) and its split by phase (matmul, attention + KV store, the other kernels, copies);
    // device bytes held now by the weights and by the KV pool.
    int64_t gpu_submits_total, gpu_waits_total, gpu_dispatches_total;
    int64_t gpu_upload_bytes_total, gpu_download_bytes_total;
    int64_t gpu_busy_ns_total, gpu_phase_ns_total[4];
    int64_t gpu_weight_bytes, gpu_kv_bytes;
};
// A consistent snapshot; thread-safe.
void tl_engine_get_stats(tl_engine *e, struct tl_engine_stats *out);

#ifdef __cplusplus
}
#endif
#endif // TOKENLOOM_H
