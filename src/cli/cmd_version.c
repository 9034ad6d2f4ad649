/*
 * tokenloom version / tokenloom --version: the release, the git revision and build flags the
 * binary was built from (front/build_info.c, which the Makefile stamps), and the kernel ISA
 * chosen on this CPU at run time.
 * Single-threaded; owns nothing.
 */
#include "cli/cli.h"

#include "gpu/gpu.h"
#include "kernels/kernels.h"
#include "front/build_info.h"

#include <stdio.h>

int tl_cmd_version(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("tokenloom %s\n", tl_build_version());
    printf("git revision: %s\n", tl_build_revision());
#if defined(__clang__)
    printf("compiler: clang %s\n", __clang_version__);
#elif defined(__GNUC__)
    printf("compiler: gcc %s\n", __VERSION__);
#endif
    printf("build flags: %s\n", tl_build_flags());
    printf("kernels: %s (chosen at run time for this CPU)\n", tl_kernels_isa());
    size_t n_shaders;
    (void)tl_gpu_shaders(&n_shaders);
    if (tl_gpu_vulkan_compiled())
        printf("vulkan: compiled in (%zu shaders embedded; tokenloom devices lists devices)\n",
               n_shaders);
    else
        printf("vulkan: not compiled in (CPU only)\n");
    return 0;
}
