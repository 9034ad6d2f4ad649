/*
 * The sampler's vocabulary-wide passes (sampler_passes.c): SSE2 with scalar twins, identical
 * results. Private to src/engine.
 */
#ifndef TL_ENGINE_SAMPLER_PASSES_H
#define TL_ENGINE_SAMPLER_PASSES_H

#include <stdint.h>

// v[i] = logits[i], NaN as -inf; returns the max (-inf when empty).
float tl__copy_sanitize_max(const float *logits, float *v, int32_t n);

// v[i] *= f (f > 0, v NaN-free); returns the new max.
float tl__scale_max(float *v, float f, int32_t n);

// The max of v (NaN-free), -inf when empty.
float tl__max_of(const float *v, int32_t n);

// The sum of p[0..n) in double: eight lanes (lane j takes p[8k + j]), the tail first, then the
// lanes in order.
double tl__sum8(const float *p, int32_t n);

// prob[i] = e^(v[i] - m) for i < n (v[i] <= m; -inf gives exactly 0), with the kernels'
// vectorized exp (libm's scalar expf over a 32000-token vocabulary was ~40% of sampling);
// returns the sum (tl__sum8).
double tl__exp_sum(const float *v, float m, float *prob, int32_t n);

// The first id whose v equals m (m the max of v, finite), or -1.
int32_t tl__first_equal(const float *v, float m, int32_t n);

#endif
