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

void op_bf16_pack(uint16_t *out, const float *in, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        uint32_t u;
        memcpy(&u, &in[i], sizeof(u));
        if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it one, quiet */
            out[i] = (uint16_t)((u >> 16) | 0x40);
        else
            out[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
}

void op_bf16_unpack(float *out, const uint16_t *in, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        uint32_t u = (uint32_t)in[i] << 16;
        memcpy(&out[i], &u, sizeof(u));
    }
}
