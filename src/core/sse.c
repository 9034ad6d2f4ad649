/*
 * Server-sent events framing and parsing (see sse.h).
 *
 * The parser follows the standard's line rules: a line ends at CR, LF or CRLF (a CRLF split
 * across two reads is one line end); "field: value" drops one space after the colon; a line
 * starting with ':' is a comment; a blank line dispatches the event when it has data, with the
 * final "\n" of the joined data removed. Only the "data" field matters to us; "event", "id"
 * and "retry" are accepted and ignored.
 *
 * Ownership: the parser owns its buffers. Not thread-safe.
 */
#include "core/sse.h"

#include <string.h>

void tl_sse_format(struct tl_sb *out, const char *data, size_t len)
{
    size_t i = 0;
    for (;;) {
        size_t j = i;
        while (j < len && data[j] != '\n' && data[j] != '\r')
            j++;
        tl_sb_add(out, "data: ", 6);
        tl_sb_add(out, data + i, j - i);
        tl_sb_add(out, "\n", 1);
        if (j >= len) break;
        if (data[j] == '\r' && j + 1 < len && data[j + 1] == '\n') j++;
        i = j + 1;
    }
    tl_sb_add(out, "\n", 1);
}

void tl_sse_parser_init(struct tl_sse_parser *p)
{
    memset(p, 0, sizeof(*p));
    tl_sb_init(&p->line);
    tl_sb_init(&p->data);
}

void tl_sse_parser_free(struct tl_sse_parser *p)
{
    tl_sb_free(&p->line);
    tl_sb_free(&p->data);
}

// Handles one complete line; returns false when the callback stops.
static bool end_line(struct tl_sse_parser *p, tl_sse_event_fn fn, void *user)
{
    const char *l = p->line.buf ? p->line.buf : "";
    size_t n = p->line.len;
    bool ok = true;
    if (n == 0) {
        if (p->have_data) {
            size_t dl = p->data.len;
            if (dl && p->data.buf[dl - 1] == '\n') dl--;
            ok = fn(user, p->data.buf ? p->data.buf : "", dl);
        }
        p->data.len = 0;
        if (p->data.buf) p->data.buf[0] = '\0';
        p->have_data = false;
    } else if (l[0] != ':') {
        const char *colon = memchr(l, ':', n);
        size_t name_len = colon ? (size_t)(colon - l) : n;
        if (name_len == 4 && !memcmp(l, "data", 4)) {
            const char *v = colon ? colon + 1 : l + n;
            if (v < l + n && *v == ' ') v++;
            tl_sb_add(&p->data, v, (size_t)(l + n - v));
            tl_sb_add(&p->data, "\n", 1);
            p->have_data = true;
        }
    }
    p->line.len = 0;
    if (p->line.buf) p->line.buf[0] = '\0';
    return ok;
}

bool tl_sse_feed(struct tl_sse_parser *p, const char *buf, size_t n, tl_sse_event_fn fn, void *user)
{
    for (size_t i = 0; i < n; i++) {
        char c = buf[i];
        if (c == '\n' && p->last_cr) {
            p->last_cr = false;
            continue;
        }
        p->last_cr = c == '\r';
        if (c == '\n' || c == '\r') {
            if (!end_line(p, fn, user)) return false;
            continue;
        }
        // Add runs of ordinary bytes at once.
        size_t j = i;
        while (j < n && buf[j] != '\n' && buf[j] != '\r')
            j++;
        tl_sb_add(&p->line, buf + i, j - i);
        i = j - 1;
    }
    return tl_sb_ok(&p->line) && tl_sb_ok(&p->data);
}
