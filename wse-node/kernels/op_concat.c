/* Channel concatenation: one contiguous copy per (sample, input), the
 * copies shared out over the kernels' threads (a U-Net's concatenations
 * at 512x512 move 67 MB each way a step: one core's memcpy left the
 * other idle). */
#include "op_concat.h"

#include <stddef.h>
#include <string.h>

#include "kernels.h"

/* The copies of one call: copy u is input u % count of sample u / count. */
typedef struct concat_job {
    float *out;                /* forward: the concatenation; NULL backward */
    const float *const *ins;
    float *const *dins;        /* backward: the slices, NULL ones skipped */
    const float *dout;
    const int *channels;
    int count, total, hw;
} concat_job;

/* Floats before input j's channels in a sample, and its channels' floats. */
static size_t concat_off(const concat_job *c, int j, size_t *len)
{
    size_t off = 0;
    for (int q = 0; q < j; q++)
        off += (size_t)c->channels[q] * c->hw;
    *len = (size_t)c->channels[j] * c->hw;
    return off;
}

/* Copies [lo, hi): input to its slice of the concatenation (forward), or
 * the slice back to a gradient that is not NULL (backward). */
static void concat_copies(void *ctx, size_t lo, size_t hi)
{
    const concat_job *c = ctx;
    for (size_t u = lo; u < hi; u++) {
        size_t i = u / (size_t)c->count, len;
        int j = (int)(u % (size_t)c->count);
        size_t at = i * (size_t)c->total * c->hw + concat_off(c, j, &len);
        if (c->out) { /* (an input the memory plan made in its slice is there) */
            if (c->out + at != c->ins[j] + i * len)
                memcpy(c->out + at, c->ins[j] + i * len, sizeof(float) * len);
        }
        else if (c->dins[j] && c->dins[j] + i * len != c->dout + at) /* (or it is the slice) */
            memcpy(c->dins[j] + i * len, c->dout + at, sizeof(float) * len);
    }
}

/* Copies per thread at the least: about 64 Ki floats of them. */
static size_t concat_grain(const concat_job *c)
{
    size_t per = (size_t)c->total * c->hw / (size_t)(c->count > 0 ? c->count : 1);
    return per >= 65536 ? 1 : 65536 / (per ? per : 1);
}

void op_concat_forward(float *out, const float *const *ins,
                       const int *channels, int count, int n, int hw)
{
    /* ins[j] (n, channels[j], hw); out (n, sum channels, hw) */
    concat_job c = {.out = out, .ins = ins, .channels = channels, .count = count, .hw = hw};
    for (int j = 0; j < count; j++)
        c.total += channels[j];
    kernels_for((size_t)n * (size_t)count, concat_grain(&c), concat_copies, &c);
}

void op_concat_backward(float *const *dins, const float *dout,
                        const int *channels, int count, int n, int hw)
{
    /* dout (n, sum channels, hw); dins[j] (n, channels[j], hw) */
    concat_job c = {.dins = dins, .dout = dout, .channels = channels, .count = count, .hw = hw};
    for (int j = 0; j < count; j++)
        c.total += channels[j];
    kernels_for((size_t)n * (size_t)count, concat_grain(&c), concat_copies, &c);
}
