/* conv2d and transposed conv2d: GEMM paths against the direct loops on
 * random shapes (odd sizes, stride 2, padding, dilation, 1x1, several row
 * bands), gradients against central differences of double-precision direct
 * convolutions, and the two ops as each other's adjoint. Every check runs
 * on the path in force (APPLIANCE_CONV_PATH; oneDNN's own layouts for 16
 * channels and more, im2col below, by default), then again
 * with im2col and with oneDNN forced (the oneDNN runs are skipped, with a
 * message, when the kernels were built without it). */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "kernels.h"
#include "kernels_internal.h"
#include "kt.h"
#include "op_conv2d.h"
#include "op_conv_transpose2d.h"

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

static op_conv2d_params random_conv(kt_rng *r)
{
    for (;;) {
        op_conv2d_params p = {
            .n = kt_int(r, 1, 2), .c = kt_int(r, 1, 4),
            .h = kt_int(r, 1, 9), .w = kt_int(r, 1, 9),
            .k = kt_int(r, 1, 4), .r = kt_int(r, 1, 3), .s = kt_int(r, 1, 3),
            .stride_h = kt_int(r, 1, 2), .stride_w = kt_int(r, 1, 2),
            .pad_h = kt_int(r, 0, 2), .pad_w = kt_int(r, 0, 2),
            .dil_h = kt_int(r, 1, 2), .dil_w = kt_int(r, 1, 2),
        };
        if (op_conv2d_out_h(&p) >= 1 && op_conv2d_out_w(&p) >= 1)
            return p;
    }
}

/* The shapes every conv test runs: fixed corner cases, then random ones. */
static op_conv2d_params conv_case(kt_rng *r, int i)
{
    static const op_conv2d_params fixed[] = {
        /* n c  h  w  k  r  s  sh sw ph pw dh dw */
        {2, 3, 7, 9, 4, 3, 3, 1, 1, 1, 1, 1, 1},   /* same-size 3x3 */
        {1, 2, 8, 7, 3, 3, 3, 2, 2, 1, 1, 1, 1},   /* stride 2 */
        {2, 3, 9, 8, 2, 3, 2, 1, 2, 2, 1, 2, 3},   /* dilation, mixed */
        {2, 5, 6, 5, 3, 1, 1, 1, 1, 0, 0, 1, 1},   /* 1x1 direct */
        {1, 3, 7, 7, 2, 1, 1, 2, 2, 0, 0, 1, 1},   /* 1x1 stride 2 */
        {1, 2, 5, 6, 2, 5, 4, 3, 2, 2, 3, 1, 1},   /* big kernel, stride 3 */
        {1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0},   /* zeros mean 1 */
    };
    int nf = sizeof(fixed) / sizeof(fixed[0]);
    return i < nf ? fixed[i] : random_conv(r);
}

#define CONV_CASES 16

/* Where the checked op calls ran. */
static struct {
    int calls;        /* forward and backward calls checked */
    int onednn;       /* of which every piece ran on oneDNN */
    int touched;      /* of which some piece ran on oneDNN */
} ran_stats;

/* Counts one checked call, which on oneDNN runs the `want` primitives. */
static void note_ran(unsigned want)
{
    unsigned ran = kern__conv_ran_onednn();
    ran_stats.calls++;
    ran_stats.onednn += ran == want;
    ran_stats.touched += ran != 0;
}

/* When set, workspaces also have room for oneDNN's scratchpad, which is
 * often larger than the planner's workspace (the op then falls back to
 * im2col): so that every shape of the table runs on oneDNN. The threads
 * check keeps its workspaces sized for one thread as they are. */
static int roomy;

static size_t room_for_onednn(int transposed, const void *p, size_t bytes)
{
    static const unsigned jobs[] = {
        KERN__DNNL_FWD, KERN__DNNL_FWD_BIAS,
        KERN__DNNL_BWD_W_BIAS | KERN__DNNL_BWD_D, KERN__DNNL_BWD_W,
    };
    for (size_t j = 0; roomy && j < sizeof(jobs) / sizeof(jobs[0]); j++) {
        size_t need = kern__conv_scratch(transposed, p, jobs[j]);
        if (need != SIZE_MAX && need > bytes)
            bytes = need;
    }
    return bytes;
}

static size_t conv_ws(const op_conv2d_params *p)
{
    return room_for_onednn(0, p, op_conv2d_workspace(p));
}

static size_t convt_ws(const op_conv_transpose2d_params *q)
{
    return room_for_onednn(1, q, op_conv_transpose2d_workspace(q));
}

static void conv_matches_ref(void)
{
    kt_rng r;
    kt_rng_init(&r, 21);
    for (int t = 0; t < CONV_CASES + 1; t++) {
        op_conv2d_params p = conv_case(&r, t);
        if (t == CONV_CASES) /* wide rows: several bands per image */
            p = (op_conv2d_params){1, 64, 20, 200, 3, 3, 3, 1, 1, 1, 1, 1, 1};
        int oh = op_conv2d_out_h(&p), ow = op_conv2d_out_w(&p);
        size_t nx = (size_t)p.n * p.c * p.h * p.w;
        size_t nw = (size_t)p.k * p.c * p.r * p.s;
        size_t ny = (size_t)p.n * p.k * oh * ow;
        size_t wsb = conv_ws(&p);
        float *x = kt_falloc(nx), *w = kt_falloc(nw), *b = kt_falloc(p.k);
        float *y = kt_falloc(ny), *yr = kt_falloc(ny), *dy = kt_falloc(ny);
        float *dx = kt_falloc(nx), *dxr = kt_falloc(nx);
        float *dw = kt_falloc(nw), *dwr = kt_falloc(nw);
        float *db = kt_falloc(p.k), *dbr = kt_falloc(p.k);
        float *ws = ws_new(wsb);
        kt_fill(&r, x, nx, -1, 1);
        kt_fill(&r, w, nw, -1, 1);
        kt_fill(&r, b, p.k, -1, 1);
        kt_fill(&r, dy, ny, -1, 1);
        kt_fill(&r, dx, nx, 7, 8); /* stale values must be overwritten */
        kt_fill(&r, dw, nw, 7, 8);

        kern__conv_ran_onednn();
        op_conv2d_forward(y, x, w, t % 2 ? NULL : b, &p, ws, wsb);
        note_ran(t % 2 ? KERN__DNNL_FWD : KERN__DNNL_FWD_BIAS);
        op_conv2d_forward_ref(yr, x, w, t % 2 ? NULL : b, &p);
        ck_assert_msg(kt_relerr_ff(y, yr, ny) < 1e-5, "case %d fwd %g", t,
                      kt_relerr_ff(y, yr, ny));
        op_conv2d_backward(dx, dw, db, dy, x, w, &p, ws, wsb);
        note_ran(KERN__DNNL_BWD_W_BIAS | KERN__DNNL_BWD_D);
        op_conv2d_backward_ref(dxr, dwr, dbr, dy, x, w, &p);
        ck_assert_msg(kt_relerr_ff(dx, dxr, nx) < 1e-5, "case %d dx", t);
        ck_assert_msg(kt_relerr_ff(dw, dwr, nw) < 1e-5, "case %d dw", t);
        ck_assert_msg(kt_relerr_ff(db, dbr, p.k) < 1e-5, "case %d db", t);
        op_conv2d_backward(NULL, dw, NULL, dy, x, w, &p, ws, wsb);
        note_ran(KERN__DNNL_BWD_W);
        ck_assert_msg(kt_relerr_ff(dw, dwr, nw) < 1e-5, "case %d dw only", t);
        ws_check(ws, wsb);
        free(x); free(w); free(b); free(y); free(yr); free(dy); free(dx);
        free(dxr); free(dw); free(dwr); free(db); free(dbr); free(ws);
    }
}

/* Double-precision direct convolution for finite differences. */
struct conv_fd {
    op_conv2d_params p;
    int oh, ow;
    double *x, *w, *b, *y;
    const float *r;
    int transposed;   /* evaluate the transposed convolution instead */
};

static double conv_fd_loss(void *ctx)
{
    struct conv_fd *c = ctx;
    const op_conv2d_params *p = &c->p;
    int sh = p->stride_h ? p->stride_h : 1, sw = p->stride_w ? p->stride_w : 1;
    int dh = p->dil_h ? p->dil_h : 1, dw = p->dil_w ? p->dil_w : 1;
    for (int i = 0; i < p->n; i++)
        for (int k = 0; k < p->k; k++)
            for (int oy = 0; oy < c->oh; oy++)
                for (int ox = 0; ox < c->ow; ox++) {
                    double acc = c->b[k];
                    for (int ch = 0; ch < p->c; ch++)
                        for (int ky = 0; ky < p->r; ky++)
                            for (int kx = 0; kx < p->s; kx++) {
                                int iy = oy * sh - p->pad_h + ky * dh;
                                int ix = ox * sw - p->pad_w + kx * dw;
                                if (iy < 0 || iy >= p->h || ix < 0 || ix >= p->w)
                                    continue;
                                acc += c->x[((i * p->c + ch) * p->h + iy) * p->w + ix] *
                                       c->w[((k * p->c + ch) * p->r + ky) * p->s + kx];
                            }
                    c->y[((i * p->k + k) * c->oh + oy) * c->ow + ox] = acc;
                }
    return kt_dot(c->y, c->r, (size_t)p->n * p->k * c->oh * c->ow);
}

static void conv_gradients_fd(void)
{
    kt_rng r;
    kt_rng_init(&r, 22);
    for (int t = 0; t < CONV_CASES; t++) {
        op_conv2d_params p = conv_case(&r, t);
        int oh = op_conv2d_out_h(&p), ow = op_conv2d_out_w(&p);
        size_t nx = (size_t)p.n * p.c * p.h * p.w;
        size_t nw = (size_t)p.k * p.c * p.r * p.s;
        size_t ny = (size_t)p.n * p.k * oh * ow;
        float *x = kt_falloc(nx), *w = kt_falloc(nw), *b = kt_falloc(p.k);
        float *R = kt_falloc(ny), *dx = kt_falloc(nx), *dw = kt_falloc(nw);
        float *db = kt_falloc(p.k);
        size_t wsb = conv_ws(&p);
        float *ws = ws_new(wsb);
        kt_fill(&r, x, nx, -1, 1);
        kt_fill(&r, w, nw, -1, 1);
        kt_fill(&r, b, p.k, -1, 1);
        kt_fill(&r, R, ny, -1, 1);
        kern__conv_ran_onednn();
        op_conv2d_backward(dx, dw, db, R, x, w, &p, ws, wsb);
        note_ran(KERN__DNNL_BWD_W_BIAS | KERN__DNNL_BWD_D);

        struct conv_fd c = {p, oh, ow, kt_dalloc(nx), kt_dalloc(nw),
                            kt_dalloc(p.k), kt_dalloc(ny), R, 0};
        kt_to_double(c.x, x, nx);
        kt_to_double(c.w, w, nw);
        kt_to_double(c.b, b, p.k);
        double *g = kt_dalloc(nx + nw);
        kt_fd_grad(g, c.x, nx, conv_fd_loss, &c, 1e-4);
        ck_assert_msg(kt_relerr(dx, g, nx) < 1e-3, "case %d dx %g", t,
                      kt_relerr(dx, g, nx));
        kt_fd_grad(g, c.w, nw, conv_fd_loss, &c, 1e-4);
        ck_assert_msg(kt_relerr(dw, g, nw) < 1e-3, "case %d dw", t);
        kt_fd_grad(g, c.b, p.k, conv_fd_loss, &c, 1e-4);
        ck_assert_msg(kt_relerr(db, g, p.k) < 1e-3, "case %d db", t);
        free(c.x); free(c.w); free(c.b); free(c.y); free(g);
        free(x); free(w); free(b); free(R); free(dx); free(dw); free(db);
        free(ws);
    }
}

/* The transposed convolution whose input is the output of conv p: same
 * kernel, stride, padding and dilation, out_pad chosen to land back on
 * (h, w) when possible. */
static op_conv_transpose2d_params transpose_of(const op_conv2d_params *p)
{
    op_conv_transpose2d_params q = {
        .n = p->n, .c = p->k, .h = op_conv2d_out_h(p), .w = op_conv2d_out_w(p),
        .k = p->c, .r = p->r, .s = p->s,
        .stride_h = p->stride_h, .stride_w = p->stride_w,
        .pad_h = p->pad_h, .pad_w = p->pad_w,
        .dil_h = p->dil_h, .dil_w = p->dil_w,
    };
    q.out_pad_h = p->h - op_conv_transpose2d_out_h(&q);
    q.out_pad_w = p->w - op_conv_transpose2d_out_w(&q);
    return q;
}

static int valid_transpose(const op_conv_transpose2d_params *q)
{
    int sh = q->stride_h ? q->stride_h : 1, sw = q->stride_w ? q->stride_w : 1;
    int dh = q->dil_h ? q->dil_h : 1, dw = q->dil_w ? q->dil_w : 1;
    return q->out_pad_h >= 0 && q->out_pad_w >= 0 &&
           (q->out_pad_h < sh || q->out_pad_h < dh) &&
           (q->out_pad_w < sw || q->out_pad_w < dw);
}

START_TEST(test_conv_transpose_out_size)
{
    /* U-Net up-convolution: 4x4 kernel, stride 2, pad 1 doubles the size:
     * (4 - 1)*2 - 2*1 + 1*(4 - 1) + 0 + 1 = 8. 2x2 stride 2: 2*h. */
    op_conv_transpose2d_params q = {1, 1, 4, 5, 1, 4, 4, 2, 2, 1, 1, 1, 1, 0, 0};
    ck_assert_int_eq(op_conv_transpose2d_out_h(&q), 8);
    ck_assert_int_eq(op_conv_transpose2d_out_w(&q), 10);
    q = (op_conv_transpose2d_params){1, 1, 3, 7, 1, 2, 2, 2, 2, 0, 0, 1, 1, 1, 0};
    ck_assert_int_eq(op_conv_transpose2d_out_h(&q), 7);
    ck_assert_int_eq(op_conv_transpose2d_out_w(&q), 14);
    /* 1x1 input, 1x1 channel: out = bias + x * w at the kernel positions */
    q = (op_conv_transpose2d_params){1, 1, 1, 1, 1, 2, 2, 1, 1, 0, 0, 1, 1, 0, 0};
    const float x = 2, w[4] = {1, 2, 3, 4}, b = 0.5f;
    float y[4], ws[64];
    ck_assert_uint_le(op_conv_transpose2d_workspace(&q), sizeof(ws));
    op_conv_transpose2d_forward(y, &x, w, &b, &q, ws, sizeof(ws));
    for (int i = 0; i < 4; i++)
        ck_assert_float_eq_tol(y[i], 2 * w[i] + 0.5f, 1e-6f);
}
END_TEST

static void convt_matches_ref(void)
{
    kt_rng r;
    kt_rng_init(&r, 23);
    int tested = 0;
    for (int t = 0; t < CONV_CASES + 1 + 20; t++) {
        op_conv2d_params p = conv_case(&r, t);
        if (t == CONV_CASES) /* many output channels: several bands */
            p = (op_conv2d_params){1, 64, 20, 200, 3, 3, 3, 1, 1, 1, 1, 1, 1};
        op_conv_transpose2d_params q = transpose_of(&p);
        if (!valid_transpose(&q))
            continue;
        tested++;
        int oh = op_conv_transpose2d_out_h(&q), ow = op_conv_transpose2d_out_w(&q);
        ck_assert_int_eq(oh, p.h);
        ck_assert_int_eq(ow, p.w);
        size_t nx = (size_t)q.n * q.c * q.h * q.w;
        size_t nw = (size_t)q.c * q.k * q.r * q.s;
        size_t ny = (size_t)q.n * q.k * oh * ow;
        size_t wsb = convt_ws(&q);
        float *x = kt_falloc(nx), *w = kt_falloc(nw), *b = kt_falloc(q.k);
        float *y = kt_falloc(ny), *yr = kt_falloc(ny), *dy = kt_falloc(ny);
        float *dx = kt_falloc(nx), *dxr = kt_falloc(nx);
        float *dw = kt_falloc(nw), *dwr = kt_falloc(nw);
        float *db = kt_falloc(q.k), *dbr = kt_falloc(q.k);
        float *ws = ws_new(wsb);
        kt_fill(&r, x, nx, -1, 1);
        kt_fill(&r, w, nw, -1, 1);
        kt_fill(&r, b, q.k, -1, 1);
        kt_fill(&r, dy, ny, -1, 1);
        kt_fill(&r, y, ny, 7, 8);
        kt_fill(&r, dx, nx, 7, 8);
        kt_fill(&r, dw, nw, 7, 8);

        kern__conv_ran_onednn();
        op_conv_transpose2d_forward(y, x, w, t % 2 ? NULL : b, &q, ws, wsb);
        note_ran(t % 2 ? KERN__DNNL_FWD : KERN__DNNL_FWD_BIAS);
        op_conv_transpose2d_forward_ref(yr, x, w, t % 2 ? NULL : b, &q);
        ck_assert_msg(kt_relerr_ff(y, yr, ny) < 1e-5, "case %d fwd", t);
        op_conv_transpose2d_backward(dx, dw, db, dy, x, w, &q, ws, wsb);
        note_ran(KERN__DNNL_BWD_W_BIAS | KERN__DNNL_BWD_D);
        op_conv_transpose2d_backward_ref(dxr, dwr, dbr, dy, x, w, &q);
        ck_assert_msg(kt_relerr_ff(dx, dxr, nx) < 1e-5, "case %d dx", t);
        ck_assert_msg(kt_relerr_ff(dw, dwr, nw) < 1e-5, "case %d dw", t);
        ck_assert_msg(kt_relerr_ff(db, dbr, q.k) < 1e-5, "case %d db", t);
        ws_check(ws, wsb);

        /* adjoint: <convT(x), v> = <x, conv(v)> with the same weights,
         * conv weight (p.k, p.c, r, s) = convT weight (q.c, q.k, r, s) */
        if (p.n * p.c * p.h * p.w < 100000) {
            float *v = kt_falloc(ny), *cv = kt_falloc(nx);
            size_t cwsb = conv_ws(&p);
            float *cws = ws_new(cwsb);
            kt_fill(&r, v, ny, -1, 1);
            op_conv_transpose2d_forward(y, x, w, NULL, &q, ws, wsb);
            op_conv2d_forward(cv, v, w, NULL, &p, cws, cwsb);
            double lhs = 0, rhs = 0, mag = 0;
            for (size_t i = 0; i < ny; i++) {
                lhs += (double)y[i] * v[i];
                mag += fabs((double)y[i] * v[i]);
            }
            for (size_t i = 0; i < nx; i++)
                rhs += (double)x[i] * cv[i];
            ck_assert_msg(fabs(lhs - rhs) <= 1e-5 * mag, "case %d adjoint", t);
            free(v); free(cv); free(cws);
        }
        free(x); free(w); free(b); free(y); free(yr); free(dy); free(dx);
        free(dxr); free(dw); free(dwr); free(db); free(dbr); free(ws);
    }
    ck_assert_int_ge(tested, 10);
}

/* Double-precision transposed convolution by scattering. */
struct convt_fd {
    op_conv_transpose2d_params q;
    int oh, ow;
    double *x, *w, *b, *y;
    const float *r;
};

static double convt_fd_loss(void *ctx)
{
    struct convt_fd *c = ctx;
    const op_conv_transpose2d_params *q = &c->q;
    int sh = q->stride_h ? q->stride_h : 1, sw = q->stride_w ? q->stride_w : 1;
    int dh = q->dil_h ? q->dil_h : 1, dw = q->dil_w ? q->dil_w : 1;
    size_t ohw = (size_t)c->oh * c->ow;
    for (int i = 0; i < q->n; i++)
        for (int k = 0; k < q->k; k++)
            for (size_t j = 0; j < ohw; j++)
                c->y[(i * q->k + k) * ohw + j] = c->b[k];
    for (int i = 0; i < q->n; i++)
        for (int ch = 0; ch < q->c; ch++)
            for (int iy = 0; iy < q->h; iy++)
                for (int ix = 0; ix < q->w; ix++)
                    for (int k = 0; k < q->k; k++)
                        for (int ky = 0; ky < q->r; ky++)
                            for (int kx = 0; kx < q->s; kx++) {
                                int oy = iy * sh - q->pad_h + ky * dh;
                                int ox = ix * sw - q->pad_w + kx * dw;
                                if (oy < 0 || oy >= c->oh || ox < 0 || ox >= c->ow)
                                    continue;
                                c->y[((i * q->k + k) * c->oh + oy) * c->ow + ox] +=
                                    c->x[((i * q->c + ch) * q->h + iy) * q->w + ix] *
                                    c->w[((ch * q->k + k) * q->r + ky) * q->s + kx];
                            }
    return kt_dot(c->y, c->r, (size_t)q->n * q->k * ohw);
}

static void convt_gradients_fd(void)
{
    kt_rng r;
    kt_rng_init(&r, 24);
    int tested = 0;
    for (int t = 0; t < CONV_CASES + 20; t++) {
        op_conv2d_params p = conv_case(&r, t);
        op_conv_transpose2d_params q = transpose_of(&p);
        if (!valid_transpose(&q))
            continue;
        tested++;
        int oh = op_conv_transpose2d_out_h(&q), ow = op_conv_transpose2d_out_w(&q);
        size_t nx = (size_t)q.n * q.c * q.h * q.w;
        size_t nw = (size_t)q.c * q.k * q.r * q.s;
        size_t ny = (size_t)q.n * q.k * oh * ow;
        float *x = kt_falloc(nx), *w = kt_falloc(nw), *b = kt_falloc(q.k);
        float *R = kt_falloc(ny), *dx = kt_falloc(nx), *dw = kt_falloc(nw);
        float *db = kt_falloc(q.k);
        size_t wsb = convt_ws(&q);
        float *ws = ws_new(wsb);
        kt_fill(&r, x, nx, -1, 1);
        kt_fill(&r, w, nw, -1, 1);
        kt_fill(&r, b, q.k, -1, 1);
        kt_fill(&r, R, ny, -1, 1);
        kern__conv_ran_onednn();
        op_conv_transpose2d_backward(dx, dw, db, R, x, w, &q, ws, wsb);
        note_ran(KERN__DNNL_BWD_W_BIAS | KERN__DNNL_BWD_D);

        struct convt_fd c = {q, oh, ow, kt_dalloc(nx), kt_dalloc(nw),
                             kt_dalloc(q.k), kt_dalloc(ny), R};
        kt_to_double(c.x, x, nx);
        kt_to_double(c.w, w, nw);
        kt_to_double(c.b, b, q.k);
        double *g = kt_dalloc(nx + nw);
        kt_fd_grad(g, c.x, nx, convt_fd_loss, &c, 1e-4);
        ck_assert_msg(kt_relerr(dx, g, nx) < 1e-3, "case %d dx", t);
        kt_fd_grad(g, c.w, nw, convt_fd_loss, &c, 1e-4);
        ck_assert_msg(kt_relerr(dw, g, nw) < 1e-3, "case %d dw", t);
        kt_fd_grad(g, c.b, q.k, convt_fd_loss, &c, 1e-4);
        ck_assert_msg(kt_relerr(db, g, q.k) < 1e-3, "case %d db", t);
        free(c.x); free(c.w); free(c.b); free(c.y); free(g);
        free(x); free(w); free(b); free(R); free(dx); free(dw); free(db);
        free(ws);
    }
    ck_assert_int_ge(tested, 10);
}

/* The same comparisons on two threads: bands and images split over the
 * pool, weight gradients summed from per-thread partials. Also a workspace
 * sized for one thread, which must still work (on one thread). */
static void threads_match_ref(void)
{
    static const op_conv2d_params cases[] = {
        /* n c  h   w  k  r  s  sh sw ph pw dh dw */
        {3, 8, 30, 40, 5, 3, 3, 1, 1, 1, 1, 1, 1},   /* bands, as conv */
        {3, 8, 31, 33, 5, 3, 3, 2, 2, 1, 1, 1, 1},   /* col2im by image */
        {1, 8, 31, 33, 5, 3, 3, 2, 2, 1, 1, 1, 1},   /* one image */
        {2, 8, 17, 19, 6, 1, 1, 1, 1, 0, 0, 1, 1},   /* 1x1 direct */
        {2, 64, 20, 200, 3, 3, 3, 1, 1, 1, 1, 1, 1}, /* several bands */
        {2, 6, 12, 10, 4, 2, 2, 2, 2, 0, 0, 1, 1},   /* 2x2 stride 2 */
        {2, 6, 12, 10, 4, 4, 4, 2, 2, 1, 1, 1, 1},   /* 4x4 stride 2 */
    };
    kt_rng r;
    kt_rng_init(&r, 25);
    for (int one_thread_ws = 0; one_thread_ws < 2; one_thread_ws++) {
        for (size_t t = 0; t < sizeof(cases) / sizeof(cases[0]); t++) {
            op_conv2d_params p = cases[t];
            op_conv_transpose2d_params q = transpose_of(&p);
            ck_assert(valid_transpose(&q));
            int oh = op_conv2d_out_h(&p), ow = op_conv2d_out_w(&p);
            size_t nx = (size_t)p.n * p.c * p.h * p.w;
            size_t nw = (size_t)p.k * p.c * p.r * p.s;
            size_t ny = (size_t)p.n * p.k * oh * ow;
            kernels_set_threads(1);
            size_t wsb1 = op_conv2d_workspace(&p);
            size_t twsb1 = op_conv_transpose2d_workspace(&q);
            kernels_set_threads(2);
            size_t wsb = one_thread_ws ? wsb1 : conv_ws(&p);
            size_t twsb = one_thread_ws ? twsb1 : convt_ws(&q);
            if (!one_thread_ws) {
                ck_assert_uint_gt(wsb, wsb1);
                ck_assert_uint_gt(twsb, twsb1);
            }
            float *x = kt_falloc(nx), *w = kt_falloc(nw), *b = kt_falloc(p.k);
            float *bc = kt_falloc(p.c), *y = kt_falloc(ny), *yr = kt_falloc(ny);
            /* dxr doubles as the reference forward output */
            float *dx = kt_falloc(nx), *dxr = kt_falloc(nx > ny ? nx : ny);
            float *dw = kt_falloc(nw), *dwr = kt_falloc(nw);
            float *db = kt_falloc(p.k), *dbr = kt_falloc(p.k);
            float *ws = ws_new(wsb), *tws = ws_new(twsb);
            kt_fill(&r, x, nx, -1, 1);
            kt_fill(&r, w, nw, -1, 1);
            kt_fill(&r, b, p.k, -1, 1);
            kt_fill(&r, bc, p.c, -1, 1);
            kt_fill(&r, yr, ny, -1, 1);

            kern__conv_ran_onednn();
            op_conv2d_forward(y, x, w, b, &p, ws, wsb);
            note_ran(KERN__DNNL_FWD_BIAS);
            op_conv2d_forward_ref(dxr, x, w, b, &p);
            ck_assert_msg(kt_relerr_ff(y, dxr, ny) < 1e-5, "case %zu fwd", t);
            /* yr is dout here */
            op_conv2d_backward(dx, dw, db, yr, x, w, &p, ws, wsb);
            note_ran(KERN__DNNL_BWD_W_BIAS | KERN__DNNL_BWD_D);
            op_conv2d_backward_ref(dxr, dwr, dbr, yr, x, w, &p);
            ck_assert_msg(kt_relerr_ff(dx, dxr, nx) < 1e-5, "case %zu dx", t);
            ck_assert_msg(kt_relerr_ff(dw, dwr, nw) < 1e-5, "case %zu dw", t);
            ck_assert_msg(kt_relerr_ff(db, dbr, p.k) < 1e-5, "case %zu db", t);
            ws_check(ws, wsb);

            /* transposed: input (n, k, oh, ow) -> output (n, c, h, w) */
            op_conv_transpose2d_forward(dx, yr, w, bc, &q, tws, twsb);
            note_ran(KERN__DNNL_FWD_BIAS);
            op_conv_transpose2d_forward_ref(dxr, yr, w, bc, &q);
            ck_assert_msg(kt_relerr_ff(dx, dxr, nx) < 1e-5, "case %zu tfwd", t);
            float *tdin = kt_falloc(ny), *tdinr = kt_falloc(ny);
            float *tdb = kt_falloc(p.c), *tdbr = kt_falloc(p.c);
            op_conv_transpose2d_backward(tdin, dw, tdb, x, yr, w, &q, tws, twsb);
            note_ran(KERN__DNNL_BWD_W_BIAS | KERN__DNNL_BWD_D);
            op_conv_transpose2d_backward_ref(tdinr, dwr, tdbr, x, yr, w, &q);
            ck_assert_msg(kt_relerr_ff(tdin, tdinr, ny) < 1e-5, "case %zu tdx", t);
            ck_assert_msg(kt_relerr_ff(dw, dwr, nw) < 1e-5, "case %zu tdw", t);
            ck_assert_msg(kt_relerr_ff(tdb, tdbr, p.c) < 1e-5, "case %zu tdb", t);
            ws_check(tws, twsb);
            free(tdin); free(tdinr); free(tdb); free(tdbr);
            free(x); free(w); free(b); free(bc); free(y); free(yr); free(dx);
            free(dxr); free(dw); free(dwr); free(db); free(dbr); free(ws);
            free(tws);
        }
    }
    kernels_set_threads(1);
}

/* Runs a check with the path forced, then puts back the one in force. On
 * im2col no call may touch oneDNN. On oneDNN with room (roomy_ws), every
 * call must have run wholly there (half of them for the threads check,
 * whose second half has workspaces for one thread); with the planner's
 * workspaces, calls whose scratchpad does not fit fall back to im2col and
 * are only counted. */
static void on_path(kern__conv_path path, void (*check)(void),
                    const char *name, int roomy_ws)
{
    if (path == KERN__CONV_ONEDNN && !kern__conv_have_onednn()) {
        printf("%s on oneDNN: skipped, the kernels were built without "
               "oneDNN (libdnnl-dev)\n", name);
        return;
    }
    kern__conv_path saved = kern__conv_get_path();
    kern__conv_set_path(path);
    memset(&ran_stats, 0, sizeof(ran_stats));
    roomy = roomy_ws;
    check();
    roomy = 0;
    kern__conv_set_path(saved);
    ck_assert_int_gt(ran_stats.calls, 0);
    if (path == KERN__CONV_IM2COL)
        ck_assert_msg(ran_stats.touched == 0, "%s: oneDNN ran on the im2col "
                      "path", name);
    else if (roomy_ws)
        ck_assert_msg(ran_stats.onednn >= (roomy_ws == 2 ? ran_stats.calls / 2
                                                          : ran_stats.calls),
                      "%s: only %d of %d calls ran on oneDNN", name,
                      ran_stats.onednn, ran_stats.calls);
    if (path == KERN__CONV_ONEDNN)
        printf("%s on oneDNN%s: %d of %d calls ran wholly on oneDNN\n",
               name, roomy_ws ? "" : " (planner's workspaces)",
               ran_stats.onednn, ran_stats.calls);
}

START_TEST(test_conv_matches_ref) { conv_matches_ref(); }
END_TEST
START_TEST(test_conv_matches_ref_im2col)
{ on_path(KERN__CONV_IM2COL, conv_matches_ref, "conv_matches_ref", 0); }
END_TEST
START_TEST(test_conv_matches_ref_onednn)
{
    on_path(KERN__CONV_ONEDNN, conv_matches_ref, "conv_matches_ref", 1);
    on_path(KERN__CONV_ONEDNN, conv_matches_ref, "conv_matches_ref", 0);
}
END_TEST
START_TEST(test_conv_gradients_fd) { conv_gradients_fd(); }
END_TEST
START_TEST(test_conv_gradients_fd_onednn)
{ on_path(KERN__CONV_ONEDNN, conv_gradients_fd, "conv_gradients_fd", 1); }
END_TEST
START_TEST(test_conv_transpose_matches_ref_and_adjoint) { convt_matches_ref(); }
END_TEST
START_TEST(test_conv_transpose_matches_ref_im2col)
{ on_path(KERN__CONV_IM2COL, convt_matches_ref, "convt_matches_ref", 0); }
END_TEST
START_TEST(test_conv_transpose_matches_ref_onednn)
{
    on_path(KERN__CONV_ONEDNN, convt_matches_ref, "convt_matches_ref", 1);
    on_path(KERN__CONV_ONEDNN, convt_matches_ref, "convt_matches_ref", 0);
}
END_TEST
START_TEST(test_conv_transpose_gradients_fd) { convt_gradients_fd(); }
END_TEST
START_TEST(test_conv_transpose_gradients_fd_onednn)
{ on_path(KERN__CONV_ONEDNN, convt_gradients_fd, "convt_gradients_fd", 1); }
END_TEST
START_TEST(test_threads) { threads_match_ref(); }
END_TEST
START_TEST(test_threads_im2col)
{ on_path(KERN__CONV_IM2COL, threads_match_ref, "threads", 0); }
END_TEST
START_TEST(test_threads_onednn)
{
    on_path(KERN__CONV_ONEDNN, threads_match_ref, "threads", 2);
    on_path(KERN__CONV_ONEDNN, threads_match_ref, "threads", 0);
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

/* The tensors of one convolution case: inputs filled from the seed, two
 * sets of outputs (the call under test's and the one it is compared
 * with), and the reference's. */
typedef struct conv_set {
    size_t nx, nw, ny, nk;
    float *x, *w, *b, *dy;
    float *y, *dx, *dw, *db;     /* the call under test */
    float *y2, *dx2, *dw2, *db2; /* the call compared with */
    float *ry, *rdx, *rdw, *rdb; /* the reference */
} conv_set;

static void conv_set_new(conv_set *t, const op_conv2d_params *p, uint64_t seed)
{
    t->nx = (size_t)p->n * p->c * p->h * p->w;
    t->nw = (size_t)p->k * p->c * p->r * p->s;
    t->ny = (size_t)p->n * p->k * op_conv2d_out_h(p) * op_conv2d_out_w(p);
    t->nk = (size_t)p->k;
    size_t n[] = {t->nx, t->nw, t->nk, t->ny};
    float **in[] = {&t->x, &t->w, &t->b, &t->dy};
    float **out[3][4] = {{&t->dx, &t->dw, &t->db, &t->y}, {&t->dx2, &t->dw2, &t->db2, &t->y2},
                         {&t->rdx, &t->rdw, &t->rdb, &t->ry}};
    double lo[] = {-1, -0.5, -0.5, -1};
    kt_rng r;
    kt_rng_init(&r, seed + t->nx);
    for (int i = 0; i < 4; i++) {
        *in[i] = kt_falloc(n[i]);
        kt_fill(&r, *in[i], n[i], lo[i], -lo[i]);
        for (int j = 0; j < 3; j++)
            *out[j][i] = kt_falloc(n[i]);
    }
}

static void conv_set_free(conv_set *t)
{
    float *all[] = {t->x,  t->w,   t->b,   t->dy,  t->y,  t->dx,  t->dw,  t->db,
                    t->y2, t->dx2, t->dw2, t->db2, t->ry, t->rdx, t->rdw, t->rdb};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        free(all[i]);
}

/* The input kept from the forward pass as it rounded it: the forward
 * pass's bits; a backward pass given it takes the input from it (the
 * caller's input spoilt: the same gradients); a buffer too small is not
 * used. t holds the bfloat16 results of the calls without it. */
static void conv_bf16_kept_case(const conv_set *t, const op_conv2d_params *p, const float *bp,
                                void *ws, size_t wsb)
{
    size_t kb = convplan_conv2d_bf16_kept_bytes(p), nx = t->nx, nw = t->nw, ny = t->ny;
    ck_assert_uint_eq(kb > 0, p->c % 16 == 0);
    if (!kb)
        return;
    ck_assert_uint_eq(kb, ((size_t)p->n * p->c * p->h * p->w * 2 + 63) / 64 * 64);
    void *keep = aligned_alloc(64, kb);
    float *y = kt_falloc(ny), *dx = kt_falloc(nx), *dw = kt_falloc(nw), *db = kt_falloc(t->nk);
    float *spoilt = kt_falloc(nx);
    /* kept where oneDNN's forward pass and weight gradient read one
     * layout (which this processor decides); else the plain call's bits */
    char how[256];
    unsigned d = op_conv2d_describe(p, 1, bp != NULL, wsb, how, sizeof(how));
    ck_assert(d & OP_CONV2D_ON_ONEDNN);
    int want = d & OP_CONV2D_KEEPS_INPUT ? 2 : 1;
    if (want == 1)
        printf("conv c%d k%d %dx%d (bfloat16): its input not kept here: %s\n", p->c, p->k, p->h,
               p->w, how);
    ck_assert_int_eq(op_conv2d_forward_bf16_keep(y, t->x, t->w, bp, p, ws, wsb, keep, kb), want);
    ck_assert(memcmp(y, t->y, ny * sizeof(float)) == 0);
    if (want == 1) {
        ck_assert_int_eq(op_conv2d_backward_bf16_kept(dx, dw, bp ? db : NULL, t->dy, t->x, t->w,
                                                      p, ws, wsb, NULL, 0),
                         1);
        ck_assert(memcmp(dw, t->dw, nw * sizeof(float)) == 0);
        ck_assert(memcmp(dx, t->dx, nx * sizeof(float)) == 0);
        free(keep), free(y), free(dx), free(dw), free(db), free(spoilt);
        return;
    }
    for (size_t i = 0; i < nx; i++)
        spoilt[i] = -3.0f * t->x[i] + 1.0f;
    ck_assert_int_eq(op_conv2d_backward_bf16_kept(dx, dw, bp ? db : NULL, t->dy, spoilt, t->w, p,
                                                  ws, wsb, keep, kb),
                     1);
    ck_assert(memcmp(dw, t->dw, nw * sizeof(float)) == 0);
    ck_assert(memcmp(dx, t->dx, nx * sizeof(float)) == 0);
    /* without it the spoilt input gives another weight gradient */
    op_conv2d_backward_bf16(dx, dw, bp ? db : NULL, t->dy, spoilt, t->w, p, ws, wsb);
    ck_assert(memcmp(dw, t->dw, nw * sizeof(float)) != 0);
    ck_assert_int_eq(op_conv2d_forward_bf16_keep(y, t->x, t->w, bp, p, ws, wsb, keep, kb - 64), 1);
    free(keep), free(y), free(dx), free(dw), free(db), free(spoilt);
}

/* Mixed precision's convolution (op_conv2d_forward_bf16, _backward_bf16)
 * against the double-precision direct loops on the inputs rounded to
 * bfloat16: the output and the input gradient to float32 accumulation
 * (1e-5 of the largest), the weight gradient to its own rounding to
 * bfloat16 (4e-3); the bias gradient is float32's. Where it cannot compute
 * in bfloat16 (no AMX or AVX512_BF16, a workspace too small, the path
 * turned off) it gives the float32 path's bits. U-Net-like shapes must run
 * in bfloat16 where the processor can. */
static void conv_bf16_case(const op_conv2d_params *p, int bias, int must_bf16)
{
    conv_set t;
    conv_set_new(&t, p, 77);
    size_t nx = t.nx, nw = t.nw, ny = t.ny;
    size_t wsb = op_conv2d_bf16_workspace(p);
    ck_assert_uint_ge(wsb, op_conv2d_workspace(p));
    float *ws = ws_new(wsb);
    const float *bp = bias ? t.b : NULL;
    float *dbp = bias ? t.db : NULL, *db2p = bias ? t.db2 : NULL;
    double moved = kernels_layout_seconds();
    int f = op_conv2d_forward_bf16(t.y, t.x, t.w, bp, p, ws, wsb);
    int g = op_conv2d_backward_bf16(t.dx, t.dw, dbp, t.dy, t.x, t.w, p, ws, wsb);
    ws_check(ws, wsb);
    if (f) /* its reorders and rounding were timed */
        ck_assert(kernels_layout_seconds() > moved);
    /* the float32 path's results, in the second set */
    op_conv2d_forward(t.y2, t.x, t.w, bp, p, ws, wsb);
    op_conv2d_backward(t.dx2, t.dw2, db2p, t.dy, t.x, t.w, p, ws, wsb);
    ck_assert_int_eq(f, g);
    if (must_bf16 && kernels_bf16_compute())
        ck_assert_msg(f == 1, "c%d k%d %dx%d: not in bfloat16", p->c, p->k, p->h, p->w);
    if (f) {
        float *xr = kt_falloc(nx), *wr = kt_falloc(nw), *dyr = kt_falloc(ny);
        round_bf16(xr, t.x, nx);
        round_bf16(wr, t.w, nw);
        round_bf16(dyr, t.dy, ny);
        op_conv2d_forward_ref(t.ry, xr, wr, bp, p);
        op_conv2d_backward_ref(t.rdx, t.rdw, t.rdb, dyr, xr, wr, p);
        ck_assert_msg(kt_relerr_ff(t.y, t.ry, ny) < 1e-5, "forward %g", kt_relerr_ff(t.y, t.ry, ny));
        ck_assert_msg(kt_relerr_ff(t.dx, t.rdx, nx) < 1e-5, "dx %g", kt_relerr_ff(t.dx, t.rdx, nx));
        ck_assert_msg(kt_relerr_ff(t.dw, t.rdw, nw) < 4e-3, "dw %g", kt_relerr_ff(t.dw, t.rdw, nw));
        for (size_t i = 0; i < nw; i++) { /* widened from bfloat16: its low half is zero */
            uint32_t u;
            memcpy(&u, &t.dw[i], sizeof(u));
            ck_assert_uint_eq(u & 0xffffu, 0);
        }
        if (bias)
            ck_assert_msg(kt_relerr_ff(t.db, t.db2, t.nk) < 1e-6, "db %g",
                          kt_relerr_ff(t.db, t.db2, t.nk));
        ck_assert(memcmp(t.y, t.y2, ny * sizeof(float)) != 0); /* it did round */
        free(xr), free(wr), free(dyr);
        conv_bf16_kept_case(&t, p, bp, ws, wsb);
    } else {
        ck_assert(memcmp(t.y, t.y2, ny * sizeof(float)) == 0);
        ck_assert(memcmp(t.dx, t.dx2, nx * sizeof(float)) == 0);
        ck_assert(memcmp(t.dw, t.dw2, nw * sizeof(float)) == 0);
    }
    /* a workspace of the float32 path's size only, below what the
     * bfloat16 forward pass needs at least (x in bfloat16 and y in float32
     * beside it), then the path turned off: the float32 bits */
    size_t small = op_conv2d_workspace(p);
    if (small < 2 * nx + 4 * ny) {
        ck_assert_int_eq(op_conv2d_forward_bf16(t.y, t.x, t.w, bp, p, ws, small), 0);
        ck_assert(memcmp(t.y, t.y2, ny * sizeof(float)) == 0);
    }
    kernels_bf16_enable(0);
    ck_assert_int_eq(op_conv2d_forward_bf16(t.y, t.x, t.w, bp, p, ws, wsb), 0);
    ck_assert_int_eq(op_conv2d_backward_bf16(t.dx, t.dw, dbp, t.dy, t.x, t.w, p, ws, wsb), 0);
    kernels_bf16_enable(1);
    ck_assert(memcmp(t.y, t.y2, ny * sizeof(float)) == 0);
    ck_assert(memcmp(t.dx, t.dx2, nx * sizeof(float)) == 0);
    ck_assert(memcmp(t.dw, t.dw2, nw * sizeof(float)) == 0);
    free(ws);
    conv_set_free(&t);
}

START_TEST(test_conv_bf16)
{
    kern__conv_set_path(KERN__CONV_IM2COL); /* the float32 bits compared with */
    kernels_set_threads(2);
    /* U-Net-like: 3x3, padding 1, 8 to 32 channels, and its first layer */
    op_conv2d_params unet[] = {
        {.n = 2, .c = 8, .h = 24, .w = 20, .k = 16, .r = 3, .s = 3, .pad_h = 1, .pad_w = 1},
        {.n = 1, .c = 32, .h = 9, .w = 11, .k = 32, .r = 3, .s = 3, .pad_h = 1, .pad_w = 1},
        {.n = 2, .c = 3, .h = 16, .w = 16, .k = 8, .r = 3, .s = 3, .pad_h = 1, .pad_w = 1},
    };
    /* one whose float32 workspace cannot hold the bfloat16 operands (16
     * inputs: with 8 at this size, oneDNN 2.6 has only a GEMM-based weight
     * gradient on AVX512_BF16 without AMX, which the blocked path leaves to
     * float32) */
    op_conv2d_params wide = {.n = 4, .c = 16, .h = 160, .w = 160, .k = 8, .r = 3, .s = 3, .pad_h = 1, .pad_w = 1};
    ck_assert_uint_lt(op_conv2d_workspace(&wide), 2 * 4 * 16 * 160 * 160 + 4 * 4 * 8 * 160 * 160);
    conv_bf16_case(&wide, 0, 1);
    for (size_t i = 0; i < sizeof(unet) / sizeof(unet[0]); i++) {
        /* the first layer (3 inputs) where there is AMX: on AVX512_BF16
         * alone oneDNN 2.6 has only a GEMM-based weight gradient for it */
        int must = unet[i].c >= 8 || strcmp(kernels_bf16_isa(), "amx") == 0;
        conv_bf16_case(&unet[i], 0, must);
        conv_bf16_case(&unet[i], 1, must);
    }
    /* odd ones: stride 2, 1x1, dilation, a 5-channel output; bfloat16 or
     * float32, as oneDNN has kernels for them */
    op_conv2d_params odd[] = {
        {.n = 3, .c = 16, .h = 13, .w = 13, .k = 32, .r = 3, .s = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1},
        {.n = 2, .c = 16, .h = 8, .w = 8, .k = 5, .r = 1, .s = 1},
        {.n = 1, .c = 4, .h = 10, .w = 9, .k = 6, .r = 3, .s = 3, .pad_h = 2, .pad_w = 2, .dil_h = 2, .dil_w = 2},
    };
    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++)
        conv_bf16_case(&odd[i], i == 1, 0);
    /* a strided 1x1 shortcut: bfloat16 too, against the reference */
    op_conv2d_params shortcut = {.n = 2, .c = 16, .h = 8, .w = 8, .k = 32, .r = 1, .s = 1, .stride_h = 2, .stride_w = 2};
    ck_assert(convplan_conv2d_blocked_bf16(&shortcut));
    conv_bf16_case(&shortcut, 0, 1);
    /* resnet_small's stem: 3 inputs, whose rounded copy oneDNN takes in
     * the plain layout (rounded by bf16_round), in bfloat16 on
     * AVX512_BF16 too */
    op_conv2d_params stem = {.n = 2, .c = 3, .h = 32, .w = 32, .k = 16, .r = 3, .s = 3, .pad_h = 1, .pad_w = 1};
    conv_bf16_case(&stem, 0, 1);
    /* a 1-channel head: float32 (conv_bf16_case checks its bits) */
    op_conv2d_params head = {.n = 2, .c = 8, .h = 16, .w = 16, .k = 1, .r = 1, .s = 1};
    ck_assert(!convplan_conv2d_blocked_bf16(&head));
    ck_assert_uint_eq(op_conv2d_bf16_workspace(&head), op_conv2d_workspace(&head));
    conv_bf16_case(&head, 1, 0);
    kernels_set_threads(1);
}
END_TEST

/* Float32 on oneDNN's own layouts (the default path for 16 output channels and
 * more, convplan_conv2d_blocked_f32): against the double loops to 1e-5,
 * op_conv2d_forward/backward giving the blocked call's bits on the
 * default path and im2col's when im2col is forced; a shape under the rule
 * stays on im2col. */
static void conv_blocked_case(const op_conv2d_params *p, int bias)
{
    conv_set t;
    conv_set_new(&t, p, 91);
    size_t nx = t.nx, nw = t.nw, ny = t.ny;
    const float *bp = bias ? t.b : NULL;
    float *dbp = bias ? t.db : NULL, *db2p = bias ? t.db2 : NULL;
    ck_assert(convplan_conv2d_blocked_f32(p));
    size_t wsb = op_conv2d_workspace(p);
    float *ws = ws_new(wsb);
    int f = kern__conv_blocked_forward(0, t.y, t.x, t.w, bp, p, ws, wsb, NULL, 0, 0);
    int g = kern__conv_blocked_backward(0, t.dx, t.dw, dbp, t.dy, t.x, t.w, p, ws, wsb, NULL, 0, 0);
    ws_check(ws, wsb);
    ck_assert_int_eq(f, kern__conv_have_onednn());
    ck_assert_int_eq(g, kern__conv_have_onednn());
    if (f) {
        op_conv2d_forward_ref(t.ry, t.x, t.w, bp, p);
        op_conv2d_backward_ref(t.rdx, t.rdw, t.rdb, t.dy, t.x, t.w, p);
        ck_assert_msg(kt_relerr_ff(t.y, t.ry, ny) < 1e-5, "forward %g", kt_relerr_ff(t.y, t.ry, ny));
        ck_assert_msg(kt_relerr_ff(t.dx, t.rdx, nx) < 1e-5, "dx %g", kt_relerr_ff(t.dx, t.rdx, nx));
        ck_assert_msg(kt_relerr_ff(t.dw, t.rdw, nw) < 1e-5, "dw %g", kt_relerr_ff(t.dw, t.rdw, nw));
        if (bias)
            ck_assert_msg(kt_relerr_ff(t.db, t.rdb, t.nk) < 1e-5, "db %g",
                          kt_relerr_ff(t.db, t.rdb, t.nk));
        /* the default path is this path */
        kern__conv_set_path(KERN__CONV_BLOCKED);
        op_conv2d_forward(t.y2, t.x, t.w, bp, p, ws, wsb);
        op_conv2d_backward(t.dx2, t.dw2, db2p, t.dy, t.x, t.w, p, ws, wsb);
        ck_assert(memcmp(t.y, t.y2, ny * sizeof(float)) == 0);
        ck_assert(memcmp(t.dx, t.dx2, nx * sizeof(float)) == 0);
        ck_assert(memcmp(t.dw, t.dw2, nw * sizeof(float)) == 0);
        /* a workspace of im2col's size: im2col's bits */
        kern__conv_set_path(KERN__CONV_IM2COL);
        size_t small = convplan_conv2d_workspace(p, kernels_threads());
        op_conv2d_forward(t.y, t.x, t.w, bp, p, ws, small);
        kern__conv_set_path(KERN__CONV_BLOCKED);
        if (small < nx * 4 + ny * 4) {
            op_conv2d_forward(t.y2, t.x, t.w, bp, p, ws, small);
            ck_assert(memcmp(t.y, t.y2, ny * sizeof(float)) == 0);
        }
    }
    free(ws);
    conv_set_free(&t);
}

START_TEST(test_conv_blocked_f32)
{
    kernels_set_threads(2);
    op_conv2d_params shapes[] = {
        {.n = 2, .c = 16, .h = 12, .w = 10, .k = 16, .r = 3, .s = 3, .pad_h = 1, .pad_w = 1},
        {.n = 2, .c = 3, .h = 11, .w = 9, .k = 16, .r = 3, .s = 3, .pad_h = 1, .pad_w = 1},
        {.n = 3, .c = 32, .h = 9, .w = 9, .k = 16, .r = 3, .s = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1},
        {.n = 1, .c = 16, .h = 8, .w = 8, .k = 32, .r = 1, .s = 1},
        {.n = 2, .c = 24, .h = 80, .w = 80, .k = 16, .r = 3, .s = 3, .pad_h = 1, .pad_w = 1},
    };
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
        conv_blocked_case(&shapes[i], i & 1);
    /* 8 outputs: im2col */
    op_conv2d_params eight = {.n = 2, .c = 16, .h = 12, .w = 12, .k = 8, .r = 3, .s = 3, .pad_h = 1, .pad_w = 1};
    ck_assert(!convplan_conv2d_blocked_f32(&eight));
    ck_assert_uint_eq(op_conv2d_workspace(&eight), convplan_conv2d_workspace(&eight, kernels_threads()));
    kernels_set_threads(1);
}
END_TEST

/* 3x3 convolutions of 16 channels or fewer a side, padded to keep the
 * size (conv_direct.c), on the default path: the forward pass and the data
 * gradient computed directly match the double reference and the im2col
 * path within 1e-5 (the weight and bias gradients too), one thread and
 * two give the same bits where it computes them all, and shapes
 * outside its rule (65 input channels, a stride, no padding) take the
 * other paths, matching too. Rows narrower and wider than a vector, and a
 * channel count a side at its largest (16 outputs, 64 inputs). */
START_TEST(test_conv_direct)
{
    op_conv2d_params shapes[] = {
        {.n = 2, .c = 3, .h = 7, .w = 37, .k = 8, .r = 3, .s = 3, .pad_h = 1, .pad_w = 1},
        {.n = 2, .c = 16, .h = 5, .w = 33, .k = 8, .r = 3, .s = 3, .pad_h = 1, .pad_w = 1},
        {.n = 3, .c = 5, .h = 4, .w = 1, .k = 3, .r = 3, .s = 3, .pad_h = 1, .pad_w = 1},
        {.n = 1, .c = 64, .h = 3, .w = 20, .k = 12, .r = 3, .s = 3, .pad_h = 1, .pad_w = 1},
        {.n = 1, .c = 8, .h = 6, .w = 70, .k = 16, .r = 3, .s = 3, .pad_h = 1, .pad_w = 1},
        {.n = 1, .c = 65, .h = 3, .w = 9, .k = 8, .r = 3, .s = 3, .pad_h = 1, .pad_w = 1},
        {.n = 2, .c = 4, .h = 9, .w = 9, .k = 8, .r = 3, .s = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1},
        {.n = 2, .c = 4, .h = 6, .w = 7, .k = 8, .r = 3, .s = 3},
    };
    kt_rng r;
    kt_rng_init(&r, 41);
    kern__conv_path saved = kern__conv_get_path();
    kern__conv_set_path(KERN__CONV_BLOCKED); /* the default */
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        op_conv2d_params p = shapes[i];
        int direct = kernels_isa_level() >= KERNELS_ISA_AVX512 && i < 5;
        ck_assert_int_eq(kern__conv3x3_direct_ok(&p, 0), direct);
        ck_assert_int_eq(kern__conv3x3_direct_ok(&p, 1), direct && p.c <= 16);
        int oh = op_conv2d_out_h(&p), ow = op_conv2d_out_w(&p);
        size_t nx = (size_t)p.n * p.c * p.h * p.w, nw = (size_t)p.k * p.c * 9;
        size_t ny = (size_t)p.n * p.k * oh * ow, wsb = conv_ws(&p);
        float *x = kt_falloc(nx), *w = kt_falloc(nw), *b = kt_falloc(p.k), *dy = kt_falloc(ny);
        float *y[3], *dx[3], *dw[3], *db[3], *ws = ws_new(wsb);
        for (int k = 0; k < 3; k++)
            y[k] = kt_falloc(ny), dx[k] = kt_falloc(nx), dw[k] = kt_falloc(nw),
            db[k] = kt_falloc(p.k);
        kt_fill(&r, x, nx, -1, 1);
        kt_fill(&r, w, nw, -1, 1);
        kt_fill(&r, b, p.k, -1, 1);
        kt_fill(&r, dy, ny, -1, 1);
        /* 0: two threads; 1: one; 2: im2col */
        for (int k = 0; k < 3; k++) {
            kernels_set_threads(k == 1 ? 1 : 2);
            if (k == 2)
                kern__conv_set_path(KERN__CONV_IM2COL);
            kt_fill(&r, dx[k], nx, 7, 8); /* stale values must be overwritten */
            kt_fill(&r, dw[k], nw, 7, 8);
            op_conv2d_forward(y[k], x, w, b, &p, ws, wsb);
            op_conv2d_backward(dx[k], dw[k], db[k], dy, x, w, &p, ws, wsb);
            kern__conv_set_path(KERN__CONV_BLOCKED);
            ws_check(ws, wsb);
        }
        float *yr = kt_falloc(ny), *dxr = kt_falloc(nx), *dwr = kt_falloc(nw), *dbr = kt_falloc(p.k);
        op_conv2d_forward_ref(yr, x, w, b, &p);
        op_conv2d_backward_ref(dxr, dwr, dbr, dy, x, w, &p);
        for (int k = 0; k < 3; k++) {
            ck_assert_msg(kt_relerr_ff(y[k], yr, ny) < 1e-5, "shape %zu way %d: forward %g", i, k,
                          kt_relerr_ff(y[k], yr, ny));
            ck_assert_msg(kt_relerr_ff(dx[k], dxr, nx) < 1e-5, "shape %zu way %d: dx %g", i, k,
                          kt_relerr_ff(dx[k], dxr, nx));
            ck_assert_msg(kt_relerr_ff(dw[k], dwr, nw) < 1e-5, "shape %zu way %d: dw %g", i, k,
                          kt_relerr_ff(dw[k], dwr, nw));
            ck_assert_msg(kt_relerr_ff(db[k], dbr, p.k) < 1e-5, "shape %zu way %d: db", i, k);
        }
        if (direct && !convplan_conv2d_blocked_f32(&p)) { /* the thread count changes no bit */
            ck_assert(memcmp(y[0], y[1], ny * sizeof(float)) == 0);
            ck_assert(memcmp(dx[0], dx[1], nx * sizeof(float)) == 0);
            ck_assert_msg(memcmp(dw[0], dw[1], nw * sizeof(float)) == 0, "shape %zu: dw", i);
            ck_assert(memcmp(db[0], db[1], p.k * sizeof(float)) == 0);
        }
        free(x), free(w), free(b), free(dy), free(ws);
        free(yr), free(dxr), free(dwr), free(dbr);
        for (int k = 0; k < 3; k++)
            free(y[k]), free(dx[k]), free(dw[k]), free(db[k]);
    }
    kern__conv_set_path(saved);
    kernels_set_threads(1);
}
END_TEST

/* blk16.c's reorders between plain (n, c, h, w) and aBcd16b, where the
 * processor runs them: each element at its place (pixel counts that leave
 * a partial block of 16), bfloat16 rounded as bf16_pack rounds (ties to
 * even, infinities kept, a NaN still a NaN), and two threads giving one
 * thread's bytes. */
START_TEST(test_blk16_reorders)
{
    const int n = 3, c = 32;
    const size_t hws[] = {35, 16, 1};
    kt_rng r;
    kt_rng_init(&r, 23);
    for (size_t h = 0; h < 3; h++) {
        size_t hw = hws[h], ne = (size_t)n * c * hw;
        float *plain = kt_falloc(ne), *blk = kt_falloc(ne), *back = kt_falloc(ne);
        uint16_t *b16 = malloc(ne * 2), *b16b = malloc(ne * 2), *want16 = malloc(ne * 2);
        kt_fill(&r, plain, ne, -3, 3);
        plain[0] = INFINITY, plain[1] = -INFINITY, plain[2] = NAN;
        plain[3] = 1.00390625f;            /* halfway between two bfloat16s: to the even one, 1 */
        plain[4] = 1.01171875f;            /* halfway: to the even one above */
        kernels_set_threads(1);
        if (!kern__blk16_reorder(KERN__BLK16_PACK_F32, blk, plain, n, c, hw)) {
            printf("blk16: no AVX-512 here, nothing to check\n");
            free(plain), free(blk), free(back), free(b16), free(b16b), free(want16);
            return;
        }
        for (int i = 0; i < n; i++)
            for (int ch = 0; ch < c; ch++)
                for (size_t p = 0; p < hw; p++) {
                    size_t at = (((size_t)i * (c / 16) + ch / 16) * hw + p) * 16 + ch % 16;
                    float want = plain[((size_t)i * c + ch) * hw + p];
                    ck_assert_msg(memcmp(&blk[at], &want, 4) == 0 || (isnan(want) && isnan(blk[at])),
                                  "hw %zu: (%d, %d, %zu) not at its blocked place", hw, i, ch, p);
                }
        ck_assert(kern__blk16_reorder(KERN__BLK16_UNPACK_F32, blk, back, n, c, hw));
        for (size_t i = 3; i < ne; i++)
            ck_assert_msg(memcmp(&back[i], &plain[i], 4) == 0, "hw %zu: %zu unpacked wrong", hw, i);
        ck_assert(isnan(back[2]) && back[0] == INFINITY && back[1] == -INFINITY);
        if (kern__blk16_reorder(KERN__BLK16_PACK_BF16, b16, plain, n, c, hw)) {
            uint16_t one[1];
            for (int i = 0; i < n; i++)
                for (int ch = 0; ch < c; ch++)
                    for (size_t p = 0; p < hw; p++) {
                        size_t at = (((size_t)i * (c / 16) + ch / 16) * hw + p) * 16 + ch % 16;
                        bf16_pack(one, &plain[((size_t)i * c + ch) * hw + p], 1);
                        want16[at] = one[0];
                    }
            for (size_t i = 0; i < ne; i++) {
                int nan_ = (b16[i] & 0x7f80) == 0x7f80 && (b16[i] & 0x7f);
                int want_nan = (want16[i] & 0x7f80) == 0x7f80 && (want16[i] & 0x7f);
                ck_assert_msg(b16[i] == want16[i] || (nan_ && want_nan),
                              "hw %zu: bfloat16 %zu is %04x, not %04x", hw, i, b16[i], want16[i]);
            }
            if (hw > 4) { /* plain[3] and [4]: pixels 3 and 4 of channel 0 */
                ck_assert_uint_eq(b16[3 * 16], 0x3f80);
                ck_assert_uint_eq(b16[4 * 16], 0x3f82);
            }
            kernels_set_threads(2);
            ck_assert(kern__blk16_reorder(KERN__BLK16_PACK_BF16, b16b, plain, n, c, hw));
            ck_assert(memcmp(b16, b16b, ne * 2) == 0);
        } else {
            printf("blk16: no AVX512_BF16 here, the bfloat16 packing not checked\n");
        }
        kernels_set_threads(1);
        ck_assert(!kern__blk16_reorder(KERN__BLK16_PACK_F32, blk, plain, n, 24, hw));
        free(plain), free(blk), free(back), free(b16), free(b16b), free(want16);
    }
}
END_TEST

/* kern__blk_pack: a band of planes of a larger plain tensor (channels and
 * samples strided) into the blocked layouts of 16 and 8 channels, float32
 * and bfloat16, channels padded with zeros: each element at its place
 * (bfloat16 as bf16_pack rounds it) on every processor (blk16.c's AVX-512
 * passes where they run, the portable pass otherwise), and two threads
 * giving one thread's bytes. */
START_TEST(test_blk_pack_bands)
{
    const int n = 2, full = 7, p0 = 2, planes = 3;
    const size_t plane = 35, hw = planes * plane;
    const int cs[] = {32, 20, 8};
    kt_rng r;
    kt_rng_init(&r, 29);
    for (size_t ci = 0; ci < 3; ci++) {
        int c = cs[ci];
        size_t ld = full * plane, nld = (size_t)c * ld, ne = (size_t)n * nld;
        float *plain = kt_falloc(ne);
        kt_fill(&r, plain, ne, -3, 3);
        plain[p0 * plane] = 1.00390625f; /* halfway between two bfloat16s: to the even one */
        const float *band = plain + p0 * plane;
        for (int block = 8; block <= 16; block += 8)
            for (int bf16 = 0; bf16 <= 1; bf16++) {
                size_t cb = ((size_t)c + block - 1) / block, nb = (size_t)n * cb * block * hw;
                size_t es = bf16 ? 2 : 4;
                uint8_t *got = malloc(nb * es), *got2 = malloc(nb * es), *want = malloc(nb * es);
                memset(got, 0xa5, nb * es);
                for (int i = 0; i < n; i++)
                    for (size_t ch = 0; ch < cb * block; ch++)
                        for (size_t q = 0; q < hw; q++) {
                            size_t at = (((size_t)i * cb + ch / block) * hw + q) * block + ch % block;
                            float v = ch < (size_t)c ? band[i * nld + ch * ld + q] : 0.0f;
                            if (bf16)
                                bf16_pack((uint16_t *)want + at, &v, 1);
                            else
                                memcpy(want + at * 4, &v, 4);
                        }
                kernels_set_threads(1);
                kern__blk_pack(got, bf16, block, band, n, c, hw, ld, nld);
                kernels_set_threads(2);
                kern__blk_pack(got2, bf16, block, band, n, c, hw, ld, nld);
                ck_assert_msg(memcmp(got, want, nb * es) == 0,
                              "c %d, block %d, %s: not the reference's bytes", c, block,
                              bf16 ? "bfloat16" : "float32");
                ck_assert(memcmp(got, got2, nb * es) == 0);
                if (bf16 && block == 16) /* channel 0, the band's first pixel: rounded to even */
                    ck_assert_uint_eq(((uint16_t *)got)[0], 0x3f80);
                free(got), free(got2), free(want);
            }
        free(plain);
    }
}
END_TEST

/* A convolution with its tensors in aBcd16b (op_conv2d_forward_io,
 * _backward_io: a blocked chain's) gives the plain call's bits, in float32
 * and mixed precision, the input kept or not; and so it does through its
 * way back, with a workspace too small for oneDNN. */
static void conv_io_case(const op_conv2d_params *p, int bf16, int bias)
{
    conv_set t;
    conv_set_new(&t, p, 93);
    size_t nx = t.nx, ny = t.ny, hw = (size_t)p->h * p->w;
    size_t ohw = (size_t)op_conv2d_out_h(p) * op_conv2d_out_w(p);
    size_t wsb = bf16 ? op_conv2d_bf16_workspace(p) : op_conv2d_workspace(p);
    unsigned io = op_conv2d_blocked_io(p, bf16, bias, wsb);
    if (!io) { /* test_conv_blocked_io says why */
        conv_set_free(&t);
        return;
    }
    ck_assert_uint_eq(io, op_conv2d_blocked_io(p, bf16, bias, wsb)); /* the same answer */
    int B = op_conv2d_block_size(); /* aBcd16b, or aBcd8b with AVX2 */
    ck_assert(B == 16 || B == 8);
    float *ws = ws_new(wsb), *xb = kt_falloc(nx), *dyb = kt_falloc(ny), *yb = kt_falloc(ny);
    float *dxb = kt_falloc(nx);
    size_t kb = bf16 ? convplan_conv2d_bf16_kept_bytes(p) : 0;
    void *keep = kb ? aligned_alloc(64, (kb + 63) & ~(size_t)63) : NULL;
    const float *bp = bias ? t.b : NULL;
    float *dbp = bias ? t.db : NULL, *db2p = bias ? t.db2 : NULL;
    for (unsigned blocked = 1; blocked <= 3; blocked++) {
        if ((blocked & io) != blocked)
            continue;
        int ib = blocked & OP_CONV2D_IN_BLOCKED, ob = blocked & OP_CONV2D_OUT_BLOCKED;
        for (int kept = 0; kept <= (kb > 0); kept++) {
            /* the plain call */
            int f2 = op_conv2d_forward_io(t.y2, t.x, t.w, bp, p, bf16, 0, ws, wsb,
                                          kept ? keep : NULL, kb);
            op_conv2d_backward_io(t.dx2, t.dw2, db2p, t.dy, t.x, t.w, p, bf16, 0, ws, wsb,
                                  kept && f2 == 2 ? keep : NULL, kb);
            /* the blocked one */
            if (ib)
                kt_blk(xb, t.x, p->n, p->c, hw, 1, B);
            if (ob)
                kt_blk(dyb, t.dy, p->n, p->k, ohw, 1, B);
            int f = op_conv2d_forward_io(ob ? yb : t.y, ib ? xb : t.x, t.w, bp, p, bf16, blocked,
                                         ws, wsb, kept ? keep : NULL, kb);
            if (bf16 && kernels_bf16_compute()) /* (else float32's: 1 when blocked) */
                ck_assert_int_eq(f, f2);
            op_conv2d_backward_io(ib ? dxb : t.dx, t.dw, dbp, ob ? dyb : t.dy, ib ? xb : t.x, t.w,
                                  p, bf16, blocked, ws, wsb, kept && f == 2 ? keep : NULL, kb);
            ws_check(ws, wsb);
            if (ob)
                kt_blk(yb, t.y, p->n, p->k, ohw, 0, B);
            if (ib)
                kt_blk(dxb, t.dx, p->n, p->c, hw, 0, B);
            ck_assert_msg(memcmp(t.y, t.y2, ny * 4) == 0, "c%d k%d: the output, blocked %u", p->c,
                          p->k, blocked);
            ck_assert_msg(memcmp(t.dx, t.dx2, nx * 4) == 0, "c%d k%d: dx, blocked %u", p->c, p->k,
                          blocked);
            ck_assert_msg(memcmp(t.dw, t.dw2, t.nw * 4) == 0, "c%d k%d: dw, blocked %u", p->c,
                          p->k, blocked);
            if (bias)
                ck_assert(memcmp(t.db, t.db2, t.nk * 4) == 0);
        }
    }
    /* the way back (mixed precision): oneDNN's bfloat16 turned off after
     * the plan, the plain call's bits */
    if (bf16) {
        kernels_bf16_enable(0);
        op_conv2d_forward_io(t.y2, t.x, t.w, bp, p, bf16, 0, ws, wsb, NULL, 0);
        op_conv2d_backward_io(t.dx2, t.dw2, db2p, t.dy, t.x, t.w, p, bf16, 0, ws, wsb, NULL, 0);
        if (io & OP_CONV2D_IN_BLOCKED)
            kt_blk(xb, t.x, p->n, p->c, hw, 1, B);
        if (io & OP_CONV2D_OUT_BLOCKED)
            kt_blk(dyb, t.dy, p->n, p->k, ohw, 1, B);
        const float *xin = io & OP_CONV2D_IN_BLOCKED ? xb : t.x;
        const float *dyin = io & OP_CONV2D_OUT_BLOCKED ? dyb : t.dy;
        float *yout = io & OP_CONV2D_OUT_BLOCKED ? yb : t.y, *dxout = io & OP_CONV2D_IN_BLOCKED ? dxb : t.dx;
        /* float32 on its blocked layouts where they serve the plan's
         * tensors, else through the way back */
        int f32 = (op_conv2d_blocked_io(p, bf16, bias, wsb) & io) == io;
        ck_assert_int_eq(op_conv2d_forward_io(yout, xin, t.w, bp, p, bf16, io, ws, wsb, NULL, 0), f32);
        ck_assert_int_eq(op_conv2d_backward_io(dxout, t.dw, dbp, dyin, xin, t.w, p, bf16, io, ws,
                                               wsb, NULL, 0),
                         f32);
        kernels_bf16_enable(1);
        if (io & OP_CONV2D_OUT_BLOCKED)
            kt_blk(yb, t.y, p->n, p->k, ohw, 0, B);
        if (io & OP_CONV2D_IN_BLOCKED)
            kt_blk(dxb, t.dx, p->n, p->c, hw, 0, B);
        ck_assert(memcmp(t.y, t.y2, ny * 4) == 0);
        ck_assert(memcmp(t.dx, t.dx2, nx * 4) == 0);
        ck_assert(memcmp(t.dw, t.dw2, t.nw * 4) == 0);
    }
    free(ws), free(xb), free(dyb), free(yb), free(dxb), free(keep);
    conv_set_free(&t);
}

START_TEST(test_conv_blocked_io)
{
    kernels_set_threads(2);
    op_conv2d_params shapes[] = {
        {.n = 2, .c = 16, .h = 32, .w = 32, .k = 16, .r = 3, .s = 3, .pad_h = 1, .pad_w = 1},
        {.n = 3, .c = 16, .h = 13, .w = 13, .k = 32, .r = 3, .s = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1},
        {.n = 2, .c = 16, .h = 8, .w = 8, .k = 32, .r = 1, .s = 1, .stride_h = 2, .stride_w = 2},
        {.n = 2, .c = 3, .h = 16, .w = 16, .k = 16, .r = 3, .s = 3, .pad_h = 1, .pad_w = 1},
    };
    int blocked_ran = 0;
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
        for (int bf16 = 0; bf16 <= 1; bf16++) {
            conv_io_case(&shapes[i], bf16, (int)(i % 2));
            size_t wsb = bf16 ? op_conv2d_bf16_workspace(&shapes[i]) : op_conv2d_workspace(&shapes[i]);
            unsigned io = op_conv2d_blocked_io(&shapes[i], bf16, (int)(i % 2), wsb);
            blocked_ran += !bf16 && io != 0;
            char how[256];
            op_conv2d_describe(&shapes[i], bf16, (int)(i % 2), wsb, how, sizeof(how));
            printf("conv c%d k%d %dx%d (%s): %s%s\n", shapes[i].c, shapes[i].k, shapes[i].h,
                   shapes[i].w, bf16 ? "bfloat16" : "float32", io ? "blocked; " : "", how);
        }
    /* the 3-channel input is no block: its output may be, its input not */
    ck_assert(!(op_conv2d_blocked_io(&shapes[3], 0, 1, op_conv2d_workspace(&shapes[3])) &
                OP_CONV2D_IN_BLOCKED));
    /* oneDNN's float32 kernels for AVX-512 (also where it has AMX, which
     * has no float32 tiles) compute on aBcd16b, its AVX2 ones on aBcd8b:
     * the blocked tensors of either */
    if (kern__conv_have_onednn() && kernels_isa_level() >= KERNELS_ISA_AVX2)
        ck_assert_int_gt(blocked_ran, 0);
    kernels_set_threads(1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("conv");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_conv_matches_ref);
    tcase_add_test(tc, test_conv_matches_ref_im2col);
    tcase_add_test(tc, test_conv_matches_ref_onednn);
    tcase_add_test(tc, test_conv_gradients_fd);
    tcase_add_test(tc, test_conv_gradients_fd_onednn);
    tcase_add_test(tc, test_conv_transpose_out_size);
    tcase_add_test(tc, test_conv_transpose_matches_ref_and_adjoint);
    tcase_add_test(tc, test_conv_transpose_matches_ref_im2col);
    tcase_add_test(tc, test_conv_transpose_matches_ref_onednn);
    tcase_add_test(tc, test_conv_transpose_gradients_fd);
    tcase_add_test(tc, test_conv_transpose_gradients_fd_onednn);
    tcase_add_test(tc, test_threads);
    tcase_add_test(tc, test_threads_im2col);
    tcase_add_test(tc, test_threads_onednn);
    tcase_add_test(tc, test_conv_bf16);
    tcase_add_test(tc, test_conv_blocked_f32);
    tcase_add_test(tc, test_conv_direct);
    tcase_add_test(tc, test_blk16_reorders);
    tcase_add_test(tc, test_blk_pack_bands);
    tcase_add_test(tc, test_conv_blocked_io);
    suite_add_tcase(s, tc);
    return kt_run(s);
}
