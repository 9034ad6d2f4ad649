/*
 * Engine flags shared by `tokenloom generate` and `tokenloom serve`, with the spellings vLLM and
 * llama.cpp users type as aliases:
 *   --max-batch-size N       (vLLM --max-num-seqs; llama.cpp -np/--parallel)
 *   --max-tokens-per-step N  (vLLM --max-num-batched-tokens; llama.cpp -b/--batch-size)
 *   --max-seq-len N          (vLLM --max-model-len; llama.cpp -c/--ctx-size, per sequence)
 *   --kv-block-size N        (vLLM --block-size)
 *   --kv-blocks N, --kv-bytes SIZE (K/M/G suffixes)
 *   --kv-type f16|f32|q8_0   (vLLM --kv-cache-dtype auto; llama.cpp -ctk/-ctv,
 *                             --cache-type-k/--cache-type-v, which must agree)
 *   --no-prefix-cache        (vLLM --no-enable-prefix-caching)
 *   -t/--threads N           (warns above the online CPU count)
 *   --device auto|cpu|vulkan[:N]  (cpu and auto run on the CPU, auto logging why; vulkan is
 *                             refused until the device step exists)
 * GPU flags (vLLM --gpu-memory-utilization, llama.cpp -ngl/--n-gpu-layers above 0) are refused
 * with a "no GPU" message. Both "--flag value" and "--flag=value" are accepted.
 */
#ifndef TL_CLI_ENGINE_FLAGS_H
#define TL_CLI_ENGINE_FLAGS_H

#include <tokenloom.h>

#include <stdio.h>

// Tries to parse the engine flag at argv[*i] into c. Returns 1 when it was an engine flag (and
// advances *i past its value), 0 when argv[*i] is not an engine flag (nothing changes), -1 on a
// bad or missing value (a message "tokenloom CMD: ..." naming the flag is printed to stderr;
// exit code 2 expected).
int tl_cli_engine_flag(const char *cmd, struct tl_engine_config *c, int argc, char **argv, int *i);

// Every spelling tl_cli_engine_flag accepts (NULL-terminated), for unknown-option suggestions.
extern const char *const tl_cli_engine_flag_names[];

// Prints the engine flags' help lines (two-space indented) to f.
void tl_cli_engine_flags_help(FILE *f);

#endif
