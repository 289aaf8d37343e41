/* The 3-D kernels against PyTorch's own numbers (torch3d_ref.h, written by
 * bench/torch3d_ref.py with PyTorch 1.13): conv3d on both paths,
 * conv_transpose3d, max_pool3d (on values with ties: PyTorch's argmax is
 * the first), avg_pool3d and nearest and trilinear upsampling, forward and
 * backward, on inputs made here as the script makes them. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels.h"
#include "kernels_internal.h"
#include "kt.h"
#include "op_conv3d.h"
#include "op_conv_transpose3d.h"
#include "op_pool3d.h"
#include "op_upsample3d.h"
#include "torch3d_ref.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* The script's pattern: ((i * mul + add) % mod - mod / 2) / scale. */
static float *pattern(size_t n, long mul, long add, long mod, float scale)
{
    float *t = kt_falloc(n);
    for (size_t i = 0; i < n; i++)
        t[i] = (float)(((long)i * mul + add) % mod - mod / 2) / scale;
    return t;
}

static void near(const float *got, const float *want, size_t n, double tol, const char *what)
{
    ck_assert_msg(kt_relerr_ff(got, want, n) < tol, "%s: %g of the largest", what,
                  kt_relerr_ff(got, want, n));
}

static void conv_case(void)
{
    op_conv3d_params p = {.n = 2, .c = 3, .d = 5, .h = 6, .w = 7, .k = 4, .kd = 3, .kh = 3,
                          .kw = 3, .stride_d = 1, .stride_h = 2, .stride_w = 2, .pad_d = 1,
                          .pad_h = 1, .pad_w = 1, .dil_d = 2, .dil_h = 1, .dil_w = 1};
    size_t nx = 2 * 3 * 5 * 6 * 7, nw = 4 * 3 * 27, ny = COUNT(torch3d_conv_y);
    ck_assert_uint_eq(ny, (size_t)2 * 4 * op_conv3d_out_d(&p) * op_conv3d_out_h(&p) *
                              op_conv3d_out_w(&p));
    float *x = pattern(nx, 37, 11, 101, 64), *w = pattern(nw, 53, 7, 97, 128);
    float *b = pattern(4, 5, 1, 7, 8), *dy = pattern(ny, 29, 3, 89, 64);
    float *y = kt_falloc(ny), *dx = kt_falloc(nx), *dw = kt_falloc(nw), *db = kt_falloc(4);
    size_t wsb = op_conv3d_workspace(&p);
    void *ws = kt_falloc(wsb / sizeof(float) + 1);
    op_conv3d_forward(y, x, w, b, &p, ws, wsb);
    op_conv3d_backward(dx, dw, db, dy, x, w, &p, ws, wsb);
    near(y, torch3d_conv_y, ny, 1e-5, "conv3d out");
    near(dx, torch3d_conv_dx, nx, 1e-5, "conv3d din");
    near(dw, torch3d_conv_dw, nw, 1e-5, "conv3d dweight");
    near(db, torch3d_conv_db, 4, 1e-6, "conv3d dbias");
    free(x); free(w); free(b); free(dy); free(y); free(dx); free(dw); free(db); free(ws);
}

static void convt_case(void)
{
    op_conv_transpose3d_params q = {.n = 1, .c = 4, .d = 3, .h = 2, .w = 3, .k = 3, .kd = 3,
                                    .kh = 3, .kw = 3, .stride_d = 2, .stride_h = 2,
                                    .stride_w = 2, .pad_d = 1, .pad_h = 1, .pad_w = 1,
                                    .out_pad_d = 1, .out_pad_h = 0, .out_pad_w = 1};
    size_t nx = 4 * 3 * 2 * 3, nw = 4 * 3 * 27, ny = COUNT(torch3d_convt_y);
    ck_assert_uint_eq(ny, (size_t)3 * op_conv_transpose3d_out_d(&q) *
                              op_conv_transpose3d_out_h(&q) * op_conv_transpose3d_out_w(&q));
    float *x = pattern(nx, 37, 11, 101, 64), *w = pattern(nw, 53, 7, 97, 128);
    float *b = pattern(3, 5, 1, 7, 8), *dy = pattern(ny, 29, 3, 89, 64);
    float *y = kt_falloc(ny), *dx = kt_falloc(nx), *dw = kt_falloc(nw), *db = kt_falloc(3);
    size_t wsb = op_conv_transpose3d_workspace(&q);
    void *ws = kt_falloc(wsb / sizeof(float) + 1);
    op_conv_transpose3d_forward(y, x, w, b, &q, ws, wsb);
    op_conv_transpose3d_backward(dx, dw, db, dy, x, w, &q, ws, wsb);
    near(y, torch3d_convt_y, ny, 1e-5, "conv_transpose3d out");
    near(dx, torch3d_convt_dx, nx, 1e-5, "conv_transpose3d din");
    near(dw, torch3d_convt_dw, nw, 1e-5, "conv_transpose3d dweight");
    near(db, torch3d_convt_db, 3, 1e-6, "conv_transpose3d dbias");
    free(x); free(w); free(b); free(dy); free(y); free(dx); free(dw); free(db); free(ws);
}

/* Each convolution on the path in force (oneDNN's layouts where it has
 * kernels) and on vol2col. */
START_TEST(test_conv3d)
{
    for (int forced = 0; forced < 2; forced++) {
        kern__conv_path saved = kern__conv_get_path();
        if (forced)
            kern__conv_set_path(KERN__CONV_IM2COL);
        conv_case();
        convt_case();
        kern__conv_set_path(saved);
    }
}
END_TEST

START_TEST(test_pool3d)
{
    op_pool3d_params p = {.n = 2, .c = 2, .d = 5, .h = 6, .w = 7, .kd = 3, .kh = 3, .kw = 3,
                          .stride_d = 2, .stride_h = 2, .stride_w = 2, .pad_d = 1, .pad_h = 1,
                          .pad_w = 1, .count_include_pad = 1};
    size_t nx = 2 * 2 * 5 * 6 * 7, ny = COUNT(torch3d_maxpool_y);
    ck_assert_uint_eq(ny, (size_t)4 * op_pool3d_out_d(&p) * op_pool3d_out_h(&p) *
                              op_pool3d_out_w(&p));
    float *xm = pattern(nx, 7, 3, 13, 4), *xa = pattern(nx, 37, 11, 101, 64);
    float *dy = pattern(ny, 29, 3, 89, 64), *y = kt_falloc(ny), *dx = kt_falloc(nx);
    uint8_t *am = calloc(ny, 1);
    op_maxpool3d_forward(y, am, xm, &p);
    op_maxpool3d_backward(dx, dy, am, &p);
    near(y, torch3d_maxpool_y, ny, 1e-7, "max_pool3d out");
    /* the same argmax on ties: every gradient where PyTorch put it */
    near(dx, torch3d_maxpool_dx, nx, 1e-6, "max_pool3d din");
    op_avgpool3d_forward(y, xa, &p);
    op_avgpool3d_backward(dx, dy, &p);
    near(y, torch3d_avgpool_y, ny, 1e-6, "avg_pool3d out");
    near(dx, torch3d_avgpool_dx, nx, 1e-6, "avg_pool3d din");
    free(xm); free(xa); free(dy); free(y); free(dx); free(am);
}
END_TEST

START_TEST(test_upsample3d)
{
    size_t nx = 2 * 3 * 4 * 5, ny = COUNT(torch3d_up_nearest_y);
    ck_assert_uint_eq(ny, (size_t)2 * 3 * 8 * 15);
    float *x = pattern(nx, 37, 11, 101, 64), *dy = pattern(ny, 29, 3, 89, 64);
    float *y = kt_falloc(ny), *dx = kt_falloc(nx);
    op_upsample3d_nearest_forward(y, x, 1, 2, 3, 4, 5, 3, 8, 15);
    op_upsample3d_nearest_backward(dx, dy, 1, 2, 3, 4, 5, 3, 8, 15);
    near(y, torch3d_up_nearest_y, ny, 1e-7, "nearest out");
    near(dx, torch3d_up_nearest_dx, nx, 1e-6, "nearest din");
    op_upsample3d_trilinear_forward(y, x, 1, 2, 3, 4, 5, 3, 8, 15);
    op_upsample3d_trilinear_backward(dx, dy, 1, 2, 3, 4, 5, 3, 8, 15);
    near(y, torch3d_up_trilinear_y, ny, 1e-6, "trilinear out");
    near(dx, torch3d_up_trilinear_dx, nx, 1e-6, "trilinear din");
    free(x); free(dy); free(y); free(dx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("torch3d");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_conv3d);
    tcase_add_test(tc, test_pool3d);
    tcase_add_test(tc, test_upsample3d);
    suite_add_tcase(s, tc);
    return kt_run(s);
}
