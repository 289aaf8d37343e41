/* 3-D convolutions and transposed convolutions on oneDNN in depth bands.
 * oneDNN's kernels read and write whole operands in their own layouts
 * (conv3d_dnnl.c): at 128^3 a layer of 64 channels in and 32 out copies a
 * GiB. Where convplan_c3d_band_planes says so, a layer runs band by band
 * over the planes of its window grid (a convolution's output, a
 * transposed convolution's input), each band with the volume's planes its
 * windows reach: a convolution of a few planes, whose operands are a
 * band's. What a band gives:
 *  - the grid's planes (a convolution's output, a transposed one's data
 *    gradient): written, each band its own;
 *  - the volume's planes (a convolution's data gradient, a transposed
 *    one's output): added, the planes two bands' windows share taking a
 *    sum from each, from zero (a transposed convolution's bias added
 *    once at the end);
 *  - the weight gradient: the bands' sum, in band order.
 * oneDNN's reorders read a band's planes straight from the caller's
 * tensors (strided descriptors: kern__c3d's x_full, y_full) and add the
 * volume's into them (a reorder with a sum: vol_sum), so a band takes no
 * copy of its own beyond oneDNN's layouts. Bands are a rule of the shape,
 * so two runs compute alike; a layer of one band runs whole. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv3d_dnnl.h"
#include "convplan.h"
#include "kernels.h"
#include "kernels_internal.h"

/* One band: the geometry oneDNN computes, the grid's planes [g0, g1) and
 * the volume's planes [v0, v1) that their windows reach. */
typedef struct c3d_band {
    kern__c3d g;
    int g0, g1, v0, v1;
} c3d_band;

static int grid_planes(const kern__c3d *g)
{
    return g->transposed ? g->in[0] : g->out[0];
}

static int reach_d(const kern__c3d *g)
{
    return (g->ker[0] - 1) * g->dil[0] + 1;
}

static c3d_band band_of(const kern__c3d *g, int g0, int g1)
{
    c3d_band b = {.g = *g, .g0 = g0, .g1 = g1};
    int lo = g0 * g->stride[0] - g->pad_l[0];
    int hi = (g1 - 1) * g->stride[0] - g->pad_l[0] + reach_d(g);
    int vd = g->transposed ? g->out[0] : g->in[0];
    b.v0 = lo > 0 ? lo : 0;
    b.v1 = hi < vd ? hi : vd;
    int *grid = g->transposed ? b.g.in : b.g.out, *vol = g->transposed ? b.g.out : b.g.in;
    grid[0] = g1 - g0;
    vol[0] = b.v1 - b.v0;
    b.g.pad_l[0] = b.v0 - lo;
    b.g.pad_r[0] = hi - b.v1;
    b.g.x_full = g->in[0];
    b.g.y_full = g->out[0];
    b.g.vol_sum = 1;
    return b;
}

/* The budget: the tests' (kern__c3d_set_band_bytes), else
 * APPLIANCE_C3D_BAND_BYTES where set (to measure other band sizes; the
 * plan keeps its own), else the plan's. */
static uint64_t band_budget;

void kern__c3d_set_band_bytes(uint64_t bytes)
{
    band_budget = bytes;
}

static uint64_t budget(void)
{
    if (band_budget)
        return band_budget;
    const char *e = getenv("APPLIANCE_C3D_BAND_BYTES");
    char *end;
    unsigned long long v = e ? strtoull(e, &end, 10) : 0;
    return e && *e && !*end && v ? (uint64_t)v : CONVPLAN_C3D_BAND_BYTES;
}

int kern__c3d_band_planes(const kern__c3d *g)
{
    int gd = grid_planes(g);
    if (g->n <= 0 || gd <= 0)
        return gd > 0 ? gd : 1;
    uint64_t xp = (uint64_t)g->n * (uint64_t)g->c * (uint64_t)g->in[1] * (uint64_t)g->in[2];
    uint64_t yp = (uint64_t)g->n * (uint64_t)g->k * (uint64_t)g->out[1] * (uint64_t)g->out[2];
    int p = convplan_c3d_band_planes(gd, g->transposed ? xp : yp, g->transposed ? yp : xp,
                                     g->stride[0], reach_d(g), budget());
    /* every band must reach a plane of the volume (not padding alone) */
    for (int g0 = 0; p < gd && g0 < gd; g0 += p) {
        c3d_band b = band_of(g, g0, g0 + p < gd ? g0 + p : gd);
        if (b.v1 <= b.v0)
            return gd;
    }
    return p;
}

/* Where a band's planes of the input x (c channels) and of the output y
 * (k channels) begin in the caller's tensors. */
static size_t x_at(const c3d_band *b)
{
    int p0 = b->g.transposed ? b->g0 : b->v0;
    return (size_t)p0 * b->g.in[1] * b->g.in[2];
}

static size_t y_at(const c3d_band *b)
{
    int p0 = b->g.transposed ? b->v0 : b->g0;
    return (size_t)p0 * b->g.out[1] * b->g.out[2];
}

static size_t r64(size_t v)
{
    return (v + 63) & ~(size_t)63;
}

/* oneDNN's most bytes over the bands of p planes for the pieces asked,
 * *dw a band's weight gradient's (the bands' are summed), *have the
 * pieces every band has a fast kernel for. */
static size_t band_sizes(const kern__c3d *g, int p, int bf16, unsigned pieces, size_t *dw,
                         unsigned *have)
{
    int gd = grid_planes(g);
    size_t dnnl = 0;
    *have = KERN__C3D_ALL;
    for (int g0 = 0; g0 < gd; g0 += p) {
        c3d_band b = band_of(g, g0, g0 + p < gd ? g0 + p : gd);
        *have &= kern__c3d_whole_pieces(&b.g, bf16);
        size_t d = (pieces & *have) == pieces ? kern__c3d_whole_bytes(&b.g, bf16, pieces) : 0;
        dnnl = d > dnnl ? d : dnnl;
    }
    *dw = pieces & KERN__C3D_BWD_W
              ? r64((size_t)g->k * g->c * g->ker[0] * g->ker[1] * g->ker[2] * sizeof(float))
              : 0;
    return dnnl;
}

/* A band's weight gradient, then oneDNN's buffers, from the caller's
 * workspace: 0 where a band lacks a piece or the workspace is short. */
static int carve(const kern__c3d *g, int p, int bf16, unsigned pieces, void *ws, size_t ws_bytes,
                 float **dw, void **rest, size_t *rest_bytes)
{
    size_t dwb, avail;
    unsigned have;
    size_t dnnl = band_sizes(g, p, bf16, pieces, &dwb, &have);
    if ((pieces & have) != pieces || !ws)
        return 0;
    char *at = kern__ws_aligned(ws, ws_bytes, &avail);
    if (dwb + dnnl > avail)
        return 0;
    *dw = (float *)at;
    *rest = at + dwb;
    *rest_bytes = avail - dwb;
    return 1;
}

unsigned kern__c3d_pieces(const kern__c3d *g, int bf16)
{
    int p = kern__c3d_band_planes(g);
    if (p >= grid_planes(g))
        return kern__c3d_whole_pieces(g, bf16);
    size_t dw;
    unsigned have;
    band_sizes(g, p, bf16, 0, &dw, &have);
    return have;
}

size_t kern__c3d_bytes(const kern__c3d *g, int bf16, unsigned pieces)
{
    int p = kern__c3d_band_planes(g);
    if (p >= grid_planes(g))
        return kern__c3d_whole_bytes(g, bf16, pieces);
    size_t dw;
    unsigned have;
    /* the forward pass and the backward pieces one after the other; the
     * forward pass's sizes give the pieces every band has too */
    size_t f = band_sizes(g, p, bf16, KERN__C3D_FWD, &dw, &have), b = 0;
    if (!(pieces &= have & KERN__C3D_ALL))
        return 0;
    if (!(pieces & KERN__C3D_FWD))
        f = 0;
    unsigned bw = pieces & (KERN__C3D_BWD_W | KERN__C3D_BWD_D);
    if (bw)
        b = band_sizes(g, p, bf16, bw, &dw, &have) + dw;
    return (f > b ? f : b) + 64;
}

typedef struct bias_job {
    float *out;
    const float *bias;
    int k;
    size_t vol;
} bias_job;

static void bias_range(void *ctx, size_t lo, size_t hi)
{
    const bias_job *j = ctx;
    for (size_t pl = lo; pl < hi; pl++) {
        float *y = j->out + pl * j->vol, b = j->bias[pl % (size_t)j->k];
        for (size_t q = 0; q < j->vol; q++)
            y[q] += b;
    }
}

void kern__add_bias(float *out, const float *bias, int n, int k, size_t vol)
{
    bias_job j = {out, bias, k, vol};
    kernels_for((size_t)n * (size_t)k, vol >= 32768 ? 1 : 32768 / (vol ? vol : 1), bias_range, &j);
}

int kern__c3d_forward(int bf16, const kern__c3d *g, float *out, const float *in,
                      const float *weight, const float *bias, void *ws, size_t ws_bytes)
{
    int p = kern__c3d_band_planes(g), gd = grid_planes(g);
    if (p >= gd)
        return kern__c3d_whole_forward(bf16, g, out, in, weight, bias, ws, ws_bytes);
    float *dw;
    void *rest;
    size_t rest_bytes;
    if (!carve(g, p, bf16, KERN__C3D_FWD, ws, ws_bytes, &dw, &rest, &rest_bytes))
        return 0;
    size_t yvol = (size_t)g->out[0] * g->out[1] * g->out[2];
    if (g->transposed) /* the volume's planes are sums of the bands' */
        kernels_zero(out, (size_t)g->n * g->k * yvol);
    for (int g0 = 0; g0 < gd; g0 += p) {
        c3d_band b = band_of(g, g0, g0 + p < gd ? g0 + p : gd);
        if (!kern__c3d_whole_forward(bf16, &b.g, out + y_at(&b), in + x_at(&b), weight,
                                     g->transposed ? NULL : bias, rest, rest_bytes))
            return 0;
    }
    if (g->transposed && bias)
        kern__add_bias(out, bias, g->n, g->k, yvol);
    return 1;
}

static void add_range(void *ctx, size_t lo, size_t hi)
{
    float *const *ab = ctx;
    for (size_t q = lo; q < hi; q++)
        ab[0][q] += ab[1][q];
}

unsigned kern__c3d_backward(int bf16, const kern__c3d *g, unsigned pieces, float *din,
                            float *dweight, const float *dout, const float *in,
                            const float *weight, void *ws, size_t ws_bytes)
{
    int p = kern__c3d_band_planes(g), gd = grid_planes(g);
    if (p >= gd)
        return kern__c3d_whole_backward(bf16, g, pieces, din, dweight, dout, in, weight, ws,
                                        ws_bytes);
    pieces &= KERN__C3D_BWD_W | KERN__C3D_BWD_D;
    float *dw;
    void *rest;
    size_t rest_bytes;
    if (!pieces || !carve(g, p, bf16, pieces, ws, ws_bytes, &dw, &rest, &rest_bytes))
        return 0;
    size_t nw = (size_t)g->k * g->c * g->ker[0] * g->ker[1] * g->ker[2];
    if ((pieces & KERN__C3D_BWD_D) && !g->transposed) /* the volume's: sums */
        kernels_zero(din, (size_t)g->n * g->c * g->in[0] * g->in[1] * g->in[2]);
    for (int g0 = 0; g0 < gd; g0 += p) {
        c3d_band b = band_of(g, g0, g0 + p < gd ? g0 + p : gd);
        int first = g0 == 0;
        if (kern__c3d_whole_backward(bf16, &b.g, pieces,
                                     pieces & KERN__C3D_BWD_D ? din + x_at(&b) : NULL,
                                     first ? dweight : dw, dout + y_at(&b),
                                     in ? in + x_at(&b) : NULL, /* (NULL: no weight gradient) */
                                     weight, rest, rest_bytes) != pieces)
            return 0;
        if ((pieces & KERN__C3D_BWD_W) && !first) {
            float *ab[2] = {dweight, dw};
            kernels_for(nw, 16384, add_range, ab);
        }
    }
    return pieces;
}

unsigned kern__c3d_describe(const kern__c3d *g, int bf16, char *out, size_t len)
{
    int p = kern__c3d_band_planes(g), gd = grid_planes(g);
    if (p >= gd)
        return kern__c3d_whole_describe(g, bf16, out, len);
    int nb = (gd + p - 1) / p;
    c3d_band b = band_of(g, nb > 2 ? p : 0, nb > 2 ? 2 * p : p);
    int n = snprintf(out, len, "in %d depth bands of %d planes; ", nb, p);
    if (n < 0 || (size_t)n >= len)
        return kern__c3d_pieces(g, bf16);
    kern__c3d_whole_describe(&b.g, bf16, out + n, len - (size_t)n);
    return kern__c3d_pieces(g, bf16);
}

/* ---- mixed precision by the operators' rule, over the bands ---- */

int kern__c3d_bf16_here(const kern__c3d *g)
{
    return g->k >= 8 && kernels_bf16_compute() && kern__c3d_pieces(g, 1) == KERN__C3D_ALL;
}

size_t kern__c3d_bf16_workspace(const kern__c3d *g, size_t f32)
{
    size_t b = kern__c3d_bf16_here(g) ? kern__c3d_bytes(g, 1, KERN__C3D_ALL) : 0;
    return f32 > b ? f32 : b;
}

int kern__c3d_backward_bf16(const kern__c3d *g, float *din, float *dweight, float *dbias,
                            const float *dout, const float *in, const float *weight, void *ws,
                            size_t ws_bytes)
{
    unsigned want = (dweight ? KERN__C3D_BWD_W : 0) | (din ? KERN__C3D_BWD_D : 0);
    /* both pieces in bfloat16 or neither: a layer's gradients in one precision (asked for
     * apart, each where the two are) */
    if (!kern__c3d_bf16_here(g) ||
        kern__c3d_backward(1, g, want, din, dweight, dout, in, weight, ws, ws_bytes) != want)
        return 0;
    if (dbias)
        kern__conv_dbias(dbias, dout, g->n, g->k, (size_t)g->out[0] * g->out[1] * g->out[2], 0);
    return 1;
}

const char *kern__c3d_why_f32(int outputs, int least)
{
    return !kernels_bf16_compute() ? "no bfloat16 path here"
           : outputs < least       ? "fewer than 8 outputs"
                                   : "oneDNN has no fast bfloat16 kernel for every piece";
}
