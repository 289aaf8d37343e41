/* Elementwise addition (residual and skip connections) and flatten. */
#ifndef OP_ELEMENTWISE_H
#define OP_ELEMENTWISE_H

#include <stddef.h>

/* a, b and out are (count); out may alias a or b. */
void op_add_forward(float *out, const float *a, const float *b, size_t count);

/* acc += a over count elements (gradients added into their buffer). */
void op_add_into(float *acc, const float *a, size_t count);

/* dout is (count). Writes da and db (each may be NULL, may alias dout):
 * both receive dout unchanged. */
void op_add_backward(float *da, float *db, const float *dout, size_t count);

/* Flatten (n, c, h, w) to (n, c*h*w) is the identity on NCHW memory: the
 * layer reuses its input buffer and these copy only when out and in are
 * different buffers. in and out are (count). */
void op_flatten_forward(float *out, const float *in, size_t count);
void op_flatten_backward(float *din, const float *dout, size_t count);

#endif
