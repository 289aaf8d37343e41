/* Max pooling keeps the argmax of every window for its backward pass;
 * average pooling divides by the window area or by the number of input
 * pixels it covers (count_include_pad). The planes (sample, channel) are
 * split over the operators' threads. */
#include "op_pool.h"

#include <string.h>

#include "kernels.h"

static int stride_h(const op_pool2d_params *p)
{
    return p->stride_h ? p->stride_h : p->kh;
}

static int stride_w(const op_pool2d_params *p)
{
    return p->stride_w ? p->stride_w : p->kw;
}

int op_pool2d_out_h(const op_pool2d_params *p)
{
    return (p->h + 2 * p->pad_h - p->kh) / stride_h(p) + 1;
}

int op_pool2d_out_w(const op_pool2d_params *p)
{
    return (p->w + 2 * p->pad_w - p->kw) / stride_w(p) + 1;
}

/* The window of output (oy, ox) clipped to the input. */
typedef struct window {
    int y0, y1, x0, x1; /* input rows [y0, y1), columns [x0, x1) */
    int area;           /* divisor for average pooling */
} window;

static window window_at(const op_pool2d_params *p, int oy, int ox)
{
    window win;
    win.y0 = oy * stride_h(p) - p->pad_h;
    win.x0 = ox * stride_w(p) - p->pad_w;
    win.y1 = win.y0 + p->kh;
    win.x1 = win.x0 + p->kw;
    win.area = p->kh * p->kw;
    if (win.y0 < 0)
        win.y0 = 0;
    if (win.x0 < 0)
        win.x0 = 0;
    if (win.y1 > p->h)
        win.y1 = p->h;
    if (win.x1 > p->w)
        win.x1 = p->w;
    if (!p->count_include_pad)
        win.area = (win.y1 - win.y0) * (win.x1 - win.x0);
    return win;
}

/* A call's arguments, for the ranges of planes. */
typedef struct pool_job {
    float *out;
    uint8_t *argmax;
    const float *in;
    const op_pool2d_params *p;
} pool_job;

/* Planes a thread takes at the least: about 64 Ki input elements. */
static size_t plane_grain(const op_pool2d_params *p)
{
    size_t hw = (size_t)p->h * p->w;
    return hw >= 65536 ? 1 : 65536 / (hw ? hw : 1);
}

/* The maximum of a window and where: a NaN wins (and the first of them
 * stays), as in PyTorch; otherwise the first of the largest. */
static inline int max_wins(float v, float m)
{
    return v > m || (v != v && m == m);
}

/* 2x2 windows at stride 2, no padding (the U-Net's): the same comparisons
 * in the same order as the general loop, without its window arithmetic. */
static void maxpool_2x2(const pool_job *j, size_t lo, size_t hi)
{
    const op_pool2d_params *p = j->p;
    int oh = op_pool2d_out_h(p), ow = op_pool2d_out_w(p);
    for (size_t pl = lo; pl < hi; pl++) {
        const float *x = j->in + pl * p->h * p->w;
        float *y = j->out + pl * oh * ow;
        uint8_t *am = j->argmax + pl * oh * ow;
        for (int oy = 0; oy < oh; oy++) {
            const float *r0 = x + (size_t)(2 * oy) * p->w, *r1 = r0 + p->w;
            for (int ox = 0; ox < ow; ox++) {
                float m = r0[2 * ox];
                int best = 0;
                if (max_wins(r0[2 * ox + 1], m)) {
                    m = r0[2 * ox + 1];
                    best = 1;
                }
                if (max_wins(r1[2 * ox], m)) {
                    m = r1[2 * ox];
                    best = 2;
                }
                if (max_wins(r1[2 * ox + 1], m)) {
                    m = r1[2 * ox + 1];
                    best = 3;
                }
                y[oy * ow + ox] = m;
                am[oy * ow + ox] = (uint8_t)best;
            }
        }
    }
}

static void maxpool_fwd(void *ctx, size_t lo, size_t hi)
{
    const pool_job *j = ctx;
    const op_pool2d_params *p = j->p;
    if (p->kh == 2 && p->kw == 2 && stride_h(p) == 2 && stride_w(p) == 2 && !p->pad_h &&
        !p->pad_w) {
        maxpool_2x2(j, lo, hi);
        return;
    }
    int oh = op_pool2d_out_h(p), ow = op_pool2d_out_w(p);
    for (size_t pl = lo; pl < hi; pl++) {
        const float *x = j->in + pl * p->h * p->w;
        float *y = j->out + pl * oh * ow;
        uint8_t *am = j->argmax + pl * oh * ow;
        for (int oy = 0; oy < oh; oy++)
            for (int ox = 0; ox < ow; ox++) {
                window win = window_at(p, oy, ox);
                int best = win.y0 * p->w + win.x0;
                float m = x[best];
                for (int iy = win.y0; iy < win.y1; iy++)
                    for (int ix = win.x0; ix < win.x1; ix++) {
                        float v = x[iy * p->w + ix];
                        if (max_wins(v, m)) {
                            m = v;
                            best = iy * p->w + ix;
                        }
                    }
                y[oy * ow + ox] = m;
                /* where in the (unclipped) window */
                int wy = oy * stride_h(p) - p->pad_h, wx = ox * stride_w(p) - p->pad_w;
                am[oy * ow + ox] = (uint8_t)((best / p->w - wy) * p->kw + (best % p->w - wx));
            }
    }
}

void op_maxpool2d_forward(float *out, uint8_t *argmax, const float *in,
                          const op_pool2d_params *p)
{
    /* in (n, c, h, w); out, argmax (n, c, oh, ow) */
    pool_job j = {.out = out, .argmax = argmax, .in = in, .p = p};
    kernels_for((size_t)p->n * p->c, plane_grain(p), maxpool_fwd, &j);
}

static void maxpool_bwd(void *ctx, size_t lo, size_t hi)
{
    const pool_job *j = ctx;
    const op_pool2d_params *p = j->p;
    int oh = op_pool2d_out_h(p), ow = op_pool2d_out_w(p);
    size_t ohw = (size_t)oh * ow, hw = (size_t)p->h * p->w;
    memset(j->out + lo * hw, 0, sizeof(float) * (hi - lo) * hw);
    for (size_t pl = lo; pl < hi; pl++) {
        float *dx = j->out + pl * hw;
        const float *dy = j->in + pl * ohw;
        const uint8_t *am = j->argmax + pl * ohw;
        for (int oy = 0; oy < oh; oy++) {
            int wy = oy * stride_h(p) - p->pad_h;
            for (int ox = 0; ox < ow; ox++) {
                int wx = ox * stride_w(p) - p->pad_w, a = am[oy * ow + ox];
                dx[(wy + a / p->kw) * p->w + wx + a % p->kw] += dy[oy * ow + ox];
            }
        }
    }
}

void op_maxpool2d_backward(float *din, const float *dout,
                           const uint8_t *argmax, const op_pool2d_params *p)
{
    /* dout, argmax (n, c, oh, ow); din (n, c, h, w) */
    pool_job j = {.out = din, .argmax = (uint8_t *)argmax, .in = dout, .p = p};
    kernels_for((size_t)p->n * p->c, plane_grain(p), maxpool_bwd, &j);
}

static void avgpool_fwd(void *ctx, size_t lo, size_t hi)
{
    const pool_job *j = ctx;
    const op_pool2d_params *p = j->p;
    int oh = op_pool2d_out_h(p), ow = op_pool2d_out_w(p);
    for (size_t pl = lo; pl < hi; pl++) {
        const float *x = j->in + pl * p->h * p->w;
        float *y = j->out + pl * oh * ow;
        for (int oy = 0; oy < oh; oy++)
            for (int ox = 0; ox < ow; ox++) {
                window win = window_at(p, oy, ox);
                float acc = 0.0f;
                for (int iy = win.y0; iy < win.y1; iy++)
                    for (int ix = win.x0; ix < win.x1; ix++)
                        acc += x[iy * p->w + ix];
                y[oy * ow + ox] = win.area > 0 ? acc / win.area : 0.0f;
            }
    }
}

void op_avgpool2d_forward(float *out, const float *in,
                          const op_pool2d_params *p)
{
    /* in (n, c, h, w); out (n, c, oh, ow) */
    pool_job j = {.out = out, .in = in, .p = p};
    kernels_for((size_t)p->n * p->c, plane_grain(p), avgpool_fwd, &j);
}

static void avgpool_bwd(void *ctx, size_t lo, size_t hi)
{
    const pool_job *j = ctx;
    const op_pool2d_params *p = j->p;
    int oh = op_pool2d_out_h(p), ow = op_pool2d_out_w(p);
    size_t hw = (size_t)p->h * p->w;
    memset(j->out + lo * hw, 0, sizeof(float) * (hi - lo) * hw);
    for (size_t pl = lo; pl < hi; pl++) {
        float *dx = j->out + pl * hw;
        const float *dy = j->in + pl * oh * ow;
        for (int oy = 0; oy < oh; oy++)
            for (int ox = 0; ox < ow; ox++) {
                window win = window_at(p, oy, ox);
                if (win.area <= 0)
                    continue;
                float g = dy[oy * ow + ox] / win.area;
                for (int iy = win.y0; iy < win.y1; iy++)
                    for (int ix = win.x0; ix < win.x1; ix++)
                        dx[iy * p->w + ix] += g;
            }
    }
}

void op_avgpool2d_backward(float *din, const float *dout,
                           const op_pool2d_params *p)
{
    /* dout (n, c, oh, ow); din (n, c, h, w) */
    pool_job j = {.out = din, .in = dout, .p = p};
    kernels_for((size_t)p->n * p->c, plane_grain(p), avgpool_bwd, &j);
}
