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

/* Where a stripe of a partitioned image sits: it holds input rows
 * [row0, row0 + h) of an image of full_h rows, resized to full_oh, and
 * makes output rows [row0 * full_oh / full_h, ... + oh). */
typedef struct op_upsample_frame {
    int row0, full_h, full_oh;
} op_upsample_frame;

/* Bilinear resizing of one stripe: output rows sample the whole image's
 * coordinates (the very arithmetic of the unpartitioned call, so the
 * stripes together make its output bit for bit), reading the input rows
 * just above and below the stripe from top and bottom ((n, c, w) each; NULL
 * at the image's edges, where no output reads them). */
void op_upsample_bilinear_forward_rows(float *out, const float *in, int n, int c, int h, int w,
                                       int oh, int ow, const op_upsample_frame *f,
                                       const float *top, const float *bottom);

/* Its adjoint: overwrites din (n, c, h, w), and dtop and dbottom (n, c, w;
 * NULL at the edges) with the gradients of the neighbours' rows, which
 * the stripes above and below add to theirs. */
void op_upsample_bilinear_backward_rows(float *din, const float *dout, int n, int c, int h, int w,
                                        int oh, int ow, const op_upsample_frame *f, float *dtop,
                                        float *dbottom);

#endif
