/*
 * Shared flag parsing for the subcommands (see args.h): spelling lists, range-checked numbers,
 * and the closest-flag suggestion (Levenshtein distance over the known spellings). Owns no
 * state; single-threaded.
 */
#include "cli/args.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tl_cli_flag(const char *cmd, const char *const *names, int argc, char **argv, int *i,
                const char **val)
{
    const char *a = argv[*i];
    for (int k = 0; names[k]; k++) {
        size_t n = strlen(names[k]);
        if (strncmp(a, names[k], n) != 0) continue;
        if (a[n] == '=') {
            *val = a + n + 1;
            return 1;
        }
        if (a[n] != '\0') continue;
        if (*i + 1 >= argc) {
            fprintf(stderr, "tokenloom %s: %s needs a value\n", cmd, names[k]);
            return -1;
        }
        *val = argv[++*i];
        return 1;
    }
    return 0;
}

int tl_cli_int(const char *cmd, const char *flag, const char *s, long long lo, long long hi,
               long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "tokenloom %s: %.*s: '%s' is not an integer in [%lld, %lld]\n", cmd,
                (int)strcspn(flag, "="), flag, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int tl_cli_real(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "tokenloom %s: %.*s: '%s' is not a number in [%.10g, %.10g]\n", cmd,
                (int)strcspn(flag, "="), flag, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

// Edit distance between a[0..na) and b (insert, delete, substitute: cost 1 each).
static size_t edit_distance(const char *a, size_t na, const char *b)
{
    size_t nb = strlen(b);
    if (na > 64 || nb > 64) return (size_t)-1;
    size_t row[65];
    for (size_t j = 0; j <= nb; j++)
        row[j] = j;
    for (size_t i = 1; i <= na; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= nb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[nb];
}

const char *tl_cli_closest(const char *arg, const char *const *known, size_t *dist)
{
    size_t na = strcspn(arg, "=");
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (int k = 0; known[k]; k++) {
        size_t d = edit_distance(arg, na, known[k]);
        // A prefix of a long flag ("--max-num") is as good as a small typo.
        if (na >= 4 && !strncmp(arg, known[k], na)) d = 1;
        if (d < best_d) {
            best_d = d;
            best = known[k];
        }
    }
    // Plausible typos only: a third of the length, at least 2 edits, at most 5; none for short
    // flags such as "-x", where every other short flag is one edit away.
    size_t limit = na / 3;
    if (limit < 2) limit = 2;
    if (limit > 5) limit = 5;
    if (na <= 3) limit = 0;
    if (dist) *dist = best_d;
    return best_d <= limit ? best : NULL;
}

int tl_cli_unknown_option(const char *cmd, const char *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    const char *const *list;
    while ((list = va_arg(ap, const char *const *))) {
        size_t d;
        const char *c = tl_cli_closest(arg, list, &d);
        if (c && d < best_d) {
            best = c;
            best_d = d;
        }
    }
    va_end(ap);
    if (best)
        fprintf(stderr,
                "tokenloom %s: unknown option '%s' (did you mean %s?); see tokenloom %s --help\n",
                cmd, arg, best, cmd);
    else
        fprintf(stderr, "tokenloom %s: unknown option '%s'; see tokenloom %s --help\n", cmd, arg,
                cmd);
    return 2;
}
