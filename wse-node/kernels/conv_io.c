/* Convolutions on the layouts a caller holds its tensors in (the blocked
 * groups' or plain): oneDNN's blocked kernels where they serve
 * (conv_blocked.c), else the plain passes (op_conv2d.c) with the tensors
 * carried between the layouts; mixed precision's entry points, which fall
 * back to float32; and what each convolution runs, in words. Calls down to
 * both, which never call back. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "kernels_internal.h"
#include "op_conv2d.h"

/* Mixed precision on a processor without bfloat16 instructions computes
 * in float32 (op_conv2d_forward_bf16's bits): on float32's blocked
 * layouts where they serve, so that its blocked groups still form. */
static int bf16_here(int bf16)
{
    return bf16 && kernels_bf16_compute();
}

unsigned op_conv2d_describe(const op_conv2d_params *p, int bf16, int bias, size_t ws_bytes,
                            char *out, size_t len)
{
    if (bf16 && !kernels_bf16_compute()) {
        char f32[320];
        unsigned r = op_conv2d_describe(p, 0, bias, ws_bytes, f32, sizeof(f32));
        snprintf(out, len, "float32 (no bfloat16 instructions for oneDNN: %s): %s",
                 kernels_isa_name(kernels_isa_level()), f32);
        return r;
    }
    if (bf16 && !convplan_conv2d_blocked_bf16(p)) {
        snprintf(out, len, "float32: the planner keeps layers of fewer than 8 outputs or too "
                           "large for oneDNN's layouts in float32");
        return 0;
    }
    if (!bf16 && (kern__conv_get_path() != KERN__CONV_BLOCKED || !convplan_conv2d_blocked_f32(p))) {
        snprintf(out, len, "the plain layouts (%s)",
                 kern__conv_get_path() != KERN__CONV_BLOCKED ? "the path is forced"
                                                             : "the planner's shape rule");
        return 0;
    }
    return kern__conv_blocked_describe(bf16, p, bias, ws_bytes, out, len);
}

unsigned op_conv2d_blocked_io(const op_conv2d_params *p, int bf16, int bias, size_t ws_bytes)
{
    bf16 = bf16_here(bf16);
    if (bf16 ? !convplan_conv2d_blocked_bf16(p)
             : kern__conv_get_path() != KERN__CONV_BLOCKED || !convplan_conv2d_blocked_f32(p))
        return 0;
    return kern__conv_blocked_io(bf16, p, bias, ws_bytes);
}

/* A tensor (n, c, hw) between the plain layout and the groups' blocked
 * one, through new memory: the way back where oneDNN fails with blocked
 * tensors. NULL when there is no memory. */
static float *blk_copy(const float *t, int n, int c, size_t hw, int to_plain)
{
    float *o = malloc((size_t)n * c * hw * sizeof(float));
    int B = op_conv2d_block_size();
    for (int i = 0; o && B && i < n; i++)
        for (int ch = 0; ch < c; ch++)
            for (size_t q = 0; q < hw; q++) {
                size_t b = (((size_t)i * (c / B) + ch / B) * hw + q) * B + ch % B;
                size_t pl = ((size_t)i * c + ch) * hw + q;
                o[to_plain ? pl : b] = t[to_plain ? b : pl];
            }
    return o;
}

/* count floats of NaN: what a step computes with where even the way back
 * has no memory (its loss then says so) */
static void nan_fill(float *t, size_t count)
{
    for (size_t i = 0; i < count; i++)
        t[i] = NAN;
}

static void blk_back(float *dst, const float *plain, int n, int c, size_t hw)
{
    float *b = blk_copy(plain, n, c, hw, 0);
    if (b)
        memcpy(dst, b, (size_t)n * c * hw * sizeof(float));
    else
        nan_fill(dst, (size_t)n * c * hw);
    free(b);
}

int op_conv2d_forward_io(float *out, const float *in, const float *weight, const float *bias,
                         const op_conv2d_params *p, int bf16, unsigned blocked, void *ws,
                         size_t ws_bytes, void *keep, size_t keep_bytes)
{
    int rc = 0;
    bf16 = bf16_here(bf16);
    if (!blocked) {
        if (bf16)
            return op_conv2d_forward_bf16_keep(out, in, weight, bias, p, ws, ws_bytes, keep,
                                               keep_bytes);
        op_conv2d_forward(out, in, weight, bias, p, ws, ws_bytes);
        return 0;
    }
    if ((rc = kern__conv_blocked_forward(bf16, out, in, weight, bias, p, ws, ws_bytes, keep,
                                         keep_bytes, blocked)) > 0)
        return rc;
    size_t hw = (size_t)p->h * p->w, ohw = (size_t)op_conv2d_out_h(p) * op_conv2d_out_w(p);
    size_t ny = (size_t)p->n * p->k * ohw;
    float *pin = blocked & OP_CONV2D_IN_BLOCKED ? blk_copy(in, p->n, p->c, hw, 1) : (float *)in;
    float *pout = blocked & OP_CONV2D_OUT_BLOCKED ? malloc(ny * sizeof(float)) : out;
    if (!pin || !pout) {
        nan_fill(out, ny);
    } else {
        rc = op_conv2d_forward_io(pout, pin, weight, bias, p, bf16, 0, ws, ws_bytes, NULL, 0);
        if (pout != out)
            blk_back(out, pout, p->n, p->k, ohw);
    }
    if (pin != in)
        free(pin);
    if (pout != out)
        free(pout);
    return rc;
}

int op_conv2d_backward_io(float *din, float *dweight, float *dbias, const float *dout,
                          const float *in, const float *weight, const op_conv2d_params *p,
                          int bf16, unsigned blocked, void *ws, size_t ws_bytes, const void *kept,
                          size_t kept_bytes)
{
    int rc = 0;
    bf16 = bf16_here(bf16);
    if (!blocked) {
        if (bf16)
            return op_conv2d_backward_bf16_kept(din, dweight, dbias, dout, in, weight, p, ws,
                                                ws_bytes, kept, kept_bytes);
        op_conv2d_backward(din, dweight, dbias, dout, in, weight, p, ws, ws_bytes);
        return 0;
    }
    if (kern__conv_blocked_backward(bf16, din, dweight, dbias, dout, in, weight, p, ws, ws_bytes,
                                    kept, kept_bytes, blocked))
        return 1;
    size_t hw = (size_t)p->h * p->w, ohw = (size_t)op_conv2d_out_h(p) * op_conv2d_out_w(p);
    size_t nx = (size_t)p->n * p->c * hw;
    int ib = (blocked & OP_CONV2D_IN_BLOCKED) != 0;
    float *pdy = blocked & OP_CONV2D_OUT_BLOCKED ? blk_copy(dout, p->n, p->k, ohw, 1) : (float *)dout;
    float *pin = ib ? blk_copy(in, p->n, p->c, hw, 1) : (float *)in;
    float *pdin = ib && din ? malloc(nx * sizeof(float)) : din;
    if (!pdy || !pin || (din && !pdin)) {
        nan_fill(dweight, (size_t)p->k * p->c * p->r * p->s);
        if (din)
            nan_fill(din, nx);
    } else {
        rc = op_conv2d_backward_io(pdin, dweight, dbias, pdy, pin, weight, p, bf16, 0, ws,
                                   ws_bytes, NULL, 0);
        if (pdin != din)
            blk_back(din, pdin, p->n, p->c, hw);
    }
    if (pdy != dout)
        free(pdy);
    if (pin != in)
        free(pin);
    if (pdin != din)
        free(pdin);
    return rc;
}

int op_conv2d_forward_bf16_keep(float *out, const float *in, const float *weight,
                                const float *bias, const op_conv2d_params *p, void *ws,
                                size_t ws_bytes, void *keep, size_t keep_bytes)
{
    int rc;
    if (convplan_conv2d_blocked_bf16(p) &&
        (rc = kern__conv_blocked_forward(1, out, in, weight, bias, p, ws, ws_bytes, keep,
                                         keep_bytes, 0)) > 0)
        return rc;
    op_conv2d_forward(out, in, weight, bias, p, ws, ws_bytes);
    return 0;
}

int op_conv2d_forward_bf16(float *out, const float *in, const float *weight, const float *bias,
                           const op_conv2d_params *p, void *ws, size_t ws_bytes)
{
    return op_conv2d_forward_bf16_keep(out, in, weight, bias, p, ws, ws_bytes, NULL, 0) > 0;
}

int op_conv2d_backward_bf16_kept(float *din, float *dweight, float *dbias, const float *dout,
                                 const float *in, const float *weight, const op_conv2d_params *p,
                                 void *ws, size_t ws_bytes, const void *kept, size_t kept_bytes)
{
    if (convplan_conv2d_blocked_bf16(p) &&
        kern__conv_blocked_backward(1, din, dweight, dbias, dout, in, weight, p, ws, ws_bytes,
                                    kept, kept_bytes, 0))
        return 1;
    op_conv2d_backward(din, dweight, dbias, dout, in, weight, p, ws, ws_bytes);
    return 0;
}

int op_conv2d_backward_bf16(float *din, float *dweight, float *dbias, const float *dout,
                            const float *in, const float *weight, const op_conv2d_params *p,
                            void *ws, size_t ws_bytes)
{
    return op_conv2d_backward_bf16_kept(din, dweight, dbias, dout, in, weight, p, ws, ws_bytes,
                                        NULL, 0);
}

size_t op_conv2d_bf16_workspace(const op_conv2d_params *p)
{
    return convplan_conv2d_bf16_workspace(p, kernels_threads());
}
