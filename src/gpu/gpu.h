/*
 * The device layer's face to the rest of tokenloom (cli, engine): whether the Vulkan backend is
 * compiled in, which shaders are embedded, and what devices the Vulkan loader sees.
 * Without Vulkan headers at build time (TL_HAVE_VULKAN undefined) every call here still exists:
 * tl_gpu_vulkan_compiled() says 0 and the device listing fails with a one-line reason.
 * The loader (libvulkan.so.1) is opened with dlopen at run time, so a binary built with Vulkan
 * still runs the CPU path on a machine without the loader.
 * Thread-safety: none of these functions keeps state between calls; they may be called from any
 * thread, one call at a time per process (the loader's own rules).
 */
#ifndef TL_GPU_GPU_H
#define TL_GPU_GPU_H

#include "tokenloom.h"

#include <stddef.h>
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

#endif
