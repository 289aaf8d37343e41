/* Transposed 3-D convolution (the adjoint of op_conv3d, PyTorch's
 * ConvTranspose3d), NCDHW, fp32: a 3D U-Net's up-convolutions. oneDNN's
 * deconvolution on its own layouts where it has a fast kernel for a
 * piece, else GEMMs with vol2col's columns on the input grid. */
#ifndef OP_CONV_TRANSPOSE3D_H
#define OP_CONV_TRANSPOSE3D_H

#include <stddef.h>

/* Shape of one transposed 3-D convolution. Zero stride or dilation is
 * taken as 1. out_pad must be smaller than the stride or the dilation
 * along its axis (PyTorch's rule). */
typedef struct op_conv_transpose3d_params {
    int n;                               /* batch size */
    int c;                               /* input channels */
    int d, h, w;                         /* input depth, height and width */
    int k;                               /* output channels */
    int kd, kh, kw;                      /* kernel depth, height and width */
    int stride_d, stride_h, stride_w;    /* stride (0 means 1) */
    int pad_d, pad_h, pad_w;             /* padding removed from each side, >= 0 */
    int dil_d, dil_h, dil_w;             /* dilation (0 means 1) */
    int out_pad_d, out_pad_h, out_pad_w; /* extra planes, rows, columns at the far end */
} op_conv_transpose3d_params;

/* Output sizes: (d - 1)*stride - 2*pad + dil*(kd - 1) + out_pad + 1 along
 * each axis. */
int op_conv_transpose3d_out_d(const op_conv_transpose3d_params *p);
int op_conv_transpose3d_out_h(const op_conv_transpose3d_params *p);
int op_conv_transpose3d_out_w(const op_conv_transpose3d_params *p);

/* Bytes of workspace for forward and backward on kernels_threads()
 * threads, as op_conv3d_workspace: oneDNN's buffers where it runs a
 * piece, vol2col's per thread. */
size_t op_conv_transpose3d_workspace(const op_conv_transpose3d_params *p);

/* in is (n, c, d, h, w), weight is (c, k, kd, kh, kw), bias is (k) or
 * NULL, out is (n, k, od, oh, ow). ws is ws_bytes of scratch, aligned for
 * float. */
void op_conv_transpose3d_forward(float *out, const float *in, const float *weight,
                                 const float *bias, const op_conv_transpose3d_params *p, void *ws,
                                 size_t ws_bytes);

/* dout is (n, k, od, oh, ow), in is (n, c, d, h, w), weight is (c, k, kd,
 * kh, kw). Overwrites dweight (c, k, kd, kh, kw), dbias (k, may be NULL)
 * and din (n, c, d, h, w, may be NULL). */
void op_conv_transpose3d_backward(float *din, float *dweight, float *dbias, const float *dout,
                                  const float *in, const float *weight,
                                  const op_conv_transpose3d_params *p, void *ws, size_t ws_bytes);

/* Mixed precision, as op_conv3d's: the three pieces on oneDNN's
 * deconvolution in bfloat16 (float32 accumulation; the weight gradient as
 * oneDNN writes it) where the processor computes in bfloat16, the layer
 * has 8 outputs or more and oneDNN has a fast bfloat16 kernel for every
 * piece; else the float32 functions' bits. Return 1 when they ran in
 * bfloat16. The workspace is the larger of the two paths'. */
size_t op_conv_transpose3d_bf16_workspace(const op_conv_transpose3d_params *p);
int op_conv_transpose3d_forward_bf16(float *out, const float *in, const float *weight,
                                     const float *bias, const op_conv_transpose3d_params *p,
                                     void *ws, size_t ws_bytes);
int op_conv_transpose3d_backward_bf16(float *din, float *dweight, float *dbias, const float *dout,
                                      const float *in, const float *weight,
                                      const op_conv_transpose3d_params *p, void *ws,
                                      size_t ws_bytes);

/* Which pieces run on oneDNN (OP_CONV3D_*_ONEDNN bits of op_conv3d.h), in
 * float32 or (bf16) mixed precision, in words into out (len bytes,
 * terminated). */
unsigned op_conv_transpose3d_describe(const op_conv_transpose3d_params *p, int bf16, char *out,
                                      size_t len);

/* Direct loops with the same contracts, each value gathered whole in
 * double: the reference for tests. */
void op_conv_transpose3d_forward_ref(float *out, const float *in, const float *weight,
                                     const float *bias, const op_conv_transpose3d_params *p);
void op_conv_transpose3d_backward_ref(float *din, float *dweight, float *dbias, const float *dout,
                                      const float *in, const float *weight,
                                      const op_conv_transpose3d_params *p);

#endif
