/* Transposed 2-D convolution. The columns live on the input grid (h, w) and
 * the image is the output (k, oh, ow): forward is weight^T times the input
 * band then col2im into the output (the data gradient of a convolution);
 * backward lowers dout with im2col and runs two GEMMs on the band. */
#include "op_conv_transpose2d.h"

#include <cblas.h>
#include <string.h>

#include "im2col.h"

static int one_if_zero(int v)
{
    return v ? v : 1;
}

int op_conv_transpose2d_out_h(const op_conv_transpose2d_params *p)
{
    return (p->h - 1) * one_if_zero(p->stride_h) - 2 * p->pad_h +
           one_if_zero(p->dil_h) * (p->r - 1) + p->out_pad_h + 1;
}

int op_conv_transpose2d_out_w(const op_conv_transpose2d_params *p)
{
    return (p->w - 1) * one_if_zero(p->stride_w) - 2 * p->pad_w +
           one_if_zero(p->dil_w) * (p->s - 1) + p->out_pad_w + 1;
}

/* The output seen as the image of a convolution whose window grid is the
 * input. */
static kern__cols cols_of(const op_conv_transpose2d_params *p)
{
    kern__cols g = {
        .c = p->k,
        .h = op_conv_transpose2d_out_h(p), .w = op_conv_transpose2d_out_w(p),
        .r = p->r, .s = p->s,
        .sh = one_if_zero(p->stride_h), .sw = one_if_zero(p->stride_w),
        .ph = p->pad_h, .pw = p->pad_w,
        .dh = one_if_zero(p->dil_h), .dw = one_if_zero(p->dil_w),
        .oh = p->h, .ow = p->w,
    };
    return g;
}

size_t op_conv_transpose2d_workspace(const op_conv_transpose2d_params *p)
{
    kern__cols g = cols_of(p);
    return kern__cols_workspace(&g);
}

void op_conv_transpose2d_forward(float *out, const float *in,
                                 const float *weight, const float *bias,
                                 const op_conv_transpose2d_params *p,
                                 void *ws)
{
    /* in (n, c, h, w), weight (c, k, r, s), bias (k) or NULL,
     * out (n, k, oh, ow); per band of input rows:
     * col (krs, band) = weight^T (krs, c) * in[:, band], out += col2im(col) */
    kern__cols g = cols_of(p);
    int krs = p->k * p->r * p->s;
    size_t hw = (size_t)p->h * p->w, ohw = (size_t)g.h * g.w;
    int direct = kern__cols_direct(&g), band = kern__cols_band(&g);
    float *col = ws;

    for (int i = 0; i < p->n; i++) {
        const float *x = in + (size_t)i * p->c * hw;
        float *y = out + (size_t)i * p->k * ohw;
        if (bias) {
            for (int k = 0; k < p->k; k++)
                for (size_t j = 0; j < ohw; j++)
                    y[k * ohw + j] = bias[k];
        } else if (!direct) {
            memset(y, 0, sizeof(float) * p->k * ohw);
        }
        for (int y0 = 0; y0 < p->h; y0 += band) {
            int y1 = y0 + band < p->h ? y0 + band : p->h;
            int ncols = (y1 - y0) * p->w;
            const float *xb = x + (size_t)y0 * p->w;
            if (direct) {
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, krs,
                            ncols, p->c, 1.0f, weight, krs, xb, (int)hw,
                            bias ? 1.0f : 0.0f, y + (size_t)y0 * p->w,
                            (int)ohw);
            } else {
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, krs,
                            ncols, p->c, 1.0f, weight, krs, xb, (int)hw,
                            0.0f, col, ncols);
                kern__col2im_add(y, col, &g, y0, y1);
            }
        }
    }
}

void op_conv_transpose2d_backward(float *din, float *dweight, float *dbias,
                                  const float *dout, const float *in,
                                  const float *weight,
                                  const op_conv_transpose2d_params *p,
                                  void *ws)
{
    /* dout (n, k, oh, ow), in (n, c, h, w), weight (c, k, r, s);
     * per band of input rows: col (krs, band) = im2col(dout),
     * dweight (c, krs) += in[:, band] * col^T, din[:, band] = weight * col;
     * dbias (k) = sum of dout over n, oh, ow */
    kern__cols g = cols_of(p);
    int krs = p->k * p->r * p->s;
    size_t hw = (size_t)p->h * p->w, ohw = (size_t)g.h * g.w;
    int direct = kern__cols_direct(&g), band = kern__cols_band(&g);
    float *col = ws;
    float beta = 0.0f;

    if (dbias)
        memset(dbias, 0, sizeof(float) * p->k);
    if (p->n == 0)
        memset(dweight, 0, sizeof(float) * p->c * (size_t)krs);
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
        for (int y0 = 0; y0 < p->h; y0 += band) {
            int y1 = y0 + band < p->h ? y0 + band : p->h;
            int ncols = (y1 - y0) * p->w;
            const float *b = dy + (size_t)y0 * p->w;
            int ldb = (int)ohw;
            if (!direct) {
                kern__im2col(col, dy, &g, y0, y1);
                b = col;
                ldb = ncols;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, p->c, krs,
                        ncols, 1.0f, x + (size_t)y0 * p->w, (int)hw, b, ldb,
                        beta, dweight, krs);
            beta = 1.0f;
            if (dx)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, p->c,
                            ncols, krs, 1.0f, weight, krs, b, ldb, 0.0f,
                            dx + (size_t)y0 * p->w, (int)hw);
        }
    }
}

void op_conv_transpose2d_forward_ref(float *out, const float *in,
                                     const float *weight, const float *bias,
                                     const op_conv_transpose2d_params *p)
{
    /* in (n, c, h, w), weight (c, k, r, s), bias (k) or NULL,
     * out (n, k, oh, ow): every input pixel scatters its kernel */
    kern__cols g = cols_of(p);
    size_t ohw = (size_t)g.h * g.w;
    for (int i = 0; i < p->n; i++)
        for (int k = 0; k < p->k; k++)
            for (size_t j = 0; j < ohw; j++)
                out[((size_t)i * p->k + k) * ohw + j] = bias ? bias[k] : 0.0f;
    for (int i = 0; i < p->n; i++)
        for (int c = 0; c < p->c; c++)
            for (int iy = 0; iy < p->h; iy++)
                for (int ix = 0; ix < p->w; ix++) {
                    float v = in[(((size_t)i * p->c + c) * p->h + iy) * p->w + ix];
                    for (int k = 0; k < p->k; k++)
                        for (int ky = 0; ky < p->r; ky++) {
                            int oy = iy * g.sh - g.ph + ky * g.dh;
                            if (oy < 0 || oy >= g.h)
                                continue;
                            for (int kx = 0; kx < p->s; kx++) {
                                int ox = ix * g.sw - g.pw + kx * g.dw;
                                if (ox < 0 || ox >= g.w)
                                    continue;
                                out[(((size_t)i * p->k + k) * g.h + oy) * g.w + ox] +=
                                    v * weight[(((size_t)c * p->k + k) * p->r + ky) * p->s + kx];
                            }
                        }
                }
}

void op_conv_transpose2d_backward_ref(float *din, float *dweight,
                                      float *dbias, const float *dout,
                                      const float *in, const float *weight,
                                      const op_conv_transpose2d_params *p)
{
    /* dout (n, k, oh, ow), in (n, c, h, w), weight (c, k, r, s);
     * dweight (c, k, r, s), dbias (k) or NULL, din (n, c, h, w) or NULL */
    kern__cols g = cols_of(p);
    size_t ohw = (size_t)g.h * g.w;
    memset(dweight, 0, sizeof(float) * p->c * p->k * (size_t)p->r * p->s);
    if (dbias) {
        for (int k = 0; k < p->k; k++) {
            double acc = 0.0;
            for (int i = 0; i < p->n; i++)
                for (size_t j = 0; j < ohw; j++)
                    acc += dout[((size_t)i * p->k + k) * ohw + j];
            dbias[k] = (float)acc;
        }
    }
    for (int i = 0; i < p->n; i++)
        for (int c = 0; c < p->c; c++)
            for (int iy = 0; iy < p->h; iy++)
                for (int ix = 0; ix < p->w; ix++) {
                    size_t xi = (((size_t)i * p->c + c) * p->h + iy) * p->w + ix;
                    double acc = 0.0;
                    for (int k = 0; k < p->k; k++)
                        for (int ky = 0; ky < p->r; ky++) {
                            int oy = iy * g.sh - g.ph + ky * g.dh;
                            if (oy < 0 || oy >= g.h)
                                continue;
                            for (int kx = 0; kx < p->s; kx++) {
                                int ox = ix * g.sw - g.pw + kx * g.dw;
                                if (ox < 0 || ox >= g.w)
                                    continue;
                                float d = dout[(((size_t)i * p->k + k) * g.h + oy) * g.w + ox];
                                size_t wi = (((size_t)c * p->k + k) * p->r + ky) * p->s + kx;
                                acc += (double)d * weight[wi];
                                dweight[wi] += d * in[xi];
                            }
                        }
                    if (din)
                        din[xi] = (float)acc;
                }
}
