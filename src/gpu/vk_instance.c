/*
 * The Vulkan loader and instance, shared by every Vulkan caller (the device listing in
 * vk_devices.c, the device runtime in vk_context.c): opens libvulkan.so.1 with dlopen, creates
 * a Vulkan 1.1 instance and loads the instance-level functions. Every failure is a one-line
 * error through tl__errorf, never a crash.
 * After vkCreateInstance every loaded library (the loader and the driver it opened) is pinned in
 * memory (RTLD_NODELETE): drivers keep threads and allocations past vkDestroyInstance; once
 * unloaded, their code and allocations belong to no module, which can crash a late callback and
 * leaves LeakSanitizer reports that no suppression can name (tests/lsan.supp names the driver
 * libraries, which it can do only while they stay mapped).
 * Thread model: each instance is owned by one caller; nothing global but the pinning.
 */
#ifdef TL_HAVE_VULKAN
#include "gpu/vk_impl.h"

#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>

static int pin_one(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    (void)arg;
    if (info->dlpi_name && info->dlpi_name[0])
        dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
    return 0;
}

static void pin_loaded_libraries(void)
{
    dl_iterate_phdr(pin_one, NULL);
}

tl_status tl__vk_instance_open(struct tl__vk_instance *vi)
{
    memset(vi, 0, sizeof(*vi));
    vi->lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!vi->lib)
        return tl__errorf(TL_ERR_UNSUPPORTED, "vulkan: no loader (libvulkan.so.1: %s)", dlerror());
    vi->gipa = (PFN_vkGetInstanceProcAddr)dlsym(vi->lib, "vkGetInstanceProcAddr");
    PFN_vkCreateInstance create =
        vi->gipa ? (PFN_vkCreateInstance)vi->gipa(NULL, "vkCreateInstance") : NULL;
    if (!create) {
        dlclose(vi->lib);
        vi->lib = NULL;
        return tl__errorf(TL_ERR_UNSUPPORTED, "vulkan: loader lacks vkCreateInstance");
    }
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                             .pApplicationName = "tokenloom",
                             .apiVersion = VK_API_VERSION_1_1};
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                               .pApplicationInfo = &app};
    VkResult r = create(&ci, NULL, &vi->inst);
    if (r != VK_SUCCESS) {
        dlclose(vi->lib);
        vi->lib = NULL;
        return tl__errorf(TL_ERR_UNSUPPORTED, "vulkan: no driver (vkCreateInstance: %s)",
                          tl__vk_result_str(r));
    }
    pin_loaded_libraries();
#define LOAD(field, T) vi->field = (PFN_##T)vi->gipa(vi->inst, #T)
    LOAD(destroy, vkDestroyInstance);
    LOAD(enumerate, vkEnumeratePhysicalDevices);
    LOAD(props2, vkGetPhysicalDeviceProperties2);
    LOAD(feats2, vkGetPhysicalDeviceFeatures2);
    LOAD(memprops, vkGetPhysicalDeviceMemoryProperties);
    LOAD(queue_props, vkGetPhysicalDeviceQueueFamilyProperties);
    LOAD(create_device, vkCreateDevice);
    LOAD(gdpa, vkGetDeviceProcAddr);
#undef LOAD
    if (!vi->destroy || !vi->enumerate || !vi->props2 || !vi->feats2 || !vi->memprops ||
        !vi->queue_props || !vi->create_device || !vi->gdpa) {
        tl__vk_instance_close(vi);
        return tl__errorf(TL_ERR_UNSUPPORTED, "vulkan: the loader lacks Vulkan 1.1 functions");
    }
    return 0;
}

tl_status tl__vk_physical_devices(struct tl__vk_instance *vi, VkPhysicalDevice **out, uint32_t *n)
{
    *out = NULL;
    *n = 0;
    uint32_t count = 0;
    if (vi->enumerate(vi->inst, &count, NULL) != VK_SUCCESS || count == 0)
        return tl__errorf(TL_ERR_NOT_FOUND, "vulkan: no device (the loader found no driver)");
    VkPhysicalDevice *devs = calloc(count, sizeof(*devs));
    if (!devs) return tl__errorf(TL_ERR_NOMEM, "vulkan: out of memory");
    VkResult r = vi->enumerate(vi->inst, &count, devs);
    if (r < 0 || count == 0) {
        free(devs);
        return tl__errorf(TL_ERR_NOT_FOUND, "vulkan: enumerating devices failed (%s)",
                          tl__vk_result_str(r));
    }
    *out = devs;
    *n = count;
    return 0;
}

void tl__vk_instance_close(struct tl__vk_instance *vi)
{
    if (vi->inst && vi->destroy) vi->destroy(vi->inst, NULL);
    if (vi->lib) dlclose(vi->lib);
    memset(vi, 0, sizeof(*vi));
}

const char *tl__vk_result_str(VkResult r)
{
    switch (r) {
#define R(x)                                                                                       \
    case x:                                                                                        \
        return #x;
        R(VK_SUCCESS)
        R(VK_NOT_READY)
        R(VK_TIMEOUT)
        R(VK_INCOMPLETE)
        R(VK_ERROR_OUT_OF_HOST_MEMORY)
        R(VK_ERROR_OUT_OF_DEVICE_MEMORY)
        R(VK_ERROR_INITIALIZATION_FAILED)
        R(VK_ERROR_DEVICE_LOST)
        R(VK_ERROR_MEMORY_MAP_FAILED)
        R(VK_ERROR_LAYER_NOT_PRESENT)
        R(VK_ERROR_EXTENSION_NOT_PRESENT)
        R(VK_ERROR_FEATURE_NOT_PRESENT)
        R(VK_ERROR_INCOMPATIBLE_DRIVER)
        R(VK_ERROR_TOO_MANY_OBJECTS)
        R(VK_ERROR_FORMAT_NOT_SUPPORTED)
        R(VK_ERROR_FRAGMENTED_POOL)
        R(VK_ERROR_OUT_OF_POOL_MEMORY)
        R(VK_ERROR_INVALID_SHADER_NV)
#undef R
    default:
        return "VkResult error";
    }
}
#else
typedef int tl__vk_instance_unused; // ISO C wants a declaration in every file
#endif
