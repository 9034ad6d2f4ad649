/*
 * UTF-8 helpers (RFC 3629: no overlongs, no surrogates, at most U+10FFFF). Pure functions.
 */
#ifndef TL_CORE_UTF8_H
#define TL_CORE_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// Length of the sequence a lead byte starts (1-4), or 0 for a continuation or invalid byte.
int tl_utf8_seq_len(unsigned char lead);

// Decodes one code point from s[0..n). Returns the bytes consumed (1-4), or 0 when the bytes
// there are not a valid, complete sequence.
int tl_utf8_decode(const char *s, size_t n, uint32_t *cp);

// Encodes cp into out (up to 4 bytes); returns the length, 0 for an invalid code point.
int tl_utf8_encode(uint32_t cp, char out[4]);

// True when s[0..n) is entirely valid UTF-8.
bool tl_utf8_is_valid(const char *s, size_t n);

// Length of the longest prefix of s[0..n) that does not end inside an incomplete sequence:
// n, minus a trailing 1-3 byte start of a character that more bytes could complete. Invalid
// bytes are not held back (they can never become valid).
size_t tl_utf8_complete_len(const char *s, size_t n);

#endif
