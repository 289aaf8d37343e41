/* bfloat16: the upper 16 bits of a float32 (sign, 8 exponent bits, 7
 * mantissa bits). Rounding to nearest, ties to even; a NaN stays a (quiet)
 * NaN, infinities stay infinities, a finite value too large rounds to
 * infinity as IEEE rounding does. Widening is exact. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* out[i] = in[i] rounded to bfloat16. */
void bf16_pack(uint16_t *out, const float *in, size_t count);
/* out[i] = in[i] widened. out may be the same memory as in, with in at the
 * upper half of out's bytes ((uint8_t *)out + 2 * count): the widening
 * runs front to back without overwriting what it has yet to read. */
void bf16_unpack(float *out, const uint16_t *in, size_t count);
/* acc[i] += in[i] widened, in float32. */
void bf16_add(float *acc, const uint16_t *in, size_t count);
/* Rounds count floats at buf to bfloat16, packed at the start of buf. */
void bf16_pack_in_place(void *buf, size_t count);
