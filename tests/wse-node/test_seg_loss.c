/* The Model Zoo's U-Net losses in the executor: a tiny convolutional
 * model trains with ssce_dice (background in and out: [model]
 * include_background) and with multilabel_bce, its loss finite and
 * falling, the executor's loss the kernel's; and evaluation's mean IoU
 * leaves out the classes of [model] eval_ignore_classes, checked on
 * outputs made to order. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "kernels.h"
#include "op_loss.h"
#include "rng.h"
#include "toml.h"

/* input [3, H, W] -> conv 3x3 (8) -> relu -> conv 1x1 (C) */
static model *tiny_model(const char *loss, int classes, bool include_background, int h, int w,
                         toml_value **root)
{
    char text[1024], err[256];
    snprintf(text, sizeof(text),
             "[model]\ninput_shape = [3, %d, %d]\nloss = \"%s\"\ninclude_background = %s\n"
             "[[model.layers]]\nname = \"c1\"\ntype = \"conv2d\"\nfilters = 8\nkernel_size = 3\n"
             "padding = 1\n"
             "[[model.layers]]\nname = \"r1\"\ntype = \"relu\"\n"
             "[[model.layers]]\nname = \"c2\"\ntype = \"conv2d\"\nfilters = %d\nkernel_size = 1\n",
             h, w, loss, include_background ? "true" : "false", classes);
    *root = toml_parse(text, strlen(text), "seg.toml", err, sizeof(err));
    ck_assert_msg(*root != NULL, "%s", err);
    model *m = model_compile_document(*root, err, sizeof(err));
    ck_assert_msg(m != NULL, "%s", err);
    return m;
}

static float **tensors(const model *m, bool random)
{
    float **t = calloc((size_t)m->ntensors, sizeof(float *));
    for (int i = 0; i < m->ntensors; i++) {
        const model_tensor *mt = &m->tensors[i];
        t[i] = calloc(mt->elems, sizeof(float));
        double fan_in = (double)mt->elems / (double)mt->dims[0];
        for (uint64_t k = 0; random && k < mt->elems; k++)
            t[i][k] = (float)((2.0 * rng_uniform(3, (uint64_t)i, k) - 1.0) * sqrt(3.0 / fan_in));
    }
    return t;
}

static void free_tensors(const model *m, float **t)
{
    for (int i = 0; i < m->ntensors; i++)
        free(t[i]);
    free(t);
}

/* A batch the model can learn: each pixel's class is the input channel
 * that is largest there (modulo the classes), the channels smooth waves
 * plus noise. */
static void make_batch(int n, int classes, int h, int w, float *x, int32_t *y)
{
    for (int s = 0; s < n; s++)
        for (int i = 0; i < h; i++)
            for (int j = 0; j < w; j++) {
                int best = 0;
                double v[3];
                for (int k = 0; k < 3; k++) {
                    v[k] = sin(0.5 * (k + 1) * i + 0.7 * s + k) * cos(0.4 * j - k) +
                           0.3 * rng_uniform(9, (uint64_t)s, ((uint64_t)k * h + i) * w + j);
                    x[(((size_t)s * 3 + k) * h + i) * w + j] = (float)v[k];
                    if (v[k] > v[best])
                        best = k;
                }
                y[((size_t)s * h + i) * w + j] = best % classes;
            }
}

/* Trains `steps` steps of SGD on one batch; returns the first and last
 * mean losses, every one finite, and checks the executor's loss against
 * the kernel's on the last layer's output. */
static void train(const char *loss, int classes, bool include_background, int steps,
                  double *first, double *last)
{
    enum { N = 4, H = 12, W = 12 };
    toml_value *root;
    model *m = tiny_model(loss, classes, include_background, H, W, &root);
    ck_assert(m->include_background == include_background);
    float **w = tensors(m, true), **g = tensors(m, false);
    exec e;
    char err[256];
    ck_assert_msg(exec_init(&e, m, N, 1, w, g, err, sizeof(err)) == 0, "%s", err);
    float *x = malloc(sizeof(float) * N * 3 * H * W);
    int32_t *y = malloc(sizeof(int32_t) * N * H * W);
    make_batch(N, classes, H, W, x, y);
    size_t nout = (size_t)N * classes * H * W;
    float *logits = malloc(nout * sizeof(float));
    double *sums = malloc(sizeof(double) * N * OP_SSCE_DICE_SUMS(classes));
    for (int step = 0; step < steps; step++) {
        for (int i = 0; i < m->nlayers; i++)
            exec_forward(&e, i, x, step, true);
        memcpy(logits, exec_output(&e, m->nlayers - 1, x), nout * sizeof(float));
        double l = exec_loss(&e, x, y, 1.0f / N);
        ck_assert_msg(isfinite(l), "%s step %d: loss %g", loss, step, l);
        double k = strcmp(loss, "ssce_dice") == 0
                       ? op_ssce_dice(NULL, logits, OP_LABELS_I32(y), N, classes, H, W,
                                      include_background, 1.0f, sums)
                       : op_multilabel_bce(NULL, logits, OP_LABELS_I32(y), N, classes, H, W, 1.0f);
        ck_assert_msg(l == k, "%s step %d: the executor's loss %.17g, the kernel's %.17g", loss,
                      step, l, k);
        for (int i = m->nlayers - 1; i >= 0; i--)
            exec_backward(&e, i, x, step);
        for (int i = 0; i < m->ntensors; i++)
            for (uint64_t q = 0; q < m->tensors[i].elems; q++)
                w[i][q] -= 0.5f * g[i][q];
        if (step == 0)
            *first = l / N;
        *last = l / N;
    }
    printf("%s (%d classes%s): mean loss %.6f at the first step, %.6f after %d\n", loss, classes,
           strcmp(loss, "ssce_dice") ? "" : include_background ? ", background in" : ", background out",
           *first, *last, steps);
    exec_deinit(&e);
    free(x);
    free(y);
    free(logits);
    free(sums);
    free_tensors(m, w);
    free_tensors(m, g);
    model_free(m);
    toml_free(root);
}

START_TEST(ssce_dice_trains)
{
    for (int incl = 0; incl < 2; incl++) {
        double first, last;
        train("ssce_dice", 3, incl, 25, &first, &last);
        ck_assert_msg(last < 0.8 * first, "background %d: %g then %g", incl, first, last);
    }
}
END_TEST

START_TEST(multilabel_bce_trains)
{
    double first, last;
    train("multilabel_bce", 3, false, 25, &first, &last);
    ck_assert_msg(last < 0.8 * first, "%g then %g", first, last);
}
END_TEST

/* The mean IoU as the coordinator makes it from the counts: over the
 * classes from 1 whose union is not empty. */
static double mean_iou(const exec_metrics *mt)
{
    double sum = 0;
    int k = 0;
    for (uint32_t c = 1; c < mt->classes; c++)
        if (mt->uni[c]) {
            sum += (double)mt->inter[c] / (double)mt->uni[c];
            k++;
        }
    return k ? sum / k : 0;
}

/* One 4x4 sample, 3 classes, predicted (the argmax of the logits) and
 * labelled (truth, pred):
 *   (0,0) (0,0) (0,1) (0,2)
 *   (1,1) (1,1) (1,1) (1,0)
 *   (2,2) (2,2) (2,1) (2,1)
 *   (0,0) (1,1) (2,1) (1,1)
 * intersections [3 5 2], predicted [4 9 3], labelled [5 6 5], unions
 * [6 10 6]: mean IoU over classes 1 and 2 (5/10 + 2/6)/2 = 0.4166667;
 * class 2 ignored, 5/10; class 1 ignored, 2/6. The logits come out of a
 * 1x1 convolution with identity weights: the input. */
static void eval_case(const char *loss, const char *ignore, exec_metrics *mt)
{
    static const int truth[16] = {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 0, 1, 2, 1};
    static const int pred[16] = {0, 0, 1, 2, 1, 1, 1, 0, 2, 2, 1, 1, 0, 1, 1, 1};
    char text[512], err[256];
    snprintf(text, sizeof(text),
             "[model]\ninput_shape = [3, 4, 4]\nloss = \"%s\"\neval_ignore_classes = %s\n"
             "[[model.layers]]\nname = \"c\"\ntype = \"conv2d\"\nfilters = 3\nkernel_size = 1\n"
             "bias = false\n",
             loss, ignore);
    toml_value *root = toml_parse(text, strlen(text), "eval.toml", err, sizeof(err));
    ck_assert_msg(root != NULL, "%s", err);
    model *m = model_compile_document(root, err, sizeof(err));
    ck_assert_msg(m != NULL, "%s", err);
    float **w = tensors(m, false), **g = tensors(m, false);
    for (int k = 0; k < 3; k++)
        w[0][k * 3 + k] = 1.0f; /* weight (3, 3, 1, 1) */
    exec e;
    ck_assert_msg(exec_init(&e, m, 1, 1, w, g, err, sizeof(err)) == 0, "%s", err);
    float x[3 * 16];
    int32_t y[16];
    for (int i = 0; i < 16; i++) {
        y[i] = truth[i];
        for (int k = 0; k < 3; k++)
            x[k * 16 + i] = pred[i] == k ? 2.0f : -1.0f;
    }
    memset(mt, 0, sizeof(*mt));
    for (int i = 0; i < m->nlayers; i++)
        exec_forward(&e, i, x, 0, false);
    ck_assert_int_eq(exec_eval(&e, x, y, mt), 0);
    ck_assert(isfinite(mt->loss));
    ck_assert_uint_eq(mt->samples, 1);
    ck_assert_uint_eq(mt->correct, 10); /* pixel accuracy counts every class */
    ck_assert_uint_eq(mt->classes, 3);
    /* a label out of range fails the evaluation */
    y[5] = 3;
    exec_metrics bad = {0};
    ck_assert_int_eq(exec_eval(&e, x, y, &bad), -EINVAL);
    exec_deinit(&e);
    free_tensors(m, w);
    free_tensors(m, g);
    model_free(m);
    toml_free(root);
}

START_TEST(eval_iou_leaves_out_ignored_classes)
{
    static const char *losses[] = {"pixel_softmax_cross_entropy", "ssce_dice", "multilabel_bce"};
    const uint64_t inter[3] = {3, 5, 2}, uni[3] = {6, 10, 6};
    for (int l = 0; l < 3; l++) {
        exec_metrics mt;
        eval_case(losses[l], "[]", &mt);
        for (int c = 0; c < 3; c++) {
            ck_assert_uint_eq(mt.inter[c], inter[c]);
            ck_assert_uint_eq(mt.uni[c], uni[c]);
        }
        ck_assert_double_eq_tol(mean_iou(&mt), (5.0 / 10 + 2.0 / 6) / 2, 1e-12);
        double all = mean_iou(&mt);
        /* class 2 left out: its counts empty, the others' as they were */
        eval_case(losses[l], "[2]", &mt);
        ck_assert_uint_eq(mt.inter[2], 0);
        ck_assert_uint_eq(mt.uni[2], 0);
        for (int c = 0; c < 2; c++) {
            ck_assert_uint_eq(mt.inter[c], inter[c]);
            ck_assert_uint_eq(mt.uni[c], uni[c]);
        }
        ck_assert_double_eq_tol(mean_iou(&mt), 0.5, 1e-12);
        /* class 1 left out (and a bit beyond the classes, which changes nothing) */
        eval_case(losses[l], "[1, 40]", &mt);
        ck_assert_uint_eq(mt.uni[1], 0);
        ck_assert_uint_eq(mt.uni[2], 6);
        ck_assert_double_eq_tol(mean_iou(&mt), 2.0 / 6, 1e-12);
        printf("%s: mean IoU %.6f, %.6f without class 2, %.6f without class 1\n", losses[l], all,
               0.5, mean_iou(&mt));
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("seg-loss");
    TCase *t = tcase_create("exec");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, ssce_dice_trains);
    tcase_add_test(t, multilabel_bce_trains);
    tcase_add_test(t, eval_iou_leaves_out_ignored_classes);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
