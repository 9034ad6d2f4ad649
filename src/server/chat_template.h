/*
 * Chat templates rendered in C. A GGUF carries its chat template as Jinja source
 * (tokenizer.chat_template); rather than run a Jinja engine we recognise which well-known
 * family the template belongs to by its marker strings and render that family's format here.
 * Unknown or absent templates fall back to ChatML, and the server says so in /v1/models.
 *
 * Pure functions; thread-safe.
 */
#ifndef TL_SERVER_CHAT_TEMPLATE_H
#define TL_SERVER_CHAT_TEMPLATE_H

#include <tokenloom.h>

#include <stdbool.h>
#include <stddef.h>

enum tl_chat_family {
    TL_CHAT_CHATML = 0,  // <|im_start|>role\n...<|im_end|>\n (Qwen, many fine-tunes)
    TL_CHAT_LLAMA2 = 1,  // [INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST]
    TL_CHAT_LLAMA3 = 2,  // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
    TL_CHAT_MISTRAL = 3, // [INST] ... [/INST]answer</s>
    TL_CHAT_ZEPHYR = 4,  // <|user|>\n...</s>\n<|assistant|>\n
    TL_CHAT_GEMMA = 5,   // <start_of_turn>user\n...<end_of_turn>\n<start_of_turn>model\n
    TL_CHAT_PHI3 = 6,    // <|user|>\n...<|end|>\n<|assistant|>\n
    TL_CHAT_COUNT = 7,
};

enum tl_chat_role { TL_CHAT_SYSTEM = 0, TL_CHAT_USER = 1, TL_CHAT_ASSISTANT = 2 };

struct tl_chat_msg {
    enum tl_chat_role role;
    const char *content; // borrowed; may contain NUL bytes
    size_t content_len;
};

// The family of a Jinja chat template (NULL or unrecognised -> ChatML with *fallback = true).
// fallback may be NULL.
enum tl_chat_family tl_chat_detect(const char *tmpl, bool *fallback);

// "chatml", "llama2", "llama3", "mistral", "zephyr", "gemma", "phi3".
const char *tl_chat_family_name(enum tl_chat_family f);

// Parses a family name as printed by tl_chat_family_name; false when unknown.
bool tl_chat_family_from_name(const char *name, enum tl_chat_family *out);

// Renders the conversation followed by the prompt for the assistant's next turn. The text does
// not start with the BOS token: tokenize it with add_special (the vocabulary adds BOS where it
// wants one) and parse_special (the turn markers are special tokens). TL_ERR_INVALID_ARG when
// there is no message. OUT: *out (malloc'd, NUL-terminated, caller frees) and *out_len.
tl_status tl_chat_render(enum tl_chat_family f, const struct tl_chat_msg *msgs, int n_msgs,
                         char **out, size_t *out_len) TL_WARN_UNUSED;

// The texts that end an assistant turn in this family (special tokens such as "<|im_end|>",
// or "</s>"); the server adds them as stop tokens (or stop strings when they are not single
// tokens). Returns the count (at most 2) and fills out[] with static strings.
int tl_chat_stop_texts(enum tl_chat_family f, const char *out[2]);

#endif
