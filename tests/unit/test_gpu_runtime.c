/*
 * The device runtime (src/gpu: gpu_device.c, gpu_rec.c, vk_*.c) on the test device (lavapipe in
 * CI): device names and indices, buffers and copies, the recorder's one-submission-one-wait
 * shape and its counters, and every failure path as a one-line error that leaves the process
 * (and, except for a lost device, the device) usable: a bad name, an unknown index, no driver,
 * out of device memory, a bad copy, and VK_ERROR_DEVICE_LOST (injected).
 * Without Vulkan compiled in, opening any device must say so; the device tests are TAP skips.
 */
#include "gpu_test.h"

#include "gpu/gpu_ops.h"

static void test_open_bad_name(void **state)
{
    (void)state;
    static const char *const bad[] = {"cuda:0",  "vulkan:",    "vulkan:x", "vulkan:-1",
                                      "vulkan0", "vulkan:1:2", "",         "vulkan:99999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        tl_gpu_device *d = (tl_gpu_device *)1;
        assert_int_equal(tl_gpu_device_open(bad[i], &d), TL_ERR_INVALID_ARG);
        assert_null(d);
        if (!strstr(tl_last_error(), "not understood")) fail_msg("%s: %s", bad[i], tl_last_error());
    }
}

// --device names: parsed the same with or without Vulkan compiled in.
static void test_device_spec_parse(void **state)
{
    (void)state;
    struct tl_device_spec s;
    assert_int_equal(tl_device_spec_parse("cpu", &s), TL_OK);
    assert_int_equal(s.kind, TL_DEVICE_CPU);
    assert_int_equal(tl_device_spec_parse("auto", &s), TL_OK);
    assert_int_equal(s.kind, TL_DEVICE_AUTO);
    assert_int_equal(tl_device_spec_parse("vulkan", &s), TL_OK);
    assert_true(s.kind == TL_DEVICE_VULKAN && s.index == 0);
    assert_int_equal(tl_device_spec_parse("vulkan:12", &s), TL_OK);
    assert_true(s.kind == TL_DEVICE_VULKAN && s.index == 12);
    static const char *const bad[] = {
        "CPU", "gpu", "cuda:0", "vulkan:", "vulkan:1x", "auto:0", "", "vulkan:70000"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(tl_device_spec_parse(bad[i], &s), TL_ERR_INVALID_ARG);
        if (!strstr(tl_last_error(), "auto, cpu, vulkan or vulkan:N"))
            fail_msg("%s: %s", bad[i], tl_last_error());
    }
}

static void test_open_not_compiled(void **state)
{
    (void)state;
    if (tl_gpu_vulkan_compiled()) skip();
    tl_gpu_device *d;
    assert_int_equal(tl_gpu_device_open("vulkan:0", &d), TL_ERR_UNSUPPORTED);
    assert_non_null(strstr(tl_last_error(), "not compiled in"));
}

static void test_open_unknown_index(void **state)
{
    (void)state;
    gpu_test_device(); // skips without a device
    tl_gpu_device *d = (tl_gpu_device *)1;
    assert_int_equal(tl_gpu_device_open("vulkan:4096", &d), TL_ERR_NOT_FOUND);
    assert_null(d);
    const char *e = tl_last_error();
    if (!strstr(e, "vulkan:4096: no such device") || !strstr(e, "the loader sees"))
        fail_msg("message: %s", e);
    assert_null(strchr(e, '\n'));
}

// The loader with no driver: VK_ICD_FILENAMES / VK_DRIVER_FILES naming a file that is not there.
static void test_open_no_driver(void **state)
{
    (void)state;
    gpu_test_device();
    char *old_icd = getenv("VK_ICD_FILENAMES") ? strdup(getenv("VK_ICD_FILENAMES")) : NULL;
    char *old_drv = getenv("VK_DRIVER_FILES") ? strdup(getenv("VK_DRIVER_FILES")) : NULL;
    setenv("VK_ICD_FILENAMES", "/nonexistent/tokenloom-none.json", 1);
    setenv("VK_DRIVER_FILES", "/nonexistent/tokenloom-none.json", 1);
    tl_gpu_device *d = (tl_gpu_device *)1;
    tl_status st = tl_gpu_device_open("vulkan:0", &d);
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", tl_last_error());
    if (old_icd)
        setenv("VK_ICD_FILENAMES", old_icd, 1);
    else
        unsetenv("VK_ICD_FILENAMES");
    if (old_drv)
        setenv("VK_DRIVER_FILES", old_drv, 1);
    else
        unsetenv("VK_DRIVER_FILES");
    free(old_icd);
    free(old_drv);
    assert_null(d);
    if (!(st == TL_ERR_UNSUPPORTED || st == TL_ERR_NOT_FOUND) ||
        !(strstr(msg, "no driver") || strstr(msg, "no device")))
        fail_msg("status %d: %s", st, msg);
}

static void test_device_identity(void **state)
{
    (void)state;
    tl_gpu_device *d = gpu_test_device();
    // The name carries the index and the driver's device name, as `tokenloom devices` lists it.
    assert_int_equal(strncmp(tl_gpu_device_name(d), gpu_test_spec(), strlen(gpu_test_spec())), 0);
    assert_non_null(strchr(tl_gpu_device_name(d), '('));
    if (strstr(tl_gpu_device_name(d), "llvmpipe")) assert_true(tl_gpu_device_is_cpu(d));
}

static void test_buffer_roundtrip_counts(void **state)
{
    (void)state;
    tl_gpu_device *d = gpu_test_device();
    enum { N = 1001 };
    float src[N], back[N];
    for (int i = 0; i < N; i++)
        src[i] = tl_test_rnd_f();
    struct tl_gpu_stats s0, s1;
    tl_gpu_device_stats(d, &s0);
    tl_gpu_buffer *b = gpu_test_buffer(d, NULL, sizeof(src));
    tl_gpu_device_stats(d, &s1);
    assert_int_equal(s1.buffer_bytes - s0.buffer_bytes, sizeof(src));
    assert_int_equal(tl_gpu_buffer_bytes(b), sizeof(src));
    assert_int_equal(tl_gpu_buffer_write(b, 0, src, sizeof(src)), TL_OK);
    memset(back, 0, sizeof(back));
    assert_int_equal(tl_gpu_buffer_read(b, 0, back, sizeof(back)), TL_OK);
    assert_memory_equal(src, back, sizeof(src));
    // an odd-sized range at an odd offset
    unsigned char part[7];
    assert_int_equal(tl_gpu_buffer_read(b, 13, part, sizeof(part)), TL_OK);
    assert_memory_equal(part, (const unsigned char *)src + 13, sizeof(part));
    tl_gpu_device_stats(d, &s1);
    assert_int_equal(s1.n_submits - s0.n_submits, 3);
    assert_int_equal(s1.n_waits - s0.n_waits, 3);
    assert_int_equal(s1.n_uploads - s0.n_uploads, 1);
    assert_int_equal(s1.n_downloads - s0.n_downloads, 2);
    assert_int_equal(s1.upload_bytes - s0.upload_bytes, sizeof(src));
    assert_int_equal(s1.download_bytes - s0.download_bytes, sizeof(src) + sizeof(part));
    assert_int_equal(s1.n_dispatches - s0.n_dispatches, 0);
    tl_gpu_buffer_destroy(b);
    tl_gpu_device_stats(d, &s1);
    assert_int_equal(s1.buffer_bytes, s0.buffer_bytes);
}

// Many dependent dispatches in one recording: one submission, one wait, and the barriers make
// each add see the previous one's result (y = x + 12 b, added in order as the CPU does).
static void test_one_submission(void **state)
{
    (void)state;
    tl_gpu_device *d = gpu_test_device();
    enum { N = 3000, K = 12 };
    static float x[N], b[N], want[N], got[N];
    for (int i = 0; i < N; i++) {
        x[i] = tl_test_rnd_f();
        b[i] = tl_test_rnd_f() * 1e-3f;
        want[i] = x[i];
        for (int k = 0; k < K; k++)
            want[i] += b[i];
    }
    tl_gpu_buffer *bx = gpu_test_buffer(d, NULL, sizeof(x));
    tl_gpu_buffer *bb = gpu_test_buffer(d, NULL, sizeof(b));
    tl_gpu_rec *r;
    assert_int_equal(tl_gpu_rec_create(d, &r), TL_OK);
    struct tl_gpu_stats s0, s1;
    tl_gpu_device_stats(d, &s0);
    for (int rep = 0; rep < 2; rep++) { // the recorder is reusable after a run
        assert_int_equal(tl_gpu_rec_upload(r, bx, 0, x, sizeof(x)), TL_OK);
        assert_int_equal(tl_gpu_rec_upload(r, bb, 0, b, sizeof(b)), TL_OK);
        for (int k = 0; k < K; k++)
            assert_int_equal(tl_gpu_eltwise(r, TL_GPU_ADD, bx, bb, bx, N), TL_OK);
        assert_int_equal(tl_gpu_rec_download(r, bx, 0, got, sizeof(got)), TL_OK);
        tl_gpu_device_stats(d, &s1);
        assert_int_equal(s1.n_submits, s0.n_submits + (uint64_t)rep); // nothing ran yet
        assert_int_equal(tl_gpu_rec_run(r), TL_OK);
        assert_memory_equal(got, want, sizeof(want));
    }
    tl_gpu_device_stats(d, &s1);
    assert_int_equal(s1.n_submits - s0.n_submits, 2);
    assert_int_equal(s1.n_waits - s0.n_waits, 2);
    assert_int_equal(s1.n_dispatches - s0.n_dispatches, 2 * K);
    assert_int_equal(s1.n_uploads - s0.n_uploads, 4);
    assert_int_equal(s1.n_downloads - s0.n_downloads, 2);
    // an empty recording submits nothing
    assert_int_equal(tl_gpu_rec_run(r), TL_OK);
    tl_gpu_device_stats(d, &s0);
    assert_int_equal(s0.n_submits, s1.n_submits);
    tl_gpu_rec_destroy(r);
    tl_gpu_buffer_destroy(bx);
    tl_gpu_buffer_destroy(bb);
}

// Device time from timestamps: every command's time lands in its phase, the phases add up to
// the busy time, and a phase with no command gets nothing. (No speed is asserted.)
static void test_device_time(void **state)
{
    (void)state;
    tl_gpu_device *d = gpu_test_device();
    struct tl_gpu_stats s0, s1;
    tl_gpu_device_stats(d, &s0);
    if (!s0.timed) {
        fprintf(stderr, "# %s has no timestamps on its compute queue\n", tl_gpu_device_name(d));
        skip();
    }
    enum { N_IN = 512, N_OUT = 256, N_TOK = 8 };
    float *w = malloc(N_IN * N_OUT * 4), *x = malloc(N_IN * N_TOK * 4),
          *y = malloc(N_OUT * N_TOK * 4);
    for (int i = 0; i < N_IN * N_OUT; i++)
        w[i] = tl_test_rnd_f();
    for (int i = 0; i < N_IN * N_TOK; i++)
        x[i] = tl_test_rnd_f();
    tl_gpu_buffer *bw =
        gpu_test_buffer(d, NULL, tl_gpu_matmul_weight_bytes(TL_DTYPE_F32, N_IN, N_OUT));
    assert_int_equal(tl_gpu_buffer_write(bw, 0, w, N_IN * N_OUT * 4), TL_OK);
    tl_gpu_buffer *bx = gpu_test_buffer(d, NULL, N_IN * N_TOK * 4);
    tl_gpu_buffer *by = gpu_test_buffer(d, NULL, N_OUT * N_TOK * 4);
    tl_gpu_rec *r;
    assert_int_equal(tl_gpu_rec_create(d, &r), TL_OK);
    tl_gpu_device_stats(d, &s0);
    assert_int_equal(tl_gpu_rec_upload(r, bx, 0, x, N_IN * N_TOK * 4), TL_OK);
    assert_int_equal(tl_gpu_matmul(r, TL_DTYPE_F32, bw, N_IN, N_OUT, bx, N_TOK, by), TL_OK);
    assert_int_equal(tl_gpu_eltwise(r, TL_GPU_SWIGLU, by, by, by, N_OUT * N_TOK), TL_OK);
    assert_int_equal(tl_gpu_rec_download(r, by, 0, y, N_OUT * N_TOK * 4), TL_OK);
    assert_int_equal(tl_gpu_rec_run(r), TL_OK);
    tl_gpu_device_stats(d, &s1);
    uint64_t busy = s1.busy_ns - s0.busy_ns, sum = 0;
    for (int p = 0; p < TL_GPU_PHASE_COUNT; p++)
        sum += s1.phase_ns[p] - s0.phase_ns[p];
    assert_true(busy > 0);
    assert_int_equal(sum, busy);
    assert_true(s1.phase_ns[TL_GPU_PHASE_MATMUL] > s0.phase_ns[TL_GPU_PHASE_MATMUL]);
    assert_int_equal(s1.phase_ns[TL_GPU_PHASE_ATTENTION], s0.phase_ns[TL_GPU_PHASE_ATTENTION]);
    tl_gpu_rec_destroy(r);
    tl_gpu_buffer_destroy(bw), tl_gpu_buffer_destroy(bx), tl_gpu_buffer_destroy(by);
    free(w), free(x), free(y);
}

// A bad command is refused when recorded, the error is sticky, and run() runs nothing.
static void test_recording_errors(void **state)
{
    (void)state;
    tl_gpu_device *d = gpu_test_device();
    float v[16] = {0};
    tl_gpu_buffer *b = gpu_test_buffer(d, v, sizeof(v));
    tl_gpu_rec *r;
    assert_int_equal(tl_gpu_rec_create(d, &r), TL_OK);
    struct tl_gpu_stats s0, s1;
    tl_gpu_device_stats(d, &s0);
    assert_int_equal(tl_gpu_rec_upload(r, b, 0, v, sizeof(v)), TL_OK);
    assert_int_equal(tl_gpu_rec_upload(r, b, 8, v, sizeof(v)), TL_ERR_INVALID_ARG);
    assert_non_null(strstr(tl_last_error(), "outside the buffer"));
    assert_int_equal(tl_gpu_rec_download(r, b, 0, v, 4), TL_ERR_INVALID_ARG); // sticky
    // an op whose operand is too small
    assert_int_equal(tl_gpu_eltwise(r, TL_GPU_MUL, b, b, b, 17), TL_ERR_INVALID_ARG);
    assert_int_equal(tl_gpu_rec_run(r), TL_ERR_INVALID_ARG);
    tl_gpu_device_stats(d, &s1);
    assert_int_equal(s1.n_submits, s0.n_submits);
    // the recorder is usable again
    assert_int_equal(tl_gpu_eltwise(r, TL_GPU_MUL, b, b, b, 16), TL_OK);
    assert_int_equal(tl_gpu_rec_run(r), TL_OK);
    // shape errors of the ops
    assert_int_equal(tl_gpu_eltwise(r, TL_GPU_ADD, b, b, b, 0), TL_ERR_INVALID_ARG);
    assert_int_equal(tl_gpu_rec_run(r), TL_ERR_INVALID_ARG);
    assert_int_equal(tl_gpu_matmul(r, TL_DTYPE_Q4_0, b, 32, 1, b, 1, b), TL_ERR_UNSUPPORTED);
    assert_non_null(strstr(tl_last_error(), "not supported on the device"));
    assert_int_equal(tl_gpu_rec_run(r), TL_ERR_UNSUPPORTED);
    assert_int_equal(tl_gpu_matmul(r, TL_DTYPE_Q8_0, b, 31, 1, b, 1, b), TL_ERR_INVALID_ARG);
    assert_int_equal(tl_gpu_rec_run(r), TL_ERR_INVALID_ARG);
    assert_int_equal(tl_gpu_rope(r, b, 1, 1, 3, TL_ROPE_NORMAL, b, b, 1), TL_ERR_INVALID_ARG);
    assert_int_equal(tl_gpu_rec_run(r), TL_ERR_INVALID_ARG);
    tl_gpu_rec_destroy(r);
    tl_gpu_buffer_destroy(b);
}

static void test_out_of_device_memory(void **state)
{
    (void)state;
    tl_gpu_device *d = gpu_test_device();
    struct tl_gpu_stats s0, s1;
    tl_gpu_device_stats(d, &s0);
    tl_gpu_buffer *b = (tl_gpu_buffer *)1;
    assert_int_equal(tl_gpu_buffer_create(d, (size_t)1 << 52, &b), TL_ERR_NOMEM);
    assert_null(b);
    const char *e = tl_last_error();
    if (!strstr(e, "out of device memory") || !strstr(e, "GiB")) fail_msg("message: %s", e);
    assert_int_equal(tl_gpu_buffer_create(d, 0, &b), TL_ERR_INVALID_ARG);
    tl_gpu_device_stats(d, &s1);
    assert_int_equal(s1.buffer_bytes, s0.buffer_bytes);
    // the device still works
    float v = 1.5f, w = 0;
    b = gpu_test_buffer(d, &v, sizeof(v));
    assert_int_equal(tl_gpu_buffer_read(b, 0, &w, sizeof(w)), TL_OK);
    assert_true(w == v);
    tl_gpu_buffer_destroy(b);
}

// VK_ERROR_DEVICE_LOST (injected at submit): a one-line TL_ERR_STATE, then every call on the
// device fails the same way; destroying it is clean and the device can be opened again. Runs
// on a device of its own so the shared test device stays healthy.
static void test_device_lost(void **state)
{
    (void)state;
    gpu_test_device();
    tl_gpu_device *d;
    assert_int_equal(tl_gpu_device_open(gpu_test_spec(), &d), TL_OK);
    float v[4] = {1, 2, 3, 4}, w[4];
    tl_gpu_buffer *b = gpu_test_buffer(d, v, sizeof(v));
    tl_gpu_rec *r;
    assert_int_equal(tl_gpu_rec_create(d, &r), TL_OK);
    assert_int_equal(tl_gpu_eltwise(r, TL_GPU_ADD, b, b, b, 4), TL_OK);
    assert_int_equal(tl_gpu_rec_download(r, b, 0, w, sizeof(w)), TL_OK);
    tl_gpu_device_inject_lost(d);
    assert_int_equal(tl_gpu_rec_run(r), TL_ERR_STATE);
    const char *e = tl_last_error();
    if (!strstr(e, "device lost") || !strstr(e, "VK_ERROR_DEVICE_LOST") || strchr(e, '\n'))
        fail_msg("message: %s", e);
    assert_int_equal(tl_gpu_eltwise(r, TL_GPU_ADD, b, b, b, 4), TL_OK); // recording is host-only
    assert_int_equal(tl_gpu_rec_run(r), TL_ERR_STATE);
    assert_non_null(strstr(tl_last_error(), "device lost"));
    assert_int_equal(tl_gpu_buffer_read(b, 0, w, sizeof(w)), TL_ERR_STATE);
    tl_gpu_buffer *b2 = (tl_gpu_buffer *)1;
    assert_int_equal(tl_gpu_buffer_create(d, 64, &b2), TL_ERR_STATE);
    assert_null(b2);
    tl_gpu_rec_destroy(r);
    tl_gpu_buffer_destroy(b);
    tl_gpu_device_destroy(d);
    // open again: works
    assert_int_equal(tl_gpu_device_open(gpu_test_spec(), &d), TL_OK);
    b = gpu_test_buffer(d, v, sizeof(v));
    assert_int_equal(tl_gpu_buffer_read(b, 0, w, sizeof(w)), TL_OK);
    assert_memory_equal(v, w, sizeof(v));
    tl_gpu_buffer_destroy(b);
    tl_gpu_device_destroy(d);
}

TL_TEST_MAIN(cmocka_unit_test(test_open_bad_name), cmocka_unit_test(test_device_spec_parse),
             cmocka_unit_test(test_open_not_compiled), cmocka_unit_test(test_open_unknown_index),
             cmocka_unit_test(test_open_no_driver), cmocka_unit_test(test_device_identity),
             cmocka_unit_test(test_buffer_roundtrip_counts), cmocka_unit_test(test_one_submission),
             cmocka_unit_test(test_device_time), cmocka_unit_test(test_recording_errors),
             cmocka_unit_test(test_out_of_device_memory), cmocka_unit_test(test_device_lost))
