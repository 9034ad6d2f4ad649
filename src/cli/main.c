/* tokenloom command line: dispatches to the subcommands of cli.h (tokenloom --version is
 * tokenloom version). Single-threaded; owns nothing. */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} commands[] = {
    {"serve", tl_cmd_serve, "run the OpenAI-compatible HTTP server"},
    {"generate", tl_cmd_generate, "generate text from a prompt, or a JSONL batch job"},
    {"info", tl_cmd_info, "print a model's architecture, hyperparameters and tensors"},
    {"tokenize", tl_cmd_tokenize, "print the token ids of text read from stdin"},
    {"embed", tl_cmd_embed, "print the embedding of text read from stdin (bert models)"},
    {"mkmodel", tl_cmd_mkmodel, "write a random-weight Llama-shaped GGUF model"},
    {"bench", tl_cmd_bench, "load-test a running server"},
    {"devices", tl_cmd_devices, "list the CPU and the Vulkan devices --device can pick"},
    {"version", tl_cmd_version, "print the version, git revision, build flags and kernel ISA"},
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tokenloom <command> [options]   (tokenloom <command> --help)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V"))
        return tl_cmd_version(argc - 1, argv + 1);
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "tokenloom: unknown command '%s'; see tokenloom --help\n", argv[1]);
    return 2;
}
