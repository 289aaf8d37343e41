/* Transposed 2-D convolution (the adjoint of op_conv2d, PyTorch's
 * ConvTranspose2d), NCHW, fp32: U-Net upsampling. GEMM plus col2im, or
 * oneDNN's deconvolution where that is faster and fits the workspace. */
#ifndef OP_CONV_TRANSPOSE2D_H
#define OP_CONV_TRANSPOSE2D_H

#include <stddef.h>

#include "convplan.h" /* the shape, its output size and its plan */

/* Bytes of workspace for forward and backward on kernels_threads()
 * threads: a band of columns and the weight-gradient partial sums per
 * thread. Depends only on p and the thread count; a workspace sized for
 * fewer threads still works, with fewer threads. */
size_t op_conv_transpose2d_workspace(const op_conv_transpose2d_params *p);

/* in is (n, c, h, w), weight is (c, k, r, s), bias is (k) or NULL,
 * out is (n, k, oh, ow). ws is ws_bytes of scratch, aligned for float, at
 * least op_conv_transpose2d_workspace(p) as computed with one thread. */
void op_conv_transpose2d_forward(float *out, const float *in,
                                 const float *weight, const float *bias,
                                 const op_conv_transpose2d_params *p,
                                 void *ws, size_t ws_bytes);

/* dout is (n, k, oh, ow), in is (n, c, h, w), weight is (c, k, r, s).
 * Overwrites dweight (c, k, r, s), dbias (k, may be NULL) and din
 * (n, c, h, w, may be NULL). */
void op_conv_transpose2d_backward(float *din, float *dweight, float *dbias,
                                  const float *dout, const float *in,
                                  const float *weight,
                                  const op_conv_transpose2d_params *p,
                                  void *ws, size_t ws_bytes);

/* Scatter loops with the same contracts, the reference for tests. */
void op_conv_transpose2d_forward_ref(float *out, const float *in,
                                     const float *weight, const float *bias,
                                     const op_conv_transpose2d_params *p);
void op_conv_transpose2d_backward_ref(float *din, float *dweight,
                                      float *dbias, const float *dout,
                                      const float *in, const float *weight,
                                      const op_conv_transpose2d_params *p);

#endif
