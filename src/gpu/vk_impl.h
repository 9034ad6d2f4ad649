/*
 * Private to the Vulkan files of src/gpu (vk_*.c): the loader and instance every Vulkan caller
 * shares (vk_instance.c), the per-device function table and the device struct (vk_context.c,
 * vk_memory.c, vk_pipeline.c, vk_command.c). Compiled only with TL_HAVE_VULKAN.
 * Nothing here is thread-safe: one device is driven by one thread at a time (gpu.h).
 */
#ifndef TL_GPU_VK_IMPL_H
#define TL_GPU_VK_IMPL_H

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include "gpu/gpu_impl.h"

// ---- loader and instance (vk_instance.c) ------------------------------------------------------

struct tl__vk_instance {
    void *lib;                      // dlopen handle of libvulkan.so.1, owned
    PFN_vkGetInstanceProcAddr gipa; // from lib
    VkInstance inst;                // owned
    PFN_vkDestroyInstance destroy;
    PFN_vkEnumeratePhysicalDevices enumerate;
    PFN_vkGetPhysicalDeviceProperties2 props2;
    PFN_vkGetPhysicalDeviceFeatures2 feats2;
    PFN_vkGetPhysicalDeviceMemoryProperties memprops;
    PFN_vkGetPhysicalDeviceQueueFamilyProperties queue_props;
    PFN_vkCreateDevice create_device;
    PFN_vkGetDeviceProcAddr gdpa;
};

// Opens the loader, creates a Vulkan 1.1 instance and loads the instance-level functions above;
// then pins every loaded library (the loader and its driver) in memory. Errors (one line,
// tl__errorf): TL_ERR_UNSUPPORTED "no loader" / "no driver". On error *vi holds nothing.
tl_status tl__vk_instance_open(struct tl__vk_instance *vi) TL_WARN_UNUSED;

// Lists the physical devices into a malloc'd array (*out, caller frees) of *n >= 1 entries;
// TL_ERR_NOT_FOUND "no device" when there are none.
tl_status tl__vk_physical_devices(struct tl__vk_instance *vi, VkPhysicalDevice **out,
                                  uint32_t *n) TL_WARN_UNUSED;

// Destroys the instance and closes the loader handle (the libraries stay mapped, pinned).
void tl__vk_instance_close(struct tl__vk_instance *vi);

// A short name for a VkResult ("VK_ERROR_DEVICE_LOST").
const char *tl__vk_result_str(VkResult r);

// ---- device ------------------------------------------------------------------------------------

// Device-level functions, loaded with vkGetDeviceProcAddr.
#define TL_VK_DEVICE_FUNCS(X)                                                                      \
    X(vkDestroyDevice)                                                                             \
    X(vkGetDeviceQueue)                                                                            \
    X(vkCreateBuffer)                                                                              \
    X(vkDestroyBuffer)                                                                             \
    X(vkGetBufferMemoryRequirements)                                                               \
    X(vkAllocateMemory)                                                                            \
    X(vkFreeMemory)                                                                                \
    X(vkBindBufferMemory)                                                                          \
    X(vkMapMemory)                                                                                 \
    X(vkUnmapMemory)                                                                               \
    X(vkCreateShaderModule)                                                                        \
    X(vkDestroyShaderModule)                                                                       \
    X(vkCreateDescriptorSetLayout)                                                                 \
    X(vkDestroyDescriptorSetLayout)                                                                \
    X(vkCreatePipelineLayout)                                                                      \
    X(vkDestroyPipelineLayout)                                                                     \
    X(vkCreateComputePipelines)                                                                    \
    X(vkDestroyPipeline)                                                                           \
    X(vkCreateDescriptorPool)                                                                      \
    X(vkDestroyDescriptorPool)                                                                     \
    X(vkResetDescriptorPool)                                                                       \
    X(vkAllocateDescriptorSets)                                                                    \
    X(vkUpdateDescriptorSets)                                                                      \
    X(vkCreateCommandPool)                                                                         \
    X(vkDestroyCommandPool)                                                                        \
    X(vkResetCommandPool)                                                                          \
    X(vkAllocateCommandBuffers)                                                                    \
    X(vkBeginCommandBuffer)                                                                        \
    X(vkEndCommandBuffer)                                                                          \
    X(vkCmdBindPipeline)                                                                           \
    X(vkCmdBindDescriptorSets)                                                                     \
    X(vkCmdPushConstants)                                                                          \
    X(vkCmdDispatch)                                                                               \
    X(vkCmdCopyBuffer)                                                                             \
    X(vkCmdPipelineBarrier)                                                                        \
    X(vkCreateFence)                                                                               \
    X(vkDestroyFence)                                                                              \
    X(vkResetFences)                                                                               \
    X(vkWaitForFences)                                                                             \
    X(vkQueueSubmit)                                                                               \
    X(vkDeviceWaitIdle)                                                                            \
    X(vkCreateQueryPool)                                                                           \
    X(vkDestroyQueryPool)                                                                          \
    X(vkCmdResetQueryPool)                                                                         \
    X(vkCmdWriteTimestamp)                                                                         \
    X(vkGetQueryPoolResults)

struct tl__vk_fn {
#define TL_VK_FIELD(name) PFN_##name name;
    TL_VK_DEVICE_FUNCS(TL_VK_FIELD)
#undef TL_VK_FIELD
};

// A compute pipeline built from one embedded shader (vk_pipeline.c), made on first use.
struct tl__vk_pipeline {
    VkDescriptorSetLayout dsl; // n_buffers storage buffers, bindings 0..n-1
    VkPipelineLayout layout;   // dsl + TL_GPU_PUSH_MAX bytes of push constants
    VkPipeline pipe;
};

// A host-visible buffer (staging for uploads and readback), persistently mapped.
struct tl__vk_host_buf {
    VkBuffer buf;
    VkDeviceMemory mem;
    void *map;
    size_t bytes;
};

struct tl__vk_device {
    struct tl_gpu_device base; // first: the device-neutral part (gpu_impl.h)
    struct tl__vk_instance vi; // owned
    VkPhysicalDevice phys;
    VkPhysicalDeviceProperties props;
    VkPhysicalDeviceMemoryProperties mem;
    uint64_t max_alloc_bytes; // maxMemoryAllocationSize (maintenance3)
    VkDevice dev;             // owned
    struct tl__vk_fn fn;
    uint32_t queue_family;
    VkQueue queue;
    VkCommandPool cmd_pool;         // owned
    VkCommandBuffer cmd;            // the one command buffer every run records into
    VkFence fence;                  // owned, signalled by each run's single submission
    VkDescriptorPool desc_pool;     // owned, reset every run; NULL until the first dispatch
    uint32_t desc_pool_sets;        // sets it was made for
    struct tl__vk_host_buf staging; // grows on demand, between runs only
    struct tl__vk_pipeline pipelines[TL_GPU_K_COUNT]; // zero until first used
    int inject_lost;     // tests: the next run fails as VK_ERROR_DEVICE_LOST would
    uint32_t ts_bits;    // the queue's timestampValidBits (0: no timestamps)
    double ts_period_ns; // nanoseconds per timestamp tick
    VkQueryPool ts_pool; // owned; ts_pool_size timestamps, grown between runs
    uint32_t ts_pool_size;
};

struct tl__vk_buffer {
    struct tl_gpu_buffer base; // first
    VkBuffer buf;
    VkDeviceMemory mem;
};

// Backend entry points (gpu_impl.h's vtable), one file each.
tl_status tl__vk_device_open(int index, struct tl_gpu_device **out) TL_WARN_UNUSED; // vk_context.c
tl_status tl__vk_buffer_create(struct tl_gpu_device *d, size_t bytes,
                               struct tl_gpu_buffer **out) TL_WARN_UNUSED; // vk_memory.c
void tl__vk_buffer_destroy(struct tl_gpu_buffer *b);                       // vk_memory.c
tl_status tl__vk_host_buf_ensure(struct tl__vk_device *d, size_t bytes) TL_WARN_UNUSED;
void tl__vk_host_buf_free(struct tl__vk_device *d, struct tl__vk_host_buf *h);
tl_status tl__vk_pipeline_get(struct tl__vk_device *d, enum tl_gpu_kernel k,
                              struct tl__vk_pipeline **out) TL_WARN_UNUSED; // vk_pipeline.c
void tl__vk_pipelines_free(struct tl__vk_device *d);
tl_status tl__vk_run(struct tl_gpu_device *d, const struct tl_gpu_rec *rec) TL_WARN_UNUSED;

// Turns a failed VkResult into the device's error: VK_ERROR_DEVICE_LOST marks the device lost
// (every later call fails with TL_ERR_STATE); out-of-memory results give TL_ERR_NOMEM.
tl_status tl__vk_fail(struct tl__vk_device *d, VkResult r, const char *what);

#endif
