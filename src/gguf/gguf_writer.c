/*
 * GGUF v3 writer, for tools (mkmodel) and tests.
 *
 * Design: metadata values are serialized into their final byte encoding the moment they are set
 * (so the writer never holds pointers into the caller's memory for metadata), and a key that is
 * set twice keeps its first position and takes the new value. Tensors are only described until
 * tl_gguf_writer_write: their bytes are either borrowed from the caller or produced by a fill
 * callback into one reusable buffer as large as the largest such tensor, so a multi-GiB model is
 * never in memory at once. The file is written to "<path>.tmp.<pid>" and renamed over `path` only
 * when complete, so a failed write never leaves a half file under the final name.
 *
 * Layout written: header (v3), key/values in insertion order, tensor infos in insertion order,
 * padding to the alignment (general.alignment if set as u32, else 32), then each tensor's data at
 * an aligned offset, padded with zeros to the alignment (as llama.cpp's writer does).
 *
 * Invariants: every stored key is unique; every tensor has a known type, 1..4 dims with positive
 * sizes, ne[0] a multiple of the block size, a byte size that fits, and a unique name shorter
 * than 64 bytes (ggml's limit, so llama.cpp can load the file).
 *
 * Ownership and threads: the writer owns copies of keys, names and encoded values; borrowed
 * tensor data must stay valid until write returns. Not thread-safe (one thread per writer).
 */
#include "gguf/gguf.h"
#include "gguf/gguf_impl.h"

#include "core/alloc.h"
#include "core/error.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define WRITER_DEFAULT_ALIGNMENT 32
#define MAX_TENSOR_NAME 63

struct bytes {
    uint8_t *p;  // owned
    size_t n;    // bytes used
    size_t cap;  // bytes allocated
    bool failed; // an append ran out of memory or overflowed
};

struct wkv {
    char *key;        // owned, NUL-terminated
    struct bytes val; // owned: u32 type + encoded value
};

struct wtensor {
    char *name; // owned
    enum tl_dtype type;
    int n_dims;
    int64_t ne[4];
    size_t n_bytes;
    const void *data;     // borrowed (NULL when fill is used)
    tl_gguf_fill_fn fill; // or NULL
    void *fill_ctx;       // borrowed, passed to fill
    uint64_t offset;      // assigned at write time
};

struct tl_gguf_writer {
    struct wkv *kv; // owned: n_kv entries
    size_t n_kv, cap_kv;
    struct wtensor *tensors; // owned: n_tensors entries
    size_t n_tensors, cap_tensors;
};

// ---- byte buffer --------------------------------------------------------------------------------

static void put(struct bytes *b, const void *src, size_t n)
{
    size_t need;
    if (b->failed) return;
    if (!tl_add_size(b->n, n, &need) || !tl_grow((void **)&b->p, &b->cap, need, 1)) {
        b->failed = true;
        return;
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n = need;
}

static void put_u32(struct bytes *b, uint32_t v)
{
    put(b, &v, 4);
}

static void put_u64(struct bytes *b, uint64_t v)
{
    put(b, &v, 8);
}

static void put_str(struct bytes *b, const char *s, uint64_t n)
{
    put_u64(b, n);
    put(b, s, (size_t)n);
}

// Bytes of one element of a fixed-size value type; 0 for STRING/ARRAY/unknown (the sizes live
// once, in gguf_value.c).
static size_t fixed_size(enum tl_gguf_type t)
{
    int n = tl__gguf_type_size((uint32_t)t);
    return n > 0 ? (size_t)n : 0;
}

// Encodes the payload (no type tag) of a value of type `t`; false on a malformed value.
static bool encode_payload(struct bytes *b, enum tl_gguf_type t, const struct tl_gguf_value *v,
                           int depth)
{
    switch (t) {
    case TL_GGUF_TYPE_UINT8:
    case TL_GGUF_TYPE_BOOL: {
        uint8_t x = (uint8_t)(t == TL_GGUF_TYPE_BOOL ? v->u64 != 0 : v->u64);
        put(b, &x, 1);
        return true;
    }
    case TL_GGUF_TYPE_INT8: {
        int8_t x = (int8_t)v->i64;
        put(b, &x, 1);
        return true;
    }
    case TL_GGUF_TYPE_UINT16: {
        uint16_t x = (uint16_t)v->u64;
        put(b, &x, 2);
        return true;
    }
    case TL_GGUF_TYPE_INT16: {
        int16_t x = (int16_t)v->i64;
        put(b, &x, 2);
        return true;
    }
    case TL_GGUF_TYPE_UINT32:
        put_u32(b, (uint32_t)v->u64);
        return true;
    case TL_GGUF_TYPE_INT32: {
        int32_t x = (int32_t)v->i64;
        put(b, &x, 4);
        return true;
    }
    case TL_GGUF_TYPE_FLOAT32: {
        float x = (float)v->f64;
        put(b, &x, 4);
        return true;
    }
    case TL_GGUF_TYPE_UINT64:
        put_u64(b, v->u64);
        return true;
    case TL_GGUF_TYPE_INT64:
        put(b, &v->i64, 8);
        return true;
    case TL_GGUF_TYPE_FLOAT64:
        put(b, &v->f64, 8);
        return true;
    case TL_GGUF_TYPE_STRING:
        if (!v->str.ptr && v->str.len) return false;
        put_str(b, v->str.ptr, v->str.len);
        return true;
    case TL_GGUF_TYPE_ARRAY: {
        enum tl_gguf_type et = v->arr.elem_type;
        size_t es = fixed_size(et);
        if (v->type != TL_GGUF_TYPE_ARRAY) return false;
        if (!es && et != TL_GGUF_TYPE_STRING && et != TL_GGUF_TYPE_ARRAY) return false;
        if (et == TL_GGUF_TYPE_ARRAY && depth + 1 >= TL_GGUF_MAX_DEPTH) return false;
        put_u32(b, (uint32_t)et);
        put_u64(b, v->arr.n);
        if (es) {
            size_t n_bytes;
            if (v->arr.n > SIZE_MAX || !tl_mul_size((size_t)v->arr.n, es, &n_bytes)) return false;
            if (n_bytes && !v->arr.raw) return false;
            put(b, v->arr.raw, n_bytes);
            return true;
        }
        if (v->arr.n && !v->arr.items) return false;
        for (uint64_t i = 0; i < v->arr.n && !b->failed; i++) {
            const struct tl_gguf_value *item = &v->arr.items[i];
            if (item->type != et) return false;
            if (!encode_payload(b, et, item, depth + 1)) return false;
        }
        return true;
    }
    }
    return false;
}

// ---- create / destroy ---------------------------------------------------------------------------

struct tl_gguf_writer *tl_gguf_writer_create(void)
{
    return tl_calloc_array(1, sizeof(struct tl_gguf_writer));
}

void tl_gguf_writer_destroy(struct tl_gguf_writer *w)
{
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val.p);
    }
    free(w->kv);
    for (size_t i = 0; i < w->n_tensors; i++)
        free(w->tensors[i].name);
    free(w->tensors);
    free(w);
}

// ---- metadata -----------------------------------------------------------------------------------

// Stores the encoded value `enc` (ownership taken) under `key`, replacing an earlier value.
static tl_status store_kv(struct tl_gguf_writer *w, const char *key, struct bytes *enc)
{
    if (enc->failed) {
        free(enc->p);
        return tl__errorf(TL_ERR_NOMEM, "gguf writer: out of memory for key '%s'", key);
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        if (!strcmp(w->kv[i].key, key)) {
            free(w->kv[i].val.p);
            w->kv[i].val = *enc;
            return TL_OK;
        }
    }
    char *k = tl_strndup(key, strlen(key));
    if (!k || !tl_grow((void **)&w->kv, &w->cap_kv, w->n_kv + 1, sizeof(*w->kv))) {
        free(k);
        free(enc->p);
        return tl__errorf(TL_ERR_NOMEM, "gguf writer: out of memory for key '%s'", key);
    }
    w->kv[w->n_kv++] = (struct wkv){.key = k, .val = *enc};
    return TL_OK;
}

static tl_status check_key(const struct tl_gguf_writer *w, const char *key)
{
    if (!w || !key || !*key)
        return tl__errorf(TL_ERR_INVALID_ARG, "gguf writer: missing writer or empty key");
    return TL_OK;
}

tl_status tl_gguf_writer_set_value(struct tl_gguf_writer *w, const char *key,
                                   const struct tl_gguf_value *v)
{
    tl_status rc = check_key(w, key);
    if (rc) return rc;
    if (!v) return tl__errorf(TL_ERR_INVALID_ARG, "gguf writer: key '%s': NULL value", key);
    struct bytes enc = {0};
    put_u32(&enc, (uint32_t)v->type);
    if (!encode_payload(&enc, v->type, v, 0)) {
        free(enc.p);
        return tl__errorf(TL_ERR_INVALID_ARG,
                          "gguf writer: key '%s': malformed value (type %s, or nested deeper than "
                          "%d, or element types inconsistent)",
                          key, tl_gguf_type_name(v->type), TL_GGUF_MAX_DEPTH);
    }
    return store_kv(w, key, &enc);
}

tl_status tl_gguf_writer_set_u32(struct tl_gguf_writer *w, const char *key, uint32_t v)
{
    struct tl_gguf_value val = {.type = TL_GGUF_TYPE_UINT32, .u64 = v};
    return tl_gguf_writer_set_value(w, key, &val);
}

tl_status tl_gguf_writer_set_i32(struct tl_gguf_writer *w, const char *key, int32_t v)
{
    struct tl_gguf_value val = {.type = TL_GGUF_TYPE_INT32, .i64 = v};
    return tl_gguf_writer_set_value(w, key, &val);
}

tl_status tl_gguf_writer_set_u64(struct tl_gguf_writer *w, const char *key, uint64_t v)
{
    struct tl_gguf_value val = {.type = TL_GGUF_TYPE_UINT64, .u64 = v};
    return tl_gguf_writer_set_value(w, key, &val);
}

tl_status tl_gguf_writer_set_f32(struct tl_gguf_writer *w, const char *key, float v)
{
    struct tl_gguf_value val = {.type = TL_GGUF_TYPE_FLOAT32, .f64 = v};
    return tl_gguf_writer_set_value(w, key, &val);
}

tl_status tl_gguf_writer_set_bool(struct tl_gguf_writer *w, const char *key, bool v)
{
    struct tl_gguf_value val = {.type = TL_GGUF_TYPE_BOOL, .u64 = v};
    return tl_gguf_writer_set_value(w, key, &val);
}

tl_status tl_gguf_writer_set_str(struct tl_gguf_writer *w, const char *key, const char *v)
{
    if (!v)
        return tl__errorf(TL_ERR_INVALID_ARG, "gguf writer: key '%s': NULL string",
                          key ? key : "?");
    struct tl_gguf_value val = {.type = TL_GGUF_TYPE_STRING, .str = {strlen(v), v}};
    return tl_gguf_writer_set_value(w, key, &val);
}

tl_status tl_gguf_writer_set_arr(struct tl_gguf_writer *w, const char *key,
                                 enum tl_gguf_type elem_type, const void *elems, uint64_t n)
{
    if (!fixed_size(elem_type))
        return tl__errorf(TL_ERR_INVALID_ARG,
                          "gguf writer: key '%s': set_arr needs a fixed-size element type, not %s",
                          key ? key : "?", tl_gguf_type_name(elem_type));
    struct tl_gguf_value val = {.type = TL_GGUF_TYPE_ARRAY,
                                .arr = {.elem_type = elem_type, .n = n, .raw = elems}};
    return tl_gguf_writer_set_value(w, key, &val);
}

tl_status tl_gguf_writer_set_arr_str(struct tl_gguf_writer *w, const char *key,
                                     const char *const *strs, uint64_t n)
{
    tl_status rc = check_key(w, key);
    if (rc) return rc;
    struct bytes enc = {0};
    put_u32(&enc, TL_GGUF_TYPE_ARRAY);
    put_u32(&enc, TL_GGUF_TYPE_STRING);
    put_u64(&enc, n);
    for (uint64_t i = 0; i < n && !enc.failed; i++) {
        if (!strs[i]) {
            free(enc.p);
            return tl__errorf(TL_ERR_INVALID_ARG, "gguf writer: key '%s': string %llu is NULL", key,
                              (unsigned long long)i);
        }
        put_str(&enc, strs[i], strlen(strs[i]));
    }
    return store_kv(w, key, &enc);
}

// ---- tensors ------------------------------------------------------------------------------------

static tl_status add_tensor(struct tl_gguf_writer *w, const char *name, enum tl_dtype type,
                            int n_dims, const int64_t *ne, const void *data, tl_gguf_fill_fn fill,
                            void *ctx)
{
    if (!w || !name || !*name || !ne)
        return tl__errorf(TL_ERR_INVALID_ARG, "gguf writer: missing writer, name or shape");
    if (strlen(name) > MAX_TENSOR_NAME)
        return tl__errorf(TL_ERR_INVALID_ARG,
                          "gguf writer: tensor name '%.40s...' is longer than %d bytes", name,
                          MAX_TENSOR_NAME);
    const struct tl_dtype_info *info = tl_dtype_info(type);
    if (!info)
        return tl__errorf(TL_ERR_INVALID_ARG, "gguf writer: tensor '%s': unknown type %d", name,
                          (int)type);
    if (n_dims < 1 || n_dims > 4)
        return tl__errorf(TL_ERR_INVALID_ARG, "gguf writer: tensor '%s': %d dimensions", name,
                          n_dims);
    struct wtensor t = {.type = type,
                        .n_dims = n_dims,
                        .data = data,
                        .fill = fill,
                        .fill_ctx = ctx,
                        .ne = {1, 1, 1, 1}};
    int64_t n_rows = 1;
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] <= 0)
            return tl__errorf(TL_ERR_INVALID_ARG, "gguf writer: tensor '%s': ne[%d] = %lld", name,
                              d, (long long)ne[d]);
        t.ne[d] = ne[d];
        if (d > 0 && __builtin_mul_overflow(n_rows, ne[d], &n_rows))
            return tl__errorf(TL_ERR_INVALID_ARG, "gguf writer: tensor '%s': size overflows", name);
    }
    size_t row_bytes;
    if (!tl_dtype_row_bytes(type, t.ne[0], &row_bytes))
        return tl__errorf(TL_ERR_INVALID_ARG,
                          "gguf writer: tensor '%s': ne[0] = %lld is not a multiple of the %s "
                          "block size %lld",
                          name, (long long)t.ne[0], info->name, (long long)info->block_size);
    if (!tl_mul_size(row_bytes, (size_t)n_rows, &t.n_bytes))
        return tl__errorf(TL_ERR_INVALID_ARG, "gguf writer: tensor '%s': size overflows", name);
    for (size_t i = 0; i < w->n_tensors; i++)
        if (!strcmp(w->tensors[i].name, name))
            return tl__errorf(TL_ERR_INVALID_ARG, "gguf writer: duplicate tensor name '%s'", name);
    t.name = tl_strndup(name, strlen(name));
    if (!t.name ||
        !tl_grow((void **)&w->tensors, &w->cap_tensors, w->n_tensors + 1, sizeof(*w->tensors))) {
        free(t.name);
        return tl__errorf(TL_ERR_NOMEM, "gguf writer: out of memory for tensor '%s'", name);
    }
    w->tensors[w->n_tensors++] = t;
    return TL_OK;
}

tl_status tl_gguf_writer_add_tensor(struct tl_gguf_writer *w, const char *name, enum tl_dtype type,
                                    int n_dims, const int64_t *ne, const void *data)
{
    if (!data)
        return tl__errorf(TL_ERR_INVALID_ARG, "gguf writer: tensor '%s': NULL data",
                          name ? name : "?");
    return add_tensor(w, name, type, n_dims, ne, data, NULL, NULL);
}

tl_status tl_gguf_writer_add_tensor_fill(struct tl_gguf_writer *w, const char *name,
                                         enum tl_dtype type, int n_dims, const int64_t *ne,
                                         tl_gguf_fill_fn fill, void *ctx)
{
    if (!fill)
        return tl__errorf(TL_ERR_INVALID_ARG, "gguf writer: tensor '%s': NULL fill callback",
                          name ? name : "?");
    return add_tensor(w, name, type, n_dims, ne, NULL, fill, ctx);
}

// ---- write --------------------------------------------------------------------------------------

// general.alignment as set by the caller (a u32 power of two), else the default.
static tl_status writer_alignment(const struct tl_gguf_writer *w, size_t *out)
{
    *out = WRITER_DEFAULT_ALIGNMENT;
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, "general.alignment") != 0) continue;
        uint32_t type, v;
        memcpy(&type, w->kv[i].val.p, 4);
        if (type != TL_GGUF_TYPE_UINT32)
            return tl__errorf(TL_ERR_INVALID_ARG, "gguf writer: general.alignment must be a u32");
        memcpy(&v, w->kv[i].val.p + 4, 4);
        if (v == 0 || (v & (v - 1)))
            return tl__errorf(TL_ERR_INVALID_ARG,
                              "gguf writer: general.alignment %u is not a power of two", v);
        *out = v;
    }
    return TL_OK;
}

static const uint8_t zeros[4096];

struct out_file {
    FILE *f;
    const char *path; // final path, for messages
    uint64_t pos;     // bytes written so far
    bool failed;
    int err; // errno of the first failure
};

static void out_put(struct out_file *o, const void *p, size_t n)
{
    if (o->failed || !n) return;
    if (fwrite(p, 1, n, o->f) != n) {
        o->failed = true;
        o->err = errno;
    }
    o->pos += n;
}

static void out_pad(struct out_file *o, size_t alignment)
{
    size_t pad = (size_t)((alignment - o->pos % alignment) % alignment);
    while (pad) {
        size_t k = pad < sizeof(zeros) ? pad : sizeof(zeros);
        out_put(o, zeros, k);
        pad -= k;
    }
}

tl_status tl_gguf_writer_write(struct tl_gguf_writer *w, const char *path)
{
    if (!w || !path || !*path)
        return tl__errorf(TL_ERR_INVALID_ARG, "gguf writer: missing writer or path");
    size_t alignment;
    tl_status rc = writer_alignment(w, &alignment);
    if (rc) return rc;

    // Offsets, and the largest tensor that needs a fill buffer.
    uint64_t off = 0;
    size_t max_fill = 0;
    for (size_t i = 0; i < w->n_tensors; i++) {
        struct wtensor *t = &w->tensors[i];
        off = (off + alignment - 1) / alignment * alignment;
        t->offset = off;
        if (__builtin_add_overflow(off, (uint64_t)t->n_bytes, &off))
            return tl__errorf(TL_ERR_INVALID_ARG, "%s: total tensor size overflows", path);
        if (t->fill && t->n_bytes > max_fill) max_fill = t->n_bytes;
    }

    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= sizeof(tmp))
        return tl__errorf(TL_ERR_INVALID_ARG, "%s: path too long", path);
    struct out_file o = {.path = path};
    o.f = fopen(tmp, "wb");
    if (!o.f) return tl__errorf(TL_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    setvbuf(o.f, NULL, _IOFBF, 1 << 20);
    void *fill_buf = NULL;
    if (max_fill) {
        fill_buf = tl_aligned_alloc(max_fill);
        if (!fill_buf) {
            rc = tl__errorf(TL_ERR_NOMEM, "%s: out of memory for a %zu-byte tensor buffer", path,
                            max_fill);
            goto out_file;
        }
    }

    uint32_t version = 3;
    out_put(&o, "GGUF", 4);
    out_put(&o, &version, 4);
    uint64_t n_tensors = w->n_tensors, n_kv = w->n_kv;
    out_put(&o, &n_tensors, 8);
    out_put(&o, &n_kv, 8);
    for (size_t i = 0; i < w->n_kv; i++) {
        uint64_t klen = strlen(w->kv[i].key);
        out_put(&o, &klen, 8);
        out_put(&o, w->kv[i].key, (size_t)klen);
        out_put(&o, w->kv[i].val.p, w->kv[i].val.n);
    }
    for (size_t i = 0; i < w->n_tensors; i++) {
        const struct wtensor *t = &w->tensors[i];
        uint64_t nlen = strlen(t->name);
        uint32_t n_dims = (uint32_t)t->n_dims, type = (uint32_t)t->type;
        out_put(&o, &nlen, 8);
        out_put(&o, t->name, (size_t)nlen);
        out_put(&o, &n_dims, 4);
        for (int d = 0; d < t->n_dims; d++) {
            uint64_t ne = (uint64_t)t->ne[d];
            out_put(&o, &ne, 8);
        }
        out_put(&o, &type, 4);
        out_put(&o, &t->offset, 8);
    }
    out_pad(&o, alignment);
    uint64_t data_start = o.pos;
    for (size_t i = 0; i < w->n_tensors && !o.failed; i++) {
        const struct wtensor *t = &w->tensors[i];
        TL_ASSERT(o.pos <= data_start + t->offset);
        out_pad(&o, alignment);
        TL_ASSERT(o.failed || o.pos == data_start + t->offset);
        const void *src = t->data;
        if (t->fill) {
            if (t->fill(t->fill_ctx, t->name, fill_buf, t->n_bytes) != 0) {
                rc =
                    tl__errorf(TL_ERR_INVALID_ARG, "%s: filling tensor '%s' failed", path, t->name);
                goto out_buf;
            }
            src = fill_buf;
        }
        out_put(&o, src, t->n_bytes);
    }
    out_pad(&o, alignment);
    if (!o.failed && fflush(o.f) != 0) {
        o.failed = true;
        o.err = errno;
    }
    if (o.failed) rc = tl__errorf(TL_ERR_IO, "%s: write failed: %s", path, strerror(o.err));

out_buf:
    tl_aligned_free(fill_buf);
out_file:
    if (fclose(o.f) != 0 && !rc)
        rc = tl__errorf(TL_ERR_IO, "%s: close failed: %s", path, strerror(errno));
    if (!rc && rename(tmp, path) != 0)
        rc = tl__errorf(TL_ERR_IO, "%s: cannot rename %s into place: %s", path, tmp,
                        strerror(errno));
    if (rc) unlink(tmp);
    return rc;
}
