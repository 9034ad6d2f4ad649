/*
 * A Vulkan device context: the physical device chosen by index (as `tokenloom devices` lists
 * them), a logical device with one compute queue, one command pool with the one command buffer
 * every run records into, and one fence. Pipelines (vk_pipeline.c), buffers and the staging
 * buffer (vk_memory.c) hang off it; vk_command.c runs recordings on it.
 * Failure handling: every Vulkan error becomes a one-line tl_status (tl__vk_fail);
 * VK_ERROR_DEVICE_LOST marks the device lost, after which every call fails with TL_ERR_STATE.
 * The instance (vk_instance.c) is owned by the device: one device, one instance.
 * Thread model: one thread at a time per device (gpu.h).
 */
#ifdef TL_HAVE_VULKAN
#include "gpu/vk_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

tl_status tl__vk_fail(struct tl__vk_device *d, VkResult r, const char *what)
{
    if (r == VK_ERROR_DEVICE_LOST) {
        d->base.lost = true;
        return tl__errorf(TL_ERR_STATE, "%s: device lost during %s (VK_ERROR_DEVICE_LOST)",
                          d->base.name, what);
    }
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
        return tl__errorf(TL_ERR_NOMEM, "%s: out of %s memory during %s", d->base.name,
                          r == VK_ERROR_OUT_OF_DEVICE_MEMORY ? "device" : "host", what);
    return tl__errorf(TL_ERR_IO, "%s: %s failed (%s)", d->base.name, what, tl__vk_result_str(r));
}

static void device_destroy(struct tl_gpu_device *base)
{
    struct tl__vk_device *d = (struct tl__vk_device *)base;
    if (d->dev) {
        // Nothing is in flight between runs (each run waits), but a lost device may still
        // hold work: wait for idle, ignoring the result.
        d->fn.vkDeviceWaitIdle(d->dev);
        tl__vk_pipelines_free(d);
        tl__vk_host_buf_free(d, &d->staging);
        if (d->desc_pool) d->fn.vkDestroyDescriptorPool(d->dev, d->desc_pool, NULL);
        if (d->ts_pool) d->fn.vkDestroyQueryPool(d->dev, d->ts_pool, NULL);
        if (d->fence) d->fn.vkDestroyFence(d->dev, d->fence, NULL);
        if (d->cmd_pool) d->fn.vkDestroyCommandPool(d->dev, d->cmd_pool, NULL);
        d->fn.vkDestroyDevice(d->dev, NULL);
    }
    tl__vk_instance_close(&d->vi);
    free(d);
}

static const struct tl__gpu_vtbl vk_vtbl = {
    .destroy = device_destroy,
    .buffer_create = tl__vk_buffer_create,
    .buffer_destroy = tl__vk_buffer_destroy,
    .run = tl__vk_run,
};

// The first queue family with compute (a dedicated compute family is not preferred yet: the
// device runs one queue).
static int compute_family(struct tl__vk_device *d)
{
    uint32_t n = 0;
    d->vi.queue_props(d->phys, &n, NULL);
    VkQueueFamilyProperties qf[64];
    if (n > 64) n = 64;
    d->vi.queue_props(d->phys, &n, qf);
    for (uint32_t i = 0; i < n; i++)
        if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && qf[i].queueCount > 0) {
            d->ts_bits = qf[i].timestampValidBits;
            return (int)i;
        }
    return -1;
}

static tl_status pick_physical(struct tl__vk_device *d, int index)
{
    VkPhysicalDevice *devs;
    uint32_t n;
    tl_status st = tl__vk_physical_devices(&d->vi, &devs, &n);
    if (st) return st;
    if ((uint32_t)index >= n) {
        free(devs);
        return tl__errorf(TL_ERR_NOT_FOUND,
                          "vulkan:%d: no such device (the loader sees %u: vulkan:0..%u; see "
                          "`tokenloom devices`)",
                          index, n, n - 1);
    }
    d->phys = devs[index];
    free(devs);
    VkPhysicalDeviceMaintenance3Properties m3 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                      .pNext = &m3};
    d->vi.props2(d->phys, &p2);
    d->props = p2.properties;
    d->max_alloc_bytes = m3.maxMemoryAllocationSize;
    d->vi.memprops(d->phys, &d->mem);
    snprintf(d->base.name, sizeof(d->base.name), "vulkan:%d (%s)", index, d->props.deviceName);
    d->base.is_cpu = d->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    if (d->props.limits.maxPerStageDescriptorStorageBuffers < TL_GPU_MAX_BINDINGS)
        return tl__errorf(
            TL_ERR_UNSUPPORTED,
            "%s: the kernels need %d storage buffers per shader, the device allows %u",
            d->base.name, TL_GPU_MAX_BINDINGS, d->props.limits.maxPerStageDescriptorStorageBuffers);
    if (d->props.apiVersion < VK_API_VERSION_1_1)
        return tl__errorf(TL_ERR_UNSUPPORTED, "%s: Vulkan 1.1 is needed, the device has %u.%u",
                          d->base.name, VK_API_VERSION_MAJOR(d->props.apiVersion),
                          VK_API_VERSION_MINOR(d->props.apiVersion));
    return 0;
}

static tl_status create_logical(struct tl__vk_device *d)
{
    int fam = compute_family(d);
    if (fam < 0)
        return tl__errorf(TL_ERR_UNSUPPORTED, "%s: the device has no compute queue", d->base.name);
    d->queue_family = (uint32_t)fam;
    d->ts_period_ns = d->props.limits.timestampPeriod;
    if (!(d->ts_period_ns > 0)) d->ts_bits = 0;
    d->base.stats.timed = d->ts_bits > 0;
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                   .queueFamilyIndex = d->queue_family,
                                   .queueCount = 1,
                                   .pQueuePriorities = &prio};
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                              .queueCreateInfoCount = 1,
                              .pQueueCreateInfos = &qci};
    VkResult r = d->vi.create_device(d->phys, &dci, NULL, &d->dev);
    if (r != VK_SUCCESS) {
        d->dev = NULL;
        return tl__vk_fail(d, r, "vkCreateDevice");
    }
#define TL_VK_LOAD(f)                                                                              \
    d->fn.f = (PFN_##f)d->vi.gdpa(d->dev, #f);                                                     \
    if (!d->fn.f) {                                                                                \
        PFN_vkDestroyDevice destroy = (PFN_vkDestroyDevice)d->vi.gdpa(d->dev, "vkDestroyDevice");  \
        if (destroy) destroy(d->dev, NULL);                                                        \
        d->dev = NULL;                                                                             \
        return tl__errorf(TL_ERR_UNSUPPORTED, "%s: the driver lacks %s", d->base.name, #f);        \
    }
    TL_VK_DEVICE_FUNCS(TL_VK_LOAD)
#undef TL_VK_LOAD
    d->fn.vkGetDeviceQueue(d->dev, d->queue_family, 0, &d->queue);
    VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                   .queueFamilyIndex = d->queue_family};
    r = d->fn.vkCreateCommandPool(d->dev, &pci, NULL, &d->cmd_pool);
    if (r != VK_SUCCESS) {
        d->cmd_pool = NULL;
        return tl__vk_fail(d, r, "vkCreateCommandPool");
    }
    VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                       .commandPool = d->cmd_pool,
                                       .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                       .commandBufferCount = 1};
    r = d->fn.vkAllocateCommandBuffers(d->dev, &cai, &d->cmd);
    if (r != VK_SUCCESS) return tl__vk_fail(d, r, "vkAllocateCommandBuffers");
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    r = d->fn.vkCreateFence(d->dev, &fci, NULL, &d->fence);
    if (r != VK_SUCCESS) {
        d->fence = NULL;
        return tl__vk_fail(d, r, "vkCreateFence");
    }
    return 0;
}

tl_status tl__vk_device_open(int index, struct tl_gpu_device **out)
{
    *out = NULL;
    struct tl__vk_device *d = calloc(1, sizeof(*d));
    if (!d) return tl__errorf(TL_ERR_NOMEM, "vulkan: out of memory");
    d->base.vt = &vk_vtbl;
    snprintf(d->base.name, sizeof(d->base.name), "vulkan:%d", index);
    tl_status st = tl__vk_instance_open(&d->vi);
    if (st) {
        free(d);
        return st;
    }
    st = pick_physical(d, index);
    if (!st) st = create_logical(d);
    if (st) {
        device_destroy(&d->base);
        return st;
    }
    *out = &d->base;
    return 0;
}

void tl_gpu_device_inject_lost(tl_gpu_device *base)
{
    if (base->vt == &vk_vtbl) ((struct tl__vk_device *)base)->inject_lost = 1;
}
#else
#include "gpu/gpu_impl.h"

void tl_gpu_device_inject_lost(tl_gpu_device *d)
{
    (void)d; // no device can be opened without Vulkan
}
#endif
