/*
 * Reasoning output: a reasoning model writes its thinking between an open and a close tag
 * (<think>...</think> for DeepSeek R1 and its distills, QwQ and Qwen3; <|START_THINKING|> ...
 * <|END_THINKING|> for Command R7B). The splitter below takes the model's text as it streams
 * and sends each byte to one of two sinks, reasoning or content, as vLLM's reasoning parsers
 * and DeepSeek's API do (message.reasoning_content beside message.content).
 *
 * Incremental: text that could be the start of a tag is held back until the next piece or the
 * end decides it, so any split of the output into pieces gives the same two texts. Pure, no
 * allocation; one splitter per reply, used by one thread.
 */
#ifndef TL_CHAT_REASONING_H
#define TL_CHAT_REASONING_H

#include <stdbool.h>
#include <stddef.h>

#define TL_REASONING_TAG_MAX 32 // bytes of the longest tag

struct tl_reasoning_tags {
    const char *open;  // static, e.g. "<think>"; NULL = no reasoning syntax
    const char *close; // static, e.g. "</think>"
};

// The tags a chat template's model writes, found in the Jinja source (NULL -> none): "<think>"
// or "</think>" anywhere -> <think>/</think>; "<|START_THINKING|>" -> Command R7B's pair.
struct tl_reasoning_tags tl_reasoning_detect(const char *tmpl);

// Whether a rendered prompt leaves the reply inside the reasoning block: its text, less trailing
// whitespace, ends with the open tag (DeepSeek R1's generation prompt ends in "<think>\n").
bool tl_reasoning_prompt_opens(struct tl_reasoning_tags tags, const char *prompt, size_t len);

// Receives one piece of reasoning (is_reasoning) or content text. Pieces may be empty-free
// fragments of any size; their concatenation per kind is the split result.
typedef void (*tl_reasoning_sink)(void *user, bool is_reasoning, const char *text, size_t len);

struct tl_reasoning_split {
    struct tl_reasoning_tags tags;
    bool inside;                     // between open and close
    bool seen_text;                  // some non-space byte was read (open only counts
                                     // at the start of the reply)
    bool after_close;                // skipping whitespace right after the close tag
    char held[TL_REASONING_TAG_MAX]; // a possible tag prefix waiting for more text
    size_t n_held;
    tl_reasoning_sink sink;
    void *user; // borrowed, passed to sink
};

// start_inside: the prompt already opened the reasoning block (R1's generation prompt ends in
// "<think>\n"), so the reply starts as reasoning. With tags.open NULL everything is content.
void tl_reasoning_init(struct tl_reasoning_split *s, struct tl_reasoning_tags tags,
                       bool start_inside, tl_reasoning_sink sink, void *user);
// Feeds the next piece of the reply.
void tl_reasoning_feed(struct tl_reasoning_split *s, const char *text, size_t len);
// The reply ended: held-back text goes out as what it is.
void tl_reasoning_finish(struct tl_reasoning_split *s);

#endif
