/*
 * The device engine backend (backend_vk.c): struct tl_engine_backend over a loaded model whose
 * steps run on a device (Vulkan today), selected by tl_engine_config.device. The model's weights
 * are uploaded once in their own types; every step is one recording (one submission, one wait);
 * the K/V pool lives in device memory, indexed by the engine's block ids (the engine keeps only
 * the block accounting: n_layer 0 on the host).
 *
 * Errors: one line naming the device and what it lacks (no driver, an unknown index, a weight
 * type or shape the device kernels do not take, out of device memory). Thread-safety: as the
 * engine backend (the engine thread; tokenize from any thread).
 */
#ifndef TL_GPU_BACKEND_H
#define TL_GPU_BACKEND_H

#include "engine/engine_impl.h"
#include "gpu/gpu.h"

// Fills *be with a backend running m (borrowed: outlives the engine) on `device` ("vulkan" or
// "vulkan:N"); opens the device and uploads the weights now.
tl_status tl_gpu_engine_backend(const tl_model *m, const char *device,
                                struct tl_engine_backend *be) TL_WARN_UNUSED;

// The device of a backend made by tl_gpu_engine_backend (its be->ctx): for counters in tests.
tl_gpu_device *tl_gpu_engine_backend_device(void *ctx);

// Device bytes held by the uploaded weights (be->ctx as above).
size_t tl_gpu_engine_backend_weight_bytes(void *ctx);

#endif
