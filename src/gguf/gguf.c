/*
 * GGUF reader: a validating parser over a read-only mapping of the file.
 *
 * Format (little-endian; GGUF v2 and v3 are identical on little-endian hosts, v3 only added
 * big-endian files, which we reject):
 *   magic "GGUF", u32 version, u64 n_tensors, u64 n_kv,
 *   n_kv x { string key, u32 value_type, value },
 *   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 tensor_type, u64 offset },
 *   padding to `general.alignment` (u32, power of two, default 32), then the data section;
 *   each tensor's offset is relative to the data section and aligned.
 *   string = u64 length + bytes (no NUL); array = u32 elem_type + u64 n + n elements.
 *
 * Design: one pass over the bytes with a cursor that refuses to read past the end. Every length
 * and count is compared with the bytes that remain (count <= remaining / smallest encoding of
 * one element) before anything is allocated, and every size computation is overflow-checked, so
 * a hostile header cannot make us allocate more than a small multiple of the file size, and the
 * parse is linear in the file size (duplicate detection uses hash tables, not pairwise scans).
 * Arrays of fixed-size elements are not copied: the value points at the packed bytes in the
 * mapping. Arrays of strings or arrays get a parsed `items` array (owned), recursively, with the
 * nesting depth capped at TL_GGUF_MAX_DEPTH. The value types (sizes, names, element decoding,
 * the typed tl_gguf_get_* reads) are in gguf_value.c.
 *
 * Invariants after a successful open: keys and tensor names are unique; every tensor's type is
 * known, ne[0] is a multiple of its block size, its element count and byte size fit, and its data
 * lies aligned inside the file without overlapping another tensor's.
 *
 * Errors: exactly one line "<name>: <problem>" via tl__errorf, and TL_ERR_FORMAT (malformed),
 * TL_ERR_UNSUPPORTED (version, big-endian), TL_ERR_IO (open/mmap) or TL_ERR_NOMEM. Names and keys
 * quoted in messages are shortened and stripped of control characters to keep that one line.
 *
 * Ownership and threads: struct tl_gguf owns its name copy, kv/tensor arrays, array items and
 * hash tables, and the mapping when opened from a path (borrowed for tl_gguf_open_mem). Strings
 * and data pointers point into the mapping. After open the object is immutable, so any number of
 * threads may read it concurrently; close must happen after all readers are done.
 */
#include "gguf/gguf.h"
#include "gguf/gguf_impl.h"

#include "core/alloc.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/hashmap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_DEFAULT_ALIGNMENT 32
// Smallest encodings, used to bound counts by the bytes that remain before allocating.
#define MIN_KV_BYTES 13     // u64 key length + u32 type + 1-byte value
#define MIN_TENSOR_BYTES 32 // u64 name length + u32 n_dims + u64 ne[0] + u32 type + u64 offset
#define MIN_STRING_BYTES 8  // u64 length
#define MIN_ARRAY_BYTES 12  // u32 elem_type + u64 n

// ---- object ----------------------------------------------------------------------------------

struct tl_gguf {
    char *name;                     // owned: the path or name given at open (for messages)
    const uint8_t *base;            // mmap (owned when `mapped`) or borrowed caller buffer
    size_t size;                    // bytes of base
    bool mapped;                    // base came from mmap and must be unmapped
    uint32_t version;               // 2 or 3
    size_t alignment;               // data alignment, a power of two
    size_t data_offset;             // file offset of the data section
    int64_t n_kv;                   //
    struct tl_gguf_kv *kv;          // owned: n_kv entries (values' `items` owned too)
    int64_t n_tensors;              //
    struct tl_gguf_tensor *tensors; // owned: n_tensors entries
    struct tl_hmap kv_index;        // tl_hash_bytes(kv[i].key) -> i
    struct tl_hmap tensor_index;    // tl_hash_bytes(tensors[i].name) -> i
};

// ---- small helpers -----------------------------------------------------------------------------

static bool str_eq_n(struct tl_gguf_str s, const char *p, uint64_t n)
{
    return s.len == n && (n == 0 || memcmp(s.ptr, p, n) == 0);
}

bool tl_gguf_str_eq(struct tl_gguf_str s, const char *cstr)
{
    return cstr && str_eq_n(s, cstr, strlen(cstr));
}

// A printable, bounded copy of a file string for error messages (one line, at most ~60 bytes).
#define SHOW_BYTES 96
static const char *show(struct tl_gguf_str s, char buf[SHOW_BYTES])
{
    size_t n = 0;
    uint64_t i;
    for (i = 0; i < s.len && n < 60; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        buf[n++] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    if (i < s.len) {
        memcpy(buf + n, "...", 3);
        n += 3;
    }
    buf[n] = '\0';
    return buf;
}

// The key and tensor-name indexes: tl_hmaps from a name's hash to its array position, names
// compared for every entry of the hash (two names may share one).

// Position of the entry named (p, n) or -1. `name_of(arr, i)` gives entry i's name.
static int64_t index_find(const struct tl_hmap *ix, const void *arr,
                          struct tl_gguf_str (*name_of)(const void *, uint32_t), const char *p,
                          uint64_t n)
{
    size_t cursor = 0;
    uint64_t i;
    while (tl_hmap_next(ix, tl_hash_bytes(p, n), &cursor, &i))
        if (str_eq_n(name_of(arr, (uint32_t)i), p, n)) return (int64_t)i;
    return -1;
}

// Inserts entry i (room was reserved); false if an entry with the same name exists.
static bool index_insert(struct tl_hmap *ix, const void *arr,
                         struct tl_gguf_str (*name_of)(const void *, uint32_t), uint32_t i)
{
    struct tl_gguf_str s = name_of(arr, i);
    if (index_find(ix, arr, name_of, s.ptr, s.len) >= 0) return false;
    tl_status rc = tl_hmap_add(ix, tl_hash_bytes(s.ptr, s.len), i);
    TL_ASSERT(rc == TL_OK); // never allocates: tl_hmap_reserve made room for every entry
    return true;
}

static struct tl_gguf_str kv_name(const void *arr, uint32_t i)
{
    return ((const struct tl_gguf_kv *)arr)[i].key;
}

static struct tl_gguf_str tensor_name(const void *arr, uint32_t i)
{
    return ((const struct tl_gguf_tensor *)arr)[i].name;
}

static void value_free(struct tl_gguf_value *v)
{
    if (v->type != TL_GGUF_TYPE_ARRAY || !v->arr.items) return;
    struct tl_gguf_value *items = (struct tl_gguf_value *)v->arr.items;
    if (v->arr.elem_type == TL_GGUF_TYPE_ARRAY)
        for (uint64_t i = 0; i < v->arr.n; i++)
            value_free(&items[i]);
    free(items);
    v->arr.items = NULL;
}

// ---- parser -------------------------------------------------------------------------------------

struct parser {
    const char *name;    // for messages (borrowed)
    const uint8_t *base; // borrowed
    size_t size;
    size_t pos;
    const char *what; // what is being read, for truncation messages
};

static tl_status perr(const struct parser *ps, tl_status code, const char *fmt, ...)
    TL_PRINTF(3, 4);
static tl_status perr(const struct parser *ps, tl_status code, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return tl__errorf(code, "%s: %s", ps->name, msg);
}

static size_t remaining(const struct parser *ps)
{
    return ps->size - ps->pos;
}

static tl_status take(struct parser *ps, size_t n, const uint8_t **out)
{
    if (remaining(ps) < n)
        return perr(ps, TL_ERR_FORMAT,
                    "truncated file: %s at offset %zu needs %zu bytes but only %zu remain",
                    ps->what, ps->pos, n, remaining(ps));
    *out = ps->base + ps->pos;
    ps->pos += n;
    return TL_OK;
}

static tl_status read_u32(struct parser *ps, uint32_t *out)
{
    const uint8_t *p = NULL;
    tl_status rc = take(ps, 4, &p);
    if (!rc) memcpy(out, p, 4);
    return rc;
}

static tl_status read_u64(struct parser *ps, uint64_t *out)
{
    const uint8_t *p = NULL;
    tl_status rc = take(ps, 8, &p);
    if (!rc) memcpy(out, p, 8);
    return rc;
}

static tl_status read_str(struct parser *ps, struct tl_gguf_str *out)
{
    uint64_t len;
    tl_status rc = read_u64(ps, &len);
    if (rc) return rc;
    if (len > remaining(ps))
        return perr(ps, TL_ERR_FORMAT,
                    "truncated file: %s at offset %zu has length %llu but only %zu bytes remain",
                    ps->what, ps->pos - 8, (unsigned long long)len, remaining(ps));
    out->len = len;
    out->ptr = (const char *)ps->base + ps->pos;
    ps->pos += (size_t)len;
    return TL_OK;
}

// Parses a value of type `type` at nesting depth `depth` (0 for a key's value). On failure
// nothing is left allocated in *out.
static tl_status parse_value(struct parser *ps, uint32_t type, int depth, const char *key,
                             struct tl_gguf_value *out)
{
    memset(out, 0, sizeof(*out));
    int esize = tl__gguf_type_size(type);
    if (esize < 0)
        return perr(ps, TL_ERR_FORMAT, "key '%s': unknown value type %u at offset %zu", key, type,
                    ps->pos - 4);
    if (esize > 0) {
        const uint8_t *p = NULL;
        tl_status rc = take(ps, (size_t)esize, &p);
        if (!rc) tl__gguf_decode_scalar(type, p, out);
        return rc;
    }
    if (type == TL_GGUF_TYPE_STRING) {
        out->type = TL_GGUF_TYPE_STRING;
        return read_str(ps, &out->str);
    }

    // An array.
    uint32_t et;
    uint64_t n;
    tl_status rc = read_u32(ps, &et);
    if (!rc) rc = read_u64(ps, &n);
    if (rc) return rc;
    int eesize = tl__gguf_type_size(et);
    if (eesize < 0)
        return perr(ps, TL_ERR_FORMAT, "key '%s': unknown array element type %u at offset %zu", key,
                    et, ps->pos - 12);
    if (et == TL_GGUF_TYPE_ARRAY && depth + 1 >= TL_GGUF_MAX_DEPTH)
        return perr(ps, TL_ERR_FORMAT, "key '%s': arrays nested deeper than %d levels", key,
                    TL_GGUF_MAX_DEPTH);
    out->type = TL_GGUF_TYPE_ARRAY;
    out->arr.elem_type = (enum tl_gguf_type)et;
    out->arr.n = n;
    out->arr.raw = ps->base + ps->pos;
    if (eesize > 0) {
        size_t bytes;
        if (n > SIZE_MAX || !tl_mul_size((size_t)n, (size_t)eesize, &bytes) ||
            bytes > remaining(ps))
            return perr(ps, TL_ERR_FORMAT,
                        "key '%s': array of %llu %s elements at offset %zu runs past the end of "
                        "the file (%zu bytes remain)",
                        key, (unsigned long long)n, tl_gguf_type_name(et), ps->pos, remaining(ps));
        ps->pos += bytes;
        return TL_OK;
    }
    size_t min_bytes = et == TL_GGUF_TYPE_STRING ? MIN_STRING_BYTES : MIN_ARRAY_BYTES;
    if (n > remaining(ps) / min_bytes)
        return perr(ps, TL_ERR_FORMAT,
                    "key '%s': array of %llu %s elements at offset %zu cannot fit in the %zu "
                    "bytes that remain",
                    key, (unsigned long long)n, tl_gguf_type_name(et), ps->pos, remaining(ps));
    if (n == 0) return TL_OK;
    struct tl_gguf_value *items = tl_calloc_array((size_t)n, sizeof(*items));
    if (!items)
        return perr(ps, TL_ERR_NOMEM, "key '%s': out of memory for %llu array elements", key,
                    (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++) {
        rc = parse_value(ps, et, depth + 1, key, &items[i]);
        if (rc) {
            for (uint64_t j = 0; j < i; j++)
                value_free(&items[j]);
            free(items);
            return rc;
        }
    }
    out->arr.items = items;
    return TL_OK;
}

static tl_status parse_header(struct parser *ps, struct tl_gguf *g, uint64_t *n_tensors,
                              uint64_t *n_kv)
{
    const uint8_t *magic = NULL;
    ps->what = "magic";
    if (ps->size == 0) return perr(ps, TL_ERR_FORMAT, "empty file (not a GGUF file)");
    if (ps->size < 4)
        return perr(ps, TL_ERR_FORMAT, "truncated file: %zu bytes is too short for a GGUF header",
                    ps->size);
    tl_status rc = take(ps, 4, &magic);
    if (rc) return rc;
    if (memcmp(magic, "GGUF", 4) != 0)
        return perr(ps, TL_ERR_FORMAT,
                    "not a GGUF file (bad magic %02x %02x %02x %02x, expected \"GGUF\")", magic[0],
                    magic[1], magic[2], magic[3]);
    ps->what = "version";
    rc = read_u32(ps, &g->version);
    if (rc) return rc;
    if (g->version != 2 && g->version != 3) {
        uint32_t sw = __builtin_bswap32(g->version);
        if (sw >= 1 && sw <= 3)
            return perr(ps, TL_ERR_UNSUPPORTED,
                        "big-endian GGUF files are not supported (version %u)", sw);
        return perr(ps, TL_ERR_UNSUPPORTED,
                    "unsupported GGUF version %u (only versions 2 and 3 are supported)",
                    g->version);
    }
    ps->what = "tensor count";
    rc = read_u64(ps, n_tensors);
    if (rc) return rc;
    ps->what = "key/value count";
    rc = read_u64(ps, n_kv);
    if (rc) return rc;
    if (*n_kv > remaining(ps) / MIN_KV_BYTES)
        return perr(ps, TL_ERR_FORMAT,
                    "key/value count %llu cannot fit in the %zu bytes that follow the header",
                    (unsigned long long)*n_kv, remaining(ps));
    if (*n_tensors > remaining(ps) / MIN_TENSOR_BYTES)
        return perr(ps, TL_ERR_FORMAT,
                    "tensor count %llu cannot fit in the %zu bytes that follow the header",
                    (unsigned long long)*n_tensors, remaining(ps));
    if (*n_kv >= UINT32_MAX || *n_tensors >= UINT32_MAX) // the hash index stores u32 positions
        return perr(ps, TL_ERR_FORMAT, "too many keys or tensors");
    return TL_OK;
}

static tl_status parse_kvs(struct parser *ps, struct tl_gguf *g, uint64_t n_kv)
{
    g->kv = tl_calloc_array(n_kv ? (size_t)n_kv : 1, sizeof(*g->kv));
    if (!g->kv || tl_hmap_reserve(&g->kv_index, (size_t)n_kv))
        return perr(ps, TL_ERR_NOMEM, "out of memory for %llu keys", (unsigned long long)n_kv);
    for (uint64_t i = 0; i < n_kv; i++) {
        struct tl_gguf_kv *kv = &g->kv[i];
        char kb[SHOW_BYTES];
        uint32_t type;
        ps->what = "key name";
        tl_status rc = read_str(ps, &kv->key);
        if (rc) return rc;
        show(kv->key, kb);
        ps->what = "value type";
        rc = read_u32(ps, &type);
        if (rc) return rc;
        ps->what = "value";
        rc = parse_value(ps, type, 0, kb, &kv->value);
        if (rc) return rc;
        g->n_kv = (int64_t)i + 1; // so that close frees what was parsed
        if (!index_insert(&g->kv_index, g->kv, kv_name, (uint32_t)i))
            return perr(ps, TL_ERR_FORMAT, "duplicate key '%s'", kb);
    }
    return TL_OK;
}

static tl_status read_alignment(struct parser *ps, struct tl_gguf *g)
{
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const struct tl_gguf_value *v = tl_gguf_get(g, "general.alignment");
    if (!v) return TL_OK;
    if (v->type != TL_GGUF_TYPE_UINT32)
        return perr(ps, TL_ERR_FORMAT, "general.alignment has type %s, expected u32",
                    tl_gguf_type_name(v->type));
    if (v->u64 == 0 || (v->u64 & (v->u64 - 1)))
        return perr(ps, TL_ERR_FORMAT, "general.alignment %llu is not a power of two",
                    (unsigned long long)v->u64);
    g->alignment = (size_t)v->u64;
    return TL_OK;
}

static tl_status parse_tensor_info(struct parser *ps, struct tl_gguf_tensor *t)
{
    char nb[SHOW_BYTES];
    uint32_t n_dims, type;
    ps->what = "tensor name";
    tl_status rc = read_str(ps, &t->name);
    if (rc) return rc;
    show(t->name, nb);
    ps->what = "tensor dimension count";
    rc = read_u32(ps, &n_dims);
    if (rc) return rc;
    if (n_dims < 1 || n_dims > 4)
        return perr(ps, TL_ERR_FORMAT, "tensor '%s' has %u dimensions (must be 1 to 4)", nb,
                    n_dims);
    t->n_dims = (int)n_dims;
    ps->what = "tensor dimensions";
    int64_t n_elem = 1;
    bool overflow = false;
    for (int d = 0; d < 4; d++) {
        uint64_t ne = 1;
        if (d < t->n_dims) {
            rc = read_u64(ps, &ne);
            if (rc) return rc;
        }
        if (ne > (uint64_t)INT64_MAX)
            return perr(ps, TL_ERR_FORMAT, "tensor '%s' has a negative dimension ne[%d] = %lld", nb,
                        d, (long long)(int64_t)ne);
        t->ne[d] = (int64_t)ne;
        if (__builtin_mul_overflow(n_elem, t->ne[d], &n_elem)) overflow = true;
    }
    if (overflow)
        return perr(ps, TL_ERR_FORMAT,
                    "tensor '%s': element count overflows (ne = %lld x %lld x %lld x %lld)", nb,
                    (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                    (long long)t->ne[3]);
    ps->what = "tensor type";
    rc = read_u32(ps, &type);
    if (rc) return rc;
    const struct tl_dtype_info *info = tl_dtype_info(type);
    if (!info) return perr(ps, TL_ERR_FORMAT, "unknown tensor type %u for tensor '%s'", type, nb);
    t->type = (enum tl_dtype)type;
    if (t->ne[0] % info->block_size)
        return perr(ps, TL_ERR_FORMAT,
                    "tensor '%s': ne[0] = %lld is not a multiple of the %s block size %lld", nb,
                    (long long)t->ne[0], info->name, (long long)info->block_size);
    size_t row_bytes;
    int64_t n_rows = t->ne[1] * t->ne[2] * t->ne[3]; // cannot overflow: n_elem did not
    if (!tl_dtype_row_bytes(type, t->ne[0], &row_bytes) ||
        !tl_mul_size(row_bytes, (size_t)n_rows, &t->n_bytes))
        return perr(ps, TL_ERR_FORMAT, "tensor '%s': byte size overflows", nb);
    ps->what = "tensor offset";
    rc = read_u64(ps, &t->offset);
    return rc;
}

struct span {
    uint64_t offset;
    uint64_t end;
    int64_t i;
};

static int span_cmp(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

// Places every tensor's data in the file and checks alignment, bounds and overlap.
static tl_status place_tensors(struct parser *ps, struct tl_gguf *g)
{
    size_t data_off = ps->pos;
    size_t pad = (g->alignment - data_off % g->alignment) % g->alignment;
    data_off += pad; // cannot overflow: data_off <= size and alignment <= 2^31
    g->data_offset = data_off;
    if (g->n_tensors == 0) return TL_OK; // vocabulary-only files may end without padding
    if (data_off > ps->size)
        return perr(ps, TL_ERR_FORMAT,
                    "truncated file: the tensor data section would start at offset %zu, past the "
                    "end of the file (%zu bytes)",
                    data_off, ps->size);
    size_t data_bytes = ps->size - data_off;
    struct span *spans = tl_malloc_array((size_t)g->n_tensors, sizeof(*spans));
    if (!spans) return perr(ps, TL_ERR_NOMEM, "out of memory for the tensor table");
    tl_status rc = TL_OK;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        struct tl_gguf_tensor *t = &g->tensors[i];
        char nb[SHOW_BYTES];
        if (t->offset % g->alignment) {
            rc = perr(ps, TL_ERR_FORMAT,
                      "tensor '%s' offset %llu is not a multiple of the alignment %zu",
                      show(t->name, nb), (unsigned long long)t->offset, g->alignment);
            goto out_spans;
        }
        if (t->offset > data_bytes || t->n_bytes > data_bytes - t->offset) {
            rc = perr(ps, TL_ERR_FORMAT,
                      "tensor '%s' data (offset %llu, %zu bytes) extends past the end of the file "
                      "(data section has %zu bytes)",
                      show(t->name, nb), (unsigned long long)t->offset, t->n_bytes, data_bytes);
            goto out_spans;
        }
        t->data = ps->base + data_off + t->offset;
        spans[i] = (struct span){t->offset, t->offset + t->n_bytes, i};
    }
    qsort(spans, (size_t)g->n_tensors, sizeof(*spans), span_cmp);
    // Sorted by start, a tensor overlaps an earlier one iff it starts before the furthest end
    // seen so far. Zero-byte tensors sort first at equal offsets, so they never overlap.
    uint64_t max_end = 0;
    int64_t max_i = -1;
    for (int64_t k = 0; k < g->n_tensors; k++) {
        if (max_i >= 0 && spans[k].offset < max_end && spans[k].end > spans[k].offset) {
            char a[SHOW_BYTES], b[SHOW_BYTES];
            rc = perr(ps, TL_ERR_FORMAT, "tensors '%s' and '%s' overlap in the data section",
                      show(g->tensors[max_i].name, a), show(g->tensors[spans[k].i].name, b));
            goto out_spans;
        }
        if (spans[k].end > max_end) {
            max_end = spans[k].end;
            max_i = spans[k].i;
        }
    }
out_spans:
    free(spans);
    return rc;
}

static tl_status parse(struct tl_gguf *g)
{
    struct parser ps = {.name = g->name, .base = g->base, .size = g->size};
    uint64_t n_tensors, n_kv;
    tl_status rc = parse_header(&ps, g, &n_tensors, &n_kv);
    if (rc) return rc;
    rc = parse_kvs(&ps, g, n_kv);
    if (rc) return rc;
    rc = read_alignment(&ps, g);
    if (rc) return rc;
    g->tensors = tl_calloc_array(n_tensors ? (size_t)n_tensors : 1, sizeof(*g->tensors));
    if (!g->tensors || tl_hmap_reserve(&g->tensor_index, (size_t)n_tensors))
        return perr(&ps, TL_ERR_NOMEM, "out of memory for %llu tensors",
                    (unsigned long long)n_tensors);
    for (uint64_t i = 0; i < n_tensors; i++) {
        rc = parse_tensor_info(&ps, &g->tensors[i]);
        if (rc) return rc;
        g->n_tensors = (int64_t)i + 1;
        if (!index_insert(&g->tensor_index, g->tensors, tensor_name, (uint32_t)i)) {
            char nb[SHOW_BYTES];
            return perr(&ps, TL_ERR_FORMAT, "duplicate tensor name '%s'",
                        show(g->tensors[i].name, nb));
        }
    }
    return place_tensors(&ps, g);
}

// ---- open / close ------------------------------------------------------------------------------

static struct tl_gguf *alloc_gguf(const char *name)
{
    struct tl_gguf *g = tl_calloc_array(1, sizeof(*g));
    if (!g) return NULL;
    g->name = tl_strndup(name, strlen(name));
    if (!g->name) {
        free(g);
        return NULL;
    }
    return g;
}

tl_status tl_gguf_open_mem(const void *buf, size_t size, const char *name, struct tl_gguf **out)
{
    *out = NULL;
    if (!name) name = "<memory>";
    if (!buf && size) return tl__errorf(TL_ERR_INVALID_ARG, "%s: NULL buffer", name);
    struct tl_gguf *g = alloc_gguf(name);
    if (!g) return tl__errorf(TL_ERR_NOMEM, "%s: out of memory", name);
    g->base = buf;
    g->size = size;
    tl_status rc = parse(g);
    if (rc) {
        tl_gguf_close(g);
        return rc;
    }
    *out = g;
    return TL_OK;
}

tl_status tl_gguf_open(const char *path, struct tl_gguf **out)
{
    *out = NULL;
    if (!path) return tl__errorf(TL_ERR_INVALID_ARG, "tl_gguf_open: NULL path");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return tl__errorf(TL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return tl__errorf(TL_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return tl__errorf(TL_ERR_IO, "%s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return tl__errorf(TL_ERR_FORMAT, "%s: empty file (not a GGUF file)", path);
    }
    size_t size = (size_t)st.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); // the mapping keeps the file alive
    if (map == MAP_FAILED) return tl__errorf(TL_ERR_IO, "%s: cannot mmap: %s", path, strerror(e));
    struct tl_gguf *g = alloc_gguf(path);
    if (!g) {
        munmap(map, size);
        return tl__errorf(TL_ERR_NOMEM, "%s: out of memory", path);
    }
    g->base = map;
    g->size = size;
    g->mapped = true;
    tl_status rc = parse(g);
    if (rc) {
        tl_gguf_close(g);
        return rc;
    }
    *out = g;
    return TL_OK;
}

void tl_gguf_close(struct tl_gguf *g)
{
    if (!g) return;
    if (g->kv)
        for (int64_t i = 0; i < g->n_kv; i++)
            value_free(&g->kv[i].value);
    free(g->kv);
    free(g->tensors);
    tl_hmap_free(&g->kv_index);
    tl_hmap_free(&g->tensor_index);
    if (g->mapped) munmap((void *)g->base, g->size);
    free(g->name);
    free(g);
}

// ---- accessors ---------------------------------------------------------------------------------

uint32_t tl_gguf_version(const struct tl_gguf *g)
{
    return g->version;
}

size_t tl_gguf_alignment(const struct tl_gguf *g)
{
    return g->alignment;
}

const char *tl_gguf_path(const struct tl_gguf *g)
{
    return g->name;
}

size_t tl_gguf_file_size(const struct tl_gguf *g)
{
    return g->size;
}

size_t tl_gguf_data_offset(const struct tl_gguf *g)
{
    return g->data_offset;
}

int64_t tl_gguf_n_kv(const struct tl_gguf *g)
{
    return g->n_kv;
}

const struct tl_gguf_kv *tl_gguf_kv_at(const struct tl_gguf *g, int64_t i)
{
    return i >= 0 && i < g->n_kv ? &g->kv[i] : NULL;
}

const struct tl_gguf_value *tl_gguf_get(const struct tl_gguf *g, const char *key)
{
    if (!key) return NULL;
    int64_t i = index_find(&g->kv_index, g->kv, kv_name, key, strlen(key));
    return i >= 0 ? &g->kv[i].value : NULL;
}

int64_t tl_gguf_n_tensors(const struct tl_gguf *g)
{
    return g->n_tensors;
}

const struct tl_gguf_tensor *tl_gguf_tensor_at(const struct tl_gguf *g, int64_t i)
{
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const struct tl_gguf_tensor *tl_gguf_find_tensor(const struct tl_gguf *g, const char *name)
{
    if (!name) return NULL;
    int64_t i = index_find(&g->tensor_index, g->tensors, tensor_name, name, strlen(name));
    return i >= 0 ? &g->tensors[i] : NULL;
}
