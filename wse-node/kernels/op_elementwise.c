/* Elementwise addition and flatten. */
#include "op_elementwise.h"

#include <string.h>

void op_add_forward(float *out, const float *a, const float *b, size_t count)
{
    /* a, b, out (count) */
    for (size_t i = 0; i < count; i++)
        out[i] = a[i] + b[i];
}

void op_add_backward(float *da, float *db, const float *dout, size_t count)
{
    /* dout, da, db (count) */
    if (da && da != dout)
        memcpy(da, dout, sizeof(float) * count);
    if (db && db != dout)
        memcpy(db, dout, sizeof(float) * count);
}

void op_flatten_forward(float *out, const float *in, size_t count)
{
    /* in (n, c, h, w) = out (n, c*h*w), count elements */
    if (out != in)
        memcpy(out, in, sizeof(float) * count);
}

void op_flatten_backward(float *din, const float *dout, size_t count)
{
    /* dout (n, c*h*w) = din (n, c, h, w), count elements */
    if (din != dout)
        memcpy(din, dout, sizeof(float) * count);
}
