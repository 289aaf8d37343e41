/* Elementwise activations. Every array is (count); out may alias in and
 * din may alias dout. Backward passes take the forward input x, except
 * sigmoid and tanh, whose derivative is cheaper from the forward output y. */
#ifndef OP_ACTIVATION_H
#define OP_ACTIVATION_H

#include <stddef.h>

/* y = max(x, 0); dx = dy where x > 0, else 0. */
void op_relu_forward(float *out, const float *in, size_t count);
void op_relu_backward(float *din, const float *dout, const float *x,
                      size_t count);

/* y = x where x > 0, else slope * x. */
void op_leaky_relu_forward(float *out, const float *in, size_t count,
                           float slope);
void op_leaky_relu_backward(float *din, const float *dout, const float *x,
                            size_t count, float slope);

/* Exact GELU with erf (PyTorch's default, approximate='none'):
 * y = x/2 * (1 + erf(x / sqrt 2)),
 * dy/dx = (1 + erf(x / sqrt 2))/2 + x * exp(-x^2/2) / sqrt(2 pi). */
void op_gelu_forward(float *out, const float *in, size_t count);
void op_gelu_backward(float *din, const float *dout, const float *x,
                      size_t count);

/* y = 1 / (1 + exp(-x)); dx = dy * y * (1 - y) from the output y. */
void op_sigmoid_forward(float *out, const float *in, size_t count);
void op_sigmoid_backward(float *din, const float *dout, const float *y,
                         size_t count);

/* y = tanh(x); dx = dy * (1 - y^2) from the output y. */
void op_tanh_forward(float *out, const float *in, size_t count);
void op_tanh_backward(float *din, const float *dout, const float *y,
                      size_t count);

#endif
