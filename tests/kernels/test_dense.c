/* Dense layer: the GEMM path against the plain loops, and its gradients
 * against central differences of a double-precision reference. */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "kt.h"
#include "op_dense.h"

static const int shapes[][3] = {
    /* n, in_f, out_f */
    {1, 1, 1}, {5, 7, 3}, {3, 1, 9}, {33, 65, 17}, {64, 31, 10},
};

START_TEST(test_forward_matches_ref)
{
    kt_rng r;
    kt_rng_init(&r, 1);
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int n = shapes[s][0], in_f = shapes[s][1], out_f = shapes[s][2];
        float *x = kt_falloc((size_t)n * in_f), *w = kt_falloc((size_t)out_f * in_f);
        float *b = kt_falloc(out_f), *y = kt_falloc((size_t)n * out_f);
        float *yr = kt_falloc((size_t)n * out_f);
        kt_fill(&r, x, (size_t)n * in_f, -1, 1);
        kt_fill(&r, w, (size_t)out_f * in_f, -1, 1);
        kt_fill(&r, b, out_f, -1, 1);
        for (int use_bias = 0; use_bias < 2; use_bias++) {
            op_dense_forward(y, x, w, use_bias ? b : NULL, n, in_f, out_f);
            op_dense_forward_ref(yr, x, w, use_bias ? b : NULL, n, in_f, out_f);
            double e = kt_relerr_ff(y, yr, (size_t)n * out_f);
            ck_assert_msg(e < 1e-5, "shape %zu bias %d: err %g", s, use_bias, e);
        }
        free(x); free(w); free(b); free(y); free(yr);
    }
}
END_TEST

START_TEST(test_backward_matches_ref)
{
    kt_rng r;
    kt_rng_init(&r, 2);
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int n = shapes[s][0], in_f = shapes[s][1], out_f = shapes[s][2];
        size_t nx = (size_t)n * in_f, nw = (size_t)out_f * in_f, ny = (size_t)n * out_f;
        float *x = kt_falloc(nx), *w = kt_falloc(nw), *dy = kt_falloc(ny);
        float *dx = kt_falloc(nx), *dw = kt_falloc(nw), *db = kt_falloc(out_f);
        float *dxr = kt_falloc(nx), *dwr = kt_falloc(nw), *dbr = kt_falloc(out_f);
        kt_fill(&r, x, nx, -1, 1);
        kt_fill(&r, w, nw, -1, 1);
        kt_fill(&r, dy, ny, -1, 1);
        /* garbage in the outputs: backward must overwrite, not accumulate */
        kt_fill(&r, dw, nw, 5, 6);
        kt_fill(&r, db, out_f, 5, 6);
        op_dense_backward(dx, dw, db, dy, x, w, n, in_f, out_f);
        op_dense_backward_ref(dxr, dwr, dbr, dy, x, w, n, in_f, out_f);
        ck_assert_double_lt(kt_relerr_ff(dx, dxr, nx), 1e-5);
        ck_assert_double_lt(kt_relerr_ff(dw, dwr, nw), 1e-5);
        ck_assert_double_lt(kt_relerr_ff(db, dbr, out_f), 1e-5);
        /* optional outputs */
        op_dense_backward(NULL, dw, NULL, dy, x, w, n, in_f, out_f);
        ck_assert_double_lt(kt_relerr_ff(dw, dwr, nw), 1e-5);
        free(x); free(w); free(dy); free(dx); free(dw); free(db);
        free(dxr); free(dwr); free(dbr);
    }
}
END_TEST

/* Double-precision reference of the forward pass for finite differences. */
struct dense_fd {
    int n, in_f, out_f;
    double *x, *w, *b, *y;
    const float *r;   /* weights of the loss L = sum(y * r) */
};

static double dense_fd_loss(void *p)
{
    struct dense_fd *c = p;
    for (int i = 0; i < c->n; i++)
        for (int o = 0; o < c->out_f; o++) {
            double acc = c->b[o];
            for (int k = 0; k < c->in_f; k++)
                acc += c->x[i * c->in_f + k] * c->w[o * c->in_f + k];
            c->y[i * c->out_f + o] = acc;
        }
    return kt_dot(c->y, c->r, (size_t)c->n * c->out_f);
}

START_TEST(test_gradients_fd)
{
    kt_rng r;
    kt_rng_init(&r, 3);
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int n = shapes[s][0], in_f = shapes[s][1], out_f = shapes[s][2];
        size_t nx = (size_t)n * in_f, nw = (size_t)out_f * in_f, ny = (size_t)n * out_f;
        float *x = kt_falloc(nx), *w = kt_falloc(nw), *b = kt_falloc(out_f);
        float *R = kt_falloc(ny), *dx = kt_falloc(nx), *dw = kt_falloc(nw);
        float *db = kt_falloc(out_f);
        kt_fill(&r, x, nx, -1, 1);
        kt_fill(&r, w, nw, -1, 1);
        kt_fill(&r, b, out_f, -1, 1);
        kt_fill(&r, R, ny, -1, 1);
        op_dense_backward(dx, dw, db, R, x, w, n, in_f, out_f);

        struct dense_fd c = {n, in_f, out_f, kt_dalloc(nx), kt_dalloc(nw),
                             kt_dalloc(out_f), kt_dalloc(ny), R};
        kt_to_double(c.x, x, nx);
        kt_to_double(c.w, w, nw);
        kt_to_double(c.b, b, out_f);
        double *g = kt_dalloc(nx + nw + out_f);
        kt_fd_grad(g, c.x, nx, dense_fd_loss, &c, 1e-4);
        ck_assert_double_lt(kt_relerr(dx, g, nx), 1e-3);
        kt_fd_grad(g, c.w, nw, dense_fd_loss, &c, 1e-4);
        ck_assert_double_lt(kt_relerr(dw, g, nw), 1e-3);
        kt_fd_grad(g, c.b, out_f, dense_fd_loss, &c, 1e-4);
        ck_assert_double_lt(kt_relerr(db, g, out_f), 1e-3);
        free(c.x); free(c.w); free(c.b); free(c.y); free(g);
        free(x); free(w); free(b); free(R); free(dx); free(dw); free(db);
    }
}
END_TEST

START_TEST(test_hand_values)
{
    /* x = [1 2], W = [[1 0], [3 -1]], b = [0.5 -1]:
     * y = [1*1 + 2*0 + 0.5, 1*3 + 2*(-1) - 1] = [1.5, 0] */
    const float x[2] = {1, 2}, w[4] = {1, 0, 3, -1}, b[2] = {0.5f, -1};
    float y[2];
    op_dense_forward(y, x, w, b, 1, 2, 2);
    ck_assert_float_eq_tol(y[0], 1.5f, 1e-6f);
    ck_assert_float_eq_tol(y[1], 0.0f, 1e-6f);
    /* dy = [1 2]: dW = dy^T x = [[1 2], [2 4]], db = [1 2],
     * dx = dy W = [1*1 + 2*3, 1*0 + 2*(-1)] = [7, -2] */
    const float dy[2] = {1, 2};
    float dx[2], dw[4], db[2];
    op_dense_backward(dx, dw, db, dy, x, w, 1, 2, 2);
    const float edw[4] = {1, 2, 2, 4};
    for (int i = 0; i < 4; i++)
        ck_assert_float_eq_tol(dw[i], edw[i], 1e-6f);
    ck_assert_float_eq_tol(db[0], 1, 1e-6f);
    ck_assert_float_eq_tol(db[1], 2, 1e-6f);
    ck_assert_float_eq_tol(dx[0], 7, 1e-6f);
    ck_assert_float_eq_tol(dx[1], -2, 1e-6f);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("dense");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_hand_values);
    tcase_add_test(tc, test_forward_matches_ref);
    tcase_add_test(tc, test_backward_matches_ref);
    tcase_add_test(tc, test_gradients_fd);
    suite_add_tcase(s, tc);
    return kt_run(s);
}
