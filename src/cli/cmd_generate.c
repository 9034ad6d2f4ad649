/* tokenloom generate: placeholder until the command lands. */
#include "cli/cli.h"

#include <stdio.h>

int tl_cmd_generate(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "tokenloom generate: not built yet\n");
    return 1;
}
