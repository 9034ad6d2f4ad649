/*
 * The OpenAI-compatible API surface: parsing and validating request bodies of
 * /v1/completions and /v1/chat/completions into a tl_oai_params, the error objects, the one
 * mapping from tl_status to an HTTP status, and builders for the response and stream-chunk JSON
 * objects exactly as the OpenAI API defines them.
 *
 * Everything here is pure (no sockets, no engine) so that it is unit-tested directly; the route
 * handlers that use it live in routes.c. Thread-safe.
 */
#ifndef TL_SERVER_OPENAI_H
#define TL_SERVER_OPENAI_H

#include <tokenloom.h>

#include "chat/toolcall.h"
#include "server/chat_template.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

enum tl_oai_kind { TL_OAI_COMPLETION = 0, TL_OAI_CHAT = 1 };

// Upper bounds on what one request may ask for (each gives a 400 naming the field).
#define TL_OAI_MAX_PROMPTS 64   // prompts in one completions request
#define TL_OAI_MAX_N 64         // choices per prompt
#define TL_OAI_MAX_CHOICES 128  // prompts * n
#define TL_OAI_MAX_STOP 4       // stop strings, as OpenAI
#define TL_OAI_MAX_STOP_LEN 256 // bytes per stop string
#define TL_OAI_MAX_LOGPROBS 20  // top alternatives per token
#define TL_OAI_MAX_MESSAGES 4096

// An OpenAI error object plus the HTTP status it goes out with.
struct tl_oai_error {
    int http_status;  // 400, 401, 404, ...
    const char *type; // "invalid_request_error", "server_error", ... (static)
    const char *code; // "invalid_value", "model_not_found", ... or NULL (static)
    char param[64];   // the offending field ("" for none -> null)
    char message[512];
};

// One prompt of a completions request: text (tokenized later by the server) or token ids.
struct tl_oai_prompt {
    const char *text; // borrowed from the JSON document, or NULL
    size_t text_len;
    int32_t *tokens; // owned, or NULL
    int64_t n_tokens;
};

struct tl_oai_params {
    enum tl_oai_kind kind;
    json_t *root;                  // owned: the parsed body; strings below point into it
    const char *model;             // borrowed from root, NULL when absent
    struct tl_oai_prompt *prompts; // owned (completions), n_prompts entries
    int n_prompts;
    struct tl_chat_msg *msgs; // owned array (chat); contents borrowed from root or owned
    int n_msgs;
    char **owned; // owned strings (joined content parts), n_owned entries
    int n_owned;
    int32_t max_tokens; // 0 = not given (completions default 16; chat: the rest
                        // of the context)
    struct tl_sampling sampling;
    bool seed_set;                     // sampling.seed came from the request
    int n;                             // choices per prompt (>= 1)
    const char *stop[TL_OAI_MAX_STOP]; // borrowed from root
    int n_stop;
    bool stream;
    bool include_usage;   // stream_options.include_usage
    bool kserve;          // set by kserve.c: reply in the generate extension's shape
    bool anthropic;       // set by anthropic.c: reply in the Messages API's shape
    bool echo;            // completions: prepend the prompt to the text
    bool logprobs;        // report logprobs (completions: logprobs given; chat:
                          // logprobs true)
    int32_t top_logprobs; // alternatives per token (0..20)
    bool ignore_eos;
    int32_t priority;
    int64_t timeout_ms; // 0 = none
    // Tool calling and logit_bias (openai_fields.c).
    struct tl_logit_bias *logit_bias; // owned, n_logit_bias entries; sampling points at it
    int32_t n_logit_bias;
    const char **tool_names; // owned array of the offered function names (borrowed from root)
    int n_tool_names;
    bool tool_choice_auto;        // parse calls out of the reply (tools given, tool_choice auto)
    bool parallel_tool_calls;     // false: keep only the first call
    bool tool_forced;             // tool_choice "required" or a named function: a call is forced
    const char *tool_forced_name; // the named function (borrowed from tool_names), or NULL
    struct tl_grammar *grammar;   // owned reference: structured output, or NULL
    // With lim->defer_grammar, a grammar the LRU does not hold yet: compiled elsewhere.
    enum tl_grammar_kind grammar_kind; // TL_GRAMMAR_NONE: nothing to compile
    char *grammar_src;                 // owned
    size_t grammar_len;
    const char *grammar_param; // the field it came from (static)
    // /v1/responses: the request context (server/responses.h), owned; NULL on the chat path.
    json_t *responses;
};

// Limits that depend on the model.
struct tl_oai_limits {
    int32_t n_vocab;    // token ids in prompts must be below this
    bool defer_grammar; // leave a grammar not yet compiled in p->grammar_src (see above)
};

// Parses and validates a request body. On success returns true and fills *p (free it with
// tl_oai_params_free); on failure returns false, fills *err (400 naming the field) and leaves
// *p freed. Never crashes on any input: invalid UTF-8, deep nesting and huge numbers are
// rejected by the JSON parser as malformed.
bool tl_oai_parse(enum tl_oai_kind kind, const char *body, size_t len,
                  const struct tl_oai_limits *lim, struct tl_oai_params *p,
                  struct tl_oai_error *err);
// The request's "model" (borrowed from root; NULL when absent or null). False with *err (400)
// when it is not a string or holds a NUL. Whether it names the served model is the server's
// question.
bool tl_oai_model_field(json_t *root, const char **model, struct tl_oai_error *err);
// The same on a body already parsed: root's reference is taken (freed on failure).
bool tl_oai_parse_root(enum tl_oai_kind kind, json_t *root, const struct tl_oai_limits *lim,
                       struct tl_oai_params *p, struct tl_oai_error *err);
// Points jansson's allocations (process-wide) at tl_malloc, so that the JSON the server builds
// fails like the rest under fault injection (parsing excepted: jansson's parser cannot survive
// a failed allocation). The server calls it at creation.
void tl_oai_use_tl_alloc(void);
// Parses a body as JSON (any value); NULL with *err filled (400 naming the syntax error, 503
// when memory ran out).
json_t *tl_oai_load_body(const char *body, size_t len, struct tl_oai_error *err);
void tl_oai_params_free(struct tl_oai_params *p);

// openai_fields.c, for tl_oai_parse: the fields tokenloom refuses (400 naming the field unless
// absent, null or its neutral value); logit_bias; tools / functions / tool_choice /
// function_call / parallel_tool_calls; a message's tool-calling parts (is_tool: role "tool").
bool tl__oai_check_refused(json_t *root, enum tl_oai_kind kind, struct tl_oai_error *err);
bool tl__oai_parse_logit_bias(json_t *root, const struct tl_oai_limits *lim,
                              struct tl_oai_params *p, struct tl_oai_error *err);
bool tl__oai_parse_tools(json_t *root, struct tl_oai_params *p, struct tl_oai_error *err);
bool tl__oai_check_tool_message(json_t *m, size_t i, bool is_tool, struct tl_oai_error *err);
// With p->tool_forced: the grammar of a reply that is a call in the given tool-call syntax (p's
// grammar from the LRU, or its source in p->grammar_src to compile). False with *err (400) when
// the syntax or the functions' parameters cannot be forced, or a structured-output field is
// also given.
bool tl__oai_forced_call_grammar(struct tl_oai_params *p, enum tl_tool_syntax syntax,
                                 struct tl_oai_error *err);

// ---- openai_error.c --------------------------------------------------------------------------

// Fills *err. fmt is printf-style; param may be NULL.
void tl_oai_error_set(struct tl_oai_error *err, int http_status, const char *type, const char *code,
                      const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

// The single place where a tl_status becomes an HTTP status and an OpenAI error type:
// INVALID_ARG, TOO_LONG, UNSUPPORTED -> 400; NOT_FOUND -> 404; FULL -> 429; NOMEM, STATE ->
// 503; anything else -> 500. message is usually tl_last_error().
void tl_oai_error_from_status(struct tl_oai_error *err, tl_status st, const char *message);

// {"error": {"message", "type", "param", "code"}} (new reference).
json_t *tl_oai_error_json(const struct tl_oai_error *err);

// ---- response objects -------------------------------------------------------------------------

// "usage": {"prompt_tokens", "completion_tokens", "total_tokens",
//           "prompt_tokens_details": {"cached_tokens"}} (new reference).
json_t *tl_oai_usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached);

// Logprobs accumulated for one choice, in the completions shape (tokens, token_logprobs,
// top_logprobs, text_offset) or the chat shape (content: [{token, logprob, bytes,
// top_logprobs}]).
struct tl_oai_logprobs {
    enum tl_oai_kind kind;
    json_t *obj;    // owned: the object being built
    int64_t offset; // completions: text offset of the next token
};
bool tl_oai_logprobs_init(struct tl_oai_logprobs *lp, enum tl_oai_kind kind, int64_t offset);
void tl_oai_logprobs_free(struct tl_oai_logprobs *lp);
// Appends one token. text is its text (may be a partial UTF-8 character: it is made valid for
// JSON with U+FFFD, and chat's "bytes" keeps the raw bytes); top/tops_text are the n_top
// alternatives and their texts. logprob may be NAN for "null" (the first echoed prompt
// token: nothing predicts it).
bool tl_oai_logprobs_add(struct tl_oai_logprobs *lp, const char *text, size_t text_len,
                         float logprob, const struct tl_token_logprob *top,
                         const char *const *tops_text, const size_t *tops_len, int n_top);
// Takes the object (the builder is reset); NULL when nothing was added.
json_t *tl_oai_logprobs_take(struct tl_oai_logprobs *lp);

// A JSON string from arbitrary bytes: invalid UTF-8 becomes U+FFFD (new reference; NULL when
// memory ran out, as for every builder here).
json_t *tl_oai_string(const char *s, size_t len);

// One choice of a completion response or chunk: {"index", "text", "logprobs",
// "finish_reason"}. logprobs is stolen (NULL -> null); finish NULL -> null.
json_t *tl_oai_text_choice(int index, const char *text, size_t len, json_t *logprobs,
                           const char *finish);
// One choice of a chat.completion: {"index", "message": {"role": "assistant", "content"},
// "logprobs", "finish_reason"}.
json_t *tl_oai_chat_choice(int index, const char *text, size_t len, json_t *logprobs,
                           const char *finish);
// One choice of a chat.completion.chunk: {"index", "delta": {["role": "assistant",]
// ["content"]}, "logprobs", "finish_reason"}. text NULL -> no content key.
json_t *tl_oai_chat_delta(int index, bool with_role, const char *text, size_t len, json_t *logprobs,
                          const char *finish);
// The envelope {"id", "object", "created", "model", "choices": choices} (choices stolen).
json_t *tl_oai_envelope(const char *id, const char *object, int64_t created, const char *model,
                        json_t *choices);

// The OpenAI name of a finish reason: "stop", "length"; the ends OpenAI has no name for are
// "abort" (cancelled, as vLLM), "timeout" (the request's deadline) and "error".
const char *tl_oai_finish_str(enum tl_finish_reason r);

// ---- the KServe v2 generate extension (kserve.c), built here with the other replies ----------

// The generate extension's JSON: {"model_name", "model_version", "text_output"} plus, when
// finish is set (the whole reply or the last stream event), "finish_reason", "prompt_tokens"
// and "completion_tokens". NULL when memory runs out.
json_t *tl_kserve_output_json(const char *model, const char *text, size_t len, const char *finish,
                              int64_t n_prompt, int64_t n_generated);

#endif
