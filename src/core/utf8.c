/* UTF-8 decoding, encoding and validation. */
#include "core/utf8.h"

int tl_utf8_seq_len(unsigned char c)
{
    if (c < 0x80) return 1;
    if (c < 0xC2) return 0; // continuation byte or overlong 2-byte lead
    if (c < 0xE0) return 2;
    if (c < 0xF0) return 3;
    if (c < 0xF5) return 4;
    return 0;
}

int tl_utf8_decode(const char *str, size_t n, uint32_t *cp)
{
    const unsigned char *s = (const unsigned char *)str;
    if (n == 0) return 0;
    int len = tl_utf8_seq_len(s[0]);
    if (len == 0 || (size_t)len > n) return 0;
    if (len == 1) {
        *cp = s[0];
        return 1;
    }
    uint32_t c = s[0] & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        c = (c << 6) | (s[i] & 0x3F);
    }
    if ((len == 3 && c < 0x800) || (len == 4 && c < 0x10000) || c > 0x10FFFF ||
        (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    *cp = c;
    return len;
}

int tl_utf8_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp > 0x10FFFF) return 0;
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

bool tl_utf8_is_valid(const char *s, size_t n)
{
    size_t i = 0;
    uint32_t cp;
    while (i < n) {
        int len = tl_utf8_decode(s + i, n - i, &cp);
        if (!len) return false;
        i += (size_t)len;
    }
    return true;
}

size_t tl_utf8_complete_len(const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    // Look back at most 3 bytes for the lead of a sequence that is still incomplete.
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = s[n - back];
        if ((c & 0xC0) == 0x80) continue; // continuation: keep looking for the lead
        int len = tl_utf8_seq_len(c);
        if (len > (int)back) {
            // Held back only if the bytes so far are a valid beginning of that sequence.
            for (size_t k = 1; k < back; k++)
                if ((s[n - back + k] & 0xC0) != 0x80) return n;
            return n - back;
        }
        return n;
    }
    return n;
}
