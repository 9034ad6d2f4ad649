/*
 * Shared by the device-neutral files of src/gpu (gpu_device.c, gpu_rec.c, gpu_ops.c) and each
 * backend (vk_*.c; a CUDA backend would be cu_*.c): the kernels a backend must provide, the
 * backend vtable, and the host-side form of a recording that a backend's run() turns into one
 * submission. Not thread-safe (see gpu.h).
 */
#ifndef TL_GPU_GPU_IMPL_H
#define TL_GPU_GPU_IMPL_H

#include "gpu/gpu.h"

#include "core/error.h"

// The kernels, by what they compute; each backend maps them to its own code (Vulkan: the shader
// src/gpu/shaders/NAME.comp with n_buffers storage-buffer bindings 0..n-1).
enum tl_gpu_kernel {
    TL_GPU_K_RMSNORM = 0, // rmsnorm.comp
    TL_GPU_K_ELTWISE,     // eltwise.comp
    TL_GPU_K_ROPE,        // rope.comp
    TL_GPU_K_MM_F32,      // mm_f32.comp
    TL_GPU_K_MM_F16,      // mm_f16.comp
    TL_GPU_K_MM_Q8_0,     // mm_q8_0.comp
    TL_GPU_K_MM_Q4_K,     // mm_q4_k.comp
    TL_GPU_K_MM_Q6_K,     // mm_q6_k.comp
    TL_GPU_K_MM_BF16,     // mm_bf16.comp
    TL_GPU_K_MM_Q5_K,     // mm_q5_k.comp
    TL_GPU_K_KV_STORE,    // kv_store.comp
    TL_GPU_K_ATTENTION,   // attention.comp
    TL_GPU_K_GET_ROWS,    // get_rows.comp
    TL_GPU_K_COUNT
};

struct tl__gpu_kernel_info {
    const char *name;        // shader file name without .comp
    int n_buffers;           // storage buffers bound, in order
    enum tl_gpu_phase phase; // where its device time is counted
};
extern const struct tl__gpu_kernel_info tl__gpu_kernels[TL_GPU_K_COUNT];

#define TL_GPU_MAX_BINDINGS 5 // a device must allow this many storage buffers per stage
#define TL_GPU_PUSH_MAX 64    // bytes of push constants per dispatch (Vulkan guarantees 128)

enum tl__gpu_op_kind { TL__GPU_UPLOAD, TL__GPU_DOWNLOAD, TL__GPU_DISPATCH };

// One recorded command.
struct tl__gpu_op {
    enum tl__gpu_op_kind kind;
    struct tl_gpu_buffer *buf; // UPLOAD/DOWNLOAD: the device buffer (borrowed)
    size_t offset, bytes;      // UPLOAD/DOWNLOAD: the byte range in buf
    const void *src;           // UPLOAD: host bytes (borrowed until run)
    void *dst;                 // DOWNLOAD: host bytes (borrowed until run)
    enum tl_gpu_kernel kernel; // DISPATCH
    struct tl_gpu_buffer *bind[TL_GPU_MAX_BINDINGS]; // DISPATCH: buffers (borrowed)
    uint32_t groups[3];                              // DISPATCH: workgroup counts
    uint32_t push_bytes;                             // DISPATCH
    unsigned char push[TL_GPU_PUSH_MAX];             // DISPATCH: push-constant bytes
};

struct tl_gpu_rec {
    struct tl_gpu_device *dev; // borrowed
    struct tl__gpu_op *ops;    // owned, n_ops used of cap_ops
    size_t n_ops, cap_ops;
    tl_status err; // sticky recording error (0 = none); its message was set when it happened
};

struct tl__gpu_vtbl {
    void (*destroy)(struct tl_gpu_device *d);
    tl_status (*buffer_create)(struct tl_gpu_device *d, size_t bytes, struct tl_gpu_buffer **out);
    void (*buffer_destroy)(struct tl_gpu_buffer *b);
    // Runs a whole recording: one submission, one wait; updates d->stats.
    tl_status (*run)(struct tl_gpu_device *d, const struct tl_gpu_rec *rec);
};

// The device-neutral head of every backend's device struct.
struct tl_gpu_device {
    const struct tl__gpu_vtbl *vt;
    char name[256];
    bool is_cpu;
    bool lost; // set by the backend on a lost device; every call then fails
    struct tl_gpu_stats stats;
};

struct tl_gpu_buffer {
    struct tl_gpu_device *dev; // borrowed
    size_t bytes;
};

// Records one dispatch of kernel k (gpu_rec.c): buffers bound in order, push constants copied.
tl_status tl__gpu_rec_dispatch(struct tl_gpu_rec *r, enum tl_gpu_kernel k,
                               struct tl_gpu_buffer *const *bufs, const void *push,
                               size_t push_bytes, uint32_t gx, uint32_t gy,
                               uint32_t gz) TL_WARN_UNUSED;

// The error every call on a lost device returns.
tl_status tl__gpu_lost_error(const struct tl_gpu_device *d);

#endif
