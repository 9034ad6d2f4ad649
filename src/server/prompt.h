/*
 * The prompts of a generating request, from parsed parameters to token lists: chat messages
 * rendered with the model's template, text tokenized, token-id prompts taken as given, the
 * echo text kept, and every prompt's length plus max_tokens checked against the context (so
 * that the 400 can say how many tokens each part asked for).
 *
 * Threads: the event-loop thread.
 */
#ifndef TL_SERVER_PROMPT_H
#define TL_SERVER_PROMPT_H

#include "server/openai.h"
#include "server/state.h"

#include <stddef.h>
#include <stdint.h>

struct tl_srv_prompts {
    int n;             // 1 for chat, the request's prompt count for completions
    int32_t **tokens;  // owned: n token lists
    int64_t *n_tokens; // owned: their lengths
    char **text;       // owned (echo): each prompt's text, or NULL
    size_t *text_len;  // owned
};

// Fills *out from p (token-id prompts are taken out of p). On failure fills *err (400 for the
// request's faults, 503 when memory ran out) and returns false; free *out in both cases.
bool tl_srv_prompts_prepare(struct tl_server *s, struct tl_oai_params *p,
                            struct tl_srv_prompts *out, struct tl_oai_error *err);
void tl_srv_prompts_free(struct tl_srv_prompts *pr);

// The max_tokens of a prompt of n_prompt tokens: the request's, else 16 (completions) or the
// rest of the context (chat).
int32_t tl_srv_max_tokens(const struct tl_server *s, const struct tl_oai_params *p,
                          int64_t n_prompt);

// False (and *err filled: 400 context_length_exceeded naming param) when a text of len bytes
// cannot fit the context whatever its tokens: tokenizing runs on the loop, so megabytes that
// can never fit are refused before they stall every client.
bool tl_srv_text_fits(const struct tl_server *s, size_t len, const char *param,
                      struct tl_oai_error *err);

#endif
