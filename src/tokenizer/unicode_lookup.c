/*
 * Lookups into the generated Unicode tables (unicode_data.c): binary searches over sorted
 * ranges and maps, plus the Hangul syllables' leading jamo, which is arithmetic rather than a
 * table entry (Unicode's conjoining-jamo algorithm: 588 syllables per leading consonant).
 */
#include "tokenizer/unicode_data.h"

enum tl__ucd_class tl__ucd_class(uint32_t cp)
{
    size_t lo = 0, hi = tl__ucd_n_classes;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (tl__ucd_classes[mid].last < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < tl__ucd_n_classes && tl__ucd_classes[lo].first <= cp)
        return (enum tl__ucd_class)tl__ucd_classes[lo].cls;
    return TL__UCD_OTHER;
}

static uint32_t map_lookup(const struct tl__ucd_map *m, size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m[mid].from < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && m[lo].from == cp ? m[lo].to : cp;
}

uint32_t tl__ucd_nfd_first_of(uint32_t cp)
{
    if (cp >= 0xAC00 && cp <= 0xD7A3) return 0x1100 + (cp - 0xAC00) / 588;
    return map_lookup(tl__ucd_nfd_first, tl__ucd_nfd_first_n, cp);
}

uint32_t tl__ucd_lower_first_of(uint32_t cp)
{
    if (cp < 0x80) return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
    return map_lookup(tl__ucd_lower_first, tl__ucd_lower_first_n, cp);
}
