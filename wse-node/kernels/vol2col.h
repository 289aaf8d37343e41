/* Internal: 3-D convolutions lowered to GEMMs (vol2col + kern_sgemm) over
 * bands of output rows, the path of the 3-D convolutions where oneDNN has
 * no fast kernel (or the build no oneDNN). Shared by conv3d and transposed
 * conv3d, which is the same three pieces with the roles swapped. */
#ifndef KERN_VOL2COL_H
#define KERN_VOL2COL_H

#include <stddef.h>

/* A volume and the grid of windows laid over it. */
typedef struct kern__vol {
    int c;          /* channels of the volume */
    int d, h, w;    /* volume depth, height, width */
    int kd, kh, kw; /* window */
    int sd, sh, sw; /* strides, >= 1 */
    int pd, ph, pw; /* zero padding before index 0 along each axis, >= 0 */
    int dd, dh, dw; /* dilations, >= 1 */
    int od, oh, ow; /* grid of window positions, >= 1 each */
} kern__vol;

/* Floats of workspace one thread takes for a GEMM side of k rows (the
 * forward pass's output channels): a band of columns, and the weight
 * gradient's partial sums (k x c*kd*kh*kw) with its bias sums (k). */
size_t kern__vol_per_thread(const kern__vol *g, int k);

/* y (n, k, od, oh, ow) = w (k, c*kd*kh*kw) times the columns of x (n, c,
 * d, h, w), plus bias (k) unless NULL. Over bands of grid rows, split
 * over the operators' threads the workspace has room for (ws of ws_bytes
 * holds kern__vol_per_thread floats a thread, at least one). */
void kern__vol_forward(float *y, const float *x, const float *w, const float *bias,
                       const kern__vol *g, int n, int k, float *ws, size_t ws_bytes);

/* dw (k, c*kd*kh*kw) = the sum over images and bands of dy (n, k, grid)
 * times the columns of x (n, c, volume), and db (k, or NULL) the sums of
 * dy: per-thread partials summed in thread order. */
void kern__vol_wgrad(float *dw, float *db, const float *dy, const float *x, const kern__vol *g,
                     int n, int k, float *ws, size_t ws_bytes);

/* dx (n, c, volume), overwritten, = the columns w^T dy put back where they
 * were read from (col2vol). The threads split the (image, channel) pairs,
 * so no two write one value. */
void kern__vol_dgrad(float *dx, const float *dy, const float *w, const kern__vol *g, int n, int k,
                     float *ws, size_t ws_bytes);

#endif
