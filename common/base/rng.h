/* Counter-based random numbers: a value is a pure function of (seed, stream,
 * index), so weights and data do not depend on how work is split over
 * processes or threads. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* A 64-bit hash of three words (splitmix64 finaliser chain). */
uint64_t rng_hash(uint64_t seed, uint64_t stream, uint64_t index);
/* Uniform in [0, 1). */
double rng_uniform(uint64_t seed, uint64_t stream, uint64_t index);
/* Standard normal (Box-Muller on the uniforms 2 index and 2 index + 1 of the
 * stream), the same bits on every machine (no libm). */
double rng_normal(uint64_t seed, uint64_t stream, uint64_t index);
/* out[i] = rng_normal(seed, stream, first + i) for i < n, vectorized. */
void rng_normal_n(uint64_t seed, uint64_t stream, uint64_t first, size_t n, double *out);
/* Standard normals in float32 for data, cheaper than rng_normal: normals
 * 2p and 2p + 1 are the cosine and sine parts of one Box-Muller draw on
 * hash p of the stream (24-bit uniforms: |x| <= 5.77), in float32
 * polynomials, the same bits on every machine. Not rng_normal's values. */
float rng_normal_f32(uint64_t seed, uint64_t stream, uint64_t index);
/* out[i] = rng_normal_f32(seed, stream, first + i) for i < n, vectorized. */
void rng_normal_f32_n(uint64_t seed, uint64_t stream, uint64_t first, size_t n, float *out);
