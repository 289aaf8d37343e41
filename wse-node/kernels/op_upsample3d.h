/* Nearest and trilinear resizing of NCDHW volumes, with PyTorch's
 * semantics (interpolate with mode "nearest" or "trilinear",
 * align_corners=False): the 3D U-Net's upsampling by an integer scale per
 * axis, od = d * scale_d and so on. Any output size is taken; with an
 * integer scale the source coordinates are PyTorch's exactly (its
 * 1 / scale_factor is the in / out ratio used here). */
#ifndef OP_UPSAMPLE3D_H
#define OP_UPSAMPLE3D_H

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

#endif
