/*
 * Stored responses (see responses.h): what a finished /v1/responses keeps, and the routes that
 * read it: GET /v1/responses/{id}, DELETE /v1/responses/{id} and
 * GET /v1/responses/{id}/input_items.
 *
 * DESIGN
 * A response is kept with its conversation: every input item of its chain (the previous
 * responses' inputs and outputs, then its own input), then its own output, so that a
 * continuation (responses.c) reads one entry. The input items are kept in the shape
 * input_items lists them: each with an "id" (the client's, or a new one; stable since it is
 * stored), a message's string content as one input_text (output_text for the assistant) part,
 * "type": "message" and "status": "completed" on messages. The translation reads this shape as
 * it reads the client's, so the continuation's prompt is unchanged by it. A response's input
 * items are its conversation less its output (the last len(output) items).
 *
 * Unknown, deleted, evicted and expired ids are one 404 naming the id.
 *
 * Threads: the event-loop thread.
 */
#include "server/responses.h"

#include "core/clock.h"
#include "server/route_checks.h"
#include "server/state.h"

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <sys/queue.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// An input item in the listed shape (new reference; NULL when out of memory).
static json_t *listed_item(json_t *item)
{
    json_t *o = json_copy(item);
    if (!o) return NULL;
    const char *type = json_string_value(json_object_get(o, "type"));
    bool message = !type || !strcmp(type, "message");
    int fails = 0;
    if (!json_is_string(json_object_get(o, "id"))) {
        char id[64];
        tl_srv_resp_item_id(id, sizeof(id),
                            message                          ? "msg"
                            : !strcmp(type, "function_call") ? "fc"
                            : !strcmp(type, "reasoning")     ? "rs"
                                                             : "fco");
        fails += json_object_set_new(o, "id", json_string(id));
    }
    if (message) {
        json_t *content = json_object_get(o, "content");
        const char *role = json_string_value(json_object_get(o, "role"));
        bool assistant = role && !strcmp(role, "assistant");
        if (json_is_string(content))
            fails += json_object_set_new(o, "content",
                                         json_pack("[{s:s, s:O}]", "type",
                                                   assistant ? "output_text" : "input_text", "text",
                                                   content));
        fails += json_object_set_new(o, "type", json_string("message"));
        if (!json_object_get(o, "status"))
            fails += json_object_set_new(o, "status", json_string("completed"));
    }
    if (fails) {
        json_decref(o);
        return NULL;
    }
    return o;
}

void tl_srv_resp_keep(struct tl_server *s, json_t *ctx, json_t *response)
{
    json_t *store = json_object_get(ctx, "store");
    const char *id = json_string_value(json_object_get(ctx, "id"));
    if (!s->resp_store || json_is_false(store) || !response || !id) return;
    // The conversation a continuation sees: this chain's items, then this output. One missing
    // item would mislead a continuation: then nothing is kept.
    json_t *in = json_object_get(ctx, "conversation");
    json_t *out = json_object_get(response, "output");
    json_t *conv = json_array();
    for (size_t i = 0; conv && i < json_array_size(in); i++) {
        if (json_array_append_new(conv, listed_item(json_array_get(in, i)))) {
            json_decref(conv);
            conv = NULL;
        }
    }
    for (size_t i = 0; conv && i < json_array_size(out); i++) {
        if (json_array_append(conv, json_array_get(out, i))) {
            json_decref(conv);
            conv = NULL;
        }
    }
    if (conv)
        (void)tl_resp_store_put(s->resp_store, id, response, conv,
                                (int)json_integer_value(json_object_get(ctx, "depth")),
                                tl_time_us());
    json_decref(conv);
}

// The {id} of /v1/responses/{id}[/input_items] (malloc'd, decoded), or NULL.
static char *path_id(struct evhttp_request *r, bool items)
{
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(r);
    const char *p = evhttp_uri_get_path(uri) + strlen("/v1/responses/");
    size_t n = strlen(p) - (items ? strlen("/input_items") : 0);
    char *raw = strndup(p, n);
    char *id = raw ? evhttp_uridecode(raw, 0, NULL) : NULL;
    free(raw);
    return id;
}

static void not_found(struct tl_server *s, struct evhttp_request *r, int64_t t0, const char *id)
{
    char msg[300];
    snprintf(msg, sizeof(msg),
             "Response with id '%.150s' not found (unknown, deleted, evicted or expired from the "
             "store)",
             id ? id : "");
    tl_srv_reply_error(s, r, t0, 404, "invalid_request_error", "not_found", NULL, msg);
}

void tl_srv_h_response_get(struct tl_server *s, struct evhttp_request *r, int64_t t0, json_t *body)
{
    (void)body;
    char *id = path_id(r, false);
    json_t *resp = NULL;
    if (id && s->resp_store &&
        tl_resp_store_get(s->resp_store, id, tl_time_us(), &resp, NULL, NULL))
        tl_http_send_json(&s->http, r, 200, json_incref(resp), t0, 0, 0);
    else
        not_found(s, r, t0, id);
    free(id);
}

void tl_srv_h_response_delete(struct tl_server *s, struct evhttp_request *r, int64_t t0,
                              json_t *body)
{
    (void)body;
    char *id = path_id(r, false);
    if (id && s->resp_store && tl_resp_store_delete(s->resp_store, id))
        tl_http_send_json(
            &s->http, r, 200,
            json_pack("{s:s, s:s, s:b}", "id", id, "object", "response", "deleted", 1), t0, 0, 0);
    else
        not_found(s, r, t0, id);
    free(id);
}

// The query of input_items: limit (1..100, default 20), order (asc / desc, default desc),
// after (an item id of the list). False with a 400 sent.
static bool list_query(struct tl_server *s, struct evhttp_request *r, int64_t t0, long *limit,
                       bool *asc, const char **after, struct evkeyvalq *q)
{
    const char *query = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(r));
    TAILQ_INIT(q);
    if (query && evhttp_parse_query_str(query, q)) {
        tl_srv_reply_error(s, r, t0, 400, "invalid_request_error", "invalid_value", NULL,
                           "malformed query string");
        return false;
    }
    const char *l = evhttp_find_header(q, "limit"), *o = evhttp_find_header(q, "order");
    char *end = NULL;
    *limit = l ? strtol(l, &end, 10) : 20;
    if (l && (!*l || *end || *limit < 1 || *limit > 100)) {
        tl_srv_reply_error(s, r, t0, 400, "invalid_request_error", "invalid_value", "limit",
                           "'limit' must be an integer from 1 to 100");
        return false;
    }
    if (o && strcmp(o, "asc") && strcmp(o, "desc")) {
        tl_srv_reply_error(s, r, t0, 400, "invalid_request_error", "invalid_value", "order",
                           "'order' must be \"asc\" or \"desc\"");
        return false;
    }
    *asc = o && !strcmp(o, "asc");
    *after = evhttp_find_header(q, "after");
    const char *inc = evhttp_find_header(q, "include");
    if (inc || evhttp_find_header(q, "include[]")) {
        tl_srv_reply_error(s, r, t0, 400, "invalid_request_error", "invalid_value", "include",
                           "'include' is not supported: tokenloom has no extra item fields");
        return false;
    }
    return true;
}

void tl_srv_h_response_input_items(struct tl_server *s, struct evhttp_request *r, int64_t t0,
                                   json_t *body)
{
    (void)body;
    char *id = path_id(r, true);
    json_t *resp = NULL, *conv = NULL;
    if (!id || !s->resp_store ||
        !tl_resp_store_get(s->resp_store, id, tl_time_us(), &resp, &conv, NULL)) {
        not_found(s, r, t0, id);
        free(id);
        return;
    }
    free(id);
    long limit;
    bool asc;
    const char *after;
    struct evkeyvalq q;
    if (!list_query(s, r, t0, &limit, &asc, &after, &q)) {
        evhttp_clear_headers(&q);
        return;
    }
    size_t n = json_array_size(conv) - json_array_size(json_object_get(resp, "output"));
    // Positions in list order; start after the item named by after.
    size_t start = 0;
    if (after) {
        size_t k = 0;
        for (; k < n; k++) {
            json_t *it = json_array_get(conv, asc ? k : n - 1 - k);
            const char *iid = json_string_value(json_object_get(it, "id"));
            if (iid && !strcmp(iid, after)) break;
        }
        if (k == n) {
            char msg[200];
            snprintf(msg, sizeof(msg), "'after' names no input item of this response: '%.100s'",
                     after);
            evhttp_clear_headers(&q);
            tl_srv_reply_error(s, r, t0, 400, "invalid_request_error", "invalid_value", "after",
                               msg);
            return;
        }
        start = k + 1;
    }
    evhttp_clear_headers(&q);
    json_t *data = json_array();
    for (size_t k = start; data && k < n && k < start + (size_t)limit; k++)
        if (json_array_append(data, json_array_get(conv, asc ? k : n - 1 - k))) {
            json_decref(data);
            data = NULL;
        }
    size_t m = json_array_size(data);
    json_t *first = m ? json_object_get(json_array_get(data, 0), "id") : NULL;
    json_t *last = m ? json_object_get(json_array_get(data, m - 1), "id") : NULL;
    json_t *o = data ? json_pack("{s:s, s:o, s:O?, s:O?, s:b}", "object", "list", "data", data,
                                 "first_id", first, "last_id", last, "has_more", start + m < n)
                     : NULL;
    tl_http_send_json(&s->http, r, 200, o, t0, 0, 0);
}
