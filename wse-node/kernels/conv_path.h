/* Internal: runs one piece of a convolution (forward, weight gradient, data
 * gradient) on im2col + GEMM or on oneDNN, whichever was chosen for its
 * shape (kernels_internal.h has the choice's controls). */
#ifndef KERN_CONV_PATH_H
#define KERN_CONV_PATH_H

#include <stddef.h>

/* The tensors of one operator call; unused ones are NULL. */
typedef struct kern__conv_bufs {
    const float *x;     /* input (n, c, h, w) */
    const float *w;     /* weight, (k, c, r, s) or (c, k, r, s) transposed */
    const float *b;     /* bias (k) or NULL */
    float *y;           /* forward output (n, k, oh, ow) */
    const float *dy;    /* gradient of the output */
    float *dx;          /* gradient of the input, or NULL */
    float *dw;          /* gradient of the weight */
    float *db;          /* gradient of the bias, or NULL */
    void *ws;           /* the caller's workspace */
    size_t ws_bytes;    /* its size */
} kern__conv_bufs;

/* The im2col implementation of a piece: p is the op's params struct. */
typedef void (*kern__conv_im2col_fn)(const void *p, const kern__conv_bufs *b);

/* Runs the piece `job` (KERN__DNNL_* bits; oneDNN runs the weight gradient
 * before the data gradient) of the convolution p (transposed: an
 * op_conv_transpose2d_params) on the chosen path; im2col runs it the
 * classic way. The first call of a shape on auto creates its oneDNN
 * primitives and times both paths on the call's own buffers (every piece
 * overwrites its outputs, so running it again is harmless), leaving the
 * winner's results. Later calls allocate nothing and log nothing. */
void kern__conv_run(int transposed, const void *p, unsigned job,
                    const kern__conv_bufs *b, kern__conv_im2col_fn im2col);

#endif
