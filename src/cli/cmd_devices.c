/*
 * tokenloom devices: lists the compute devices a model can be put on with --device: the CPU,
 * then every Vulkan device the loader sees (gpu/vk_devices.c). Exits 0 with at least the CPU
 * line; a missing Vulkan build, loader or driver is one line on stderr and still exit 0, since
 * the CPU remains usable. Single-threaded; owns nothing.
 */
#include "cli/cli.h"

#include "core/error.h"
#include "gpu/gpu.h"
#include "kernels/kernels.h"

#include <stdio.h>
#include <string.h>

int tl_cmd_devices(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: tokenloom devices\n  lists the devices --device accepts: cpu and "
               "vulkan:N\n");
        return 0;
    }
    if (argc > 1) {
        fprintf(stderr, "tokenloom devices: unexpected argument '%s'\n", argv[1]);
        return 2;
    }
    printf("cpu  kernels=%s\n", tl_kernels_isa());
    if (tl_gpu_devices_print(stdout)) fprintf(stderr, "tokenloom devices: %s\n", tl_last_error());
    return 0;
}
