/*
 * The recorder: a host-side list of uploads, dispatches and downloads that the backend's run()
 * turns into one command buffer, one submission and one wait (gpu.h). Recording only checks
 * arguments and appends; nothing touches the device until run(), so a recording error leaves
 * the device untouched. The first error is sticky (returned again by run(), which then runs
 * nothing and empties the recorder). Not thread-safe.
 */
#include "gpu/gpu_impl.h"

#include <stdlib.h>
#include <string.h>

tl_status tl_gpu_rec_create(tl_gpu_device *d, tl_gpu_rec **out)
{
    *out = NULL;
    tl_gpu_rec *r = calloc(1, sizeof(*r));
    if (!r) return tl__errorf(TL_ERR_NOMEM, "gpu: out of memory");
    r->dev = d;
    *out = r;
    return 0;
}

void tl_gpu_rec_destroy(tl_gpu_rec *r)
{
    if (!r) return;
    free(r->ops);
    free(r);
}

static struct tl__gpu_op *append(tl_gpu_rec *r)
{
    if (r->n_ops == r->cap_ops) {
        size_t cap = r->cap_ops ? r->cap_ops * 2 : 16;
        struct tl__gpu_op *ops =
            cap < ((size_t)1 << 40) / sizeof(*ops) ? realloc(r->ops, cap * sizeof(*ops)) : NULL;
        if (!ops) {
            r->err =
                tl__errorf(TL_ERR_NOMEM, "gpu: out of memory recording %zu commands", r->n_ops + 1);
            return NULL;
        }
        r->ops = ops;
        r->cap_ops = cap;
    }
    struct tl__gpu_op *op = &r->ops[r->n_ops++];
    memset(op, 0, sizeof(*op));
    return op;
}

static tl_status fail(tl_gpu_rec *r, tl_status st)
{
    if (!r->err) r->err = st;
    return st;
}

static tl_status copy_op(tl_gpu_rec *r, enum tl__gpu_op_kind kind, tl_gpu_buffer *b, size_t offset,
                         const void *src, void *dst, size_t bytes)
{
    if (r->err) return r->err;
    const char *what = kind == TL__GPU_UPLOAD ? "upload" : "download";
    if (!b || b->dev != r->dev)
        return fail(r,
                    tl__errorf(TL_ERR_INVALID_ARG, "gpu: %s to a buffer of another device", what));
    if (bytes == 0 || offset > b->bytes || bytes > b->bytes - offset)
        return fail(r, tl__errorf(TL_ERR_INVALID_ARG,
                                  "gpu: %s of %zu bytes at %zu: outside the buffer's %zu bytes",
                                  what, bytes, offset, b->bytes));
    struct tl__gpu_op *op = append(r);
    if (!op) return r->err;
    op->kind = kind;
    op->buf = b;
    op->offset = offset;
    op->bytes = bytes;
    op->src = src;
    op->dst = dst;
    return 0;
}

tl_status tl_gpu_rec_upload(tl_gpu_rec *r, tl_gpu_buffer *dst, size_t offset, const void *src,
                            size_t bytes)
{
    return copy_op(r, TL__GPU_UPLOAD, dst, offset, src, NULL, bytes);
}

tl_status tl_gpu_rec_download(tl_gpu_rec *r, tl_gpu_buffer *src, size_t offset, void *dst,
                              size_t bytes)
{
    return copy_op(r, TL__GPU_DOWNLOAD, src, offset, NULL, dst, bytes);
}

tl_status tl__gpu_rec_dispatch(struct tl_gpu_rec *r, enum tl_gpu_kernel k,
                               struct tl_gpu_buffer *const *bufs, const void *push,
                               size_t push_bytes, uint32_t gx, uint32_t gy, uint32_t gz)
{
    if (r->err) return r->err;
    TL_ASSERT(k < TL_GPU_K_COUNT && tl__gpu_kernels[k].name && push_bytes <= TL_GPU_PUSH_MAX &&
              push_bytes % 4 == 0);
    const char *name = tl__gpu_kernels[k].name;
    for (int i = 0; i < tl__gpu_kernels[k].n_buffers; i++)
        if (!bufs[i] || bufs[i]->dev != r->dev)
            return fail(r, tl__errorf(TL_ERR_INVALID_ARG,
                                      "gpu: %s: buffer %d missing or of another device", name, i));
    if (gx == 0 || gy == 0 || gz == 0 || gx > 65535 || gy > 65535 || gz > 65535)
        return fail(r, tl__errorf(TL_ERR_INVALID_ARG,
                                  "gpu: %s: %u x %u x %u workgroups (each 1..65535)", name, gx, gy,
                                  gz));
    struct tl__gpu_op *op = append(r);
    if (!op) return r->err;
    op->kind = TL__GPU_DISPATCH;
    op->kernel = k;
    for (int i = 0; i < tl__gpu_kernels[k].n_buffers; i++)
        op->bind[i] = bufs[i];
    op->groups[0] = gx;
    op->groups[1] = gy;
    op->groups[2] = gz;
    op->push_bytes = (uint32_t)push_bytes;
    memcpy(op->push, push, push_bytes);
    return 0;
}

tl_status tl_gpu_rec_run(tl_gpu_rec *r)
{
    tl_status st = r->err;
    if (!st && r->dev->lost) st = tl__gpu_lost_error(r->dev);
    if (!st && r->n_ops) st = r->dev->vt->run(r->dev, r);
    r->n_ops = 0;
    r->err = 0;
    return st;
}
