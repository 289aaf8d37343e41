/* Max and average pooling: hand values, argmax, both count_include_pad
 * modes, and gradients against central differences of double references
 * on odd sizes, strides and padding. */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "kt.h"
#include "op_pool.h"

START_TEST(test_max_hand_values)
{
    /* 4x4 input, 2x2 window, stride 2:
     *  1  5  2  0
     *  3  4  8  1     max of each 2x2 block: [5 8; 9 7]
     *  9  0  6  7     argmax (dy*2 + dx in its window): [1 2; 0 1]
     * -1  2  3  5 */
    const float x[16] = {1, 5, 2, 0, 3, 4, 8, 1, 9, 0, 6, 7, -1, 2, 3, 5};
    op_pool2d_params p = {.n = 1, .c = 1, .h = 4, .w = 4, .kh = 2, .kw = 2};
    float y[4];
    uint8_t am[4];
    ck_assert_int_eq(op_pool2d_out_h(&p), 2);
    op_maxpool2d_forward(y, am, x, &p);
    const float ey[4] = {5, 8, 9, 7};
    const uint8_t eam[4] = {1, 2, 0, 1};
    for (int i = 0; i < 4; i++) {
        ck_assert_float_eq(y[i], ey[i]);
        ck_assert_int_eq(am[i], eam[i]);
    }
    /* backward routes each gradient to its argmax */
    const float dy[4] = {1, 2, 3, 4};
    float dx[16];
    op_maxpool2d_backward(dx, dy, am, &p);
    for (int i = 0; i < 16; i++) {
        float e = i == 1 ? 1 : i == 6 ? 2 : i == 8 ? 3 : i == 11 ? 4 : 0;
        ck_assert_float_eq(dx[i], e);
    }
}
END_TEST

START_TEST(test_avg_hand_values)
{
    /* [[1 2] [3 4]], 2x2 window, stride 1, padding 1: 3x3 output.
     * Window sums: corners 1, 2, 3, 4; edges 1+2=3, 1+3=4, 2+4=6, 3+4=7;
     * centre 10. count_include_pad divides all by 4; otherwise corners by
     * 1, edges by 2, centre by 4. */
    const float x[4] = {1, 2, 3, 4};
    op_pool2d_params p = {.n = 1, .c = 1, .h = 2, .w = 2, .kh = 2, .kw = 2,
                          .stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1,
                          .count_include_pad = 1};
    float y[9];
    op_avgpool2d_forward(y, x, &p);
    const float inc[9] = {0.25f, 0.75f, 0.5f, 1.0f, 2.5f, 1.5f, 0.75f, 1.75f, 1.0f};
    for (int i = 0; i < 9; i++)
        ck_assert_float_eq_tol(y[i], inc[i], 1e-6f);
    p.count_include_pad = 0;
    op_avgpool2d_forward(y, x, &p);
    const float exc[9] = {1, 1.5f, 2, 2, 2.5f, 3, 3, 3.5f, 4};
    for (int i = 0; i < 9; i++)
        ck_assert_float_eq_tol(y[i], exc[i], 1e-6f);
}
END_TEST

struct pool_fd {
    op_pool2d_params p;
    int max;          /* max pooling, else average */
    int oh, ow;
    double *x, *y;
    const float *r;
};

static double pool_fd_loss(void *ctx)
{
    struct pool_fd *c = ctx;
    const op_pool2d_params *p = &c->p;
    int sh = p->stride_h ? p->stride_h : p->kh, sw = p->stride_w ? p->stride_w : p->kw;
    for (int pl = 0; pl < p->n * p->c; pl++)
        for (int oy = 0; oy < c->oh; oy++)
            for (int ox = 0; ox < c->ow; ox++) {
                double acc = c->max ? -INFINITY : 0.0;
                int cnt = 0;
                for (int ky = 0; ky < p->kh; ky++)
                    for (int kx = 0; kx < p->kw; kx++) {
                        int iy = oy * sh - p->pad_h + ky, ix = ox * sw - p->pad_w + kx;
                        if (iy < 0 || iy >= p->h || ix < 0 || ix >= p->w)
                            continue;
                        double v = c->x[(pl * p->h + iy) * p->w + ix];
                        cnt++;
                        if (c->max)
                            acc = v > acc ? v : acc;
                        else
                            acc += v;
                    }
                if (!c->max)
                    acc /= p->count_include_pad ? p->kh * p->kw : cnt;
                c->y[(pl * c->oh + oy) * c->ow + ox] = acc;
            }
    return kt_dot(c->y, c->r, (size_t)p->n * p->c * c->oh * c->ow);
}

START_TEST(test_gradients_fd)
{
    kt_rng r;
    kt_rng_init(&r, 31);
    for (int t = 0; t < 24; t++) {
        op_pool2d_params p = {
            .n = kt_int(&r, 1, 2), .c = kt_int(&r, 1, 3),
            .h = kt_int(&r, 3, 11), .w = kt_int(&r, 3, 11),
            .kh = kt_int(&r, 1, 3), .kw = kt_int(&r, 1, 3),
            .stride_h = kt_int(&r, 0, 2), .stride_w = kt_int(&r, 0, 2),
            .count_include_pad = t & 2,
        };
        p.pad_h = kt_int(&r, 0, p.kh / 2);
        p.pad_w = kt_int(&r, 0, p.kw / 2);
        int max = t & 1;
        int oh = op_pool2d_out_h(&p), ow = op_pool2d_out_w(&p);
        ck_assert_int_ge(oh, 1);
        size_t nx = (size_t)p.n * p.c * p.h * p.w, ny = (size_t)p.n * p.c * oh * ow;
        float *x = kt_falloc(nx), *y = kt_falloc(ny), *R = kt_falloc(ny);
        float *dx = kt_falloc(nx);
        uint8_t *am = calloc(ny, 1);
        kt_fill(&r, x, nx, -1, 1);
        kt_fill(&r, R, ny, -1, 1);
        struct pool_fd c = {p, max, oh, ow, kt_dalloc(nx), kt_dalloc(ny), R};
        kt_to_double(c.x, x, nx);
        pool_fd_loss(&c);
        if (max) {
            op_maxpool2d_forward(y, am, x, &p);
            op_maxpool2d_backward(dx, R, am, &p);
        } else {
            op_avgpool2d_forward(y, x, &p);
            op_avgpool2d_backward(dx, R, &p);
        }
        ck_assert_msg(kt_relerr(y, c.y, ny) < 1e-5, "case %d forward", t);
        double *g = kt_dalloc(nx);
        kt_fd_grad(g, c.x, nx, pool_fd_loss, &c, 1e-6);
        ck_assert_msg(kt_relerr(dx, g, nx) < 1e-3, "case %d dx %g", t,
                      kt_relerr(dx, g, nx));
        free(x); free(y); free(R); free(dx); free(am); free(c.x); free(c.y);
        free(g);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pool");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_max_hand_values);
    tcase_add_test(tc, test_avg_hand_values);
    tcase_add_test(tc, test_gradients_fd);
    suite_add_tcase(s, tc);
    return kt_run(s);
}
