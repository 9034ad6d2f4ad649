/*
 * Stop strings: find a stop string in generated text that arrives in pieces, and say how much
 * of the text can be released (streamed) without ever releasing the beginning of a stop string.
 *
 * Thread model: a set is immutable after init and belongs to one request.
 */
#ifndef TL_ENGINE_STOP_H
#define TL_ENGINE_STOP_H

#include <tokenloom.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TL_STOP_MAX_STRINGS 64
#define TL_STOP_MAX_BYTES 1024

struct tl_stop_set {
    char **str;  // owned, (n) NUL-terminated copies
    size_t *len; // owned, (n)
    int32_t n;
    size_t max_len; // longest stop string
};

// Copies n stop strings. TL_ERR_INVALID_ARG when one is NULL or empty, longer than
// TL_STOP_MAX_BYTES, or there are more than TL_STOP_MAX_STRINGS; TL_ERR_NOMEM.
tl_status tl_stop_set_init(struct tl_stop_set *s, const char *const *strs,
                           int32_t n) TL_WARN_UNUSED;
void tl_stop_set_free(struct tl_stop_set *s);

// text[0..len) is all text generated so far, of which [0..from) has been released. Returns true
// when a stop string occurs in it: *end = where the earliest-starting one begins (release up to
// there, then stop). Otherwise *end = how far text may be released now: up to the first
// position from which the rest of text is the beginning of a stop string (held back until more
// text decides it). Positions before `from` are never looked at again: nothing released can
// start a stop string, since it was checked not to when released.
bool tl_stop_scan(const struct tl_stop_set *s, const char *text, size_t len, size_t from,
                  size_t *end);

#endif
