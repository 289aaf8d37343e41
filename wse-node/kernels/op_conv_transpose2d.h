/* Transposed 2-D convolution (the adjoint of op_conv2d, PyTorch's
 * ConvTranspose2d), NCHW, fp32: U-Net upsampling. GEMM plus col2im. */
#ifndef OP_CONV_TRANSPOSE2D_H
#define OP_CONV_TRANSPOSE2D_H

#include <stddef.h>

/* Shape of one transposed convolution. Zero stride or dilation is taken as
 * 1. out_pad must be smaller than the stride or the dilation. */
typedef struct op_conv_transpose2d_params {
    int n;                      /* batch size */
    int c;                      /* input channels */
    int h, w;                   /* input height and width */
    int k;                      /* output channels */
    int r, s;                   /* kernel height and width */
    int stride_h, stride_w;     /* stride (0 means 1) */
    int pad_h, pad_w;           /* padding removed from each side, >= 0 */
    int dil_h, dil_w;           /* dilation (0 means 1) */
    int out_pad_h, out_pad_w;   /* extra rows/columns at the bottom/right */
} op_conv_transpose2d_params;

/* Output height and width:
 * (h - 1)*stride - 2*pad + dil*(r - 1) + out_pad + 1. */
int op_conv_transpose2d_out_h(const op_conv_transpose2d_params *p);
int op_conv_transpose2d_out_w(const op_conv_transpose2d_params *p);

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
