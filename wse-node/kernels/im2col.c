/* Internal: im2col and col2im over bands of output rows. Rows of unit
 * horizontal stride are copied with memcpy between zeroed margins. */
#include "im2col.h"

#include <string.h>

/* The range [lo, hi) of grid columns whose input column x*sw + off lies in
 * [0, w). */
static void valid_range(int *lo, int *hi, int ow, int w, int sw, int off)
{
    /* x*sw + off >= 0  <=>  x >= ceil(-off / sw) */
    int a = off >= 0 ? 0 : (-off + sw - 1) / sw;
    /* x*sw + off <= w - 1  <=>  x <= floor((w - 1 - off) / sw) */
    int b = (w - 1 - off) < 0 ? 0 : (w - 1 - off) / sw + 1;
    if (a > ow)
        a = ow;
    if (b > ow)
        b = ow;
    if (b < a)
        b = a;
    *lo = a;
    *hi = b;
}

void kern__im2col(float *col, const float *img, const convplan_cols *g,
                  int oh0, int oh1)
{
    kern__im2col_rows(col, img, NULL, g, oh0, oh1);
}

/* Row iy of channel c, from the image or its halo; NULL on padding. */
static const float *image_row(const float *img, const kern__rows *halo, const convplan_cols *g,
                              int c, int iy)
{
    if (iy >= 0 && iy < g->h)
        return img + ((size_t)c * g->h + iy) * g->w;
    if (!halo)
        return NULL;
    if (iy < 0 && iy >= -halo->rows_top && halo->top)
        return halo->top + ((size_t)c * halo->rows_top + (iy + halo->rows_top)) * g->w;
    if (iy >= g->h && iy < g->h + halo->rows_bottom && halo->bottom)
        return halo->bottom + ((size_t)c * halo->rows_bottom + (iy - g->h)) * g->w;
    return NULL;
}

void kern__im2col_rows(float *col, const float *img, const kern__rows *halo,
                       const convplan_cols *g, int oh0, int oh1)
{
    /* img (c, h, w); col (c*r*s, (oh1 - oh0) * ow) */
    size_t ncols = (size_t)(oh1 - oh0) * g->ow;
    for (int c = 0; c < g->c; c++) {
        for (int ky = 0; ky < g->r; ky++) {
            for (int kx = 0; kx < g->s; kx++) {
                float *dst = col + ((size_t)(c * g->r + ky) * g->s + kx) * ncols;
                int off = kx * g->dw - g->pw;
                int lo, hi;
                valid_range(&lo, &hi, g->ow, g->w, g->sw, off);
                for (int y = oh0; y < oh1; y++, dst += g->ow) {
                    int iy = y * g->sh - g->ph + ky * g->dh;
                    const float *src = image_row(img, halo, g, c, iy);
                    if (!src) {
                        memset(dst, 0, sizeof(float) * g->ow);
                        continue;
                    }
                    memset(dst, 0, sizeof(float) * lo);
                    if (g->sw == 1) {
                        memcpy(dst + lo, src + lo + off, sizeof(float) * (hi - lo));
                    } else {
                        const float *sp = src + off;
                        for (int x = lo; x < hi; x++)
                            dst[x] = sp[x * g->sw];
                    }
                    memset(dst + hi, 0, sizeof(float) * (g->ow - hi));
                }
            }
        }
    }
}

void kern__col2im_add(float *img, const float *col, const convplan_cols *g,
                      int oh0, int oh1)
{
    /* col (c*r*s, (oh1 - oh0) * ow); img (c, h, w), accumulated into */
    size_t ncols = (size_t)(oh1 - oh0) * g->ow;
    for (int c = 0; c < g->c; c++) {
        float *plane = img + (size_t)c * g->h * g->w;
        for (int ky = 0; ky < g->r; ky++) {
            for (int kx = 0; kx < g->s; kx++) {
                const float *src = col + ((size_t)(c * g->r + ky) * g->s + kx) * ncols;
                int off = kx * g->dw - g->pw;
                int lo, hi;
                valid_range(&lo, &hi, g->ow, g->w, g->sw, off);
                for (int y = oh0; y < oh1; y++, src += g->ow) {
                    int iy = y * g->sh - g->ph + ky * g->dh;
                    if (iy < 0 || iy >= g->h)
                        continue;
                    float *dp = plane + (size_t)iy * g->w + off;
                    if (g->sw == 1) {
                        for (int x = lo; x < hi; x++)
                            dp[x] += src[x];
                    } else {
                        for (int x = lo; x < hi; x++)
                            dp[x * g->sw] += src[x];
                    }
                }
            }
        }
    }
}

void kern__share(int *u0, int *u1, int units, int tid, int nt)
{
    *u0 = (int)((long long)units * tid / nt);
    *u1 = (int)((long long)units * (tid + 1) / nt);
}

void kern__wgrad_begin(float *dw, size_t nw, float *db, const float *dout, int n, int k,
                       size_t ohw, int tid, int nt)
{
    int u0, u1;
    memset(dw, 0, sizeof(float) * nw);
    memset(db, 0, sizeof(float) * (size_t)k);
    kern__share(&u0, &u1, n * k, tid, nt);
    for (int u = u0; u < u1; u++) {
        const float *dy = dout + (size_t)u * ohw;
        double acc = 0.0;
        for (size_t j = 0; j < ohw; j++)
            acc += dy[j];
        db[u % k] += (float)acc;
    }
}

void kern__wgrad_sum(float *dweight, float *dbias, const float *dw0, size_t stride, int used,
                     size_t nw, int k)
{
    for (int tid = 0; tid < used; tid++) {
        const float *dw = dw0 + (size_t)tid * stride;
        const float *db = dw + convplan_round16(nw);
        if (tid == 0) {
            memcpy(dweight, dw, sizeof(float) * nw);
            if (dbias)
                memcpy(dbias, db, sizeof(float) * (size_t)k);
            continue;
        }
        for (size_t j = 0; j < nw; j++)
            dweight[j] += dw[j];
        if (dbias)
            for (int c = 0; c < k; c++)
                dbias[c] += db[c];
    }
}
