/* 2-D max and average pooling, NCHW, fp32, floor output size (no
 * ceil_mode). */
#ifndef OP_POOL_H
#define OP_POOL_H

#include <stdint.h>

/* Shape of one pooling. */
typedef struct op_pool2d_params {
    int n, c;               /* batch size, channels */
    int h, w;               /* input height and width */
    int kh, kw;             /* window height and width, >= 1 */
    int stride_h, stride_w; /* stride (0 means the window size) */
    int pad_h, pad_w;       /* implicit padding on each side, at most half
                               the window (so no window is all padding) */
    int count_include_pad;  /* average pooling only: nonzero divides every
                               window by kh*kw, padding counted as zeros
                               (PyTorch's default); zero divides by the
                               number of input pixels in the window */
} op_pool2d_params;

/* (h + 2*pad - k) / stride + 1 */
int op_pool2d_out_h(const op_pool2d_params *p);
int op_pool2d_out_w(const op_pool2d_params *p);

/* The largest window whose argmax fits a byte. */
#define OP_MAXPOOL_MAX_WINDOW 256

/* in is (n, c, h, w), out and argmax are (n, c, oh, ow); kh * kw is at most
 * OP_MAXPOOL_MAX_WINDOW. argmax receives, for every output, where in its
 * window the maximum is, dy * kw + dx from the window's corner (the first
 * one on ties; padding never wins): one byte where an input index took
 * four. */
void op_maxpool2d_forward(float *out, uint8_t *argmax, const float *in,
                          const op_pool2d_params *p);

/* dout and argmax are (n, c, oh, ow). Overwrites din (n, c, h, w). */
void op_maxpool2d_backward(float *din, const float *dout,
                           const uint8_t *argmax, const op_pool2d_params *p);

/* in is (n, c, h, w), out is (n, c, oh, ow). */
void op_avgpool2d_forward(float *out, const float *in,
                          const op_pool2d_params *p);

/* dout is (n, c, oh, ow). Overwrites din (n, c, h, w). */
void op_avgpool2d_backward(float *din, const float *dout,
                           const op_pool2d_params *p);

#endif
