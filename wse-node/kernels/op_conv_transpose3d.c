/* Transposed 3-D convolution: the three pieces of op_conv3d with the roles
 * swapped. On vol2col the columns lie on the input grid and the volume is
 * the output: the forward pass is a convolution's data gradient (GEMM and
 * col2vol), the data gradient a convolution's forward pass of dout, the
 * weight gradient a convolution's with in as its output gradient. Each
 * piece runs on oneDNN's deconvolution instead where it has a fast kernel
 * (conv3d_dnnl.c), unless the path is forced to im2col. */
#include "op_conv_transpose3d.h"

#include <stdio.h>
#include <string.h>

#include "conv3d_dnnl.h"
#include "kernels.h"
#include "kernels_internal.h"
#include "vol2col.h"

static int one_if_zero(int v)
{
    return v > 0 ? v : 1;
}

static int out_size(int in, int stride, int pad, int dil, int ker, int out_pad)
{
    return (in - 1) * one_if_zero(stride) - 2 * pad + one_if_zero(dil) * (ker - 1) + out_pad + 1;
}

int op_conv_transpose3d_out_d(const op_conv_transpose3d_params *p)
{
    return out_size(p->d, p->stride_d, p->pad_d, p->dil_d, p->kd, p->out_pad_d);
}

int op_conv_transpose3d_out_h(const op_conv_transpose3d_params *p)
{
    return out_size(p->h, p->stride_h, p->pad_h, p->dil_h, p->kh, p->out_pad_h);
}

int op_conv_transpose3d_out_w(const op_conv_transpose3d_params *p)
{
    return out_size(p->w, p->stride_w, p->pad_w, p->dil_w, p->kw, p->out_pad_w);
}

/* The output volume (k channels) and the grid of windows on it, one per
 * input voxel. */
static kern__vol vol_of(const op_conv_transpose3d_params *p)
{
    kern__vol g = {
        .c = p->k,
        .d = op_conv_transpose3d_out_d(p), .h = op_conv_transpose3d_out_h(p),
        .w = op_conv_transpose3d_out_w(p),
        .kd = p->kd, .kh = p->kh, .kw = p->kw,
        .sd = one_if_zero(p->stride_d), .sh = one_if_zero(p->stride_h),
        .sw = one_if_zero(p->stride_w),
        .pd = p->pad_d, .ph = p->pad_h, .pw = p->pad_w,
        .dd = one_if_zero(p->dil_d), .dh = one_if_zero(p->dil_h), .dw = one_if_zero(p->dil_w),
        .od = p->d, .oh = p->h, .ow = p->w,
    };
    return g;
}

static kern__c3d geom_of(const op_conv_transpose3d_params *p)
{
    kern__vol v = vol_of(p);
    kern__c3d g;
    memset(&g, 0, sizeof(g)); /* a cache key: no stray bytes */
    int in[3] = {p->d, p->h, p->w}, out[3] = {v.d, v.h, v.w}, ker[3] = {p->kd, p->kh, p->kw};
    int st[3] = {v.sd, v.sh, v.sw}, dl[3] = {v.dd, v.dh, v.dw}, pad[3] = {v.pd, v.ph, v.pw};
    int op[3] = {p->out_pad_d, p->out_pad_h, p->out_pad_w};
    g.transposed = 1;
    g.n = p->n;
    g.c = p->c;
    g.k = p->k;
    for (int a = 0; a < 3; a++) {
        g.in[a] = in[a];
        g.out[a] = out[a];
        g.ker[a] = ker[a];
        g.stride[a] = st[a];
        g.dil[a] = dl[a];
        g.pad_l[a] = pad[a];
        /* the output seen as the input of the convolution it is the
         * adjoint of: the extra planes at the far end are padding taken
         * back */
        g.pad_r[a] = pad[a] - op[a];
    }
    return g;
}

static unsigned f32_onednn(const kern__c3d *g)
{
    return kern__conv_get_path() == KERN__CONV_IM2COL ? 0 : kern__c3d_pieces(g, 0);
}

size_t op_conv_transpose3d_workspace(const op_conv_transpose3d_params *p)
{
    kern__vol v = vol_of(p);
    kern__c3d g = geom_of(p);
    size_t vb = (size_t)kernels_threads() * kern__vol_per_thread(&v, p->c) * sizeof(float);
    size_t d = kern__c3d_bytes(&g, 0, KERN__C3D_ALL);
    return vb > d ? vb : d;
}

void op_conv_transpose3d_forward(float *out, const float *in, const float *weight,
                                 const float *bias, const op_conv_transpose3d_params *p, void *ws,
                                 size_t ws_bytes)
{
    /* in (n, c, d, h, w), weight (c, k, kd, kh, kw), bias (k) or NULL,
     * out (n, k, od, oh, ow) = col2vol(weight^T in) + bias */
    kern__c3d g = geom_of(p);
    if ((f32_onednn(&g) & KERN__C3D_FWD) &&
        kern__c3d_forward(0, &g, out, in, weight, bias, ws, ws_bytes))
        return;
    kern__vol v = vol_of(p);
    kern__vol_dgrad(out, in, weight, &v, p->n, p->c, ws, ws_bytes);
    if (bias)
        kern__add_bias(out, bias, p->n, p->k, (size_t)v.d * v.h * v.w);
}

void op_conv_transpose3d_backward(float *din, float *dweight, float *dbias, const float *dout,
                                  const float *in, const float *weight,
                                  const op_conv_transpose3d_params *p, void *ws, size_t ws_bytes)
{
    /* dout (n, k, od, oh, ow), in (n, c, d, h, w), weight (c, k, kd, kh,
     * kw); dweight (c, k, kd, kh, kw) = in x vol2col(dout)^T, din = weight
     * x vol2col(dout), dbias the sums of dout */
    kern__c3d g = geom_of(p);
    kern__vol v = vol_of(p);
    unsigned want = (KERN__C3D_BWD_W | (din ? KERN__C3D_BWD_D : 0)) & f32_onednn(&g), done = 0;
    if (want) {
        done = kern__c3d_backward(0, &g, want, din, dweight, dout, in, weight, ws, ws_bytes);
        if (!done && want == (KERN__C3D_BWD_W | KERN__C3D_BWD_D))
            done = kern__c3d_backward(0, &g, KERN__C3D_BWD_W, din, dweight, dout, in, weight, ws,
                                      ws_bytes) |
                   kern__c3d_backward(0, &g, KERN__C3D_BWD_D, din, dweight, dout, in, weight, ws,
                                      ws_bytes);
    }
    if (!(done & KERN__C3D_BWD_W))
        kern__vol_wgrad(dweight, NULL, in, dout, &v, p->n, p->c, ws, ws_bytes);
    if (din && !(done & KERN__C3D_BWD_D))
        kern__vol_forward(din, dout, weight, NULL, &v, p->n, p->c, ws, ws_bytes);
    if (dbias)
        kern__conv_dbias(dbias, dout, p->n, p->k, (size_t)v.d * v.h * v.w, 0);
}

size_t op_conv_transpose3d_bf16_workspace(const op_conv_transpose3d_params *p)
{
    kern__c3d g = geom_of(p);
    return kern__c3d_bf16_workspace(&g, op_conv_transpose3d_workspace(p));
}

int op_conv_transpose3d_forward_bf16(float *out, const float *in, const float *weight,
                                     const float *bias, const op_conv_transpose3d_params *p,
                                     void *ws, size_t ws_bytes)
{
    kern__c3d g = geom_of(p);
    if (kern__c3d_bf16_here(&g) && kern__c3d_forward(1, &g, out, in, weight, bias, ws, ws_bytes))
        return 1;
    op_conv_transpose3d_forward(out, in, weight, bias, p, ws, ws_bytes);
    return 0;
}

int op_conv_transpose3d_backward_bf16(float *din, float *dweight, float *dbias, const float *dout,
                                      const float *in, const float *weight,
                                      const op_conv_transpose3d_params *p, void *ws,
                                      size_t ws_bytes)
{
    kern__c3d g = geom_of(p);
    if (kern__c3d_backward_bf16(&g, din, dweight, dbias, dout, in, weight, ws, ws_bytes))
        return 1;
    op_conv_transpose3d_backward(din, dweight, dbias, dout, in, weight, p, ws, ws_bytes);
    return 0;
}

unsigned op_conv_transpose3d_describe(const op_conv_transpose3d_params *p, int bf16, char *out,
                                      size_t len)
{
    kern__c3d g = geom_of(p);
    if (bf16 && !kern__c3d_bf16_here(&g)) {
        char f32[384];
        unsigned r = op_conv_transpose3d_describe(p, 0, f32, sizeof(f32));
        snprintf(out, len, "float32 (%s): %s", kern__c3d_why_f32(p->k, 8), f32);
        return r;
    }
    if (!bf16 && kern__conv_get_path() == KERN__CONV_IM2COL) {
        snprintf(out, len, "vol2col (the path is forced)");
        return 0;
    }
    return kern__c3d_describe(&g, bf16, out, len);
}

/* The input index along one axis that output index o reads through tap t
 * (o = i * s - pad + t * dil), or -1 when none. */
static int tap_in(int o, int t, int s, int pad, int dil, int in)
{
    int num = o + pad - t * dil;
    if (num < 0 || num % s)
        return -1;
    return num / s < in ? num / s : -1;
}

void op_conv_transpose3d_forward_ref(float *out, const float *in, const float *weight,
                                     const float *bias, const op_conv_transpose3d_params *p)
{
    kern__vol g = vol_of(p);
#define X(i, c, z, y, x) in[((((size_t)(i) * p->c + (c)) * p->d + (z)) * p->h + (y)) * p->w + (x)]
#define W(c, k, a, b, e) weight[((((size_t)(c) * p->k + (k)) * p->kd + (a)) * p->kh + (b)) * p->kw + (e)]
    for (int i = 0; i < p->n; i++)
        for (int k = 0; k < p->k; k++)
            for (int oz = 0; oz < g.d; oz++)
                for (int oy = 0; oy < g.h; oy++)
                    for (int ox = 0; ox < g.w; ox++) {
                        double acc = bias ? bias[k] : 0.0;
                        for (int a = 0; a < p->kd; a++) {
                            int iz = tap_in(oz, a, g.sd, g.pd, g.dd, p->d);
                            for (int b = 0; iz >= 0 && b < p->kh; b++) {
                                int iy = tap_in(oy, b, g.sh, g.ph, g.dh, p->h);
                                for (int e = 0; iy >= 0 && e < p->kw; e++) {
                                    int ix = tap_in(ox, e, g.sw, g.pw, g.dw, p->w);
                                    for (int c = 0; ix >= 0 && c < p->c; c++)
                                        acc += (double)X(i, c, iz, iy, ix) * W(c, k, a, b, e);
                                }
                            }
                        }
                        out[((((size_t)i * p->k + k) * g.d + oz) * g.h + oy) * g.w + ox] =
                            (float)acc;
                    }
}

void op_conv_transpose3d_backward_ref(float *din, float *dweight, float *dbias, const float *dout,
                                      const float *in, const float *weight,
                                      const op_conv_transpose3d_params *p)
{
    kern__vol g = vol_of(p);
    size_t ovol = (size_t)g.d * g.h * g.w;
#define DY(i, k, z, y, x) dout[((size_t)(i) * p->k + (k)) * ovol + ((size_t)(z) * g.h + (y)) * g.w + (x)]
    for (int k = 0; dbias && k < p->k; k++) {
        double acc = 0.0;
        for (int i = 0; i < p->n; i++)
            for (size_t j = 0; j < ovol; j++)
                acc += dout[((size_t)i * p->k + k) * ovol + j];
        dbias[k] = (float)acc;
    }
    for (int c = 0; c < p->c; c++)
        for (int k = 0; k < p->k; k++)
            for (int a = 0; a < p->kd; a++)
                for (int b = 0; b < p->kh; b++)
                    for (int e = 0; e < p->kw; e++) {
                        double acc = 0.0;
                        for (int i = 0; i < p->n; i++)
                            for (int iz = 0; iz < p->d; iz++) {
                                int oz = iz * g.sd - g.pd + a * g.dd;
                                if (oz < 0 || oz >= g.d)
                                    continue;
                                for (int iy = 0; iy < p->h; iy++) {
                                    int oy = iy * g.sh - g.ph + b * g.dh;
                                    if (oy < 0 || oy >= g.h)
                                        continue;
                                    for (int ix = 0; ix < p->w; ix++) {
                                        int ox = ix * g.sw - g.pw + e * g.dw;
                                        if (ox >= 0 && ox < g.w)
                                            acc += (double)X(i, c, iz, iy, ix) * DY(i, k, oz, oy, ox);
                                    }
                                }
                            }
                        dweight[((((size_t)c * p->k + k) * p->kd + a) * p->kh + b) * p->kw + e] =
                            (float)acc;
                    }
    for (int i = 0; din && i < p->n; i++)
        for (int c = 0; c < p->c; c++)
            for (int iz = 0; iz < p->d; iz++)
                for (int iy = 0; iy < p->h; iy++)
                    for (int ix = 0; ix < p->w; ix++) {
                        double acc = 0.0;
                        for (int a = 0; a < p->kd; a++) {
                            int oz = iz * g.sd - g.pd + a * g.dd;
                            if (oz < 0 || oz >= g.d)
                                continue;
                            for (int b = 0; b < p->kh; b++) {
                                int oy = iy * g.sh - g.ph + b * g.dh;
                                if (oy < 0 || oy >= g.h)
                                    continue;
                                for (int e = 0; e < p->kw; e++) {
                                    int ox = ix * g.sw - g.pw + e * g.dw;
                                    if (ox < 0 || ox >= g.w)
                                        continue;
                                    for (int k = 0; k < p->k; k++)
                                        acc += (double)DY(i, k, oz, oy, ox) * W(c, k, a, b, e);
                                }
                            }
                        }
                        din[((((size_t)i * p->c + c) * p->d + iz) * p->h + iy) * p->w + ix] =
                            (float)acc;
                    }
#undef DY
#undef X
#undef W
}
