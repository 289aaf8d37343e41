/* Losses against values worked out by hand and gradients against central
 * differences of double-precision references. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    double loss = op_softmax_xent(d, x, OP_LABELS_I32(y), 2, 3, 0.5f);
    ck_assert_double_eq_tol(loss, 0.4076059644 + 1.0986122887, 1e-6);
    const float ed[6] = {0.0450153f, 0.1223642f, -0.1673795f,
                         1.0f / 6, -1.0f / 3, 1.0f / 6};
    for (int i = 0; i < 6; i++)
        ck_assert_float_eq_tol(d[i], ed[i], 1e-6f);
    /* loss only */
    ck_assert_double_eq_tol(op_softmax_xent(NULL, x, OP_LABELS_I32(y), 2, 3, 1.0f),
                            1.5062182531, 1e-6);
    /* byte labels give the very same loss and gradient */
    const uint8_t y8[2] = {2, 1};
    float d8[6];
    ck_assert(op_softmax_xent(d8, x, OP_LABELS_U8(y8), 2, 3, 0.5f) == loss);
    ck_assert_int_eq(memcmp(d, d8, sizeof(d)), 0);
    const uint8_t bad8[2] = {2, 3};
    ck_assert(isnan(op_softmax_xent(d8, x, OP_LABELS_U8(bad8), 2, 3, 0.5f)));
}
END_TEST

START_TEST(test_xent_stable)
{
    /* logits [1000 0], label 1: loss = 1000 + log(1 + e^-1000) = 1000;
     * label 0: loss = log(1 + e^-1000) = 0 (no overflow to inf/nan). */
    const float x[4] = {1000, 0, 1000, 0};
    const int32_t y[2] = {1, 0};
    float d[4];
    double loss = op_softmax_xent(d, x, OP_LABELS_I32(y), 2, 2, 1.0f);
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
    ck_assert(isnan(op_softmax_xent(d, x, OP_LABELS_I32(y), 2, 2, 1.0f)));
    for (int i = 0; i < 4; i++)
        ck_assert_float_eq(d[i], 0.0f);
    y[1] = -1;
    ck_assert(isnan(op_softmax_xent(d, x, OP_LABELS_I32(y), 2, 2, 1.0f)));
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
    op_softmax_xent(d, x, OP_LABELS_I32(y), n, classes, scale);
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

START_TEST(test_pixels_hand_values)
{
    /* n = 1, 2 classes, 1x2 pixels, NCHW: logits class 0 = [0 2], class 1
     * = [0 0]; labels [0 1].
     * pixel 0: logits (0, 0), label 0: log 2 = 0.6931472, grad
     *   (p - onehot)/2 pixels = ([.5 .5] - [1 0])/2 = [-0.25 0.25];
     * pixel 1: logits (2, 0), label 1: log(1 + e^2) = 2.1269280,
     *   p = [0.8807971 0.1192029], grad [0.4403985 -0.4403985].
     * Per-sample mean over pixels: 1.4100376. */
    const float x[4] = {0, 2, 0, 0};
    const int32_t y[2] = {0, 1};
    float d[4];
    double loss = op_softmax_xent_pixels(d, x, OP_LABELS_I32(y), 1, 2, 1, 2, 1.0f);
    ck_assert_double_eq_tol(loss, 1.4100376, 1e-6);
    /* d is NCHW: class 0 at pixels 0, 1 then class 1 */
    ck_assert_float_eq_tol(d[0], -0.25f, 1e-6f);
    ck_assert_float_eq_tol(d[2], 0.25f, 1e-6f);
    ck_assert_float_eq_tol(d[1], 0.4403985f, 1e-6f);
    ck_assert_float_eq_tol(d[3], -0.4403985f, 1e-6f);
    int32_t bad[2] = {0, 2};
    ck_assert(isnan(op_softmax_xent_pixels(d, x, OP_LABELS_I32(bad), 1, 2, 1, 2, 1.0f)));
}
END_TEST

START_TEST(test_bce_hand_values)
{
    /* per element max(x,0) - x t + log(1 + e^-|x|):
     * sample 0: (x 0, t 1) log 2 = 0.6931472; (x 2, t 0) 2.1269280;
     *   mean 1.4100376
     * sample 1: (x -1, t 0.25) 0.25 + log(1 + e^-1) = 0.5632617;
     *   (x 3, t 1) log(1 + e^-3) = 0.0485874; mean 0.3059245
     * sum 1.7159621. Gradient scale/per * (sigmoid(x) - t), scale 1, per 2:
     *   [-0.25, 0.4403985, 0.0094707, -0.0237129] */
    const float x[4] = {0, 2, -1, 3}, t[4] = {1, 0, 0.25f, 1};
    float d[4];
    double loss = op_bce_logits(d, x, t, 2, 2, 1.0f);
    ck_assert_double_eq_tol(loss, 1.7159621, 1e-6);
    const float ed[4] = {-0.25f, 0.4403985f, 0.0094707f, -0.0237129f};
    for (int i = 0; i < 4; i++)
        ck_assert_float_eq_tol(d[i], ed[i], 1e-6f);
    /* extreme logits stay finite */
    const float big[2] = {-100, 100}, tz[2] = {0, 1};
    ck_assert_double_lt(op_bce_logits(d, big, tz, 1, 2, 1.0f), 1e-30);
}
END_TEST

START_TEST(test_dice_hand_values)
{
    /* logits 0 (p = 0.5), targets [1 0 1 1], eps 1: I = 1.5, S = 2 + 3,
     * loss = 1 - (3 + 1)/(5 + 1) = 1/3.
     * dloss/dp_j = ((2I + eps) - 2 t_j (S + eps))/(S + eps)^2
     *   = (4 - 12 t_j)/36; times p(1 - p) = 1/4:
     *   t = 1: -0.0555556, t = 0: 0.0277778 */
    const float x[4] = {0, 0, 0, 0}, t[4] = {1, 0, 1, 1};
    float d[4];
    double loss = op_dice_logits(d, x, t, 1, 4, 1.0f, 1.0f);
    ck_assert_double_eq_tol(loss, 1.0 / 3.0, 1e-7);
    ck_assert_float_eq_tol(d[0], -0.0555556f, 1e-6f);
    ck_assert_float_eq_tol(d[1], 0.0277778f, 1e-6f);
    /* two identical samples sum */
    const float x2[8] = {0, 0, 0, 0, 0, 0, 0, 0}, t2[8] = {1, 0, 1, 1, 1, 0, 1, 1};
    float d2[8];
    ck_assert_double_eq_tol(op_dice_logits(d2, x2, t2, 2, 4, 1.0f, 0.5f), 2.0 / 3.0, 1e-7);
    ck_assert_float_eq_tol(d2[4], -0.0277778f, 1e-6f);
}
END_TEST

/* Double references of the three losses for finite differences. */
struct loss_fd {
    int kind;           /* 0 pixel xent, 1 bce, 2 dice */
    int n, c, hw;       /* pixel xent: (n, c, hw); others: (n, hw) */
    double *x;
    const float *t;
    const int32_t *y;
};

static double loss_fd_loss(void *ctx)
{
    struct loss_fd *f = ctx;
    double loss = 0;
    for (int i = 0; i < f->n; i++) {
        if (f->kind == 0) {
            double s = 0;
            for (int j = 0; j < f->hw; j++) {
                double z = 0;
                for (int k = 0; k < f->c; k++)
                    z += exp(f->x[(i * f->c + k) * f->hw + j]);
                s += log(z) - f->x[(i * f->c + f->y[i * f->hw + j]) * f->hw + j];
            }
            loss += s / f->hw;
        } else if (f->kind == 1) {
            double s = 0;
            for (int j = 0; j < f->hw; j++) {
                double v = f->x[i * f->hw + j], t = f->t[i * f->hw + j];
                s += -(t * log(1 / (1 + exp(-v))) + (1 - t) * log(1 - 1 / (1 + exp(-v))));
            }
            loss += s / f->hw;
        } else {
            double inter = 0, sum = 0;
            for (int j = 0; j < f->hw; j++) {
                double p = 1 / (1 + exp(-f->x[i * f->hw + j])), t = f->t[i * f->hw + j];
                inter += p * t;
                sum += p + t;
            }
            loss += 1 - (2 * inter + 1e-3) / (sum + 1e-3);
        }
    }
    return loss;
}

START_TEST(test_losses_gradients_fd)
{
    kt_rng r;
    kt_rng_init(&r, 12);
    for (int kind = 0; kind < 3; kind++) {
        int n = 3, c = kind == 0 ? 5 : 1, hw = 7 * 3;
        size_t nx = (size_t)n * c * hw;
        float *x = kt_falloc(nx), *d = kt_falloc(nx), *t = kt_falloc(n * hw);
        int32_t *y = calloc(n * hw, sizeof(int32_t));
        kt_fill(&r, x, nx, -3, 3);
        kt_fill(&r, t, n * hw, 0, 1);
        for (int j = 0; j < n * hw; j++)
            y[j] = kt_int(&r, 0, c - 1);
        float scale = 0.5f;
        double loss;
        if (kind == 0)
            loss = op_softmax_xent_pixels(d, x, OP_LABELS_I32(y), n, c, 7, 3, scale);
        else if (kind == 1)
            loss = op_bce_logits(d, x, t, n, hw, scale);
        else
            loss = op_dice_logits(d, x, t, n, hw, 1e-3f, scale);
        for (size_t i = 0; i < nx; i++)
            d[i] /= scale;
        struct loss_fd f = {kind, n, c, hw, kt_dalloc(nx), t, y};
        kt_to_double(f.x, x, nx);
        ck_assert_double_eq_tol(loss, loss_fd_loss(&f), 1e-6 * fabs(loss) + 1e-9);
        double *g = kt_dalloc(nx);
        kt_fd_grad(g, f.x, nx, loss_fd_loss, &f, 1e-5);
        ck_assert_msg(kt_relerr(d, g, nx) < 1e-3, "kind %d: %g", kind, kt_relerr(d, g, nx));
        free(x); free(d); free(t); free(y); free(f.x); free(g);
    }
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
    tcase_add_test(tc, test_pixels_hand_values);
    tcase_add_test(tc, test_bce_hand_values);
    tcase_add_test(tc, test_dice_hand_values);
    tcase_add_test(tc, test_losses_gradients_fd);
    suite_add_tcase(s, tc);
    return kt_run(s);
}
