/*
 * Engine flags shared by `tokenloom generate` and `tokenloom serve`, named like vLLM/llama.cpp:
 * --max-batch-size N, --max-tokens-per-step N, --max-seq-len N, --kv-block-size N,
 * --kv-blocks N, --kv-bytes SIZE (K/M/G suffixes), --kv-type f16|f32, --no-prefix-cache,
 * -t/--threads N. Both "--flag value" and "--flag=value" are accepted.
 */
#ifndef TL_CLI_ENGINE_FLAGS_H
#define TL_CLI_ENGINE_FLAGS_H

#include <tokenloom.h>

#include <stdio.h>

// Tries to parse the engine flag at argv[*i] into c. Returns 1 when it was an engine flag (and
// advances *i past its value), 0 when argv[*i] is not an engine flag (nothing changes), -1 on a
// bad or missing value (a message naming the flag is printed to stderr; exit code 2 expected).
int tl_cli_engine_flag(struct tl_engine_config *c, int argc, char **argv, int *i);

// Prints the engine flags' help lines (two-space indented) to f.
void tl_cli_engine_flags_help(FILE *f);

#endif
