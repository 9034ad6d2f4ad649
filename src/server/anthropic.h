/*
 * The Anthropic Messages API (POST /v1/messages, POST /v1/messages/count_tokens) on the same
 * engine as /v1/chat/completions.
 *
 * A Messages request is checked field by field and translated into the equivalent OpenAI chat
 * body (system, messages with text / tool_use / tool_result / thinking blocks, tools,
 * tool_choice, max_tokens, stop_sequences, sampling, thinking as the template's
 * enable_thinking), which then takes the chat path unchanged: the same parser, chat template,
 * tool-call and reasoning parsers, grammars for a forced call, engine submission and
 * batching. Only the reply differs: anthropic_reply.c writes the Message object or the
 * Messages event stream, and errors go out in Anthropic's shape
 * {"type": "error", "error": {"type", "message"}, "request_id"} for every path under
 * /v1/messages.
 *
 * Every field the API defines is implemented, accepted because it cannot change the output
 * (metadata.user_id, cache_control: the prefix cache is automatic), or refused with a 400
 * naming it; an unknown field is a 400 too, as Anthropic's own API answers.
 *
 * anthropic.c (the request's fields, the handlers, errors) and anthropic_messages.c (system and
 * messages) are pure but for the two route handlers; anthropic_reply.c (reply side) runs on the
 * event-loop thread.
 */
#ifndef TL_SERVER_ANTHROPIC_H
#define TL_SERVER_ANTHROPIC_H

#include "core/strbuf.h"
#include "server/openai.h"

#include <event2/http.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

// ---- request side (anthropic.c) ----------------------------------------------------------------

// Translates a Messages request body (borrowed) into an OpenAI chat body (*chat, a new
// reference). count_only: the body of /v1/messages/count_tokens (no max_tokens, sampling or
// stream). False with *err (400 naming the field, or 503 when memory ran out).
bool tl_anth_translate(json_t *body, bool count_only, json_t **chat, struct tl_oai_error *err);

// ---- internal to the request side (anthropic.c, anthropic_messages.c) ----------------------------

// system + messages -> chat["messages"] (and "continue_final_message" for a prefill).
bool tl__anth_translate_messages(json_t *body, json_t *chat, struct tl_oai_error *err);
// A 400 invalid_request_error naming param (printf-style message); returns false.
bool tl__anth_bad(struct tl_oai_error *err, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
// A 503: memory ran out while translating; returns false.
bool tl__anth_no_memory(struct tl_oai_error *err);
// Whether object o holds only the keys listed (NULL-terminated) or harmless ones (accepted, of
// no effect); else a 400 naming the first other key as "where.key".
bool tl__anth_only_keys(json_t *o, const char *where, const char *const *keys,
                        const char *const *harmless, struct tl_oai_error *err);
// cache_control (absent, or {"type": "ephemeral", ...}: of no effect, the prefix cache is
// automatic); else a 400 naming where.
bool tl__anth_cache_control(json_t *v, const char *where, struct tl_oai_error *err);
static inline bool tl__anth_absent(const json_t *v)
{
    return !v || json_is_null(v);
}
// v is a JSON string equal to lit (strings may hold NUL: compared with their length).
static inline bool tl__anth_str_is(const json_t *v, const char *lit)
{
    return json_is_string(v) && json_string_length(v) == strlen(lit) &&
           !memcmp(json_string_value(v), lit, json_string_length(v));
}
// A string without NUL (names, ids, types).
static inline bool tl__anth_plain(const json_t *v)
{
    return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v);
}

struct tl_server;
// The route handlers (routes.c registers them; root is the parsed body).
void tl_srv_h_messages(struct tl_server *s, struct evhttp_request *r, int64_t t0, json_t *root);
void tl_srv_h_count_tokens(struct tl_server *s, struct evhttp_request *r, int64_t t0, json_t *root);

// ---- errors ------------------------------------------------------------------------------------

// Whether a request's path is under /v1/messages (its errors take Anthropic's shape).
bool tl_anth_is_path(struct evhttp_request *r);
// {"type": "error", "error": {"type", "message"}, "request_id"} with the error type Anthropic
// gives the HTTP status (400 invalid_request_error, 401 authentication_error, 403
// permission_error, 404 not_found_error, 413 request_too_large, 429 rate_limit_error, 503
// overloaded_error, other 5xx api_error). New reference; NULL when memory ran out.
json_t *tl_anth_error_json(const struct tl_oai_error *err, const char *request_id);

// ---- reply side (anthropic_reply.c) ------------------------------------------------------------

// The stream's content blocks as they open and close (pure: OpenAI-shaped deltas of
// chat_reply.c in, framed Messages events out).
enum tl_anth_block { TL_ANTH_NONE = 0, TL_ANTH_TEXT, TL_ANTH_THINKING, TL_ANTH_TOOL_USE };
struct tl_anth_stream {
    enum tl_anth_block open; // the block being written
    int index;               // its index (the next block's when none is open)
};
// Appends to out the events for one chat_reply delta ({"content"}, {"reasoning_content"} or
// {"tool_calls": [...]}); false when memory ran out.
bool tl_anth_stream_delta(struct tl_anth_stream *st, json_t *delta, struct tl_sb *out);
// Appends the content_block_stop of the open block, if any.
void tl_anth_stream_close(struct tl_anth_stream *st, struct tl_sb *out);
// Appends one framed SSE event: "event: NAME\ndata: <compact JSON of obj>\n\n" (obj stolen;
// NULL: memory ran out). False, and out marked failed, when memory ran out.
bool tl_anth_sse(struct tl_sb *out, const char *name, json_t *obj);
// "toolu_..." for a call id ("call_..." and the model's own ids get the prefix). malloc'd.
char *tl_anth_tool_id(const char *call_id);

// One choice's Messages state (per request: the API has no n).
struct tl_srv_anth;
struct tl_srv_req;
struct tl_srv_choice;
struct tl_event;

// Gives each choice of an Anthropic request its state; false when out of memory.
bool tl_srv_anth_setup(struct tl_srv_req *q);
void tl_srv_anth_destroy(struct tl_srv_anth *a);
// The stream's first events (message_start, ping) into out.
void tl_srv_anth_stream_start(struct tl_srv_req *q, struct tl_srv_choice *c, struct tl_sb *out);
// A TOKEN event of choice c: remembers what stop detection needs; streaming, appends the
// events of its text to out. False when memory ran out.
bool tl_srv_anth_token(struct tl_srv_req *q, struct tl_srv_choice *c, const struct tl_event *ev,
                       struct tl_sb *out);
// The DONE event, streaming: the last text's events, the blocks closed, message_delta (stop
// reason, usage) and message_stop, or an error event when the choice failed. c->finish,
// c->n_prompt and c->n_generated are set. False when memory ran out.
bool tl_srv_anth_done(struct tl_srv_req *q, struct tl_srv_choice *c, const struct tl_event *ev,
                      struct tl_sb *out);
// The whole Message object of a non-streaming request (NULL when memory ran out).
json_t *tl_srv_anth_message(struct tl_srv_req *q, int64_t n_prompt, int64_t n_generated);

#endif
