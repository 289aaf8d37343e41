/* 2-D convolution (cross-correlation, as in PyTorch), NCHW, fp32, lowered
 * to cblas_sgemm through im2col over bands of output rows, or run by oneDNN
 * where that is faster for the shape and fits the same workspace. */
#ifndef OP_CONV2D_H
#define OP_CONV2D_H

#include <stddef.h>

#include "convplan.h" /* the shape, its output size and its plan */

/* Bytes of workspace that op_conv2d_forward and op_conv2d_backward need
 * for shape p on kernels_threads() threads: one band of im2col columns and
 * the weight-gradient partial sums per thread, or, where
 * convplan_conv2d_blocked_f32 says so, the operands in oneDNN's own
 * layouts (conv_blocked.c). Depends only on p and the thread count, so a
 * planner can carve workspaces ahead of time; the same buffer serves
 * forward and backward. A workspace sized for fewer threads still works:
 * the op then uses im2col on as many threads as it has room for. */
size_t op_conv2d_workspace(const op_conv2d_params *p);

/* in is (n, c, h, w), weight is (k, c, r, s), bias is (k) or NULL,
 * out is (n, k, oh, ow). ws is ws_bytes of scratch, aligned for float, at
 * least op_conv2d_workspace(p) as computed with one thread. No
 * allocation. */
void op_conv2d_forward(float *out, const float *in, const float *weight,
                       const float *bias, const op_conv2d_params *p,
                       void *ws, size_t ws_bytes);

/* dout is (n, k, oh, ow), in is (n, c, h, w), weight is (k, c, r, s).
 * Overwrites dweight (k, c, r, s), dbias (k, may be NULL) and din
 * (n, c, h, w, may be NULL). ws as for the forward pass. */
void op_conv2d_backward(float *din, float *dweight, float *dbias,
                        const float *dout, const float *in,
                        const float *weight, const op_conv2d_params *p,
                        void *ws, size_t ws_bytes);

/* Mixed precision: op_conv2d_forward and op_conv2d_backward with in,
 * weight and dout rounded to bfloat16 (to nearest even) and their products
 * summed in float32 by oneDNN on AMX or AVX512_BF16 (conv_bf16.c). out and
 * din are float32; the weight gradient is rounded to bfloat16 as oneDNN
 * makes it and widened; the bias and its gradient stay float32. ws holds
 * op_conv2d_bf16_workspace(p) bytes. Computes in float32 instead (the
 * functions above, on the same ws) where the processor or the build has
 * no bfloat16 path, the layer has fewer than 8 outputs
 * (convplan_conv2d_blocked_bf16), oneDNN has no fast kernel for the shape, or ws is too
 * small. Returns 1 when it computed in bfloat16, 0 in float32. */
size_t op_conv2d_bf16_workspace(const op_conv2d_params *p);
int op_conv2d_forward_bf16(float *out, const float *in, const float *weight, const float *bias,
                           const op_conv2d_params *p, void *ws, size_t ws_bytes);
int op_conv2d_backward_bf16(float *din, float *dweight, float *dbias, const float *dout,
                            const float *in, const float *weight, const op_conv2d_params *p,
                            void *ws, size_t ws_bytes);
/* The same, with the input kept from the forward pass for the weight
 * gradient: the forward pass rounds it into keep (keep_bytes there,
 * convplan_conv2d_bf16_kept_bytes(p), 64-byte aligned) instead of the
 * workspace where its layout lets it and then returns 2; a backward pass
 * given that buffer (kept) takes the input from it, not from in, which it
 * need not round again. */
int op_conv2d_forward_bf16_keep(float *out, const float *in, const float *weight,
                                const float *bias, const op_conv2d_params *p, void *ws,
                                size_t ws_bytes, void *keep, size_t keep_bytes);
int op_conv2d_backward_bf16_kept(float *din, float *dweight, float *dbias, const float *dout,
                                 const float *in, const float *weight, const op_conv2d_params *p,
                                 void *ws, size_t ws_bytes, const void *kept, size_t kept_bytes);

/* A convolution's tensors in oneDNN's aBcd16b layout, (n, c / 16, h, w,
 * 16), as its blocked kernels compute on them: a plan keeps a chain of
 * layers in it (the executor's blocked groups), sparing the reorders to
 * and from NCHW. Bits of the tensors a call takes and gives so: */
#define OP_CONV2D_OUT_BLOCKED 1u /* out, and dout in the backward pass */
#define OP_CONV2D_IN_BLOCKED 2u  /* in, and din */

/* The channels of a block of the blocked layout the convolutions take
 * and give on this processor (oneDNN's choice for its float32 kernels):
 * 16 (aBcd16b) with AVX-512, 8 (aBcd8b) with AVX2 (under the cap of
 * kernels_isa_level), 0 where there is none (no oneDNN, an older
 * processor). Below, "aBcd16b" reads as that layout. */
int op_conv2d_block_size(void);

/* The OP_CONV2D_*_BLOCKED tensors the convolution of shape p can take
 * and give in aBcd16b: in mixed precision (bf16) or float32, with a bias
 * or not, with ws_bytes of workspace (at any alignment). 0 where it runs
 * on the plain layouts (im2col, a shape oneDNN has no fast kernel or no
 * such layout for, the path forced, a build without oneDNN). The same
 * answer every time for the same arguments on one processor. */
unsigned op_conv2d_blocked_io(const op_conv2d_params *p, int bf16, int bias, size_t ws_bytes);

/* How the convolution of shape p runs in mixed precision (bf16) or
 * float32 with ws_bytes of workspace, for logs and tests: into out (len
 * bytes, always terminated) the path, and on oneDNN's own layouts its
 * implementation, the layouts of the input, the output and the weight
 * gradient's input (oneDNN picks them per processor: aBcd16b with
 * AVX-512, aBcd8b with AVX2, channels-last acdb with AMX), or why it does
 * not run there. Returns OP_CONV2D_ON_ONEDNN when it computes on oneDNN's
 * layouts (in bfloat16 for bf16), and OP_CONV2D_KEEPS_INPUT when
 * op_conv2d_forward_bf16_keep keeps its input for the weight gradient
 * (returns 2) given convplan_conv2d_bf16_kept_bytes(p) bytes. */
#define OP_CONV2D_ON_ONEDNN 4u
#define OP_CONV2D_KEEPS_INPUT 8u
unsigned op_conv2d_describe(const op_conv2d_params *p, int bf16, int bias, size_t ws_bytes,
                            char *out, size_t len);

/* Where the processor has no bfloat16 path, the calls below given bf16
 * compute as float32 ones (op_conv2d_forward_bf16's bits), on float32's
 * blocked layouts where they serve, and return what those return. */
/* op_conv2d_forward_bf16_keep (bf16, returning what it returns) or
 * op_conv2d_forward (0, or 1 where it ran with blocked tensors) and the
 * backward passes likewise, with the tensors `blocked` names in
 * aBcd16b: bits op_conv2d_blocked_io gave for the same arguments. Where
 * oneDNN fails after all, the blocked tensors are reordered through
 * memory of their own and the plain path computes. */
int op_conv2d_forward_io(float *out, const float *in, const float *weight, const float *bias,
                         const op_conv2d_params *p, int bf16, unsigned blocked, void *ws,
                         size_t ws_bytes, void *keep, size_t keep_bytes);
int op_conv2d_backward_io(float *din, float *dweight, float *dbias, const float *dout,
                          const float *in, const float *weight, const op_conv2d_params *p,
                          int bf16, unsigned blocked, void *ws, size_t ws_bytes, const void *kept,
                          size_t kept_bytes);

/* The rows beyond a stripe's top and bottom edges when the image is split
 * into horizontal stripes (spatial partitions): the windows read its
 * neighbours' rows there, not zero padding. */
typedef struct op_conv2d_halo {
    const float *top, *bottom;  /* (n, c, rows_top, w) and (n, c, rows_bottom, w): the rows just
                                 * above and below; NULL: zero padding (the image's edge) */
    int rows_top, rows_bottom;  /* at most pad_h each */
    float *dtop, *dbottom;      /* backward: overwritten with the gradients of those rows,
                                 * (n, c, rows, w), which the neighbours add to theirs; NULL:
                                 * not wanted */
} op_conv2d_halo;

/* op_conv2d_forward and op_conv2d_backward over a stripe: unit stride and
 * a window of more than one row. din holds the gradients of the stripe's
 * own rows from its own outputs (the neighbours send theirs for its edge
 * rows, as this call makes dtop and dbottom for them). Always the im2col
 * path; the same workspace. */
void op_conv2d_forward_halo(float *out, const float *in, const float *weight,
                            const float *bias, const op_conv2d_params *p,
                            const op_conv2d_halo *halo, void *ws, size_t ws_bytes);
/* op_conv2d_forward_halo for output rows [y0, y1) only (the others are
 * left as they are): a stripe computes the rows whose windows stay inside
 * it while the halo rows travel, then the rest. */
void op_conv2d_forward_rows(float *out, const float *in, const float *weight, const float *bias,
                            const op_conv2d_params *p, const op_conv2d_halo *halo, int y0, int y1,
                            void *ws, size_t ws_bytes);
void op_conv2d_backward_halo(float *din, float *dweight, float *dbias,
                             const float *dout, const float *in,
                             const float *weight, const op_conv2d_params *p,
                             const op_conv2d_halo *halo, void *ws, size_t ws_bytes);

/* The gradients of the halo rows alone (halo->dtop and ->dbottom; the
 * rest of op_conv2d_backward_halo, called after with them NULL, makes the
 * weight gradient and din): they go to the neighbours while the stripe
 * computes the rest. */
void op_conv2d_backward_halo_rows(const float *dout, const float *weight,
                                  const op_conv2d_params *p, const op_conv2d_halo *halo,
                                  void *ws, size_t ws_bytes);

/* Direct loops with the same contracts (no workspace), the reference that
 * tests hold the GEMM path to. */
void op_conv2d_forward_ref(float *out, const float *in, const float *weight,
                           const float *bias, const op_conv2d_params *p);
void op_conv2d_backward_ref(float *din, float *dweight, float *dbias,
                            const float *dout, const float *in,
                            const float *weight, const op_conv2d_params *p);

#endif
