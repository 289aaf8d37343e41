/* Losses against values worked out by hand and gradients against central
 * differences of double-precision references. */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "kt.h"
#include "op_loss.h"

START_TEST(test_xent_hand_values)
{
    /* Sample 0: logits [1 2 3], label 2. softmax = e^x / (e + e^2 + e^3)
     *   = [0.0900306, 0.2447285, 0.6652410];
     *   loss = log(e + e^2 + e^3) - 3 = log(1 + e^-1 + e^-2) = 0.4076060.
     * Sample 1: logits [0 0 0], label 1: loss = log 3 = 1.0986123,
     *   softmax = [1/3 1/3 1/3].
     * Sum = 1.5062183. scale 0.5: d0 = 0.5 * (p - onehot(2))
     *   = [0.0450153, 0.1223642, -0.1673795]; d1 = [1/6, -1/3, 1/6]. */
    const float x[6] = {1, 2, 3, 0, 0, 0};
    const int32_t y[2] = {2, 1};
    float d[6];
    double loss = op_softmax_xent(d, x, y, 2, 3, 0.5f);
    ck_assert_double_eq_tol(loss, 0.4076059644 + 1.0986122887, 1e-6);
    const float ed[6] = {0.0450153f, 0.1223642f, -0.1673795f,
                         1.0f / 6, -1.0f / 3, 1.0f / 6};
    for (int i = 0; i < 6; i++)
        ck_assert_float_eq_tol(d[i], ed[i], 1e-6f);
    /* loss only */
    ck_assert_double_eq_tol(op_softmax_xent(NULL, x, y, 2, 3, 1.0f),
                            1.5062182531, 1e-6);
}
END_TEST

START_TEST(test_xent_stable)
{
    /* logits [1000 0], label 1: loss = 1000 + log(1 + e^-1000) = 1000;
     * label 0: loss = log(1 + e^-1000) = 0 (no overflow to inf/nan). */
    const float x[4] = {1000, 0, 1000, 0};
    const int32_t y[2] = {1, 0};
    float d[4];
    double loss = op_softmax_xent(d, x, y, 2, 2, 1.0f);
    ck_assert_double_eq_tol(loss, 1000.0, 1e-9);
    ck_assert_float_eq_tol(d[0], 1.0f, 1e-6f);
    ck_assert_float_eq_tol(d[1], -1.0f, 1e-6f);
    ck_assert_float_eq_tol(d[2], 0.0f, 1e-6f);
    ck_assert_float_eq_tol(d[3], 0.0f, 1e-6f);
}
END_TEST

START_TEST(test_xent_bad_label)
{
    const float x[4] = {1, 2, 3, 4};
    int32_t y[2] = {0, 2};
    float d[4] = {9, 9, 9, 9};
    ck_assert(isnan(op_softmax_xent(d, x, y, 2, 2, 1.0f)));
    for (int i = 0; i < 4; i++)
        ck_assert_float_eq(d[i], 0.0f);
    y[1] = -1;
    ck_assert(isnan(op_softmax_xent(d, x, y, 2, 2, 1.0f)));
}
END_TEST

struct xent_fd {
    int n, classes;
    double *x;
    const int32_t *y;
};

static double xent_fd_loss(void *p)
{
    struct xent_fd *c = p;
    double loss = 0.0;
    for (int i = 0; i < c->n; i++) {
        const double *row = c->x + (size_t)i * c->classes;
        double s = 0.0;
        for (int k = 0; k < c->classes; k++)
            s += exp(row[k]);
        loss += log(s) - row[c->y[i]];
    }
    return loss;
}

START_TEST(test_xent_gradients_fd)
{
    kt_rng r;
    kt_rng_init(&r, 11);
    int n = 7, classes = 13;
    size_t nx = (size_t)n * classes;
    float *x = kt_falloc(nx), *d = kt_falloc(nx);
    int32_t y[7];
    kt_fill(&r, x, nx, -4, 4);
    for (int i = 0; i < n; i++)
        y[i] = kt_int(&r, 0, classes - 1);
    float scale = 0.25f;
    op_softmax_xent(d, x, y, n, classes, scale);
    for (size_t i = 0; i < nx; i++)
        d[i] /= scale;
    struct xent_fd c = {n, classes, kt_dalloc(nx), y};
    kt_to_double(c.x, x, nx);
    double *g = kt_dalloc(nx);
    kt_fd_grad(g, c.x, nx, xent_fd_loss, &c, 1e-5);
    ck_assert_double_lt(kt_relerr(d, g, nx), 1e-3);
    free(x); free(d); free(c.x); free(g);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("loss");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_xent_hand_values);
    tcase_add_test(tc, test_xent_stable);
    tcase_add_test(tc, test_xent_bad_label);
    tcase_add_test(tc, test_xent_gradients_fd);
    suite_add_tcase(s, tc);
    return kt_run(s);
}
