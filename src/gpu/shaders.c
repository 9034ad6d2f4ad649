/*
 * The table of compute shaders embedded in the binary. The Makefile compiles each
 * src/gpu/shaders/NAME.comp with glslc into $(BUILD)/gen/shaders/NAME.spv and turns them into
 * one generated header, gpu_shaders.h (never committed), holding one byte array per shader and
 * the TL_GPU_SHADER_LIST X-macro naming them. Read-only static data; thread-safe.
 */
#include "gpu/gpu.h"

#ifdef TL_HAVE_VULKAN
#include "gpu_shaders.h"

#define TL_GPU_SHADER_ENTRY(n) {#n, tl_spv_##n, sizeof(tl_spv_##n) - 1},
static const struct tl_gpu_shader table[] = {TL_GPU_SHADER_LIST(TL_GPU_SHADER_ENTRY)};

const struct tl_gpu_shader *tl_gpu_shaders(size_t *n)
{
    *n = sizeof(table) / sizeof(table[0]);
    return table;
}

int tl_gpu_vulkan_compiled(void)
{
    return 1;
}
#else
const struct tl_gpu_shader *tl_gpu_shaders(size_t *n)
{
    *n = 0;
    return NULL;
}

int tl_gpu_vulkan_compiled(void)
{
    return 0;
}
#endif
