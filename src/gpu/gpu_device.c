/*
 * The device-neutral half of the device runtime: parsing a device name, dispatching to the
 * backend that owns it (today only Vulkan, vk_context.c; a CUDA backend would add a prefix
 * here), buffers and the per-device counters. A backend fills the vtable in gpu_impl.h and
 * marks its device lost on a fatal driver error; from then on every call here fails with the
 * same one-line TL_ERR_STATE error. Not thread-safe per device (gpu.h).
 */
#include "gpu/gpu_impl.h"

#ifdef TL_HAVE_VULKAN
#include "gpu/vk_impl.h"
#endif

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MM TL_GPU_PHASE_MATMUL
#define ATT TL_GPU_PHASE_ATTENTION
#define OTH TL_GPU_PHASE_OTHER
const struct tl__gpu_kernel_info tl__gpu_kernels[TL_GPU_K_COUNT] = {
    [TL_GPU_K_RMSNORM] = {"rmsnorm", 3, OTH},   [TL_GPU_K_ELTWISE] = {"eltwise", 3, OTH},
    [TL_GPU_K_ROPE] = {"rope", 3, OTH},         [TL_GPU_K_MM_F32] = {"mm_f32", 3, MM},
    [TL_GPU_K_MM_F16] = {"mm_f16", 3, MM},      [TL_GPU_K_MM_Q8_0] = {"mm_q8_0", 3, MM},
    [TL_GPU_K_MM_Q4_K] = {"mm_q4_k", 3, MM},    [TL_GPU_K_MM_Q6_K] = {"mm_q6_k", 3, MM},
    [TL_GPU_K_MM_BF16] = {"mm_bf16", 3, MM},    [TL_GPU_K_MM_Q5_K] = {"mm_q5_k", 3, MM},
    [TL_GPU_K_KV_STORE] = {"kv_store", 3, ATT}, [TL_GPU_K_ATTENTION] = {"attention", 5, ATT},
    [TL_GPU_K_GET_ROWS] = {"get_rows", 3, OTH},
};
#undef MM
#undef ATT
#undef OTH

tl_status tl__gpu_lost_error(const struct tl_gpu_device *d)
{
    return tl__errorf(TL_ERR_STATE, "%s: device lost (destroy it and open the device again)",
                      d->name);
}

// "vulkan" or "vulkan:N" -> N (0 for the bare name); -1 when spec is not a Vulkan name.
static long vulkan_index(const char *spec)
{
    if (strncmp(spec, "vulkan", 6)) return -1;
    if (!spec[6]) return 0;
    if (spec[6] != ':' || spec[7] < '0' || spec[7] > '9') return -1;
    char *end;
    errno = 0;
    long v = strtol(spec + 7, &end, 10);
    if (errno || *end || v > 65535) return -1;
    return v;
}

tl_status tl_device_spec_parse(const char *s, struct tl_device_spec *out)
{
    out->kind = TL_DEVICE_CPU;
    out->index = 0;
    if (s && !strcmp(s, "cpu")) return 0;
    if (s && !strcmp(s, "auto")) {
        out->kind = TL_DEVICE_AUTO;
        return 0;
    }
    long index = s ? vulkan_index(s) : -1;
    if (index < 0)
        return tl__errorf(TL_ERR_INVALID_ARG,
                          "device '%s' not understood (auto, cpu, vulkan or vulkan:N)",
                          s ? s : "(null)");
    out->kind = TL_DEVICE_VULKAN;
    out->index = (int)index;
    return 0;
}

tl_status tl_gpu_device_open(const char *spec, tl_gpu_device **out)
{
    *out = NULL;
    long index = spec ? vulkan_index(spec) : -1;
    if (index < 0)
        return tl__errorf(TL_ERR_INVALID_ARG, "device '%s' not understood (vulkan or vulkan:N)",
                          spec ? spec : "(null)");
#ifdef TL_HAVE_VULKAN
    return tl__vk_device_open((int)index, out);
#else
    return tl__errorf(TL_ERR_UNSUPPORTED,
                      "vulkan: not compiled in (build with libvulkan-dev and glslc installed)");
#endif
}

void tl_gpu_device_destroy(tl_gpu_device *d)
{
    if (d) d->vt->destroy(d);
}

const char *tl_gpu_device_name(const tl_gpu_device *d)
{
    return d->name;
}

bool tl_gpu_device_is_cpu(const tl_gpu_device *d)
{
    return d->is_cpu;
}

void tl_gpu_device_stats(const tl_gpu_device *d, struct tl_gpu_stats *out)
{
    *out = d->stats;
}

tl_status tl_gpu_buffer_create(tl_gpu_device *d, size_t bytes, tl_gpu_buffer **out)
{
    *out = NULL;
    if (d->lost) return tl__gpu_lost_error(d);
    if (bytes == 0) return tl__errorf(TL_ERR_INVALID_ARG, "%s: a buffer of 0 bytes", d->name);
    tl_status st = d->vt->buffer_create(d, bytes, out);
    if (st) return st;
    d->stats.buffer_bytes += bytes;
    return 0;
}

void tl_gpu_buffer_destroy(tl_gpu_buffer *b)
{
    if (!b) return;
    b->dev->stats.buffer_bytes -= b->bytes;
    b->dev->vt->buffer_destroy(b);
}

size_t tl_gpu_buffer_bytes(const tl_gpu_buffer *b)
{
    return b->bytes;
}

static tl_status copy_now(tl_gpu_buffer *b, size_t offset, const void *src, void *dst, size_t bytes)
{
    tl_gpu_rec *r;
    tl_status st = tl_gpu_rec_create(b->dev, &r);
    if (st) return st;
    st = src ? tl_gpu_rec_upload(r, b, offset, src, bytes)
             : tl_gpu_rec_download(r, b, offset, dst, bytes);
    if (!st) st = tl_gpu_rec_run(r);
    tl_gpu_rec_destroy(r);
    return st;
}

tl_status tl_gpu_buffer_write(tl_gpu_buffer *b, size_t offset, const void *src, size_t bytes)
{
    return copy_now(b, offset, src, NULL, bytes);
}

tl_status tl_gpu_buffer_read(tl_gpu_buffer *b, size_t offset, void *dst, size_t bytes)
{
    return copy_now(b, offset, NULL, dst, bytes);
}
