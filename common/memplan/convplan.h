/* How a convolution is cut into work: the geometry of its lowering to
 * columns (im2col) over bands of rows, and the workspace that takes on a
 * given number of threads. Pure arithmetic on shapes, shared by the
 * kernels that run the convolutions (wse-node/kernels) and the memory plan
 * that sizes their workspace ahead of time (footprint.h), so that the two
 * cannot disagree. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Shape of one convolution. Zero stride or dilation is taken as 1. */
typedef struct op_conv2d_params {
    int n;                  /* batch size */
    int c;                  /* input channels */
    int h, w;               /* input height and width */
    int k;                  /* output channels */
    int r, s;               /* kernel height and width */
    int stride_h, stride_w; /* stride (0 means 1) */
    int pad_h, pad_w;       /* zero padding on each side, >= 0 */
    int dil_h, dil_w;       /* dilation (0 means 1) */
} op_conv2d_params;

/* Shape of one transposed convolution. Zero stride or dilation is taken as
 * 1. out_pad must be smaller than the stride or the dilation. */
typedef struct op_conv_transpose2d_params {
    int n;                      /* batch size */
    int c;                      /* input channels */
    int h, w;                   /* input height and width */
    int k;                      /* output channels */
    int r, s;                   /* kernel height and width */
    int stride_h, stride_w;     /* stride (0 means 1) */
    int pad_h, pad_w;           /* padding removed from each side, >= 0 */
    int dil_h, dil_w;           /* dilation (0 means 1) */
    int out_pad_h, out_pad_w;   /* extra rows/columns at the bottom/right */
} op_conv_transpose2d_params;

/* Output height and width: (h + 2*pad - dil*(r-1) - 1) / stride + 1.
 * A result below 1 means the shape is invalid. */
int op_conv2d_out_h(const op_conv2d_params *p);
int op_conv2d_out_w(const op_conv2d_params *p);

/* Output height and width:
 * (h - 1)*stride - 2*pad + dil*(r - 1) + out_pad + 1. */
int op_conv_transpose2d_out_h(const op_conv_transpose2d_params *p);
int op_conv_transpose2d_out_w(const op_conv_transpose2d_params *p);

/* Geometry of one image and the grid of windows laid over it. */
typedef struct convplan_cols {
    int c;          /* channels of the image */
    int h, w;       /* image height and width */
    int r, s;       /* window height and width */
    int sh, sw;     /* strides, >= 1 */
    int ph, pw;     /* zero padding before row 0 / column 0, >= 0 */
    int dh, dw;     /* dilations, >= 1 */
    int oh, ow;     /* grid of window positions (columns), >= 1 */
} convplan_cols;

/* Bytes one band of columns aims at, per thread: big enough that the GEMM
 * on it runs near its peak, small enough to stay in cache between the
 * lowering and the GEMM (measured with bench_conv). */
#ifndef CONVPLAN_COL_BUDGET
#define CONVPLAN_COL_BUDGET ((size_t)1 << 20)
#endif

/* True when the columns are the image itself: 1x1 window, stride 1, no
 * padding (then oh == h, ow == w and no lowering is needed). */
int convplan_cols_direct(const convplan_cols *g);

/* Number of grid rows per band so that a band of columns, c*r*s rows by
 * rows*ow, is about CONVPLAN_COL_BUDGET bytes. At least 1, at most oh. */
int convplan_cols_band(const convplan_cols *g);

/* Bytes of the column band buffer, 0 for a direct geometry. */
size_t convplan_cols_workspace(const convplan_cols *g);

/* How one convolution is cut into work and where its pieces live in the
 * workspace: [flipped kernel] then, per thread, [column band][dweight
 * partial][dbias partial], each thread's block 64-byte aligned. */
typedef struct convplan_conv2d {
    convplan_cols g;     /* lowering of the input */
    convplan_cols dg;    /* lowering of dout for the data gradient */
    int direct;          /* 1x1 unit stride unpadded: no lowering */
    int as_conv;         /* unit stride: data gradient as a convolution */
    int crs, krs;        /* GEMM reduction lengths */
    int band, nb;        /* output rows per band, bands per image */
    int dband, dnb;      /* the same for the rows of din */
    size_t ohw, hw;      /* output and input plane sizes */
    size_t head;         /* floats of the flipped kernel (0 if unused) */
    size_t col;          /* floats of one column band, max of both */
    size_t per_thread;   /* floats of one thread's block */
} convplan_conv2d;

/* The same for a transposed convolution: per thread, [column band][dweight
 * partial][dbias partial], each block 64-byte aligned. */
typedef struct convplan_convt {
    convplan_cols g;     /* the output as the image lowered over the input */
    int direct;          /* 1x1 unit stride unpadded: no lowering */
    int disjoint;        /* bands of input rows write disjoint output rows */
    int krs;             /* k*r*s */
    int band, nb;        /* input rows per band, bands per image */
    size_t hw, ohw;      /* input and output plane sizes */
    size_t col;          /* floats of one column band */
    size_t per_thread;   /* floats of one thread's block */
} convplan_convt;

/* The plan of a convolution, and of a transposed one. */
convplan_conv2d convplan_conv2d_of(const op_conv2d_params *p);
convplan_convt convplan_convt_of(const op_conv_transpose2d_params *p);

/* Whether the direct 3x3 kernels (the kernels' conv_direct.c, where the
 * processor has AVX-512) take shape p, or (dgrad) its data gradient: 3x3
 * at unit stride and dilation, one pixel of padding, 16 outputs or fewer
 * and 64 inputs or fewer (the data gradient's outputs are p's inputs). */
int convplan_conv2d_direct(const op_conv2d_params *p, int dgrad);
/* Bytes they take of a convolution's workspace where they take its
 * forward pass, else 0; convplan_conv2d_workspace is never less. */
size_t convplan_conv2d_direct_bytes(const op_conv2d_params *p);

/* Bytes of workspace for forward and backward on `threads` threads. */
size_t convplan_conv2d_workspace(const op_conv2d_params *p, int threads);
size_t convplan_convt_workspace(const op_conv_transpose2d_params *p, int threads);

/* Bytes of workspace for a convolution in mixed precision
 * (op_conv2d_forward_bf16 and op_conv2d_backward_bf16): its operands in
 * oneDNN's layouts, the inputs in bfloat16 and the outputs in float32,
 * each counted with its channels padded to a multiple of 16, and room for
 * oneDNN's scratch (the weight gradient's in proportion to the image,
 * the rest within CONVPLAN_BLOCKED_SCRATCH); at least the float32
 * path's workspace, which a call falls back to. An upper bound: the
 * planner has no oneDNN to ask, and the U-Net's layers at 512x512 need
 * 40 to 90% of it. */
size_t convplan_conv2d_bf16_workspace(const op_conv2d_params *p, int threads);

/* Whether a mixed-precision convolution computes in bfloat16 on oneDNN:
 * 8 output channels or more (the U-Net's 1-channel head took 4.9 times
 * im2col's float32 time there, its output padded to 16 channels); strided
 * 1x1 ones too (resnet_small's shortcuts: 0.55 to 0.69 times, their input
 * packed by blk16.c; 1.0 to 1.25 before it). */
int convplan_conv2d_blocked_bf16(const op_conv2d_params *p);

/* Bytes of a mixed-precision convolution's input kept from its forward
 * pass for its weight gradient, as the forward pass rounded it into
 * oneDNN's layout (op_conv2d_forward_bf16_keep), or 0 where it is not
 * kept: a convolution that computes in bfloat16 on an input of whole
 * blocks of 16 channels (aBcd16b, no padding), n * c * h * w bfloat16s. */
size_t convplan_conv2d_bf16_kept_bytes(const op_conv2d_params *p);
#define CONVPLAN_BLOCKED_SCRATCH ((size_t)4 << 20)

/* Whether a float32 convolution runs on oneDNN's own layouts rather than
 * im2col: 16 output channels or more (bench_conv_paths: 0.32 to 0.76 of
 * im2col's time for those of the U-Net and resnet_small; 1.02 and 1.29
 * for the U-Net's 8-channel 512x512 ones, 18.6 for its 1-channel head),
 * and its buffers within CONVPLAN_BLOCKED_F32_MAX (larger images keep
 * im2col's small workspace). A fixed rule, not a timing: two runs, and a
 * run and its recovery, compute alike. */
int convplan_conv2d_blocked_f32(const op_conv2d_params *p);
#define CONVPLAN_BLOCKED_F32_MAX ((size_t)256 << 20)

/* Bytes of workspace for a float32 convolution: im2col's, or the larger
 * one of oneDNN's layouts where convplan_conv2d_blocked_f32 says so. */
size_t convplan_conv2d_f32_workspace(const op_conv2d_params *p, int threads);

/* v rounded up to a multiple of 16 floats (64 bytes). */
size_t convplan_round16(size_t v);

/* Workspace of a bfloat16 GEMM of C (m x n) over k (kern_gemm_bf16): both
 * operands rounded to bfloat16, each from a 64-byte boundary, and room
 * for oneDNN's own scratch (packing buffers; 600 KiB at most measured for
 * a 2048-unit dense layer at batch 1024). */
size_t convplan_gemm_bf16_workspace(int m, int n, int k);

/* Workspace of a dense layer computing in bfloat16 at batch n: the
 * largest of its forward GEMM and its two backward ones (and of the
 * pass below); 0 above
 * CONVPLAN_DENSE_BF16_MAX, where the layer computes in float32 (a copy of
 * a 16384x16384 layer's weights would take half a GiB of a wafer that
 * streams such layers in parts). */
#define CONVPLAN_DENSE_BF16_MAX ((size_t)64 << 20)
size_t convplan_dense_bf16_workspace(int n, int in_f, int out_f);
/* What the backward pass's one pass over dY takes of that workspace
 * (op_dense.c): dY rounded as it is and transposed, then either GEMM's
 * other operand (the weights, or the input in the matmul's layout) and
 * scratch. The layer's workspace has this room too where it stays under
 * CONVPLAN_DENSE_BF16_MAX; elsewhere the pass is not taken. */
size_t convplan_dense_bf16_dy_workspace(int n, int in_f, int out_f);

/* Depth bands of a 3-D convolution or transposed convolution on oneDNN
 * (wse-node/kernels/c3d_band.c). oneDNN's kernels read and write whole
 * operands in their own layouts, so a layer at 128^3 with 64 channels in
 * would take about a GiB of copies; above CONVPLAN_C3D_BAND_BYTES a layer
 * runs in bands of the planes of its window grid (a convolution's output,
 * a transposed one's input), each with the volume's planes its windows
 * reach, and its copies are a band's. */
#define CONVPLAN_C3D_BAND_BYTES ((uint64_t)128 << 20)

/* Planes of the window grid per band: all gd where the whole layer's
 * float32 operands (its grid and volume, each with its gradient) stay
 * within budget bytes (CONVPLAN_C3D_BAND_BYTES), else as many as fit, at
 * least 2. grid and vol are the elements of one plane of each over its
 * channels and samples; stride and reach (dilation * (kernel - 1) + 1)
 * along depth. Pure arithmetic: the kernels and the plan band alike. */
int convplan_c3d_band_planes(int gd, uint64_t grid, uint64_t vol, int stride, int reach,
                             uint64_t budget);
