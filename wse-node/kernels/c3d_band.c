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
 * Bands are a rule of the shape, so two runs compute alike; a layer of one
 * band runs whole, with no copy. */
#include <stdint.h>
#include <stdio.h>
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
    return b;
}

static uint64_t band_budget = CONVPLAN_C3D_BAND_BYTES;

void kern__c3d_set_band_bytes(uint64_t bytes)
{
    band_budget = bytes ? bytes : CONVPLAN_C3D_BAND_BYTES;
}

int kern__c3d_band_planes(const kern__c3d *g)
{
    int gd = grid_planes(g);
    if (g->n <= 0 || gd <= 0)
        return gd > 0 ? gd : 1;
    uint64_t xp = (uint64_t)g->n * (uint64_t)g->c * (uint64_t)g->in[1] * (uint64_t)g->in[2];
    uint64_t yp = (uint64_t)g->n * (uint64_t)g->k * (uint64_t)g->out[1] * (uint64_t)g->out[2];
    int p = convplan_c3d_band_planes(gd, g->transposed ? xp : yp, g->transposed ? yp : xp,
                                     g->stride[0], reach_d(g), band_budget);
    /* every band must reach a plane of the volume (not padding alone) */
    for (int g0 = 0; p < gd && g0 < gd; g0 += p) {
        c3d_band b = band_of(g, g0, g0 + p < gd ? g0 + p : gd);
        if (b.v1 <= b.v0)
            return gd;
    }
    return p;
}

/* The planes of the input x and the output y a band covers. */
static void x_planes(const c3d_band *b, int *p0, int *p1)
{
    *p0 = b->g.transposed ? b->g0 : b->v0;
    *p1 = b->g.transposed ? b->g1 : b->v1;
}

static void y_planes(const c3d_band *b, int *p0, int *p1)
{
    *p0 = b->g.transposed ? b->v0 : b->g0;
    *p1 = b->g.transposed ? b->v1 : b->g1;
}

/* The buffers of a banded piece, carved from the caller's workspace: the
 * band's input (x), output or its gradient (y), input gradient (dx) and
 * weight gradient (dw), plain float32, then oneDNN's. */
typedef struct c3d_bufs {
    float *x, *y, *dx, *dw;
    void *rest;
    size_t rest_bytes;
} c3d_bufs;

static size_t r64(size_t v)
{
    return (v + 63) & ~(size_t)63;
}

/* The bytes of each buffer for the bands of p planes, and oneDNN's most
 * over them (0 with *ok cleared where a band lacks a piece). */
static size_t band_sizes(const kern__c3d *g, int p, int bf16, unsigned pieces, size_t sz[4],
                         unsigned *have)
{
    int gd = grid_planes(g), xmax = 0, ymax = 0;
    size_t dnnl = 0;
    *have = KERN__C3D_ALL;
    for (int g0 = 0; g0 < gd; g0 += p) {
        c3d_band b = band_of(g, g0, g0 + p < gd ? g0 + p : gd);
        int a0, a1, b0, b1;
        x_planes(&b, &a0, &a1);
        y_planes(&b, &b0, &b1);
        xmax = a1 - a0 > xmax ? a1 - a0 : xmax;
        ymax = b1 - b0 > ymax ? b1 - b0 : ymax;
        *have &= kern__c3d_whole_pieces(&b.g, bf16);
        size_t d = (pieces & *have) == pieces ? kern__c3d_whole_bytes(&b.g, bf16, pieces) : 0;
        dnnl = d > dnnl ? d : dnnl;
    }
    size_t xe = (size_t)g->n * g->c * (size_t)xmax * g->in[1] * g->in[2];
    size_t ye = (size_t)g->n * g->k * (size_t)ymax * g->out[1] * g->out[2];
    sz[0] = r64(xe * sizeof(float));
    sz[1] = r64(ye * sizeof(float));
    sz[2] = pieces & KERN__C3D_BWD_D ? sz[0] : 0;
    sz[3] = pieces & KERN__C3D_BWD_W
                ? r64((size_t)g->k * g->c * g->ker[0] * g->ker[1] * g->ker[2] * sizeof(float))
                : 0;
    return dnnl;
}

static int carve(const kern__c3d *g, int p, int bf16, unsigned pieces, void *ws, size_t ws_bytes,
                 c3d_bufs *bf)
{
    size_t sz[4], avail;
    unsigned have;
    size_t dnnl = band_sizes(g, p, bf16, pieces, sz, &have);
    if ((pieces & have) != pieces || !ws)
        return 0;
    char *at = kern__ws_aligned(ws, ws_bytes, &avail);
    size_t mine = sz[0] + sz[1] + sz[2] + sz[3];
    if (mine + dnnl > avail)
        return 0;
    bf->x = (float *)at;
    bf->y = (float *)(at + sz[0]);
    bf->dx = (float *)(at + sz[0] + sz[1]);
    bf->dw = (float *)(at + sz[0] + sz[1] + sz[2]);
    bf->rest = at + mine;
    bf->rest_bytes = avail - mine;
    return 1;
}

unsigned kern__c3d_pieces(const kern__c3d *g, int bf16)
{
    int p = kern__c3d_band_planes(g);
    if (p >= grid_planes(g))
        return kern__c3d_whole_pieces(g, bf16);
    size_t sz[4];
    unsigned have;
    band_sizes(g, p, bf16, 0, sz, &have);
    return have;
}

size_t kern__c3d_bytes(const kern__c3d *g, int bf16, unsigned pieces)
{
    int p = kern__c3d_band_planes(g);
    if (p >= grid_planes(g))
        return kern__c3d_whole_bytes(g, bf16, pieces);
    size_t sz[4];
    unsigned have;
    pieces &= KERN__C3D_ALL;
    band_sizes(g, p, bf16, 0, sz, &have);
    if (!(pieces &= have))
        return 0;
    /* the forward pass and the backward pieces one after the other */
    size_t f = 0, b = 0;
    if (pieces & KERN__C3D_FWD)
        f = band_sizes(g, p, bf16, KERN__C3D_FWD, sz, &have) + sz[0] + sz[1];
    unsigned bw = pieces & (KERN__C3D_BWD_W | KERN__C3D_BWD_D);
    if (bw)
        b = band_sizes(g, p, bf16, bw, sz, &have) + sz[0] + sz[1] + sz[2] + sz[3];
    return (f > b ? f : b) + 64;
}

/* Planes [p0, p0 + bd) of a tensor of rows (sample, channel) of fd planes
 * of hw values, to or from a band of rows of bd planes. */
enum { PLANES_GATHER, PLANES_PUT, PLANES_ADD };

typedef struct planes_job {
    float *full;
    float *band;
    size_t fd, bd, hw, p0;
    int how;
} planes_job;

static void planes_range(void *ctx, size_t lo, size_t hi)
{
    const planes_job *j = ctx;
    size_t len = j->bd * j->hw;
    for (size_t r = lo; r < hi; r++) {
        float *f = j->full + (r * j->fd + j->p0) * j->hw, *b = j->band + r * len;
        if (j->how == PLANES_GATHER)
            memcpy(b, f, len * sizeof(float));
        else if (j->how == PLANES_PUT)
            memcpy(f, b, len * sizeof(float));
        else
            for (size_t q = 0; q < len; q++)
                f[q] += b[q];
    }
}

static void planes(float *full, const float *band, size_t rows, int fd, int p0, int p1, size_t hw,
                   int how)
{
    planes_job j = {full, (float *)(uintptr_t)band, (size_t)fd, (size_t)(p1 - p0), hw, (size_t)p0,
                    how};
    size_t len = j.bd * hw;
    uint64_t t0 = kern__now_ns();
    kernels_for(rows, len >= 65536 ? 1 : 65536 / (len ? len : 1), planes_range, &j);
    kern__layout_since(t0);
}

/* Tensor x (the input, c channels) or y (the output, k channels) of g:
 * its rows, depth and plane size. */
static size_t rows_of(const kern__c3d *g, int y)
{
    return (size_t)g->n * (size_t)(y ? g->k : g->c);
}

static size_t hw_of(const kern__c3d *g, int y)
{
    return y ? (size_t)g->out[1] * g->out[2] : (size_t)g->in[1] * g->in[2];
}

static void gather(float *band, const float *full, const kern__c3d *g, const c3d_band *b, int y)
{
    int p0, p1;
    (y ? y_planes : x_planes)(b, &p0, &p1);
    planes((float *)(uintptr_t)full, band, rows_of(g, y), y ? g->out[0] : g->in[0], p0, p1,
           hw_of(g, y), PLANES_GATHER);
}

static void put(float *full, const float *band, const kern__c3d *g, const c3d_band *b, int y,
                int add)
{
    int p0, p1;
    (y ? y_planes : x_planes)(b, &p0, &p1);
    planes(full, band, rows_of(g, y), y ? g->out[0] : g->in[0], p0, p1, hw_of(g, y),
           add ? PLANES_ADD : PLANES_PUT);
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
    c3d_bufs bf;
    if (!carve(g, p, bf16, KERN__C3D_FWD, ws, ws_bytes, &bf))
        return 0;
    size_t yvol = (size_t)g->out[0] * g->out[1] * g->out[2];
    if (g->transposed) /* the volume's planes are sums of the bands' */
        memset(out, 0, rows_of(g, 1) * yvol * sizeof(float));
    for (int g0 = 0; g0 < gd; g0 += p) {
        c3d_band b = band_of(g, g0, g0 + p < gd ? g0 + p : gd);
        gather(bf.x, in, g, &b, 0);
        if (!kern__c3d_whole_forward(bf16, &b.g, bf.y, bf.x, weight, g->transposed ? NULL : bias,
                                     bf.rest, bf.rest_bytes))
            return 0;
        put(out, bf.y, g, &b, 1, g->transposed);
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
    c3d_bufs bf;
    if (!pieces || !carve(g, p, bf16, pieces, ws, ws_bytes, &bf))
        return 0;
    size_t nw = (size_t)g->k * g->c * g->ker[0] * g->ker[1] * g->ker[2];
    if ((pieces & KERN__C3D_BWD_D) && !g->transposed) /* the volume's: sums */
        memset(din, 0, rows_of(g, 0) * (size_t)g->in[0] * hw_of(g, 0) * sizeof(float));
    for (int g0 = 0; g0 < gd; g0 += p) {
        c3d_band b = band_of(g, g0, g0 + p < gd ? g0 + p : gd);
        gather(bf.y, dout, g, &b, 1);
        gather(bf.x, in, g, &b, 0);
        int first = g0 == 0;
        if (kern__c3d_whole_backward(bf16, &b.g, pieces, bf.dx, first ? dweight : bf.dw, bf.y,
                                     bf.x, weight, bf.rest, bf.rest_bytes) != pieces)
            return 0;
        if ((pieces & KERN__C3D_BWD_W) && !first) {
            float *ab[2] = {dweight, bf.dw};
            kernels_for(nw, 16384, add_range, ab);
        }
        if (pieces & KERN__C3D_BWD_D)
            put(din, bf.dx, g, &b, 0, !g->transposed);
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
