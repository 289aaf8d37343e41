/* conv3d and transposed conv3d: both paths (oneDNN's layouts where it has
 * a fast kernel, vol2col + GEMM forced) against the direct double loops on
 * random and fixed shapes (odd sizes, stride 2, padding, dilation 2,
 * channel counts not multiples of 8, 1x1x1), gradients against central
 * differences of double-precision convolutions, the two ops as each
 * other's adjoint, two threads, mixed precision against the loops on the
 * rounded inputs and against float32, and one shape against PyTorch's
 * numbers (bench/conv3d_torch_ref.py). */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "conv3d_dnnl.h"
#include "kernels.h"
#include "kernels_internal.h"
#include "kt.h"
#include "op_conv3d.h"
#include "op_conv_transpose3d.h"

#define GUARD 64
#define SENTINEL 1234.5f

/* A workspace of exactly `bytes`, followed by sentinels that must survive. */
static float *ws_new(size_t bytes)
{
    size_t nf = bytes / sizeof(float);
    float *ws = kt_falloc(nf + GUARD);
    for (size_t i = 0; i < GUARD; i++)
        ws[nf + i] = SENTINEL;
    return ws;
}

static void ws_check(const float *ws, size_t bytes)
{
    size_t nf = bytes / sizeof(float);
    for (size_t i = 0; i < GUARD; i++)
        ck_assert_float_eq(ws[nf + i], SENTINEL);
}

static int valid(const op_conv3d_params *p)
{
    return op_conv3d_out_d(p) >= 1 && op_conv3d_out_h(p) >= 1 && op_conv3d_out_w(p) >= 1;
}

static op_conv3d_params random_conv(kt_rng *r)
{
    for (;;) {
        op_conv3d_params p = {
            .n = kt_int(r, 1, 2), .c = kt_int(r, 1, 5),
            .d = kt_int(r, 1, 7), .h = kt_int(r, 1, 7), .w = kt_int(r, 1, 7),
            .k = kt_int(r, 1, 5),
            .kd = kt_int(r, 1, 3), .kh = kt_int(r, 1, 3), .kw = kt_int(r, 1, 3),
            .stride_d = kt_int(r, 1, 2), .stride_h = kt_int(r, 1, 2), .stride_w = kt_int(r, 1, 2),
            .pad_d = kt_int(r, 0, 2), .pad_h = kt_int(r, 0, 2), .pad_w = kt_int(r, 0, 2),
            .dil_d = kt_int(r, 1, 2), .dil_h = kt_int(r, 1, 2), .dil_w = kt_int(r, 1, 2),
        };
        if (valid(&p))
            return p;
    }
}

/* The shapes every check runs: fixed corner cases, then random ones. */
static const op_conv3d_params fixed[] = {
    /* n  c  d  h  w  k  kd kh kw  sd sh sw  pd ph pw  dd dh dw */
    {2, 3, 5, 6, 7, 4, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},       /* same-size 3x3x3 */
    {1, 2, 7, 8, 5, 3, 3, 3, 3, 2, 2, 2, 1, 1, 1, 1, 1, 1},       /* stride 2, odd sizes */
    {2, 3, 7, 6, 8, 2, 3, 3, 3, 1, 1, 1, 2, 2, 2, 2, 2, 2},       /* dilation 2 */
    {2, 5, 3, 4, 5, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1},       /* 1x1x1: no lowering */
    {1, 3, 6, 7, 9, 2, 2, 3, 1, 1, 2, 3, 1, 0, 0, 2, 1, 1},       /* every axis its own */
    {1, 2, 4, 5, 6, 3, 2, 2, 2, 2, 2, 2, 0, 0, 0, 1, 1, 1},       /* 2x2x2 stride 2 */
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0},       /* zeros mean 1 */
    {1, 1, 8, 8, 8, 32, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},      /* a 3D U-Net's first layer */
    {1, 32, 6, 5, 7, 32, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},     /* and its next */
    {2, 13, 5, 6, 5, 19, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},     /* channels not in 8s */
    {1, 16, 7, 7, 7, 24, 3, 3, 3, 2, 2, 2, 1, 1, 1, 1, 1, 1},     /* strided, on oneDNN */
    {1, 12, 6, 6, 6, 20, 3, 3, 3, 1, 1, 1, 2, 2, 2, 2, 2, 2},     /* dilated, on oneDNN */
};
#define NFIXED ((int)(sizeof(fixed) / sizeof(fixed[0])))
#define CONV_CASES (NFIXED + 10)

static op_conv3d_params conv_case(kt_rng *r, int i)
{
    return i < NFIXED ? fixed[i] : random_conv(r);
}

static size_t nx_of(const op_conv3d_params *p)
{
    return (size_t)p->n * p->c * p->d * p->h * p->w;
}

static size_t nw_of(const op_conv3d_params *p)
{
    return (size_t)p->k * p->c * p->kd * p->kh * p->kw;
}

static size_t ny_of(const op_conv3d_params *p)
{
    return (size_t)p->n * p->k * op_conv3d_out_d(p) * op_conv3d_out_h(p) * op_conv3d_out_w(p);
}

/* Pieces that ran on oneDNN over a check, by describe's account, and the
 * shapes that ran in depth bands (c3d_band.c). */
static unsigned onednn_seen;
static int banded_seen;

static void conv_matches_ref(void)
{
    kt_rng r;
    kt_rng_init(&r, 321);
    for (int t = 0; t < CONV_CASES; t++) {
        op_conv3d_params p = conv_case(&r, t);
        size_t nx = nx_of(&p), nw = nw_of(&p), ny = ny_of(&p);
        size_t wsb = op_conv3d_workspace(&p);
        float *x = kt_falloc(nx), *w = kt_falloc(nw), *b = kt_falloc(p.k);
        float *y = kt_falloc(ny), *yr = kt_falloc(ny), *dy = kt_falloc(ny);
        float *dx = kt_falloc(nx), *dxr = kt_falloc(nx);
        float *dw = kt_falloc(nw), *dwr = kt_falloc(nw);
        float *db = kt_falloc(p.k), *dbr = kt_falloc(p.k);
        float *ws = ws_new(wsb);
        char how[512];
        onednn_seen |= op_conv3d_describe(&p, 0, how, sizeof(how));
        banded_seen += strstr(how, "depth bands") != NULL;
        if (t < NFIXED && kern__conv_get_path() != KERN__CONV_IM2COL)
            printf("conv3d c%d k%d %dx%dx%d: %s\n", p.c, p.k, p.d, p.h, p.w, how);
        kt_fill(&r, x, nx, -1, 1);
        kt_fill(&r, w, nw, -1, 1);
        kt_fill(&r, b, p.k, -1, 1);
        kt_fill(&r, dy, ny, -1, 1);
        kt_fill(&r, dx, nx, 7, 8); /* stale values must be overwritten */
        kt_fill(&r, dw, nw, 7, 8);
        kt_fill(&r, y, ny, 7, 8);

        const float *bias = t % 2 ? NULL : b;
        op_conv3d_forward(y, x, w, bias, &p, ws, wsb);
        op_conv3d_forward_ref(yr, x, w, bias, &p);
        ck_assert_msg(kt_relerr_ff(y, yr, ny) < 1e-5, "case %d fwd %g (%s)", t,
                      kt_relerr_ff(y, yr, ny), how);
        op_conv3d_backward(dx, dw, db, dy, x, w, &p, ws, wsb);
        op_conv3d_backward_ref(dxr, dwr, dbr, dy, x, w, &p);
        ck_assert_msg(kt_relerr_ff(dx, dxr, nx) < 1e-5, "case %d dx %g (%s)", t,
                      kt_relerr_ff(dx, dxr, nx), how);
        ck_assert_msg(kt_relerr_ff(dw, dwr, nw) < 1e-5, "case %d dw %g (%s)", t,
                      kt_relerr_ff(dw, dwr, nw), how);
        ck_assert_msg(kt_relerr_ff(db, dbr, p.k) < 1e-6, "case %d db", t);
        kt_fill(&r, dw, nw, 7, 8);
        op_conv3d_backward(NULL, dw, NULL, dy, x, w, &p, ws, wsb);
        ck_assert_msg(kt_relerr_ff(dw, dwr, nw) < 1e-5, "case %d dw only", t);
        ws_check(ws, wsb);
        free(x); free(w); free(b); free(y); free(yr); free(dy); free(dx);
        free(dxr); free(dw); free(dwr); free(db); free(dbr); free(ws);
    }
}

/* A double-precision convolution (or, transposed, its adjoint) for
 * finite differences. */
struct conv_fd {
    op_conv3d_params p; /* the convolution; transposed: the one it is the adjoint of */
    int transposed;     /* evaluate x (n, k, out) -> y (n, c, in) instead */
    double *x, *w, *b, *y;
    const float *r;     /* the loss's weights on y */
    size_t ny;
};

static double conv_fd_loss(void *ctx)
{
    struct conv_fd *c = ctx;
    const op_conv3d_params *p = &c->p;
    int od = op_conv3d_out_d(p), oh = op_conv3d_out_h(p), ow = op_conv3d_out_w(p);
    int sd = p->stride_d ? p->stride_d : 1, sh = p->stride_h ? p->stride_h : 1,
        sw = p->stride_w ? p->stride_w : 1;
    int dd = p->dil_d ? p->dil_d : 1, dh = p->dil_h ? p->dil_h : 1, dw = p->dil_w ? p->dil_w : 1;
    size_t in_vol = (size_t)p->d * p->h * p->w, out_vol = (size_t)od * oh * ow;
    /* transposed: y (n, c, in) = bias + scatter of x (n, k, out) */
    int yc = c->transposed ? p->c : p->k;
    for (int i = 0; i < p->n; i++)
        for (int ch = 0; ch < yc; ch++)
            for (size_t q = 0; q < (c->transposed ? in_vol : out_vol); q++)
                c->y[((size_t)i * yc + ch) * (c->transposed ? in_vol : out_vol) + q] = c->b[ch];
    for (int i = 0; i < p->n; i++)
        for (int k = 0; k < p->k; k++)
            for (int oz = 0; oz < od; oz++)
                for (int oy = 0; oy < oh; oy++)
                    for (int ox = 0; ox < ow; ox++)
                        for (int ch = 0; ch < p->c; ch++)
                            for (int a = 0; a < p->kd; a++)
                                for (int b = 0; b < p->kh; b++)
                                    for (int e = 0; e < p->kw; e++) {
                                        int iz = oz * sd - p->pad_d + a * dd;
                                        int iy = oy * sh - p->pad_h + b * dh;
                                        int ix = ox * sw - p->pad_w + e * dw;
                                        if (iz < 0 || iz >= p->d || iy < 0 || iy >= p->h ||
                                            ix < 0 || ix >= p->w)
                                            continue;
                                        size_t xi = ((size_t)i * p->c + ch) * in_vol +
                                                    ((size_t)iz * p->h + iy) * p->w + ix;
                                        size_t yi = ((size_t)i * p->k + k) * out_vol +
                                                    ((size_t)oz * oh + oy) * ow + ox;
                                        /* (the transposed weight (c', k', ...) is
                                         * (p->k, p->c, ...): the same index) */
                                        size_t wi = ((((size_t)k * p->c + ch) * p->kd + a) *
                                                         p->kh + b) * p->kw + e;
                                        if (c->transposed)
                                            c->y[xi] += c->x[yi] * c->w[wi];
                                        else
                                            c->y[yi] += c->x[xi] * c->w[wi];
                                    }
    return kt_dot(c->y, c->r, c->ny);
}

/* Multiply-adds of the central differences of shape p: two double
 * convolutions for every element of x and the weight. */
static double fd_cost(const op_conv3d_params *p)
{
    return 2.0 * (double)(nx_of(p) + nw_of(p)) * (double)ny_of(p) * p->c * p->kd * p->kh * p->kw;
}

/* p made small enough for the differences to take a fraction of a second
 * (under the sanitizers too): one image, then the largest side shortened
 * while the shape stays valid. Shapes whose weight alone is too large
 * (32 channels: matches_ref holds those to the direct loops) stay over
 * FD_BUDGET, and the caller leaves them out. */
#define FD_BUDGET 1e7
static op_conv3d_params fd_sized(op_conv3d_params p)
{
    while (fd_cost(&p) > FD_BUDGET) {
        if (p.n > 1) {
            p.n = 1;
            continue;
        }
        op_conv3d_params q = p;
        int *side = q.d >= q.h && q.d >= q.w ? &q.d : q.h >= q.w ? &q.h : &q.w;
        (*side)--;
        if (*side < 1 || !valid(&q))
            break;
        p = q;
    }
    return p;
}

static void conv_gradients_fd(void)
{
    kt_rng r;
    kt_rng_init(&r, 322);
    int tested = 0;
    for (int t = 0; t < CONV_CASES; t++) {
        op_conv3d_params p = fd_sized(conv_case(&r, t));
        if (fd_cost(&p) > FD_BUDGET)
            continue;
        tested++;
        size_t nx = nx_of(&p), nw = nw_of(&p), ny = ny_of(&p);
        float *x = kt_falloc(nx), *w = kt_falloc(nw), *b = kt_falloc(p.k);
        float *R = kt_falloc(ny), *dx = kt_falloc(nx), *dw = kt_falloc(nw);
        float *db = kt_falloc(p.k);
        size_t wsb = op_conv3d_workspace(&p);
        float *ws = ws_new(wsb);
        kt_fill(&r, x, nx, -1, 1);
        kt_fill(&r, w, nw, -1, 1);
        kt_fill(&r, b, p.k, -1, 1);
        kt_fill(&r, R, ny, -1, 1);
        op_conv3d_backward(dx, dw, db, R, x, w, &p, ws, wsb);

        struct conv_fd c = {p, 0, kt_dalloc(nx), kt_dalloc(nw), kt_dalloc(p.k), kt_dalloc(ny), R,
                            ny};
        kt_to_double(c.x, x, nx);
        kt_to_double(c.w, w, nw);
        kt_to_double(c.b, b, p.k);
        double *g = kt_dalloc(nx + nw);
        kt_fd_grad(g, c.x, nx, conv_fd_loss, &c, 1e-4);
        ck_assert_msg(kt_relerr(dx, g, nx) < 1e-3, "case %d dx %g", t, kt_relerr(dx, g, nx));
        kt_fd_grad(g, c.w, nw, conv_fd_loss, &c, 1e-4);
        ck_assert_msg(kt_relerr(dw, g, nw) < 1e-3, "case %d dw %g", t, kt_relerr(dw, g, nw));
        kt_fd_grad(g, c.b, p.k, conv_fd_loss, &c, 1e-4);
        ck_assert_msg(kt_relerr(db, g, p.k) < 1e-3, "case %d db", t);
        ws_check(ws, wsb);
        free(c.x); free(c.w); free(c.b); free(c.y); free(g);
        free(x); free(w); free(b); free(R); free(dx); free(dw); free(db); free(ws);
    }
    ck_assert_int_ge(tested, 14);
}

/* The transposed convolution whose input is the output of conv p: the same
 * kernel, stride, padding and dilation, out_pad landing back on p's input
 * size where it can. */
static op_conv_transpose3d_params transpose_of(const op_conv3d_params *p)
{
    op_conv_transpose3d_params q = {
        .n = p->n, .c = p->k, .d = op_conv3d_out_d(p), .h = op_conv3d_out_h(p),
        .w = op_conv3d_out_w(p), .k = p->c, .kd = p->kd, .kh = p->kh, .kw = p->kw,
        .stride_d = p->stride_d, .stride_h = p->stride_h, .stride_w = p->stride_w,
        .pad_d = p->pad_d, .pad_h = p->pad_h, .pad_w = p->pad_w,
        .dil_d = p->dil_d, .dil_h = p->dil_h, .dil_w = p->dil_w,
    };
    q.out_pad_d = p->d - op_conv_transpose3d_out_d(&q);
    q.out_pad_h = p->h - op_conv_transpose3d_out_h(&q);
    q.out_pad_w = p->w - op_conv_transpose3d_out_w(&q);
    return q;
}

/* out_pad below the stride or the dilation on every axis (PyTorch's rule),
 * and the output p's input size. */
static int valid_transpose(const op_conv_transpose3d_params *q)
{
    int s[3] = {q->stride_d, q->stride_h, q->stride_w}, d[3] = {q->dil_d, q->dil_h, q->dil_w};
    int op[3] = {q->out_pad_d, q->out_pad_h, q->out_pad_w};
    for (int a = 0; a < 3; a++) {
        int sa = s[a] ? s[a] : 1, da = d[a] ? d[a] : 1;
        if (op[a] < 0 || (op[a] >= sa && op[a] >= da))
            return 0;
    }
    return 1;
}

static void convt_matches_ref(void)
{
    kt_rng r;
    kt_rng_init(&r, 323);
    int tested = 0;
    for (int t = 0; t < CONV_CASES; t++) {
        op_conv3d_params p = conv_case(&r, t);
        op_conv_transpose3d_params q = transpose_of(&p);
        if (!valid_transpose(&q))
            continue;
        tested++;
        ck_assert_int_eq(op_conv_transpose3d_out_d(&q), p.d);
        ck_assert_int_eq(op_conv_transpose3d_out_w(&q), p.w);
        size_t nx = ny_of(&p), nw = nw_of(&p), ny = nx_of(&p); /* q's in, weight, out */
        size_t wsb = op_conv_transpose3d_workspace(&q);
        float *x = kt_falloc(nx), *w = kt_falloc(nw), *b = kt_falloc(q.k);
        float *y = kt_falloc(ny), *yr = kt_falloc(ny), *dy = kt_falloc(ny);
        float *dx = kt_falloc(nx), *dxr = kt_falloc(nx);
        float *dw = kt_falloc(nw), *dwr = kt_falloc(nw);
        float *db = kt_falloc(q.k), *dbr = kt_falloc(q.k);
        float *ws = ws_new(wsb);
        char how[512];
        onednn_seen |= op_conv_transpose3d_describe(&q, 0, how, sizeof(how));
        banded_seen += strstr(how, "depth bands") != NULL;
        if (t < NFIXED && kern__conv_get_path() != KERN__CONV_IM2COL)
            printf("conv_transpose3d c%d k%d %dx%dx%d: %s\n", q.c, q.k, q.d, q.h, q.w, how);
        kt_fill(&r, x, nx, -1, 1);
        kt_fill(&r, w, nw, -1, 1);
        kt_fill(&r, b, q.k, -1, 1);
        kt_fill(&r, dy, ny, -1, 1);
        kt_fill(&r, dx, nx, 7, 8);
        kt_fill(&r, y, ny, 7, 8);
        const float *bias = t % 2 ? b : NULL;
        op_conv_transpose3d_forward(y, x, w, bias, &q, ws, wsb);
        op_conv_transpose3d_forward_ref(yr, x, w, bias, &q);
        ck_assert_msg(kt_relerr_ff(y, yr, ny) < 1e-5, "case %d tfwd %g (%s)", t,
                      kt_relerr_ff(y, yr, ny), how);
        op_conv_transpose3d_backward(dx, dw, db, dy, x, w, &q, ws, wsb);
        op_conv_transpose3d_backward_ref(dxr, dwr, dbr, dy, x, w, &q);
        ck_assert_msg(kt_relerr_ff(dx, dxr, nx) < 1e-5, "case %d tdx %g (%s)", t,
                      kt_relerr_ff(dx, dxr, nx), how);
        ck_assert_msg(kt_relerr_ff(dw, dwr, nw) < 1e-5, "case %d tdw %g (%s)", t,
                      kt_relerr_ff(dw, dwr, nw), how);
        ck_assert_msg(kt_relerr_ff(db, dbr, q.k) < 1e-6, "case %d tdb", t);
        op_conv_transpose3d_backward(NULL, dw, NULL, dy, x, w, &q, ws, wsb);
        ck_assert_msg(kt_relerr_ff(dw, dwr, nw) < 1e-5, "case %d tdw only", t);
        ws_check(ws, wsb);

        /* the adjoint: <conv(u), v> = <u, convT(v)> for the same weight,
         * and the transposed data gradient is the convolution itself */
        float *u = kt_falloc(ny), *cu = kt_falloc(nx), *tv = kt_falloc(ny);
        kt_fill(&r, u, ny, -1, 1);
        op_conv3d_forward_ref(cu, u, w, NULL, &p);
        op_conv_transpose3d_forward_ref(tv, x, w, NULL, &q);
        double lhs = 0.0, rhs = 0.0;
        for (size_t i = 0; i < nx; i++)
            lhs += (double)cu[i] * x[i];
        for (size_t i = 0; i < ny; i++)
            rhs += (double)u[i] * tv[i];
        ck_assert_msg(fabs(lhs - rhs) <= 1e-4 * (fabs(lhs) + 1.0), "case %d adjoint %g %g", t,
                      lhs, rhs);
        op_conv_transpose3d_backward(dx, dw, NULL, u, x, w, &q, ws, wsb);
        ck_assert_msg(kt_relerr_ff(dx, cu, nx) < 1e-5, "case %d din is the conv", t);
        free(u); free(cu); free(tv);
        free(x); free(w); free(b); free(y); free(yr); free(dy); free(dx);
        free(dxr); free(dw); free(dwr); free(db); free(dbr); free(ws);
    }
    ck_assert_int_ge(tested, 12);
}

static void convt_gradients_fd(void)
{
    kt_rng r;
    kt_rng_init(&r, 324);
    int tested = 0;
    for (int t = 0; t < CONV_CASES; t++) {
        op_conv3d_params p = fd_sized(conv_case(&r, t));
        op_conv_transpose3d_params q = transpose_of(&p);
        if (!valid_transpose(&q) || fd_cost(&p) > FD_BUDGET)
            continue;
        tested++;
        size_t nx = ny_of(&p), nw = nw_of(&p), ny = nx_of(&p);
        float *x = kt_falloc(nx), *w = kt_falloc(nw), *b = kt_falloc(q.k);
        float *R = kt_falloc(ny), *dx = kt_falloc(nx), *dw = kt_falloc(nw);
        float *db = kt_falloc(q.k);
        size_t wsb = op_conv_transpose3d_workspace(&q);
        float *ws = ws_new(wsb);
        kt_fill(&r, x, nx, -1, 1);
        kt_fill(&r, w, nw, -1, 1);
        kt_fill(&r, b, q.k, -1, 1);
        kt_fill(&r, R, ny, -1, 1);
        op_conv_transpose3d_backward(dx, dw, db, R, x, w, &q, ws, wsb);
        struct conv_fd c = {p, 1, kt_dalloc(nx), kt_dalloc(nw), kt_dalloc(q.k), kt_dalloc(ny), R,
                            ny};
        kt_to_double(c.x, x, nx);
        kt_to_double(c.w, w, nw);
        kt_to_double(c.b, b, q.k);
        double *g = kt_dalloc(nx + nw);
        kt_fd_grad(g, c.x, nx, conv_fd_loss, &c, 1e-4);
        ck_assert_msg(kt_relerr(dx, g, nx) < 1e-3, "case %d tdx %g", t, kt_relerr(dx, g, nx));
        kt_fd_grad(g, c.w, nw, conv_fd_loss, &c, 1e-4);
        ck_assert_msg(kt_relerr(dw, g, nw) < 1e-3, "case %d tdw %g", t, kt_relerr(dw, g, nw));
        kt_fd_grad(g, c.b, q.k, conv_fd_loss, &c, 1e-4);
        ck_assert_msg(kt_relerr(db, g, q.k) < 1e-3, "case %d tdb", t);
        ws_check(ws, wsb);
        free(c.x); free(c.w); free(c.b); free(c.y); free(g);
        free(x); free(w); free(b); free(R); free(dx); free(dw); free(db); free(ws);
    }
    ck_assert_int_ge(tested, 8);
}

/* Runs a check on the path forced, then puts back the one in force. On
 * im2col (vol2col here) no piece may say it runs on oneDNN; on the
 * default path, in the checks that cover the U-Net's shapes (covers),
 * every piece must run there for some shape, where oneDNN runs here. */
static void on_path(kern__conv_path path, void (*check)(void), int covers)
{
    kern__conv_path saved = kern__conv_get_path();
    kern__conv_set_path(path);
    onednn_seen = 0;
    check();
    kern__conv_set_path(saved);
    if (path == KERN__CONV_IM2COL)
        ck_assert_uint_eq(onednn_seen, 0);
    else if (!covers)
        return;
    else if (kern__conv_have_onednn() && kernels_isa_level() >= KERNELS_ISA_AVX2)
        ck_assert_uint_eq(onednn_seen, OP_CONV3D_FWD_ONEDNN | OP_CONV3D_BWD_W_ONEDNN |
                                           OP_CONV3D_BWD_D_ONEDNN);
    else
        printf("conv3d: oneDNN not here (%s), every piece on vol2col\n",
               kern__conv_have_onednn() ? kernels_isa_name(kernels_isa_level()) : "no engine");
}

START_TEST(test_conv3d_matches_ref) { on_path(KERN__CONV_BLOCKED, conv_matches_ref, 1); }
END_TEST
START_TEST(test_conv3d_matches_ref_vol2col) { on_path(KERN__CONV_IM2COL, conv_matches_ref, 1); }
END_TEST
START_TEST(test_conv3d_gradients_fd) { on_path(KERN__CONV_BLOCKED, conv_gradients_fd, 0); }
END_TEST
START_TEST(test_conv3d_gradients_fd_vol2col) { on_path(KERN__CONV_IM2COL, conv_gradients_fd, 0); }
END_TEST
START_TEST(test_conv_transpose3d_matches_ref) { on_path(KERN__CONV_BLOCKED, convt_matches_ref, 1); }
END_TEST
START_TEST(test_conv_transpose3d_matches_ref_vol2col)
{
    on_path(KERN__CONV_IM2COL, convt_matches_ref, 1);
}
END_TEST
START_TEST(test_conv_transpose3d_gradients_fd) { on_path(KERN__CONV_BLOCKED, convt_gradients_fd, 0); }
END_TEST
START_TEST(test_conv_transpose3d_gradients_fd_vol2col)
{
    on_path(KERN__CONV_IM2COL, convt_gradients_fd, 0);
}
END_TEST

/* Depth bands: every layer with more than two planes in its window grid
 * runs in bands of two (a budget of one byte), so that the bands' edges
 * (the first band's padding, windows shared between bands, a short last
 * band, strides that skip planes, a transposed convolution's output
 * padding) meet the same references, finite differences and bfloat16
 * checks as whole layers. */
static void banded(void (*check)(void), int covers)
{
    kern__c3d_set_band_bytes(1);
    banded_seen = 0;
    on_path(KERN__CONV_BLOCKED, check, covers);
    kern__c3d_set_band_bytes(0);
    if (kern__conv_have_onednn() && kernels_isa_level() >= KERNELS_ISA_AVX2 && covers)
        ck_assert_int_ge(banded_seen, 4);
    printf("%d shapes in depth bands\n", banded_seen);
}

START_TEST(test_conv3d_banded) { banded(conv_matches_ref, 1); }
END_TEST
START_TEST(test_conv3d_banded_fd) { banded(conv_gradients_fd, 0); }
END_TEST
START_TEST(test_conv_transpose3d_banded) { banded(convt_matches_ref, 1); }
END_TEST
START_TEST(test_conv_transpose3d_banded_fd) { banded(convt_gradients_fd, 0); }
END_TEST

/* Two threads: vol2col's bands and (image, channel) pairs split over the
 * pool and its weight gradient summed from per-thread partials, oneDNN's
 * team of two; a workspace sized for one thread still serves. */
static void threads_match_ref(void)
{
    static const op_conv3d_params cases[] = {
        {2, 5, 9, 10, 11, 6, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},
        {1, 6, 9, 8, 13, 5, 3, 3, 3, 2, 2, 2, 1, 1, 1, 1, 1, 1},
        {1, 3, 7, 7, 7, 4, 3, 3, 3, 1, 1, 1, 2, 2, 2, 2, 2, 2},
        {1, 24, 12, 12, 12, 16, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1}, /* several bands */
        {2, 4, 6, 6, 6, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1},
    };
    kt_rng r;
    kt_rng_init(&r, 325);
    for (int one_thread_ws = 0; one_thread_ws < 2; one_thread_ws++)
        for (size_t t = 0; t < sizeof(cases) / sizeof(cases[0]); t++) {
            op_conv3d_params p = cases[t];
            op_conv_transpose3d_params q = transpose_of(&p);
            ck_assert(valid_transpose(&q));
            size_t nx = nx_of(&p), nw = nw_of(&p), ny = ny_of(&p);
            kernels_set_threads(1);
            size_t wsb1 = op_conv3d_workspace(&p), twsb1 = op_conv_transpose3d_workspace(&q);
            kernels_set_threads(2);
            size_t wsb = one_thread_ws ? wsb1 : op_conv3d_workspace(&p);
            size_t twsb = one_thread_ws ? twsb1 : op_conv_transpose3d_workspace(&q);
            float *x = kt_falloc(nx), *w = kt_falloc(nw), *b = kt_falloc(p.k);
            float *y = kt_falloc(ny), *yr = kt_falloc(ny), *dy = kt_falloc(ny);
            float *dx = kt_falloc(nx), *dxr = kt_falloc(nx);
            float *dw = kt_falloc(nw), *dwr = kt_falloc(nw);
            float *db = kt_falloc(p.k), *dbr = kt_falloc(p.k);
            float *ws = ws_new(wsb), *tws = ws_new(twsb);
            kt_fill(&r, x, nx, -1, 1);
            kt_fill(&r, w, nw, -1, 1);
            kt_fill(&r, b, p.k, -1, 1);
            kt_fill(&r, dy, ny, -1, 1);
            op_conv3d_forward(y, x, w, b, &p, ws, wsb);
            op_conv3d_forward_ref(yr, x, w, b, &p);
            ck_assert_msg(kt_relerr_ff(y, yr, ny) < 1e-5, "case %zu fwd", t);
            op_conv3d_backward(dx, dw, db, dy, x, w, &p, ws, wsb);
            op_conv3d_backward_ref(dxr, dwr, dbr, dy, x, w, &p);
            ck_assert_msg(kt_relerr_ff(dx, dxr, nx) < 1e-5, "case %zu dx", t);
            ck_assert_msg(kt_relerr_ff(dw, dwr, nw) < 1e-5, "case %zu dw", t);
            ck_assert_msg(kt_relerr_ff(db, dbr, p.k) < 1e-6, "case %zu db", t);
            ws_check(ws, wsb);
            /* transposed: dy (n, k, out) -> (n, c, in) */
            op_conv_transpose3d_forward(dx, dy, w, NULL, &q, tws, twsb);
            op_conv_transpose3d_forward_ref(dxr, dy, w, NULL, &q);
            ck_assert_msg(kt_relerr_ff(dx, dxr, nx) < 1e-5, "case %zu tfwd", t);
            op_conv_transpose3d_backward(y, dw, NULL, x, dy, w, &q, tws, twsb);
            op_conv_transpose3d_backward_ref(yr, dwr, NULL, x, dy, w, &q);
            ck_assert_msg(kt_relerr_ff(y, yr, ny) < 1e-5, "case %zu tdx", t);
            ck_assert_msg(kt_relerr_ff(dw, dwr, nw) < 1e-5, "case %zu tdw", t);
            ws_check(tws, twsb);
            free(x); free(w); free(b); free(y); free(yr); free(dy); free(dx);
            free(dxr); free(dw); free(dwr); free(db); free(dbr); free(ws); free(tws);
        }
    kernels_set_threads(1);
}

START_TEST(test_threads) { on_path(KERN__CONV_BLOCKED, threads_match_ref, 0); }
END_TEST
START_TEST(test_threads_vol2col)
{
    kern__conv_path saved = kern__conv_get_path();
    kern__conv_set_path(KERN__CONV_IM2COL);
    threads_match_ref();
    kern__conv_set_path(saved);
}
END_TEST

/* x rounded to bfloat16 and widened again. */
static void round_bf16(float *out, const float *x, size_t n)
{
    uint16_t *h = malloc(n * sizeof(uint16_t));
    bf16_pack(h, x, n);
    bf16_unpack(out, h, n);
    free(h);
}

/* The operator a bfloat16 case runs: conv p itself, or (t) the transposed
 * convolution whose input is p's output (transpose_of). */
static size_t c3_in(int t, const op_conv3d_params *p)
{
    return t ? ny_of(p) : nx_of(p);
}

static size_t c3_out(int t, const op_conv3d_params *p)
{
    return t ? nx_of(p) : ny_of(p);
}

static size_t c3_ws(int t, int bf16, const op_conv3d_params *p)
{
    op_conv_transpose3d_params q = transpose_of(p);
    if (t)
        return bf16 ? op_conv_transpose3d_bf16_workspace(&q) : op_conv_transpose3d_workspace(&q);
    return bf16 ? op_conv3d_bf16_workspace(p) : op_conv3d_workspace(p);
}

/* forward (in float32 unless bf16; the reference in double with ref) */
static int c3_fwd(int t, int bf16, int ref, const op_conv3d_params *p, float *y, const float *x,
                  const float *w, const float *b, void *ws, size_t wsb)
{
    op_conv_transpose3d_params q = transpose_of(p);
    if (ref && t)
        op_conv_transpose3d_forward_ref(y, x, w, b, &q);
    else if (ref)
        op_conv3d_forward_ref(y, x, w, b, p);
    else if (bf16)
        return t ? op_conv_transpose3d_forward_bf16(y, x, w, b, &q, ws, wsb)
                 : op_conv3d_forward_bf16(y, x, w, b, p, ws, wsb);
    else if (t)
        op_conv_transpose3d_forward(y, x, w, b, &q, ws, wsb);
    else
        op_conv3d_forward(y, x, w, b, p, ws, wsb);
    return 0;
}

static int c3_bwd(int t, int bf16, int ref, const op_conv3d_params *p, float *dx, float *dw,
                  float *db, const float *dy, const float *x, const float *w, void *ws,
                  size_t wsb)
{
    op_conv_transpose3d_params q = transpose_of(p);
    if (ref && t)
        op_conv_transpose3d_backward_ref(dx, dw, db, dy, x, w, &q);
    else if (ref)
        op_conv3d_backward_ref(dx, dw, db, dy, x, w, p);
    else if (bf16)
        return t ? op_conv_transpose3d_backward_bf16(dx, dw, db, dy, x, w, &q, ws, wsb)
                 : op_conv3d_backward_bf16(dx, dw, db, dy, x, w, p, ws, wsb);
    else if (t)
        op_conv_transpose3d_backward(dx, dw, db, dy, x, w, &q, ws, wsb);
    else
        op_conv3d_backward(dx, dw, db, dy, x, w, p, ws, wsb);
    return 0;
}

/* Mixed precision against the double loops on the inputs rounded to
 * bfloat16 (the output and input gradient to float32 accumulation, 1e-5
 * of the largest; the weight gradient to bfloat16's rounding where oneDNN
 * writes it so, 4e-3) and against float32 (within bfloat16's rounding of
 * the inputs: 2e-2 of the largest); where it cannot compute in bfloat16
 * it gives float32's bits. must: shapes that must run in bfloat16 where
 * the processor has it. t: the transposed convolution of p's output. */
static void conv_bf16_case(int t, const op_conv3d_params *p, int bias, int must)
{
    size_t nx = c3_in(t, p), nw = nw_of(p), ny = c3_out(t, p);
    int k = t ? p->c : p->k;
    kt_rng r;
    kt_rng_init(&r, 326 + nx);
    float *x = kt_falloc(nx), *w = kt_falloc(nw), *b = kt_falloc(k), *dy = kt_falloc(ny);
    float *y = kt_falloc(ny), *dx = kt_falloc(nx), *dw = kt_falloc(nw), *db = kt_falloc(k);
    float *y2 = kt_falloc(ny), *dx2 = kt_falloc(nx), *dw2 = kt_falloc(nw), *db2 = kt_falloc(k);
    float *ry = kt_falloc(ny), *rdx = kt_falloc(nx), *rdw = kt_falloc(nw);
    kt_fill(&r, x, nx, -1, 1);
    kt_fill(&r, w, nw, -0.5, 0.5);
    kt_fill(&r, b, k, -0.5, 0.5);
    kt_fill(&r, dy, ny, -1, 1);
    size_t wsb = c3_ws(t, 1, p);
    ck_assert_uint_ge(wsb, c3_ws(t, 0, p));
    float *ws = ws_new(wsb);
    const float *bp = bias ? b : NULL;
    double moved = kernels_layout_seconds();
    int f = c3_fwd(t, 1, 0, p, y, x, w, bp, ws, wsb);
    int g = c3_bwd(t, 1, 0, p, dx, dw, bias ? db : NULL, dy, x, w, ws, wsb);
    ws_check(ws, wsb);
    ck_assert_int_eq(f, g);
    char how[512];
    op_conv_transpose3d_params q = transpose_of(p);
    if (t)
        op_conv_transpose3d_describe(&q, 1, how, sizeof(how));
    else
        op_conv3d_describe(p, 1, how, sizeof(how));
    printf("%s c%d k%d mixed precision: %s\n", t ? "conv_transpose3d" : "conv3d",
           t ? q.c : p->c, k, how);
    if (must && kernels_bf16_compute())
        ck_assert_msg(f == 1, "c%d k%d: not in bfloat16: %s", p->c, p->k, how);
    c3_fwd(t, 0, 0, p, y2, x, w, bp, ws, wsb);
    c3_bwd(t, 0, 0, p, dx2, dw2, bias ? db2 : NULL, dy, x, w, ws, wsb);
    if (f) {
        ck_assert(kernels_layout_seconds() > moved); /* its reorders were timed */
        float *xr = kt_falloc(nx), *wr = kt_falloc(nw), *dyr = kt_falloc(ny);
        round_bf16(xr, x, nx);
        round_bf16(wr, w, nw);
        round_bf16(dyr, dy, ny);
        c3_fwd(t, 0, 1, p, ry, xr, wr, bp, NULL, 0);
        c3_bwd(t, 0, 1, p, rdx, rdw, NULL, dyr, xr, wr, NULL, 0);
        ck_assert_msg(kt_relerr_ff(y, ry, ny) < 1e-5, "fwd %g", kt_relerr_ff(y, ry, ny));
        ck_assert_msg(kt_relerr_ff(dx, rdx, nx) < 1e-5, "dx %g", kt_relerr_ff(dx, rdx, nx));
        ck_assert_msg(kt_relerr_ff(dw, rdw, nw) < 4e-3, "dw %g", kt_relerr_ff(dw, rdw, nw));
        ck_assert_msg(kt_relerr_ff(y, y2, ny) < 2e-2, "fwd vs f32 %g", kt_relerr_ff(y, y2, ny));
        ck_assert_msg(kt_relerr_ff(dx, dx2, nx) < 2e-2, "dx vs f32 %g",
                      kt_relerr_ff(dx, dx2, nx));
        ck_assert_msg(kt_relerr_ff(dw, dw2, nw) < 2e-2, "dw vs f32 %g",
                      kt_relerr_ff(dw, dw2, nw));
        ck_assert(memcmp(y, y2, ny * sizeof(float)) != 0); /* it did round */
        /* the weight gradient alone (a first layer's): the same bits */
        float *dw1 = kt_falloc(nw);
        ck_assert_int_eq(c3_bwd(t, 1, 0, p, NULL, dw1, NULL, dy, x, w, ws, wsb), 1);
        ck_assert(memcmp(dw1, dw, nw * sizeof(float)) == 0);
        free(dw1);
        if (bias)
            ck_assert_msg(kt_relerr_ff(db, db2, k) < 1e-6, "db");
        printf("  against float32: out %.2e, din %.2e, dweight %.2e\n", kt_relerr_ff(y, y2, ny),
               kt_relerr_ff(dx, dx2, nx), kt_relerr_ff(dw, dw2, nw));
        free(xr); free(wr); free(dyr);
    } else {
        ck_assert(memcmp(y, y2, ny * sizeof(float)) == 0);
        ck_assert(memcmp(dx, dx2, nx * sizeof(float)) == 0);
        ck_assert(memcmp(dw, dw2, nw * sizeof(float)) == 0);
    }
    /* bfloat16 turned off: float32's bits */
    kernels_bf16_enable(0);
    ck_assert_int_eq(c3_fwd(t, 1, 0, p, y, x, w, bp, ws, wsb), 0);
    ck_assert_int_eq(c3_bwd(t, 1, 0, p, dx, dw, bias ? db : NULL, dy, x, w, ws, wsb), 0);
    kernels_bf16_enable(1);
    ck_assert(memcmp(y, y2, ny * sizeof(float)) == 0);
    ck_assert(memcmp(dx, dx2, nx * sizeof(float)) == 0);
    ck_assert(memcmp(dw, dw2, nw * sizeof(float)) == 0);
    free(x); free(w); free(b); free(dy); free(y); free(dx); free(dw); free(db);
    free(y2); free(dx2); free(dw2); free(db2); free(ry); free(rdx); free(rdw); free(ws);
}

static void conv3d_bf16(void);

START_TEST(test_conv3d_bf16) { conv3d_bf16(); }
END_TEST

/* Mixed precision in depth bands of two planes */
START_TEST(test_conv3d_bf16_banded)
{
    kern__c3d_set_band_bytes(1);
    conv3d_bf16();
    kern__c3d_set_band_bytes(0);
}
END_TEST

static void conv3d_bf16(void)
{
    kernels_set_threads(2);
    /* a 3D U-Net's second layer (32 -> 32), a strided one, one of 8
     * outputs and channel counts not in 8s; its first (1 -> 32) and a
     * 4-output one, which stay float32 where oneDNN lacks a kernel or by
     * the rule */
    op_conv3d_params must[] = {
        {1, 32, 8, 8, 8, 32, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},
        {2, 16, 7, 6, 5, 16, 3, 3, 3, 2, 2, 2, 1, 1, 1, 1, 1, 1},
    };
    op_conv3d_params may[] = {
        {1, 1, 8, 8, 8, 32, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},
        {1, 8, 6, 6, 6, 8, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},
        {1, 13, 5, 6, 7, 19, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},
        {1, 12, 6, 6, 6, 20, 3, 3, 3, 1, 1, 1, 2, 2, 2, 2, 2, 2},
        {1, 16, 5, 5, 5, 4, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},
    };
    /* each as a convolution, and as the transposed convolution of its
     * output (a 3D U-Net's up-convolutions: 32 <- 32 and 16 <- 16 with
     * stride 2 must run in bfloat16 too) */
    for (int t = 0; t < 2; t++) {
        for (size_t i = 0; i < sizeof(must) / sizeof(must[0]); i++) {
            conv_bf16_case(t, &must[i], 1, 1);
            conv_bf16_case(t, &must[i], 0, 1);
        }
        for (size_t i = 0; i < sizeof(may) / sizeof(may[0]); i++) {
            op_conv_transpose3d_params q = transpose_of(&may[i]);
            if (!t || valid_transpose(&q))
                conv_bf16_case(t, &may[i], (int)(i % 2), 0);
        }
    }
    kernels_set_threads(1);
}

int main(void)
{
    Suite *s = suite_create("conv3d");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_conv3d_matches_ref);
    tcase_add_test(tc, test_conv3d_matches_ref_vol2col);
    tcase_add_test(tc, test_conv3d_gradients_fd);
    tcase_add_test(tc, test_conv3d_gradients_fd_vol2col);
    tcase_add_test(tc, test_conv_transpose3d_matches_ref);
    tcase_add_test(tc, test_conv_transpose3d_matches_ref_vol2col);
    tcase_add_test(tc, test_conv_transpose3d_gradients_fd);
    tcase_add_test(tc, test_conv_transpose3d_gradients_fd_vol2col);
    tcase_add_test(tc, test_threads);
    tcase_add_test(tc, test_threads_vol2col);
    tcase_add_test(tc, test_conv3d_bf16);
    tcase_add_test(tc, test_conv3d_banded);
    tcase_add_test(tc, test_conv3d_banded_fd);
    tcase_add_test(tc, test_conv_transpose3d_banded);
    tcase_add_test(tc, test_conv_transpose3d_banded_fd);
    tcase_add_test(tc, test_conv3d_bf16_banded);
    suite_add_tcase(s, tc);
    return kt_run(s);
}
