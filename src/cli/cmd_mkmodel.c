/* tokenloom mkmodel: placeholder until the command lands. */
#include "cli/cli.h"

#include <stdio.h>

int tl_cmd_mkmodel(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "tokenloom mkmodel: not built yet\n");
    return 1;
}
