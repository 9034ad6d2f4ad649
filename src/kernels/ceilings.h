/*
 * The machine's ceilings, measured with the kernels' own instruction paths on a thread pool:
 * peak int8 dot-product ops/s (the Q8_0 path: VNNI vpdpbusd on AVX-512, maddubs+madd on AVX2),
 * peak f32 FMA FLOP/s, and streaming read bandwidth from a buffer far beyond the last-level
 * cache. The server divides the work it counts per step by these to report utilization; the
 * kernel benchmark prints them.
 *
 * A multiply-add is 2 ops (int8) or 2 FLOPs (f32), as in the work accounting of src/model.
 * Each probe runs briefly on every thread of the pool at once and keeps the best of a few
 * rounds (other processes can only make a round slower); tl_ceilings_measure takes about half a
 * second. tl_ceilings_get caches the result per machine in a small text file keyed by CPU
 * model, kernel ISA and thread count.
 *
 * Thread model: the probes use the pool (one caller at a time, as every tl_pool_run user); the
 * cache functions are re-entrant (concurrent writers replace the file atomically).
 */
#ifndef TL_KERNELS_CEILINGS_H
#define TL_KERNELS_CEILINGS_H

#include "core/error.h"
#include "core/pool.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tl_ceilings {
    double int8_ops_per_s;       // peak int8 dot-product ops/s over all threads
    double fp32_flops_per_s;     // peak f32 FMA FLOP/s over all threads
    double mem_read_bytes_per_s; // streaming read bandwidth (DRAM) over all threads
    int32_t n_threads;
    char isa[16];  // the kernel variant measured (tl_kernels_isa())
    char cpu[128]; // CPU model name ("unknown" when /proc/cpuinfo does not say)
};

// Peak rates of the active kernel ISA on every thread of pool, best of `rounds` rounds of about
// round_s seconds each.
double tl_ceiling_int8_ops_per_s(struct tl_pool *pool, int rounds, double round_s);
double tl_ceiling_fp32_flops_per_s(struct tl_pool *pool, int rounds, double round_s);
// Streaming read rate over buf (bytes, a multiple of 64) on every thread of pool: best of 5.
double tl_ceiling_read_bytes_per_s(struct tl_pool *pool, const void *buf, size_t bytes);

// Measures all three on pool's threads (about half a second on an idle machine; maps a 128 MiB
// read buffer for the time of the probe). TL_ERR_NOMEM when it cannot.
tl_status tl_ceilings_measure(struct tl_pool *pool, struct tl_ceilings *out) TL_WARN_UNUSED;

// The directory of the per-machine cache: $XDG_CACHE_HOME/tokenloom, else
// $HOME/.cache/tokenloom. False when neither variable is set (or the path is too long).
bool tl_ceilings_cache_dir(char *buf, size_t cap);
// The cache file for this machine's key (CPU model, kernel ISA, thread count) in dir.
bool tl_ceilings_cache_path(const char *dir, const struct tl_ceilings *key, char *buf, size_t cap);
// Reads a cache file; true when it exists, parses, matches key's cpu/isa/n_threads and holds
// three finite positive rates (then *out is filled). Anything else (missing, corrupt, another
// machine's) is false: the caller measures again.
bool tl_ceilings_cache_read(const char *path, const struct tl_ceilings *key,
                            struct tl_ceilings *out);
// Writes c to path (creating its directory and the parent, as a temp file renamed in place).
tl_status tl_ceilings_cache_write(const char *path, const struct tl_ceilings *c) TL_WARN_UNUSED;

// Fills key's identity (cpu, isa, n_threads; rates zero) for this process.
void tl_ceilings_key(int32_t n_threads, struct tl_ceilings *key);

// The ceilings for n_threads threads: from the cache in cache_dir (NULL = tl_ceilings_cache_dir)
// when it holds this machine's, else measured on a new pool of n_threads and written back
// (a cache that cannot be written only costs a measurement next time). *from_cache (optional)
// says which. TL_ERR_NOMEM when measuring is impossible.
tl_status tl_ceilings_get(int32_t n_threads, const char *cache_dir, struct tl_ceilings *out,
                          bool *from_cache) TL_WARN_UNUSED;

// ---- per-ISA probes (src/kernels/x86/*_ceilings.c): each runs `iters` iterations of a loop of
// independent multiply-adds and returns a value the caller must consume. *ops_per_iter is the
// int8 ops or f32 FLOPs one iteration does.
double tl__avx2_probe_fp32(int64_t iters, double *ops_per_iter);
double tl__avx2_probe_int8(int64_t iters, double *ops_per_iter);
double tl__avx512_probe_fp32(int64_t iters, double *ops_per_iter);
double tl__avx512_probe_int8(int64_t iters, double *ops_per_iter);

#endif
