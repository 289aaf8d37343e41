/* 3-D convolution: each piece (forward, weight gradient, data gradient) on
 * oneDNN's own layouts where it has a fast kernel for the shape
 * (conv3d_dnnl.c), else lowered to GEMMs with vol2col (vol2col.c). The
 * choice is a fixed rule of the shape and the build, never a timing, so
 * two runs compute alike; APPLIANCE_CONV_PATH=im2col (or
 * kern__conv_set_path) keeps every float32 piece on vol2col. The bias
 * gradient is summed here in double whichever path runs. */
#include "op_conv3d.h"

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

static int out_size(int in, int pad, int dil, int ker, int stride)
{
    return (in + 2 * pad - one_if_zero(dil) * (ker - 1) - 1) / one_if_zero(stride) + 1;
}

int op_conv3d_out_d(const op_conv3d_params *p)
{
    return out_size(p->d, p->pad_d, p->dil_d, p->kd, p->stride_d);
}

int op_conv3d_out_h(const op_conv3d_params *p)
{
    return out_size(p->h, p->pad_h, p->dil_h, p->kh, p->stride_h);
}

int op_conv3d_out_w(const op_conv3d_params *p)
{
    return out_size(p->w, p->pad_w, p->dil_w, p->kw, p->stride_w);
}

/* The volume the windows read (the input) and their grid (the output). */
static kern__vol vol_of(const op_conv3d_params *p)
{
    kern__vol g = {
        .c = p->c, .d = p->d, .h = p->h, .w = p->w,
        .kd = p->kd, .kh = p->kh, .kw = p->kw,
        .sd = one_if_zero(p->stride_d), .sh = one_if_zero(p->stride_h),
        .sw = one_if_zero(p->stride_w),
        .pd = p->pad_d, .ph = p->pad_h, .pw = p->pad_w,
        .dd = one_if_zero(p->dil_d), .dh = one_if_zero(p->dil_h), .dw = one_if_zero(p->dil_w),
        .od = op_conv3d_out_d(p), .oh = op_conv3d_out_h(p), .ow = op_conv3d_out_w(p),
    };
    return g;
}

static kern__c3d geom_of(const op_conv3d_params *p)
{
    kern__vol v = vol_of(p);
    kern__c3d g;
    memset(&g, 0, sizeof(g)); /* a cache key: no stray bytes */
    int in[3] = {p->d, p->h, p->w}, out[3] = {v.od, v.oh, v.ow}, ker[3] = {p->kd, p->kh, p->kw};
    int st[3] = {v.sd, v.sh, v.sw}, dl[3] = {v.dd, v.dh, v.dw}, pad[3] = {v.pd, v.ph, v.pw};
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
        /* the padding the last window reaches (below pad where the stride
         * skips the last planes; negative where it skips input too) */
        g.pad_r[a] = (out[a] - 1) * st[a] + (ker[a] - 1) * dl[a] + 1 - in[a] - pad[a];
    }
    return g;
}

/* The float32 pieces that run on oneDNN: those it has fast kernels for,
 * unless the path is forced to im2col (vol2col here). */
static unsigned f32_onednn(const kern__c3d *g)
{
    return kern__conv_get_path() == KERN__CONV_IM2COL ? 0 : kern__c3d_pieces(g, 0);
}

static size_t vol2col_bytes(const op_conv3d_params *p)
{
    kern__vol v = vol_of(p);
    return (size_t)kernels_threads() * kern__vol_per_thread(&v, p->k) * sizeof(float);
}

size_t op_conv3d_workspace(const op_conv3d_params *p)
{
    kern__c3d g = geom_of(p);
    size_t v = vol2col_bytes(p), d = kern__c3d_bytes(&g, 0, KERN__C3D_ALL);
    return v > d ? v : d;
}

void op_conv3d_forward(float *out, const float *in, const float *weight, const float *bias,
                       const op_conv3d_params *p, void *ws, size_t ws_bytes)
{
    /* in (n, c, d, h, w), weight (k, c, kd, kh, kw), bias (k) or NULL,
     * out (n, k, od, oh, ow) */
    kern__c3d g = geom_of(p);
    if ((f32_onednn(&g) & KERN__C3D_FWD) &&
        kern__c3d_forward(0, &g, out, in, weight, bias, ws, ws_bytes))
        return;
    kern__vol v = vol_of(p);
    kern__vol_forward(out, in, weight, bias, &v, p->n, p->k, ws, ws_bytes);
}

/* The backward pieces `want` on oneDNN, together where the workspace holds
 * both, else one at a time: the bits of those that ran. */
static unsigned backward_onednn(int bf16, const kern__c3d *g, unsigned want, float *din,
                                float *dweight, const float *dout, const float *in,
                                const float *weight, void *ws, size_t ws_bytes)
{
    if (!want)
        return 0;
    unsigned done = kern__c3d_backward(bf16, g, want, din, dweight, dout, in, weight, ws, ws_bytes);
    if (!done && want == (KERN__C3D_BWD_W | KERN__C3D_BWD_D)) {
        done |= kern__c3d_backward(bf16, g, KERN__C3D_BWD_W, din, dweight, dout, in, weight, ws,
                                   ws_bytes);
        done |= kern__c3d_backward(bf16, g, KERN__C3D_BWD_D, din, dweight, dout, in, weight, ws,
                                   ws_bytes);
    }
    return done;
}

static size_t out_volume(const op_conv3d_params *p)
{
    return (size_t)op_conv3d_out_d(p) * op_conv3d_out_h(p) * op_conv3d_out_w(p);
}

void op_conv3d_backward(float *din, float *dweight, float *dbias, const float *dout,
                        const float *in, const float *weight, const op_conv3d_params *p,
                        void *ws, size_t ws_bytes)
{
    /* dout (n, k, od, oh, ow), in (n, c, d, h, w), weight (k, c, kd, kh,
     * kw); dweight (k, c, kd, kh, kw), dbias (k) or NULL, din (n, c, d, h,
     * w) or NULL */
    kern__c3d g = geom_of(p);
    kern__vol v = vol_of(p);
    unsigned want = (dweight ? KERN__C3D_BWD_W : 0) | (din ? KERN__C3D_BWD_D : 0);
    unsigned done = backward_onednn(0, &g, f32_onednn(&g) & want, din, dweight, dout, in, weight,
                                    ws, ws_bytes);
    if (dweight && !(done & KERN__C3D_BWD_W))
        kern__vol_wgrad(dweight, NULL, dout, in, &v, p->n, p->k, ws, ws_bytes);
    if (din && !(done & KERN__C3D_BWD_D))
        kern__vol_dgrad(din, dout, weight, &v, p->n, p->k, ws, ws_bytes);
    if (dbias)
        kern__conv_dbias(dbias, dout, p->n, p->k, out_volume(p), 0);
}

size_t op_conv3d_bf16_workspace(const op_conv3d_params *p)
{
    kern__c3d g = geom_of(p);
    return kern__c3d_bf16_workspace(&g, op_conv3d_workspace(p));
}

int op_conv3d_forward_bf16(float *out, const float *in, const float *weight, const float *bias,
                           const op_conv3d_params *p, void *ws, size_t ws_bytes)
{
    kern__c3d g = geom_of(p);
    if (kern__c3d_bf16_here(&g) && kern__c3d_forward(1, &g, out, in, weight, bias, ws, ws_bytes))
        return 1;
    op_conv3d_forward(out, in, weight, bias, p, ws, ws_bytes);
    return 0;
}

int op_conv3d_backward_bf16(float *din, float *dweight, float *dbias, const float *dout,
                            const float *in, const float *weight, const op_conv3d_params *p,
                            void *ws, size_t ws_bytes)
{
    kern__c3d g = geom_of(p);
    if (kern__c3d_backward_bf16(&g, din, dweight, dbias, dout, in, weight, ws, ws_bytes))
        return 1;
    op_conv3d_backward(din, dweight, dbias, dout, in, weight, p, ws, ws_bytes);
    return 0;
}

unsigned op_conv3d_describe(const op_conv3d_params *p, int bf16, char *out, size_t len)
{
    kern__c3d g = geom_of(p);
    if (bf16 && !kern__c3d_bf16_here(&g)) {
        char f32[384];
        unsigned r = op_conv3d_describe(p, 0, f32, sizeof(f32));
        snprintf(out, len, "float32 (%s): %s", kern__c3d_why_f32(p->k, 8), f32);
        return r;
    }
    if (!bf16 && kern__conv_get_path() == KERN__CONV_IM2COL) {
        snprintf(out, len, "vol2col (the path is forced)");
        return 0;
    }
    return kern__c3d_describe(&g, bf16, out, len);
}

void op_conv3d_forward_ref(float *out, const float *in, const float *weight, const float *bias,
                           const op_conv3d_params *p)
{
    /* in (n, c, d, h, w), weight (k, c, kd, kh, kw), bias (k) or NULL,
     * out (n, k, od, oh, ow) */
    kern__vol g = vol_of(p);
    for (int i = 0; i < p->n; i++)
        for (int k = 0; k < p->k; k++)
            for (int oz = 0; oz < g.od; oz++)
                for (int oy = 0; oy < g.oh; oy++)
                    for (int ox = 0; ox < g.ow; ox++) {
                        double acc = bias ? bias[k] : 0.0;
                        for (int c = 0; c < p->c; c++)
                            for (int a = 0; a < p->kd; a++) {
                                int iz = oz * g.sd - g.pd + a * g.dd;
                                if (iz < 0 || iz >= p->d)
                                    continue;
                                for (int b = 0; b < p->kh; b++) {
                                    int iy = oy * g.sh - g.ph + b * g.dh;
                                    if (iy < 0 || iy >= p->h)
                                        continue;
                                    for (int e = 0; e < p->kw; e++) {
                                        int ix = ox * g.sw - g.pw + e * g.dw;
                                        if (ix < 0 || ix >= p->w)
                                            continue;
                                        acc += (double)in[((((size_t)i * p->c + c) * p->d + iz) *
                                                               p->h + iy) * p->w + ix] *
                                               weight[((((size_t)k * p->c + c) * p->kd + a) *
                                                           p->kh + b) * p->kw + e];
                                    }
                                }
                            }
                        out[((((size_t)i * p->k + k) * g.od + oz) * g.oh + oy) * g.ow + ox] =
                            (float)acc;
                    }
}

/* The output index o along one axis whose window tap t reads input index
 * i (i = o * s - pad + t * dil), or -1 when none does. */
static int tap_out(int i, int t, int s, int pad, int dil, int out)
{
    int num = i + pad - t * dil;
    if (num < 0 || num % s)
        return -1;
    return num / s < out ? num / s : -1;
}

void op_conv3d_backward_ref(float *din, float *dweight, float *dbias, const float *dout,
                            const float *in, const float *weight, const op_conv3d_params *p)
{
    /* dout (n, k, od, oh, ow), in (n, c, d, h, w), weight (k, c, kd, kh,
     * kw); dweight, dbias (k) or NULL, din (n, c, d, h, w) or NULL: each
     * value gathered whole, in double */
    kern__vol g = vol_of(p);
    size_t ovol = (size_t)g.od * g.oh * g.ow;
#define DY(i, k, z, y, x) dout[(((size_t)(i) * p->k + (k)) * ovol) + ((size_t)(z) * g.oh + (y)) * g.ow + (x)]
#define X(i, c, z, y, x) in[((((size_t)(i) * p->c + (c)) * p->d + (z)) * p->h + (y)) * p->w + (x)]
#define W(k, c, a, b, e) weight[((((size_t)(k) * p->c + (c)) * p->kd + (a)) * p->kh + (b)) * p->kw + (e)]
    for (int k = 0; dbias && k < p->k; k++) {
        double acc = 0.0;
        for (int i = 0; i < p->n; i++)
            for (size_t j = 0; j < ovol; j++)
                acc += dout[((size_t)i * p->k + k) * ovol + j];
        dbias[k] = (float)acc;
    }
    for (int k = 0; k < p->k; k++)
        for (int c = 0; c < p->c; c++)
            for (int a = 0; a < p->kd; a++)
                for (int b = 0; b < p->kh; b++)
                    for (int e = 0; e < p->kw; e++) {
                        double acc = 0.0;
                        for (int i = 0; i < p->n; i++)
                            for (int oz = 0; oz < g.od; oz++) {
                                int iz = oz * g.sd - g.pd + a * g.dd;
                                if (iz < 0 || iz >= p->d)
                                    continue;
                                for (int oy = 0; oy < g.oh; oy++) {
                                    int iy = oy * g.sh - g.ph + b * g.dh;
                                    if (iy < 0 || iy >= p->h)
                                        continue;
                                    for (int ox = 0; ox < g.ow; ox++) {
                                        int ix = ox * g.sw - g.pw + e * g.dw;
                                        if (ix >= 0 && ix < p->w)
                                            acc += (double)DY(i, k, oz, oy, ox) * X(i, c, iz, iy, ix);
                                    }
                                }
                            }
                        dweight[((((size_t)k * p->c + c) * p->kd + a) * p->kh + b) * p->kw + e] =
                            (float)acc;
                    }
    for (int i = 0; din && i < p->n; i++)
        for (int c = 0; c < p->c; c++)
            for (int iz = 0; iz < p->d; iz++)
                for (int iy = 0; iy < p->h; iy++)
                    for (int ix = 0; ix < p->w; ix++) {
                        double acc = 0.0;
                        for (int a = 0; a < p->kd; a++) {
                            int oz = tap_out(iz, a, g.sd, g.pd, g.dd, g.od);
                            for (int b = 0; oz >= 0 && b < p->kh; b++) {
                                int oy = tap_out(iy, b, g.sh, g.ph, g.dh, g.oh);
                                for (int e = 0; oy >= 0 && e < p->kw; e++) {
                                    int ox = tap_out(ix, e, g.sw, g.pw, g.dw, g.ow);
                                    for (int k = 0; ox >= 0 && k < p->k; k++)
                                        acc += (double)DY(i, k, oz, oy, ox) * W(k, c, a, b, e);
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
