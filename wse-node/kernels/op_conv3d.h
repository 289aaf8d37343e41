/* 3-D convolution (cross-correlation, as PyTorch's Conv3d), NCDHW, fp32:
 * the volumes of a 3D U-Net. Runs on oneDNN's own layouts where oneDNN has
 * a fast kernel for the shape, else lowered to GEMMs through vol2col over
 * bands of output rows, as op_conv2d does with im2col. */
#ifndef OP_CONV3D_H
#define OP_CONV3D_H

#include <stddef.h>

/* Shape of one 3-D convolution. Zero stride or dilation is taken as 1. */
typedef struct op_conv3d_params {
    int n;                            /* batch size */
    int c;                            /* input channels */
    int d, h, w;                      /* input depth, height and width */
    int k;                            /* output channels */
    int kd, kh, kw;                   /* kernel depth, height and width */
    int stride_d, stride_h, stride_w; /* stride (0 means 1) */
    int pad_d, pad_h, pad_w;          /* zero padding on each side, >= 0 */
    int dil_d, dil_h, dil_w;          /* dilation (0 means 1) */
} op_conv3d_params;

/* Output depth, height and width: (d + 2*pad - dil*(kd-1) - 1) / stride
 * + 1 along each axis. A result below 1 means the shape is invalid. */
int op_conv3d_out_d(const op_conv3d_params *p);
int op_conv3d_out_h(const op_conv3d_params *p);
int op_conv3d_out_w(const op_conv3d_params *p);

/* Bytes of workspace op_conv3d_forward and op_conv3d_backward need for
 * shape p on kernels_threads() threads: the operands in oneDNN's layouts
 * with its scratchpad where oneDNN runs a piece (the size oneDNN reports,
 * its primitives made and kept on first asking), and vol2col's band of
 * columns and weight-gradient partial sums per thread. Depends only on p
 * and the thread count (and the build); the same buffer serves forward
 * and backward. A workspace too small for oneDNN's buffers runs the
 * piece on vol2col, on as many threads as it has room for (one thread's
 * share at the least). */
size_t op_conv3d_workspace(const op_conv3d_params *p);

/* in is (n, c, d, h, w), weight is (k, c, kd, kh, kw), bias is (k) or
 * NULL, out is (n, k, od, oh, ow). ws is ws_bytes of scratch, aligned for
 * float. No allocation (oneDNN's primitives are made at a shape's first
 * call, or at op_conv3d_workspace). */
void op_conv3d_forward(float *out, const float *in, const float *weight, const float *bias,
                       const op_conv3d_params *p, void *ws, size_t ws_bytes);

/* dout is (n, k, od, oh, ow), in is (n, c, d, h, w), weight is (k, c, kd,
 * kh, kw). Overwrites dweight (k, c, kd, kh, kw, may be NULL), dbias (k,
 * may be NULL) and din (n, c, d, h, w, may be NULL). The weight gradient
 * (with the bias's) and the input gradient may be asked for in two calls
 * (in NULL in the second: it reads only dout and weight), with the same
 * bits as in one. ws as for the forward pass. */
void op_conv3d_backward(float *din, float *dweight, float *dbias, const float *dout,
                        const float *in, const float *weight, const op_conv3d_params *p,
                        void *ws, size_t ws_bytes);

/* Mixed precision, as op_conv2d_forward_bf16: in, weight and dout rounded
 * to bfloat16 (to nearest even), their products summed in float32 by
 * oneDNN on AMX or AVX512_BF16. out and din are float32; the weight
 * gradient is float32 where oneDNN has a fast kernel writing it so, else
 * rounded to bfloat16 as oneDNN makes it and widened; the bias and its
 * gradient stay float32. ws holds op_conv3d_bf16_workspace(p) bytes.
 * Computes in float32 instead (the functions above, on the same ws) where
 * the processor or the build has no bfloat16 path
 * (kernels_bf16_compute), the layer has fewer than 8 outputs (as the 2-D
 * rule, convplan_conv2d_blocked_bf16), oneDNN has no fast bfloat16 kernel
 * for one of the shape's three pieces, or ws is too small. Returns 1 when
 * it computed in bfloat16, 0 in float32. */
size_t op_conv3d_bf16_workspace(const op_conv3d_params *p);
int op_conv3d_forward_bf16(float *out, const float *in, const float *weight, const float *bias,
                           const op_conv3d_params *p, void *ws, size_t ws_bytes);
int op_conv3d_backward_bf16(float *din, float *dweight, float *dbias, const float *dout,
                            const float *in, const float *weight, const op_conv3d_params *p,
                            void *ws, size_t ws_bytes);

/* How each piece of shape p runs (bf16: in mixed precision), for logs,
 * tests and benchmarks: into out (len bytes, always terminated) the path
 * of the forward pass, the weight gradient and the data gradient
 * (oneDNN's implementation and layouts, or vol2col). Returns the
 * OP_CONV3D_*_ONEDNN bits of the pieces that run on oneDNN. */
#define OP_CONV3D_FWD_ONEDNN 1u
#define OP_CONV3D_BWD_W_ONEDNN 2u
#define OP_CONV3D_BWD_D_ONEDNN 4u
unsigned op_conv3d_describe(const op_conv3d_params *p, int bf16, char *out, size_t len);

/* Direct loops with the same contracts (no workspace), sums in double:
 * the reference the tests hold both paths to. */
void op_conv3d_forward_ref(float *out, const float *in, const float *weight, const float *bias,
                           const op_conv3d_params *p);
void op_conv3d_backward_ref(float *din, float *dweight, float *dbias, const float *dout,
                            const float *in, const float *weight, const op_conv3d_params *p);

#endif
