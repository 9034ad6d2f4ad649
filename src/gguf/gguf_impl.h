/*
 * What the gguf files share: the value types' helpers (gguf_value.c) that the parser (gguf.c),
 * the writer (gguf_writer.c) and the typed reads (gguf_get.c) call.
 */
#ifndef TL_GGUF_IMPL_H
#define TL_GGUF_IMPL_H

#include "gguf/gguf.h"

#include <stdint.h>

// Bytes of one element of a fixed-size value type, 0 for STRING/ARRAY, -1 for unknown types.
int tl__gguf_type_size(uint32_t t);

// Decodes one little-endian fixed-size element of type t at p into v's scalar fields.
void tl__gguf_decode_scalar(uint32_t t, const uint8_t *p, struct tl_gguf_value *v);

#endif
