/*
 * Device discovery: the listing (`tokenloom devices`: every Vulkan physical device with what the
 * backend needs to know: type, device-local memory, subgroup size, fp16 arithmetic and int8 dot
 * products) and what `--device auto` would pick (a discrete, else an integrated GPU). The
 * loader and instance come from vk_instance.c; every failure (no loader, no driver, no device)
 * is a one-line error, never a crash. Owns nothing between calls.
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

int tl_gpu_auto_pick(char *why, size_t cap)
{
    snprintf(why, cap, "vulkan: not compiled in");
    return -1;
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
int tl_gpu_auto_pick(char *why, size_t cap)
{
    struct tl__vk_instance vi;
    if (tl__vk_instance_open(&vi)) {
        snprintf(why, cap, "%s", tl_last_error());
        return -1;
    }
    VkPhysicalDevice *devs;
    uint32_t n;
    if (tl__vk_physical_devices(&vi, &devs, &n)) {
        snprintf(why, cap, "%s", tl_last_error());
        tl__vk_instance_close(&vi);
        return -1;
    }
    int pick = -1;
    static const VkPhysicalDeviceType order[] = {VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU,
                                                 VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU};
    for (int o = 0; o < 2 && pick < 0; o++)
        for (uint32_t i = 0; i < n && pick < 0; i++) {
            VkPhysicalDeviceProperties2 p = {.sType =
                                                 VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
            vi.props2(devs[i], &p);
            if (p.properties.deviceType == order[o]) pick = (int)i;
        }
    if (pick < 0) {
        VkPhysicalDeviceProperties2 p = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
        vi.props2(devs[0], &p);
        snprintf(why, cap, "no GPU among the %u Vulkan device%s (vulkan:0 is %s, type=%s)", n,
                 n == 1 ? "" : "s", p.properties.deviceName, type_name(p.properties.deviceType));
    }
    free(devs);
    tl__vk_instance_close(&vi);
    return pick;
}
#endif
