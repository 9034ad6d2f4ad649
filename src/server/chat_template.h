/*
 * The server's chat template: the Jinja template a chat request is rendered with (src/chat),
 * chosen at startup: --chat-template-file PATH, else --chat-template NAME (a built-in written
 * in Jinja: chatml, llama2, llama3, mistral, zephyr, gemma, phi3), else the GGUF's
 * tokenizer.chat_template, else ChatML (a fallback /v1/models reports). A GGUF template that
 * does not parse is a startup error naming its line and column, unless the user chose another.
 *
 * The template's family (recognised from its turn markers) only picks the end-of-turn texts the
 * server adds as stop tokens; rendering is always the template's own.
 *
 * Thread model: built once at startup, then read-only; renders may run on any thread.
 */
#ifndef TL_SERVER_CHAT_TEMPLATE_H
#define TL_SERVER_CHAT_TEMPLATE_H

#include <tokenloom.h>

#include "chat/jinja.h"

#include <jansson.h>
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

enum tl_chat_role { TL_CHAT_SYSTEM = 0, TL_CHAT_USER = 1, TL_CHAT_ASSISTANT = 2, TL_CHAT_TOOL = 3 };

struct tl_chat_msg {
    enum tl_chat_role role;
    const char *content; // borrowed; may contain NUL bytes
    size_t content_len;
};

// The family of a Jinja chat template by its turn markers (NULL or unrecognised -> ChatML with
// *fallback = true). fallback may be NULL.
enum tl_chat_family tl_chat_detect(const char *tmpl, bool *fallback);

// "chatml", "llama2", "llama3", "mistral", "zephyr", "gemma", "phi3".
const char *tl_chat_family_name(enum tl_chat_family f);

// Parses a family name as printed by tl_chat_family_name; false when unknown.
bool tl_chat_family_from_name(const char *name, enum tl_chat_family *out);

// The texts that end an assistant turn in this family (special tokens such as "<|im_end|>",
// or "</s>"); the server adds them as stop tokens (or stop strings when they are not single
// tokens). Returns the count (at most 2) and fills out[] with static strings.
int tl_chat_stop_texts(enum tl_chat_family f, const char *out[2]);

struct tl_chat_template {
    tl_jinja_template *jinja;   // owned
    enum tl_chat_family family; // for the stop texts
    bool fallback;              // no template given anywhere: ChatML
    char *source_name;          // owned: "gguf", a built-in's name ("chatml"), "file:PATH"
    char *bos_token;            // owned: the vocabulary's BOS text ("" when none)
    char *eos_token;            // owned
};

// Chooses, loads and parses the template (see the file comment). name and file may be NULL or
// empty; gguf_src is the GGUF's template or NULL; bos/eos the vocabulary's texts (NULL = "").
// On failure returns TL_ERR_INVALID_ARG / TL_ERR_IO / TL_ERR_FORMAT with tl_last_error() set
// ("chat template (gguf): line L, column C: ..."). OUT: *t, freed with tl_chat_template_free.
tl_status tl_chat_template_init(struct tl_chat_template *t, const char *name, const char *file,
                                const char *gguf_src, const char *bos,
                                const char *eos) TL_WARN_UNUSED;
void tl_chat_template_free(struct tl_chat_template *t);

// Renders a chat request body (its messages, tools or legacy functions, documents,
// add_generation_prompt (default true), continue_final_message, chat_template_kwargs).
// TL_ERR_INVALID_ARG with tl_last_error() set when a field has the wrong type or the template
// fails (raise_exception: exactly its message; other errors: "chat template error: ..."); the
// server answers 400. *param (may be NULL) gets the offending field's name or "messages".
// OUT: *out (malloc'd, caller frees), *out_len. Thread-safe.
tl_status tl_chat_template_apply(const struct tl_chat_template *t, const json_t *body, char **out,
                                 size_t *out_len, const char **param) TL_WARN_UNUSED;

#endif
