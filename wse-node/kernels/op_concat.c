/* Channel concatenation: one contiguous copy per (sample, input). */
#include "op_concat.h"

#include <stddef.h>
#include <string.h>

void op_concat_forward(float *out, const float *const *ins,
                       const int *channels, int count, int n, int hw)
{
    /* ins[j] (n, channels[j], hw); out (n, sum channels, hw) */
    int total = 0;
    for (int j = 0; j < count; j++)
        total += channels[j];
    for (int i = 0; i < n; i++) {
        float *dst = out + (size_t)i * total * hw;
        for (int j = 0; j < count; j++) {
            size_t len = (size_t)channels[j] * hw;
            memcpy(dst, ins[j] + i * len, sizeof(float) * len);
            dst += len;
        }
    }
}

void op_concat_backward(float *const *dins, const float *dout,
                        const int *channels, int count, int n, int hw)
{
    /* dout (n, sum channels, hw); dins[j] (n, channels[j], hw) */
    int total = 0;
    for (int j = 0; j < count; j++)
        total += channels[j];
    for (int i = 0; i < n; i++) {
        const float *src = dout + (size_t)i * total * hw;
        for (int j = 0; j < count; j++) {
            size_t len = (size_t)channels[j] * hw;
            if (dins[j])
                memcpy(dins[j] + i * len, src, sizeof(float) * len);
            src += len;
        }
    }
}
