/* Nearest and trilinear resizing of NCDHW volumes, with PyTorch's
 * semantics (interpolate with mode "nearest" or "trilinear",
 * align_corners=False): the 3D U-Net's upsampling by an integer scale per
 * axis, od = d * scale_d and so on. Any output size is taken; with an
 * integer scale the source coordinates are PyTorch's exactly (its
 * 1 / scale_factor is the in / out ratio used here). */
#ifndef OP_UPSAMPLE3D_H
#define OP_UPSAMPLE3D_H

#include "op_upsample.h"

/* in is (n, c, d, h, w), out is (n, c, od, oh, ow). Output voxel z reads
 * input plane floor(z * d / od) (exact integer arithmetic), the same
 * along y and x. */
void op_upsample3d_nearest_forward(float *out, const float *in, int n, int c, int d, int h, int w,
                                   int od, int oh, int ow);

/* dout is (n, c, od, oh, ow). Overwrites din (n, c, d, h, w) with the sum
 * of the gradients of the outputs that read each input voxel. */
void op_upsample3d_nearest_backward(float *din, const float *dout, int n, int c, int d, int h,
                                    int w, int od, int oh, int ow);

/* in is (n, c, d, h, w), out is (n, c, od, oh, ow). Output voxel z
 * samples input coordinate max(0, (z + 0.5) * d / od - 0.5), between the
 * two nearest planes (the last repeated at the border), and likewise along
 * y and x: the product of three linear interpolations. */
void op_upsample3d_trilinear_forward(float *out, const float *in, int n, int c, int d, int h,
                                     int w, int od, int oh, int ow);

/* dout is (n, c, od, oh, ow). Overwrites din (n, c, d, h, w): each output's
 * gradient spread over the eight voxels it was interpolated from, by the
 * same weights. */
void op_upsample3d_trilinear_backward(float *din, const float *dout, int n, int c, int d, int h,
                                      int w, int od, int oh, int ow);

/* Trilinear resizing of one slab of a volume (spatial partitions by
 * depth): the frame places its planes in the whole volume's (row0: its
 * first input plane; full_h, full_oh: the whole volume's input and output
 * planes), so output planes sample the whole volume's coordinates and the
 * slabs together make the unpartitioned output bit for bit; the planes
 * just above and below the slab are top and bottom ((n, c, h, w) each;
 * NULL at the volume's edges, where no output reads them). */
void op_upsample3d_trilinear_forward_slab(float *out, const float *in, int n, int c, int d,
                                          int h, int w, int od, int oh, int ow,
                                          const op_upsample_frame *f, const float *top,
                                          const float *bottom);

/* Its adjoint: overwrites din (n, c, d, h, w), and dtop and dbottom
 * ((n, c, h, w) each; NULL at the edges) with the gradients of the
 * neighbours' planes, which the slabs above and below add to theirs. */
void op_upsample3d_trilinear_backward_slab(float *din, const float *dout, int n, int c, int d,
                                           int h, int w, int od, int oh, int ow,
                                           const op_upsample_frame *f, float *dtop,
                                           float *dbottom);

#endif
