/*
 * Command-line parsing helpers shared by the tokenloom subcommands: flag matching in both
 * "--flag value" and "--flag=value" forms under several spellings, range-checked numbers whose
 * error messages print the bounds as written (whole numbers for integer flags), and the one-line
 * "unknown option" message that names the closest known flag. Messages go to stderr prefixed
 * "tokenloom CMD: ". Single-threaded (argument parsing).
 */
#ifndef TL_CLI_ARGS_H
#define TL_CLI_ARGS_H

#include <stddef.h>

// Matches argv[*i] against the NULL-terminated list of spellings `names`. Returns 1 and sets
// *val (advancing *i past a separate value) when it matches, 0 when it is none of them, -1 when
// the value is missing (message printed).
int tl_cli_flag(const char *cmd, const char *const *names, int argc, char **argv, int *i,
                const char **val);

// An integer in [lo, hi]: 0 and *out set, or -1 with "CMD: FLAG: 'S' is not an integer in
// [lo, hi]" printed.
int tl_cli_int(const char *cmd, const char *flag, const char *s, long long lo, long long hi,
               long long *out);

// A real number in [lo, hi] (printed with %.10g, so whole bounds print whole).
int tl_cli_real(const char *cmd, const char *flag, const char *s, double lo, double hi,
                double *out);

// The known spelling closest to arg by edit distance (ignoring any "=value"), or NULL when none
// is close enough to be a plausible typo. `known` is NULL-terminated; several lists may be
// searched by calling with each and keeping the smaller *dist.
const char *tl_cli_closest(const char *arg, const char *const *known, size_t *dist);

// Prints the one-line unknown-option message for arg, naming the closest of the lists (each
// NULL-terminated; the argument list ends with NULL), and returns 2 (the usage exit code).
int tl_cli_unknown_option(const char *cmd, const char *arg, ...);

#endif
