/*
 * Vulkan instance and device discovery: opens the loader (libvulkan.so.1) with dlopen, creates
 * an instance (Vulkan 1.1 or later) and lists the physical devices with what the backend needs
 * to know: type, device-local memory, subgroup size, fp16 arithmetic and int8 dot products.
 * Every failure (no loader, no driver, no device) is a one-line error through tl__errorf, never
 * a crash. Owns nothing between calls: the instance is destroyed before returning; the loader
 * and the driver it opened stay mapped (see pin_loaded_libraries). Single caller at a time.
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
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>

static int pin_one(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    (void)arg;
    if (info->dlpi_name && info->dlpi_name[0])
        dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
    return 0;
}

// Marks every library now loaded (the Vulkan loader and the driver it opened among them) as
// never to be unloaded. Drivers keep threads and allocations past vkDestroyInstance; once
// unloaded, their code and their allocations belong to no module, which can crash a late
// callback and leaves LeakSanitizer reports that no suppression can name (tests/lsan.supp
// names the driver libraries, which it can do only while they stay mapped).
static void pin_loaded_libraries(void)
{
    dl_iterate_phdr(pin_one, NULL);
}

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
    tl_status st = 0;
    void *lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return tl__errorf(TL_ERR_UNSUPPORTED, "vulkan: no loader (libvulkan.so.1: %s)", dlerror());
    PFN_vkGetInstanceProcAddr gipa = (PFN_vkGetInstanceProcAddr)dlsym(lib, "vkGetInstanceProcAddr");
    PFN_vkCreateInstance create =
        gipa ? (PFN_vkCreateInstance)gipa(NULL, "vkCreateInstance") : NULL;
    if (!create) {
        st = tl__errorf(TL_ERR_UNSUPPORTED, "vulkan: loader lacks vkCreateInstance");
        goto out_lib;
    }
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                             .pApplicationName = "tokenloom",
                             .apiVersion = VK_API_VERSION_1_1};
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                               .pApplicationInfo = &app};
    VkInstance inst;
    VkResult r = create(&ci, NULL, &inst);
    if (r != VK_SUCCESS) {
        st = tl__errorf(TL_ERR_UNSUPPORTED, "vulkan: no driver (vkCreateInstance: %d)", (int)r);
        goto out_lib;
    }
    pin_loaded_libraries();
#define LOAD(T, name) PFN_##T name = (PFN_##T)gipa(inst, #T)
    LOAD(vkDestroyInstance, destroy);
    LOAD(vkEnumeratePhysicalDevices, enumerate);
    LOAD(vkGetPhysicalDeviceProperties2, props2);
    LOAD(vkGetPhysicalDeviceFeatures2, feats2);
    LOAD(vkGetPhysicalDeviceMemoryProperties, memprops);
#undef LOAD
    uint32_t n = 0;
    if (!enumerate || !props2 || !feats2 || !memprops || enumerate(inst, &n, NULL) != VK_SUCCESS ||
        n == 0) {
        st = tl__errorf(TL_ERR_NOT_FOUND, "vulkan: no device (the loader found no driver)");
        goto out_inst;
    }
    VkPhysicalDevice *devs = calloc(n, sizeof(*devs));
    if (!devs) {
        st = tl__errorf(TL_ERR_NOMEM, "vulkan: out of memory");
        goto out_inst;
    }
    if (enumerate(inst, &n, devs) < 0) {
        st = tl__errorf(TL_ERR_NOT_FOUND, "vulkan: enumerating devices failed");
        goto out_devs;
    }
    for (uint32_t i = 0; i < n; i++) {
        VkPhysicalDeviceSubgroupProperties sg = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
        VkPhysicalDeviceProperties2 p = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                         .pNext = &sg};
        props2(devs[i], &p);
        VkPhysicalDeviceShaderIntegerDotProductFeatures dot = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
        VkPhysicalDeviceShaderFloat16Int8Features f16 = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
        // The 1.3 dot-product feature struct may only be chained on a 1.3 device.
        if (p.properties.apiVersion >= VK_API_VERSION_1_3) f16.pNext = &dot;
        VkPhysicalDeviceFeatures2 ft = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                        .pNext = &f16};
        feats2(devs[i], &ft);
        uint32_t v = p.properties.apiVersion;
        fprintf(f,
                "vulkan:%u  %s  type=%s  vulkan=%u.%u  memory=%.1f GiB  subgroup=%u  fp16=%s  "
                "int8=%s  int8-dot=%s\n",
                i, p.properties.deviceName, type_name(p.properties.deviceType),
                VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v),
                (double)device_local_bytes(memprops, devs[i]) / (1024.0 * 1024.0 * 1024.0),
                sg.subgroupSize, f16.shaderFloat16 ? "yes" : "no", f16.shaderInt8 ? "yes" : "no",
                dot.shaderIntegerDotProduct ? "yes" : "no");
    }
out_devs:
    free(devs);
out_inst:
    if (destroy) destroy(inst, NULL);
out_lib:
    dlclose(lib);
    return st;
}
#endif
