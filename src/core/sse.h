/*
 * Server-sent events (the text/event-stream format of the WHATWG HTML standard, section
 * "Server-sent events"): framing for the server's streamed responses and an incremental parser
 * for the clients in this project (tokenloom bench, tests).
 *
 * Not thread-safe; a parser belongs to one connection.
 */
#ifndef TL_CORE_SSE_H
#define TL_CORE_SSE_H

#include "core/strbuf.h"

#include <stdbool.h>
#include <stddef.h>

// Appends one event carrying data: a "data: " field per line of data (CR, LF or CRLF end a
// line, so a multi-line payload survives), then the blank line that dispatches it.
void tl_sse_format(struct tl_sb *out, const char *data, size_t len);

// Called for each dispatched event with its data (the data lines joined by "\n"); return false
// to stop parsing (tl_sse_feed then returns false too).
typedef bool (*tl_sse_event_fn)(void *user, const char *data, size_t len);

struct tl_sse_parser {
    struct tl_sb line; // owned: the line being read
    struct tl_sb data; // owned: the event's data so far, each line followed by "\n"
    bool have_data;    // a data field was seen in this event
    bool last_cr;      // the previous byte was CR (a following LF belongs to it)
};

void tl_sse_parser_init(struct tl_sse_parser *p);
void tl_sse_parser_free(struct tl_sse_parser *p);
// Feeds n bytes; dispatches complete events to fn. False when fn asked to stop or memory ran
// out.
bool tl_sse_feed(struct tl_sse_parser *p, const char *buf, size_t n, tl_sse_event_fn fn,
                 void *user);

#endif
