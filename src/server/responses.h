/*
 * The Responses API (POST /v1/responses, GET and DELETE /v1/responses/{id}) on the chat path.
 *
 * A Responses body is translated into the chat-completions body an OpenAI client would write
 * (responses.c): instructions become the system message, input items become messages
 * (function_call items an assistant message's tool_calls, function_call_output items tool
 * messages), a previous response's conversation is prepended, tools are re-wrapped and
 * text.format becomes response_format. That body then takes the chat path unchanged; what
 * differs is only the framing of the reply: the chat completion is turned into a Response
 * object (responses_reply.c) and a stream's chat chunks into the semantic events
 * (responses_stream.c). Finished responses are kept (responses_stored.c), bounded by count,
 * bytes and age (responses_store.c), so that previous_response_id continues a conversation.
 *
 * The request context (the "ctx" object below) is a JSON object that rides with the chat
 * request in tl_oai_params.responses: the Response fields to echo (model, instructions, tools,
 * tool_choice, text, temperature, top_p, max_output_tokens, store, previous_response_id,
 * metadata...), "id" and "created_at", and "conversation": every input item of the chain so
 * far (the previous responses' inputs and outputs, then this request's input).
 *
 * Threads: the event-loop thread (the store is not locked).
 */
#ifndef TL_SERVER_RESPONSES_H
#define TL_SERVER_RESPONSES_H

#include "server/openai.h"

#include <event2/http.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tl_server;

// previous_response_id chains deeper than this are refused (400).
#define TL_RESP_MAX_DEPTH 256

// ---- responses_store.c: finished responses, bounded ------------------------------------------

struct tl_resp_store;

// max_entries > 0; max_bytes: the compact JSON of what is kept; max_age_us: a response older
// than this is gone. NULL when out of memory.
struct tl_resp_store *tl_resp_store_create(int max_entries, size_t max_bytes, int64_t max_age_us);
void tl_resp_store_destroy(struct tl_resp_store *st);
// Keeps response and conversation (references taken) under id, replacing an entry of the same
// id, then evicts the oldest entries until the bounds hold. False (nothing kept) when the entry
// alone exceeds max_bytes or memory ran out.
bool tl_resp_store_put(struct tl_resp_store *st, const char *id, json_t *response,
                       json_t *conversation, int depth, int64_t now_us);
// The entry under id (borrowed references, valid until the next put/delete), after dropping
// what aged out. False when unknown, evicted or expired.
bool tl_resp_store_get(struct tl_resp_store *st, const char *id, int64_t now_us, json_t **response,
                       json_t **conversation, int *depth);
bool tl_resp_store_delete(struct tl_resp_store *st, const char *id);
int tl_resp_store_count(const struct tl_resp_store *st);
size_t tl_resp_store_bytes(const struct tl_resp_store *st);

// ---- responses.c: the request -----------------------------------------------------------------

// Translates a Responses body (borrowed) into a chat body (*chat, new) and the request context
// (*ctx, new). False with *err (400 naming the field, 404 for an unknown previous response).
bool tl_srv_resp_translate(struct tl_server *s, json_t *body, json_t **chat, json_t **ctx,
                           struct tl_oai_error *err);
// Renames the chat fields a chat-path error names to the Responses fields they came from.
void tl_srv_resp_fix_error(struct tl_oai_error *err);

// ---- responses_stored.c: what is kept, and the routes that read it ----------------------------

// Keeps a finished response (when its ctx asks to be stored).
void tl_srv_resp_keep(struct tl_server *s, json_t *ctx, json_t *response);
// GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items.
void tl_srv_h_response_get(struct tl_server *s, struct evhttp_request *r, int64_t t0, json_t *body);
void tl_srv_h_response_delete(struct tl_server *s, struct evhttp_request *r, int64_t t0,
                              json_t *body);
void tl_srv_h_response_input_items(struct tl_server *s, struct evhttp_request *r, int64_t t0,
                                   json_t *body);

// ---- responses_reply.c: the Response object ---------------------------------------------------

// The Response object around output (stolen): status "completed", "incomplete" (reason) or
// "failed" (error message), usage from the token counts. NULL when out of memory.
json_t *tl_srv_resp_object(const json_t *ctx, const char *status, const char *reason,
                           const char *error, json_t *output, int64_t n_in, int64_t n_out,
                           int64_t n_cached);
// A fresh item id with the given prefix ("msg", "fc", "rs").
void tl_srv_resp_item_id(char *out, size_t size, const char *prefix);
// The status and incomplete reason of a chat finish reason.
void tl_srv_resp_status(const char *finish, const char **status, const char **reason);
// A chat.completion (borrowed) as a Response: its first choice's reasoning, text and tool calls
// as output items, its usage. NULL when out of memory.
json_t *tl_srv_resp_from_chat(const json_t *ctx, const json_t *completion);

// ---- responses_stream.c: chat chunks into the semantic events ----------------------------------

struct tl_resp_stream;

struct tl_resp_stream *tl_resp_stream_create(json_t *ctx); // ctx: reference taken
void tl_resp_stream_destroy(struct tl_resp_stream *st);
// The events (a new array of event objects, each with "type" and "sequence_number") that one
// chat.completion.chunk (stolen) brings. NULL when out of memory.
json_t *tl_resp_stream_chunk(struct tl_resp_stream *st, json_t *chunk);
// The closing events (open items done, then response.completed / .incomplete / .failed), with
// the final Response in *final (new reference, for the store). NULL when out of memory.
json_t *tl_resp_stream_end(struct tl_resp_stream *st, int64_t n_in, int64_t n_out, int64_t n_cached,
                           json_t **final);

#endif
