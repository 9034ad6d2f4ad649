/* tokenloom tokenize: placeholder until the command lands. */
#include "cli/cli.h"

#include <stdio.h>

int tl_cmd_tokenize(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "tokenloom tokenize: not built yet\n");
    return 1;
}
