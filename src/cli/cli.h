/*
 * The tokenloom subcommands. Each lives in its own cmd_<name>.c, parses its own flags and wires
 * public-API calls together; main.c only dispatches. A command returns the process exit code:
 * 0 success, 1 runtime error (bad file, bad input), 2 usage error.
 */
#ifndef TL_CLI_H
#define TL_CLI_H

#include <stdbool.h>
#include <stddef.h>

int tl_cmd_generate(int argc, char **argv);
int tl_cmd_serve(int argc, char **argv);
int tl_cmd_info(int argc, char **argv);
int tl_cmd_tokenize(int argc, char **argv);
int tl_cmd_mkmodel(int argc, char **argv);
int tl_cmd_embed(int argc, char **argv);
int tl_cmd_bench(int argc, char **argv);
int tl_cmd_version(int argc, char **argv);
int tl_cmd_devices(int argc, char **argv);

// The default model: $MODEL if set, else stories260K.gguf from the shared models folder
// (tl_cli_find_shared_model), else NULL.
const char *tl_cli_default_model(void);

// Finds `file` in the shared models folder: $TL_SHARED/models, ../shared/models, or beside the
// checkout of the executable (<checkout>/build/tokenloom -> <checkout>/../shared/models).
// Writes the path to buf (cap bytes); false when not found.
bool tl_cli_find_shared_model(const char *file, char *buf, size_t cap);

#endif
