/* tokenloom info: placeholder until the command lands. */
#include "cli/cli.h"

#include <stdio.h>

int tl_cmd_info(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "tokenloom info: not built yet\n");
    return 1;
}
