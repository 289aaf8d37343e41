/* 3-D convolutions as GEMMs: the windows of a band of output rows lowered
 * to columns (vol2col) in the caller's workspace, one GEMM a band, as
 * op_conv2d.c does in 2-D. A band is a run of the grid's (depth, row)
 * pairs, so a band may cross from one output slice to the next. */
#include "vol2col.h"

#include <assert.h>
#include <string.h>

#include "convplan.h"
#include "im2col.h"
#include "kernels.h"
#include "kernels_internal.h"

/* Bytes of columns a band aims at per thread: cache-sized, as 2-D's. */
#define VOL_COL_BUDGET ((size_t)1 << 20)

/* A call's shape cut into work. */
typedef struct vol_plan {
    size_t krs;      /* kd * kh * kw */
    size_t crs;      /* c * krs: the GEMMs' inner size */
    size_t vol;      /* d * h * w: floats of a volume's channel */
    size_t grid;     /* od * oh * ow: floats of an output channel */
    int rows;        /* od * oh: the grid's rows */
    int band, nb;    /* grid rows a band, bands an image */
    int direct;      /* 1x1x1 window, unit strides, no padding: the
                      * columns are the volume itself */
    size_t col;      /* floats of a band of columns */
    size_t per_thread;
} vol_plan;

static vol_plan plan_of(const kern__vol *g, int k)
{
    vol_plan pl;
    pl.krs = (size_t)g->kd * g->kh * g->kw;
    pl.crs = (size_t)g->c * pl.krs;
    pl.vol = (size_t)g->d * g->h * g->w;
    pl.grid = (size_t)g->od * g->oh * g->ow;
    pl.rows = g->od * g->oh;
    pl.direct = pl.krs == 1 && g->sd == 1 && g->sh == 1 && g->sw == 1 && !g->pd && !g->ph &&
                !g->pw;
    size_t row = pl.crs * (size_t)g->ow * sizeof(float);
    size_t band = row ? VOL_COL_BUDGET / row : 1;
    pl.band = band < 1 ? 1 : band > (size_t)pl.rows ? pl.rows : (int)band;
    pl.nb = (pl.rows + pl.band - 1) / pl.band;
    pl.col = pl.direct ? 0 : pl.crs * (size_t)pl.band * g->ow;
    pl.per_thread = convplan_round16(convplan_round16(pl.col) + convplan_round16((size_t)k * pl.crs) +
                                     (size_t)k);
    return pl;
}

size_t kern__vol_per_thread(const kern__vol *g, int k)
{
    return plan_of(g, k).per_thread;
}

/* Threads the workspace has room for, at most kernels_threads(). */
static int threads_for(const vol_plan *pl, size_t ws_bytes, int units)
{
    size_t t = ws_bytes / sizeof(float) / pl->per_thread;
    int n = kernels_threads();
    assert(t >= 1);
    if (t < (size_t)n)
        n = (int)t;
    return units < n ? (units < 1 ? 1 : units) : n;
}

/* The grid positions [*x0, *x1) of ow whose tap x * s + off lies in [0,
 * w). */
static void valid_range(int ow, int s, int off, int w, int *x0, int *x1)
{
    int lo = off >= 0 ? 0 : (-off + s - 1) / s;
    int hi = w - 1 - off < 0 ? 0 : (w - 1 - off) / s + 1;
    if (hi > ow)
        hi = ow;
    if (lo > hi)
        lo = hi;
    *x0 = lo;
    *x1 = hi;
}

/* col is (c*kd*kh*kw, (q1 - q0) * ow): the windows of grid rows [q0, q1)
 * (row q is slice q / oh, row q % oh) of img (c, d, h, w), zero where they
 * fall on padding; with add, the adjoint: every entry of col added into
 * the voxel it reads (padding dropped). */
static void lower(float *col, float *img, const kern__vol *g, const vol_plan *pl, int q0, int q1,
                  int add)
{
    float *cp = col;
    for (int ch = 0; ch < g->c; ch++)
        for (int a = 0; a < g->kd; a++)
            for (int b = 0; b < g->kh; b++)
                for (int e = 0; e < g->kw; e++) {
                    int off = e * g->dw - g->pw, x0, x1;
                    valid_range(g->ow, g->sw, off, g->w, &x0, &x1);
                    for (int q = q0; q < q1; q++, cp += g->ow) {
                        int z = q / g->oh, y = q % g->oh;
                        int iz = z * g->sd - g->pd + a * g->dd, iy = y * g->sh - g->ph + b * g->dh;
                        int inside = iz >= 0 && iz < g->d && iy >= 0 && iy < g->h;
                        /* the input row; column x of the grid reads x * sw + off,
                         * inside it for x in [x0, x1) */
                        float *row = inside ? img + (size_t)ch * pl->vol +
                                                  ((size_t)iz * g->h + iy) * g->w
                                            : NULL;
                        if (add) {
                            if (!inside)
                                continue;
                            for (int x = x0; x < x1; x++)
                                row[x * g->sw + off] += cp[x];
                            continue;
                        }
                        if (!inside) {
                            memset(cp, 0, sizeof(float) * g->ow);
                            continue;
                        }
                        memset(cp, 0, sizeof(float) * x0);
                        if (g->sw == 1 && x1 > x0)
                            memcpy(cp + x0, row + x0 + off, sizeof(float) * (x1 - x0));
                        else
                            for (int x = x0; x < x1; x++)
                                cp[x] = row[x * g->sw + off];
                        memset(cp + x1, 0, sizeof(float) * (g->ow - x1));
                    }
                }
}

/* Arguments of the parallel regions of one call. */
typedef struct vol_call {
    const kern__vol *g;
    const vol_plan *pl;
    int n, k;
    float *out;            /* forward: y; weight gradient: unused; data gradient: dx */
    const float *x, *dy, *w, *bias;
    float *ws;
} vol_call;

static float *thread_block(const vol_call *vc, int tid)
{
    return vc->ws + (size_t)tid * vc->pl->per_thread;
}

/* The grid rows [*q0, *q1) of band u of an image. */
static void band_rows(const vol_plan *pl, int u, int *q0, int *q1)
{
    *q0 = u * pl->band;
    *q1 = *q0 + pl->band < pl->rows ? *q0 + pl->band : pl->rows;
}

static void forward_task(void *arg, int tid, int nt)
{
    const vol_call *vc = arg;
    const kern__vol *g = vc->g;
    const vol_plan *pl = vc->pl;
    float *col = thread_block(vc, tid);
    int u0, u1;
    kern__share(&u0, &u1, vc->n * pl->nb, tid, nt);
    for (int u = u0; u < u1; u++) {
        int i = u / pl->nb, q0, q1;
        band_rows(pl, u % pl->nb, &q0, &q1);
        int ncols = (q1 - q0) * g->ow;
        const float *x = vc->x + (size_t)i * g->c * pl->vol;
        float *y = vc->out + (size_t)i * vc->k * pl->grid + (size_t)q0 * g->ow;
        if (vc->bias)
            for (int k = 0; k < vc->k; k++)
                for (int j = 0; j < ncols; j++)
                    y[k * pl->grid + j] = vc->bias[k];
        const float *b = x + (size_t)q0 * g->ow;
        int ldb = (int)pl->vol;
        if (!pl->direct) {
            lower(col, (float *)x, g, pl, q0, q1, 0);
            b = col;
            ldb = ncols;
        }
        kern_sgemm(0, 0, vc->k, ncols, (int)pl->crs, 1.0f, vc->w, (int)pl->crs, b, ldb,
                   vc->bias ? 1.0f : 0.0f, y, (int)pl->grid);
    }
}

void kern__vol_forward(float *y, const float *x, const float *w, const float *bias,
                       const kern__vol *g, int n, int k, float *ws, size_t ws_bytes)
{
    /* x (n, c, d, h, w), w (k, crs), bias (k) or NULL, y (n, k, grid); per
     * band: y[:, band] = w * vol2col(x) (crs, band) */
    vol_plan pl = plan_of(g, k);
    vol_call vc = {.g = g, .pl = &pl, .n = n, .k = k, .out = y, .x = x, .w = w, .bias = bias,
                   .ws = ws};
    kern__parallel(forward_task, &vc, threads_for(&pl, ws_bytes, n * pl.nb));
}

/* The thread's partials: dw (k, crs) += dy[:, band] * vol2col(x)^T per
 * band of its share; its bias sums over a share of the (image, channel)
 * planes of dy. */
static void wgrad_task(void *arg, int tid, int nt)
{
    const vol_call *vc = arg;
    const kern__vol *g = vc->g;
    const vol_plan *pl = vc->pl;
    float *col = thread_block(vc, tid);
    float *dw = col + convplan_round16(pl->col);
    float *db = dw + convplan_round16((size_t)vc->k * pl->crs);
    int u0, u1;
    kern__wgrad_begin(dw, (size_t)vc->k * pl->crs, db, vc->dy, vc->n, vc->k, pl->grid, tid, nt);
    kern__share(&u0, &u1, vc->n * pl->nb, tid, nt);
    for (int u = u0; u < u1; u++) {
        int i = u / pl->nb, q0, q1;
        band_rows(pl, u % pl->nb, &q0, &q1);
        int ncols = (q1 - q0) * g->ow;
        const float *x = vc->x + (size_t)i * g->c * pl->vol;
        const float *dyb = vc->dy + (size_t)i * vc->k * pl->grid + (size_t)q0 * g->ow;
        const float *b = x + (size_t)q0 * g->ow;
        int ldb = (int)pl->vol;
        if (!pl->direct) {
            lower(col, (float *)x, g, pl, q0, q1, 0);
            b = col;
            ldb = ncols;
        }
        kern_sgemm(0, 1, vc->k, (int)pl->crs, ncols, 1.0f, dyb, (int)pl->grid, b, ldb, 1.0f, dw,
                   (int)pl->crs);
    }
}

void kern__vol_wgrad(float *dw, float *db, const float *dy, const float *x, const kern__vol *g,
                     int n, int k, float *ws, size_t ws_bytes)
{
    /* dy (n, k, grid), x (n, c, d, h, w); dw (k, crs), db (k) or NULL */
    vol_plan pl = plan_of(g, k);
    vol_call vc = {.g = g, .pl = &pl, .n = n, .k = k, .x = x, .dy = dy, .ws = ws};
    int used = threads_for(&pl, ws_bytes, n * pl.nb);
    kern__parallel(wgrad_task, &vc, used);
    kern__wgrad_sum(dw, db, ws + convplan_round16(pl.col), pl.per_thread, used,
                    (size_t)k * pl.crs, k);
}

/* A share of the (image, channel) pairs of dx: for each image's run of
 * channels [ca, cb), per band dcol = w[:, ca..cb]^T dy[:, band] and
 * col2vol of it into those channels alone. */
static void dgrad_task(void *arg, int tid, int nt)
{
    const vol_call *vc = arg;
    const kern__vol *g = vc->g;
    const vol_plan *pl = vc->pl;
    float *col = thread_block(vc, tid);
    int u0, u1;
    kern__share(&u0, &u1, vc->n * g->c, tid, nt);
    for (int u = u0; u < u1;) {
        int i = u / g->c, ca = u % g->c, cb = g->c;
        if (u1 - u < cb - ca)
            cb = ca + (u1 - u);
        u += cb - ca;
        kern__vol part = *g;
        part.c = cb - ca;
        const float *dy = vc->dy + (size_t)i * vc->k * pl->grid;
        float *dx = vc->out + ((size_t)i * g->c + ca) * pl->vol;
        if (!pl->direct)
            memset(dx, 0, sizeof(float) * (size_t)(cb - ca) * pl->vol);
        for (int nbi = 0; nbi < pl->nb; nbi++) {
            int q0, q1;
            band_rows(pl, nbi, &q0, &q1);
            int ncols = (q1 - q0) * g->ow;
            if (pl->direct) {
                kern_sgemm(1, 0, cb - ca, ncols, vc->k, 1.0f, vc->w + ca, (int)pl->crs,
                           dy + (size_t)q0 * g->ow, (int)pl->grid, 0.0f, dx + (size_t)q0 * g->ow,
                           (int)pl->vol);
                continue;
            }
            kern_sgemm(1, 0, (int)((size_t)(cb - ca) * pl->krs), ncols, vc->k, 1.0f,
                       vc->w + (size_t)ca * pl->krs, (int)pl->crs, dy + (size_t)q0 * g->ow,
                       (int)pl->grid, 0.0f, col, ncols);
            lower(col, dx, &part, pl, q0, q1, 1);
        }
    }
}

void kern__vol_dgrad(float *dx, const float *dy, const float *w, const kern__vol *g, int n, int k,
                     float *ws, size_t ws_bytes)
{
    /* dy (n, k, grid), w (k, crs); dx (n, c, d, h, w) = col2vol(w^T dy) */
    vol_plan pl = plan_of(g, k);
    vol_call vc = {.g = g, .pl = &pl, .n = n, .k = k, .out = dx, .dy = dy, .w = w, .ws = ws};
    kern__parallel(dgrad_task, &vc, threads_for(&pl, ws_bytes, n * g->c));
}
