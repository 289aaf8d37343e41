/* Internal: lowering of a convolution window to columns (im2col) and its
 * adjoint (col2im), over a band of output rows so that the workspace stays
 * cache-sized. Shared by conv2d and transposed conv2d. */
#ifndef KERN_IM2COL_H
#define KERN_IM2COL_H

#include <stddef.h>

/* Geometry of one image and the grid of windows laid over it. */
typedef struct kern__cols {
    int c;          /* channels of the image */
    int h, w;       /* image height and width */
    int r, s;       /* window height and width */
    int sh, sw;     /* strides, >= 1 */
    int ph, pw;     /* zero padding before row 0 / column 0, >= 0 */
    int dh, dw;     /* dilations, >= 1 */
    int oh, ow;     /* grid of window positions (columns), >= 1 */
} kern__cols;

/* True when the columns are the image itself: 1x1 window, stride 1, no
 * padding (then oh == h, ow == w and no lowering is needed). */
int kern__cols_direct(const kern__cols *g);

/* Number of grid rows per band so that a band of columns, c*r*s rows by
 * rows*ow, is about KERN_COL_BUDGET bytes. At least 1, at most oh. Depends
 * on the geometry only, so workspaces can be sized ahead of the call. */
int kern__cols_band(const kern__cols *g);

/* col is (c*r*s, (oh1 - oh0) * ow): writes the windows of grid rows
 * [oh0, oh1) of img (c, h, w), zero where they fall on padding. */
void kern__im2col(float *col, const float *img, const kern__cols *g,
                  int oh0, int oh1);

/* Adjoint of kern__im2col: adds every column entry of grid rows [oh0, oh1)
 * into the image pixel it was read from; padding entries are dropped. */
void kern__col2im_add(float *img, const float *col, const kern__cols *g,
                      int oh0, int oh1);

/* Bytes of the column band buffer, 0 for a direct geometry. */
size_t kern__cols_workspace(const kern__cols *g);

#endif
