/* Internal: the worker pool the convolutions split their bands over, and
 * the choice between the two implementations of a convolution (im2col +
 * GEMM, or oneDNN when the library was built with it). */
#ifndef KERNELS_INTERNAL_H
#define KERNELS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#ifdef KERNELS_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>

/* The oneDNN CPU engine and stream every oneDNN primitive of the kernels
 * runs on (created once; its threads set to the operators'): 1, or 0 when
 * the engine cannot be made. From the operators' thread. */
int kern__dnnl_engine(dnnl_engine_t *eng, dnnl_stream_t *stream);

/* A convolution's (or, transposed, a deconvolution's) geometry in
 * oneDNN's terms, from an op_conv2d_params (op_conv_transpose2d_params). */
typedef struct kern__dnnl_geom {
    int transposed;                    /* deconvolution */
    dnnl_dims_t src, wei, bias, dst;   /* logical dims; wei is (k, c, r, s) */
    dnnl_dims_t strides, dil, pad_l, pad_r; /* spatial, dil counts from 0 */
} kern__dnnl_geom;
void kern__dnnl_geom_of(kern__dnnl_geom *g, int transposed, const void *params);
#endif

/* ws from its first 64-byte boundary, and in *avail the bytes of ws_bytes
 * left from there. */
void *kern__ws_aligned(void *ws, size_t ws_bytes, size_t *avail);

/* Executes this program again with argv, by its own path (so that it
 * keeps its name), else /proc/self/exe; returns only on failure (errno). */
void kern__exec_self(char **argv);

/* out (n, k, vol) += bias (k) on every plane, over the threads. */
void kern__add_bias(float *out, const float *bias, int n, int k, size_t vol);

/* A monotonic clock in nanoseconds, and the time since t0 of it added to
 * kernels_layout_seconds (a layout or precision conversion that began at
 * t0). */
uint64_t kern__now_ns(void);
void kern__layout_since(uint64_t t0);

/* Body of a parallel region: runs once per thread with its index tid in
 * [0, nthreads). */
typedef void (*kern__task_fn)(void *ctx, int tid, int nthreads);

/* Runs fn on min(want, kernels_threads()) threads (the caller being tid 0)
 * and returns when all have finished; inline on the calling thread when
 * that is one, or when the caller already runs a share of a region (a
 * region does not nest: its GEMMs run on their own thread). */
void kern__parallel(kern__task_fn fn, void *ctx, int want);
/* Whether the calling thread runs its share of a region of kern__parallel. */
int kern__in_region(void);

/* Every one of C's m rows (n columns, ldc apart) set to bias, split over
 * the pool: a dense layer's output seeded before its GEMM adds into it. */
void kern__seed_rows(float *c, int ldc, const float *bias, int m, int n);

/* kern_sgemm (alpha 1) with, unless bias is NULL, C seeded with the bias
 * and the product added into it (beta then 1): a dense layer in float32,
 * and mixed precision's GEMMs where they run in float32. */
void kern__sgemm_bias(int ta, int tb, int m, int n, int k, const float *a, int lda, const float *b,
                      int ldb, const float *bias, float beta, float *c, int ldc);

/* rows of cols floats, ld apart, rounded to bfloat16 (bf16_pack) and
 * packed into out, over the operators' threads (untimed) */
void kern__bf16_rows(uint16_t *out, const float *in, int rows, int cols, int ld);

/* The reorders between a plain float32 (n, c, h, w) tensor and oneDNN's
 * aBcd16b layout of it (blk16.c): packing into it in float32 or rounded
 * to bfloat16 (to nearest even), unpacking float32 out of it. */
typedef enum kern__blk16_kind {
    KERN__BLK16_PACK_F32,
    KERN__BLK16_PACK_BF16,
    KERN__BLK16_UNPACK_F32,
    KERN__BLK16_ROUND_BF16, /* n * c * hw floats rounded in whatever layout
                             * they are (the same instruction as packing) */
} kern__blk16_kind;
/* Runs one over the operators' threads: 1, or 0 when it cannot here (c not
 * a multiple of 16, no AVX-512, or packing to bfloat16 without
 * AVX512_BF16), then the caller reorders some other way. hw = h * w. */
int kern__blk16_reorder(kern__blk16_kind kind, void *blk, float *plain, int n, int c, size_t hw);
/* The same with the plain tensor's channels ld floats apart and its
 * samples nld apart: a band of planes of a larger tensor (hw: the band's
 * planes' pixels; rounding only where the tensor is whole). */
int kern__blk16_reorder_ld(kern__blk16_kind kind, void *blk, float *plain, int n, int c,
                           size_t hw, size_t ld, size_t nld);
/* A plain float32 tensor (n, c, hw) whose channels are ld floats apart and
 * samples nld into the channel-blocked layout of `block` (8 or 16; the
 * channels padded with zeros to a multiple of it), float32 or rounded to bfloat16 (to nearest even), over
 * the operators' threads: blk16.c's passes where they run here, else a
 * portable one. For the bands of a tensor above 4 GiB, whose reorder
 * oneDNN 2.6 runs in its reference kernel (ten times the time). */
void kern__blk_pack(void *blk, int bf16, int block, const float *plain, int n, int c, size_t hw,
                    size_t ld, size_t nld);

/* A dense layer's output gradient dy (n rows of cols) in one pass over
 * the operators' threads (blk16.c), for its mixed-precision backward pass:
 * where y (the fused relu's output) is given, dy masked in place (dy where
 * y > 0, else +0, as op_relu_backward); and dy rounded to bfloat16 (to
 * nearest even, VCVTNEPS2BF16) into plain (n rows of cols) and tr (its
 * transpose, cols rows of n), each where given. The threads split the
 * rows, as the GEMM that made dy did: split by columns, each thread wrote
 * into lines the other had just written, and the pass took 4.7 ms instead
 * of 0.6 on 1024 x 2048 right after that GEMM (an AMD EPYC). 1, or 0 where
 * the processor has no AVX512_BF16 (nothing done). */
int kern__bf16_dy(float *dy, const float *y, uint16_t *plain, uint16_t *tr, int n, int cols);

/* A K x N matrix (k rows of n, ld apart) in float32 (f, rounded to
 * bfloat16 to nearest even) or in bfloat16 (h, where f is NULL) into
 * oneDNN's BA16a64b2a layout, the one its matmul takes its B in on
 * AVX512_BF16: blocks of 32 rows by 64 columns, the columns' blocks
 * outermost, each block 16 pairs of rows, a pair's two values side by
 * side for each of its 64 columns; K padded with zeros to 32, N to 64
 * (blk16.c, over the operators' threads). 1, or 0 where the processor has
 * no AVX512_BF16 (nothing done). */
int kern__bf16_vnni(uint16_t *out, const float *f, const uint16_t *h, int k, int n, int ld);
/* Whether kern__bf16_vnni runs here. */
int kern__bf16_vnni_ok(void);
/* Whether kernels_bf16_own_passes left them on. */
int kern__bf16_own_passes_on(void);

/* A 3x3 convolution at unit stride and dilation with one pixel of padding
 * (the image keeps its size), on the plain layout, computed directly
 * (conv_direct.c): 16 output channels or fewer (the data gradient: 16
 * input channels or fewer) and at most 64 on the other side, on AVX-512.
 * kern__conv3x3_direct_ok says whether it runs for p (dgrad: its data
 * gradient); forward computes out (n, k, h, w) with bias (or NULL), dgrad
 * din (n, c, h, w) from dout; each takes its weight table from ws (36 KiB
 * at most). 1, or 0 when it did not run. */
struct op_conv2d_params;
int kern__conv3x3_direct_ok(const struct op_conv2d_params *p, int dgrad);
int kern__conv3x3_direct_forward(float *out, const float *in, const float *weight,
                                 const float *bias, const struct op_conv2d_params *p, void *ws,
                                 size_t ws_bytes);
int kern__conv3x3_direct_dgrad(float *din, const float *dout, const float *weight,
                               const struct op_conv2d_params *p, void *ws, size_t ws_bytes);
/* Its weight gradient (k, c, 3, 3) and bias gradient (or NULL), the
 * partial sums in ws (c times k / 4 rounded up, times 2304 bytes: 576 KiB
 * at most); the same rule as the forward pass. */
int kern__conv3x3_direct_wgrad(float *dweight, float *dbias, const float *dout, const float *in,
                               const struct op_conv2d_params *p, void *ws, size_t ws_bytes);
/* A convolution's bias gradient: db[k] the sum of dy's plane k (plane
 * pixels) over the n images, in double, a channel per task; dy plain
 * (n, k, plane; blk 0) or in blocks of blk channels (aBcd16b, aBcd8b), the
 * same sums in the same order (conv_direct.c). */
void kern__conv_dbias(float *db, const float *dy, int n, int k, size_t plane, int blk);

/* Whether kern_sgemm may run its large GEMMs on oneDNN's sgemm (on, the
 * default unless APPLIANCE_SGEMM=openblas, where the build has oneDNN on
 * OpenMP) or keeps them all on OpenBLAS (off). From the operators' thread,
 * between operators: tests and benchmarks compare the two. */
void kern__sgemm_set_onednn(int on);

/* C = alpha A^T B with A k x m, B k x n (row-major) and k at most 64, C
 * written once (beta 0), split by rows over the pool: the weight gradient
 * of a dense layer on a small batch (gemm_small_k.c). 0, or -1 when this
 * processor has no AVX-512 or the shape is not one (the caller runs its
 * GEMM as before). */
int kern__sgemm_small_k(int m, int n, int k, float alpha, const float *a, int lda,
                        const float *b, int ldb, float *c, int ldc);

/* Which implementation runs the convolutions. */
typedef enum kern__conv_path {
    KERN__CONV_AUTO = 0,   /* per shape, the faster one, timed at first use */
    KERN__CONV_IM2COL,     /* im2col + OpenBLAS GEMM everywhere */
    KERN__CONV_ONEDNN,     /* oneDNN on the plain layouts wherever it can run
                              the shape within the workspace, im2col elsewhere */
    KERN__CONV_BLOCKED,    /* the default: oneDNN on its own layouts where the
                              shape's rule says so (convplan_conv2d_blocked_f32)
                              and the workspace holds it, im2col elsewhere */
} kern__conv_path;

/* A convolution on oneDNN's own layouts, in float32 or (bf16) in bfloat16
 * (conv_blocked.c): 1 when it ran, 0 when it did not (no such kernel for
 * the shape, a workspace too small, no bfloat16 instructions, a build
 * without oneDNN), then the caller computes it on its other path. */
struct op_conv2d_params;
/* blocked: the OP_CONV2D_*_BLOCKED tensors (op_conv2d.h) are in aBcd16b,
 * where kern__conv_blocked_io says they can be (else it does not run). */
int kern__conv_blocked_forward(int bf16, float *out, const float *in, const float *weight,
                               const float *bias, const struct op_conv2d_params *p, void *ws,
                               size_t ws_bytes, void *keep, size_t keep_bytes, unsigned blocked);
int kern__conv_blocked_backward(int bf16, float *din, float *dweight, float *dbias,
                                const float *dout, const float *in, const float *weight,
                                const struct op_conv2d_params *p, void *ws, size_t ws_bytes,
                                const void *kept, size_t kept_bytes, unsigned blocked);
/* The OP_CONV2D_*_BLOCKED tensors shape p's blocked convolution can take
 * and give in aBcd16b with a workspace of ws_bytes (at any alignment): 0
 * where it does not run. */
/* op_conv2d_describe's words and bits for oneDNN's blocked path. */
unsigned kern__conv_blocked_describe(int bf16, const struct op_conv2d_params *p, int bias,
                                     size_t ws_bytes, char *out, size_t len);
unsigned kern__conv_blocked_io(int bf16, const struct op_conv2d_params *p, int bias,
                               size_t ws_bytes);

/* The oneDNN primitives one piece of a convolution runs, as bits of a job:
 * forward with or without bias, weight gradient with or without the bias
 * gradient, data gradient. */
enum {
    KERN__DNNL_FWD = 1 << 0,
    KERN__DNNL_FWD_BIAS = 1 << 1,
    KERN__DNNL_BWD_W = 1 << 2,
    KERN__DNNL_BWD_W_BIAS = 1 << 3,
    KERN__DNNL_BWD_D = 1 << 4,
    KERN__DNNL_JOBS = 1 << 5,   /* bound of the job masks */
};

/* Sets the path for the rest of the process, overriding the environment
 * variable APPLIANCE_CONV_PATH (im2col, onednn or auto; read once at the
 * first convolution; auto when unset). For tests and benchmarks; call it
 * between operator calls, from the operators' thread. */
void kern__conv_set_path(kern__conv_path path);

/* The path in force (the setter's, else the environment's). */
kern__conv_path kern__conv_get_path(void);

/* 1 when the library was built with oneDNN and its CPU engine works. */
int kern__conv_have_onednn(void);

/* Bits (KERN__DNNL_*) of the primitives that ran on oneDNN since the
 * previous call; clears them. Lets tests see which path really ran. */
unsigned kern__conv_ran_onednn(void);

/* What auto chose for `job` of the shape p (an op_conv2d_params, or an
 * op_conv_transpose2d_params when transposed) on the current thread count:
 * KERN__CONV_IM2COL or KERN__CONV_ONEDNN, KERN__CONV_AUTO while
 * undecided. */
kern__conv_path kern__conv_choice(int transposed, const void *p,
                                  unsigned job);

/* Bytes of workspace oneDNN needs to run `job` of shape p on the current
 * thread count (its scratchpad plus alignment slack; 0 when it needs
 * none), creating the primitives if need be; SIZE_MAX when it cannot run
 * it. Lets tests and benchmarks give oneDNN room where the planner's
 * workspace is too small for it. */
size_t kern__conv_scratch(int transposed, const void *p, unsigned job);

/* oneDNN's name for the implementation of the primitive `prim` (one
 * KERN__DNNL_* bit) of shape p, NULL when none was created. Static
 * storage owned by oneDNN. */
const char *kern__conv_impl(int transposed, const void *p, unsigned prim);

/* Sparse times dense (spmm.c, op_sparse_dense.c). A sparse m x K matrix
 * cut into panels of pw columns, each a CSR of all m rows with the column
 * within the panel in 16 bits: panel p's row r is entries
 * [ptr[p * (m + 1) + r], ptr[p * (m + 1) + r + 1]) of idx and val. A
 * panel's rows of the dense operand are what stays in the caches while
 * the sparse rows pass over them: the fewer kept entries a row has in a
 * panel, the wider the panel must be to pay for visiting it
 * (kern__panel_width). KERN__PANEL is the widest, and the width of
 * compressed activations. */
#define KERN__PANEL 256
typedef struct kern__panels {
    int m;               /* rows */
    int npan;            /* panels */
    int pw;              /* columns a panel (at most 65536) */
    const uint32_t *ptr; /* npan * (m + 1) offsets */
    const uint16_t *idx; /* column within the panel */
    const float *val;    /* values */
} kern__panels;

/* Rows [r0, r1) of C (n columns, ldc apart) = init[r] (cinit: init[j]
 * for column j; 0 where init is NULL) + the sum over row r's entries of
 * val * B's row (p * pw + idx), in ascending column order whatever pw, B
 * row-major with ldb; on the vector code of isa (a kernels_isa), n any
 * width. */
void kern__spmm_rows(int isa, const kern__panels *a, const float *b, int ldb, int n,
                     const float *init, int cinit, float *c, int ldc, int r0, int r1);
/* For each entry e of rows [r0, r1): v[ord[e]] (v[e] where ord is NULL)
 * = the dot product of L's row r and R's row (p * pw + idx[e]),
 * each n long (n a multiple of 16; ldl, ldr apart), summed in float32.
 * ord must map each (panel, row) run of entries to consecutive places
 * (the canonical order of a sparse_w does). */
void kern__sddmm_rows(int isa, const kern__panels *a, const float *l, int ldl, const float *r,
                      int ldr, int n, float *v, const uint32_t *ord, int r0, int r1);
/* dst[e] = src[ord[e]] for e in [lo, hi): the kept values into a panel
 * form's order (sparse_w_set_kept); AVX-512 and AVX2 gathers where isa
 * has them and every index is below 2^31. */
void kern__permute(int isa, float *dst, const float *src, const uint32_t *ord, size_t lo,
                   size_t hi);
/* dst (cols, ldd apart) = src (rows of cols, lds apart) transposed:
 * dst[j][i] = src[i][j] for i < rows, and zero for rows <= i < pad (the
 * padding of dst's rows), rows [j0, j1) of dst only; in 8 x 8 blocks of
 * shuffles where isa has AVX2 (the same bits either way). */
void kern__transpose_rows(int isa, float *dst, int ldd, const float *src, int lds, int rows,
                          int pad, int j0, int j1);
/* For tests: the instruction set the sparse kernels use from now on (a
 * kernels_isa, capped by kernels_isa_level), or -1 for kernels_isa_level. */
void kern__sparse_set_isa(int isa);
int kern__sparse_isa(void);
/* The panel width of a sparse weight whose kept fraction is density:
 * the narrowest of 64, 128 and KERN__PANEL at which a row keeps about 16
 * entries a panel (measured: bench/sparse_dense.c's widths). For tests and
 * benchmarks, kern__sparse_set_panel(pw) fixes it for the sparse weights
 * made from then on (a power of two from 16 to KERN__PANEL), 0 undoes. */
int kern__panel_width(double density);
void kern__sparse_set_panel(int pw);

#endif
