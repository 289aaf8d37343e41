/* 2-D convolution: per image and per band of output rows, im2col into the
 * caller's workspace and one GEMM. Backward lowers the input again for the
 * weight gradient; the data gradient is a convolution of dout for unit
 * strides and a GEMM plus col2im otherwise. 1x1 unit-stride unpadded
 * convolutions skip the lowering. Each piece (forward, weight gradient,
 * data gradient) may run on oneDNN instead (conv_path.h). */
#include "op_conv2d.h"

#include <assert.h>
#include <string.h>

#include "conv_path.h"
#include "im2col.h"
#include "kernels.h"
#include "kernels_internal.h"

/* How a call is cut into work (convplan.h). */
typedef convplan_conv2d plan;

/* Threads the workspace has room for, at most kernels_threads(). */
static int threads_for(const plan *pl, size_t ws_bytes)
{
    size_t floats = ws_bytes / sizeof(float);
    assert(floats >= pl->head + pl->per_thread);
    size_t t = (floats - pl->head) / pl->per_thread;
    int n = kernels_threads();
    return t < (size_t)n ? (int)t : n;
}

size_t op_conv2d_workspace(const op_conv2d_params *p)
{
    return convplan_conv2d_f32_workspace(p, kernels_threads());
}

/* Arguments of the parallel regions of one call. */
typedef struct conv_call {
    const op_conv2d_params *p;
    const plan *pl;
    float *out;            /* forward: out; backward: din (may be NULL) */
    float *dweight, *dbias;
    const float *in, *dout, *weight, *bias;
    float *ws;             /* workspace base */
    const op_conv2d_halo *halo; /* a stripe's neighbouring rows, or NULL */
    int r0, r1, rnb;       /* forward: the output rows computed, in rnb bands */
} conv_call;

/* The halo rows of image i of a call, for the lowering. */
static kern__rows halo_of(const conv_call *cc, int i)
{
    const op_conv2d_halo *h = cc->halo;
    kern__rows r = {0};
    if (!h)
        return r;
    size_t plane = (size_t)cc->p->c * cc->p->w;
    r.rows_top = h->rows_top;
    r.rows_bottom = h->rows_bottom;
    r.top = h->top ? h->top + (size_t)i * plane * h->rows_top : NULL;
    r.bottom = h->bottom ? h->bottom + (size_t)i * plane * h->rows_bottom : NULL;
    return r;
}

static float *thread_block(const conv_call *cc, int tid)
{
    return cc->ws + cc->pl->head + (size_t)tid * cc->pl->per_thread;
}

static void forward_task(void *arg, int tid, int nt)
{
    const conv_call *cc = arg;
    const op_conv2d_params *p = cc->p;
    const plan *pl = cc->pl;
    float *col = thread_block(cc, tid);
    int u0, u1;
    kern__share(&u0, &u1, p->n * cc->rnb, tid, nt);
    for (int u = u0; u < u1; u++) {
        int i = u / cc->rnb, y0 = cc->r0 + (u % cc->rnb) * pl->band;
        int y1 = y0 + pl->band < cc->r1 ? y0 + pl->band : cc->r1;
        int ncols = (y1 - y0) * pl->g.ow;
        const float *x = cc->in + (size_t)i * p->c * pl->hw;
        float *y = cc->out + (size_t)i * p->k * pl->ohw + (size_t)y0 * pl->g.ow;
        if (cc->bias)
            for (int k = 0; k < p->k; k++)
                for (int j = 0; j < ncols; j++)
                    y[k * pl->ohw + j] = cc->bias[k];
        const float *b = x + (size_t)y0 * pl->g.ow;
        int ldb = (int)pl->hw;
        if (!pl->direct) {
            kern__rows r = halo_of(cc, i);
            kern__im2col_rows(col, x, cc->halo ? &r : NULL, &pl->g, y0, y1);
            b = col;
            ldb = ncols;
        }
        kern_sgemm(0, 0, p->k, ncols,
                    pl->crs, 1.0f, cc->weight, pl->crs, b, ldb,
                    cc->bias ? 1.0f : 0.0f, y, (int)pl->ohw);
    }
}

/* The im2col path of the forward pass. */
static void forward_with(const op_conv2d_params *p, const kern__conv_bufs *b,
                         const op_conv2d_halo *halo, int r0, int r1)
{
    /* in (n, c, h, w), weight (k, c, r, s), bias (k) or NULL,
     * out (n, k, oh, ow); per band of output rows in [r0, r1):
     * out[:, band] = weight (k, crs) * im2col(in) (crs, band) */
    plan pl = convplan_conv2d_of(p);
    if (r1 < 0)
        r1 = pl.g.oh;
    if (r1 <= r0)
        return;
    conv_call cc = {.p = p, .pl = &pl, .out = b->y, .in = b->x, .weight = b->w, .bias = b->b,
                    .ws = b->ws, .halo = halo, .r0 = r0, .r1 = r1,
                    .rnb = (r1 - r0 + pl.band - 1) / pl.band};
    int units = p->n * cc.rnb, t = threads_for(&pl, b->ws_bytes);
    kern__parallel(forward_task, &cc, units < t ? units : t);
}

static void im2col_forward(const void *vp, const kern__conv_bufs *b)
{
    forward_with(vp, b, NULL, 0, -1);
}

void op_conv2d_forward(float *out, const float *in, const float *weight,
                       const float *bias, const op_conv2d_params *p,
                       void *ws, size_t ws_bytes)
{
    if (kern__conv_get_path() == KERN__CONV_BLOCKED &&
        ((convplan_conv2d_blocked_f32(p) &&
          kern__conv_blocked_forward(0, out, in, weight, bias, p, ws, ws_bytes, NULL, 0, 0)) ||
         kern__conv3x3_direct_forward(out, in, weight, bias, p, ws, ws_bytes)))
        return;
    kern__conv_bufs b = {.x = in, .w = weight, .b = bias, .y = out,
                         .ws = ws, .ws_bytes = ws_bytes};
    kern__conv_run(0, p, bias ? KERN__DNNL_FWD_BIAS : KERN__DNNL_FWD, &b,
                   im2col_forward);
}

/* Weight and bias gradients into the thread's partials: per band,
 * dweight (k, crs) += dout[:, band] * im2col(in)^T; dbias over a share of
 * the (image, channel) planes. */
static void wgrad_task(void *arg, int tid, int nt)
{
    const conv_call *cc = arg;
    const op_conv2d_params *p = cc->p;
    const plan *pl = cc->pl;
    float *col = thread_block(cc, tid);
    float *dw = col + convplan_round16(pl->col), *db = dw + convplan_round16((size_t)p->k * pl->crs);
    int u0, u1;
    kern__wgrad_begin(dw, (size_t)p->k * pl->crs, db, cc->dout, p->n, p->k, pl->ohw, tid, nt);
    kern__share(&u0, &u1, p->n * pl->nb, tid, nt);
    for (int u = u0; u < u1; u++) {
        int i = u / pl->nb, y0 = (u % pl->nb) * pl->band;
        int y1 = y0 + pl->band < pl->g.oh ? y0 + pl->band : pl->g.oh;
        int ncols = (y1 - y0) * pl->g.ow;
        const float *x = cc->in + (size_t)i * p->c * pl->hw;
        const float *dyb = cc->dout + (size_t)i * p->k * pl->ohw + (size_t)y0 * pl->g.ow;
        const float *b = x + (size_t)y0 * pl->g.ow;
        int ldb = (int)pl->hw;
        if (!pl->direct) {
            kern__rows r = halo_of(cc, i);
            kern__im2col_rows(col, x, cc->halo ? &r : NULL, &pl->g, y0, y1);
            b = col;
            ldb = ncols;
        }
        kern_sgemm(0, 1, p->k, pl->crs,
                    ncols, 1.0f, dyb, (int)pl->ohw, b, ldb, 1.0f, dw,
                    pl->crs);
    }
}

/* Data gradient by bands of din rows, as a convolution of dout (unit
 * stride) or, for 1x1 direct, as one GEMM per band. */
static void dgrad_band_task(void *arg, int tid, int nt)
{
    const conv_call *cc = arg;
    const op_conv2d_params *p = cc->p;
    const plan *pl = cc->pl;
    float *col = thread_block(cc, tid);
    int nb = pl->direct ? pl->nb : pl->dnb;
    int band = pl->direct ? pl->band : pl->dband;
    int u0, u1;
    kern__share(&u0, &u1, p->n * nb, tid, nt);
    for (int u = u0; u < u1; u++) {
        int i = u / nb, y0 = (u % nb) * band;
        int y1 = y0 + band < p->h ? y0 + band : p->h;
        int ncols = (y1 - y0) * p->w;
        const float *dy = cc->dout + (size_t)i * p->k * pl->ohw;
        float *dx = cc->out + (size_t)i * p->c * pl->hw + (size_t)y0 * p->w;
        if (pl->direct) {
            kern_sgemm(1, 0, p->c, ncols,
                        p->k, 1.0f, cc->weight, pl->crs,
                        dy + (size_t)y0 * p->w, (int)pl->ohw, 0.0f, dx,
                        (int)pl->hw);
        } else {
            kern__im2col(col, dy, &pl->dg, y0, y1);
            kern_sgemm(0, 0, p->c,
                        ncols, pl->krs, 1.0f, cc->ws, pl->krs, col, ncols,
                        0.0f, dx, (int)pl->hw);
        }
    }
}

/* Data gradient of strided convolutions, whole images per thread (the
 * col2im of neighbouring bands overlap): per band,
 * dcol (crs, band) = weight^T * dout[:, band], din += col2im(dcol). */
static void dgrad_image_task(void *arg, int tid, int nt)
{
    const conv_call *cc = arg;
    const op_conv2d_params *p = cc->p;
    const plan *pl = cc->pl;
    float *col = thread_block(cc, tid);
    int i0, i1;
    kern__share(&i0, &i1, p->n, tid, nt);
    for (int i = i0; i < i1; i++) {
        const float *dy = cc->dout + (size_t)i * p->k * pl->ohw;
        float *dx = cc->out + (size_t)i * p->c * pl->hw;
        memset(dx, 0, sizeof(float) * p->c * pl->hw);
        for (int y0 = 0; y0 < pl->g.oh; y0 += pl->band) {
            int y1 = y0 + pl->band < pl->g.oh ? y0 + pl->band : pl->g.oh;
            int ncols = (y1 - y0) * pl->g.ow;
            kern_sgemm(1, 0, pl->crs,
                        ncols, p->k, 1.0f, cc->weight, pl->crs,
                        dy + (size_t)y0 * pl->g.ow, (int)pl->ohw, 0.0f, col,
                        ncols);
            kern__col2im_add(dx, col, &pl->g, y0, y1);
        }
    }
}

/* The im2col path of the weight and bias gradients: per-thread partials
 * in the workspace, summed in thread order. */
static void wgrad_with(const op_conv2d_params *p, const kern__conv_bufs *b,
                       const op_conv2d_halo *halo)
{
    /* dout (n, k, oh, ow), in (n, c, h, w);
     * dweight (k, crs) = sum over bands of dout[:, band] * im2col(in)^T,
     * dbias (k) = sum of dout over n, oh, ow */
    plan pl = convplan_conv2d_of(p);
    conv_call cc = {.p = p, .pl = &pl, .dweight = b->dw, .dbias = b->db,
                    .in = b->x, .dout = b->dy, .ws = b->ws, .halo = halo};
    int t = threads_for(&pl, b->ws_bytes);
    int units = p->n * pl.nb;
    int used = units < t ? units : t;
    if (used < 1)
        used = 1;

    kern__parallel(wgrad_task, &cc, used);
    kern__wgrad_sum(b->dw, b->db, thread_block(&cc, 0) + convplan_round16(pl.col), pl.per_thread,
                    used, (size_t)p->k * pl.crs, p->k);
}

static void im2col_wgrad(const void *vp, const kern__conv_bufs *b)
{
    wgrad_with(vp, b, NULL);
}

/* The kernel flipped for the unit-stride data gradient, at the head of
 * the workspace: wflip[c][k][r-1-y][s-1-x] = weight[k][c][y][x]. */
static void flip_weights(const op_conv2d_params *p, const float *w, float *wflip)
{
    for (int k = 0; k < p->k; k++)
        for (int c = 0; c < p->c; c++)
            for (int y = 0; y < p->r; y++)
                for (int x = 0; x < p->s; x++)
                    wflip[(((size_t)c * p->k + k) * p->r + (p->r - 1 - y)) * p->s + (p->s - 1 - x)] =
                        w[(((size_t)k * p->c + c) * p->r + y) * p->s + x];
}

/* The im2col path of the data gradient. */
static void im2col_dgrad(const void *vp, const kern__conv_bufs *b)
{
    /* dout (n, k, oh, ow), weight (k, c, r, s), din (n, c, h, w):
     * unit stride: din[:, band] = wflip (c, krs) * im2col(dout),
     * otherwise dcol (crs, band) = weight^T * dout[:, band] and
     * din = col2im(dcol) */
    const op_conv2d_params *p = vp;
    plan pl = convplan_conv2d_of(p);
    conv_call cc = {.p = p, .pl = &pl, .out = b->dx, .dout = b->dy,
                    .weight = b->w, .ws = b->ws};
    int t = threads_for(&pl, b->ws_bytes);
    if (pl.as_conv)
        flip_weights(p, b->w, b->ws);
    if (pl.direct || pl.as_conv) {
        int du = p->n * (pl.direct ? pl.nb : pl.dnb);
        kern__parallel(dgrad_band_task, &cc, du < t ? du : t);
    } else {
        kern__parallel(dgrad_image_task, &cc, p->n < t ? p->n : t);
    }
}

void op_conv2d_backward(float *din, float *dweight, float *dbias,
                        const float *dout, const float *in,
                        const float *weight, const op_conv2d_params *p,
                        void *ws, size_t ws_bytes)
{
    if (kern__conv_get_path() == KERN__CONV_BLOCKED && convplan_conv2d_blocked_f32(p) &&
        kern__conv_blocked_backward(0, din, dweight, dbias, dout, in, weight, p, ws, ws_bytes, NULL,
                                    0, 0))
        return;
    kern__conv_bufs b = {.x = in, .w = weight, .dy = dout, .dx = din,
                         .dw = dweight, .db = dbias, .ws = ws,
                         .ws_bytes = ws_bytes};
    int direct = kern__conv_get_path() == KERN__CONV_BLOCKED;
    if (!(direct && kern__conv3x3_direct_wgrad(dweight, dbias, dout, in, p, ws, ws_bytes)))
        kern__conv_run(0, p, dbias ? KERN__DNNL_BWD_W_BIAS : KERN__DNNL_BWD_W, &b,
                       im2col_wgrad);
    if (din && !(direct && kern__conv3x3_direct_dgrad(din, dout, weight, p, ws, ws_bytes)))
        kern__conv_run(0, p, KERN__DNNL_BWD_D, &b, im2col_dgrad);
}

void op_conv2d_forward_halo(float *out, const float *in, const float *weight,
                            const float *bias, const op_conv2d_params *p,
                            const op_conv2d_halo *halo, void *ws, size_t ws_bytes)
{
    kern__conv_bufs b = {.x = in, .w = weight, .b = bias, .y = out,
                         .ws = ws, .ws_bytes = ws_bytes};
    forward_with(p, &b, halo, 0, -1);
}

void op_conv2d_forward_rows(float *out, const float *in, const float *weight, const float *bias,
                            const op_conv2d_params *p, const op_conv2d_halo *halo, int y0, int y1,
                            void *ws, size_t ws_bytes)
{
    kern__conv_bufs b = {.x = in, .w = weight, .b = bias, .y = out,
                         .ws = ws, .ws_bytes = ws_bytes};
    forward_with(p, &b, halo, y0, y1);
}

/* Rows [y0, y1) of the data gradient beyond the stripe's own rows (y0 < 0
 * or y0 >= h), made from its own output gradient as the unit-stride data
 * gradient makes the rest (im2col_dgrad's as_conv path: the flipped kernel
 * is at the head of ws), into dst (n, c, y1 - y0, w). */
static void halo_dgrad(const op_conv2d_params *p, const plan *pl, const float *dout,
                       float *ws, int y0, int y1, float *dst)
{
    float *col = ws + pl->head;
    size_t rows = (size_t)(y1 - y0);
    for (int i = 0; i < p->n; i++) {
        const float *dy = dout + (size_t)i * p->k * pl->ohw;
        for (int y = y0; y < y1; y++) { /* a row at a time: the band buffer holds one */
            kern__im2col(col, dy, &pl->dg, y, y + 1);
            kern_sgemm(0, 0, p->c, p->w, pl->krs, 1.0f, ws,
                        pl->krs, col, p->w, 0.0f,
                        dst + ((size_t)i * p->c * rows + (size_t)(y - y0)) * p->w,
                        (int)(rows * p->w));
        }
    }
}

void op_conv2d_backward_halo(float *din, float *dweight, float *dbias,
                             const float *dout, const float *in,
                             const float *weight, const op_conv2d_params *p,
                             const op_conv2d_halo *halo, void *ws, size_t ws_bytes)
{
    kern__conv_bufs b = {.x = in, .w = weight, .dy = dout, .dx = din,
                         .dw = dweight, .db = dbias, .ws = ws,
                         .ws_bytes = ws_bytes};
    wgrad_with(p, &b, halo);
    if (!din)
        return;
    plan pl = convplan_conv2d_of(p);
    assert(pl.as_conv); /* unit stride: the flipped kernel stays at the head of ws */
    im2col_dgrad(p, &b);
    if (halo->dtop && halo->rows_top)
        halo_dgrad(p, &pl, dout, ws, -halo->rows_top, 0, halo->dtop);
    if (halo->dbottom && halo->rows_bottom)
        halo_dgrad(p, &pl, dout, ws, p->h, p->h + halo->rows_bottom, halo->dbottom);
}

void op_conv2d_backward_halo_rows(const float *dout, const float *weight,
                                  const op_conv2d_params *p, const op_conv2d_halo *halo,
                                  void *ws, size_t ws_bytes)
{
    plan pl = convplan_conv2d_of(p);
    assert(pl.as_conv && threads_for(&pl, ws_bytes) >= 1);
    flip_weights(p, weight, ws);
    if (halo->dtop && halo->rows_top)
        halo_dgrad(p, &pl, dout, ws, -halo->rows_top, 0, halo->dtop);
    if (halo->dbottom && halo->rows_bottom)
        halo_dgrad(p, &pl, dout, ws, p->h, p->h + halo->rows_bottom, halo->dbottom);
}

void op_conv2d_forward_ref(float *out, const float *in, const float *weight,
                           const float *bias, const op_conv2d_params *p)
{
    /* in (n, c, h, w), weight (k, c, r, s), bias (k) or NULL,
     * out (n, k, oh, ow) */
    convplan_cols g = convplan_conv2d_of(p).g;
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
    convplan_cols g = convplan_conv2d_of(p).g;
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
