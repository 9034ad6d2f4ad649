/*
 * The typed reads of GGUF metadata (tl_gguf_get_u32 ... tl_gguf_get_arr, tl_gguf_arr_f64,
 * tl_gguf_arr_i64): find a value by key (tl_gguf_get, gguf.c) or an array element (decoded by
 * gguf_value.c) and convert it to the caller's type when it fits exactly. The top of the gguf
 * reader's files: it calls the parser and the value types, and neither calls it.
 *
 * Thread model: pure functions over a parsed (read-only) file; re-entrant.
 */
#include "gguf/gguf.h"
#include "gguf/gguf_impl.h"

#include <stdint.h>

static bool is_unsigned(enum tl_gguf_type t)
{
    return t == TL_GGUF_TYPE_UINT8 || t == TL_GGUF_TYPE_UINT16 || t == TL_GGUF_TYPE_UINT32 ||
           t == TL_GGUF_TYPE_UINT64;
}

static bool is_signed(enum tl_gguf_type t)
{
    return t == TL_GGUF_TYPE_INT8 || t == TL_GGUF_TYPE_INT16 || t == TL_GGUF_TYPE_INT32 ||
           t == TL_GGUF_TYPE_INT64;
}

static bool is_float(enum tl_gguf_type t)
{
    return t == TL_GGUF_TYPE_FLOAT32 || t == TL_GGUF_TYPE_FLOAT64;
}

// An integer value as (negative?, magnitude) so all range checks are exact.
static bool value_int(const struct tl_gguf_value *v, bool *neg, uint64_t *mag)
{
    if (!v) return false;
    if (is_unsigned(v->type)) {
        *neg = false;
        *mag = v->u64;
        return true;
    }
    if (is_signed(v->type)) {
        *neg = v->i64 < 0;
        *mag = *neg ? (uint64_t)0 - (uint64_t)v->i64 : (uint64_t)v->i64;
        return true;
    }
    return false;
}

bool tl_gguf_get_u32(const struct tl_gguf *g, const char *key, uint32_t *out)
{
    bool neg;
    uint64_t mag;
    if (!value_int(tl_gguf_get(g, key), &neg, &mag) || neg || mag > UINT32_MAX) return false;
    *out = (uint32_t)mag;
    return true;
}

bool tl_gguf_get_u64(const struct tl_gguf *g, const char *key, uint64_t *out)
{
    bool neg;
    uint64_t mag;
    if (!value_int(tl_gguf_get(g, key), &neg, &mag) || neg) return false;
    *out = mag;
    return true;
}

bool tl_gguf_get_i64(const struct tl_gguf *g, const char *key, int64_t *out)
{
    bool neg;
    uint64_t mag;
    if (!value_int(tl_gguf_get(g, key), &neg, &mag)) return false;
    if (!neg && mag > (uint64_t)INT64_MAX) return false;
    *out = neg ? (int64_t)(0 - mag) : (int64_t)mag; // 0 - mag wraps to the exact negative value
    return true;
}

bool tl_gguf_get_f32(const struct tl_gguf *g, const char *key, float *out)
{
    const struct tl_gguf_value *v = tl_gguf_get(g, key);
    if (!v) return false;
    if (is_float(v->type)) {
        *out = (float)v->f64;
        return true;
    }
    if (is_unsigned(v->type)) {
        *out = (float)v->u64;
        return true;
    }
    if (is_signed(v->type)) {
        *out = (float)v->i64;
        return true;
    }
    return false;
}

bool tl_gguf_get_bool(const struct tl_gguf *g, const char *key, bool *out)
{
    const struct tl_gguf_value *v = tl_gguf_get(g, key);
    if (!v || v->type != TL_GGUF_TYPE_BOOL) return false;
    *out = v->u64 != 0;
    return true;
}

bool tl_gguf_get_str(const struct tl_gguf *g, const char *key, struct tl_gguf_str *out)
{
    const struct tl_gguf_value *v = tl_gguf_get(g, key);
    if (!v || v->type != TL_GGUF_TYPE_STRING) return false;
    *out = v->str;
    return true;
}

const struct tl_gguf_value *tl_gguf_get_arr(const struct tl_gguf *g, const char *key)
{
    const struct tl_gguf_value *v = tl_gguf_get(g, key);
    return v && v->type == TL_GGUF_TYPE_ARRAY ? v : NULL;
}

// Element i of a fixed-size numeric array, decoded.
static bool arr_elem(const struct tl_gguf_value *arr, uint64_t i, struct tl_gguf_value *out)
{
    if (!arr || arr->type != TL_GGUF_TYPE_ARRAY || i >= arr->arr.n) return false;
    enum tl_gguf_type et = arr->arr.elem_type;
    if (!is_unsigned(et) && !is_signed(et) && !is_float(et)) return false;
    int es = tl__gguf_type_size(et);
    tl__gguf_decode_scalar(et, (const uint8_t *)arr->arr.raw + i * (uint64_t)es, out);
    return true;
}

bool tl_gguf_arr_f64(const struct tl_gguf_value *arr, uint64_t i, double *out)
{
    struct tl_gguf_value v;
    if (!arr_elem(arr, i, &v)) return false;
    *out = is_float(v.type) ? v.f64 : is_signed(v.type) ? (double)v.i64 : (double)v.u64;
    return true;
}

bool tl_gguf_arr_i64(const struct tl_gguf_value *arr, uint64_t i, int64_t *out)
{
    struct tl_gguf_value v;
    if (!arr_elem(arr, i, &v) || is_float(v.type)) return false;
    if (is_unsigned(v.type) && v.u64 > (uint64_t)INT64_MAX) return false;
    *out = is_signed(v.type) ? v.i64 : (int64_t)v.u64;
    return true;
}
