/* Losses against values worked out by hand and gradients against central
 * differences of double-precision references. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kt.h"
#include "kernels.h"
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

/* ---- the Model Zoo's U-Net losses: ssce_dice and multilabel_bce ---- */

/* A segmentation case in double: logits (n, c, h, w), labels (n, h, w). */
struct seg_ref {
    int n, c, h, w;
    bool include_background;
    double *x;
    const int32_t *y;
};

/* DiceCELoss as the Model Zoo writes it, per sample (summed): 0.5 * the
 * pixels' mean cross entropy + 0.5 * (1 - corr * the mean over ALL
 * classes of dice), class 0 of p and t zeroed and corr = C/(C-1) unless
 * include_background. */
static double ssce_dice_ref(void *ctx)
{
    struct seg_ref *f = ctx;
    int hw = f->h * f->w, C = f->c;
    double *p = malloc(sizeof(double) * (size_t)C * hw);
    double loss = 0;
    for (int i = 0; i < f->n; i++) {
        const double *x = f->x + (size_t)i * C * hw;
        const int32_t *y = f->y + (size_t)i * hw;
        double ce = 0;
        for (int j = 0; j < hw; j++) {
            double z = 0;
            for (int k = 0; k < C; k++)
                z += exp(x[k * hw + j]);
            for (int k = 0; k < C; k++)
                p[k * hw + j] = exp(x[k * hw + j]) / z;
            ce += -log(p[y[j] * hw + j]);
        }
        double dice = 0;
        for (int k = 0; k < C; k++) {
            double inter = 0, ts = 0, ps = 0, keep = f->include_background || k > 0 ? 1 : 0;
            for (int j = 0; j < hw; j++) {
                double t = y[j] == k ? keep : 0, q = p[k * hw + j] * keep;
                inter += t * q;
                ts += t;
                ps += q;
            }
            dice += 2 * inter / (ts + ps + 1e-6);
        }
        double corr = f->include_background ? 1.0 : (double)C / (C - 1);
        loss += 0.5 * ce / hw + 0.5 * (1 - corr * dice / C);
    }
    free(p);
    return loss;
}

/* nn.BCEWithLogitsLoss against the one-hot labels, the mean over every
 * element of a sample, summed over samples; written as -t log s(x) -
 * (1 - t) log(1 - s(x)). */
static double multilabel_bce_ref(void *ctx)
{
    struct seg_ref *f = ctx;
    int hw = f->h * f->w, C = f->c;
    double loss = 0;
    for (int i = 0; i < f->n; i++) {
        double s = 0;
        for (int k = 0; k < C; k++)
            for (int j = 0; j < hw; j++) {
                double v = f->x[((size_t)i * C + k) * hw + j], t = f->y[i * hw + j] == k;
                double sg = 1 / (1 + exp(-v));
                s += -(t * log(sg) + (1 - t) * log(1 - sg));
            }
        loss += s / ((double)C * hw);
    }
    return loss;
}

/* Random logits and labels in which every class occurs in every sample
 * (hw >= c) and class 0 of the first sample covers a run of pixels. */
static void seg_case(kt_rng *r, float *x, int32_t *y, int n, int c, int hw)
{
    kt_fill(r, x, (size_t)n * c * hw, -3, 3);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < hw; j++)
            y[i * hw + j] = j < c ? (j * 7 + i) % c : kt_int(r, 0, c - 1);
}

static double seg_loss(int kind, float *d, const float *x, op_labels y, int n, int c, int h,
                       int w, bool incl, float scale, double *sums)
{
    return kind == 0 ? op_ssce_dice(d, x, y, n, c, h, w, incl, scale, sums)
                     : op_multilabel_bce(d, x, y, n, c, h, w, scale);
}

START_TEST(test_ssce_dice_hand_values)
{
    /* n = 1, 2 classes, 1x2 pixels, logits 0: p = 1/2 everywhere; labels
     * [1 1]. CE = log 2 = 0.6931472. dice_0 = 0 / (0 + 1 + 1e-6) = 0,
     * dice_1 = 2 * 1 / (2 + 1 + 1e-6) = 0.6666664.
     * include_background: 0.5 * log 2 + 0.5 * (1 - 0.3333332) = 0.6799070
     * without: 0.5 * log 2 + 0.5 * (1 - 0.6666664) = 0.5132404.
     * Gradient without background, scale 1: dloss/dp_1 at a pixel
     * = I/den^2 - 1/den = 1/9 - 1/3 = -2/9 (den = 3), dloss/dp_0 = 0;
     * dx_1 = 0.5/2 (p_1 - 1) + p_1 (g_1 - p_1 g_1) = -0.125 - 1/18
     * = -0.1805556, dx_0 = +0.1805556. */
    const float x[4] = {0, 0, 0, 0};
    const int32_t y[2] = {1, 1};
    float d[4];
    double sums[OP_SSCE_DICE_SUMS(2)];
    ck_assert_double_eq_tol(op_ssce_dice(d, x, OP_LABELS_I32(y), 1, 2, 1, 2, true, 1.0f, sums),
                            0.6799070, 1e-6);
    ck_assert_double_eq_tol(op_ssce_dice(d, x, OP_LABELS_I32(y), 1, 2, 1, 2, false, 1.0f, sums),
                            0.5132404, 1e-6);
    ck_assert_float_eq_tol(d[0], 0.1805556f, 1e-6f);
    ck_assert_float_eq_tol(d[1], 0.1805556f, 1e-6f);
    ck_assert_float_eq_tol(d[2], -0.1805556f, 1e-6f);
    ck_assert_float_eq_tol(d[3], -0.1805556f, 1e-6f);
}
END_TEST

START_TEST(test_multilabel_bce_hand_values)
{
    /* n = 1, 2 classes, 1x2 pixels; labels [0 1]: targets class 0 [1 0],
     * class 1 [0 1]. logits class 0 [0 2], class 1 [-1 3]:
     * (0, 1) log 2 = 0.6931472; (2, 0) 2.1269280; (-1, 0) 0.3132617;
     * (3, 1) 0.0485874; mean 0.7954811. Gradient scale/4 (s(x) - t):
     * [-0.125, 0.2201993, 0.0672354, -0.0118565] */
    const float x[4] = {0, 2, -1, 3};
    const int32_t y[2] = {0, 1};
    float d[4];
    ck_assert_double_eq_tol(op_multilabel_bce(d, x, OP_LABELS_I32(y), 1, 2, 1, 2, 1.0f),
                            0.7954811, 1e-6);
    const float ed[4] = {-0.125f, 0.2201993f, 0.0672354f, -0.0118565f};
    for (int i = 0; i < 4; i++)
        ck_assert_float_eq_tol(d[i], ed[i], 1e-6f);
    /* dlogits may be logits */
    float xd[4];
    memcpy(xd, x, sizeof(xd));
    op_multilabel_bce(xd, xd, OP_LABELS_I32(y), 1, 2, 1, 2, 1.0f);
    ck_assert_int_eq(memcmp(xd, d, sizeof(d)), 0);
}
END_TEST

/* Both losses against their double references on random cases of several
 * shapes, background in and out; byte labels and two threads give the
 * same bits. */
START_TEST(test_seg_losses_reference)
{
    static const int shapes[][4] = {{1, 2, 3, 4}, {3, 3, 5, 2}, {2, 5, 4, 4}, {4, 7, 3, 6},
                                    {2, 4, 16, 33}};
    kt_rng r;
    kt_rng_init(&r, 41);
    for (int kind = 0; kind < 2; kind++)
        for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
            for (int incl = 0; incl < 2; incl++) {
                int n = shapes[s][0], c = shapes[s][1], h = shapes[s][2], w = shapes[s][3];
                size_t hw = (size_t)h * w, nx = (size_t)n * c * hw;
                float *x = kt_falloc(nx), *d = kt_falloc(nx), *d2 = kt_falloc(nx);
                int32_t *y = malloc(sizeof(int32_t) * n * hw);
                uint8_t *y8 = malloc((size_t)n * hw);
                double *sums = kt_dalloc((size_t)n * OP_SSCE_DICE_SUMS(c));
                seg_case(&r, x, y, n, c, (int)hw);
                for (size_t j = 0; j < (size_t)n * hw; j++)
                    y8[j] = (uint8_t)y[j];
                double loss = seg_loss(kind, d, x, OP_LABELS_I32(y), n, c, h, w, incl, 0.5f, sums);
                struct seg_ref f = {n, c, h, w, incl, kt_dalloc(nx), y};
                kt_to_double(f.x, x, nx);
                double ref = kind == 0 ? ssce_dice_ref(&f) : multilabel_bce_ref(&f);
                ck_assert_msg(fabs(loss - ref) <= 1e-9 * fabs(ref), "kind %d (%d %d %d %d) "
                              "incl %d: %.12g, reference %.12g", kind, n, c, h, w, incl, loss, ref);
                /* loss alone, byte labels, two threads: the same */
                ck_assert(seg_loss(kind, NULL, x, OP_LABELS_I32(y), n, c, h, w, incl, 0.5f,
                                   sums) == loss);
                ck_assert(seg_loss(kind, d2, x, OP_LABELS_U8(y8), n, c, h, w, incl, 0.5f,
                                   sums) == loss);
                ck_assert_int_eq(memcmp(d, d2, nx * sizeof(float)), 0);
                kernels_set_threads(2);
                memset(d2, 0, nx * sizeof(float));
                ck_assert(seg_loss(kind, d2, x, OP_LABELS_I32(y), n, c, h, w, incl, 0.5f,
                                   sums) == loss);
                ck_assert_int_eq(memcmp(d, d2, nx * sizeof(float)), 0);
                kernels_set_threads(1);
                free(x); free(d); free(d2); free(y); free(y8); free(sums); free(f.x);
            }
}
END_TEST

/* Gradients against central differences of the double references. */
START_TEST(test_seg_losses_gradients_fd)
{
    static const int shapes[][4] = {{2, 2, 3, 3}, {2, 3, 4, 3}, {1, 5, 3, 4}};
    kt_rng r;
    kt_rng_init(&r, 42);
    for (int kind = 0; kind < 2; kind++)
        for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
            for (int incl = 0; incl < 2; incl++) {
                int n = shapes[s][0], c = shapes[s][1], h = shapes[s][2], w = shapes[s][3];
                size_t hw = (size_t)h * w, nx = (size_t)n * c * hw;
                float *x = kt_falloc(nx), *d = kt_falloc(nx);
                int32_t *y = malloc(sizeof(int32_t) * n * hw);
                double *sums = kt_dalloc((size_t)n * OP_SSCE_DICE_SUMS(c));
                seg_case(&r, x, y, n, c, (int)hw);
                float scale = 0.25f;
                seg_loss(kind, d, x, OP_LABELS_I32(y), n, c, h, w, incl, scale, sums);
                for (size_t i = 0; i < nx; i++)
                    d[i] /= scale;
                struct seg_ref f = {n, c, h, w, incl, kt_dalloc(nx), y};
                kt_to_double(f.x, x, nx);
                double *g = kt_dalloc(nx);
                kt_fd_grad(g, f.x, nx, kind == 0 ? ssce_dice_ref : multilabel_bce_ref, &f, 1e-5);
                double e = kt_relerr(d, g, nx);
                ck_assert_msg(e < 1e-4, "kind %d (%d %d %d %d) incl %d: %g", kind, n, c, h, w,
                              incl, e);
                free(x); free(d); free(y); free(sums); free(f.x); free(g);
            }
}
END_TEST

START_TEST(test_seg_losses_bad_label)
{
    const float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    double sums[OP_SSCE_DICE_SUMS(2)];
    for (int kind = 0; kind < 2; kind++) {
        int32_t y[4] = {0, 1, 2, 0};
        float d[8] = {9, 9, 9, 9, 9, 9, 9, 9};
        ck_assert(isnan(seg_loss(kind, d, x, OP_LABELS_I32(y), 1, 2, 2, 2, false, 1.0f, sums)));
        for (int i = 0; i < 8; i++)
            ck_assert_float_eq(d[i], 0.0f);
        y[2] = -1;
        ck_assert(isnan(seg_loss(kind, NULL, x, OP_LABELS_I32(y), 1, 2, 2, 2, true, 1.0f, sums)));
        const uint8_t y8[4] = {0, 1, 1, 2};
        ck_assert(isnan(seg_loss(kind, d, x, OP_LABELS_U8(y8), 1, 2, 2, 2, false, 1.0f, sums)));
    }
}
END_TEST

/* A fake op_reduce for stripes computed one after another on one thread:
 * in the first round each stripe's sums are recorded and the sum fails
 * (the loss returns NAN at once); in the second each stripe's sums are
 * replaced by the totals of the recorded ones, added in stripe order. */
struct stripe_red {
    int part, replay;
    size_t count;
    double *rec[3];
    double *total;
};

static int stripe_red_sum(void *ctx, double *v, size_t count)
{
    struct stripe_red *s = ctx;
    if (!s->replay) {
        s->count = count;
        s->rec[s->part] = malloc(count * sizeof(double));
        memcpy(s->rec[s->part], v, count * sizeof(double));
        return -EAGAIN;
    }
    ck_assert_uint_eq(count, s->count);
    memcpy(v, s->total, count * sizeof(double));
    return 0;
}

/* The samples cut into `parts` stripes of rows (rows[p] each): every
 * stripe's loss is the whole samples', and the stripes' gradients make
 * the whole's. */
static void check_ssce_stripes(kt_rng *r, int n, int c, int h, int w, const int *rows, int parts,
                               bool incl, bool bad)
{
    size_t hw = (size_t)h * w, nx = (size_t)n * c * hw, S = OP_SSCE_DICE_SUMS(c);
    float *x = kt_falloc(nx), *d = kt_falloc(nx), *ds = kt_falloc(nx);
    int32_t *y = malloc(sizeof(int32_t) * n * hw);
    double *sums = kt_dalloc((size_t)n * S);
    seg_case(r, x, y, n, c, (int)hw);
    if (bad) /* in the last stripe only */
        y[(size_t)n * hw - 1] = c;
    float scale = 0.5f;
    double whole = op_ssce_dice(d, x, OP_LABELS_I32(y), n, c, h, w, incl, scale, sums);
    struct stripe_red red = {0};
    op_reduce rd = {stripe_red_sum, &red};
    float *sx[3], *sd[3];
    int32_t *sy[3];
    for (int p = 0, r0 = 0; p < parts; r0 += rows[p], p++) {
        size_t shw = (size_t)rows[p] * w;
        sx[p] = kt_falloc((size_t)n * c * shw);
        sd[p] = kt_falloc((size_t)n * c * shw);
        sy[p] = malloc(sizeof(int32_t) * n * shw);
        for (int i = 0; i < n; i++) {
            for (int k = 0; k < c; k++)
                memcpy(sx[p] + ((size_t)i * c + k) * shw, x + ((size_t)i * c + k) * hw + (size_t)r0 * w,
                       shw * sizeof(float));
            memcpy(sy[p] + (size_t)i * shw, y + (size_t)i * hw + (size_t)r0 * w,
                   shw * sizeof(int32_t));
        }
    }
    for (int p = 0; p < parts; p++) {
        red.part = p;
        ck_assert(isnan(op_ssce_dice_parts(sd[p], sx[p], OP_LABELS_I32(sy[p]), n, c, rows[p], w,
                                           incl, scale, &rd, sums)));
    }
    red.total = kt_dalloc(red.count);
    for (size_t k = 0; k < red.count; k++)
        for (int p = 0; p < parts; p++)
            red.total[k] += red.rec[p][k];
    red.replay = 1;
    for (int p = 0, r0 = 0; p < parts; r0 += rows[p], p++) {
        memset(sd[p], 0x7f, (size_t)n * c * rows[p] * w * sizeof(float));
        double loss = op_ssce_dice_parts(sd[p], sx[p], OP_LABELS_I32(sy[p]), n, c, rows[p], w,
                                         incl, scale, &rd, sums);
        if (bad) {
            ck_assert(isnan(whole) && isnan(loss));
        } else {
            ck_assert_msg(fabs(loss - whole) <= 1e-12 * fabs(whole), "stripe %d of %d: %.15g, "
                          "whole %.15g", p, parts, loss, whole);
        }
        size_t shw = (size_t)rows[p] * w;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < c; k++)
                memcpy(ds + ((size_t)i * c + k) * hw + (size_t)r0 * w,
                       sd[p] + ((size_t)i * c + k) * shw, shw * sizeof(float));
    }
    ck_assert_msg(kt_relerr_ff(ds, d, nx) < 1e-6, "stripes' gradient %g from the whole's",
                  kt_relerr_ff(ds, d, nx));
    if (bad)
        for (size_t k = 0; k < nx; k++)
            ck_assert_float_eq(ds[k], 0.0f);
    for (int p = 0; p < parts; p++) {
        free(sx[p]); free(sd[p]); free(sy[p]); free(red.rec[p]);
    }
    free(x); free(d); free(ds); free(y); free(sums); free(red.total);
}

START_TEST(test_ssce_dice_stripes)
{
    kt_rng r;
    kt_rng_init(&r, 43);
    const int two[2] = {3, 4}, three[3] = {2, 3, 2}, even[2] = {4, 4};
    for (int incl = 0; incl < 2; incl++) {
        check_ssce_stripes(&r, 2, 3, 7, 5, two, 2, incl, false);
        check_ssce_stripes(&r, 3, 4, 7, 3, three, 3, incl, false);
        check_ssce_stripes(&r, 1, 2, 8, 6, even, 2, incl, false);
    }
    check_ssce_stripes(&r, 2, 3, 7, 5, three, 3, false, true);
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
    tcase_add_test(tc, test_ssce_dice_hand_values);
    tcase_add_test(tc, test_multilabel_bce_hand_values);
    tcase_add_test(tc, test_seg_losses_reference);
    tcase_add_test(tc, test_seg_losses_gradients_fd);
    tcase_add_test(tc, test_seg_losses_bad_label);
    tcase_add_test(tc, test_ssce_dice_stripes);
    suite_add_tcase(s, tc);
    return kt_run(s);
}
