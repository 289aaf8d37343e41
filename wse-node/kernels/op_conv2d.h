/* 2-D convolution (cross-correlation, as in PyTorch), NCHW, fp32, lowered
 * to cblas_sgemm through im2col over bands of output rows, or run by oneDNN
 * where that is faster for the shape and fits the same workspace. */
#ifndef OP_CONV2D_H
#define OP_CONV2D_H

#include <stddef.h>

#include "convplan.h" /* the shape, its output size and its plan */

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
