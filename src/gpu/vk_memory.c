/*
 * Vulkan memory: device buffers (device-local storage buffers that are also copy source and
 * destination) and the device's host-visible staging buffer through which every upload and
 * download passes. One VkDeviceMemory per buffer: the runtime allocates few, large buffers
 * (weights, the KV pool, activations), well under maxMemoryAllocationCount.
 * A request larger than the device-local heap, than maxMemoryAllocationSize or than one storage
 * buffer may be, or one the driver refuses, is a one-line TL_ERR_NOMEM / TL_ERR_UNSUPPORTED
 * naming the size; nothing is left allocated. Not thread-safe per device.
 */
#ifdef TL_HAVE_VULKAN
#include "gpu/vk_impl.h"

#include <stdlib.h>

// The first memory type allowed by `bits` with all of `want`; -1 if none.
static int memory_type(const struct tl__vk_device *d, uint32_t bits, VkMemoryPropertyFlags want)
{
    for (uint32_t i = 0; i < d->mem.memoryTypeCount; i++)
        if ((bits & (1u << i)) && (d->mem.memoryTypes[i].propertyFlags & want) == want)
            return (int)i;
    return -1;
}

static double gib(uint64_t b)
{
    return (double)b / (1024.0 * 1024.0 * 1024.0);
}

// Creates buf + mem of `bytes` in a memory type with `want` (or `fallback`).
static tl_status alloc_buffer(struct tl__vk_device *d, size_t bytes, VkBufferUsageFlags usage,
                              VkMemoryPropertyFlags want, VkMemoryPropertyFlags fallback,
                              VkBuffer *buf, VkDeviceMemory *mem)
{
    *buf = NULL;
    *mem = NULL;
    if (d->max_alloc_bytes && bytes > d->max_alloc_bytes)
        return tl__errorf(TL_ERR_NOMEM,
                          "%s: out of device memory: %zu bytes (%.2f GiB) asked, one allocation "
                          "may hold %.2f GiB",
                          d->base.name, bytes, gib(bytes), gib(d->max_alloc_bytes));
    VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                              .size = bytes,
                              .usage = usage,
                              .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VkResult r = d->fn.vkCreateBuffer(d->dev, &bci, NULL, buf);
    if (r != VK_SUCCESS) {
        *buf = NULL;
        return tl__vk_fail(d, r, "vkCreateBuffer");
    }
    VkMemoryRequirements req;
    d->fn.vkGetBufferMemoryRequirements(d->dev, *buf, &req);
    int type = memory_type(d, req.memoryTypeBits, want);
    if (type < 0) type = memory_type(d, req.memoryTypeBits, fallback);
    tl_status st = 0;
    if (type < 0) {
        st = tl__errorf(TL_ERR_UNSUPPORTED, "%s: no memory type for a %s buffer", d->base.name,
                        want & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT ? "staging" : "device");
        goto out_buf;
    }
    uint64_t heap = d->mem.memoryHeaps[d->mem.memoryTypes[type].heapIndex].size;
    if (req.size > heap) {
        st = tl__errorf(TL_ERR_NOMEM,
                        "%s: out of device memory: %zu bytes (%.2f GiB) asked, the heap has "
                        "%.2f GiB",
                        d->base.name, bytes, gib(bytes), gib(heap));
        goto out_buf;
    }
    VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                .allocationSize = req.size,
                                .memoryTypeIndex = (uint32_t)type};
    r = d->fn.vkAllocateMemory(d->dev, &mai, NULL, mem);
    if (r != VK_SUCCESS) {
        *mem = NULL;
        st = tl__vk_fail(d, r, "vkAllocateMemory");
        if (st == TL_ERR_NOMEM)
            st = tl__errorf(TL_ERR_NOMEM, "%s: out of device memory: %zu bytes (%.2f GiB) asked",
                            d->base.name, bytes, gib(bytes));
        goto out_buf;
    }
    r = d->fn.vkBindBufferMemory(d->dev, *buf, *mem, 0);
    if (r != VK_SUCCESS) {
        st = tl__vk_fail(d, r, "vkBindBufferMemory");
        d->fn.vkFreeMemory(d->dev, *mem, NULL);
        *mem = NULL;
        goto out_buf;
    }
    return 0;
out_buf:
    d->fn.vkDestroyBuffer(d->dev, *buf, NULL);
    *buf = NULL;
    return st;
}

tl_status tl__vk_buffer_create(struct tl_gpu_device *base, size_t bytes, struct tl_gpu_buffer **out)
{
    struct tl__vk_device *d = (struct tl__vk_device *)base;
    uint64_t heap = 0; // the largest device-local heap: nothing larger can ever fit
    for (uint32_t i = 0; i < d->mem.memoryHeapCount; i++)
        if ((d->mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) &&
            d->mem.memoryHeaps[i].size > heap)
            heap = d->mem.memoryHeaps[i].size;
    if (bytes > heap)
        return tl__errorf(TL_ERR_NOMEM,
                          "%s: out of device memory: %zu bytes (%.2f GiB) asked, the device has "
                          "%.2f GiB",
                          base->name, bytes, gib(bytes), gib(heap));
    if (bytes > d->props.limits.maxStorageBufferRange)
        return tl__errorf(TL_ERR_UNSUPPORTED,
                          "%s: a buffer of %zu bytes is larger than one storage buffer may be "
                          "(maxStorageBufferRange %u)",
                          base->name, bytes, d->props.limits.maxStorageBufferRange);
    struct tl__vk_buffer *b = calloc(1, sizeof(*b));
    if (!b) return tl__errorf(TL_ERR_NOMEM, "%s: out of host memory", base->name);
    tl_status st =
        alloc_buffer(d, bytes,
                     VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                         VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                     VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0, &b->buf, &b->mem);
    if (st) {
        free(b);
        return st;
    }
    b->base.dev = base;
    b->base.bytes = bytes;
    *out = &b->base;
    return 0;
}

void tl__vk_buffer_destroy(struct tl_gpu_buffer *base)
{
    struct tl__vk_buffer *b = (struct tl__vk_buffer *)base;
    struct tl__vk_device *d = (struct tl__vk_device *)base->dev;
    d->fn.vkDestroyBuffer(d->dev, b->buf, NULL);
    d->fn.vkFreeMemory(d->dev, b->mem, NULL);
    free(b);
}

void tl__vk_host_buf_free(struct tl__vk_device *d, struct tl__vk_host_buf *h)
{
    if (h->map) d->fn.vkUnmapMemory(d->dev, h->mem);
    if (h->buf) d->fn.vkDestroyBuffer(d->dev, h->buf, NULL);
    if (h->mem) d->fn.vkFreeMemory(d->dev, h->mem, NULL);
    h->map = NULL;
    h->buf = NULL;
    h->mem = NULL;
    h->bytes = 0;
}

tl_status tl__vk_host_buf_ensure(struct tl__vk_device *d, size_t bytes)
{
    struct tl__vk_host_buf *h = &d->staging;
    if (h->bytes >= bytes) return 0;
    tl__vk_host_buf_free(d, h);
    size_t want = bytes < ((size_t)1 << 20) ? (size_t)1 << 20 : bytes;
    // Host-cached where the device offers it (readback is read by the CPU), coherent always:
    // no flush or invalidate calls are needed.
    tl_status st =
        alloc_buffer(d, want, VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                     VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT |
                         VK_MEMORY_PROPERTY_HOST_CACHED_BIT,
                     VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                     &h->buf, &h->mem);
    if (st) return st;
    VkResult r = d->fn.vkMapMemory(d->dev, h->mem, 0, VK_WHOLE_SIZE, 0, &h->map);
    if (r != VK_SUCCESS) {
        h->map = NULL;
        tl__vk_host_buf_free(d, h);
        return tl__vk_fail(d, r, "vkMapMemory (staging)");
    }
    h->bytes = want;
    return 0;
}
#else
typedef int tl__vk_memory_unused; // ISO C wants a declaration in every file
#endif
