/* Clocks over clock_gettime. */
#include "core/clock.h"

#include <time.h>

static int64_t read_clock(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t tl_time_us(void)
{
    return read_clock(CLOCK_MONOTONIC);
}

int64_t tl_wall_time_us(void)
{
    return read_clock(CLOCK_REALTIME);
}
