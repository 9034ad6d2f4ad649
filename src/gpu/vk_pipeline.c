/*
 * Compute pipelines built from the embedded SPIR-V (shaders.c), one per kernel, made on first
 * use and kept until the device is destroyed. Every kernel has the same interface: n storage
 * buffers at bindings 0..n-1 of descriptor set 0 (tl__gpu_kernels) and up to TL_GPU_PUSH_MAX
 * bytes of push constants; workgroup sizes are fixed in the shaders. A kernel whose shader is
 * missing from the binary or that the driver cannot compile is a one-line error naming it.
 * Not thread-safe per device.
 */
#ifdef TL_HAVE_VULKAN
#include "gpu/vk_impl.h"

#include <string.h>

static const struct tl_gpu_shader *find_shader(const char *name)
{
    size_t n;
    const struct tl_gpu_shader *s = tl_gpu_shaders(&n);
    for (size_t i = 0; i < n; i++)
        if (!strcmp(s[i].name, name)) return &s[i];
    return NULL;
}

static void pipeline_free(struct tl__vk_device *d, struct tl__vk_pipeline *p)
{
    if (p->pipe) d->fn.vkDestroyPipeline(d->dev, p->pipe, NULL);
    if (p->layout) d->fn.vkDestroyPipelineLayout(d->dev, p->layout, NULL);
    if (p->dsl) d->fn.vkDestroyDescriptorSetLayout(d->dev, p->dsl, NULL);
    memset(p, 0, sizeof(*p));
}

void tl__vk_pipelines_free(struct tl__vk_device *d)
{
    for (int k = 0; k < TL_GPU_K_COUNT; k++)
        pipeline_free(d, &d->pipelines[k]);
}

static tl_status build(struct tl__vk_device *d, enum tl_gpu_kernel k, struct tl__vk_pipeline *p)
{
    const struct tl__gpu_kernel_info *ki = &tl__gpu_kernels[k];
    const struct tl_gpu_shader *sh = find_shader(ki->name);
    if (!sh)
        return tl__errorf(TL_ERR_UNSUPPORTED, "%s: shader %s.comp is not in this binary",
                          d->base.name, ki->name);
    VkDescriptorSetLayoutBinding b[TL_GPU_MAX_BINDINGS];
    for (int i = 0; i < ki->n_buffers; i++)
        b[i] = (VkDescriptorSetLayoutBinding){.binding = (uint32_t)i,
                                              .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                              .descriptorCount = 1,
                                              .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo dci = {.sType =
                                               VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                           .bindingCount = (uint32_t)ki->n_buffers,
                                           .pBindings = b};
    VkResult r = d->fn.vkCreateDescriptorSetLayout(d->dev, &dci, NULL, &p->dsl);
    if (r != VK_SUCCESS) {
        p->dsl = NULL;
        return tl__vk_fail(d, r, "vkCreateDescriptorSetLayout");
    }
    VkPushConstantRange pcr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .size = TL_GPU_PUSH_MAX};
    VkPipelineLayoutCreateInfo lci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                      .setLayoutCount = 1,
                                      .pSetLayouts = &p->dsl,
                                      .pushConstantRangeCount = 1,
                                      .pPushConstantRanges = &pcr};
    r = d->fn.vkCreatePipelineLayout(d->dev, &lci, NULL, &p->layout);
    if (r != VK_SUCCESS) {
        p->layout = NULL;
        return tl__vk_fail(d, r, "vkCreatePipelineLayout");
    }
    VkShaderModuleCreateInfo sci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                    .codeSize = sh->spirv_bytes,
                                    .pCode = (const uint32_t *)(const void *)sh->spirv};
    VkShaderModule mod;
    r = d->fn.vkCreateShaderModule(d->dev, &sci, NULL, &mod);
    if (r != VK_SUCCESS) return tl__vk_fail(d, r, "vkCreateShaderModule");
    VkComputePipelineCreateInfo cci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = mod,
                  .pName = "main"},
        .layout = p->layout};
    r = d->fn.vkCreateComputePipelines(d->dev, VK_NULL_HANDLE, 1, &cci, NULL, &p->pipe);
    d->fn.vkDestroyShaderModule(d->dev, mod, NULL);
    if (r != VK_SUCCESS) {
        p->pipe = NULL;
        tl_status st = tl__vk_fail(d, r, "vkCreateComputePipelines");
        if (d->base.lost) return st;
        return tl__errorf(st, "%s: shader %s.comp: pipeline creation failed (%s)", d->base.name,
                          ki->name, tl__vk_result_str(r));
    }
    return 0;
}

tl_status tl__vk_pipeline_get(struct tl__vk_device *d, enum tl_gpu_kernel k,
                              struct tl__vk_pipeline **out)
{
    struct tl__vk_pipeline *p = &d->pipelines[k];
    if (!p->pipe) {
        tl_status st = build(d, k, p);
        if (st) {
            pipeline_free(d, p);
            return st;
        }
    }
    *out = p;
    return 0;
}
#else
typedef int tl__vk_pipeline_unused; // ISO C wants a declaration in every file
#endif
