/* Transposed 2-D convolution. The columns live on the input grid (h, w) and
 * the image is the output (k, oh, ow): forward is weight^T times the input
 * band then col2im into the output (the data gradient of a convolution);
 * backward lowers dout with im2col and runs two GEMMs on the band. Either
 * pass may run on oneDNN's deconvolution instead (conv_path.h). */
#include "op_conv_transpose2d.h"

#include <assert.h>
#include <string.h>

#include "conv_path.h"
#include "im2col.h"
#include "kernels.h"
#include "kernels_internal.h"

/* How a call is cut into work (convplan.h). */
typedef convplan_convt plan;

static int threads_for(const plan *pl, size_t ws_bytes)
{
    size_t t = ws_bytes / sizeof(float) / pl->per_thread;
    int n = kernels_threads();
    assert(t >= 1);
    return t < (size_t)n ? (int)t : n;
}

size_t op_conv_transpose2d_workspace(const op_conv_transpose2d_params *p)
{
    return convplan_convt_workspace(p, kernels_threads());
}

/* Arguments of the parallel regions of one call. */
typedef struct convt_call {
    const op_conv_transpose2d_params *p;
    const plan *pl;
    float *out;            /* forward: out; backward: din (may be NULL) */
    float *dweight, *dbias;
    const float *in, *dout, *weight, *bias;
    float *ws;             /* workspace base */
} convt_call;

static float *thread_block(const convt_call *cc, int tid)
{
    return cc->ws + (size_t)tid * cc->pl->per_thread;
}

/* Fills a share of the output planes with the bias (or zeros). */
static void fill_task(void *arg, int tid, int nt)
{
    const convt_call *cc = arg;
    const op_conv_transpose2d_params *p = cc->p;
    int u0, u1;
    kern__share(&u0, &u1, p->n * p->k, tid, nt);
    for (int u = u0; u < u1; u++) {
        float *y = cc->out + (size_t)u * cc->pl->ohw;
        float v = cc->bias ? cc->bias[u % p->k] : 0.0f;
        for (size_t j = 0; j < cc->pl->ohw; j++)
            y[j] = v;
    }
}

/* One band of input rows of image i: out += col2im(weight^T * in band). */
static void forward_band(const convt_call *cc, float *col, int i, int y0)
{
    const op_conv_transpose2d_params *p = cc->p;
    const plan *pl = cc->pl;
    int y1 = y0 + pl->band < p->h ? y0 + pl->band : p->h;
    int ncols = (y1 - y0) * p->w;
    const float *xb = cc->in + (size_t)i * p->c * pl->hw + (size_t)y0 * p->w;
    float *y = cc->out + (size_t)i * p->k * pl->ohw;
    if (pl->direct) {
        kern_sgemm(1, 0, pl->krs, ncols,
                    p->c, 1.0f, cc->weight, pl->krs, xb, (int)pl->hw, 1.0f,
                    y + (size_t)y0 * p->w, (int)pl->ohw);
        return;
    }
    kern_sgemm(1, 0, pl->krs, ncols, p->c,
                1.0f, cc->weight, pl->krs, xb, (int)pl->hw, 0.0f, col, ncols);
    kern__col2im_add(y, col, &pl->g, y0, y1);
}

static void forward_task(void *arg, int tid, int nt)
{
    const convt_call *cc = arg;
    const plan *pl = cc->pl;
    float *col = thread_block(cc, tid);
    int u0, u1;
    if (pl->disjoint) {
        kern__share(&u0, &u1, cc->p->n * pl->nb, tid, nt);
        for (int u = u0; u < u1; u++)
            forward_band(cc, col, u / pl->nb, (u % pl->nb) * pl->band);
    } else {
        kern__share(&u0, &u1, cc->p->n, tid, nt);
        for (int i = u0; i < u1; i++)
            for (int b = 0; b < pl->nb; b++)
                forward_band(cc, col, i, b * pl->band);
    }
}

/* The im2col path of the forward pass. */
static void im2col_forward(const void *vp, const kern__conv_bufs *b)
{
    /* in (n, c, h, w), weight (c, k, r, s), bias (k) or NULL,
     * out (n, k, oh, ow); per band of input rows:
     * col (krs, band) = weight^T (krs, c) * in[:, band], out += col2im(col) */
    const op_conv_transpose2d_params *p = vp;
    plan pl = convplan_convt_of(p);
    convt_call cc = {.p = p, .pl = &pl, .out = b->y, .in = b->x,
                     .weight = b->w, .bias = b->b, .ws = b->ws};
    int t = threads_for(&pl, b->ws_bytes);
    int planes = p->n * p->k;
    kern__parallel(fill_task, &cc, planes < t ? planes : t);
    int units = pl.disjoint ? p->n * pl.nb : p->n;
    kern__parallel(forward_task, &cc, units < t ? units : t);
}

void op_conv_transpose2d_forward(float *out, const float *in,
                                 const float *weight, const float *bias,
                                 const op_conv_transpose2d_params *p,
                                 void *ws, size_t ws_bytes)
{
    kern__conv_bufs b = {.x = in, .w = weight, .b = bias, .y = out,
                         .ws = ws, .ws_bytes = ws_bytes};
    kern__conv_run(1, p, bias ? KERN__DNNL_FWD_BIAS : KERN__DNNL_FWD, &b,
                   im2col_forward);
}

/* Per band of input rows: col (krs, band) = im2col(dout),
 * dweight partial (c, krs) += in[:, band] * col^T,
 * din[:, band] = weight (c, krs) * col; dbias over a share of the planes. */
static void backward_task(void *arg, int tid, int nt)
{
    const convt_call *cc = arg;
    const op_conv_transpose2d_params *p = cc->p;
    const plan *pl = cc->pl;
    float *col = thread_block(cc, tid);
    float *dw = col + convplan_round16(pl->col), *db = dw + convplan_round16((size_t)p->c * pl->krs);
    int u0, u1;
    kern__wgrad_begin(dw, (size_t)p->c * pl->krs, db, cc->dout, p->n, p->k, pl->ohw, tid, nt);
    kern__share(&u0, &u1, p->n * pl->nb, tid, nt);
    for (int u = u0; u < u1; u++) {
        int i = u / pl->nb, y0 = (u % pl->nb) * pl->band;
        int y1 = y0 + pl->band < p->h ? y0 + pl->band : p->h;
        int ncols = (y1 - y0) * p->w;
        const float *dy = cc->dout + (size_t)i * p->k * pl->ohw;
        const float *xb = cc->in + (size_t)i * p->c * pl->hw + (size_t)y0 * p->w;
        const float *b = dy + (size_t)y0 * p->w;
        int ldb = (int)pl->ohw;
        if (!pl->direct) {
            kern__im2col(col, dy, &pl->g, y0, y1);
            b = col;
            ldb = ncols;
        }
        kern_sgemm(0, 1, p->c, pl->krs,
                    ncols, 1.0f, xb, (int)pl->hw, b, ldb, 1.0f, dw, pl->krs);
        if (cc->out)
            kern_sgemm(0, 0, p->c,
                        ncols, pl->krs, 1.0f, cc->weight, pl->krs, b, ldb,
                        0.0f, cc->out + (size_t)i * p->c * pl->hw + (size_t)y0 * p->w,
                        (int)pl->hw);
    }
}

/* The im2col path of the backward pass: both gradients from one lowering
 * of dout. */
static void im2col_backward(const void *vp, const kern__conv_bufs *b)
{
    /* dout (n, k, oh, ow), in (n, c, h, w), weight (c, k, r, s);
     * per band of input rows: col (krs, band) = im2col(dout),
     * dweight (c, krs) += in[:, band] * col^T, din[:, band] = weight * col;
     * dbias (k) = sum of dout over n, oh, ow */
    const op_conv_transpose2d_params *p = vp;
    float *dweight = b->dw, *dbias = b->db;
    plan pl = convplan_convt_of(p);
    convt_call cc = {.p = p, .pl = &pl, .out = b->dx, .dweight = dweight,
                     .dbias = dbias, .in = b->x, .dout = b->dy,
                     .weight = b->w, .ws = b->ws};
    int t = threads_for(&pl, b->ws_bytes);
    int units = p->n * pl.nb;
    int used = units < t ? units : t;
    if (used < 1)
        used = 1;
    kern__parallel(backward_task, &cc, used);
    kern__wgrad_sum(dweight, dbias, thread_block(&cc, 0) + convplan_round16(pl.col),
                    pl.per_thread, used, (size_t)p->c * pl.krs, p->k);
}

void op_conv_transpose2d_backward(float *din, float *dweight, float *dbias,
                                  const float *dout, const float *in,
                                  const float *weight,
                                  const op_conv_transpose2d_params *p,
                                  void *ws, size_t ws_bytes)
{
    kern__conv_bufs b = {.x = in, .w = weight, .dy = dout, .dx = din,
                         .dw = dweight, .db = dbias, .ws = ws,
                         .ws_bytes = ws_bytes};
    unsigned job = (dbias ? KERN__DNNL_BWD_W_BIAS : KERN__DNNL_BWD_W) |
                   (din ? KERN__DNNL_BWD_D : 0u);
    kern__conv_run(1, p, job, &b, im2col_backward);
}

void op_conv_transpose2d_forward_ref(float *out, const float *in,
                                     const float *weight, const float *bias,
                                     const op_conv_transpose2d_params *p)
{
    /* in (n, c, h, w), weight (c, k, r, s), bias (k) or NULL,
     * out (n, k, oh, ow): every input pixel scatters its kernel */
    convplan_cols g = convplan_convt_of(p).g;
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
    convplan_cols g = convplan_convt_of(p).g;
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
