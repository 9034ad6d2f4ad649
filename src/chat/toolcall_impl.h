/*
 * Shared between the streaming tool-call parser (toolcall.c) and the per-syntax tables and
 * region parsers (toolcall_syntax.c). Not for other callers.
 *
 * A syntax is a list of triggers. A trigger is a marker string that starts a region of the
 * reply (a call, a block of calls, or a marker to drop); the region's end is found by one of a
 * few rules, and a complete region is parsed into calls or rejected (then it is content).
 */
#ifndef TL_CHAT_TOOLCALL_IMPL_H
#define TL_CHAT_TOOLCALL_IMPL_H

#include "chat/toolcall.h"

#include <jansson.h>

// A call as parsed from a region, before its name is checked and its id drawn.
struct tl__tc_found {
    char *name;   // owned
    json_t *args; // owned: a JSON object
    char *id;     // owned: the model's own id, or NULL
};

struct tl__tc_list {
    struct tl__tc_found *v; // owned, n entries
    int n, cap;
    bool nomem; // a parse ran out of memory: fail with TL_ERR_NOMEM, not "no call"
};

enum tl__tc_end {
    TL__TC_END_MARKER = 0, // after end_marker (the rest of the reply when it never comes)
    TL__TC_END_JSON = 1,   // after one JSON object or array following the marker
    TL__TC_END_EOS = 2,    // the rest of the reply
    TL__TC_END_SELF = 3,   // the marker alone (a marker to drop)
    TL__TC_END_CUSTOM = 4, // end_fn decides
};

struct tl__tc_trigger;

// Length of the complete region at s[0..len) (which starts with the trigger's marker), or 0
// when more text is needed; at eos never 0 (at most len).
typedef size_t (*tl__tc_end_fn)(const struct tl__tc_trigger *t, const char *s, size_t len,
                                bool eos);
// Parses a complete region into out (appending). false: not a valid call -> content. true
// with nothing appended: a region to drop (a marker, Functionary's ">>>all\n").
typedef bool (*tl__tc_parse_fn)(const struct tl__tc_trigger *t, const char *s, size_t len,
                                struct tl__tc_list *out);

struct tl__tc_trigger {
    const char *marker; // static
    bool at_start;      // counts only before any content (Llama 3's bare JSON)
    enum tl__tc_end end;
    const char *end_marker; // static, for TL__TC_END_MARKER
    tl__tc_end_fn end_fn;   // for TL__TC_END_CUSTOM
    tl__tc_parse_fn parse;
};

#define TL__TC_MAX_TRIGGERS 4

struct tl__tc_syntax {
    const char *name;
    const char *detect[2]; // all of these in a template select it (NULL-terminated)
    const char *prefix;    // text the prompt already wrote at the reply's start, or NULL
    bool short_ids;        // 9-character ids (Mistral's templates require them)
    struct tl__tc_trigger triggers[TL__TC_MAX_TRIGGERS];
    int n_triggers;
};

const struct tl__tc_syntax *tl__tc_syntax_get(enum tl_tool_syntax s);

// Where a JSON object or array starting at s[0] (after optional whitespace) ends: 1 and *end =
// the index after it; 0 when more text is needed; -1 when s does not start one or its brackets
// do not match.
int tl__tc_json_end(const char *s, size_t len, size_t *end);

void tl__tc_list_free(struct tl__tc_list *l);

#endif
