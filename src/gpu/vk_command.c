/*
 * Running a recording (gpu_rec.c) on a Vulkan device: every upload is first copied into the
 * device's staging buffer, then all commands are recorded in order into the device's one
 * command buffer with a full compute/transfer memory barrier between consecutive commands (the
 * simple rule that is always right; a dependency tracker can drop the needless ones later),
 * submitted once, waited for once, and the downloads are copied out of staging. The counters
 * (submissions, waits, copies, dispatches, and device time per phase from a timestamp after
 * every command) are what /stats will report per step.
 * Errors: a missing or failing pipeline fails before anything is submitted; a failed submit or
 * wait is tl__vk_fail's error (VK_ERROR_DEVICE_LOST marks the device lost). Waits are bounded
 * (TL_VK_WAIT_NS): a device that never finishes is treated as lost.
 * Thread model: one run at a time per device; nothing is in flight when run returns.
 */
#ifdef TL_HAVE_VULKAN
#include "gpu/vk_impl.h"

#include <stdlib.h>
#include <string.h>

#define TL_VK_WAIT_NS (600ull * 1000 * 1000 * 1000)
#define STAGING_ALIGN 16

static size_t align_up(size_t v)
{
    return (v + STAGING_ALIGN - 1) & ~(size_t)(STAGING_ALIGN - 1);
}

static tl_status ensure_desc_pool(struct tl__vk_device *d, uint32_t n_sets)
{
    if (d->desc_pool && d->desc_pool_sets >= n_sets) {
        VkResult r = d->fn.vkResetDescriptorPool(d->dev, d->desc_pool, 0);
        return r == VK_SUCCESS ? 0 : tl__vk_fail(d, r, "vkResetDescriptorPool");
    }
    if (d->desc_pool) d->fn.vkDestroyDescriptorPool(d->dev, d->desc_pool, NULL);
    d->desc_pool = NULL;
    uint32_t want = 64;
    while (want < n_sets)
        want *= 2;
    VkDescriptorPoolSize size = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                 .descriptorCount = want * TL_GPU_MAX_BINDINGS};
    VkDescriptorPoolCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                     .maxSets = want,
                                     .poolSizeCount = 1,
                                     .pPoolSizes = &size};
    VkResult r = d->fn.vkCreateDescriptorPool(d->dev, &ci, NULL, &d->desc_pool);
    if (r != VK_SUCCESS) {
        d->desc_pool = NULL;
        d->desc_pool_sets = 0;
        return tl__vk_fail(d, r, "vkCreateDescriptorPool");
    }
    d->desc_pool_sets = want;
    return 0;
}

// Timestamps for a run of n_ops commands (n_ops + 1 of them). A pool that cannot be made turns
// timing off for the device rather than failing the run (timing is telemetry).
static void ensure_ts_pool(struct tl__vk_device *d, size_t n_ops)
{
    if (!d->ts_bits || n_ops + 1 <= d->ts_pool_size) return;
    if (d->ts_pool) d->fn.vkDestroyQueryPool(d->dev, d->ts_pool, NULL);
    d->ts_pool = NULL;
    d->ts_pool_size = 0;
    uint32_t want = 64;
    while (want < n_ops + 1 && want < (1u << 30))
        want *= 2;
    VkQueryPoolCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                .queryCount = want};
    if (n_ops + 1 > want || d->fn.vkCreateQueryPool(d->dev, &ci, NULL, &d->ts_pool) != VK_SUCCESS) {
        d->ts_pool = NULL;
        d->ts_bits = 0;
        d->base.stats.timed = false;
        return;
    }
    d->ts_pool_size = want;
}

// Adds the run's device time to the counters: each command's time is from the timestamp after
// the command before it to the one after it.
static void add_times(struct tl__vk_device *d, const struct tl_gpu_rec *rec)
{
    uint32_t n = (uint32_t)rec->n_ops + 1;
    uint64_t *ts = malloc(n * sizeof(*ts));
    if (!ts) return;
    VkResult r =
        d->fn.vkGetQueryPoolResults(d->dev, d->ts_pool, 0, n, n * sizeof(*ts), ts, sizeof(*ts),
                                    VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
    if (r == VK_SUCCESS) {
        uint64_t mask = d->ts_bits >= 64 ? ~0ull : (1ull << d->ts_bits) - 1;
        for (size_t i = 0; i < rec->n_ops; i++) {
            const struct tl__gpu_op *op = &rec->ops[i];
            uint64_t ns = (uint64_t)((double)((ts[i + 1] - ts[i]) & mask) * d->ts_period_ns);
            enum tl_gpu_phase ph = op->kind == TL__GPU_DISPATCH ? tl__gpu_kernels[op->kernel].phase
                                                                : TL_GPU_PHASE_COPY;
            d->base.stats.phase_ns[ph] += ns;
            d->base.stats.busy_ns += ns;
        }
    }
    free(ts);
}

static void barrier(struct tl__vk_device *d, VkPipelineStageFlags dst_stage, VkAccessFlags dst)
{
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask =
                              VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = dst};
    d->fn.vkCmdPipelineBarrier(
        d->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, dst_stage, 0,
        1, &mb, 0, NULL, 0, NULL);
}

// Descriptor sets for every dispatch, written with its buffers; sets[i] for the i-th dispatch.
static tl_status make_sets(struct tl__vk_device *d, const struct tl_gpu_rec *rec, uint32_t n_disp,
                           VkDescriptorSet *sets)
{
    tl_status st = ensure_desc_pool(d, n_disp);
    if (st) return st;
    VkDescriptorSetLayout *layouts = malloc(n_disp * sizeof(*layouts));
    VkDescriptorBufferInfo *infos = malloc(n_disp * TL_GPU_MAX_BINDINGS * sizeof(*infos));
    VkWriteDescriptorSet *writes = malloc(n_disp * sizeof(*writes));
    if (!layouts || !infos || !writes) {
        st = tl__errorf(TL_ERR_NOMEM, "%s: out of host memory", d->base.name);
        goto out;
    }
    uint32_t j = 0;
    for (size_t i = 0; i < rec->n_ops; i++) {
        const struct tl__gpu_op *op = &rec->ops[i];
        if (op->kind != TL__GPU_DISPATCH) continue;
        struct tl__vk_pipeline *p;
        st = tl__vk_pipeline_get(d, op->kernel, &p);
        if (st) goto out;
        layouts[j++] = p->dsl;
    }
    VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                      .descriptorPool = d->desc_pool,
                                      .descriptorSetCount = n_disp,
                                      .pSetLayouts = layouts};
    VkResult r = d->fn.vkAllocateDescriptorSets(d->dev, &ai, sets);
    if (r != VK_SUCCESS) {
        st = tl__vk_fail(d, r, "vkAllocateDescriptorSets");
        goto out;
    }
    j = 0;
    for (size_t i = 0; i < rec->n_ops; i++) {
        const struct tl__gpu_op *op = &rec->ops[i];
        if (op->kind != TL__GPU_DISPATCH) continue;
        int nb = tl__gpu_kernels[op->kernel].n_buffers;
        for (int k = 0; k < nb; k++)
            infos[j * TL_GPU_MAX_BINDINGS + k] = (VkDescriptorBufferInfo){
                .buffer = ((struct tl__vk_buffer *)op->bind[k])->buf, .range = VK_WHOLE_SIZE};
        writes[j] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                           .dstSet = sets[j],
                                           .dstBinding = 0,
                                           .descriptorCount = (uint32_t)nb,
                                           .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                           .pBufferInfo = &infos[j * TL_GPU_MAX_BINDINGS]};
        j++;
    }
    d->fn.vkUpdateDescriptorSets(d->dev, n_disp, writes, 0, NULL);
out:
    free(layouts);
    free(infos);
    free(writes);
    return st;
}

static void record(struct tl__vk_device *d, const struct tl_gpu_rec *rec,
                   const VkDescriptorSet *sets, const size_t *stage_off)
{
    uint32_t j = 0;
    int any_download = 0;
    if (d->ts_pool) {
        d->fn.vkCmdResetQueryPool(d->cmd, d->ts_pool, 0, (uint32_t)rec->n_ops + 1);
        d->fn.vkCmdWriteTimestamp(d->cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, d->ts_pool, 0);
    }
    for (size_t i = 0; i < rec->n_ops; i++) {
        const struct tl__gpu_op *op = &rec->ops[i];
        if (i > 0)
            barrier(d, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                    VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                        VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
        VkBuffer dev_buf = op->buf ? ((struct tl__vk_buffer *)op->buf)->buf : NULL;
        if (op->kind == TL__GPU_UPLOAD) {
            VkBufferCopy c = {
                .srcOffset = stage_off[i], .dstOffset = op->offset, .size = op->bytes};
            d->fn.vkCmdCopyBuffer(d->cmd, d->staging.buf, dev_buf, 1, &c);
        } else if (op->kind == TL__GPU_DOWNLOAD) {
            VkBufferCopy c = {
                .srcOffset = op->offset, .dstOffset = stage_off[i], .size = op->bytes};
            d->fn.vkCmdCopyBuffer(d->cmd, dev_buf, d->staging.buf, 1, &c);
            any_download = 1;
        } else {
            struct tl__vk_pipeline *p = &d->pipelines[op->kernel]; // built by make_sets
            d->fn.vkCmdBindPipeline(d->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p->pipe);
            d->fn.vkCmdBindDescriptorSets(d->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p->layout, 0, 1,
                                          &sets[j++], 0, NULL);
            if (op->push_bytes)
                d->fn.vkCmdPushConstants(d->cmd, p->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                                         op->push_bytes, op->push);
            d->fn.vkCmdDispatch(d->cmd, op->groups[0], op->groups[1], op->groups[2]);
        }
        if (d->ts_pool)
            d->fn.vkCmdWriteTimestamp(d->cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, d->ts_pool,
                                      (uint32_t)i + 1);
    }
    // Device writes into staging become visible to the host reads after the fence.
    if (any_download) barrier(d, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
}

tl_status tl__vk_run(struct tl_gpu_device *base, const struct tl_gpu_rec *rec)
{
    struct tl__vk_device *d = (struct tl__vk_device *)base;
    size_t *stage_off = malloc(rec->n_ops * sizeof(*stage_off));
    if (!stage_off) return tl__errorf(TL_ERR_NOMEM, "%s: out of host memory", base->name);
    size_t staging = 0;
    uint32_t n_disp = 0;
    for (size_t i = 0; i < rec->n_ops; i++) {
        stage_off[i] = staging;
        if (rec->ops[i].kind == TL__GPU_DISPATCH)
            n_disp++;
        else
            staging += align_up(rec->ops[i].bytes);
    }
    VkDescriptorSet *sets = NULL;
    tl_status st = staging ? tl__vk_host_buf_ensure(d, staging) : 0;
    if (st) goto out;
    if (n_disp) {
        sets = malloc(n_disp * sizeof(*sets));
        if (!sets) {
            st = tl__errorf(TL_ERR_NOMEM, "%s: out of host memory", base->name);
            goto out;
        }
        st = make_sets(d, rec, n_disp, sets);
        if (st) goto out;
    }
    for (size_t i = 0; i < rec->n_ops; i++)
        if (rec->ops[i].kind == TL__GPU_UPLOAD)
            memcpy((char *)d->staging.map + stage_off[i], rec->ops[i].src, rec->ops[i].bytes);

    ensure_ts_pool(d, rec->n_ops);
    VkResult r = d->fn.vkResetCommandPool(d->dev, d->cmd_pool, 0);
    if (r != VK_SUCCESS) {
        st = tl__vk_fail(d, r, "vkResetCommandPool");
        goto out;
    }
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    r = d->fn.vkBeginCommandBuffer(d->cmd, &bi);
    if (r != VK_SUCCESS) {
        st = tl__vk_fail(d, r, "vkBeginCommandBuffer");
        goto out;
    }
    record(d, rec, sets, stage_off);
    r = d->fn.vkEndCommandBuffer(d->cmd);
    if (r != VK_SUCCESS) {
        st = tl__vk_fail(d, r, "vkEndCommandBuffer");
        goto out;
    }
    r = d->fn.vkResetFences(d->dev, 1, &d->fence);
    if (r != VK_SUCCESS) {
        st = tl__vk_fail(d, r, "vkResetFences");
        goto out;
    }
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                       .commandBufferCount = 1,
                       .pCommandBuffers = &d->cmd};
    if (d->inject_lost) {
        d->inject_lost = 0;
        r = VK_ERROR_DEVICE_LOST; // as the driver reports it (tests)
    } else {
        r = d->fn.vkQueueSubmit(d->queue, 1, &si, d->fence);
    }
    if (r != VK_SUCCESS) {
        st = tl__vk_fail(d, r, "vkQueueSubmit");
        goto out;
    }
    base->stats.n_submits++;
    r = d->fn.vkWaitForFences(d->dev, 1, &d->fence, VK_TRUE, TL_VK_WAIT_NS);
    base->stats.n_waits++;
    if (r == VK_TIMEOUT) {
        base->lost = true;
        st = tl__errorf(TL_ERR_STATE, "%s: device lost: a submission did not finish in %llu s",
                        base->name, TL_VK_WAIT_NS / 1000000000ull);
        goto out;
    }
    if (r != VK_SUCCESS) {
        st = tl__vk_fail(d, r, "vkWaitForFences");
        goto out;
    }
    for (size_t i = 0; i < rec->n_ops; i++) {
        const struct tl__gpu_op *op = &rec->ops[i];
        if (op->kind == TL__GPU_DOWNLOAD) {
            memcpy(op->dst, (char *)d->staging.map + stage_off[i], op->bytes);
            base->stats.n_downloads++;
            base->stats.download_bytes += op->bytes;
        } else if (op->kind == TL__GPU_UPLOAD) {
            base->stats.n_uploads++;
            base->stats.upload_bytes += op->bytes;
        }
    }
    base->stats.n_dispatches += n_disp;
    if (d->ts_pool) add_times(d, rec);
out:
    free(sets);
    free(stage_off);
    return st;
}
#else
typedef int tl__vk_command_unused; // ISO C wants a declaration in every file
#endif
