/*
 * Allocation failures on the request path: for N = 1, 2, 3, ... the N-th allocation the server
 * makes through core/alloc (which includes every JSON allocation: the server points jansson at
 * tl_malloc) fails while one request runs. Every answer must be either the whole, correct
 * reply or a clean error: a 500/503 with an OpenAI error object for a whole reply; for a
 * stream, a 200 that ends with finish_reason "error" or an error event, then [DONE]. Never a
 * 200 with text missing (the tl_sb_ok bug), never a crash; the server ends with no request
 * alive, and under ASan (make check) LeakSanitizer checks that nothing leaked.
 *
 * The oracle is the fake engine's rule (token k of seed S is 'a' + (S + k) % 26), computed
 * here independently of the server.
 */
#include "server_harness.h"

#include "core/alloc.h"
#include "core/sse.h"

// The text choice i of a request with "seed": seed, echo of prompt, max_tokens n generates.
static void expected_text(const char *echo, uint64_t seed, int n, char *out)
{
    size_t k = 0;
    if (echo)
        for (; echo[k]; k++)
            out[k] = echo[k];
    for (int t = 0; t < n; t++)
        out[k++] = (char)('a' + (seed + (uint64_t)t) % 26);
    out[k] = '\0';
}

// One response judged: true for the whole correct reply, false for a clean error; fails the
// test for anything else.
static bool judge_whole(const struct resp *r, bool chat, long n_fail)
{
    json_t *j = body_json(r);
    if (r->status != 200) {
        if (r->status != 500 && r->status != 503)
            fail_msg("N=%ld: status %d: %s", n_fail, r->status, r->body);
        json_t *e = json_object_get(j, "error");
        if (!json_is_string(json_object_get(e, "message")) ||
            !json_is_string(json_object_get(e, "type")))
            fail_msg("N=%ld: error %d without an OpenAI error object: %s", n_fail, r->status,
                     r->body);
        json_decref(j);
        return false;
    }
    json_t *choices = json_object_get(j, "choices");
    if (json_array_size(choices) != 2) fail_msg("N=%ld: 200 with choices: %s", n_fail, r->body);
    for (size_t i = 0; i < 2; i++) {
        json_t *c = json_array_get(choices, i);
        char want[64];
        expected_text(chat ? NULL : "hi", 7 + i, 3, want);
        const char *got = chat ? json_string_value(json_object_get(
                                     json_object_get(c, "message"), "content"))
                               : json_string_value(json_object_get(c, "text"));
        if (!got || strcmp(got, want))
            fail_msg("N=%ld: 200 with choice %zu text '%s', want '%s'", n_fail, i,
                     got ? got : "(none)", want);
        json_t *lp = json_object_get(c, "logprobs");
        size_t n_lp = chat ? json_array_size(json_object_get(lp, "content"))
                           : json_array_size(json_object_get(lp, "tokens"));
        if (n_lp != (chat ? 3u : 3u + 3u)) // completions with echo: BOS, h, i first
            fail_msg("N=%ld: 200 with %zu logprobs: %s", n_fail, n_lp, r->body);
        if (strcmp(json_string_value(json_object_get(c, "finish_reason")), "length"))
            fail_msg("N=%ld: finish_reason %s", n_fail, r->body);
    }
    json_t *usage = json_object_get(j, "usage");
    if (json_integer_value(json_object_get(usage, "completion_tokens")) != 6)
        fail_msg("N=%ld: usage %s", n_fail, r->body);
    json_decref(j);
    return true;
}

struct stream_seen {
    char text[2][64];
    bool finished_length[2], finished_error[2], error_event, done;
    long n_fail;
};

static bool on_sse(void *user, const char *data, size_t len)
{
    struct stream_seen *ss = user;
    if (len == 6 && !memcmp(data, "[DONE]", 6)) {
        ss->done = true;
        return true;
    }
    json_error_t e;
    json_t *j = json_loadb(data, len, 0, &e);
    if (!j) fail_msg("N=%ld: an SSE event is not JSON: %.*s", ss->n_fail, (int)len, data);
    if (json_object_get(j, "error")) ss->error_event = true;
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    if (c) {
        size_t i = (size_t)json_integer_value(json_object_get(c, "index"));
        assert_true(i < 2);
        const char *t = json_string_value(json_object_get(c, "text"));
        if (t) strncat(ss->text[i], t, sizeof(ss->text[i]) - strlen(ss->text[i]) - 1);
        const char *fin = json_string_value(json_object_get(c, "finish_reason"));
        if (fin && !strcmp(fin, "length")) ss->finished_length[i] = true;
        if (fin && !strcmp(fin, "error")) ss->finished_error[i] = true;
    }
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
    struct stream_seen ss = {.n_fail = n_fail};
    struct tl_sse_parser p;
    tl_sse_parser_init(&p);
    assert_true(tl_sse_feed(&p, r->body, r->body_len, on_sse, &ss));
    tl_sse_parser_free(&p);
    if (!ss.done) fail_msg("N=%ld: a stream without [DONE]: %s", n_fail, r->body);
    bool whole = true;
    for (int i = 0; i < 2; i++) {
        char want[64];
        expected_text(NULL, 7 + (uint64_t)i, 3, want);
        bool ok = ss.finished_length[i] && !strcmp(ss.text[i], want);
        if (!ok && !ss.finished_error[i] && !ss.error_event)
            fail_msg("N=%ld: stream choice %d ended cut ('%s', want '%s') without an error: %s",
                     n_fail, i, ss.text[i], want, r->body);
        whole = whole && ok;
    }
    return whole;
}

static const char *const bodies[] = {
    "{\"prompt\":\"hi\",\"max_tokens\":3,\"n\":2,\"seed\":7,\"echo\":true,\"logprobs\":2}",
    "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":3,\"n\":2,\"seed\":7,"
    "\"logprobs\":true,\"top_logprobs\":2}",
    "{\"prompt\":\"hi\",\"max_tokens\":3,\"n\":2,\"seed\":7,\"stream\":true,"
    "\"stream_options\":{\"include_usage\":true}}",
};

// Runs request kind k with the N-th allocation failing; true when the answer was whole.
static bool one_try(int port, int k, long n_fail)
{
    const char *path = k == 1 ? "/v1/chat/completions" : "/v1/completions";
    int fd = connect_to(port);
    tl_alloc_fail_after(n_fail);
    send_request(fd, "POST", path, bodies[k], NULL);
    struct resp r;
    read_response(fd, &r);
    tl_alloc_fail_after(0);
    close(fd);
    bool whole = k == 2 ? judge_stream(&r, n_fail) : judge_whole(&r, k == 1, n_fail);
    resp_free(&r);
    if (!wait_until(engine_idle, 5000)) fail_msg("N=%ld: requests left running", n_fail);
    return whole;
}

static void test_every_allocation_failure_is_clean(void **state)
{
    (void)state;
    struct running *sv = start(NULL, 0, 0);
    s_port = tl_server_port(sv->s);
    assert_true(wait_until(server_healthy, 5000));
    for (int k = 0; k < 3; k++) {
        long n_refused = 0, streak = 0, n;
        // Past the last allocation of the path every try is whole: 40 in a row end the sweep.
        for (n = 1; streak < 40 && n < 5000; n++) {
            if (one_try(s_port, k, n)) {
                streak++;
            } else {
                streak = 0;
                n_refused++;
            }
        }
        print_message("# request kind %d: %ld allocation points, %ld clean refusals\n", k,
                      n - 41, n_refused);
        assert_true(n < 5000);
        assert_true(n_refused > 0); // the sweep reached the path
    }
    assert_int_equal(stop(sv), 0);
}

TL_TEST_MAIN(cmocka_unit_test(test_every_allocation_failure_is_clean))
