/*
 * Tests for src/server/metrics.c: histogram bucketing (bounds are inclusive, cumulative output,
 * +Inf equals _count) and the exposition text for a known engine snapshot, checked line by line
 * against values computed by hand.
 */
#include "tl_test.h"

#include "server/metrics.h"

static void expect_line(const char *text, const char *line)
{
    char want[256];
    snprintf(want, sizeof(want), "\n%s\n", line);
    if (!strstr(text, want)) fail_msg("missing line: %s", line);
}

static void test_hist_buckets(void **state)
{
    (void)state;
    struct tl_hist h;
    const double le[] = {1, 2, 5};
    tl_hist_init(&h, le, 3);
    const double obs[] = {0.5, 1, 1.5, 5, 7, 100};
    for (int i = 0; i < 6; i++)
        tl_hist_observe(&h, obs[i]);
    assert_int_equal(h.count[0], 2); // 0.5, 1 (le is inclusive)
    assert_int_equal(h.count[1], 1);
    assert_int_equal(h.count[2], 1);
    assert_int_equal(h.n_inf, 2);
    assert_int_equal(h.n, 6);
    assert_true(h.sum == 115.0);
}

static void test_render(void **state)
{
    (void)state;
    struct tl_metrics m;
    tl_metrics_init(&m);
    tl_metrics_observe_done(&m, 1000, 20000, 300000, 5, 10); // 1 ms, 20 ms, 0.3 s
    tl_hist_observe(&m.itl, 0.012);
    tl_metrics_count_http(&m, 200);
    tl_metrics_count_http(&m, 200);
    tl_metrics_count_http(&m, 429);
    tl_metrics_count_http(&m, 418);
    struct tl_engine_stats es;
    memset(&es, 0, sizeof(es));
    es.n_running = 3;
    es.n_waiting = 2;
    es.kv_blocks_total = 200;
    es.kv_blocks_used = 50;
    es.prompt_tokens_total = 123;
    es.generation_tokens_total = 456;
    es.finished_total[TL_FINISH_STOP] = 7;
    es.finished_total[TL_FINISH_CANCELLED] = 1;
    es.steps_total = 9;
    es.step_hist_le[0] = 1;
    es.step_hist_le[1] = 8;
    es.step_hist_le[2] = 64;
    es.step_hist_count[0] = 4;
    es.step_hist_count[1] = 3;
    es.step_hist_count[2] = 2;
    es.step_hist_le[3] = INT64_MAX; // the engine's catch-all: only "+Inf" may show it
    es.step_hist_count[3] = 1;
    es.step_tokens_sum = 100;
    es.kv_block_size = 16;
    struct tl_sb sb;
    tl_sb_init(&sb);
    tl_metrics_render(&m, &es, &sb);
    const char *t = sb.buf;
    expect_line(t, "# TYPE tokenloom:num_requests_running gauge");
    expect_line(t, "tokenloom:num_requests_running 3");
    expect_line(t, "tokenloom:num_requests_waiting 2");
    expect_line(t, "tokenloom:kv_cache_usage_perc 0.25");
    expect_line(t, "tokenloom:prompt_tokens_total 123");
    expect_line(t, "tokenloom:generation_tokens_total 456");
    expect_line(t, "tokenloom:request_success_total{finished_reason=\"stop\"} 7");
    expect_line(t, "tokenloom:request_success_total{finished_reason=\"abort\"} 1");
    expect_line(t, "tokenloom:engine_steps_total 9");
    expect_line(t, "tokenloom:time_to_first_token_seconds_bucket{le=\"0.01\"} 0");
    expect_line(t, "tokenloom:time_to_first_token_seconds_bucket{le=\"0.02\"} 1");
    expect_line(t, "tokenloom:time_to_first_token_seconds_bucket{le=\"+Inf\"} 1");
    expect_line(t, "tokenloom:time_to_first_token_seconds_count 1");
    expect_line(t, "tokenloom:inter_token_latency_seconds_bucket{le=\"0.015\"} 1");
    expect_line(t, "tokenloom:e2e_request_latency_seconds_bucket{le=\"0.1\"} 0");
    expect_line(t, "tokenloom:e2e_request_latency_seconds_bucket{le=\"0.3\"} 1");
    expect_line(t, "tokenloom:request_queue_time_seconds_bucket{le=\"0.001\"} 1");
    expect_line(t, "tokenloom:iteration_tokens_total_bucket{le=\"1\"} 4");
    expect_line(t, "tokenloom:iteration_tokens_total_bucket{le=\"8\"} 7");
    expect_line(t, "tokenloom:iteration_tokens_total_bucket{le=\"64\"} 9");
    expect_line(t, "tokenloom:iteration_tokens_total_bucket{le=\"+Inf\"} 10");
    assert_null(strstr(t, "9223372036854775807"));
    expect_line(t, "tokenloom:iteration_tokens_total_sum 100");
    expect_line(t, "tokenloom:http_requests_total{code=\"200\"} 2");
    expect_line(t, "tokenloom:http_requests_total{code=\"429\"} 1");
    expect_line(t, "tokenloom:http_requests_total{code=\"other\"} 1");
    // vLLM's names, as the inference gateway's endpoint picker reads them.
    expect_line(t, "# TYPE vllm:num_requests_waiting gauge");
    expect_line(t, "vllm:num_requests_waiting 2");
    expect_line(t, "vllm:num_requests_running 3");
    expect_line(t, "vllm:kv_cache_usage_perc 0.25");
    expect_line(t, "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"200\"} 1");
    // Every sample line is "name[{labels}] value" and every metric has HELP and TYPE.
    int n_type = 0;
    for (const char *l = t; *l;) {
        const char *e = strchr(l, '\n');
        assert_non_null(e);
        if (!strncmp(l, "# TYPE ", 7))
            n_type++;
        else if (l[0] != '#')
            assert_true((!strncmp(l, "tokenloom:", 10) || !strncmp(l, "vllm:", 5)) &&
                        memchr(l, ' ', e - l));
        l = e + 1;
    }
    assert_true(n_type >= 20);
    tl_sb_free(&sb);
    // Without an engine snapshot (still loading) everything renders as zero.
    tl_sb_init(&sb);
    tl_metrics_render(&m, NULL, &sb);
    expect_line(sb.buf, "tokenloom:kv_cache_usage_perc 0");
    tl_sb_free(&sb);
}

TL_TEST_MAIN(cmocka_unit_test(test_hist_buckets), cmocka_unit_test(test_render))
