/* 3-D max and average pooling: hand values (argmax, ties to the first, a
 * NaN winning, both count_include_pad modes), the forward passes against
 * a direct double reference and the gradients against its central
 * differences on odd sizes, strides 1 to 3 and padding, and two threads
 * giving one thread's bits. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "kt.h"
#include "op_pool3d.h"

START_TEST(test_max_hand_values)
{
    /* a 2x2x4 volume, 2x2x2 windows at stride 2: two outputs; the first
     * window's maximum 9 sits at (z 1, y 0, x 1): argmax (1*2 + 0)*2 + 1 =
     * 5; the second window is all 3s: the first of them, 0 */
    const float x[16] = {1, 5, 3, 3, 2, 4, 3, 3, /* z = 0: rows y 0, 1 */
                         0, 9, 3, 3, 8, 7, 3, 3}; /* z = 1 */
    op_pool3d_params p = {.n = 1, .c = 1, .d = 2, .h = 2, .w = 4, .kd = 2, .kh = 2, .kw = 2};
    ck_assert_int_eq(op_pool3d_out_d(&p), 1);
    ck_assert_int_eq(op_pool3d_out_w(&p), 2);
    float y[2];
    uint8_t am[2];
    op_maxpool3d_forward(y, am, x, &p);
    ck_assert_float_eq(y[0], 9);
    ck_assert_float_eq(y[1], 3);
    ck_assert_int_eq(am[0], 5);
    ck_assert_int_eq(am[1], 0);
    const float dy[2] = {1.5f, -2};
    float dx[16];
    op_maxpool3d_backward(dx, dy, am, &p);
    for (int i = 0; i < 16; i++)
        ck_assert_float_eq(dx[i], i == 9 ? 1.5f : i == 2 ? -2 : 0);
    /* the same through the general loop (stride 1 along d, which has one
     * window there anyway), and a NaN wins */
    p.stride_d = 1;
    float xn[16];
    memcpy(xn, x, sizeof(xn));
    xn[6] = NAN; /* z 0, y 1, x 2: the second window's (0*2 + 1)*2 + 0 = 2 */
    op_maxpool3d_forward(y, am, xn, &p);
    ck_assert_float_eq(y[0], 9);
    ck_assert_int_eq(am[0], 5);
    ck_assert(isnan(y[1]));
    ck_assert_int_eq(am[1], 2);
}
END_TEST

START_TEST(test_avg_hand_values)
{
    /* a 1x2x2 volume [[1 2] [3 4]], windows 1x2x2 at stride 1 with one
     * voxel of padding on h and w: a 1x3x3 output, window sums as in 2-D:
     * corners 1, 2, 3, 4, edges 3, 4, 6, 7, centre 10; divided by 4 with
     * the padding counted, else by the voxels covered */
    const float x[4] = {1, 2, 3, 4};
    op_pool3d_params p = {.n = 1, .c = 1, .d = 1, .h = 2, .w = 2, .kd = 1, .kh = 2, .kw = 2,
                          .stride_d = 1, .stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1,
                          .count_include_pad = 1};
    float y[9];
    op_avgpool3d_forward(y, x, &p);
    const float inc[9] = {0.25f, 0.75f, 0.5f, 1.0f, 2.5f, 1.5f, 0.75f, 1.75f, 1.0f};
    for (int i = 0; i < 9; i++)
        ck_assert_float_eq_tol(y[i], inc[i], 1e-6f);
    p.count_include_pad = 0;
    op_avgpool3d_forward(y, x, &p);
    const float exc[9] = {1, 1.5f, 2, 2, 2.5f, 3, 3, 3.5f, 4};
    for (int i = 0; i < 9; i++)
        ck_assert_float_eq_tol(y[i], exc[i], 1e-6f);
    /* a 2x2x2 window over a 2x2x2 volume with padding 1 on d alone: 2
     * outputs along d, each window half padding: the mean of a plane over
     * 8 (padding counted) */
    const float v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    op_pool3d_params q = {.n = 1, .c = 1, .d = 2, .h = 2, .w = 2, .kd = 2, .kh = 2, .kw = 2,
                          .stride_d = 1, .pad_d = 1, .count_include_pad = 1};
    ck_assert_int_eq(op_pool3d_out_d(&q), 3);
    float z[3];
    op_avgpool3d_forward(z, v, &q);
    ck_assert_float_eq_tol(z[0], 10.0f / 8, 1e-6f);
    ck_assert_float_eq_tol(z[1], 36.0f / 8, 1e-6f);
    ck_assert_float_eq_tol(z[2], 26.0f / 8, 1e-6f);
}
END_TEST

/* The double reference: max or average pooling of x into y. */
struct pool_fd {
    op_pool3d_params p;
    int max;
    int od, oh, ow;
    double *x, *y;
    const float *r;
};

static double pool_fd_loss(void *ctx)
{
    struct pool_fd *c = ctx;
    const op_pool3d_params *p = &c->p;
    int sd = p->stride_d ? p->stride_d : p->kd, sh = p->stride_h ? p->stride_h : p->kh,
        sw = p->stride_w ? p->stride_w : p->kw;
    size_t o = 0;
    for (int v = 0; v < p->n * p->c; v++)
        for (int oz = 0; oz < c->od; oz++)
            for (int oy = 0; oy < c->oh; oy++)
                for (int ox = 0; ox < c->ow; ox++, o++) {
                    double acc = c->max ? -INFINITY : 0.0;
                    int cnt = 0;
                    for (int a = 0; a < p->kd; a++)
                        for (int b = 0; b < p->kh; b++)
                            for (int e = 0; e < p->kw; e++) {
                                int iz = oz * sd - p->pad_d + a, iy = oy * sh - p->pad_h + b,
                                    ix = ox * sw - p->pad_w + e;
                                if (iz < 0 || iz >= p->d || iy < 0 || iy >= p->h || ix < 0 ||
                                    ix >= p->w)
                                    continue;
                                double val = c->x[(((size_t)v * p->d + iz) * p->h + iy) * p->w + ix];
                                cnt++;
                                if (c->max)
                                    acc = val > acc ? val : acc;
                                else
                                    acc += val;
                            }
                    if (!c->max)
                        acc /= p->count_include_pad ? p->kd * p->kh * p->kw : cnt;
                    c->y[o] = acc;
                }
    return kt_dot(c->y, c->r, o);
}

static op_pool3d_params random_pool(kt_rng *r, int t)
{
    op_pool3d_params p = {
        .n = kt_int(r, 1, 2), .c = kt_int(r, 1, 3),
        .d = kt_int(r, 3, 8), .h = kt_int(r, 3, 8), .w = kt_int(r, 3, 9),
        .kd = kt_int(r, 1, 3), .kh = kt_int(r, 1, 3), .kw = kt_int(r, 1, 3),
        .stride_d = kt_int(r, 0, 3), .stride_h = kt_int(r, 0, 2), .stride_w = kt_int(r, 0, 2),
        .count_include_pad = t & 2,
    };
    p.pad_d = kt_int(r, 0, p.kd / 2);
    p.pad_h = kt_int(r, 0, p.kh / 2);
    p.pad_w = kt_int(r, 0, p.kw / 2);
    if (t % 8 == 1) { /* the U-Net's: 2x2x2 at stride 2 (its own loop), odd sizes */
        p.kd = p.kh = p.kw = 2;
        p.stride_d = p.stride_h = p.stride_w = 2;
        p.pad_d = p.pad_h = p.pad_w = 0;
    }
    return p;
}

START_TEST(test_gradients_fd)
{
    kt_rng r;
    kt_rng_init(&r, 331);
    for (int t = 0; t < 32; t++) {
        op_pool3d_params p = random_pool(&r, t);
        int max = t & 1;
        int od = op_pool3d_out_d(&p), oh = op_pool3d_out_h(&p), ow = op_pool3d_out_w(&p);
        ck_assert_int_ge(od, 1);
        size_t nx = (size_t)p.n * p.c * p.d * p.h * p.w, ny = (size_t)p.n * p.c * od * oh * ow;
        float *x = kt_falloc(nx), *y = kt_falloc(ny), *R = kt_falloc(ny), *dx = kt_falloc(nx);
        uint8_t *am = calloc(ny, 1);
        kt_fill(&r, x, nx, -1, 1);
        kt_fill(&r, R, ny, -1, 1);
        kt_fill(&r, dx, nx, 7, 8); /* stale values must be overwritten */
        struct pool_fd c = {p, max, od, oh, ow, kt_dalloc(nx), kt_dalloc(ny), R};
        kt_to_double(c.x, x, nx);
        pool_fd_loss(&c);
        if (max) {
            op_maxpool3d_forward(y, am, x, &p);
            op_maxpool3d_backward(dx, R, am, &p);
        } else {
            op_avgpool3d_forward(y, x, &p);
            op_avgpool3d_backward(dx, R, &p);
        }
        ck_assert_msg(kt_relerr(y, c.y, ny) < 1e-6, "case %d forward %g", t,
                      kt_relerr(y, c.y, ny));
        double *g = kt_dalloc(nx);
        kt_fd_grad(g, c.x, nx, pool_fd_loss, &c, 1e-6);
        ck_assert_msg(kt_relerr(dx, g, nx) < 1e-3, "case %d dx %g", t, kt_relerr(dx, g, nx));
        free(x); free(y); free(R); free(dx); free(am); free(c.x); free(c.y); free(g);
    }
}
END_TEST

/* Two threads split the volumes (64 Ki input elements a thread at the
 * least); each is whole on one: one thread's bits. */
START_TEST(test_threads)
{
    op_pool3d_params shapes[] = {
        {.n = 2, .c = 32, .d = 16, .h = 18, .w = 17, .kd = 2, .kh = 2, .kw = 2},
        {.n = 1, .c = 5, .d = 40, .h = 41, .w = 42, .kd = 3, .kh = 3, .kw = 3, .stride_d = 2,
         .stride_h = 2, .stride_w = 2, .pad_d = 1, .pad_h = 1, .pad_w = 1, .count_include_pad = 1},
    };
    kt_rng r;
    kt_rng_init(&r, 332);
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        op_pool3d_params p = shapes[s];
        size_t nx = (size_t)p.n * p.c * p.d * p.h * p.w;
        size_t ny = (size_t)p.n * p.c * op_pool3d_out_d(&p) * op_pool3d_out_h(&p) *
                    op_pool3d_out_w(&p);
        float *x = kt_falloc(nx), *dy = kt_falloc(ny);
        float *y[2] = {kt_falloc(ny), kt_falloc(ny)}, *a[2] = {kt_falloc(ny), kt_falloc(ny)};
        float *dx[2] = {kt_falloc(nx), kt_falloc(nx)}, *da[2] = {kt_falloc(nx), kt_falloc(nx)};
        uint8_t *am[2] = {calloc(ny, 1), calloc(ny, 1)};
        kt_fill(&r, x, nx, -1, 1);
        kt_fill(&r, dy, ny, -1, 1);
        for (int t = 0; t < 2; t++) {
            kernels_set_threads(t + 1);
            op_maxpool3d_forward(y[t], am[t], x, &p);
            op_maxpool3d_backward(dx[t], dy, am[t], &p);
            op_avgpool3d_forward(a[t], x, &p);
            op_avgpool3d_backward(da[t], dy, &p);
        }
        kernels_set_threads(1);
        ck_assert(memcmp(y[0], y[1], ny * sizeof(float)) == 0);
        ck_assert(memcmp(am[0], am[1], ny) == 0);
        ck_assert(memcmp(dx[0], dx[1], nx * sizeof(float)) == 0);
        ck_assert(memcmp(a[0], a[1], ny * sizeof(float)) == 0);
        ck_assert(memcmp(da[0], da[1], nx * sizeof(float)) == 0);
        free(x); free(dy);
        for (int t = 0; t < 2; t++) {
            free(y[t]); free(a[t]); free(dx[t]); free(da[t]); free(am[t]);
        }
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pool3d");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_max_hand_values);
    tcase_add_test(tc, test_avg_hand_values);
    tcase_add_test(tc, test_gradients_fd);
    tcase_add_test(tc, test_threads);
    suite_add_tcase(s, tc);
    return kt_run(s);
}
