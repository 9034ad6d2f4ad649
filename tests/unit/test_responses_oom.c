/*
 * Allocation failures on the /v1/responses path (as test_server_oom.c does for completions and
 * chat): for N = 1, 2, 3, ... the N-th allocation fails while one request runs, non-streamed
 * and streamed. Every answer must be the whole, correct Response or a clean error: a 500/503
 * with an OpenAI error object; for a stream, either a last event response.incomplete whose
 * Response holds exactly the text the deltas carried, or an error event. Never a crash, never a
 * 200 with text missing, and no request is left running (LeakSanitizer under make check).
 *
 * The oracle: the fake engine writes token k of seed S as 'a' + (S + k) % 26, so whatever the
 * (server-chosen) seed, a whole answer of 3 tokens is 3 consecutive letters; a Response that
 * was stored is then retrievable and equal.
 */
#include "server_harness.h"

#include "core/alloc.h"
#include "core/sse.h"

// Three letters, each the next of the one before (mod 26): the fake engine's rule.
static bool fake_text(const char *t)
{
    if (!t || strlen(t) != 3) return false;
    for (int i = 0; i < 3; i++)
        if (t[i] < 'a' || t[i] > 'z') return false;
    return (t[1] - 'a') == (t[0] - 'a' + 1) % 26 && (t[2] - 'a') == (t[1] - 'a' + 1) % 26;
}

static const char *output_text(json_t *resp)
{
    json_t *item = json_array_get(json_object_get(resp, "output"), 0);
    return json_string_value(
        json_object_get(json_array_get(json_object_get(item, "content"), 0), "text"));
}

static bool judge_whole(const struct resp *r, long n_fail, char *id, size_t id_size)
{
    json_t *j = body_json(r);
    if (r->status != 200) {
        json_t *e = json_object_get(j, "error");
        if ((r->status != 500 && r->status != 503) ||
            !json_is_string(json_object_get(e, "message")))
            fail_msg("N=%ld: status %d: %s", n_fail, r->status, r->body);
        json_decref(j);
        return false;
    }
    if (strcmp(json_string_value(json_object_get(j, "object")), "response") ||
        strcmp(json_string_value(json_object_get(j, "status")), "incomplete") ||
        !fake_text(output_text(j)) ||
        json_integer_value(json_object_get(json_object_get(j, "usage"), "output_tokens")) != 3)
        fail_msg("N=%ld: a 200 that is not the whole Response: %s", n_fail, r->body);
    snprintf(id, id_size, "%s", json_string_value(json_object_get(j, "id")));
    json_decref(j);
    return true;
}

struct seen {
    char deltas[64];
    char *last; // the last event's JSON text
    bool error_event;
    long n_fail;
};

static bool on_sse(void *user, const char *data, size_t len)
{
    struct seen *ss = user;
    json_error_t e;
    json_t *j = json_loadb(data, len, 0, &e);
    if (!j) fail_msg("N=%ld: an SSE event is not JSON: %.*s", ss->n_fail, (int)len, data);
    if (json_object_get(j, "error")) ss->error_event = true;
    const char *type = json_string_value(json_object_get(j, "type"));
    if (type && !strcmp(type, "response.output_text.delta")) {
        const char *d = json_string_value(json_object_get(j, "delta"));
        strncat(ss->deltas, d ? d : "", sizeof(ss->deltas) - strlen(ss->deltas) - 1);
    }
    free(ss->last);
    ss->last = strndup(data, len);
    json_decref(j);
    return true;
}

static bool judge_stream(const struct resp *r, long n_fail)
{
    if (r->status != 200) {
        json_t *j = body_json(r);
        if ((r->status != 500 && r->status != 503) || !json_object_get(j, "error"))
            fail_msg("N=%ld: stream refused with %d: %s", n_fail, r->status, r->body);
        json_decref(j);
        return false;
    }
    struct seen ss = {.n_fail = n_fail};
    struct tl_sse_parser p;
    tl_sse_parser_init(&p);
    assert_true(tl_sse_feed(&p, r->body, r->body_len, on_sse, &ss));
    tl_sse_parser_free(&p);
    json_t *last = ss.last ? json_loads(ss.last, 0, NULL) : NULL;
    const char *type = json_string_value(json_object_get(last, "type"));
    bool whole = type && !strcmp(type, "response.incomplete");
    if (whole) {
        json_t *resp = json_object_get(last, "response");
        if (!fake_text(ss.deltas) || strcmp(output_text(resp), ss.deltas))
            fail_msg("N=%ld: a whole stream with deltas '%s' and final text '%s': %s", n_fail,
                     ss.deltas, output_text(resp), r->body);
    } else if (!ss.error_event && !(type && !strcmp(type, "response.failed"))) {
        fail_msg("N=%ld: a stream cut without an error; its end: %s", n_fail,
                 r->body_len > 600 ? r->body + r->body_len - 600 : r->body);
    }
    json_decref(last);
    free(ss.last);
    return whole;
}

static bool one_try(int port, bool stream, long n_fail)
{
    const char *body = stream ? "{\"input\":\"hi\",\"max_output_tokens\":3,\"stream\":true}"
                              : "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":"
                                "\"input_text\",\"text\":\"hi\"}]}],\"max_output_tokens\":3}";
    int fd = connect_to(port);
    tl_alloc_fail_after(n_fail);
    send_request(fd, "POST", "/v1/responses", body, NULL);
    struct resp r;
    read_response(fd, &r);
    tl_alloc_fail_after(0);
    close(fd);
    char id[128] = "";
    bool whole = stream ? judge_stream(&r, n_fail) : judge_whole(&r, n_fail, id, sizeof(id));
    if (whole && !stream) { // kept (unless its store failed): retrieved equal
        char path[200];
        snprintf(path, sizeof(path), "/v1/responses/%s", id);
        struct resp g;
        request(port, "GET", path, NULL, NULL, &g);
        json_t *a = body_json(&r), *b = body_json(&g);
        if (g.status == 200 && !json_equal(a, b))
            fail_msg("N=%ld: retrieved %s differs from %s", n_fail, g.body, r.body);
        if (g.status != 200 && g.status != 404) fail_msg("N=%ld: GET %d", n_fail, g.status);
        json_decref(a);
        json_decref(b);
        resp_free(&g);
    }
    resp_free(&r);
    if (!wait_until(engine_idle, 5000)) fail_msg("N=%ld: requests left running", n_fail);
    return whole;
}

static void test_responses_allocation_failures_are_clean(void **state)
{
    (void)state;
    struct running *sv = start(NULL, 0, 0);
    s_port = tl_server_port(sv->s);
    assert_true(wait_until(server_healthy, 5000));
    for (int k = 0; k < 2; k++) {
        long n_refused = 0, streak = 0, n;
        for (n = 1; streak < 40 && n < 8000; n++) {
            if (one_try(s_port, k == 1, n)) {
                streak++;
            } else {
                streak = 0;
                n_refused++;
            }
        }
        print_message("# %s: %ld allocation points, %ld clean refusals\n", k ? "stream" : "whole",
                      n - 41, n_refused);
        assert_true(n < 8000);
        assert_true(n_refused > 0);
    }
    assert_int_equal(stop(sv), 0);
}

TL_TEST_MAIN(cmocka_unit_test(test_responses_allocation_failures_are_clean))
