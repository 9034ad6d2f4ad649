/*
 * The process_* metrics every Prometheus client library exports, under the same names and
 * units, read from /proc at scrape time: process_resident_memory_bytes,
 * process_virtual_memory_bytes, process_cpu_seconds_total, process_open_fds, process_max_fds,
 * process_start_time_seconds. A value /proc cannot give (another OS, a restricted /proc) is
 * left out rather than reported as 0.
 *
 * Thread model: called on the event-loop thread at scrape time; reads only files of /proc and
 * getrlimit.
 */
#include "front/metrics.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static void gauge(struct tl_sb *o, const char *name, const char *type, const char *help, double v)
{
    tl_sb_printf(o, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

// Boot time (Unix seconds) from /proc/stat's btime line; 0 when unknown.
static long long boot_time_s(void)
{
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return 0;
    char line[256];
    long long bt = 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "btime %lld", &bt) == 1) break;
    fclose(f);
    return bt;
}

void tl_metrics_render_process(struct tl_sb *o)
{
    long tick = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    // Fields after the command name (which may hold spaces and parentheses): from the last ')'.
    const char *p = strrchr(buf, ')');
    unsigned long long utime, stime, start, vsize;
    long long rss;
    if (p && tick > 0 && page > 0 &&
        sscanf(p + 2,
               "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d %*d "
               "%llu %llu %lld",
               &utime, &stime, &start, &vsize, &rss) == 5) {
        gauge(o, "process_cpu_seconds_total", "counter",
              "Total user and system CPU time spent in seconds.",
              (double)(utime + stime) / (double)tick);
        gauge(o, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.",
              (double)vsize);
        gauge(o, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
              (double)rss * (double)page);
        long long bt = boot_time_s();
        if (bt > 0)
            gauge(o, "process_start_time_seconds", "gauge",
                  "Start time of the process since unix epoch in seconds.",
                  (double)bt + (double)start / (double)tick);
    }
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        long n_fd = 0;
        struct dirent *e;
        while ((e = readdir(d)))
            if (e->d_name[0] != '.') n_fd++;
        closedir(d);
        gauge(o, "process_open_fds", "gauge", "Number of open file descriptors.",
              (double)(n_fd - 1)); // the directory's own descriptor
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        gauge(o, "process_max_fds", "gauge", "Maximum number of open file descriptors.",
              (double)rl.rlim_cur);
}
