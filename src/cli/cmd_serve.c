/* tokenloom serve: placeholder until the command lands. */
#include "cli/cli.h"

#include <stdio.h>

int tl_cmd_serve(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "tokenloom serve: not built yet\n");
    return 1;
}
