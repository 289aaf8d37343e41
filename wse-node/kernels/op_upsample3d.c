/* Nearest and trilinear upsampling of volumes, as op_upsample.c resizes
 * planes: source coordinates worked out per output plane, row and column,
 * the volumes (sample, channel) split over the operators' threads, each
 * whole on one thread (the backward passes scatter within a volume only),
 * so the thread count changes no value. */
#include "op_upsample3d.h"

#include <string.h>

#include "kernels.h"

static int nearest_src(int dst, int in, int out)
{
    int s = (int)((long long)dst * in / out);
    return s < in ? s : in - 1;
}

/* Linear taps of output index dst: i0, i1 = i0 + (i0 < in - 1) and the
 * weight l of i1 (PyTorch's area_pixel_compute_source_index with
 * align_corners=False, in float as PyTorch computes it for float). */
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

/* A call's arguments, for the ranges of volumes. A slab's call
 * (trilinear) places its planes in the whole volume's: plane z of its
 * input is the whole's plane z0 + z, output plane oz the whole's
 * oz0 + oz, of fd input and fod output planes; the planes just above and
 * below the slab are top and bottom ((n, c, h, w) each, NULL at the
 * volume's edges). */
typedef struct up_job {
    float *out;
    const float *in;
    int d, h, w, od, oh, ow;
    int z0, oz0, fd, fod;
    float *top, *bottom;
} up_job;

/* Input plane z (a slab's: -1 is the plane above it, d the one below) of
 * volume v whose own planes start at x. */
static float *plane_of(const up_job *j, float *x, size_t v, int z)
{
    size_t hw = (size_t)j->h * j->w;
    if (z < 0)
        return j->top + v * hw;
    if (z >= j->d)
        return j->bottom + v * hw;
    return x + (size_t)z * hw;
}

static size_t vol_grain(size_t vol)
{
    return vol >= 32768 ? 1 : 32768 / (vol ? vol : 1);
}

static void nearest_fwd(void *ctx, size_t lo, size_t hi)
{
    const up_job *j = ctx;
    size_t vol = (size_t)j->d * j->h * j->w, ovol = (size_t)j->od * j->oh * j->ow;
    for (size_t v = lo; v < hi; v++) {
        const float *x = j->in + v * vol;
        float *y = j->out + v * ovol;
        for (int oz = 0; oz < j->od; oz++)
            for (int oy = 0; oy < j->oh; oy++) {
                const float *row = x + ((size_t)nearest_src(oz, j->d, j->od) * j->h +
                                        nearest_src(oy, j->h, j->oh)) * j->w;
                float *dst = y + ((size_t)oz * j->oh + oy) * j->ow;
                for (int ox = 0; ox < j->ow; ox++)
                    dst[ox] = row[nearest_src(ox, j->w, j->ow)];
            }
    }
}

void op_upsample3d_nearest_forward(float *out, const float *in, int n, int c, int d, int h, int w,
                                   int od, int oh, int ow)
{
    /* in (n, c, d, h, w); out (n, c, od, oh, ow) */
    up_job j = {out, in, d, h, w, od, oh, ow, 0, 0, d, od, NULL, NULL};
    kernels_for((size_t)n * c, vol_grain((size_t)od * oh * ow), nearest_fwd, &j);
}

static void nearest_bwd(void *ctx, size_t lo, size_t hi)
{
    const up_job *j = ctx;
    size_t vol = (size_t)j->d * j->h * j->w, ovol = (size_t)j->od * j->oh * j->ow;
    memset(j->out + lo * vol, 0, sizeof(float) * (hi - lo) * vol);
    for (size_t v = lo; v < hi; v++) {
        float *dx = j->out + v * vol;
        const float *dy = j->in + v * ovol;
        for (int oz = 0; oz < j->od; oz++)
            for (int oy = 0; oy < j->oh; oy++) {
                float *row = dx + ((size_t)nearest_src(oz, j->d, j->od) * j->h +
                                   nearest_src(oy, j->h, j->oh)) * j->w;
                const float *src = dy + ((size_t)oz * j->oh + oy) * j->ow;
                for (int ox = 0; ox < j->ow; ox++)
                    row[nearest_src(ox, j->w, j->ow)] += src[ox];
            }
    }
}

void op_upsample3d_nearest_backward(float *din, const float *dout, int n, int c, int d, int h,
                                    int w, int od, int oh, int ow)
{
    /* dout (n, c, od, oh, ow); din (n, c, d, h, w) */
    up_job j = {din, dout, d, h, w, od, oh, ow, 0, 0, d, od, NULL, NULL};
    kernels_for((size_t)n * c, vol_grain((size_t)od * oh * ow), nearest_bwd, &j);
}

static void trilinear_fwd(void *ctx, size_t lo, size_t hi)
{
    const up_job *j = ctx;
    size_t vol = (size_t)j->d * j->h * j->w, ovol = (size_t)j->od * j->oh * j->ow;
    for (size_t v = lo; v < hi; v++) {
        float *x = (float *)j->in + v * vol; /* read only */
        float *y = j->out + v * ovol;
        for (int oz = 0; oz < j->od; oz++) {
            int z0, z1;
            float lz;
            linear_src(j->oz0 + oz, j->fd, j->fod, &z0, &z1, &lz);
            const float *p0 = plane_of(j, x, v, z0 - j->z0), *p1 = plane_of(j, x, v, z1 - j->z0);
            for (int oy = 0; oy < j->oh; oy++) {
                int y0, y1;
                float ly;
                linear_src(oy, j->h, j->oh, &y0, &y1, &ly);
                const float *r00 = p0 + (size_t)y0 * j->w, *r01 = p0 + (size_t)y1 * j->w;
                const float *r10 = p1 + (size_t)y0 * j->w, *r11 = p1 + (size_t)y1 * j->w;
                float *dst = y + ((size_t)oz * j->oh + oy) * j->ow;
                for (int ox = 0; ox < j->ow; ox++) {
                    int x0, x1;
                    float lx;
                    linear_src(ox, j->w, j->ow, &x0, &x1, &lx);
                    /* PyTorch's nesting: planes of rows of columns */
                    float a = (1.0f - ly) * ((1.0f - lx) * r00[x0] + lx * r00[x1]) +
                              ly * ((1.0f - lx) * r01[x0] + lx * r01[x1]);
                    float b = (1.0f - ly) * ((1.0f - lx) * r10[x0] + lx * r10[x1]) +
                              ly * ((1.0f - lx) * r11[x0] + lx * r11[x1]);
                    dst[ox] = (1.0f - lz) * a + lz * b;
                }
            }
        }
    }
}

void op_upsample3d_trilinear_forward(float *out, const float *in, int n, int c, int d, int h,
                                     int w, int od, int oh, int ow)
{
    /* in (n, c, d, h, w); out (n, c, od, oh, ow) */
    up_job j = {out, in, d, h, w, od, oh, ow, 0, 0, d, od, NULL, NULL};
    kernels_for((size_t)n * c, vol_grain((size_t)od * oh * ow), trilinear_fwd, &j);
}

void op_upsample3d_trilinear_forward_slab(float *out, const float *in, int n, int c, int d,
                                          int h, int w, int od, int oh, int ow,
                                          const op_upsample_frame *f, const float *top,
                                          const float *bottom)
{
    up_job j = {out, in, d, h, w, od, oh, ow, f->row0, (int)((long long)f->row0 * od / d),
                f->full_h, f->full_oh, (float *)top, (float *)bottom};
    kernels_for((size_t)n * c, vol_grain((size_t)od * oh * ow), trilinear_fwd, &j);
}

static void trilinear_bwd(void *ctx, size_t lo, size_t hi)
{
    const up_job *j = ctx;
    size_t vol = (size_t)j->d * j->h * j->w, ovol = (size_t)j->od * j->oh * j->ow;
    size_t hw = (size_t)j->h * j->w;
    memset(j->out + lo * vol, 0, sizeof(float) * (hi - lo) * vol);
    if (j->top)
        memset(j->top + lo * hw, 0, sizeof(float) * (hi - lo) * hw);
    if (j->bottom)
        memset(j->bottom + lo * hw, 0, sizeof(float) * (hi - lo) * hw);
    for (size_t v = lo; v < hi; v++) {
        float *dx = j->out + v * vol;
        const float *dy = j->in + v * ovol;
        for (int oz = 0; oz < j->od; oz++) {
            int z0, z1;
            float lz;
            linear_src(j->oz0 + oz, j->fd, j->fod, &z0, &z1, &lz);
            float *p0 = plane_of(j, dx, v, z0 - j->z0), *p1 = plane_of(j, dx, v, z1 - j->z0);
            for (int oy = 0; oy < j->oh; oy++) {
                int y0, y1;
                float ly;
                linear_src(oy, j->h, j->oh, &y0, &y1, &ly);
                float *r00 = p0 + (size_t)y0 * j->w, *r01 = p0 + (size_t)y1 * j->w;
                float *r10 = p1 + (size_t)y0 * j->w, *r11 = p1 + (size_t)y1 * j->w;
                const float *src = dy + ((size_t)oz * j->oh + oy) * j->ow;
                for (int ox = 0; ox < j->ow; ox++) {
                    int x0, x1;
                    float lx;
                    linear_src(ox, j->w, j->ow, &x0, &x1, &lx);
                    float g0 = (1.0f - lz) * src[ox], g1 = lz * src[ox];
                    r00[x0] += g0 * (1.0f - ly) * (1.0f - lx);
                    r00[x1] += g0 * (1.0f - ly) * lx;
                    r01[x0] += g0 * ly * (1.0f - lx);
                    r01[x1] += g0 * ly * lx;
                    r10[x0] += g1 * (1.0f - ly) * (1.0f - lx);
                    r10[x1] += g1 * (1.0f - ly) * lx;
                    r11[x0] += g1 * ly * (1.0f - lx);
                    r11[x1] += g1 * ly * lx;
                }
            }
        }
    }
}

void op_upsample3d_trilinear_backward(float *din, const float *dout, int n, int c, int d, int h,
                                      int w, int od, int oh, int ow)
{
    /* dout (n, c, od, oh, ow); din (n, c, d, h, w) */
    up_job j = {din, dout, d, h, w, od, oh, ow, 0, 0, d, od, NULL, NULL};
    kernels_for((size_t)n * c, vol_grain((size_t)od * oh * ow), trilinear_bwd, &j);
}

void op_upsample3d_trilinear_backward_slab(float *din, const float *dout, int n, int c, int d,
                                           int h, int w, int od, int oh, int ow,
                                           const op_upsample_frame *f, float *dtop,
                                           float *dbottom)
{
    up_job j = {din, dout, d, h, w, od, oh, ow, f->row0, (int)((long long)f->row0 * od / d),
                f->full_h, f->full_oh, dtop, dbottom};
    kernels_for((size_t)n * c, vol_grain((size_t)od * oh * ow), trilinear_bwd, &j);
}
