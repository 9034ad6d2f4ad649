/*
 * End-to-end tests of the HTTP layer (src/server) against a scripted fake model and engine, so
 * that routing, validation errors, SSE framing, client disconnects, the queue bound and the
 * graceful stop are checked without the real engine. The fake engine generates letters:
 * token k of a request with seed S is 'a' + (S + k) % 26, one token per running request per
 * step; its tokenizer maps each byte b to id b + 3 and prepends BOS (1).
 *
 * The real model and engine are exercised by tests/http (curl and the openai npm package).
 */
#include "server_harness.h"

#include "core/sse.h"

// ---- tests -----------------------------------------------------------------------------------

static void test_health_models_metrics(void **state)
{
    (void)state;
    struct running *sv = start(NULL, 0, 0);
    s_port = tl_server_port(sv->s);
    assert_true(wait_until(server_healthy, 5000));
    struct resp r;
    request(s_port, "GET", "/v1/models", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    json_t *m = json_array_get(json_object_get(j, "data"), 0);
    assert_string_equal(json_string_value(json_object_get(m, "id")), "fake-model"); // file stem
    assert_string_equal(json_string_value(json_object_get(m, "chat_template")), "chatml");
    assert_true(json_is_true(json_object_get(m, "chat_template_fallback")));
    assert_int_equal(json_integer_value(json_object_get(m, "max_model_len")), 64);
    json_decref(j);
    resp_free(&r);
    request(s_port, "GET", "/metrics", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.headers, "text/plain"));
    assert_non_null(strstr(r.body, "\ntokenloom:kv_cache_usage_perc{model_name=\"fake-model\"} 0\n"));
    assert_non_null(strstr(r.body, "# TYPE tokenloom:time_to_first_token_seconds histogram"));
    resp_free(&r);
    assert_int_equal(stop(sv), 0);
}

static void test_completion_plain(void **state)
{
    (void)state;
    struct running *sv = start(NULL, 0, 0);
    s_port = tl_server_port(sv->s);
    assert_true(wait_until(server_healthy, 5000));
    struct resp r;
    request(s_port, "POST", "/v1/completions",
            "{\"model\":\"fake-model\",\"prompt\":[\"hi\",\"abc\"],\"max_tokens\":5,\"seed\":2,"
            "\"n\":2,\"logprobs\":1,\"echo\":true}",
            NULL, &r);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "text_completion");
    assert_true(!strncmp(json_string_value(json_object_get(j, "id")), "cmpl-", 5));
    assert_string_equal(json_string_value(json_object_get(j, "model")), "fake-model");
    json_t *ch = json_object_get(j, "choices");
    assert_int_equal(json_array_size(ch), 4);
    // choice i = prompt i/2, sample i%2 with seed 2 + i%2: letters from 'c' or 'd'.
    const char *want[4] = {"hicdefg", "hidefgh", "abccdefg", "abcdefgh"};
    for (int i = 0; i < 4; i++) {
        json_t *c = json_array_get(ch, (size_t)i);
        assert_int_equal(json_integer_value(json_object_get(c, "index")), i);
        assert_string_equal(json_string_value(json_object_get(c, "text")), want[i]);
        assert_string_equal(json_string_value(json_object_get(c, "finish_reason")), "length");
        json_t *lp = json_object_get(c, "logprobs");
        json_t *toks = json_object_get(lp, "tokens");
        // echo: one entry per prompt token (BOS renders as "") with the engine's prompt
        // logprobs (the first null: nothing predicts it), then the 5 generated
        size_t np = strlen(want[i]) - 5 + 1;
        assert_int_equal(json_array_size(toks), np + 5);
        json_t *tlp = json_object_get(lp, "token_logprobs"),
               *tops = json_object_get(lp, "top_logprobs");
        json_t *offs = json_object_get(lp, "text_offset");
        assert_int_equal(json_array_size(tlp), np + 5);
        assert_int_equal(json_array_size(tops), np + 5);
        assert_int_equal(json_array_size(offs), np + 5);
        assert_true(json_is_null(json_array_get(tlp, 0)));
        assert_true(json_is_null(json_array_get(tops, 0)));
        assert_string_equal(json_string_value(json_array_get(toks, 0)), "");
        for (size_t k = 1; k < np; k++) {
            double v = json_real_value(json_array_get(tlp, k));
            assert_true(isfinite(v) && v <= 0);
            assert_true(fabs(v + 0.25 * (double)k) < 1e-6);
            char tok[2] = {want[i][k - 1], 0};
            assert_string_equal(json_string_value(json_array_get(toks, k)), tok);
            json_t *t = json_array_get(tops, k);
            assert_int_equal(json_object_size(t), 1); // logprobs: 1
            assert_true(fabs(json_real_value(json_object_get(t, tok)) + 0.25 * (double)k) < 1e-6);
            assert_int_equal(json_integer_value(json_array_get(offs, k)), (json_int_t)(k - 1));
        }
        // Generated tokens continue at the end of the echoed prompt text.
        assert_int_equal(json_integer_value(json_array_get(offs, np)), (json_int_t)(np - 1));
        json_t *last = json_array_get(tlp, np + 4);
        assert_true(fabs(json_real_value(last) + 0.5) < 1e-6);
        json_t *top = json_array_get(tops, np);
        assert_int_equal(json_object_size(top), 1);
    }
    json_t *u = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")), 3 + 4);
    assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")), 20);
    assert_int_equal(json_integer_value(json_object_get(u, "total_tokens")), 27);
    assert_non_null(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens"));
    json_decref(j);
    resp_free(&r);
    assert_int_equal(stop(sv), 0);
}

struct sse_got {
    json_t *ev[64];
    int n;
    bool done;
};

static bool collect(void *user, const char *data, size_t len)
{
    struct sse_got *g = user;
    if (len == 6 && !memcmp(data, "[DONE]", 6)) {
        g->done = true;
        return true;
    }
    if (g->done) fail_msg("event after [DONE]");
    if (g->n < 64) g->ev[g->n++] = json_loadb(data, len, 0, NULL);
    return true;
}

static void test_streams(void **state)
{
    (void)state;
    struct running *sv = start(NULL, 0, 0);
    s_port = tl_server_port(sv->s);
    assert_true(wait_until(server_healthy, 5000));
    struct resp r;
    request(s_port, "POST", "/v1/completions",
            "{\"prompt\":\"x\",\"max_tokens\":3,\"seed\":0,\"stream\":true,"
            "\"stream_options\":{\"include_usage\":true}}",
            NULL, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.headers, "text/event-stream"));
    // Framing: every event is "data: <json>\n\n" and the stream ends with [DONE].
    assert_true(!strncmp(r.body, "data: {", 7));
    size_t bl = strlen(r.body);
    assert_true(bl > 16 && !strcmp(r.body + bl - 14, "data: [DONE]\n\n"));
    struct tl_sse_parser p;
    struct sse_got g = {0};
    tl_sse_parser_init(&p);
    assert_true(tl_sse_feed(&p, r.body, r.body_len, collect, &g));
    tl_sse_parser_free(&p);
    assert_true(g.done);
    assert_int_equal(g.n, 5); // a, b, c, the finish chunk, the usage chunk
    struct tl_sb text;
    tl_sb_init(&text);
    for (int i = 0; i < 4; i++) {
        assert_string_equal(json_string_value(json_object_get(g.ev[i], "object")),
                            "text_completion");
        assert_true(json_is_null(json_object_get(g.ev[i], "usage")));
        json_t *c = json_array_get(json_object_get(g.ev[i], "choices"), 0);
        tl_sb_adds(&text, json_string_value(json_object_get(c, "text")));
        json_t *fin = json_object_get(c, "finish_reason");
        if (i < 3)
            assert_true(json_is_null(fin));
        else
            assert_string_equal(json_string_value(fin), "length");
    }
    assert_string_equal(text.buf, "abc");
    tl_sb_free(&text);
    assert_int_equal(json_array_size(json_object_get(g.ev[4], "choices")), 0);
    json_t *u = json_object_get(g.ev[4], "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")), 3);
    assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")), 2);
    for (int i = 0; i < g.n; i++)
        json_decref(g.ev[i]);
    resp_free(&r);

    // Chat: the first chunk of each choice carries the role, then content deltas.
    request(s_port, "POST", "/v1/chat/completions",
            "{\"messages\":[{\"role\":\"user\",\"content\":\"hey\"}],\"max_completion_tokens\":2,"
            "\"seed\":7,\"stream\":true}",
            NULL, &r);
    assert_int_equal(r.status, 200);
    memset(&g, 0, sizeof(g));
    tl_sse_parser_init(&p);
    assert_true(tl_sse_feed(&p, r.body, r.body_len, collect, &g));
    tl_sse_parser_free(&p);
    assert_true(g.done);
    assert_int_equal(g.n, 4);
    json_t *d0 = json_object_get(json_array_get(json_object_get(g.ev[0], "choices"), 0), "delta");
    assert_string_equal(json_string_value(json_object_get(d0, "role")), "assistant");
    assert_string_equal(json_string_value(json_object_get(g.ev[0], "object")),
                        "chat.completion.chunk");
    json_t *d1 = json_object_get(json_array_get(json_object_get(g.ev[1], "choices"), 0), "delta");
    assert_string_equal(json_string_value(json_object_get(d1, "content")), "h");
    assert_null(json_object_get(d1, "role"));
    json_t *c3 = json_array_get(json_object_get(g.ev[3], "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(c3, "finish_reason")), "length");
    for (int i = 0; i < g.n; i++)
        json_decref(g.ev[i]);
    resp_free(&r);

    // Chat, not streamed.
    request(s_port, "POST", "/v1/chat/completions",
            "{\"messages\":[{\"role\":\"user\",\"content\":\"hey\"}],\"max_tokens\":3,\"seed\":0}",
            NULL, &r);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "chat.completion");
    json_t *msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    assert_string_equal(json_string_value(json_object_get(msg, "role")), "assistant");
    assert_string_equal(json_string_value(json_object_get(msg, "content")), "abc");
    // The ChatML prompt "<|im_start|>user\nhey<|im_end|>\n<|im_start|>assistant\n"; no BOS is
    // added to a rendered chat (the template writes its own, as vLLM tokenizes chats).
    json_t *u2 = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(u2, "prompt_tokens")),
                     (int)strlen("<|im_start|>user\nhey<|im_end|>\n<|im_start|>assistant\n"));
    json_decref(j);
    resp_free(&r);
    assert_int_equal(stop(sv), 0);
}

// The logprobs object of a choice with its arrays concatenated over stream chunks.
static void lp_append(json_t *acc, json_t *lp)
{
    const char *keys[4] = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
    for (int k = 0; k < 4; k++) {
        json_t *a = json_object_get(acc, keys[k]);
        if (!a) json_object_set_new(acc, keys[k], a = json_array());
        json_array_extend(a, json_object_get(lp, keys[k]));
    }
}

static void test_echo_logprobs_stream_and_not(void **state)
{
    (void)state;
    struct running *sv = start(NULL, 0, 0);
    s_port = tl_server_port(sv->s);
    assert_true(wait_until(server_healthy, 5000));
    const char *body = "{\"prompt\":\"xy\",\"max_tokens\":3,\"seed\":0,\"echo\":true,"
                       "\"logprobs\":2%s}";
    char req[256];
    struct resp r;
    snprintf(req, sizeof(req), body, "");
    request(s_port, "POST", "/v1/completions", req, NULL, &r);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(c, "text")), "xyabc");
    json_t *whole = json_incref(json_object_get(c, "logprobs"));
    // usage is unchanged: 3 prompt tokens (BOS x y), 3 generated.
    json_t *u = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")), 3);
    assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")), 3);
    json_decref(j);
    resp_free(&r);
    assert_int_equal(json_array_size(json_object_get(whole, "tokens")), 6);

    // Streamed: the first chunk echoes the prompt with its logprobs, then one chunk per token;
    // concatenated, the same arrays.
    snprintf(req, sizeof(req), body, ",\"stream\":true");
    request(s_port, "POST", "/v1/completions", req, NULL, &r);
    assert_int_equal(r.status, 200);
    struct tl_sse_parser p;
    struct sse_got g = {0};
    tl_sse_parser_init(&p);
    assert_true(tl_sse_feed(&p, r.body, r.body_len, collect, &g));
    tl_sse_parser_free(&p);
    assert_true(g.done);
    assert_int_equal(g.n, 5); // prompt, a, b, c, finish
    json_t *c0 = json_array_get(json_object_get(g.ev[0], "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(c0, "text")), "xy");
    assert_int_equal(json_array_size(json_object_get(json_object_get(c0, "logprobs"), "tokens")),
                     3);
    json_t *acc = json_object();
    struct tl_sb text;
    tl_sb_init(&text);
    for (int i = 0; i < 4; i++) {
        json_t *ci = json_array_get(json_object_get(g.ev[i], "choices"), 0);
        tl_sb_adds(&text, json_string_value(json_object_get(ci, "text")));
        lp_append(acc, json_object_get(ci, "logprobs"));
    }
    assert_string_equal(text.buf, "xyabc");
    tl_sb_free(&text);
    if (!json_equal(acc, whole)) {
        char *a = json_dumps(acc, 0), *b = json_dumps(whole, 0);
        fail_msg("streamed %s\nwhole %s", a, b);
    }
    json_decref(acc);
    json_decref(whole);
    for (int i = 0; i < g.n; i++)
        json_decref(g.ev[i]);
    resp_free(&r);
    assert_int_equal(stop(sv), 0);
}

static void test_errors(void **state)
{
    (void)state;
    struct running *sv = start(NULL, 256, 0);
    int port = s_port = tl_server_port(sv->s);
    assert_true(wait_until(server_healthy, 5000));
    expect_error(port, "GET", "/nope", NULL, NULL, 404, NULL);
    expect_error(port, "GET", "/v1/completions", NULL, NULL, 405, NULL);
    expect_error(port, "POST", "/health", "{}", NULL, 405, NULL);
    expect_error(port, "POST", "/v1/completions", "{\"prompt\":", NULL, 400, NULL);
    expect_error(port, "POST", "/v1/completions", "{\"prompt\":\"x\",\"top_p\":7}", NULL, 400,
                 "top_p");
    expect_error(port, "POST", "/v1/completions", "{\"prompt\":\"x\",\"model\":\"gpt-4\"}", NULL,
                 404, "model");
    // 64-token context: 2 prompt tokens + 63 is one too many.
    expect_error(port, "POST", "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":63}", NULL, 400,
                 "max_tokens");
    char big[400];
    memset(big, 0, sizeof(big));
    snprintf(big, sizeof(big), "{\"prompt\":\"%0300d\"}", 0);
    expect_error(port, "POST", "/v1/completions", big, NULL, 413, NULL);
    expect_error(port, "POST", "/tokenize", "{\"prompt\":5}", NULL, 400, "prompt");
    expect_error(port, "POST", "/detokenize", "{\"tokens\":[1,999]}", NULL, 400, "tokens");
    struct resp r;
    request(port, "POST", "/tokenize", "{\"prompt\":\"ab\"}", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"tokens\":[1,100,101]"));
    resp_free(&r);
    request(port, "POST", "/detokenize", "{\"tokens\":[100,101]}", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"prompt\":\"ab\""));
    resp_free(&r);
    assert_int_equal(stop(sv), 0);

    sv = start("sekrit", 0, 0);
    port = s_port = tl_server_port(sv->s);
    assert_true(wait_until(server_healthy, 5000)); // /health needs no key
    expect_error(port, "GET", "/v1/models", NULL, NULL, 401, NULL);
    expect_error(port, "GET", "/v1/models", NULL, "Authorization: Bearer wrong\r\n", 401, NULL);
    request(port, "GET", "/v1/models", NULL, "Authorization: Bearer sekrit\r\n", &r);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    assert_int_equal(stop(sv), 0);
}

static void test_queue_bound_gives_429(void **state)
{
    (void)state;
    struct running *sv = start(NULL, 0, 2);
    int port = s_port = tl_server_port(sv->s);
    assert_true(wait_until(server_healthy, 5000));
    // n = 3 choices can never fit a queue of 2.
    expect_error(port, "POST", "/v1/completions", "{\"prompt\":\"x\",\"n\":3}", NULL, 429, NULL);
    struct resp r;
    request(port, "POST", "/v1/completions", "{\"prompt\":\"x\",\"n\":3}", NULL, &r);
    assert_non_null(strcasestr(r.headers, "Retry-After: "));
    resp_free(&r);
    request(port, "POST", "/v1/completions", "{\"prompt\":\"x\",\"n\":2,\"max_tokens\":2}", NULL,
            &r);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    assert_int_equal(stop(sv), 0);
}

static void test_disconnect_cancels(void **state)
{
    (void)state;
    struct running *sv = start(NULL, 0, 0);
    int port = s_port = tl_server_port(sv->s);
    assert_true(wait_until(server_healthy, 5000));
    fe.step_sleep_ms = 20;
    int64_t cancels0 = cancel_calls();
    // A stream that is read a little and then abandoned.
    int fd = connect_to(port);
    send_request(fd, "POST", "/v1/completions",
                 "{\"prompt\":\"x\",\"max_tokens\":50,\"stream\":true}", NULL);
    char buf[512];
    assert_true(recv(fd, buf, sizeof(buf), 0) > 0);
    close(fd);
    assert_true(wait_until(engine_idle, 5000));
    assert_true(cancel_calls() > cancels0);
    // A non-streaming request whose client leaves while it is being computed.
    cancels0 = cancel_calls();
    fd = connect_to(port);
    send_request(fd, "POST", "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":60}", NULL);
    struct timespec ts = {0, 100000000L};
    nanosleep(&ts, NULL);
    close(fd);
    assert_true(wait_until(engine_idle, 5000));
    assert_true(cancel_calls() > cancels0);
    struct resp r;
    request(port, "GET", "/metrics", NULL, NULL, &r);
    assert_non_null(strstr(r.body, "\ntokenloom:client_disconnects_total{model_name=\"fake-model\"} 2\n"));
    assert_non_null(strstr(r.body, "\ntokenloom:kv_cache_usage_perc{model_name=\"fake-model\"} 0\n"));
    resp_free(&r);
    fe.step_sleep_ms = 1;
    assert_int_equal(stop(sv), 0);
}

// GET /health on a kept-alive connection: reads exactly one response, returns its status.
static int keepalive_health(int fd)
{
    const char *req = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    send_all(fd, req, strlen(req));
    char buf[2048];
    size_t len = 0;
    char *end = NULL;
    while (!end && len < sizeof(buf) - 1) {
        ssize_t k = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);
        if (k <= 0) return -1;
        len += (size_t)k;
        buf[len] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    if (!end) return -1;
    const char *cl = strcasestr(buf, "Content-Length:");
    size_t want = (size_t)(end + 4 - buf) + (cl ? strtoul(cl + 15, NULL, 10) : 0);
    while (len < want && len < sizeof(buf) - 1) {
        ssize_t k = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);
        if (k <= 0) break;
        len += (size_t)k;
    }
    int status = 0;
    sscanf(buf, "HTTP/1.%*d %d", &status);
    return status;
}

struct bg_req {
    int port;
    struct resp r;
};

static void *bg_request(void *arg)
{
    struct bg_req *b = arg;
    request(b->port, "POST", "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":20,\"seed\":0}",
            NULL, &b->r);
    return NULL;
}

static bool one_running(void)
{
    return running_requests() == 1;
}

static void test_graceful_stop_finishes_in_flight(void **state)
{
    (void)state;
    struct running *sv = start(NULL, 0, 0);
    int port = s_port = tl_server_port(sv->s);
    assert_true(wait_until(server_healthy, 5000));
    fe.step_sleep_ms = 20;
    struct bg_req b = {.port = port};
    pthread_t th;
    pthread_create(&th, NULL, bg_request, &b);
    assert_true(wait_until(one_running, 5000));
    int keep = connect_to(port); // a keep-alive connection, in use before the stop
    assert_int_equal(keepalive_health(keep), 200);
    tl_server_stop(sv->s);
    // Once draining (the stop is handled by the loop asynchronously), /health on an open
    // connection says 503 while the request is still running.
    int st = 0;
    for (int i = 0; i < 200 && (st = keepalive_health(keep)) == 200; i++) {
        struct timespec ts = {0, 2000000L};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(st, 503);
    close(keep);
    pthread_join(th, NULL);
    assert_int_equal(b.r.status, 200);
    json_t *j = body_json(&b.r);
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(c, "text")), "abcdefghijklmnopqrst");
    json_decref(j);
    resp_free(&b.r);
    fe.step_sleep_ms = 1;
    assert_int_equal(stop(sv), 0);
}

static int64_t finished(enum tl_finish_reason why)
{
    pthread_mutex_lock(&fe.mu);
    int64_t n = fe.n_finished[why];
    pthread_mutex_unlock(&fe.mu);
    return n;
}

// A client that requests a long stream and never reads it (its TCP window fills up): the
// server must not buffer the whole stream for it. Past --max-unsent-bytes the choices are
// cancelled while the connection is still open; the server keeps serving others.
static void test_stalled_reader_is_cancelled(void **state)
{
    (void)state;
    s_max_unsent = 64 * 1024;
    s_max_seq_len = 1 << 17;
    struct running *sv = start(NULL, 0, 0);
    s_max_unsent = 0;
    s_max_seq_len = 0;
    int port = s_port = tl_server_port(sv->s);
    assert_true(wait_until(server_healthy, 5000));
    fe.step_sleep_ms = 0;
    int64_t cancelled0 = finished(TL_FINISH_CANCELLED), length0 = finished(TL_FINISH_LENGTH);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    // Unbounded, this stream would be 8 x 100000 chunks of ~250 bytes (~200 MB).
    send_request(fd, "POST", "/v1/completions",
                 "{\"prompt\":\"x\",\"max_tokens\":100000,\"n\":8,\"logprobs\":2,\"stream\":true,"
                 "\"ignore_eos\":true}",
                 NULL);
    for (int i = 0; i < 1000 && running_requests() < 8; i++) {
        struct timespec ts = {0, 5000000L};
        nanosleep(&ts, NULL);
    }
    assert_true(wait_until(engine_idle, 60000));
    assert_int_equal(finished(TL_FINISH_CANCELLED) - cancelled0, 8);
    assert_int_equal(finished(TL_FINISH_LENGTH) - length0, 0);
    assert_true(server_healthy()); // the stalled connection is still open
    struct resp r;
    request(port, "GET", "/metrics", NULL, NULL, &r);
    assert_non_null(strstr(r.body, "\ntokenloom:client_disconnects_total{model_name=\"fake-model\"} 1\n"));
    resp_free(&r);
    close(fd);
    fe.step_sleep_ms = 1;
    assert_int_equal(stop(sv), 0);
}

// echo with a token-id prompt that cannot fit the context: 400 before the prompt is
// detokenized for the echo (that work runs on the event loop).
static void test_echo_of_overlong_token_prompt_is_not_detokenized(void **state)
{
    (void)state;
    struct running *sv = start(NULL, 0, 0);
    int port = s_port = tl_server_port(sv->s);
    assert_true(wait_until(server_healthy, 5000));
    char body[1024];
    int k = snprintf(body, sizeof(body), "{\"echo\":true,\"max_tokens\":1,\"prompt\":[5");
    for (int i = 1; i < 100; i++)
        k += snprintf(body + k, sizeof(body) - (size_t)k, ",5");
    snprintf(body + k, sizeof(body) - (size_t)k, "]}");
    long before = atomic_load(&n_detokenize);
    expect_error(port, "POST", "/v1/completions", body, NULL, 400, "max_tokens");
    assert_int_equal(atomic_load(&n_detokenize), before);
    // A prompt that fits is echoed (detokenized once).
    struct resp r;
    request(port, "POST", "/v1/completions",
            "{\"echo\":true,\"max_tokens\":1,\"prompt\":[72,105],\"seed\":0}", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"text\":\"Efa\""));
    resp_free(&r);
    assert_int_equal(atomic_load(&n_detokenize), before + 1);
    assert_int_equal(stop(sv), 0);
}

TL_TEST_MAIN(cmocka_unit_test(test_health_models_metrics), cmocka_unit_test(test_completion_plain),
             cmocka_unit_test(test_streams), cmocka_unit_test(test_echo_logprobs_stream_and_not),
             cmocka_unit_test(test_errors), cmocka_unit_test(test_queue_bound_gives_429),
             cmocka_unit_test(test_disconnect_cancels),
             cmocka_unit_test(test_graceful_stop_finishes_in_flight),
             cmocka_unit_test(test_stalled_reader_is_cancelled),
             cmocka_unit_test(test_echo_of_overlong_token_prompt_is_not_detokenized))
