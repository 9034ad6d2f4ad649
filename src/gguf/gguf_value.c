/*
 * GGUF metadata value types: their sizes and names, and the decoding of one fixed-size element.
 * A leaf below the parser (gguf.c), the writer (gguf_writer.c) and the typed reads
 * (gguf_get.c), which all call down into it.
 *
 * Thread model: pure functions; re-entrant.
 */
#include "gguf/gguf.h"
#include "gguf/gguf_impl.h"

#include "core/error.h"

#include <string.h>

// Bytes of one element of a fixed-size value type, 0 for STRING/ARRAY, -1 for unknown types.
int tl__gguf_type_size(uint32_t t)
{
    switch (t) {
    case TL_GGUF_TYPE_UINT8:
    case TL_GGUF_TYPE_INT8:
    case TL_GGUF_TYPE_BOOL:
        return 1;
    case TL_GGUF_TYPE_UINT16:
    case TL_GGUF_TYPE_INT16:
        return 2;
    case TL_GGUF_TYPE_UINT32:
    case TL_GGUF_TYPE_INT32:
    case TL_GGUF_TYPE_FLOAT32:
        return 4;
    case TL_GGUF_TYPE_UINT64:
    case TL_GGUF_TYPE_INT64:
    case TL_GGUF_TYPE_FLOAT64:
        return 8;
    case TL_GGUF_TYPE_STRING:
    case TL_GGUF_TYPE_ARRAY:
        return 0;
    }
    return -1;
}

const char *tl_gguf_type_name(enum tl_gguf_type t)
{
    static const char *const names[] = {"u8",   "i8",  "u16", "i16", "u32", "i32", "f32",
                                        "bool", "str", "arr", "u64", "i64", "f64"};
    return (unsigned)t < sizeof(names) / sizeof(names[0]) ? names[t] : "?";
}

// Decodes one little-endian fixed-size element of type t at p into v's scalar fields.
void tl__gguf_decode_scalar(uint32_t t, const uint8_t *p, struct tl_gguf_value *v)
{
    v->type = (enum tl_gguf_type)t;
    switch (t) {
    case TL_GGUF_TYPE_UINT8:
        v->u64 = p[0];
        break;
    case TL_GGUF_TYPE_BOOL:
        v->u64 = p[0] != 0;
        break;
    case TL_GGUF_TYPE_INT8:
        v->i64 = (int8_t)p[0];
        break;
    case TL_GGUF_TYPE_UINT16: {
        uint16_t x;
        memcpy(&x, p, 2);
        v->u64 = x;
        break;
    }
    case TL_GGUF_TYPE_INT16: {
        int16_t x;
        memcpy(&x, p, 2);
        v->i64 = x;
        break;
    }
    case TL_GGUF_TYPE_UINT32: {
        uint32_t x;
        memcpy(&x, p, 4);
        v->u64 = x;
        break;
    }
    case TL_GGUF_TYPE_INT32: {
        int32_t x;
        memcpy(&x, p, 4);
        v->i64 = x;
        break;
    }
    case TL_GGUF_TYPE_FLOAT32: {
        float x;
        memcpy(&x, p, 4);
        v->f64 = x;
        break;
    }
    case TL_GGUF_TYPE_UINT64:
        memcpy(&v->u64, p, 8);
        break;
    case TL_GGUF_TYPE_INT64:
        memcpy(&v->i64, p, 8);
        break;
    case TL_GGUF_TYPE_FLOAT64:
        memcpy(&v->f64, p, 8);
        break;
    default:
        TL_ASSERT(!"not a fixed-size type");
    }
}
