/*
 * Tool calls in a chat model's reply. Each model family is trained to write its calls in its
 * own syntax (the chat template shows it: Hermes' <tool_call>{...}</tool_call>, Mistral's
 * [TOOL_CALLS][...], Llama 3's bare JSON, ...). The parser here reads the reply as it streams,
 * separates reasoning (reasoning.h), content and calls, and reports each call whole once it is
 * complete and valid: a call whose JSON is broken or names a function the request did not offer
 * goes out as plain content instead, so a bad call never becomes an error.
 *
 * The syntax is picked from the template source (tl_tool_syntax_detect) or by name (a flag).
 * Events go to a callback in reply order; their concatenation is the same however the reply is
 * split into pieces (text that could begin a call is held back until it is decided).
 *
 * One parser per reply, used by one thread; it owns its buffers and the calls it reports.
 */
#ifndef TL_CHAT_TOOLCALL_H
#define TL_CHAT_TOOLCALL_H

#include <tokenloom.h>

#include "chat/reasoning.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum tl_tool_syntax {
    TL_TOOL_GENERIC = 0,     // the whole reply is JSON: {"name","arguments"} or {"tool_calls":[..]}
    TL_TOOL_HERMES = 1,      // <tool_call>{"name","arguments"}</tool_call> (Hermes, Qwen2.5)
    TL_TOOL_LLAMA3 = 2,      // {"name","parameters"} and <|python_tag|> (Llama 3.1-3.3)
    TL_TOOL_MISTRAL = 3,     // [TOOL_CALLS][{"name","arguments","id"}]
    TL_TOOL_COMMAND_R = 4,   // Action: ```json [{"tool_name","parameters"}] ``` (Command R+)
    TL_TOOL_COMMAND_R7B = 5, // <|START_ACTION|>[...]<|END_ACTION|> (Command R7B)
    TL_TOOL_FUNCTIONARY_V31 = 6, // <function=name>{...}</function>, <|python_tag|>code
    TL_TOOL_FUNCTIONARY_V32 = 7, // >>>name\n{...} after the prompt's ">>>"; >>>all\n is text
    TL_TOOL_DEEPSEEK_R1 = 8, // <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>...
    TL_TOOL_FIREFUNCTION_V2 = 9, // functools[{"name","arguments"}]
    TL_TOOL_SYNTAX_COUNT = 10,
};

// The syntax a chat template's model writes, from marker strings in the Jinja source
// (NULL or no marker -> TL_TOOL_GENERIC).
enum tl_tool_syntax tl_tool_syntax_detect(const char *tmpl);
// "generic", "hermes", "llama3", "mistral", "command-r", "command-r7b", "functionary-v3.1",
// "functionary-v3.2", "deepseek-r1", "firefunction-v2".
const char *tl_tool_syntax_name(enum tl_tool_syntax s);
bool tl_tool_syntax_from_name(const char *name, enum tl_tool_syntax *out);
// Whether replies in this syntax carry markup even without tools (Functionary v3.2 writes its
// recipient line, "all\n", before plain text): such replies are parsed in any case.
bool tl_tool_syntax_always_parsed(enum tl_tool_syntax s);

// One parsed call, as OpenAI's message.tool_calls[i].
struct tl_tool_call {
    char *id;        // owned: "call_" + 24 alphanumerics, or the model's own id (Mistral: 9)
    char *name;      // owned: function.name
    char *arguments; // owned: function.arguments, a compact JSON object text
};

enum tl_toolcall_event_kind {
    TL_TOOLCALL_CONTENT = 0,   // text: a piece of message.content
    TL_TOOLCALL_REASONING = 1, // text: a piece of message.reasoning_content
    TL_TOOLCALL_CALL = 2,      // call: a complete call, index = its position in tool_calls
};

struct tl_toolcall_event {
    enum tl_toolcall_event_kind kind;
    const char *text; // borrowed for the callback's duration
    size_t len;
    int index;                       // CALL: 0, 1, ...
    const struct tl_tool_call *call; // CALL: borrowed for the parser's life
};

typedef void (*tl_toolcall_cb)(void *user, const struct tl_toolcall_event *ev);

struct tl_toolcall_config {
    enum tl_tool_syntax syntax;
    bool parse_calls;                   // false: no calls (no tools offered, tool_choice
                                        // "none"); reasoning and always-parsed markup still go
    const char *const *tool_names;      // borrowed: the functions offered; a call of any other
    int n_tool_names;                   // name is content
    struct tl_reasoning_tags reasoning; // .open NULL: no reasoning split
    bool reasoning_start_inside;        // the prompt ended inside the reasoning block
    uint64_t id_seed;                   // call ids are drawn from it (deterministic)
};

typedef struct tl_toolcall_parser tl_toolcall_parser;

// NULL on allocation failure. cb is called from feed and finish only.
tl_toolcall_parser *tl_toolcall_parser_create(const struct tl_toolcall_config *cfg,
                                              tl_toolcall_cb cb, void *user);
void tl_toolcall_parser_destroy(tl_toolcall_parser *p);
// Feeds the next piece of the reply. TL_ERR_NOMEM on allocation failure (the parser is then
// unusable; destroy it).
tl_status tl_toolcall_parser_feed(tl_toolcall_parser *p, const char *text,
                                  size_t len) TL_WARN_UNUSED;
// The reply ended: whatever is held back is decided and reported.
tl_status tl_toolcall_parser_finish(tl_toolcall_parser *p) TL_WARN_UNUSED;
// Calls reported so far.
int tl_toolcall_parser_n_calls(const tl_toolcall_parser *p);

#endif
