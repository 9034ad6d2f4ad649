/*
 * The tokenloom subcommands. Each lives in its own cmd_<name>.c, parses its own flags and wires
 * public-API calls together; main.c only dispatches. A command returns the process exit code:
 * 0 success, 1 runtime error (bad file, bad input), 2 usage error.
 */
#ifndef TL_CLI_H
#define TL_CLI_H

int tl_cmd_generate(int argc, char **argv);
int tl_cmd_serve(int argc, char **argv);
int tl_cmd_info(int argc, char **argv);
int tl_cmd_tokenize(int argc, char **argv);
int tl_cmd_mkmodel(int argc, char **argv);
int tl_cmd_bench(int argc, char **argv);
int tl_cmd_version(int argc, char **argv);
int tl_cmd_devices(int argc, char **argv);

// The default model: $MODEL if set, else ../shared/models/stories260K.gguf relative to the
// current directory or to the executable's checkout, else NULL.
const char *tl_cli_default_model(void);

#endif
