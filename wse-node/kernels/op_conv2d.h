/* 2-D convolution (cross-correlation, as in PyTorch), NCHW, fp32, lowered
 * to cblas_sgemm through im2col over bands of output rows. */
#ifndef OP_CONV2D_H
#define OP_CONV2D_H

#include <stddef.h>

/* Shape of one convolution. Zero stride or dilation is taken as 1. */
typedef struct op_conv2d_params {
    int n;                  /* batch size */
    int c;                  /* input channels */
    int h, w;               /* input height and width */
    int k;                  /* output channels */
    int r, s;               /* kernel height and width */
    int stride_h, stride_w; /* stride (0 means 1) */
    int pad_h, pad_w;       /* zero padding on each side, >= 0 */
    int dil_h, dil_w;       /* dilation (0 means 1) */
} op_conv2d_params;

/* Output height and width: (h + 2*pad - dil*(r-1) - 1) / stride + 1.
 * A result below 1 means the shape is invalid. */
int op_conv2d_out_h(const op_conv2d_params *p);
int op_conv2d_out_w(const op_conv2d_params *p);

/* Bytes of workspace that op_conv2d_forward and op_conv2d_backward need
 * for shape p on kernels_threads() threads: one band of im2col columns and
 * the weight-gradient partial sums per thread. Depends only on p and the
 * thread count, so a planner can carve workspaces ahead of time; the same
 * buffer serves forward and backward. A workspace sized for fewer threads
 * still works: the op then uses as many threads as it has room for. */
size_t op_conv2d_workspace(const op_conv2d_params *p);

/* in is (n, c, h, w), weight is (k, c, r, s), bias is (k) or NULL,
 * out is (n, k, oh, ow). ws is ws_bytes of scratch, aligned for float, at
 * least op_conv2d_workspace(p) as computed with one thread. No
 * allocation. */
void op_conv2d_forward(float *out, const float *in, const float *weight,
                       const float *bias, const op_conv2d_params *p,
                       void *ws, size_t ws_bytes);

/* dout is (n, k, oh, ow), in is (n, c, h, w), weight is (k, c, r, s).
 * Overwrites dweight (k, c, r, s), dbias (k, may be NULL) and din
 * (n, c, h, w, may be NULL). ws as for the forward pass. */
void op_conv2d_backward(float *din, float *dweight, float *dbias,
                        const float *dout, const float *in,
                        const float *weight, const op_conv2d_params *p,
                        void *ws, size_t ws_bytes);

/* Direct loops with the same contracts (no workspace), the reference that
 * tests hold the GEMM path to. */
void op_conv2d_forward_ref(float *out, const float *in, const float *weight,
                           const float *bias, const op_conv2d_params *p);
void op_conv2d_backward_ref(float *din, float *dweight, float *dbias,
                            const float *dout, const float *in,
                            const float *weight, const op_conv2d_params *p);

#endif
