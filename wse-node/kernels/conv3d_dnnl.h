/* Internal: 3-D convolutions and transposed convolutions on oneDNN's own
 * layouts (conv3d_dnnl.c), piece by piece: the forward pass, the weight
 * gradient and the data gradient each run there where oneDNN has a fast
 * (direct, not reference or GEMM-based) kernel for the shape, and on
 * vol2col (vol2col.h) elsewhere. */
#ifndef KERN_CONV3D_DNNL_H
#define KERN_CONV3D_DNNL_H

#include <stddef.h>
#include <stdint.h>

/* A 3-D convolution's or deconvolution's geometry in oneDNN's terms. The
 * axes are (depth, height, width). */
typedef struct kern__c3d {
    int transposed;         /* a deconvolution (op_conv_transpose3d): the
                             * caller's weight is (c, k, kd, kh, kw) */
    int n, c, k;            /* batch, input channels, output channels */
    int in[3], out[3];      /* input and output sizes */
    int ker[3];             /* kernel */
    int stride[3], dil[3];  /* >= 1 (dil as PyTorch counts it) */
    int pad_l[3], pad_r[3]; /* padding before and after, as oneDNN takes
                             * it (pad_r may be negative) */
    int x_full, y_full;     /* a depth band's (c3d_band.c): the depth of the
                             * caller's input and output tensors whose
                             * planes these are (0: whole tensors) */
    int vol_sum;            /* a depth band's: its volume's results (a
                             * convolution's data gradient, a transposed
                             * one's output) are added into the caller's
                             * tensor, not written */
} kern__c3d;

/* The pieces, as bits (the same as op_conv3d.h's OP_CONV3D_*_ONEDNN). */
enum {
    KERN__C3D_FWD = 1,
    KERN__C3D_BWD_W = 2,
    KERN__C3D_BWD_D = 4,
    KERN__C3D_ALL = 7,
};

/* The pieces oneDNN has a fast kernel for, in bfloat16 (bf16) or float32,
 * on kernels_threads() threads; the shape's primitives are made and kept
 * at the first asking. 0 without oneDNN or its engine, or where bfloat16
 * is asked for and kernels_bf16_compute() says no. From the operators'
 * thread. */
unsigned kern__c3d_pieces(const kern__c3d *g, int bf16);

/* Bytes of workspace the pieces `pieces` (of those kern__c3d_pieces
 * gives) take on oneDNN: the operands in its layouts and its scratchpad,
 * plus 64 for alignment. 0 where none of them runs there. */
size_t kern__c3d_bytes(const kern__c3d *g, int bf16, unsigned pieces);

/* out (n, k, out) from in (n, c, in), weight (k, c, ker) or transposed (c,
 * k, ker), bias (k) or NULL, all plain float32, on oneDNN's layouts with
 * every buffer carved from ws: 1, or 0 when it did not run (no fast
 * kernel, ws too small, oneDNN failed), then the caller computes it. */
int kern__c3d_forward(int bf16, const kern__c3d *g, float *out, const float *in,
                      const float *weight, const float *bias, void *ws, size_t ws_bytes);

/* The backward pieces of `pieces` (KERN__C3D_BWD_W: dweight from dout and
 * in; KERN__C3D_BWD_D: din from dout and weight) on oneDNN, the weight
 * gradient first: returns the bits of those it computed (both or none,
 * 0 when any cannot run here). */
unsigned kern__c3d_backward(int bf16, const kern__c3d *g, unsigned pieces, float *din,
                            float *dweight, const float *dout, const float *in,
                            const float *weight, void *ws, size_t ws_bytes);

/* Each piece's oneDNN implementation and layouts, or why there is none,
 * into out (len bytes, terminated); the KERN__C3D_* bits of those that
 * run there. */
unsigned kern__c3d_describe(const kern__c3d *g, int bf16, char *out, size_t len);

/* The pieces above on the whole volume in one go (conv3d_dnnl.c); the
 * kern__c3d_* calls run these on each depth band (c3d_band.c) where the
 * layer is banded (convplan_c3d_band_planes), else straight through. */
unsigned kern__c3d_whole_pieces(const kern__c3d *g, int bf16);
size_t kern__c3d_whole_bytes(const kern__c3d *g, int bf16, unsigned pieces);
int kern__c3d_whole_forward(int bf16, const kern__c3d *g, float *out, const float *in,
                            const float *weight, const float *bias, void *ws, size_t ws_bytes);
unsigned kern__c3d_whole_backward(int bf16, const kern__c3d *g, unsigned pieces, float *din,
                                  float *dweight, const float *dout, const float *in,
                                  const float *weight, void *ws, size_t ws_bytes);
unsigned kern__c3d_whole_describe(const kern__c3d *g, int bf16, char *out, size_t len);

/* The depth bands of layer g: the window grid's planes per band (all of
 * them where the layer is not banded), as convplan_c3d_band_planes says
 * for its shape. */
int kern__c3d_band_planes(const kern__c3d *g);
/* Tests: the bytes a layer's operands may take before it is banded
 * (0: CONVPLAN_C3D_BAND_BYTES, the plan's), so that small volumes run in
 * bands. From the operators' thread, between layers. */
void kern__c3d_set_band_bytes(uint64_t bytes);

/* Mixed precision by the operators' rule: bfloat16 where the processor
 * and build compute in it, the layer has 8 outputs or more (in 2-D, a
 * 1-channel head padded to 16 took 4.9 times float32's time) and oneDNN
 * has a fast bfloat16 kernel for all three pieces, so that a layer's
 * passes agree on their precision. */
int kern__c3d_bf16_here(const kern__c3d *g);
/* The workspace of a layer whose float32 path needs f32 bytes: the larger. */
size_t kern__c3d_bf16_workspace(const kern__c3d *g, size_t f32);
/* The backward pass in bfloat16 (the weight gradient, the data gradient
 * where din, the bias's where dbias): 1, or 0 with nothing written when
 * the rule says float32 or a piece did not run. */
int kern__c3d_backward_bf16(const kern__c3d *g, float *din, float *dweight, float *dbias,
                            const float *dout, const float *in, const float *weight, void *ws,
                            size_t ws_bytes);

/* Why a layer of `outputs` channels asked to compute in bfloat16 stays in
 * float32, by the operators' rule (at least `least` outputs, a fast
 * bfloat16 kernel for every piece). */
const char *kern__c3d_why_f32(int outputs, int least);

#endif
