/*
 * Stop-string matching over streamed text (see stop.h).
 *
 * Design. Each scan looks only at the unreleased tail text[from..len), which is at most the
 * longest stop string minus one byte plus the text added since the last scan, comparing every
 * stop string at every position: O(tail * n * max_len), tiny in practice and free of tables.
 * A full match anywhere in the tail wins over a partial one (a stop string that has completed
 * ends generation even if a longer one might still be completing earlier in the text).
 *
 * Thread model: pure functions over a set owned by one request.
 */
#include "engine/stop.h"

#include "core/alloc.h"
#include "core/error.h"

#include <string.h>

tl_status tl_stop_set_init(struct tl_stop_set *s, const char *const *strs, int32_t n)
{
    memset(s, 0, sizeof(*s));
    if (n < 0 || n > TL_STOP_MAX_STRINGS)
        return tl__errorf(TL_ERR_INVALID_ARG, "at most %d stop strings (got %d)",
                          TL_STOP_MAX_STRINGS, n);
    if (n == 0) return TL_OK;
    if (!strs) return tl__errorf(TL_ERR_INVALID_ARG, "stop strings: NULL array");
    for (int32_t i = 0; i < n; i++) {
        if (!strs[i] || !strs[i][0])
            return tl__errorf(TL_ERR_INVALID_ARG, "stop string %d is empty", i);
        size_t l = strnlen(strs[i], TL_STOP_MAX_BYTES + 1);
        if (l > TL_STOP_MAX_BYTES)
            return tl__errorf(TL_ERR_INVALID_ARG, "stop string %d is longer than %d bytes", i,
                              TL_STOP_MAX_BYTES);
    }
    s->str = tl_calloc_array((size_t)n, sizeof(char *));
    s->len = tl_calloc_array((size_t)n, sizeof(size_t));
    if (!s->str || !s->len) goto out_nomem;
    s->n = n;
    for (int32_t i = 0; i < n; i++) {
        s->len[i] = strlen(strs[i]);
        s->str[i] = tl_strndup(strs[i], s->len[i]);
        if (!s->str[i]) goto out_nomem;
        if (s->len[i] > s->max_len) s->max_len = s->len[i];
    }
    return TL_OK;
out_nomem:
    tl_stop_set_free(s);
    return tl__errorf(TL_ERR_NOMEM, "stop strings: out of memory");
}

void tl_stop_set_free(struct tl_stop_set *s)
{
    if (s->str)
        for (int32_t i = 0; i < s->n; i++)
            free(s->str[i]);
    free(s->str);
    free(s->len);
    memset(s, 0, sizeof(*s));
}

bool tl_stop_scan(const struct tl_stop_set *s, const char *text, size_t len, size_t from,
                  size_t *end)
{
    size_t hold = len;
    for (size_t i = from; i < len; i++) {
        size_t rest = len - i;
        for (int32_t k = 0; k < s->n; k++) {
            size_t l = s->len[k];
            if (rest >= l) {
                if (memcmp(text + i, s->str[k], l) == 0) {
                    *end = i;
                    return true;
                }
            } else if (hold == len && memcmp(text + i, s->str[k], rest) == 0) {
                hold = i; // the earliest position whose rest may begin a stop string
            }
        }
    }
    *end = hold;
    return false;
}
