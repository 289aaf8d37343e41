/* Nearest and bilinear upsampling. Source coordinates are worked out per
 * output row and column; the planes are then walked row by row. */
#include "op_upsample.h"

#include <string.h>

static int nearest_src(int dst, int in, int out)
{
    int s = (int)((long long)dst * in / out);
    return s < in ? s : in - 1;
}

/* Bilinear taps of output index dst: i0, i1 = i0 + (i0 < in - 1) and the
 * weight l of i1, PyTorch's area_pixel_compute_source_index. */
static void linear_src(int dst, int in, int out, int *i0, int *i1, float *l)
{
    float scale = (float)in / (float)out;
    float src = scale * (dst + 0.5f) - 0.5f;
    if (src < 0.0f)
        src = 0.0f;
    int a = (int)src;
    if (a > in - 1)
        a = in - 1;
    *i0 = a;
    *i1 = a < in - 1 ? a + 1 : a;
    *l = src - a;
}

void op_upsample_nearest_forward(float *out, const float *in, int n, int c,
                                 int h, int w, int oh, int ow)
{
    /* in (n, c, h, w); out (n, c, oh, ow) */
    size_t planes = (size_t)n * c;
    for (size_t pl = 0; pl < planes; pl++) {
        const float *x = in + pl * h * w;
        float *y = out + pl * oh * ow;
        for (int oy = 0; oy < oh; oy++) {
            const float *row = x + (size_t)nearest_src(oy, h, oh) * w;
            float *dst = y + (size_t)oy * ow;
            for (int ox = 0; ox < ow; ox++)
                dst[ox] = row[nearest_src(ox, w, ow)];
        }
    }
}

void op_upsample_nearest_backward(float *din, const float *dout, int n,
                                  int c, int h, int w, int oh, int ow)
{
    /* dout (n, c, oh, ow); din (n, c, h, w) */
    size_t planes = (size_t)n * c;
    memset(din, 0, sizeof(float) * planes * h * w);
    for (size_t pl = 0; pl < planes; pl++) {
        float *dx = din + pl * h * w;
        const float *dy = dout + pl * oh * ow;
        for (int oy = 0; oy < oh; oy++) {
            float *row = dx + (size_t)nearest_src(oy, h, oh) * w;
            const float *src = dy + (size_t)oy * ow;
            for (int ox = 0; ox < ow; ox++)
                row[nearest_src(ox, w, ow)] += src[ox];
        }
    }
}

/* Row y (of the whole image) of plane pl, as the stripe holds it: its own
 * rows, or the rows just above and below it. */
static float *frame_row(const op_upsample_frame *f, float *x, float *top, float *bottom,
                        size_t pl, int y, int h, int w)
{
    int local = y - f->row0;
    if (local < 0)
        return top + pl * w;
    if (local >= h)
        return bottom + pl * w;
    return x + (size_t)local * w;
}

void op_upsample_bilinear_forward_rows(float *out, const float *in, int n, int c, int h, int w,
                                       int oh, int ow, const op_upsample_frame *f,
                                       const float *top, const float *bottom)
{
    /* in (n, c, h, w); out (n, c, oh, ow); top and bottom (n, c, w) */
    size_t planes = (size_t)n * c;
    int orow0 = (int)((long long)f->row0 * f->full_oh / f->full_h);
    for (size_t pl = 0; pl < planes; pl++) {
        float *x = (float *)in + pl * h * w;
        float *y = out + pl * oh * ow;
        for (int oy = 0; oy < oh; oy++) {
            int y0, y1;
            float ly;
            linear_src(orow0 + oy, f->full_h, f->full_oh, &y0, &y1, &ly);
            const float *r0 = frame_row(f, x, (float *)top, (float *)bottom, pl, y0, h, w);
            const float *r1 = frame_row(f, x, (float *)top, (float *)bottom, pl, y1, h, w);
            float *dst = y + (size_t)oy * ow;
            for (int ox = 0; ox < ow; ox++) {
                int x0, x1;
                float lx;
                linear_src(ox, w, ow, &x0, &x1, &lx);
                dst[ox] = (1.0f - ly) * ((1.0f - lx) * r0[x0] + lx * r0[x1]) +
                          ly * ((1.0f - lx) * r1[x0] + lx * r1[x1]);
            }
        }
    }
}

void op_upsample_bilinear_forward(float *out, const float *in, int n, int c,
                                  int h, int w, int oh, int ow)
{
    op_upsample_frame f = {.row0 = 0, .full_h = h, .full_oh = oh};
    op_upsample_bilinear_forward_rows(out, in, n, c, h, w, oh, ow, &f, NULL, NULL);
}

void op_upsample_bilinear_backward_rows(float *din, const float *dout, int n, int c, int h, int w,
                                        int oh, int ow, const op_upsample_frame *f, float *dtop,
                                        float *dbottom)
{
    /* dout (n, c, oh, ow); din (n, c, h, w); dtop and dbottom (n, c, w) */
    size_t planes = (size_t)n * c;
    int orow0 = (int)((long long)f->row0 * f->full_oh / f->full_h);
    memset(din, 0, sizeof(float) * planes * h * w);
    if (dtop)
        memset(dtop, 0, sizeof(float) * planes * w);
    if (dbottom)
        memset(dbottom, 0, sizeof(float) * planes * w);
    for (size_t pl = 0; pl < planes; pl++) {
        float *dx = din + pl * h * w;
        const float *dy = dout + pl * oh * ow;
        for (int oy = 0; oy < oh; oy++) {
            int y0, y1;
            float ly;
            linear_src(orow0 + oy, f->full_h, f->full_oh, &y0, &y1, &ly);
            float *r0 = frame_row(f, dx, dtop, dbottom, pl, y0, h, w);
            float *r1 = frame_row(f, dx, dtop, dbottom, pl, y1, h, w);
            const float *src = dy + (size_t)oy * ow;
            for (int ox = 0; ox < ow; ox++) {
                int x0, x1;
                float lx;
                linear_src(ox, w, ow, &x0, &x1, &lx);
                float g = src[ox];
                r0[x0] += (1.0f - ly) * (1.0f - lx) * g;
                r0[x1] += (1.0f - ly) * lx * g;
                r1[x0] += ly * (1.0f - lx) * g;
                r1[x1] += ly * lx * g;
            }
        }
    }
}

void op_upsample_bilinear_backward(float *din, const float *dout, int n,
                                   int c, int h, int w, int oh, int ow)
{
    op_upsample_frame f = {.row0 = 0, .full_h = h, .full_oh = oh};
    op_upsample_bilinear_backward_rows(din, dout, n, c, h, w, oh, ow, &f, NULL, NULL);
}
