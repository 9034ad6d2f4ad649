/*
 * tokenloom version / tokenloom --version: the release, the git revision and build flags the
 * binary was built from (the Makefile passes TL_GIT_REV and TL_BUILD_FLAGS to this file only,
 * and rebuilds it when they change), and the kernel ISA chosen on this CPU at run time.
 * Single-threaded; owns nothing.
 */
#include "cli/cli.h"

#include "kernels/kernels.h"

#include <stdio.h>

#define TL_VERSION "0.1.0"

#ifndef TL_GIT_REV
#define TL_GIT_REV "unknown"
#endif
#ifndef TL_BUILD_FLAGS
#define TL_BUILD_FLAGS "unknown"
#endif

int tl_cmd_version(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("tokenloom %s\n", TL_VERSION);
    printf("git revision: %s\n", TL_GIT_REV);
#if defined(__clang__)
    printf("compiler: clang %s\n", __clang_version__);
#elif defined(__GNUC__)
    printf("compiler: gcc %s\n", __VERSION__);
#endif
    printf("build flags: %s\n", TL_BUILD_FLAGS);
    printf("kernels: %s (chosen at run time for this CPU)\n", tl_kernels_isa());
    return 0;
}
