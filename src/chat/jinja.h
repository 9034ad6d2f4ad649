/*
 * A Jinja template engine for chat templates: parse once (at model load), render many times
 * (once per request). It implements the part of Jinja2 that Hugging Face chat templates use,
 * configured as transformers configures Jinja2: trim_blocks, lstrip_blocks, loop controls,
 * an immutable sandbox, tojson without ASCII escaping, and the globals raise_exception and
 * strftime_now. Undefined values behave as Jinja2's default Undefined.
 *
 * A template is untrusted input (it comes from a GGUF): parsing bounds nesting depth, rendering
 * bounds recursion, loop iterations, output size, memory and time; every failure is an error
 * message, never a crash.
 *
 * Threads: a parsed template is read-only; any number of threads may render it at once.
 */
#ifndef TL_CHAT_JINJA_H
#define TL_CHAT_JINJA_H

#include <tokenloom.h>

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tl_jinja_template tl_jinja_template;

// Parses template source (len bytes, need not be NUL-terminated). On error returns
// TL_ERR_FORMAT and writes "line L, column C: what" into err (err_size bytes, may be 0).
// OUT: *out, freed with tl_jinja_destroy.
tl_status tl_jinja_parse(const char *src, size_t len, tl_jinja_template **out, char *err,
                         size_t err_size) TL_WARN_UNUSED;
void tl_jinja_destroy(tl_jinja_template *t);

// Whether the template loops over a message's content (for x in message['content'], also through
// a variable set from it): such templates take content as a list of parts, as vLLM detects
// (its "openai" content format); others take a string. Thread-safe.
bool tl_jinja_iterates_content(const tl_jinja_template *t);

struct tl_jinja_limits {
    size_t max_output_bytes; // rendered text (and captured blocks) in all
    size_t max_memory_bytes; // the render's working memory
    int64_t max_steps;       // loop iterations plus macro and function calls
    int max_depth;           // nesting of macro calls and expressions
    int64_t max_time_ms;     // wall clock; 0 = no limit
};

// Limits for rendering a chat prompt (16 MiB of output, 256 MiB of memory, 10^7 steps,
// depth 200, 2 s).
struct tl_jinja_limits tl_jinja_default_limits(void);

enum tl_jinja_error_kind {
    TL_JINJA_OK = 0,
    TL_JINJA_RAISED = 1, // the template called raise_exception(message)
    TL_JINJA_ERROR = 2,  // a runtime error (type error, undefined attribute, a limit...)
};

// Renders with `vars` (a JSON object; each key becomes a template variable, JSON values become
// template values: objects keep their key order) plus `extra`, a second object whose keys are
// added on top (may be NULL). On failure returns TL_ERR_INVALID_ARG, sets *kind and writes the
// message into err: for TL_JINJA_RAISED exactly the template's message. limits NULL = defaults.
// OUT: *out (malloc'd, NUL-terminated, caller frees), *out_len. Thread-safe for a shared t.
tl_status tl_jinja_render(const tl_jinja_template *t, const json_t *vars, const json_t *extra,
                          const struct tl_jinja_limits *limits, char **out, size_t *out_len,
                          enum tl_jinja_error_kind *kind, char *err,
                          size_t err_size) TL_WARN_UNUSED;

#endif
