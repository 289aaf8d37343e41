/* 2-D convolution: per image and per band of output rows, im2col into the
 * caller's workspace and one GEMM; backward reuses the band for the weight
 * gradient, then overwrites it with the data gradient and scatters it back
 * with col2im. 1x1 unit-stride unpadded convolutions skip the lowering. */
#include "op_conv2d.h"

#include <cblas.h>
#include <string.h>

#include "im2col.h"

static int one_if_zero(int v)
{
    return v ? v : 1;
}

int op_conv2d_out_h(const op_conv2d_params *p)
{
    int span = one_if_zero(p->dil_h) * (p->r - 1) + 1;
    return (p->h + 2 * p->pad_h - span) / one_if_zero(p->stride_h) + 1;
}

int op_conv2d_out_w(const op_conv2d_params *p)
{
    int span = one_if_zero(p->dil_w) * (p->s - 1) + 1;
    return (p->w + 2 * p->pad_w - span) / one_if_zero(p->stride_w) + 1;
}

static kern__cols cols_of(const op_conv2d_params *p)
{
    kern__cols g = {
        .c = p->c, .h = p->h, .w = p->w, .r = p->r, .s = p->s,
        .sh = one_if_zero(p->stride_h), .sw = one_if_zero(p->stride_w),
        .ph = p->pad_h, .pw = p->pad_w,
        .dh = one_if_zero(p->dil_h), .dw = one_if_zero(p->dil_w),
        .oh = op_conv2d_out_h(p), .ow = op_conv2d_out_w(p),
    };
    return g;
}

size_t op_conv2d_workspace(const op_conv2d_params *p)
{
    kern__cols g = cols_of(p);
    return kern__cols_workspace(&g);
}

void op_conv2d_forward(float *out, const float *in, const float *weight,
                       const float *bias, const op_conv2d_params *p,
                       void *ws)
{
    /* in (n, c, h, w), weight (k, c, r, s), bias (k) or NULL,
     * out (n, k, oh, ow); per band: out[:, band] = weight (k, crs) *
     * col (crs, band) */
    kern__cols g = cols_of(p);
    int crs = p->c * p->r * p->s;
    size_t ohw = (size_t)g.oh * g.ow, hw = (size_t)p->h * p->w;
    int direct = kern__cols_direct(&g), band = kern__cols_band(&g);
    float *col = ws;

    for (int i = 0; i < p->n; i++) {
        const float *x = in + (size_t)i * p->c * hw;
        float *y = out + (size_t)i * p->k * ohw;
        if (bias)
            for (int k = 0; k < p->k; k++)
                for (size_t j = 0; j < ohw; j++)
                    y[k * ohw + j] = bias[k];
        for (int y0 = 0; y0 < g.oh; y0 += band) {
            int y1 = y0 + band < g.oh ? y0 + band : g.oh;
            int ncols = (y1 - y0) * g.ow;
            const float *b = x + (size_t)y0 * g.ow;
            int ldb = (int)hw;
            if (!direct) {
                kern__im2col(col, x, &g, y0, y1);
                b = col;
                ldb = ncols;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, p->k, ncols,
                        crs, 1.0f, weight, crs, b, ldb, bias ? 1.0f : 0.0f,
                        y + (size_t)y0 * g.ow, (int)ohw);
        }
    }
}

void op_conv2d_backward(float *din, float *dweight, float *dbias,
                        const float *dout, const float *in,
                        const float *weight, const op_conv2d_params *p,
                        void *ws)
{
    /* dout (n, k, oh, ow), in (n, c, h, w), weight (k, c, r, s);
     * dweight (k, crs) = sum over bands of dout[:, band] * col^T,
     * dcol (crs, band) = weight^T * dout[:, band], din = col2im(dcol),
     * dbias (k) = sum of dout over n, oh, ow */
    kern__cols g = cols_of(p);
    int crs = p->c * p->r * p->s;
    size_t ohw = (size_t)g.oh * g.ow, hw = (size_t)p->h * p->w;
    int direct = kern__cols_direct(&g), band = kern__cols_band(&g);
    float *col = ws;
    float beta = 0.0f;

    if (dbias)
        memset(dbias, 0, sizeof(float) * p->k);
    if (p->n == 0)
        memset(dweight, 0, sizeof(float) * p->k * (size_t)crs);
    for (int i = 0; i < p->n; i++) {
        const float *x = in + (size_t)i * p->c * hw;
        const float *dy = dout + (size_t)i * p->k * ohw;
        float *dx = din ? din + (size_t)i * p->c * hw : NULL;
        if (dbias) {
            for (int k = 0; k < p->k; k++) {
                double acc = 0.0;
                for (size_t j = 0; j < ohw; j++)
                    acc += dy[k * ohw + j];
                dbias[k] += (float)acc;
            }
        }
        if (dx && !direct)
            memset(dx, 0, sizeof(float) * p->c * hw);
        for (int y0 = 0; y0 < g.oh; y0 += band) {
            int y1 = y0 + band < g.oh ? y0 + band : g.oh;
            int ncols = (y1 - y0) * g.ow;
            const float *dyb = dy + (size_t)y0 * g.ow;
            const float *b = x + (size_t)y0 * g.ow;
            int ldb = (int)hw;
            if (!direct) {
                kern__im2col(col, x, &g, y0, y1);
                b = col;
                ldb = ncols;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, p->k, crs,
                        ncols, 1.0f, dyb, (int)ohw, b, ldb, beta, dweight,
                        crs);
            beta = 1.0f;
            if (!dx)
                continue;
            if (direct) {
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, crs,
                            ncols, p->k, 1.0f, weight, crs, dyb, (int)ohw,
                            0.0f, dx + (size_t)y0 * g.ow, (int)hw);
            } else {
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, crs,
                            ncols, p->k, 1.0f, weight, crs, dyb, (int)ohw,
                            0.0f, col, ncols);
                kern__col2im_add(dx, col, &g, y0, y1);
            }
        }
    }
}

void op_conv2d_forward_ref(float *out, const float *in, const float *weight,
                           const float *bias, const op_conv2d_params *p)
{
    /* in (n, c, h, w), weight (k, c, r, s), bias (k) or NULL,
     * out (n, k, oh, ow) */
    kern__cols g = cols_of(p);
    for (int i = 0; i < p->n; i++)
        for (int k = 0; k < p->k; k++)
            for (int oy = 0; oy < g.oh; oy++)
                for (int ox = 0; ox < g.ow; ox++) {
                    double acc = bias ? bias[k] : 0.0;
                    for (int c = 0; c < p->c; c++)
                        for (int ky = 0; ky < p->r; ky++) {
                            int iy = oy * g.sh - g.ph + ky * g.dh;
                            if (iy < 0 || iy >= p->h)
                                continue;
                            for (int kx = 0; kx < p->s; kx++) {
                                int ix = ox * g.sw - g.pw + kx * g.dw;
                                if (ix < 0 || ix >= p->w)
                                    continue;
                                acc += (double)in[(((size_t)i * p->c + c) * p->h + iy) * p->w + ix] *
                                       weight[(((size_t)k * p->c + c) * p->r + ky) * p->s + kx];
                            }
                        }
                    out[(((size_t)i * p->k + k) * g.oh + oy) * g.ow + ox] = (float)acc;
                }
}

void op_conv2d_backward_ref(float *din, float *dweight, float *dbias,
                            const float *dout, const float *in,
                            const float *weight, const op_conv2d_params *p)
{
    /* dout (n, k, oh, ow), in (n, c, h, w), weight (k, c, r, s);
     * dweight (k, c, r, s), dbias (k) or NULL, din (n, c, h, w) or NULL */
    kern__cols g = cols_of(p);
    size_t nw = (size_t)p->k * p->c * p->r * p->s;
    memset(dweight, 0, sizeof(float) * nw);
    if (dbias)
        memset(dbias, 0, sizeof(float) * p->k);
    if (din)
        memset(din, 0, sizeof(float) * p->n * p->c * (size_t)p->h * p->w);
    for (int i = 0; i < p->n; i++)
        for (int k = 0; k < p->k; k++)
            for (int oy = 0; oy < g.oh; oy++)
                for (int ox = 0; ox < g.ow; ox++) {
                    float d = dout[(((size_t)i * p->k + k) * g.oh + oy) * g.ow + ox];
                    if (dbias)
                        dbias[k] += d;
                    for (int c = 0; c < p->c; c++)
                        for (int ky = 0; ky < p->r; ky++) {
                            int iy = oy * g.sh - g.ph + ky * g.dh;
                            if (iy < 0 || iy >= p->h)
                                continue;
                            for (int kx = 0; kx < p->s; kx++) {
                                int ix = ox * g.sw - g.pw + kx * g.dw;
                                if (ix < 0 || ix >= p->w)
                                    continue;
                                size_t xi = (((size_t)i * p->c + c) * p->h + iy) * p->w + ix;
                                size_t wi = (((size_t)k * p->c + c) * p->r + ky) * p->s + kx;
                                dweight[wi] += d * in[xi];
                                if (din)
                                    din[xi] += d * weight[wi];
                            }
                        }
                }
}
