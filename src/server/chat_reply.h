/*
 * A chat choice's reply as the OpenAI API returns it: the model's text parsed into content,
 * reasoning_content and tool_calls (src/chat/toolcall.h), as a whole message (non-streaming)
 * or as chat.completion.chunk deltas (streaming: a call's first delta carries index, id, type
 * and name, the next one its arguments; text before a call stays content).
 *
 * Owned by the event-loop thread, one per chat choice that has something to parse (tools
 * offered with tool_choice auto, or a template with a reasoning syntax).
 */
#ifndef TL_SERVER_CHAT_REPLY_H
#define TL_SERVER_CHAT_REPLY_H

#include "chat/toolcall.h"
#include "core/strbuf.h"

#include <jansson.h>
#include <stdbool.h>

struct tl_srv_chat_reply {
    tl_toolcall_parser *parser; // owned
    bool streaming;
    bool single_call;       // parallel_tool_calls false: calls after the first are dropped
    struct tl_sb content;   // non-streaming: message.content so far
    struct tl_sb reasoning; // non-streaming: message.reasoning_content so far
    json_t *tool_calls;     // owned: message.tool_calls (non-streaming)
    json_t *deltas;         // owned: streaming deltas not yet taken
    int n_calls;            // calls kept
    bool failed;            // out of memory
};

// false on allocation failure. The config's pointers must outlive the reply.
bool tl_srv_chat_reply_init(struct tl_srv_chat_reply *r, const struct tl_toolcall_config *cfg,
                            bool streaming, bool single_call);
void tl_srv_chat_reply_free(struct tl_srv_chat_reply *r);
// The next piece of the model's text; finish at the end. false when out of memory.
bool tl_srv_chat_reply_feed(struct tl_srv_chat_reply *r, const char *text, size_t len);
bool tl_srv_chat_reply_finish(struct tl_srv_chat_reply *r);
// Streaming: the delta objects produced since the last take (a new array, possibly empty).
json_t *tl_srv_chat_reply_take_deltas(struct tl_srv_chat_reply *r);
// Non-streaming: {"role": "assistant", "content", ["reasoning_content"], ["tool_calls"]}
// (content null when there are calls and no text, as OpenAI). New reference.
json_t *tl_srv_chat_reply_message(struct tl_srv_chat_reply *r);
// "tool_calls" when calls were made and the model stopped by itself, else finish unchanged.
const char *tl_srv_chat_reply_finish_str(const struct tl_srv_chat_reply *r, const char *finish);

// ---- the request's side (request.c) ------------------------------------------------------------

struct tl_server;
struct tl_srv_req;

// Gives each choice of a chat request a reply parser when there is something to parse: tools
// offered with tool_choice auto (calls), or a model with a reasoning syntax. false when out of
// memory. Reads the request's tokenized prompts (whether the prompt opened the reasoning).
bool tl_srv_chat_replies_setup(struct tl_server *s, struct tl_srv_req *q);
// Frees r and the struct itself (NULL: nothing).
void tl_srv_chat_reply_destroy(struct tl_srv_chat_reply *r);
// Streaming: feeds the next text (final: the DONE event's text; the reply is finished) and
// returns the chunk choices to send, in order: {"index", "delta", "logprobs", "finish_reason"}
// (a new array, possibly empty; NULL when out of memory). lp (stolen) rides on the first, or
// on an empty delta of its own; finish (non-NULL at the end) on the last one.
json_t *tl_srv_chat_reply_stream(struct tl_srv_chat_reply *r, int index, const char *text,
                                 size_t len, json_t *lp, const char *finish);
// Non-streaming: the whole text parsed into the choice {"index", "message", "logprobs",
// "finish_reason"} (lp stolen); NULL when out of memory.
json_t *tl_srv_chat_reply_whole(struct tl_srv_chat_reply *r, int index, const char *text,
                                size_t len, json_t *lp, const char *finish);

#endif
