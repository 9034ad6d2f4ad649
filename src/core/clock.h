/* Monotonic and wall clocks in microseconds. Thread-safe. */
#ifndef TL_CORE_CLOCK_H
#define TL_CORE_CLOCK_H

#include <stdint.h>

int64_t tl_time_us(void);      // monotonic, arbitrary origin
int64_t tl_wall_time_us(void); // since the Unix epoch

#endif
