/*
 * Shared by the device tests (test_gpu_*.c): the device they run on, opened once per binary.
 * $TL_TEST_GPU names it (default "vulkan:0", lavapipe on the build machines and in CI). A build
 * without Vulkan or a machine without a Vulkan device makes the device tests TAP skips; the
 * reason is printed once. The device is destroyed at exit.
 */
#ifndef TL_GPU_TEST_H
#define TL_GPU_TEST_H

#include "tl_test.h"

#include "gpu/gpu.h"

static tl_gpu_device *gpu_test_dev_;

static const char *gpu_test_spec(void)
{
    const char *s = getenv("TL_TEST_GPU");
    return s && *s ? s : "vulkan:0";
}

static void gpu_test_close(void)
{
    tl_gpu_device_destroy(gpu_test_dev_);
    gpu_test_dev_ = NULL;
}

// The test device, or a cmocka skip() when there is none. Destroyed at exit (before
// LeakSanitizer's check, which runs after the atexit handlers registered later).
static tl_gpu_device *gpu_test_device(void)
{
    static int tried;
    if (!tried) {
        tried = 1;
        atexit(gpu_test_close);
        if (tl_gpu_device_open(gpu_test_spec(), &gpu_test_dev_))
            fprintf(stderr, "# no test device %s: %s\n", gpu_test_spec(), tl_last_error());
    }
    if (!gpu_test_dev_) skip();
    return gpu_test_dev_;
}

// A device buffer holding `bytes` of src (or uninitialized when src is NULL).
static tl_gpu_buffer *gpu_test_buffer(tl_gpu_device *d, const void *src, size_t bytes)
{
    tl_gpu_buffer *b = NULL;
    if (tl_gpu_buffer_create(d, bytes, &b)) fail_msg("buffer_create: %s", tl_last_error());
    if (src && tl_gpu_buffer_write(b, 0, src, bytes)) fail_msg("write: %s", tl_last_error());
    return b;
}

#endif
