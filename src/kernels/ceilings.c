/*
 * The machine's ceilings (see ceilings.h): the probes fanned out over a pool, the streaming
 * read of a buffer beyond the last-level cache, and the per-machine cache file.
 *
 * Why here: the server (utilization gauges) and bench_kernels (the ceilings it prints before its
 * tables) must agree on what "peak" means, so both call these functions. The int8 and f32 probes
 * run the instruction the active kernel variant (tl_kernels_isa()) multiplies with, on every
 * thread at once: a core's two hyperthreads share its ports, so per-thread numbers would not add
 * up.
 *
 * The cache file (one per CPU model + ISA + thread count) is plain text, "key=value" lines
 * under a version line; anything that does not parse, or names another machine, is ignored and
 * the ceilings are measured again (and the file rewritten, via a temp file and rename, so that
 * concurrent servers never read half a file).
 *
 * Thread model: one caller at a time per pool (tl_pool_run's rule); the cache functions touch
 * only their arguments and the file system.
 */
#include "kernels/ceilings.h"

#include "core/clock.h"
#include "core/hash.h"
#include "core/log.h"
#include "kernels/kernels.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define CACHE_VERSION_LINE "tokenloom ceilings v1"

// ---- compute probes ---------------------------------------------------------------------------

// The scalar variant's probes: eight independent chains of plain C multiply-adds.
static double scalar_probe_fp32(int64_t iters, double *ops_per_iter)
{
    float a[8];
    for (int i = 0; i < 8; i++)
        a[i] = (float)i;
    for (int64_t it = 0; it < iters; it++)
        for (int i = 0; i < 8; i++)
            a[i] = a[i] * 0.999999f + 1e-7f;
    *ops_per_iter = 8 * 2;
    return a[0] + a[7];
}

static double scalar_probe_int8(int64_t iters, double *ops_per_iter)
{
    int32_t a[8];
    for (int i = 0; i < 8; i++)
        a[i] = i;
    for (int64_t it = 0; it < iters; it++)
        for (int i = 0; i < 8; i++)
            a[i] += (int8_t)(a[i] & 0x7f) * (int8_t)-2;
    *ops_per_iter = 8 * 2;
    return (double)a[0] + a[7];
}

typedef double (*probe_fn)(int64_t iters, double *ops_per_iter);

static probe_fn pick_probe(bool int8)
{
#if defined(__x86_64__)
    const char *isa = tl_kernels_isa();
    if (!strcmp(isa, "avx512")) return int8 ? tl__avx512_probe_int8 : tl__avx512_probe_fp32;
    if (!strcmp(isa, "avx2")) return int8 ? tl__avx2_probe_int8 : tl__avx2_probe_fp32;
#endif
    return int8 ? scalar_probe_int8 : scalar_probe_fp32;
}

struct probe_job {
    probe_fn fn;
    int64_t iters;
    double ops_per_iter;
    double sink[64 * 8]; // one cache line per thread
};

static void probe_worker(void *arg, int ith, int nth)
{
    struct probe_job *j = arg;
    double per = 0;
    double v = j->fn(j->iters, &per);
    if (ith < 64) j->sink[ith * 8] = v;
    if (ith == 0) j->ops_per_iter = per;
}

static double peak_rate(struct tl_pool *pool, probe_fn fn, int rounds, double round_s)
{
    struct probe_job j = {.fn = fn, .iters = 1 << 12};
    // Calibrate: grow the iteration count until a round takes a measurable time.
    double dt = 0;
    for (;;) {
        int64_t t0 = tl_time_us();
        tl_pool_run(pool, probe_worker, &j);
        dt = (double)(tl_time_us() - t0) * 1e-6;
        if (dt >= round_s / 8 || j.iters >= ((int64_t)1 << 40)) break;
        j.iters *= 4;
    }
    if (dt > 0 && dt < round_s) j.iters = (int64_t)((double)j.iters * round_s / dt) + 1;
    double best = 0;
    for (int r = 0; r < rounds; r++) {
        int64_t t0 = tl_time_us();
        tl_pool_run(pool, probe_worker, &j);
        double s = (double)(tl_time_us() - t0) * 1e-6;
        double rate = s > 0 ? (double)j.iters * j.ops_per_iter * tl_pool_size(pool) / s : 0;
        if (rate > best) best = rate;
    }
    return best;
}

double tl_ceiling_int8_ops_per_s(struct tl_pool *pool, int rounds, double round_s)
{
    return peak_rate(pool, pick_probe(true), rounds, round_s);
}

double tl_ceiling_fp32_flops_per_s(struct tl_pool *pool, int rounds, double round_s)
{
    return peak_rate(pool, pick_probe(false), rounds, round_s);
}

// ---- memory probe -----------------------------------------------------------------------------

struct read_job {
    const uint64_t *p;
    int64_t n; // uint64_t words
    uint64_t sink[64 * 8];
};

static void read_worker(void *arg, int ith, int nth)
{
    struct read_job *j = arg;
    int64_t b, e;
    tl_pool_range(j->n, 1024, ith, nth, &b, &e);
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (int64_t i = b; i + 4 <= e; i += 4) {
        a0 += j->p[i];
        a1 += j->p[i + 1];
        a2 += j->p[i + 2];
        a3 += j->p[i + 3];
    }
    if (ith < 64) j->sink[ith * 8] = a0 + a1 + a2 + a3;
}

double tl_ceiling_read_bytes_per_s(struct tl_pool *pool, const void *buf, size_t bytes)
{
    struct read_job j = {.p = buf, .n = (int64_t)(bytes / 8)};
    tl_pool_run(pool, read_worker, &j); // warm the TLB and the threads
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        int64_t t0 = tl_time_us();
        tl_pool_run(pool, read_worker, &j);
        double s = (double)(tl_time_us() - t0) * 1e-6;
        double rate = s > 0 ? (double)bytes / s : 0;
        if (rate > best) best = rate;
    }
    return best;
}

// The read buffer: 128 MiB, 4x the 32 MiB L3 one core reaches on today's server CPUs (their
// reported L3 is often the whole socket's, which one CCD/CCX cannot use); a streaming read of
// more than the cache misses on every line. Mapped with transparent huge pages where offered:
// touching it is most of the probe's cost, and in a VM a 4 KiB page fault is dear.
#define READ_BUFFER_BYTES ((size_t)128 << 20)

static void *map_read_buffer(void)
{
    void *p =
        mmap(NULL, READ_BUFFER_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, READ_BUFFER_BYTES, MADV_HUGEPAGE);
#endif
    memset(p, 1, READ_BUFFER_BYTES);
    return p;
}

// ---- identity ---------------------------------------------------------------------------------

// Copies the CPU model name, keeping printable characters other than '=' (the cache's separator).
static void read_cpu_name(char *out, size_t cap)
{
    snprintf(out, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "model name", 10)) continue;
        const char *v = strchr(line, ':');
        if (!v) break;
        v++;
        while (*v == ' ' || *v == '\t')
            v++;
        size_t n = 0;
        for (; *v && *v != '\n' && n + 1 < cap; v++)
            out[n++] = (*v >= 0x20 && *v < 0x7f && *v != '=') ? *v : '_';
        out[n] = 0;
        if (n == 0) snprintf(out, cap, "unknown");
        break;
    }
    fclose(f);
}

void tl_ceilings_key(int32_t n_threads, struct tl_ceilings *key)
{
    memset(key, 0, sizeof(*key));
    key->n_threads = n_threads;
    snprintf(key->isa, sizeof(key->isa), "%s", tl_kernels_isa());
    read_cpu_name(key->cpu, sizeof(key->cpu));
}

tl_status tl_ceilings_measure(struct tl_pool *pool, struct tl_ceilings *out)
{
    void *buf = map_read_buffer();
    if (!buf)
        return tl__errorf(TL_ERR_NOMEM, "ceilings: cannot map a %zu MiB read buffer",
                          READ_BUFFER_BYTES >> 20);
    tl_ceilings_key(tl_pool_size(pool), out);
    out->mem_read_bytes_per_s = tl_ceiling_read_bytes_per_s(pool, buf, READ_BUFFER_BYTES);
    munmap(buf, READ_BUFFER_BYTES);
    out->fp32_flops_per_s = tl_ceiling_fp32_flops_per_s(pool, 3, 0.04);
    out->int8_ops_per_s = tl_ceiling_int8_ops_per_s(pool, 3, 0.04);
    return TL_OK;
}

// ---- the cache --------------------------------------------------------------------------------

bool tl_ceilings_cache_dir(char *buf, size_t cap)
{
    const char *xdg = getenv("XDG_CACHE_HOME");
    int n;
    if (xdg && *xdg)
        n = snprintf(buf, cap, "%s/tokenloom", xdg);
    else {
        const char *home = getenv("HOME");
        if (!home || !*home) return false;
        n = snprintf(buf, cap, "%s/.cache/tokenloom", home);
    }
    return n > 0 && (size_t)n < cap;
}

bool tl_ceilings_cache_path(const char *dir, const struct tl_ceilings *key, char *buf, size_t cap)
{
    char id[256];
    int k = snprintf(id, sizeof(id), "%s|%s|%d", key->cpu, key->isa, key->n_threads);
    uint64_t h = tl_hash_bytes(id, k > 0 ? (size_t)k : 0);
    int n = snprintf(buf, cap, "%s/ceilings-%016llx.txt", dir, (unsigned long long)h);
    return n > 0 && (size_t)n < cap;
}

static bool parse_rate(const char *v, double *out)
{
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(d) || d <= 0) return false;
    *out = d;
    return true;
}

bool tl_ceilings_cache_read(const char *path, const struct tl_ceilings *key,
                            struct tl_ceilings *out)
{
    FILE *f = fopen(path, "r");
    if (!f) return false;
    struct tl_ceilings c = {0};
    char line[256];
    unsigned seen = 0;
    bool ok = fgets(line, sizeof(line), f) && !strcmp(line, CACHE_VERSION_LINE "\n");
    while (ok && fgets(line, sizeof(line), f)) {
        size_t n = strlen(line);
        if (n == 0 || line[n - 1] != '\n') { // too long or cut short
            ok = false;
            break;
        }
        line[n - 1] = 0;
        char *eq = strchr(line, '=');
        if (!eq) {
            ok = false;
            break;
        }
        *eq = 0;
        const char *k = line, *v = eq + 1;
        unsigned bit = 0;
        if (!strcmp(k, "cpu")) {
            bit = 1;
            ok = strlen(v) < sizeof(c.cpu);
            if (ok) snprintf(c.cpu, sizeof(c.cpu), "%s", v);
        } else if (!strcmp(k, "isa")) {
            bit = 2;
            ok = strlen(v) < sizeof(c.isa);
            if (ok) snprintf(c.isa, sizeof(c.isa), "%s", v);
        } else if (!strcmp(k, "threads")) {
            bit = 4;
            char *end;
            long t = strtol(v, &end, 10);
            ok = end != v && !*end && t > 0 && t <= 4096;
            c.n_threads = (int32_t)t;
        } else if (!strcmp(k, "int8_ops_per_s")) {
            bit = 8;
            ok = parse_rate(v, &c.int8_ops_per_s);
        } else if (!strcmp(k, "fp32_flops_per_s")) {
            bit = 16;
            ok = parse_rate(v, &c.fp32_flops_per_s);
        } else if (!strcmp(k, "mem_read_bytes_per_s")) {
            bit = 32;
            ok = parse_rate(v, &c.mem_read_bytes_per_s);
        } else {
            ok = false;
        }
        if (seen & bit) ok = false; // a key twice
        seen |= bit;
    }
    fclose(f);
    if (!ok || seen != 63) return false;
    if (strcmp(c.cpu, key->cpu) || strcmp(c.isa, key->isa) || c.n_threads != key->n_threads)
        return false;
    *out = c;
    return true;
}

static bool make_dir(const char *path)
{
    return mkdir(path, 0755) == 0 || errno == EEXIST;
}

tl_status tl_ceilings_cache_write(const char *path, const struct tl_ceilings *c)
{
    // Create the directory and any missing parent (~/.cache may not exist yet), as mkdir -p.
    char dir[4096];
    if (snprintf(dir, sizeof(dir), "%s", path) >= (int)sizeof(dir))
        return tl__errorf(TL_ERR_INVALID_ARG, "ceilings cache path too long");
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = 0;
        for (char *p = dir + 1; *p; p++) {
            if (*p != '/') continue;
            *p = 0;
            make_dir(dir);
            *p = '/';
        }
        if (!make_dir(dir))
            return tl__errorf(TL_ERR_IO, "ceilings cache: cannot create %s: %s", dir,
                              strerror(errno));
    }
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f)
        return tl__errorf(TL_ERR_IO, "ceilings cache: cannot write %s: %s", tmp, strerror(errno));
    fprintf(f,
            CACHE_VERSION_LINE "\ncpu=%s\nisa=%s\nthreads=%d\nint8_ops_per_s=%.17g\n"
                               "fp32_flops_per_s=%.17g\nmem_read_bytes_per_s=%.17g\n",
            c->cpu, c->isa, c->n_threads, c->int8_ops_per_s, c->fp32_flops_per_s,
            c->mem_read_bytes_per_s);
    bool ok = !ferror(f);
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        int err = errno;
        unlink(tmp);
        return tl__errorf(TL_ERR_IO, "ceilings cache: cannot write %s: %s", path, strerror(err));
    }
    return TL_OK;
}

tl_status tl_ceilings_get(int32_t n_threads, const char *cache_dir, struct tl_ceilings *out,
                          bool *from_cache)
{
    struct tl_pool *pool = tl_pool_create(n_threads);
    if (!pool) return TL_ERR_NOMEM;
    struct tl_ceilings key;
    tl_ceilings_key(tl_pool_size(pool), &key);
    char dir[4096], path[4200];
    bool have_path = (cache_dir ? snprintf(dir, sizeof(dir), "%s", cache_dir) < (int)sizeof(dir)
                                : tl_ceilings_cache_dir(dir, sizeof(dir))) &&
                     tl_ceilings_cache_path(dir, &key, path, sizeof(path));
    if (from_cache) *from_cache = false;
    if (have_path && tl_ceilings_cache_read(path, &key, out)) {
        tl_pool_destroy(pool);
        if (from_cache) *from_cache = true;
        return TL_OK;
    }
    tl_status rc = tl_ceilings_measure(pool, out);
    tl_pool_destroy(pool);
    if (rc) return rc;
    if (have_path && tl_ceilings_cache_write(path, out) != TL_OK) TL_LOGW("%s", tl_last_error());
    return TL_OK;
}
