/*
 * The device layer's face to the rest of tokenloom (cli, engine, tests): whether the Vulkan
 * backend is compiled in, which shaders are embedded, what devices the loader sees, and a small
 * device-neutral runtime: open a device by name ("vulkan:N"), allocate device buffers, record
 * many kernel dispatches and host<->device copies into one recorder, and run it with one queue
 * submission and one host wait. The kernels (gpu_ops.c) are named by what they compute, not by
 * the API: a second backend (CUDA) would add its own device_open and vtable (gpu_impl.h) beside
 * the Vulkan one (vk_*.c) and reuse everything declared here.
 *
 * Without Vulkan at build time (TL_HAVE_VULKAN undefined) every function still exists: opening a
 * device fails with "vulkan: not compiled in" and nothing else needs an #ifdef.
 * The loader (libvulkan.so.1) is opened with dlopen at run time, so a binary built with Vulkan
 * still runs the CPU path on a machine without the loader.
 *
 * Errors: every call that can fail returns a tl_status with a one-line message (tl_last_error),
 * never aborts on a driver failure: no loader, no driver, an unknown index, a device without a
 * compute queue, out of device memory, a lost device (after which every call on that device
 * fails with TL_ERR_STATE "device lost"; destroy it and open again).
 * Thread-safety: a device and its buffers and recorders are used by one thread at a time;
 * different devices are independent. tl_gpu_devices_print keeps no state.
 */
#ifndef TL_GPU_GPU_H
#define TL_GPU_GPU_H

#include "tokenloom.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

// 1 if the Vulkan backend was compiled in (Makefile found `pkg-config vulkan` and glslc).
int tl_gpu_vulkan_compiled(void);

// One compute shader compiled to SPIR-V at build time (src/gpu/shaders/NAME.comp).
struct tl_gpu_shader {
    const char *name;           // file name without .comp (static)
    const unsigned char *spirv; // SPIR-V words as bytes (static)
    size_t spirv_bytes;         // multiple of 4
};

// The embedded shaders: n of them in a static table (0 and NULL without Vulkan).
const struct tl_gpu_shader *tl_gpu_shaders(size_t *n /* OUT */);

// Writes one line per Vulkan physical device to f: index, name, type, device-local memory,
// subgroup size, fp16 / int8 dot-product support. Returns 0, or an error with tl_last_error()
// naming what is missing (Vulkan not compiled in, no loader, no driver / no device).
tl_status tl_gpu_devices_print(FILE *f) TL_WARN_UNUSED;

// ---- device names (--device) -------------------------------------------------------------------

enum tl_device_kind {
    TL_DEVICE_CPU = 0, // "cpu"
    TL_DEVICE_AUTO,    // "auto": a discrete, else integrated GPU; else the CPU
    TL_DEVICE_VULKAN,  // "vulkan" (= vulkan:0) or "vulkan:N"
};
struct tl_device_spec {
    enum tl_device_kind kind;
    int index; // TL_DEVICE_VULKAN: N
};

// Parses a device name: cpu, auto, vulkan, vulkan:N (N in 0..65535). TL_ERR_INVALID_ARG with a
// one-line message naming the accepted forms otherwise. Pure; thread-safe.
tl_status tl_device_spec_parse(const char *s, struct tl_device_spec *out) TL_WARN_UNUSED;

// What `auto` would take: the index of the first discrete, else the first integrated Vulkan
// device, never a CPU-type one (lavapipe). Returns -1 when there is none and writes why to
// why[cap] (no loader, no driver, only CPU devices, not compiled in). Creates and destroys an
// instance; one caller at a time.
int tl_gpu_auto_pick(char *why, size_t cap);

// ---- devices and buffers ----------------------------------------------------------------------

typedef struct tl_gpu_device tl_gpu_device;
typedef struct tl_gpu_buffer tl_gpu_buffer;
typedef struct tl_gpu_rec tl_gpu_rec;

// Where device time goes (timestamp queries around every recorded command).
enum tl_gpu_phase {
    TL_GPU_PHASE_MATMUL = 0, // the matmul kernels
    TL_GPU_PHASE_ATTENTION,  // attention and the KV store
    TL_GPU_PHASE_OTHER,      // every other kernel
    TL_GPU_PHASE_COPY,       // host <-> device copies
    TL_GPU_PHASE_COUNT
};

// What a device has done since it was opened (the step's shape: the engine will export these
// per step in /stats). A "run" is one tl_gpu_rec_run: one submission and one wait.
struct tl_gpu_stats {
    uint64_t n_submits;      // queue submissions
    uint64_t n_waits;        // host waits on the device (fence waits)
    uint64_t n_dispatches;   // kernel dispatches recorded and run
    uint64_t n_uploads;      // host -> device copies
    uint64_t n_downloads;    // device -> host copies
    uint64_t upload_bytes;   // bytes copied host -> device
    uint64_t download_bytes; // bytes copied device -> host
    uint64_t buffer_bytes;   // device memory held by live buffers now
    // Device time from timestamp queries (0 when the queue has none, timed == false): busy_ns is
    // first to last timestamp of each run, summed (utilization = busy_ns / wall time);
    // phase_ns[p] sums each command's time (from the end of the command before it, so barrier
    // waits count to the command that waited), so the phases add up to busy_ns.
    bool timed;
    uint64_t busy_ns;
    uint64_t phase_ns[TL_GPU_PHASE_COUNT];
};

// Opens the device named by spec: "vulkan:N" (N as listed by `tokenloom devices`) or "vulkan"
// (= vulkan:0). On success *out is a device the caller destroys. Errors: TL_ERR_INVALID_ARG
// (spec not understood), TL_ERR_UNSUPPORTED (not compiled in, no loader, no driver, no compute
// queue), TL_ERR_NOT_FOUND (no such index: the message says how many devices there are),
// TL_ERR_NOMEM.
tl_status tl_gpu_device_open(const char *spec, tl_gpu_device **out) TL_WARN_UNUSED;
void tl_gpu_device_destroy(tl_gpu_device *d); // NULL: nothing; buffers must be destroyed first

// The device's name as the driver reports it (borrowed, lives as long as d).
const char *tl_gpu_device_name(const tl_gpu_device *d);
// Whether the device is a CPU implementation (lavapipe): `auto` never picks one.
bool tl_gpu_device_is_cpu(const tl_gpu_device *d);
void tl_gpu_device_stats(const tl_gpu_device *d, struct tl_gpu_stats *out /* OUT */);

// For tests: the next tl_gpu_rec_run fails exactly as a VK_ERROR_DEVICE_LOST from the driver
// would (the device is marked lost).
void tl_gpu_device_inject_lost(tl_gpu_device *d);

// A device buffer of `bytes` (> 0) in device-local memory, contents undefined. Errors:
// TL_ERR_NOMEM "out of device memory" (naming the size asked and what the device has),
// TL_ERR_UNSUPPORTED (larger than one storage buffer may be), TL_ERR_STATE (device lost).
tl_status tl_gpu_buffer_create(tl_gpu_device *d, size_t bytes, tl_gpu_buffer **out) TL_WARN_UNUSED;
void tl_gpu_buffer_destroy(tl_gpu_buffer *b); // NULL: nothing
size_t tl_gpu_buffer_bytes(const tl_gpu_buffer *b);

// Copies host bytes into / out of a buffer now: one run (one submission, one wait) each.
tl_status tl_gpu_buffer_write(tl_gpu_buffer *b, size_t offset, const void *src,
                              size_t bytes) TL_WARN_UNUSED;
tl_status tl_gpu_buffer_read(tl_gpu_buffer *b, size_t offset, void *dst,
                             size_t bytes) TL_WARN_UNUSED;

// ---- the recorder -----------------------------------------------------------------------------
//
// A recorder collects uploads, kernel dispatches (gpu_ops.h) and downloads in order; run()
// records them into one command buffer with a barrier between dependent commands, submits once,
// waits once and then copies the downloads to their host pointers. Host pointers given to
// upload/download are borrowed until run() returns. A recording error (bad argument, out of
// memory) is sticky: it is returned by the failing call and again by run(), which then runs
// nothing. After run() the recorder is empty and can record again.

tl_status tl_gpu_rec_create(tl_gpu_device *d, tl_gpu_rec **out) TL_WARN_UNUSED;
void tl_gpu_rec_destroy(tl_gpu_rec *r); // NULL: nothing
tl_status tl_gpu_rec_upload(tl_gpu_rec *r, tl_gpu_buffer *dst, size_t offset, const void *src,
                            size_t bytes) TL_WARN_UNUSED;
tl_status tl_gpu_rec_download(tl_gpu_rec *r, tl_gpu_buffer *src, size_t offset, void *dst,
                              size_t bytes) TL_WARN_UNUSED;
tl_status tl_gpu_rec_run(tl_gpu_rec *r) TL_WARN_UNUSED;

#endif
