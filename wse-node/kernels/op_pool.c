/* Max pooling keeps the argmax of every window for its backward pass;
 * average pooling divides by the window area or by the number of input
 * pixels it covers (count_include_pad). */
#include "op_pool.h"

#include <string.h>

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

void op_maxpool2d_forward(float *out, uint8_t *argmax, const float *in,
                          const op_pool2d_params *p)
{
    /* in (n, c, h, w); out, argmax (n, c, oh, ow) */
    int oh = op_pool2d_out_h(p), ow = op_pool2d_out_w(p);
    size_t planes = (size_t)p->n * p->c;
    for (size_t pl = 0; pl < planes; pl++) {
        const float *x = in + pl * p->h * p->w;
        float *y = out + pl * oh * ow;
        uint8_t *am = argmax + pl * oh * ow;
        for (int oy = 0; oy < oh; oy++)
            for (int ox = 0; ox < ow; ox++) {
                window win = window_at(p, oy, ox);
                int best = win.y0 * p->w + win.x0;
                float m = x[best];
                for (int iy = win.y0; iy < win.y1; iy++)
                    for (int ix = win.x0; ix < win.x1; ix++) {
                        float v = x[iy * p->w + ix];
                        /* v != v keeps a NaN, as PyTorch does */
                        if (v > m || (v != v && m == m)) {
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

void op_maxpool2d_backward(float *din, const float *dout,
                           const uint8_t *argmax, const op_pool2d_params *p)
{
    /* dout, argmax (n, c, oh, ow); din (n, c, h, w) */
    int oh = op_pool2d_out_h(p), ow = op_pool2d_out_w(p);
    size_t ohw = (size_t)oh * ow;
    size_t hw = (size_t)p->h * p->w, planes = (size_t)p->n * p->c;
    memset(din, 0, sizeof(float) * planes * hw);
    for (size_t pl = 0; pl < planes; pl++) {
        float *dx = din + pl * hw;
        const float *dy = dout + pl * ohw;
        const uint8_t *am = argmax + pl * ohw;
        for (int oy = 0; oy < oh; oy++) {
            int wy = oy * stride_h(p) - p->pad_h;
            for (int ox = 0; ox < ow; ox++) {
                int wx = ox * stride_w(p) - p->pad_w, a = am[oy * ow + ox];
                dx[(wy + a / p->kw) * p->w + wx + a % p->kw] += dy[oy * ow + ox];
            }
        }
    }
}

void op_avgpool2d_forward(float *out, const float *in,
                          const op_pool2d_params *p)
{
    /* in (n, c, h, w); out (n, c, oh, ow) */
    int oh = op_pool2d_out_h(p), ow = op_pool2d_out_w(p);
    size_t planes = (size_t)p->n * p->c;
    for (size_t pl = 0; pl < planes; pl++) {
        const float *x = in + pl * p->h * p->w;
        float *y = out + pl * oh * ow;
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

void op_avgpool2d_backward(float *din, const float *dout,
                           const op_pool2d_params *p)
{
    /* dout (n, c, oh, ow); din (n, c, h, w) */
    int oh = op_pool2d_out_h(p), ow = op_pool2d_out_w(p);
    size_t hw = (size_t)p->h * p->w, planes = (size_t)p->n * p->c;
    memset(din, 0, sizeof(float) * planes * hw);
    for (size_t pl = 0; pl < planes; pl++) {
        float *dx = din + pl * hw;
        const float *dy = dout + pl * oh * ow;
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
