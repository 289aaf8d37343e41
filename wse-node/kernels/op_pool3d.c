/* 3-D pooling as op_pool.c pools planes: max pooling keeps the argmax of
 * every window (a byte) for its backward pass; average pooling divides by
 * the window's volume or by the input voxels it covers. The volumes
 * (sample, channel) are split over the operators' threads, each computed
 * whole by one, so the thread count changes no value. */
#include "op_pool3d.h"

#include <string.h>

#include "kernels.h"

static int stride_or_window(int s, int k)
{
    return s ? s : k;
}

int op_pool3d_out_d(const op_pool3d_params *p)
{
    return (p->d + 2 * p->pad_d - p->kd) / stride_or_window(p->stride_d, p->kd) + 1;
}

int op_pool3d_out_h(const op_pool3d_params *p)
{
    return (p->h + 2 * p->pad_h - p->kh) / stride_or_window(p->stride_h, p->kh) + 1;
}

int op_pool3d_out_w(const op_pool3d_params *p)
{
    return (p->w + 2 * p->pad_w - p->kw) / stride_or_window(p->stride_w, p->kw) + 1;
}

/* A call's geometry, worked out once. */
typedef struct pool_geom {
    int sd, sh, sw;     /* strides */
    int od, oh, ow;     /* output sizes */
    size_t vol, ovol;   /* d*h*w and od*oh*ow */
} pool_geom;

static pool_geom geom_of(const op_pool3d_params *p)
{
    pool_geom g = {stride_or_window(p->stride_d, p->kd), stride_or_window(p->stride_h, p->kh),
                   stride_or_window(p->stride_w, p->kw), op_pool3d_out_d(p), op_pool3d_out_h(p),
                   op_pool3d_out_w(p), 0, 0};
    g.vol = (size_t)p->d * p->h * p->w;
    g.ovol = (size_t)g.od * g.oh * g.ow;
    return g;
}

/* The window of output (oz, oy, ox): its unclipped corner, and its extent
 * clipped to the input. */
typedef struct window {
    int z, y, x;            /* the corner, possibly in the padding */
    int z0, z1, y0, y1, x0, x1; /* input voxels [z0, z1) x [y0, y1) x [x0, x1) */
    int area;               /* divisor for average pooling */
} window;

static int clip(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

static window window_at(const op_pool3d_params *p, const pool_geom *g, int oz, int oy, int ox)
{
    window win;
    win.z = oz * g->sd - p->pad_d;
    win.y = oy * g->sh - p->pad_h;
    win.x = ox * g->sw - p->pad_w;
    win.z0 = clip(win.z, 0, p->d);
    win.z1 = clip(win.z + p->kd, 0, p->d);
    win.y0 = clip(win.y, 0, p->h);
    win.y1 = clip(win.y + p->kh, 0, p->h);
    win.x0 = clip(win.x, 0, p->w);
    win.x1 = clip(win.x + p->kw, 0, p->w);
    win.area = p->count_include_pad
                   ? p->kd * p->kh * p->kw
                   : (win.z1 - win.z0) * (win.y1 - win.y0) * (win.x1 - win.x0);
    return win;
}

/* A call's arguments, for the ranges of volumes. */
typedef struct pool_job {
    float *out;
    uint8_t *argmax;
    const float *in;
    const op_pool3d_params *p;
    pool_geom g;
} pool_job;

/* Volumes a thread takes at the least: about 64 Ki input elements. */
static size_t vol_grain(const pool_geom *g)
{
    return g->vol >= 65536 ? 1 : 65536 / (g->vol ? g->vol : 1);
}

/* The maximum of a window and where: a NaN wins (and the first of them
 * stays), as in PyTorch; otherwise the first of the largest. */
static inline int max_wins(float v, float m)
{
    return v > m || (v != v && m == m);
}

/* 2x2x2 windows at stride 2, no padding (a 3D U-Net's): the same
 * comparisons in the same order as the general loop, without its window
 * arithmetic. */
static void maxpool_2x2x2(const pool_job *j, size_t lo, size_t hi)
{
    const op_pool3d_params *p = j->p;
    const pool_geom *g = &j->g;
    size_t hw = (size_t)p->h * p->w;
    for (size_t v = lo; v < hi; v++) {
        const float *x = j->in + v * g->vol;
        float *y = j->out + v * g->ovol;
        uint8_t *am = j->argmax + v * g->ovol;
        for (int oz = 0; oz < g->od; oz++)
            for (int oy = 0; oy < g->oh; oy++) {
                const float *r[4] = {x + (size_t)(2 * oz) * hw + (size_t)(2 * oy) * p->w, NULL,
                                     NULL, NULL};
                r[1] = r[0] + p->w;
                r[2] = r[0] + hw;
                r[3] = r[2] + p->w;
                size_t o = ((size_t)oz * g->oh + oy) * g->ow;
                for (int ox = 0; ox < g->ow; ox++) {
                    float m = r[0][2 * ox];
                    int best = 0;
                    for (int t = 1; t < 8; t++) {
                        float v2 = r[t >> 1][2 * ox + (t & 1)];
                        if (max_wins(v2, m)) {
                            m = v2;
                            best = t;
                        }
                    }
                    y[o + ox] = m;
                    am[o + ox] = (uint8_t)best;
                }
            }
    }
}

static void maxpool_fwd(void *ctx, size_t lo, size_t hi)
{
    const pool_job *j = ctx;
    const op_pool3d_params *p = j->p;
    const pool_geom *g = &j->g;
    if (p->kd == 2 && p->kh == 2 && p->kw == 2 && g->sd == 2 && g->sh == 2 && g->sw == 2 &&
        !p->pad_d && !p->pad_h && !p->pad_w) {
        maxpool_2x2x2(j, lo, hi);
        return;
    }
    for (size_t v = lo; v < hi; v++) {
        const float *x = j->in + v * g->vol;
        float *y = j->out + v * g->ovol;
        uint8_t *am = j->argmax + v * g->ovol;
        size_t o = 0;
        for (int oz = 0; oz < g->od; oz++)
            for (int oy = 0; oy < g->oh; oy++)
                for (int ox = 0; ox < g->ow; ox++, o++) {
                    window win = window_at(p, g, oz, oy, ox);
                    int bz = win.z0, by = win.y0, bx = win.x0;
                    float m = x[((size_t)bz * p->h + by) * p->w + bx];
                    for (int iz = win.z0; iz < win.z1; iz++)
                        for (int iy = win.y0; iy < win.y1; iy++) {
                            const float *row = x + ((size_t)iz * p->h + iy) * p->w;
                            for (int ix = win.x0; ix < win.x1; ix++)
                                if (max_wins(row[ix], m)) {
                                    m = row[ix];
                                    bz = iz, by = iy, bx = ix;
                                }
                        }
                    y[o] = m;
                    /* where in the (unclipped) window */
                    am[o] = (uint8_t)(((bz - win.z) * p->kh + (by - win.y)) * p->kw + (bx - win.x));
                }
    }
}

void op_maxpool3d_forward(float *out, uint8_t *argmax, const float *in, const op_pool3d_params *p)
{
    /* in (n, c, d, h, w); out, argmax (n, c, od, oh, ow) */
    pool_job j = {.out = out, .argmax = argmax, .in = in, .p = p, .g = geom_of(p)};
    kernels_for((size_t)p->n * p->c, vol_grain(&j.g), maxpool_fwd, &j);
}

static void maxpool_bwd(void *ctx, size_t lo, size_t hi)
{
    const pool_job *j = ctx;
    const op_pool3d_params *p = j->p;
    const pool_geom *g = &j->g;
    int khw = p->kh * p->kw;
    memset(j->out + lo * g->vol, 0, sizeof(float) * (hi - lo) * g->vol);
    for (size_t v = lo; v < hi; v++) {
        float *dx = j->out + v * g->vol;
        const float *dy = j->in + v * g->ovol;
        const uint8_t *am = j->argmax + v * g->ovol;
        size_t o = 0;
        for (int oz = 0; oz < g->od; oz++) {
            int wz = oz * g->sd - p->pad_d;
            for (int oy = 0; oy < g->oh; oy++) {
                int wy = oy * g->sh - p->pad_h;
                for (int ox = 0; ox < g->ow; ox++, o++) {
                    int wx = ox * g->sw - p->pad_w, a = am[o];
                    int z = wz + a / khw, y = wy + a % khw / p->kw, x = wx + a % p->kw;
                    dx[((size_t)z * p->h + y) * p->w + x] += dy[o];
                }
            }
        }
    }
}

void op_maxpool3d_backward(float *din, const float *dout, const uint8_t *argmax,
                           const op_pool3d_params *p)
{
    /* dout, argmax (n, c, od, oh, ow); din (n, c, d, h, w) */
    pool_job j = {.out = din, .argmax = (uint8_t *)argmax, .in = dout, .p = p, .g = geom_of(p)};
    kernels_for((size_t)p->n * p->c, vol_grain(&j.g), maxpool_bwd, &j);
}

static void avgpool_fwd(void *ctx, size_t lo, size_t hi)
{
    const pool_job *j = ctx;
    const op_pool3d_params *p = j->p;
    const pool_geom *g = &j->g;
    for (size_t v = lo; v < hi; v++) {
        const float *x = j->in + v * g->vol;
        float *y = j->out + v * g->ovol;
        size_t o = 0;
        for (int oz = 0; oz < g->od; oz++)
            for (int oy = 0; oy < g->oh; oy++)
                for (int ox = 0; ox < g->ow; ox++, o++) {
                    window win = window_at(p, g, oz, oy, ox);
                    float acc = 0.0f;
                    for (int iz = win.z0; iz < win.z1; iz++)
                        for (int iy = win.y0; iy < win.y1; iy++) {
                            const float *row = x + ((size_t)iz * p->h + iy) * p->w;
                            for (int ix = win.x0; ix < win.x1; ix++)
                                acc += row[ix];
                        }
                    y[o] = win.area > 0 ? acc / win.area : 0.0f;
                }
    }
}

void op_avgpool3d_forward(float *out, const float *in, const op_pool3d_params *p)
{
    /* in (n, c, d, h, w); out (n, c, od, oh, ow) */
    pool_job j = {.out = out, .in = in, .p = p, .g = geom_of(p)};
    kernels_for((size_t)p->n * p->c, vol_grain(&j.g), avgpool_fwd, &j);
}

static void avgpool_bwd(void *ctx, size_t lo, size_t hi)
{
    const pool_job *j = ctx;
    const op_pool3d_params *p = j->p;
    const pool_geom *g = &j->g;
    memset(j->out + lo * g->vol, 0, sizeof(float) * (hi - lo) * g->vol);
    for (size_t v = lo; v < hi; v++) {
        float *dx = j->out + v * g->vol;
        const float *dy = j->in + v * g->ovol;
        size_t o = 0;
        for (int oz = 0; oz < g->od; oz++)
            for (int oy = 0; oy < g->oh; oy++)
                for (int ox = 0; ox < g->ow; ox++, o++) {
                    window win = window_at(p, g, oz, oy, ox);
                    if (win.area <= 0)
                        continue;
                    float gr = dy[o] / win.area;
                    for (int iz = win.z0; iz < win.z1; iz++)
                        for (int iy = win.y0; iy < win.y1; iy++) {
                            float *row = dx + ((size_t)iz * p->h + iy) * p->w;
                            for (int ix = win.x0; ix < win.x1; ix++)
                                row[ix] += gr;
                        }
                }
    }
}

void op_avgpool3d_backward(float *din, const float *dout, const op_pool3d_params *p)
{
    /* dout (n, c, od, oh, ow); din (n, c, d, h, w) */
    pool_job j = {.out = din, .in = dout, .p = p, .g = geom_of(p)};
    kernels_for((size_t)p->n * p->c, vol_grain(&j.g), avgpool_bwd, &j);
}
