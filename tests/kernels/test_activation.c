/* Activations: hand values and derivatives against central differences in
 * double, including in-place use. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kt.h"
#include "op_activation.h"

START_TEST(test_hand_values)
{
    const float x[4] = {-2, -0.5f, 0.5f, 3};
    float y[4];
    op_relu_forward(y, x, 4);
    ck_assert_float_eq(y[0], 0);
    ck_assert_float_eq(y[3], 3);
    op_leaky_relu_forward(y, x, 4, 0.1f);
    ck_assert_float_eq_tol(y[0], -0.2f, 1e-7f);
    ck_assert_float_eq(y[2], 0.5f);
    /* GELU(x) = x * Phi(x): Phi(-2) = 0.0227501, Phi(-0.5) = 0.3085375,
     * Phi(0.5) = 0.6914625, Phi(3) = 0.9986501: -0.0455003, -0.1542688,
     * 0.3457312, 2.9959503 */
    op_gelu_forward(y, x, 4);
    ck_assert_float_eq_tol(y[0], -0.0455003f, 1e-6f);
    ck_assert_float_eq_tol(y[1], -0.1542688f, 1e-6f);
    ck_assert_float_eq_tol(y[2], 0.3457312f, 1e-6f);
    ck_assert_float_eq_tol(y[3], 2.9959503f, 1e-6f);
    /* sigmoid(-2) = 0.1192029, sigmoid(3) = 0.9525741; large |x| saturate
     * without overflow */
    op_sigmoid_forward(y, x, 4);
    ck_assert_float_eq_tol(y[0], 0.1192029f, 1e-6f);
    ck_assert_float_eq_tol(y[3], 0.9525741f, 1e-6f);
    const float big[2] = {-200, 200};
    op_sigmoid_forward(y, big, 2);
    ck_assert_float_eq(y[0], 0.0f);
    ck_assert_float_eq(y[1], 1.0f);
    /* tanh(0.5) = 0.4621172 */
    op_tanh_forward(y, x, 4);
    ck_assert_float_eq_tol(y[2], 0.4621172f, 1e-6f);
}
END_TEST

enum { RELU, LEAKY, GELU, SIGMOID, TANH, KINDS };

static double act_d(int kind, double x)
{
    switch (kind) {
    case RELU: return x > 0 ? x : 0;
    case LEAKY: return x > 0 ? x : 0.01 * x;
    case GELU: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    case SIGMOID: return 1 / (1 + exp(-x));
    default: return tanh(x);
    }
}

struct act_fd {
    int kind;
    size_t n;
    double *x;
    const float *r;
};

static double act_fd_loss(void *ctx)
{
    struct act_fd *a = ctx;
    double s = 0;
    for (size_t i = 0; i < a->n; i++)
        s += act_d(a->kind, a->x[i]) * a->r[i];
    return s;
}

START_TEST(test_gradients_fd)
{
    kt_rng r;
    kt_rng_init(&r, 61);
    size_t n = 257;
    for (int kind = 0; kind < KINDS; kind++) {
        float *x = kt_falloc(n), *y = kt_falloc(n), *R = kt_falloc(n);
        float *dx = kt_falloc(n), *buf = kt_falloc(n);
        kt_fill(&r, x, n, -4, 4);
        kt_fill(&r, R, n, -1, 1);
        switch (kind) {
        case RELU:
            op_relu_forward(y, x, n);
            op_relu_backward(dx, R, x, n);
            break;
        case LEAKY:
            op_leaky_relu_forward(y, x, n, 0.01f);
            op_leaky_relu_backward(dx, R, x, n, 0.01f);
            break;
        case GELU:
            op_gelu_forward(y, x, n);
            op_gelu_backward(dx, R, x, n);
            break;
        case SIGMOID:
            op_sigmoid_forward(y, x, n);
            op_sigmoid_backward(dx, R, y, n);
            break;
        default:
            op_tanh_forward(y, x, n);
            op_tanh_backward(dx, R, y, n);
        }
        struct act_fd a = {kind, n, kt_dalloc(n), R};
        kt_to_double(a.x, x, n);
        for (size_t i = 0; i < n; i++)
            ck_assert_float_eq_tol(y[i], (float)act_d(kind, a.x[i]), 2e-6f);
        double *g = kt_dalloc(n);
        kt_fd_grad(g, a.x, n, act_fd_loss, &a, 1e-6);
        ck_assert_msg(kt_relerr(dx, g, n) < 1e-3, "kind %d: %g", kind, kt_relerr(dx, g, n));
        /* in place: out == in, din == dout */
        memcpy(buf, x, sizeof(float) * n);
        if (kind == RELU) {
            op_relu_forward(buf, buf, n);
            ck_assert_int_eq(memcmp(buf, y, sizeof(float) * n), 0);
            memcpy(buf, R, sizeof(float) * n);
            op_relu_backward(buf, buf, x, n);
            ck_assert_int_eq(memcmp(buf, dx, sizeof(float) * n), 0);
        }
        free(x); free(y); free(R); free(dx); free(buf); free(a.x); free(g);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("activation");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_hand_values);
    tcase_add_test(tc, test_gradients_fd);
    suite_add_tcase(s, tc);
    return kt_run(s);
}
