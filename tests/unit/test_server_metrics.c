/*
 * Tests for src/front/metrics.c: histogram bucketing (bounds are inclusive, cumulative output,
 * +Inf equals _count), the exposition text for a known engine snapshot, checked line by line
 * against values computed by hand (every series labelled with the escaped model name), and the
 * utilization window: rates from counter growth between samples, divided by the ceilings.
 */
#include "tl_test.h"

#include "front/metrics.h"

#include <math.h>
#include <time.h>

static void expect_line(const char *text, const char *line)
{
    char want[512];
    snprintf(want, sizeof(want), "\n%s\n", line);
    if (!strstr(text, want)) fail_msg("missing line: %s", line);
}

// The value of the sample line starting with `series` (NAN when absent).
static double sample_value(const char *text, const char *series)
{
    char want[512];
    snprintf(want, sizeof(want), "\n%s ", series);
    const char *p = strstr(text, want);
    return p ? strtod(p + strlen(want), NULL) : NAN;
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

#define MN "model_name=\"tiny\\\"m\""

static void test_render(void **state)
{
    (void)state;
    struct tl_metrics m;
    tl_metrics_init(&m);
    tl_metrics_set_model(&m, "tiny\"m", "q8_0", NULL);
    tl_metrics_observe_done(&m, 1000, 20000, 300000, 5, 10);   // 1 ms, 20 ms, 0.3 s
    tl_metrics_observe_done(&m, 50000, 70000, 400000, 5, 10);  // queued exactly 50 ms: not under
    tl_metrics_observe_done(&m, 49999, 70000, 400000, 5, 10);  // just under
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
    es.seqs_hist_count[1] = 5; // 5 steps of 2..8 sequences
    es.seqs_sum = 20;
    es.decode_hist_count[0] = 2;
    es.decode_hist_count[2] = 1;
    es.decode_tokens_sum = 40;
    es.prefill_hist_count[3] = 2;
    es.prefill_tokens_sum = 300;
    es.int8_ops_total = 1.5e12;
    es.flops_total = 2e9;
    es.weight_bytes_total = 3e9;
    es.kv_bytes_total = 4e6;
    es.kv_block_size = 16;
    struct tl_sb sb;
    tl_sb_init(&sb);
    tl_metrics_render(&m, &es, 1000000, &sb);
    const char *t = sb.buf;
    expect_line(t, "# TYPE tokenloom:num_requests_running gauge");
    expect_line(t, "tokenloom:num_requests_running{" MN "} 3");
    expect_line(t, "tokenloom:num_requests_waiting{" MN "} 2");
    expect_line(t, "tokenloom:kv_cache_usage_perc{" MN "} 0.25");
    expect_line(t, "tokenloom:prompt_tokens_total{" MN "} 123");
    expect_line(t, "tokenloom:generation_tokens_total{" MN "} 456");
    expect_line(t, "tokenloom:request_success_total{finished_reason=\"stop\"," MN "} 7");
    expect_line(t, "tokenloom:request_success_total{finished_reason=\"abort\"," MN "} 1");
    expect_line(t, "tokenloom:engine_steps_total{" MN "} 9");
    expect_line(t, "tokenloom:time_to_first_token_seconds_bucket{le=\"0.01\"," MN "} 0");
    expect_line(t, "tokenloom:time_to_first_token_seconds_bucket{le=\"0.02\"," MN "} 1");
    expect_line(t, "tokenloom:time_to_first_token_seconds_bucket{le=\"+Inf\"," MN "} 3");
    expect_line(t, "tokenloom:time_to_first_token_seconds_count{" MN "} 3");
    expect_line(t, "tokenloom:inter_token_latency_seconds_bucket{le=\"0.015\"," MN "} 1");
    expect_line(t, "tokenloom:e2e_request_latency_seconds_bucket{le=\"0.1\"," MN "} 0");
    expect_line(t, "tokenloom:e2e_request_latency_seconds_bucket{le=\"0.3\"," MN "} 1");
    expect_line(t, "tokenloom:request_queue_time_seconds_bucket{le=\"0.001\"," MN "} 1");
    // 0.05 is a bound (le is inclusive: the 50 ms request is in it, and not "under 50 ms")
    expect_line(t, "tokenloom:request_queue_time_seconds_bucket{le=\"0.04\"," MN "} 1");
    expect_line(t, "tokenloom:request_queue_time_seconds_bucket{le=\"0.05\"," MN "} 3");
    expect_line(t, "tokenloom:request_queue_time_under_50ms_total{" MN "} 2");
    expect_line(t, "tokenloom:batch_tokens_per_step_bucket{le=\"1\"," MN "} 4");
    expect_line(t, "tokenloom:batch_tokens_per_step_bucket{le=\"8\"," MN "} 7");
    expect_line(t, "tokenloom:batch_tokens_per_step_bucket{le=\"64\"," MN "} 9");
    expect_line(t, "tokenloom:batch_tokens_per_step_bucket{le=\"+Inf\"," MN "} 10");
    assert_null(strstr(t, "9223372036854775807"));
    expect_line(t, "tokenloom:batch_tokens_per_step_sum{" MN "} 100");
    expect_line(t, "tokenloom:batch_tokens_per_step_bucket{le=\"8\"," MN "} 7");
    expect_line(t, "tokenloom:batch_tokens_per_step_sum{" MN "} 100");
    expect_line(t, "tokenloom:batch_sequences_per_step_bucket{le=\"1\"," MN "} 0");
    expect_line(t, "tokenloom:batch_sequences_per_step_bucket{le=\"8\"," MN "} 5");
    expect_line(t, "tokenloom:batch_sequences_per_step_count{" MN "} 5");
    expect_line(t, "tokenloom:batch_sequences_per_step_sum{" MN "} 20");
    expect_line(t, "tokenloom:batch_decode_tokens_per_step_bucket{le=\"1\"," MN "} 2");
    expect_line(t, "tokenloom:batch_decode_tokens_per_step_bucket{le=\"64\"," MN "} 3");
    expect_line(t, "tokenloom:batch_decode_tokens_per_step_sum{" MN "} 40");
    expect_line(t, "tokenloom:batch_prefill_tokens_per_step_bucket{le=\"64\"," MN "} 0");
    expect_line(t, "tokenloom:batch_prefill_tokens_per_step_bucket{le=\"+Inf\"," MN "} 2");
    expect_line(t, "tokenloom:batch_prefill_tokens_per_step_count{" MN "} 2");
    expect_line(t, "tokenloom:engine_ops_total{kind=\"int8\"," MN "} 1500000000000");
    expect_line(t, "tokenloom:engine_ops_total{kind=\"fp32\"," MN "} 2000000000");
    expect_line(t, "tokenloom:engine_bytes_read_total{kind=\"weights\"," MN "} 3000000000");
    expect_line(t, "tokenloom:engine_bytes_read_total{kind=\"kv\"," MN "} 4000000");
    expect_line(t, "tokenloom:cache_config_info{block_size=\"16\",num_blocks=\"200\","
                   "kv_type=\"q8_0\"," MN "} 1");
    assert_non_null(strstr(t, "\ntokenloom:build_info{version=\""));
    // No machine handed in: the kernel ISA is "unknown".
    assert_non_null(strstr(t, "\",isa=\"unknown\"," MN "} 1\n"));
    // No ceilings: no utilization gauges and no machine_* gauges (absent, not zero).
    assert_null(strstr(t, "compute_utilization"));
    assert_null(strstr(t, "machine_peak"));
    expect_line(t, "tokenloom:http_requests_total{code=\"200\"," MN "} 2");
    expect_line(t, "tokenloom:http_requests_total{code=\"429\"," MN "} 1");
    expect_line(t, "tokenloom:http_requests_total{code=\"other\"," MN "} 1");
    // vLLM's names, as the inference gateway's endpoint picker reads them.
    expect_line(t, "# TYPE vllm:num_requests_waiting gauge");
    expect_line(t, "vllm:num_requests_waiting{" MN "} 2");
    expect_line(t, "vllm:num_requests_running{" MN "} 3");
    expect_line(t, "vllm:kv_cache_usage_perc{" MN "} 0.25");
    expect_line(t, "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"200\"," MN "} 1");
    // Every sample line is "name{...,model_name=...} value" (process_* excepted) and every
    // metric has HELP and TYPE.
    int n_type = 0;
    for (const char *l = t; *l;) {
        const char *e = strchr(l, '\n');
        assert_non_null(e);
        if (!strncmp(l, "# TYPE ", 7))
            n_type++;
        else if (l[0] != '#' && strncmp(l, "process_", 8)) {
            char line[512];
            snprintf(line, sizeof(line), "%.*s", (int)(e - l), l);
            assert_true(!strncmp(l, "tokenloom:", 10) || !strncmp(l, "vllm:", 5));
            if (!strstr(line, MN "} ")) fail_msg("no model_name label: %s", line);
        }
        l = e + 1;
    }
    assert_true(n_type >= 30);
    tl_sb_free(&sb);
    // Without an engine snapshot (still loading) everything renders as zero.
    tl_sb_init(&sb);
    tl_metrics_render(&m, NULL, 1000000, &sb);
    expect_line(sb.buf, "tokenloom:kv_cache_usage_perc{" MN "} 0");
    expect_line(sb.buf, "tokenloom:engine_busy_ratio{" MN "} 0");
    tl_sb_free(&sb);
}

// The window: two samples 4 s apart, then a scrape 1 s later; the rates are the growth since
// the oldest sample within 10 s, divided by the ceilings.
static void test_window(void **state)
{
    (void)state;
    struct tl_metrics m;
    tl_metrics_init(&m);
    // The machine as the caller hands it in (cmd_serve.c measures it).
    struct tl_machine mc = {.kernels_isa = "avx2",
                            .have_ceilings = true,
                            .ceilings = {.int8_ops_per_s = 1e11,
                                         .fp32_flops_per_s = 1e10,
                                         .mem_read_bytes_per_s = 1e10,
                                         .n_threads = 2}};
    tl_metrics_set_model(&m, "m", "f16", &mc);
    struct tl_engine_stats es;
    memset(&es, 0, sizeof(es));
    const int64_t s = 1000000;
    assert_true(tl_metrics_tick_due(&m, 100 * s));
    tl_metrics_tick(&m, &es, 100 * s); // everything zero at t=100 s
    assert_false(tl_metrics_tick_due(&m, 100 * s + 999999));
    tl_metrics_observe_done(&m, 10000, 20000, 30000, 1, 1); // queued 10 ms
    tl_metrics_observe_done(&m, 90000, 95000, 99000, 1, 1); // queued 90 ms
    // By t=105 s: 5 s of work at 2e10 int8 ops/s and 1e9 FLOP/s, 2.5e9 bytes/s, busy 2.5 s,
    // 50 steps of 4 sequences, 160 decode tokens over 40 steps, 100 prefill tokens over 10.
    es.int8_ops_total = 1e11;
    es.flops_total = 5e9;
    es.weight_bytes_total = 1.2e10;
    es.kv_bytes_total = 5e8;
    es.step_us_total = 2500000;
    es.steps_total = 50;
    es.step_tokens_sum = 260;
    es.seqs_sum = 200;
    es.decode_hist_count[5] = 40;
    es.decode_tokens_sum = 160;
    es.prefill_hist_count[6] = 10;
    es.prefill_tokens_sum = 100;
    struct tl_metrics_window w;
    tl_metrics_window(&m, &es, 105 * s, &w);
    assert_true(fabs(w.seconds - 5) < 1e-9);
    assert_true(fabs(w.int8_ops_per_s - 2e10) < 1);
    assert_true(fabs(w.flops_per_s - 1e9) < 1e-3);
    assert_true(fabs(w.bytes_read_per_s - 2.5e9) < 1e-3);
    // 2e10/1e11 + 1e9/1e10 = 0.2 + 0.1
    assert_true(fabs(w.compute_utilization - 0.3) < 1e-12);
    assert_true(fabs(w.memory_utilization - 0.25) < 1e-12);
    assert_true(fabs(w.busy_ratio - 0.5) < 1e-12);
    assert_true(fabs(w.steps_per_s - 10) < 1e-12);
    assert_true(fabs(w.seqs_per_step - 4) < 1e-12);
    assert_true(fabs(w.tokens_per_step - 5.2) < 1e-12);
    assert_true(fabs(w.decode_tokens_per_step - 4) < 1e-12);
    assert_true(fabs(w.prefill_tokens_per_step - 10) < 1e-12);
    assert_true(fabs(w.queue_under_50ms_ratio - 0.5) < 1e-12);
    struct tl_sb sb;
    tl_sb_init(&sb);
    tl_metrics_render(&m, &es, 105 * s, &sb);
    assert_true(fabs(sample_value(sb.buf, "tokenloom:compute_utilization{model_name=\"m\"}") - 0.3) <
                1e-12);
    expect_line(sb.buf, "tokenloom:memory_bandwidth_utilization{model_name=\"m\"} 0.25");
    expect_line(sb.buf, "tokenloom:engine_busy_ratio{model_name=\"m\"} 0.5");
    expect_line(sb.buf, "tokenloom:machine_peak_int8_ops_per_second{model_name=\"m\"} 100000000000");
    expect_line(sb.buf, "tokenloom:machine_memory_read_bytes_per_second{model_name=\"m\"} 10000000000");
    // The ISA handed in is the one build_info reports.
    assert_non_null(strstr(sb.buf, "\",isa=\"avx2\",model_name=\"m\"} 1\n"));
    tl_sb_free(&sb);
    // Samples every second: after 12 more, the window starts at most 10 s back.
    for (int k = 1; k <= 12; k++)
        tl_metrics_tick(&m, &es, (105 + k) * s);
    tl_metrics_window(&m, &es, 117 * s + s / 2, &w);
    assert_true(w.seconds <= 10.0 && w.seconds >= 9.0);
    assert_true(w.busy_ratio == 0 && w.compute_utilization == 0); // no growth since
    assert_true(w.queue_under_50ms_ratio == -1);                  // none finished in it
    // Nothing sampled yet: no rates.
    tl_metrics_init(&m);
    tl_metrics_window(&m, &es, 5 * s, &w);
    assert_true(w.seconds == 0 && w.compute_utilization == -1);
}

// process_* metrics: present, named and typed as client libraries do, values from /proc.
static void test_process(void **state)
{
    (void)state;
    struct tl_sb sb;
    tl_sb_init(&sb);
    tl_metrics_render_process(&sb);
    const char *t = sb.buf;
    const char *names[] = {"process_resident_memory_bytes", "process_virtual_memory_bytes",
                           "process_cpu_seconds_total",     "process_open_fds",
                           "process_max_fds",               "process_start_time_seconds"};
    for (int i = 0; i < 6; i++) {
        char want[128];
        snprintf(want, sizeof(want), "\n%s ", names[i]);
        if (!strstr(t, want)) fail_msg("missing %s", names[i]);
    }
    assert_non_null(strstr(t, "# TYPE process_cpu_seconds_total counter\n"));
    double rss = strtod(strstr(t, "\nprocess_resident_memory_bytes ") + 31, NULL);
    double vsz = strtod(strstr(t, "\nprocess_virtual_memory_bytes ") + 30, NULL);
    double start = strtod(strstr(t, "\nprocess_start_time_seconds ") + 28, NULL);
    assert_true(rss > 1e5 && rss <= vsz);
    assert_true(start > 1.5e9 && start <= (double)time(NULL) + 1);
    tl_sb_free(&sb);
}

TL_TEST_MAIN(cmocka_unit_test(test_hist_buckets), cmocka_unit_test(test_render),
             cmocka_unit_test(test_window), cmocka_unit_test(test_process))
