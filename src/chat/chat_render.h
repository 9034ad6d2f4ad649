/*
 * Rendering a conversation through a chat template, with the variables a template expects as
 * Hugging Face transformers and vLLM pass them: messages, tools, documents,
 * add_generation_prompt, bos_token, eos_token, plus the request's chat_template_kwargs (e.g.
 * enable_thinking) on top, and vLLM's continue_final_message (the output is cut right after the
 * final message's content, so the model continues it).
 *
 * Messages arrive in the OpenAI form and are adapted as vLLM adapts them: for templates that
 * expect string content a content list of text parts becomes the parts' texts joined with
 * "\n"; for templates that loop over a message's content (vLLM's "openai" content format,
 * detected on the parsed template) string content becomes one text part. Each tool call's
 * function.arguments (a JSON string in the API) becomes the parsed
 * JSON value (templates apply tojson to it or iterate over it). Arguments that are not valid
 * JSON stay strings.
 *
 * Built-in templates: the families tokenloom knew before it had a Jinja engine (chatml, llama2,
 * llama3, mistral, zephyr, gemma, phi3), written as Jinja.
 *
 * Thread-safe: a parsed template is shared read-only; every call has its own state.
 */
#ifndef TL_CHAT_CHAT_RENDER_H
#define TL_CHAT_CHAT_RENDER_H

#include "chat/jinja.h"

struct tl_chat_vars {
    const json_t *messages;      // borrowed: the OpenAI "messages" list
    const json_t *tools;         // borrowed, NULL = none (the template sees none)
    const json_t *documents;     // borrowed, NULL = none
    const json_t *kwargs;        // borrowed: chat_template_kwargs (an object) or NULL
    const char *bos_token;       // NULL = ""
    const char *eos_token;       // NULL = ""
    bool add_generation_prompt;  // open the assistant's turn at the end
    bool continue_final_message; // cut after the last message's content (no turn end)
};

// Renders v through t. Errors as tl_jinja_render (kind TL_JINJA_RAISED carries the template's
// raise_exception message; TL_ERR_INVALID_ARG also when both add_generation_prompt and
// continue_final_message are set, or messages is not a list). OUT: *out (malloc'd,
// NUL-terminated, caller frees) and *out_len.
tl_status tl_chat_render_vars(const tl_jinja_template *t, const struct tl_chat_vars *v, char **out,
                              size_t *out_len, enum tl_jinja_error_kind *kind, char *err,
                              size_t err_size) TL_WARN_UNUSED;

// The Jinja source of a built-in template ("chatml", "llama2", "llama3", "mistral", "zephyr",
// "gemma", "phi3"), or NULL when the name is unknown. Static storage.
const char *tl_chat_builtin_source(const char *name);

// The built-in names, NULL-terminated (for messages listing the choices).
extern const char *const tl_chat_builtin_names[];

#endif
