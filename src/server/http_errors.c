/*
 * libevent's own error replies rewritten in the API's format (see http.h).
 *
 * WHY
 * evhttp answers some requests itself, before our handler could see them: a body over
 * --max-body-bytes (413), a malformed request line or headers (400), and a few more. Its reply
 * is a small HTML page, and libevent 2.1 has no hook to change it (evhttp_set_errorcb came in
 * 2.2). A client of an OpenAI-compatible server expects {"error": {...}} whatever the status.
 *
 * HOW
 * Every connection's bufferevent is created here (evhttp_set_bevcb) with a callback on its
 * output buffer. A reply that evhttp writes is complete in that buffer before the socket sees
 * a byte (the write happens on a later turn of the loop). When the buffer holds a whole reply
 * with an error status, Content-Type text/html and libevent's page (its body starts with
 * "<HTML><HEAD>"; the server's own HTML, the dashboard, is a 200), the
 * callback replaces it with the same status and a JSON error body, an X-Request-Id and
 * "Connection: close" (evhttp closes these connections after the reply). It also counts the
 * status in the metrics and writes an access line (method, path and client unknown here: null),
 * which these requests would otherwise miss.
 * Only the first bytes are looked at for any other reply: a success or a stream chunk costs a
 * 13-byte peek.
 *
 * THREADS: the event-loop thread (libevent calls the callback while it writes).
 */
#include "server/http.h"

#include "core/log.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum { HEAD_MAX = 4096 };

static const char *error_code_of(int status)
{
    switch (status) {
    case 413:
        return "request_too_large";
    case 431:
        return "headers_too_large";
    case 501:
        return "not_implemented";
    case 505:
        return "http_version_not_supported";
    default:
        return status >= 500 ? "server_error" : "bad_request";
    }
}

static const char *message_of(int status, size_t max_body)
{
    static char msg[160];
    switch (status) {
    case 413:
        snprintf(msg, sizeof(msg), "The request body is larger than the limit of %zu bytes",
                 max_body);
        return msg;
    case 400:
        return "Malformed HTTP request (request line or headers)";
    case 501:
        return "This HTTP method is not supported";
    default:
        snprintf(msg, sizeof(msg), "The HTTP request was refused (status %d)", status);
        return msg;
    }
}

// The reply at the start of buf when it is one of evhttp's HTML error pages and complete:
// its status, else 0. *whole is the reply's length.
static int libevent_error_reply(struct evbuffer *buf, size_t *whole)
{
    char start[13];
    size_t len = evbuffer_get_length(buf);
    if (len < sizeof(start) || evbuffer_copyout(buf, start, sizeof(start)) != sizeof(start))
        return 0;
    if (memcmp(start, "HTTP/1.", 7) || start[8] != ' ' || (start[9] != '4' && start[9] != '5'))
        return 0;
    struct evbuffer_ptr end = evbuffer_search(buf, "\r\n\r\n", 4, NULL);
    if (end.pos < 0 || end.pos > HEAD_MAX) return 0;
    char head[HEAD_MAX + 1];
    size_t head_len = (size_t)end.pos;
    evbuffer_copyout(buf, head, head_len);
    head[head_len] = '\0';
    bool html = false;
    long long body = -1;
    // Header lines, each cut at its CRLF (the status line is skipped).
    for (char *line = strstr(head, "\r\n"); line;) {
        line += 2;
        char *eol = strstr(line, "\r\n");
        if (eol) *eol = '\0';
        if (!strncasecmp(line, "Content-Type:", 13))
            html = strstr(line + 13, "text/html") != NULL;
        else if (!strncasecmp(line, "Content-Length:", 15))
            body = strtoll(line + 15, NULL, 10);
        line = eol;
    }
    if (!html || body < 12 || len < head_len + 4 + (size_t)body) return 0;
    char page[12];
    struct evbuffer_ptr at;
    evbuffer_ptr_set(buf, &at, head_len + 4, EVBUFFER_PTR_SET);
    if (evbuffer_copyout_from(buf, &at, page, sizeof(page)) != (ev_ssize_t)sizeof(page) ||
        memcmp(page, "<HTML><HEAD>", sizeof(page)))
        return 0;
    *whole = head_len + 4 + (size_t)body;
    return atoi(start + 9);
}

static void on_output(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    // (Our own rewrite calls back here too; it is JSON, so it is left alone.)
    struct tl_http *h = arg;
    size_t whole = 0;
    int status;
    if (info->n_added == 0 || !(status = libevent_error_reply(buf, &whole))) return;
    char id[33];
    tl_http_new_request_id(h, id);
    char body[400];
    int n =
        snprintf(body, sizeof(body),
                 "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,"
                 "\"code\":\"%s\"}}",
                 message_of(status, h->max_body_bytes),
                 status >= 500 ? "server_error" : "invalid_request_error", error_code_of(status));
    char head[400];
    int hn = snprintf(head, sizeof(head),
                      "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nX-Request-Id: %s\r\n"
                      "Connection: close\r\nContent-Length: %d\r\n\r\n",
                      status, tl_http_reason_phrase(status), id, n);
    evbuffer_drain(buf, whole);
    evbuffer_prepend(buf, body, (size_t)n);
    evbuffer_prepend(buf, head, (size_t)hn);
    tl_metrics_count_http(h->metrics, status);
    struct tl_log_access a = {.request_id = id,
                              .status = status,
                              .prompt_tokens = -1,
                              .completion_tokens = -1,
                              .queue_ms = -1,
                              .ttft_ms = -1,
                              .total_ms = -1};
    tl_log_access(&a);
}

struct bufferevent *tl_http_new_bufferevent(struct event_base *base, void *arg)
{
    // Flags as evhttp's own default (it closes the socket itself).
    struct bufferevent *bev = bufferevent_socket_new(base, -1, 0);
    if (bev && !evbuffer_add_cb(bufferevent_get_output(bev), on_output, arg)) {
        bufferevent_free(bev);
        return NULL;
    }
    return bev;
}
