/* tokenloom bench: placeholder until the command lands. */
#include "cli/cli.h"

#include <stdio.h>

int tl_cmd_bench(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "tokenloom bench: not built yet\n");
    return 1;
}
