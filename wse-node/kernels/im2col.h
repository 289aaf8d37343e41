/* Internal: lowering of a convolution window to columns (im2col) and its
 * adjoint (col2im), over a band of output rows so that the workspace stays
 * cache-sized. Shared by conv2d and transposed conv2d. */
#ifndef KERN_IM2COL_H
#define KERN_IM2COL_H

#include <stddef.h>

#include "convplan.h" /* convplan_cols: the geometry, its bands and workspace */

/* col is (c*r*s, (oh1 - oh0) * ow): writes the windows of grid rows
 * [oh0, oh1) of img (c, h, w), zero where they fall on padding. */
void kern__im2col(float *col, const float *img, const convplan_cols *g,
                  int oh0, int oh1);

/* Rows just beyond an image's top and bottom edges: a stripe of a
 * partitioned image reads its neighbours' rows there instead of zero
 * padding. top is (c, rows_top, w) and holds rows -rows_top .. -1, bottom
 * (c, rows_bottom, w) rows h .. h + rows_bottom - 1; NULL for none. */
typedef struct kern__rows {
    const float *top, *bottom;
    int rows_top, rows_bottom;
} kern__rows;

/* kern__im2col reading the rows of `halo` (NULL: none) where the windows
 * pass the image's top and bottom edges. Grid rows may be negative or
 * beyond the grid (their windows then lie on the halo and the padding). */
void kern__im2col_rows(float *col, const float *img, const kern__rows *halo,
                       const convplan_cols *g, int oh0, int oh1);

/* Adjoint of kern__im2col: adds every column entry of grid rows [oh0, oh1)
 * into the image pixel it was read from; padding entries are dropped. */
void kern__col2im_add(float *img, const float *col, const convplan_cols *g,
                      int oh0, int oh1);

/* The share [*u0, *u1) of `units` work units of thread tid of nt. */
void kern__share(int *u0, int *u1, int units, int tid, int nt);

/* A thread's partials of the weight and bias gradients of an im2col path:
 * dw (nw floats) zeroed, db (k) the sums of dout (n, k, ohw) over the
 * thread's share of the n*k planes, accumulated in double per plane. */
void kern__wgrad_begin(float *dw, size_t nw, float *db, const float *dout, int n, int k,
                       size_t ohw, int tid, int nt);

/* The weight and bias gradients from the partials of `used` threads,
 * summed in thread order (the bits do not depend on timing): thread t's
 * dw at dw0 + t * stride, its db convplan_round16(nw) floats after it.
 * dbias may be NULL. */
void kern__wgrad_sum(float *dweight, float *dbias, const float *dw0, size_t stride, int used,
                     size_t nw, int k);

#endif
