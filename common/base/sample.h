/* How a batch's samples are laid out on the wire (Batch, PlanInput):
 * n samples of inputs, then n samples of labels, each in one of two
 * encodings. Inputs are float32, or the stored 8-bit pixels ("unorm8": the
 * value v stands for v / 255), which the wse-node turns into floats, so the
 * wire and the buffers carry a quarter of the bytes. Labels are int32, or
 * one byte each when every class is below 256. The workers' readers and the
 * wse-node's executor both convert through sample_unorm8, so a sample is
 * the same float32 whichever way it travelled. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The float an 8-bit input stands for. */
static inline float sample_unorm8(uint8_t v)
{
    return (float)v / 255.0f;
}

/* Bytes of one input value and of one label in an encoding. */
static inline size_t sample_input_size(bool unorm8)
{
    return unorm8 ? 1 : sizeof(float);
}

static inline size_t sample_label_size(bool labels_u8)
{
    return labels_u8 ? 1 : sizeof(int32_t);
}

/* Bytes of a batch of n samples on the wire; 0 when it does not fit in 64
 * bits. */
static inline uint64_t sample_batch_bytes(uint64_t n, uint64_t sample_elems, uint64_t label_elems,
                                          bool unorm8, bool labels_u8)
{
    uint64_t per = 0;
    if (__builtin_mul_overflow(sample_elems, (uint64_t)sample_input_size(unorm8), &per))
        return 0;
    uint64_t lab, bytes;
    if (__builtin_mul_overflow(label_elems, (uint64_t)sample_label_size(labels_u8), &lab) ||
        __builtin_add_overflow(per, lab, &per) || __builtin_mul_overflow(per, n, &bytes))
        return 0;
    return bytes;
}

/* The label at i of labels in an encoding. */
static inline int32_t sample_label(const void *labels, bool labels_u8, size_t i)
{
    return labels_u8 ? (int32_t)((const uint8_t *)labels)[i] : ((const int32_t *)labels)[i];
}

/* How an 8-bit input becomes the model's float (the Model Zoo's
 * normalize_data_method): v / 255 (zero_one), v / 127.5 - 1
 * (zero_centered), or v (none). */
typedef enum {
    SAMPLE_ZERO_ONE,
    SAMPLE_ZERO_CENTERED,
    SAMPLE_RAW,
} sample_scale;

static inline float sample_unorm8_as(uint8_t v, sample_scale s)
{
    return s == SAMPLE_ZERO_CENTERED ? (float)v / 127.5f - 1.0f
           : s == SAMPLE_RAW         ? (float)v
                                     : sample_unorm8(v);
}

/* Turns count 8-bit inputs into floats, scaled as s says. */
static inline void sample_unorm8_to_float_as(float *dst, const uint8_t *src, size_t count,
                                             sample_scale s)
{
    if (s == SAMPLE_ZERO_ONE) {
        for (size_t i = 0; i < count; i++)
            dst[i] = sample_unorm8(src[i]);
        return;
    }
    for (size_t i = 0; i < count; i++)
        dst[i] = sample_unorm8_as(src[i], s);
}

/* Turns count 8-bit inputs into floats. */
static inline void sample_unorm8_to_float(float *dst, const uint8_t *src, size_t count)
{
    for (size_t i = 0; i < count; i++)
        dst[i] = sample_unorm8(src[i]);
}
