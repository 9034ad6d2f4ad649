/*
 * Internals shared by the files of a generating request's life (request.h is the server's view
 * of it):
 *   request_events.c   the engine's events on the loop (TOKEN, PROMPT_TOKEN, DONE)
 *   request_reply.c    the end: a stream's last events, or the whole JSON / KServe reply
 *   request.c          start (prompts, bounds, submission), free, abandon after shutdown
 *   request_sse.c      a stream's chunks and events
 *   request_logprobs.c token texts into logprobs
 *   request_cancel.c   a vanished client, the unsent bound, the shutdown deadline
 * Each calls only the files listed below it (no circle).
 *
 * THREADS: the event-loop thread, every function here.
 */
#ifndef TL_SERVER_REQUEST_IMPL_H
#define TL_SERVER_REQUEST_IMPL_H

#include "core/strbuf.h"
#include "server/anthropic.h"
#include "server/request.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// ---- request.c -------------------------------------------------------------------------------

// Unlinks and frees q (every choice's message, text, reply parser, logprobs and error); wakes a
// draining server's check when it was the last request.
void tl__req_free(struct tl_srv_req *q);

// ---- request_logprobs.c ----------------------------------------------------------------------

// Adds one token (and its alternatives) to a logprobs builder. False when memory ran out.
bool tl__req_add_logprob(struct tl_server *s, struct tl_oai_logprobs *lp, int32_t id, float logprob,
                         const struct tl_token_logprob *top, int n_top);
// Whether the engine reports the prompt's logprobs (echo + logprobs on /v1/completions).
bool tl__req_prompt_logprobs(const struct tl_srv_req *q);

// ---- request_sse.c ---------------------------------------------------------------------------

// The object name of q's chunks ("chat.completion.chunk", "text_completion").
const char *tl__req_chunk_object(const struct tl_srv_req *q);
// The envelope of a chunk around choice (stolen). NULL when memory ran out.
json_t *tl__req_chunk(struct tl_srv_req *q, json_t *choice);
// Memory ran out building choice c's output: it is lost (cancelled when streaming).
void tl__req_lose(struct tl_srv_req *q, struct tl_srv_choice *c);
// Writes one SSE event of obj (stolen; NULL = memory ran out, c lost). False when not sent.
bool tl__req_sse_send(struct tl_srv_req *q, struct tl_srv_choice *c, json_t *obj);
// Writes each event of a /v1/responses stream (steals evs; NULL = memory ran out, c lost) as an
// SSE event named by its type. False when not all were sent.
bool tl__req_sse_events(struct tl_srv_req *q, struct tl_srv_choice *c, json_t *evs);
// The pre-framed end of a stream, and the error event when its last chunk could not be built.
void tl__req_sse_done(struct tl_srv_req *q);
void tl__req_sse_oom(struct tl_srv_req *q);
// The Messages API's error event, when its last events could not be built (anthropic_reply.c).
void tl__req_anth_oom(struct tl_srv_req *q);
// Sends the framed Messages events in sb (ok false: memory ran out, c is lost); frees sb.
void tl__req_send_framed(struct tl_srv_req *q, struct tl_srv_choice *c, struct tl_sb *sb, bool ok);
// Sends each choice object of a parsed chat reply (chat_reply.c) as one chunk; steals list.
void tl__req_send_choices(struct tl_srv_req *q, struct tl_srv_choice *c, json_t *list);
// Sends the SSE headers and each choice's opening chunk (chat: the role; echo: the prompt).
void tl__req_start_stream(struct tl_server *s, struct tl_srv_req *q);

// ---- request_reply.c -------------------------------------------------------------------------

// The last choice is done: ends the reply (stream end, or the whole reply or its error) and
// frees q.
void tl__req_finish(struct tl_srv_req *q);

// ---- request_cancel.c ------------------------------------------------------------------------

// Cancels every submitted choice not yet done in the engine.
void tl__req_cancel_choices(struct tl_srv_req *q);
// The client vanished: counted once, its choices cancelled.
void tl__req_client_gone(struct tl_srv_req *q);
// The connection's close callback (arg = q).
void tl__req_on_conn_close(void *arg);
// Stops watching q's connection.
void tl__req_unwatch(struct tl_srv_req *q);
// A client that left more than max_unsent_bytes unread counts as gone.
void tl__req_check_unsent(struct tl_srv_req *q, size_t unsent);

#endif
