/*
 * GGUF reader (v2 and v3) and writer.
 *
 * The reader maps the file read-only and parses the header, the metadata key/values (every
 * value type, arrays nested to any depth) and the tensor table into arrays it owns; strings and
 * tensor data point into the mapping. Every length, count, offset and size is checked against
 * the bytes that remain, with overflow-safe arithmetic, before it is used; a bad file yields
 * TL_ERR_FORMAT (or TL_ERR_UNSUPPORTED / TL_ERR_IO) and a one-line message naming the file and
 * the problem. After a successful open the object is immutable and may be read from any thread.
 */
#ifndef TL_GGUF_H
#define TL_GGUF_H

#include <tokenloom.h>

#include "core/dtype.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// Arrays may nest this many levels deep (an array of arrays is 2); deeper files are rejected.
#define TL_GGUF_MAX_DEPTH 16

enum tl_gguf_type {
    TL_GGUF_TYPE_UINT8 = 0,
    TL_GGUF_TYPE_INT8 = 1,
    TL_GGUF_TYPE_UINT16 = 2,
    TL_GGUF_TYPE_INT16 = 3,
    TL_GGUF_TYPE_UINT32 = 4,
    TL_GGUF_TYPE_INT32 = 5,
    TL_GGUF_TYPE_FLOAT32 = 6,
    TL_GGUF_TYPE_BOOL = 7,
    TL_GGUF_TYPE_STRING = 8,
    TL_GGUF_TYPE_ARRAY = 9,
    TL_GGUF_TYPE_UINT64 = 10,
    TL_GGUF_TYPE_INT64 = 11,
    TL_GGUF_TYPE_FLOAT64 = 12,
};

// A string inside the file: not NUL-terminated.
struct tl_gguf_str {
    uint64_t len;
    const char *ptr; // mmap
};

struct tl_gguf_value {
    enum tl_gguf_type type;
    union {
        uint64_t u64; // UINT8/16/32/64 and BOOL (0/1)
        int64_t i64;  // INT8/16/32/64
        double f64;   // FLOAT32/64
        struct tl_gguf_str str;
        struct {
            enum tl_gguf_type elem_type;
            uint64_t n;
            const void *raw;                   // mmap: packed little-endian elements, for
                                               // fixed-size element types (for STRING/ARRAY
                                               // elements: where their encoding starts)
            const struct tl_gguf_value *items; // owned: parsed elements, for STRING and ARRAY
                                               // elements (NULL otherwise)
        } arr;
    };
};

struct tl_gguf_kv {
    struct tl_gguf_str key;
    struct tl_gguf_value value;
};

struct tl_gguf_tensor {
    struct tl_gguf_str name;
    enum tl_dtype type;
    int n_dims;       // 1..4
    int64_t ne[4];    // elements per dimension, ne[0] fastest; unused dims are 1
    uint64_t offset;  // relative to the start of the data section
    size_t n_bytes;   // bytes of data
    const void *data; // mmap, aligned to the file's alignment
};

struct tl_gguf;

// Opens and validates `path`. OUT: *out (destroy with tl_gguf_close). On error *out is NULL and
// tl_last_error() names the file and the problem.
tl_status tl_gguf_open(const char *path, struct tl_gguf **out) TL_WARN_UNUSED;

// Same over a buffer the caller keeps alive and unchanged until tl_gguf_close (tests, fuzzing).
// `name` is used in error messages.
tl_status tl_gguf_open_mem(const void *buf, size_t size, const char *name,
                           struct tl_gguf **out) TL_WARN_UNUSED;

void tl_gguf_close(struct tl_gguf *g); // NULL is a no-op

uint32_t tl_gguf_version(const struct tl_gguf *g);
size_t tl_gguf_alignment(const struct tl_gguf *g);
const char *tl_gguf_path(const struct tl_gguf *g);   // the name given at open
size_t tl_gguf_file_size(const struct tl_gguf *g);   // bytes of the file / buffer
size_t tl_gguf_data_offset(const struct tl_gguf *g); // file offset of the tensor data section
// Short name of a value type ("u32", "str", "arr", ...; "?" when unknown).
const char *tl_gguf_type_name(enum tl_gguf_type t);

int64_t tl_gguf_n_kv(const struct tl_gguf *g);
const struct tl_gguf_kv *tl_gguf_kv_at(const struct tl_gguf *g, int64_t i);
// The value of `key`, or NULL when absent.
const struct tl_gguf_value *tl_gguf_get(const struct tl_gguf *g, const char *key);

// Typed getters. They return false when the key is absent or its value has an incompatible type
// (any integer type converts to an integer getter if the value fits; FLOAT32/64 and any integer
// type convert to f32; BOOL converts only to bool; STRING only to str).
bool tl_gguf_get_u32(const struct tl_gguf *g, const char *key, uint32_t *out);
bool tl_gguf_get_u64(const struct tl_gguf *g, const char *key, uint64_t *out);
bool tl_gguf_get_i64(const struct tl_gguf *g, const char *key, int64_t *out);
bool tl_gguf_get_f32(const struct tl_gguf *g, const char *key, float *out);
bool tl_gguf_get_bool(const struct tl_gguf *g, const char *key, bool *out);
bool tl_gguf_get_str(const struct tl_gguf *g, const char *key, struct tl_gguf_str *out);
// An array value of `key` (any element type), or NULL when absent or not an array.
const struct tl_gguf_value *tl_gguf_get_arr(const struct tl_gguf *g, const char *key);
// Element i of a fixed-size numeric array as a double / int64 (false if out of range or the
// element type is not numeric).
bool tl_gguf_arr_f64(const struct tl_gguf_value *arr, uint64_t i, double *out);
bool tl_gguf_arr_i64(const struct tl_gguf_value *arr, uint64_t i, int64_t *out);

// Compares a file string with a C string.
bool tl_gguf_str_eq(struct tl_gguf_str s, const char *cstr);

int64_t tl_gguf_n_tensors(const struct tl_gguf *g);
const struct tl_gguf_tensor *tl_gguf_tensor_at(const struct tl_gguf *g, int64_t i);
const struct tl_gguf_tensor *tl_gguf_find_tensor(const struct tl_gguf *g, const char *name);

// ---- writer ---------------------------------------------------------------------------------
//
// Builds a GGUF v3 file: metadata is collected in memory; tensor data is either borrowed from
// the caller or produced by a fill callback at write time, so multi-GiB random models never
// need to sit in memory at once. Single-threaded.

struct tl_gguf_writer;

// Fills `n_bytes` of tensor data at `dst` (the row-major contents of the tensor). Returns 0 on
// success.
typedef int (*tl_gguf_fill_fn)(void *ctx, const char *tensor_name, void *dst, size_t n_bytes);

struct tl_gguf_writer *tl_gguf_writer_create(void); // NULL on allocation failure
void tl_gguf_writer_destroy(struct tl_gguf_writer *w);

tl_status tl_gguf_writer_set_u32(struct tl_gguf_writer *w, const char *key, uint32_t v);
tl_status tl_gguf_writer_set_i32(struct tl_gguf_writer *w, const char *key, int32_t v);
tl_status tl_gguf_writer_set_u64(struct tl_gguf_writer *w, const char *key, uint64_t v);
tl_status tl_gguf_writer_set_f32(struct tl_gguf_writer *w, const char *key, float v);
tl_status tl_gguf_writer_set_bool(struct tl_gguf_writer *w, const char *key, bool v);
tl_status tl_gguf_writer_set_str(struct tl_gguf_writer *w, const char *key, const char *v);
// Copies a value read from another file (any type, arrays included): used to copy a tokenizer.
tl_status tl_gguf_writer_set_value(struct tl_gguf_writer *w, const char *key,
                                   const struct tl_gguf_value *v);
// Arrays of plain elements, copied.
tl_status tl_gguf_writer_set_arr(struct tl_gguf_writer *w, const char *key,
                                 enum tl_gguf_type elem_type, const void *elems, uint64_t n);
tl_status tl_gguf_writer_set_arr_str(struct tl_gguf_writer *w, const char *key,
                                     const char *const *strs, uint64_t n);

// Adds a tensor whose bytes are borrowed until tl_gguf_writer_write returns.
tl_status tl_gguf_writer_add_tensor(struct tl_gguf_writer *w, const char *name, enum tl_dtype type,
                                    int n_dims, const int64_t *ne, const void *data);
// Adds a tensor whose bytes `fill` writes at write time.
tl_status tl_gguf_writer_add_tensor_fill(struct tl_gguf_writer *w, const char *name,
                                         enum tl_dtype type, int n_dims, const int64_t *ne,
                                         tl_gguf_fill_fn fill, void *ctx);

// Writes the file (alignment 32, or the value of general.alignment if set).
tl_status tl_gguf_writer_write(struct tl_gguf_writer *w, const char *path) TL_WARN_UNUSED;

#endif
