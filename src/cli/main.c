/* tokenloom command line: dispatches to the subcommands. */
#include <tokenloom.h>

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        printf("usage: tokenloom <command> [options]\n");
        return argc < 2 ? 1 : 0;
    }
    fprintf(stderr, "tokenloom: unknown command '%s'\n", argv[1]);
    return 1;
}
