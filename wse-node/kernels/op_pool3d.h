/* 3-D max and average pooling, NCDHW, fp32, floor output size (no
 * ceil_mode), as PyTorch's MaxPool3d and AvgPool3d. */
#ifndef OP_POOL3D_H
#define OP_POOL3D_H

#include <stdint.h>

#include "op_pool.h" /* OP_MAXPOOL_MAX_WINDOW */

/* Shape of one pooling. */
typedef struct op_pool3d_params {
    int n, c;                         /* batch size, channels */
    int d, h, w;                      /* input depth, height and width */
    int kd, kh, kw;                   /* window, >= 1 each */
    int stride_d, stride_h, stride_w; /* stride (0 means the window size) */
    int pad_d, pad_h, pad_w;          /* implicit padding on each side, at most
                                         half the window (so no window is all
                                         padding) */
    int count_include_pad;            /* average pooling only: nonzero divides
                                         every window by kd*kh*kw, padding
                                         counted as zeros (PyTorch's default);
                                         zero divides by the number of input
                                         voxels in the window */
} op_pool3d_params;

/* (size + 2*pad - window) / stride + 1 along each axis */
int op_pool3d_out_d(const op_pool3d_params *p);
int op_pool3d_out_h(const op_pool3d_params *p);
int op_pool3d_out_w(const op_pool3d_params *p);

/* in is (n, c, d, h, w), out and argmax are (n, c, od, oh, ow); kd * kh *
 * kw is at most OP_MAXPOOL_MAX_WINDOW. argmax receives, for every output,
 * where in its window the maximum is, (dz * kh + dy) * kw + dx from the
 * window's corner: the first one in (z, y, x) order on ties, a NaN
 * winning as in PyTorch; padding never wins. */
void op_maxpool3d_forward(float *out, uint8_t *argmax, const float *in,
                          const op_pool3d_params *p);

/* dout and argmax are (n, c, od, oh, ow). Overwrites din (n, c, d, h, w):
 * each output's gradient goes to its argmax (summed where windows
 * overlap), as PyTorch routes it. */
void op_maxpool3d_backward(float *din, const float *dout, const uint8_t *argmax,
                           const op_pool3d_params *p);

/* in is (n, c, d, h, w), out is (n, c, od, oh, ow). */
void op_avgpool3d_forward(float *out, const float *in, const op_pool3d_params *p);

/* dout is (n, c, od, oh, ow). Overwrites din (n, c, d, h, w). */
void op_avgpool3d_backward(float *din, const float *dout, const op_pool3d_params *p);

#endif
