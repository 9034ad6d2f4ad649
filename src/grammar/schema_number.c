/*
 * JSON Schema numbers to GBNF (for schema.c): integers and numbers within minimum / maximum /
 * exclusiveMinimum / exclusiveMaximum as exact digit-range grammars (integers of at most 16
 * digits; numbers also as n.f with a non-zero fraction where (n, n + 1) lies in range).
 *
 * Thread model: pure functions.
 */
#include "grammar/grammar_impl.h"

#include "core/error.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- numbers --------------------------------------------------------------------------------

#define UINT_CAP 9999999999999999ull // 16 digits

// Digit strings a <= b of the same length n: an expression matching exactly [a, b].
static void range_same_len(struct gstr *o, const char *a, const char *b, int n)
{
    if (n == 0) {
        tl__gstr_puts(o, "\"\"");
        return;
    }
    if (!memcmp(a, b, (size_t)n)) {
        tl__gstr_literal(o, a, (size_t)n);
        return;
    }
    bool a_rest0 = true, b_rest9 = true;
    for (int i = 1; i < n; i++) {
        if (a[i] != '0') a_rest0 = false;
        if (b[i] != '9') b_rest9 = false;
    }
    if (a_rest0 && b_rest9) {
        tl__gstr_printf(o, "[%c-%c]", a[0], b[0]);
        if (n > 1) tl__gstr_printf(o, " [0-9]{%d}", n - 1);
        return;
    }
    if (a[0] == b[0]) {
        tl__gstr_printf(o, "\"%c\" (", a[0]);
        range_same_len(o, a + 1, b + 1, n - 1);
        tl__gstr_puts(o, ")");
        return;
    }
    char nines[20], zeros[20];
    memset(nines, '9', sizeof(nines));
    memset(zeros, '0', sizeof(zeros));
    tl__gstr_printf(o, "(\"%c\" (", a[0]);
    range_same_len(o, a + 1, nines, n - 1);
    tl__gstr_puts(o, ")");
    if (a[0] + 1 <= b[0] - 1) {
        tl__gstr_printf(o, " | [%c-%c]", a[0] + 1, b[0] - 1);
        if (n > 1) tl__gstr_printf(o, " [0-9]{%d}", n - 1);
    }
    tl__gstr_printf(o, " | \"%c\" (", b[0]);
    range_same_len(o, zeros, b + 1, n - 1);
    tl__gstr_puts(o, "))");
}

// Decimal numbers without leading zeros in [a, b] (a <= b <= UINT_CAP).
static void uint_range(struct gstr *o, uint64_t a, uint64_t b)
{
    tl__gstr_puts(o, "(");
    bool first = true;
    uint64_t lo_len = 1;
    for (int len = 1; len <= 16; len++, lo_len *= 10) {
        uint64_t lo = len == 1 ? 0 : lo_len, hi = lo_len * 10 - 1;
        if (lo < a) lo = a;
        if (hi > b) hi = b;
        if (lo > hi) continue;
        char sa[24], sb[24];
        snprintf(sa, sizeof(sa), "%0*llu", len, (unsigned long long)lo);
        snprintf(sb, sizeof(sb), "%0*llu", len, (unsigned long long)hi);
        if (!first) tl__gstr_puts(o, " | ");
        first = false;
        tl__gstr_puts(o, "(");
        range_same_len(o, sa, sb, len);
        tl__gstr_puts(o, ")");
    }
    tl__gstr_puts(o, ")");
}

// Integers in [lo, hi] (clamped to 16 digits). Appends alternatives; returns false if empty.
static bool int_range(struct gstr *o, double lo, double hi, bool *first)
{
    const double cap = (double)UINT_CAP;
    if (lo < -cap) lo = -cap;
    if (hi > cap) hi = cap;
    if (lo > hi) return false;
    if (hi >= 0) {
        uint64_t a = lo > 0 ? (uint64_t)lo : 0, b = (uint64_t)hi;
        if (!*first) tl__gstr_puts(o, " | ");
        *first = false;
        uint_range(o, a, b);
    }
    if (lo < 0) { // -m for m in [max(1, -hi), -lo]
        uint64_t a = hi < -1 ? (uint64_t)(-hi) : 1, b = (uint64_t)(-lo);
        if (!*first) tl__gstr_puts(o, " | ");
        *first = false;
        tl__gstr_puts(o, "\"-\" ");
        uint_range(o, a, b);
    }
    return true;
}

tl_status tl__schema_gen_number(json_t *s, const char *path, bool integer, struct gstr *o)
{
    json_t *mn = json_object_get(s, "minimum"), *mx = json_object_get(s, "maximum");
    json_t *emn = json_object_get(s, "exclusiveMinimum"),
           *emx = json_object_get(s, "exclusiveMaximum");
    json_t *all[4] = {mn, mx, emn, emx};
    static const char *names[4] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    for (int i = 0; i < 4; i++)
        if (all[i] && !json_is_number(all[i]))
            return tl__schema_err(path, "'%s' must be a number", names[i]);
    if (!mn && !mx && !emn && !emx) {
        tl__gstr_puts(o, integer ? "jint" : "jnumber");
        return TL_OK;
    }
    // Integer bounds [ilo, ihi]; the bound values lo_v, hi_v (for numbers with a fraction).
    double ilo = -INFINITY, ihi = INFINITY, lo_v = -INFINITY, hi_v = INFINITY;
    if (mn) {
        ilo = fmax(ilo, ceil(json_number_value(mn)));
        lo_v = fmax(lo_v, json_number_value(mn));
    }
    if (emn) {
        ilo = fmax(ilo, floor(json_number_value(emn)) + 1);
        lo_v = fmax(lo_v, json_number_value(emn));
    }
    if (mx) {
        ihi = fmin(ihi, floor(json_number_value(mx)));
        hi_v = fmin(hi_v, json_number_value(mx));
    }
    if (emx) {
        ihi = fmin(ihi, ceil(json_number_value(emx)) - 1);
        hi_v = fmin(hi_v, json_number_value(emx));
    }
    bool first = true;
    tl__gstr_puts(o, "(");
    bool any = int_range(o, ilo, ihi, &first);
    if (!integer) {
        // n.f with a non-zero fraction lies in (n, n + 1): n in [ceil(lo_v), floor(hi_v) - 1];
        // -m.f in (-(m + 1), -m): m in [max(1, ceil(-hi_v)), floor(-lo_v) - 1].
        const double cap = (double)UINT_CAP;
        double a = fmax(ceil(lo_v), 0), b = isinf(hi_v) ? cap : fmin(floor(hi_v) - 1, cap);
        if (a <= b) {
            tl__gstr_puts(o, first ? "" : " | ");
            first = false;
            uint_range(o, (uint64_t)a, (uint64_t)b);
            tl__gstr_puts(o, " \".\" [0-9]{0,5} [1-9]");
            any = true;
        }
        double ma = fmax(1, ceil(-hi_v)), mb = isinf(lo_v) ? cap : fmin(floor(-lo_v) - 1, cap);
        if (ma <= mb) {
            tl__gstr_puts(o, first ? "\"-\" " : " | \"-\" ");
            first = false;
            uint_range(o, (uint64_t)ma, (uint64_t)mb);
            tl__gstr_puts(o, " \".\" [0-9]{0,5} [1-9]");
            any = true;
        }
    }
    tl__gstr_puts(o, ")");
    if (!any) return tl__schema_err(path, "%s", "no number satisfies the bounds");
    return TL_OK;
}
