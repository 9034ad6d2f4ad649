/*
 * The machine the engine runs on, as the fronts report it (/metrics' build_info and machine_*
 * gauges, the utilization gauges, /stats): the kernel ISA chosen at run time and the measured
 * ceilings. The caller finds them (cmd_serve.c, with tl_kernels_isa and kernels/ceilings.h)
 * and hands them in through the server's config (the ISA as a value, the ceilings from a
 * callback the engine thread runs once the model is loaded), so that no front calls into the
 * kernels: the fronts sit beside the engine, and the kernels are the engine's business.
 *
 * Plain data; no functions, no shared state.
 */
#ifndef TL_FRONT_MACHINE_H
#define TL_FRONT_MACHINE_H

#include <stdbool.h>
#include <stdint.h>

// The same facts as kernels/ceilings.h's struct tl_ceilings, field for field.
struct tl_machine_ceilings {
    double int8_ops_per_s;       // peak int8 dot-product ops/s over all threads
    double fp32_flops_per_s;     // peak f32 FMA FLOP/s over all threads
    double mem_read_bytes_per_s; // streaming read bandwidth (DRAM) over all threads
    int32_t n_threads;
    char isa[16];  // the kernel variant measured
    char cpu[128]; // CPU model name
};

struct tl_machine {
    char kernels_isa[16];                // the kernel variant the engine runs ("avx512", "avx2",
                                         // "ref"); "" when the caller did not say ("unknown")
    bool have_ceilings;                  // false with --no-ceilings, a test backend, or when
                                         // measuring failed: utilization is then not reported
    struct tl_machine_ceilings ceilings; // valid when have_ceilings
};

#endif
