/*
 * Structured output: grammars compiled from GBNF, JSON Schema, json_object, a regular
 * expression or a list of choices, and per-request matchers that say which tokens may come next.
 *
 * A compiled tl_grammar is a context-free grammar over bytes (every code point class is expanded
 * into UTF-8 byte sequences at compile time), checked for left recursion and empty languages.
 * It is immutable, refcounted, and shared by every request with the same source (the LRU in
 * cache.c); its per-vocabulary mask cache is internally locked. A tl_gmatcher is one request's
 * parse state (a set of pushdown stacks); it belongs to one thread at a time. A tl_gvocab is the
 * vocabulary as a byte trie, built once per engine and read-only afterwards.
 */
#ifndef TL_GRAMMAR_H
#define TL_GRAMMAR_H

#include <tokenloom.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// ---- compiling ------------------------------------------------------------------------------

struct tl_grammar;

// Bounds on what a source may compile to; a larger result is an error naming the bound.
#define TL_GRAMMAR_MAX_SOURCE_BYTES (4u << 20)
#define TL_GRAMMAR_MAX_ELEMS (1u << 20)
// A compilation that runs longer is stopped: an error naming the limit (a 400), not a stall.
#define TL_GRAMMAR_COMPILE_MAX_MS                                                                  \
    1000 // the default limit; tl_grammar_set_compile_limit_ms changes it

// The compile-time limit for every later compilation, in ms (process-wide; `serve
// --grammar-compile-ms`). Values below 1 are taken as 1.
void tl_grammar_set_compile_limit_ms(int ms);

// tl_grammar_compile, tl_grammar_ref and tl_grammar_unref are public (include/tokenloom.h).
// As tl_grammar_compile, through a process-wide LRU keyed by (kind, source): 32 grammars at
// most. Errors are not cached. Thread-safe.
tl_status tl_grammar_get(enum tl_grammar_kind kind, const char *src, size_t len,
                         struct tl_grammar **out) TL_WARN_UNUSED;

// Compiles a JSON Schema (or json_object when schema_json is NULL) or a regex into GBNF text;
// tl_grammar_compile parses that text. OUT: *gbnf (malloc'd). Used by tests to show the grammar.
tl_status tl_grammar_schema_to_gbnf(const char *schema_json, size_t len,
                                    char **gbnf) TL_WARN_UNUSED;
tl_status tl_grammar_regex_to_gbnf(const char *re, size_t len, char **gbnf) TL_WARN_UNUSED;

// Reads the structured-output fields of a request object (response_format, grammar,
// json_schema, guided_json / guided_regex / guided_choice / guided_grammar,
// structured_outputs; see fields.c) and compiles them through tl_grammar_get. OUT: *out (a
// reference; NULL when the object asks for no constraint). On failure *param names the field
// (static) and the message says what is wrong. Thread-safe.
struct json_t;
tl_status tl_grammar_from_fields(struct json_t *obj, struct tl_grammar **out,
                                 const char **param) TL_WARN_UNUSED;
// The same fields, checked but not compiled: OUT: *kind (TL_GRAMMAR_NONE when the object asks
// for no constraint), *src (malloc'd, NUL-terminated; NULL for json_object), *len, *param (the
// field, static). Errors as tl_grammar_from_fields. Thread-safe.
tl_status tl_grammar_fields_source(struct json_t *obj, enum tl_grammar_kind *kind, char **src,
                                   size_t *len, const char **param) TL_WARN_UNUSED;
// The compiled grammar of (kind, source) if the LRU holds it (a reference), else NULL. Never
// compiles. Thread-safe.
struct tl_grammar *tl_grammar_lookup(enum tl_grammar_kind kind, const char *src, size_t len);

// ---- forced tool calls (toolcall_gbnf.c) -----------------------------------------------------

// How a chat template's model writes tool calls, for a grammar that forces one: the reply is
// before, then each call as each_before + the call object + each_after (calls separated by sep),
// then after. The call object is {"name": ..., args_key: {...}}.
struct tl_gcall_form {
    const char *before, *after;
    const char *each_before, *each_after;
    const char *sep;
    const char *args_key; // "arguments" or "parameters"
};

// GBNF text for a reply that is a call (several with parallel) of one of functions (a JSON
// array of {"name", "parameters"} objects, as in OpenAI's tools[i].function), its arguments
// valid against that function's parameters schema. OUT: *gbnf (malloc'd). Errors (a schema
// keyword not supported, $defs in conflict) are TL_ERR_INVALID_ARG naming the problem.
tl_status tl_grammar_tool_call_gbnf(const struct tl_gcall_form *form, struct json_t *functions,
                                    bool parallel, char **gbnf) TL_WARN_UNUSED;

// ---- compiling off the caller's thread (compile_worker.c) -----------------------------------

struct tl_gworker;

// One compilation: the source in, the grammar (or the error) out.
struct tl_gjob {
    enum tl_grammar_kind kind;
    char *src; // owned, NUL-terminated
    size_t len;
    void *user;                 // the submitter's
    struct tl_grammar *grammar; // result: a reference, NULL on error
    tl_status rc;               // result
    char error[512];            // result: the message when rc != TL_OK
    struct tl_gjob *next;       // list link
};

// A job compiling src[0..len) (copied). NULL on allocation failure.
struct tl_gjob *tl_gjob_new(enum tl_grammar_kind kind, const char *src, size_t len, void *user);
void tl_gjob_free(struct tl_gjob *j); // NULL is a no-op

// Starts the worker thread. OUT: *out.
tl_status tl_gworker_create(struct tl_gworker **out) TL_WARN_UNUSED;
// Readable (an eventfd) when finished jobs wait to be taken.
int tl_gworker_fd(const struct tl_gworker *w);
// Hands j to the worker; it comes back through tl_gworker_take_done, compiled.
void tl_gworker_submit(struct tl_gworker *w, struct tl_gjob *j);
// Resets the eventfd, then takes every finished job (oldest first, linked by next; NULL when
// none).
struct tl_gjob *tl_gworker_take_done(struct tl_gworker *w);
// Stops the worker (a compilation in progress ends first, within its time limit). The jobs it
// still holds, compiled or not, go to *left (linked by next) or are freed when left is NULL.
void tl_gworker_destroy(struct tl_gworker *w, struct tl_gjob **left);

// ---- the vocabulary as a trie ---------------------------------------------------------------

struct tl_gvocab;

// The bytes a token produces in the output (len 0..cap), or -1 when the token may never be
// produced by a grammar (control, unknown, unused tokens).
typedef int (*tl_gvocab_bytes_fn)(void *ctx, int32_t id, char *buf, int cap);
typedef bool (*tl_gvocab_eog_fn)(void *ctx, int32_t id);

// Builds the trie of every token's bytes. NULL on allocation failure (error set).
struct tl_gvocab *tl_gvocab_create(int32_t n_vocab, tl_gvocab_bytes_fn bytes,
                                   tl_gvocab_eog_fn is_eog, void *ctx);
void tl_gvocab_destroy(struct tl_gvocab *v); // NULL is a no-op
int32_t tl_gvocab_n_vocab(const struct tl_gvocab *v);

// ---- matching -------------------------------------------------------------------------------

struct tl_gmatcher;

// A matcher at the start of g's language (takes a reference on g). NULL on allocation failure.
struct tl_gmatcher *tl_gmatcher_create(struct tl_grammar *g);
void tl_gmatcher_destroy(struct tl_gmatcher *m); // NULL is a no-op

// Advances over bytes; returns false (state unchanged) when they are not a valid continuation.
bool tl_gmatcher_accept_bytes(struct tl_gmatcher *m, const char *bytes, size_t len);
// Advances over token id's bytes (end-of-generation: true only where the grammar may end).
bool tl_gmatcher_accept_token(struct tl_gmatcher *m, const struct tl_gvocab *v, int32_t id);
// The input so far is a complete sentence of the grammar.
bool tl_gmatcher_can_end(const struct tl_gmatcher *m);
// Whether token id may come next (what the mask says about it, computed for one token).
bool tl_gmatcher_allows(struct tl_gmatcher *m, const struct tl_gvocab *v, int32_t id);
// Sets bit t of mask ((n_vocab + 63) / 64 words) for every token allowed next: tokens whose
// bytes continue the input validly, and end-of-generation tokens where the grammar may end.
// Uses and fills g's per-state cache of context-independent tokens. Returns false on
// allocation failure (error set).
bool tl_gmatcher_fill_mask(struct tl_gmatcher *m, const struct tl_gvocab *v, uint64_t *mask);

#endif
