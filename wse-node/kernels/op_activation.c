/* Elementwise activations and their derivatives. */
#include "op_activation.h"

#include <math.h>

void op_relu_forward(float *out, const float *in, size_t count)
{
    /* in, out (count) */
    for (size_t i = 0; i < count; i++)
        out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

void op_relu_backward(float *din, const float *dout, const float *x,
                      size_t count)
{
    /* dout, x, din (count) */
    for (size_t i = 0; i < count; i++)
        din[i] = x[i] > 0.0f ? dout[i] : 0.0f;
}

void op_leaky_relu_forward(float *out, const float *in, size_t count,
                           float slope)
{
    /* in, out (count) */
    for (size_t i = 0; i < count; i++)
        out[i] = in[i] > 0.0f ? in[i] : slope * in[i];
}

void op_leaky_relu_backward(float *din, const float *dout, const float *x,
                            size_t count, float slope)
{
    /* dout, x, din (count) */
    for (size_t i = 0; i < count; i++)
        din[i] = x[i] > 0.0f ? dout[i] : slope * dout[i];
}

void op_gelu_forward(float *out, const float *in, size_t count)
{
    /* in, out (count) */
    for (size_t i = 0; i < count; i++)
        out[i] = 0.5f * in[i] * (1.0f + erff(in[i] * (float)M_SQRT1_2));
}

void op_gelu_backward(float *din, const float *dout, const float *x,
                      size_t count)
{
    /* dout, x, din (count) */
    const float inv_sqrt_2pi = 0.3989422804014327f;
    for (size_t i = 0; i < count; i++) {
        float v = x[i];
        float cdf = 0.5f * (1.0f + erff(v * (float)M_SQRT1_2));
        float pdf = inv_sqrt_2pi * expf(-0.5f * v * v);
        din[i] = dout[i] * (cdf + v * pdf);
    }
}

void op_sigmoid_forward(float *out, const float *in, size_t count)
{
    /* in, out (count); exp of a non-positive number only, no overflow */
    for (size_t i = 0; i < count; i++) {
        float v = in[i];
        if (v >= 0.0f) {
            out[i] = 1.0f / (1.0f + expf(-v));
        } else {
            float e = expf(v);
            out[i] = e / (1.0f + e);
        }
    }
}

void op_sigmoid_backward(float *din, const float *dout, const float *y,
                         size_t count)
{
    /* dout, y, din (count) */
    for (size_t i = 0; i < count; i++)
        din[i] = dout[i] * y[i] * (1.0f - y[i]);
}

void op_tanh_forward(float *out, const float *in, size_t count)
{
    /* in, out (count) */
    for (size_t i = 0; i < count; i++)
        out[i] = tanhf(in[i]);
}

void op_tanh_backward(float *din, const float *dout, const float *y,
                      size_t count)
{
    /* dout, y, din (count) */
    for (size_t i = 0; i < count; i++)
        din[i] = dout[i] * (1.0f - y[i] * y[i]);
}
