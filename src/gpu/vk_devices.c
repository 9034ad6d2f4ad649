/*
 * The device listing (`tokenloom devices`): every Vulkan physical device with what the backend
 * needs to know: type, device-local memory, subgroup size, fp16 arithmetic and int8 dot
 * products. The loader and instance come from vk_instance.c; every failure (no loader, no
 * driver, no device) is a one-line error, never a crash. Owns nothing between calls.
 * Single caller at a time.
 */
#include "gpu/gpu.h"

#include "core/error.h"

#ifndef TL_HAVE_VULKAN
tl_status tl_gpu_devices_print(FILE *f)
{
    (void)f;
    return tl__errorf(TL_ERR_UNSUPPORTED,
                      "vulkan: not compiled in (build with libvulkan-dev and glslc installed)");
}
#else
#include "gpu/vk_impl.h"

#include <stdlib.h>

static const char *type_name(VkPhysicalDeviceType t)
{
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
        return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
        return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
        return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
        return "cpu";
    default:
        return "other";
    }
}

static uint64_t device_local_bytes(PFN_vkGetPhysicalDeviceMemoryProperties get, VkPhysicalDevice d)
{
    VkPhysicalDeviceMemoryProperties mp;
    get(d, &mp);
    uint64_t n = 0;
    for (uint32_t i = 0; i < mp.memoryHeapCount; i++)
        if (mp.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) n += mp.memoryHeaps[i].size;
    return n;
}

tl_status tl_gpu_devices_print(FILE *f)
{
    struct tl__vk_instance vi;
    tl_status st = tl__vk_instance_open(&vi);
    if (st) return st;
    VkPhysicalDevice *devs;
    uint32_t n;
    st = tl__vk_physical_devices(&vi, &devs, &n);
    if (st) goto out_inst;
    for (uint32_t i = 0; i < n; i++) {
        VkPhysicalDeviceSubgroupProperties sg = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
        VkPhysicalDeviceProperties2 p = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                         .pNext = &sg};
        vi.props2(devs[i], &p);
        VkPhysicalDeviceShaderIntegerDotProductFeatures dot = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
        VkPhysicalDeviceShaderFloat16Int8Features f16 = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
        // The 1.3 dot-product feature struct may only be chained on a 1.3 device.
        if (p.properties.apiVersion >= VK_API_VERSION_1_3) f16.pNext = &dot;
        VkPhysicalDeviceFeatures2 ft = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                        .pNext = &f16};
        vi.feats2(devs[i], &ft);
        uint32_t v = p.properties.apiVersion;
        fprintf(f,
                "vulkan:%u  %s  type=%s  vulkan=%u.%u  memory=%.1f GiB  subgroup=%u  fp16=%s  "
                "int8=%s  int8-dot=%s\n",
                i, p.properties.deviceName, type_name(p.properties.deviceType),
                VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v),
                (double)device_local_bytes(vi.memprops, devs[i]) / (1024.0 * 1024.0 * 1024.0),
                sg.subgroupSize, f16.shaderFloat16 ? "yes" : "no", f16.shaderInt8 ? "yes" : "no",
                dot.shaderIntegerDotProduct ? "yes" : "no");
    }
    free(devs);
out_inst:
    tl__vk_instance_close(&vi);
    return st;
}
#endif
