/* Nearest and bilinear resizing of NCHW planes to any output size, with
 * PyTorch's semantics (interpolate with align_corners=False). */
#ifndef OP_UPSAMPLE_H
#define OP_UPSAMPLE_H

/* in is (n, c, h, w), out is (n, c, oh, ow). Output pixel y reads input
 * row floor(y * h / oh) (exact integer arithmetic; PyTorch computes the
 * same ratio in float, identical for integer scale factors). */
void op_upsample_nearest_forward(float *out, const float *in, int n, int c,
                                 int h, int w, int oh, int ow);

/* dout is (n, c, oh, ow). Overwrites din (n, c, h, w) with the sum of the
 * gradients of the outputs that read each input pixel. */
void op_upsample_nearest_backward(float *din, const float *dout, int n,
                                  int c, int h, int w, int oh, int ow);

/* in is (n, c, h, w), out is (n, c, oh, ow). Output pixel y samples input
 * coordinate max(0, (y + 0.5) * h / oh - 0.5) (align_corners=False),
 * interpolating between the two nearest rows, the last row repeated at the
 * border; the same along x. */
void op_upsample_bilinear_forward(float *out, const float *in, int n, int c,
                                  int h, int w, int oh, int ow);

/* dout is (n, c, oh, ow). Overwrites din (n, c, h, w). */
void op_upsample_bilinear_backward(float *din, const float *dout, int n,
                                   int c, int h, int w, int oh, int ow);

#endif
