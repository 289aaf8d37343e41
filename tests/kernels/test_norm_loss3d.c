/* The norms and losses over volumes. They take the spatial size as one
 * number (hw, per) or as two whose product is all they use (h * w), so a
 * (N, C, D, H, W) tensor goes through them unchanged with hw = D*H*W (h =
 * D*H, w = W for the losses that take two). These tests hold them to
 * direct double references written over (n, c, d, h, w) indices, on
 * volumes of odd sizes: batch norm (training and evaluation, the running
 * statistics), group norm and instance norm (groups = C), the pixel
 * softmax cross entropy, ssce_dice, bce, dice, bce_dice as the executor
 * composes it, and multilabel_bce; the gradients against central
 * differences; two threads giving one thread's bits. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "kt.h"
#include "op_loss.h"
#include "op_norm.h"

/* A volume's shape. */
typedef struct vshape {
    int n, c, d, h, w;
} vshape;

static size_t vol(const vshape *s)
{
    return (size_t)s->d * s->h * s->w;
}

static size_t at(const vshape *s, int i, int c, int z, int y, int x)
{
    return ((((size_t)i * s->c + c) * s->d + z) * s->h + y) * s->w + x;
}

/* ---- norms ---- */

/* A normalisation in double: every (sample, group) (batch norm: every
 * channel over the batch) standardised with its biased variance, then
 * gamma and beta per channel. */
struct norm_ref {
    vshape s;
    int groups;      /* 0: batch norm */
    double *x, *gamma, *beta, *y;
    double eps;
    const float *r;  /* the loss's weights on y */
};

static double norm_loss(void *ctx)
{
    struct norm_ref *f = ctx;
    const vshape *s = &f->s;
    int sets = f->groups ? s->n * f->groups : s->c;
    for (int g = 0; g < sets; g++) {
        double sum = 0, sq = 0, m = 0;
        /* the voxels of set g: (i, c, z, y, x) over its samples and channels */
        for (int pass = 0; pass < 3; pass++)
            for (int i = 0; i < s->n; i++)
                for (int c = 0; c < s->c; c++) {
                    int in = f->groups ? i == g / f->groups &&
                                             c / (s->c / f->groups) == g % f->groups
                                       : c == g;
                    for (int z = 0; in && z < s->d; z++)
                        for (int y = 0; y < s->h; y++)
                            for (int x = 0; x < s->w; x++) {
                                size_t j = at(s, i, c, z, y, x);
                                if (pass == 0) {
                                    sum += f->x[j];
                                    m++;
                                } else if (pass == 1) {
                                    sq += (f->x[j] - sum / m) * (f->x[j] - sum / m);
                                } else {
                                    f->y[j] = (f->x[j] - sum / m) / sqrt(sq / m + f->eps) *
                                                  f->gamma[c] + f->beta[c];
                                }
                            }
                }
    }
    return kt_dot(f->y, f->r, (size_t)s->n * s->c * vol(s));
}

/* Batch norm (groups 0) or group norm on shape s: forward against the
 * reference, the batch norm's saved and running statistics, the backward
 * pass against central differences. */
static void norm_case(const vshape *s, int groups, kt_rng *r)
{
    size_t nx = (size_t)s->n * s->c * vol(s), hw = vol(s);
    int sets = groups ? s->n * groups : s->c;
    float *x = kt_falloc(nx), *y = kt_falloc(nx), *R = kt_falloc(nx), *dx = kt_falloc(nx);
    float *gamma = kt_falloc(s->c), *beta = kt_falloc(s->c), *dg = kt_falloc(s->c),
          *db = kt_falloc(s->c);
    float *mean = kt_falloc(sets), *invstd = kt_falloc(sets);
    float *rm = kt_falloc(s->c), *rv = kt_falloc(s->c);
    kt_fill(r, x, nx, -2, 3);
    kt_fill(r, R, nx, -1, 1);
    kt_fill(r, gamma, s->c, 0.5, 1.5);
    kt_fill(r, beta, s->c, -0.5, 0.5);
    for (int c = 0; c < s->c; c++)
        rm[c] = 0.25f, rv[c] = 2.0f;
    float eps = 1e-5f, momentum = 0.1f;
    if (groups)
        op_groupnorm_forward(y, mean, invstd, x, gamma, beta, s->n, s->c, (int)hw, groups, eps,
                             false);
    else
        op_batchnorm_forward_train(y, mean, invstd, rm, rv, x, gamma, beta, s->n, s->c, (int)hw,
                                   momentum, eps, false);
    struct norm_ref f = {*s, groups, kt_dalloc(nx), kt_dalloc(s->c), kt_dalloc(s->c),
                         kt_dalloc(nx), eps, R};
    kt_to_double(f.x, x, nx);
    kt_to_double(f.gamma, gamma, s->c);
    kt_to_double(f.beta, beta, s->c);
    norm_loss(&f);
    ck_assert_msg(kt_relerr(y, f.y, nx) < 1e-5, "groups %d forward %g", groups,
                  kt_relerr(y, f.y, nx));
    if (!groups) {
        /* the statistics of each channel over the batch's volumes, the
         * running variance unbiased over m = n*d*h*w */
        double m = (double)s->n * hw;
        for (int c = 0; c < s->c; c++) {
            double sum = 0, sq = 0;
            for (int i = 0; i < s->n; i++)
                for (size_t j = 0; j < hw; j++)
                    sum += x[((size_t)i * s->c + c) * hw + j];
            for (int i = 0; i < s->n; i++)
                for (size_t j = 0; j < hw; j++) {
                    double v = x[((size_t)i * s->c + c) * hw + j] - sum / m;
                    sq += v * v;
                }
            ck_assert_double_eq_tol(mean[c], sum / m, 1e-6);
            ck_assert_double_eq_tol(invstd[c], 1 / sqrt(sq / m + eps), 1e-5 / sqrt(sq / m + eps));
            ck_assert_double_eq_tol(rm[c], 0.9 * 0.25 + 0.1 * sum / m, 1e-6);
            ck_assert_double_eq_tol(rv[c], 0.9 * 2.0 + 0.1 * sq / (m - 1), 1e-5);
        }
        /* evaluation mode with those running statistics */
        float *ye = kt_falloc(nx);
        op_batchnorm_forward_eval(ye, x, gamma, beta, rm, rv, s->n, s->c, (int)hw, eps, false);
        for (int i = 0; i < s->n; i++)
            for (int c = 0; c < s->c; c++)
                for (size_t j = 0; j < hw; j++) {
                    size_t q = ((size_t)i * s->c + c) * hw + j;
                    double want = (x[q] - rm[c]) / sqrt((double)rv[c] + eps) * gamma[c] + beta[c];
                    ck_assert_double_eq_tol(ye[q], want, 1e-5 * (fabs(want) + 1));
                }
        free(ye);
    }
    if (groups)
        op_groupnorm_backward(dx, dg, db, R, x, gamma, mean, invstd, s->n, s->c, (int)hw, groups);
    else
        op_batchnorm_backward(dx, dg, db, R, x, gamma, mean, invstd, s->n, s->c, (int)hw, NULL,
                              NULL);
    double *g = kt_dalloc(nx);
    kt_fd_grad(g, f.x, nx, norm_loss, &f, 1e-5);
    ck_assert_msg(kt_relerr(dx, g, nx) < 1e-3, "groups %d dx %g", groups, kt_relerr(dx, g, nx));
    kt_fd_grad(g, f.gamma, s->c, norm_loss, &f, 1e-5);
    ck_assert_msg(kt_relerr(dg, g, s->c) < 1e-3, "groups %d dgamma %g", groups,
                  kt_relerr(dg, g, s->c));
    kt_fd_grad(g, f.beta, s->c, norm_loss, &f, 1e-5);
    ck_assert_msg(kt_relerr(db, g, s->c) < 1e-3, "groups %d dbeta %g", groups,
                  kt_relerr(db, g, s->c));
    free(g); free(f.x); free(f.gamma); free(f.beta); free(f.y);
    free(x); free(y); free(R); free(dx); free(gamma); free(beta); free(dg); free(db);
    free(mean); free(invstd); free(rm); free(rv);
}

START_TEST(test_batchnorm_volumes)
{
    kt_rng r;
    kt_rng_init(&r, 351);
    vshape s[] = {{2, 3, 3, 4, 5}, {1, 5, 5, 3, 7}, {3, 2, 1, 6, 2}};
    for (size_t i = 0; i < sizeof(s) / sizeof(s[0]); i++)
        norm_case(&s[i], 0, &r);
}
END_TEST

START_TEST(test_groupnorm_volumes)
{
    kt_rng r;
    kt_rng_init(&r, 352);
    vshape s[] = {{2, 6, 3, 4, 5}, {1, 4, 5, 3, 7}};
    for (size_t i = 0; i < sizeof(s) / sizeof(s[0]); i++) {
        norm_case(&s[i], 2, &r);
        norm_case(&s[i], s[i].c, &r); /* instance norm */
        norm_case(&s[i], 1, &r);      /* one group: layer norm over (c, d, h, w) */
    }
}
END_TEST

/* ---- losses ---- */

/* A segmentation loss in double over volumes: logits x (n, c, d, h, w),
 * labels y (n, d, h, w), or sigmoid targets t (n, 1, d, h, w). */
struct loss_ref {
    int kind;        /* one of the enum below */
    vshape s;
    bool include_background;
    double *x;
    const int32_t *y;
    const float *t;
};

enum { XENT, SSCE_DICE, MULTILABEL_BCE, BCE, DICE, BCE_DICE };

#define DICE_EPS 1.0 /* the executor's (exec.c) */

static double softmax_at(const struct loss_ref *f, int i, int k, int z, int y, int x)
{
    double zsum = 0;
    for (int c = 0; c < f->s.c; c++)
        zsum += exp(f->x[at(&f->s, i, c, z, y, x)]);
    return exp(f->x[at(&f->s, i, k, z, y, x)]) / zsum;
}

static double loss_ref(void *ctx)
{
    const struct loss_ref *f = ctx;
    const vshape *s = &f->s;
    double loss = 0, V = (double)vol(s);
    for (int i = 0; i < s->n; i++) {
        double ce = 0, bce = 0, inter = 0, sum = 0;
        double di[16] = {0}, ts[16] = {0}, ps[16] = {0};
        for (int z = 0; z < s->d; z++)
            for (int y = 0; y < s->h; y++)
                for (int x = 0; x < s->w; x++) {
                    size_t v = ((size_t)i * s->d + z) * s->h * s->w + (size_t)y * s->w + x;
                    if (f->kind >= BCE) {
                        double l = f->x[at(s, i, 0, z, y, x)], t = f->t[v];
                        double p = 1 / (1 + exp(-l));
                        bce += -(t * log(p) + (1 - t) * log(1 - p));
                        inter += p * t;
                        sum += p + t;
                        continue;
                    }
                    int lab = f->y[v];
                    for (int k = 0; k < s->c; k++) {
                        double p = softmax_at(f, i, k, z, y, x), t = lab == k;
                        if (k == lab)
                            ce += -log(p);
                        double l = f->x[at(s, i, k, z, y, x)], q = 1 / (1 + exp(-l));
                        bce += -(t * log(q) + (1 - t) * log(1 - q));
                        di[k] += p * t;
                        ts[k] += t;
                        ps[k] += p;
                    }
                }
        switch (f->kind) {
        case XENT:
            loss += ce / V;
            break;
        case SSCE_DICE: {
            double mean = 0;
            int k0 = f->include_background ? 0 : 1;
            for (int k = k0; k < s->c; k++)
                mean += 2 * di[k] / (ts[k] + ps[k] + 1e-6);
            mean /= s->c - k0;
            loss += 0.5 * ce / V + 0.5 * (1 - mean);
            break;
        }
        case MULTILABEL_BCE:
            loss += bce / (V * s->c);
            break;
        case BCE:
            loss += bce / V;
            break;
        case DICE:
            loss += 1 - (2 * inter + DICE_EPS) / (sum + DICE_EPS);
            break;
        default:
            loss += bce / V + 1 - (2 * inter + DICE_EPS) / (sum + DICE_EPS);
        }
    }
    return loss;
}

/* The kernels' loss of kind over the volume, its gradient into d (scale
 * 1): D*H*W as the losses' h * w (h = D*H, w = W) or per. */
static double loss_kernel(int kind, float *d, const float *x, const int32_t *y, const float *t,
                          const vshape *s, bool incl)
{
    int h = s->d * s->h, w = s->w, per = (int)vol(s);
    op_labels lab = OP_LABELS_I32(y);
    double sums[64 * 16];
    switch (kind) {
    case XENT:
        return op_softmax_xent_pixels(d, x, lab, s->n, s->c, h, w, 1.0f);
    case SSCE_DICE:
        return op_ssce_dice(d, x, lab, s->n, s->c, h, w, incl, 1.0f, sums);
    case MULTILABEL_BCE:
        return op_multilabel_bce(d, x, lab, s->n, s->c, h, w, 1.0f);
    case BCE:
        return op_bce_logits(d, x, t, s->n, per, 1.0f);
    case DICE:
        return op_dice_logits(d, x, t, s->n, per, (float)DICE_EPS, 1.0f);
    default: {
        /* bce_dice: the two losses' sums and gradients added (exec.c) */
        size_t nx = (size_t)s->n * per;
        float *d2 = kt_falloc(nx);
        double l = op_bce_logits(d, x, t, s->n, per, 1.0f) +
                   op_dice_logits(d2, x, t, s->n, per, (float)DICE_EPS, 1.0f);
        for (size_t j = 0; j < nx; j++)
            d[j] += d2[j];
        free(d2);
        return l;
    }
    }
}

START_TEST(test_losses_volumes)
{
    static const char *const names[] = {"pixel xent", "ssce_dice", "multilabel_bce",
                                        "bce", "dice", "bce_dice"};
    kt_rng r;
    kt_rng_init(&r, 353);
    for (int kind = XENT; kind <= BCE_DICE; kind++)
        for (int v = 0; v < 2; v++) {
            vshape s = v ? (vshape){1, 4, 5, 3, 7} : (vshape){2, 3, 3, 4, 5};
            if (kind >= BCE)
                s.c = 1;
            size_t nv = (size_t)s.n * vol(&s), nx = nv * s.c;
            float *x = kt_falloc(nx), *d = kt_falloc(nx), *t = kt_falloc(nv);
            int32_t *y = calloc(nv, sizeof(int32_t));
            uint8_t *y8 = calloc(nv, 1);
            kt_fill(&r, x, nx, -3, 3);
            kt_fill(&r, t, nv, 0, 1);
            for (size_t j = 0; j < nv; j++) {
                y[j] = kt_int(&r, 0, s.c - 1);
                y8[j] = (uint8_t)y[j];
                if (kind == BCE || kind == BCE_DICE)
                    t[j] = j % 3 ? (float)(y[j] & 1) : t[j]; /* hard and soft targets */
            }
            bool incl = v == 0;
            double loss = loss_kernel(kind, d, x, y, t, &s, incl);
            struct loss_ref f = {kind, s, incl, kt_dalloc(nx), y, t};
            kt_to_double(f.x, x, nx);
            double want = loss_ref(&f);
            ck_assert_msg(fabs(loss - want) <= 1e-6 * fabs(want) + 1e-9, "%s: %.9g against %.9g",
                          names[kind], loss, want);
            double *g = kt_dalloc(nx);
            kt_fd_grad(g, f.x, nx, loss_ref, &f, 1e-5);
            ck_assert_msg(kt_relerr(d, g, nx) < 1e-3, "%s dlogits %g", names[kind],
                          kt_relerr(d, g, nx));
            if (kind <= MULTILABEL_BCE) { /* byte labels: the same bits */
                float *d8 = kt_falloc(nx);
                double sums[64 * 16];
                double l8 = kind == XENT ? op_softmax_xent_pixels(d8, x, OP_LABELS_U8(y8), s.n, s.c,
                                                                  s.d * s.h, s.w, 1.0f)
                            : kind == SSCE_DICE
                                ? op_ssce_dice(d8, x, OP_LABELS_U8(y8), s.n, s.c, s.d * s.h, s.w,
                                               incl, 1.0f, sums)
                                : op_multilabel_bce(d8, x, OP_LABELS_U8(y8), s.n, s.c, s.d * s.h,
                                                    s.w, 1.0f);
                ck_assert(l8 == loss);
                ck_assert(memcmp(d8, d, nx * sizeof(float)) == 0);
                free(d8);
            }
            free(x); free(d); free(t); free(y); free(y8); free(f.x); free(g);
        }
}
END_TEST

/* A volume of a 3D U-Net's first level on two threads: one thread's bits
 * (each channel, group or sample whole on one thread). */
START_TEST(test_threads)
{
    vshape s = {2, 8, 16, 16, 17};
    size_t hw = vol(&s), nx = (size_t)s.n * s.c * hw, nv = (size_t)s.n * hw;
    kt_rng r;
    kt_rng_init(&r, 354);
    float *x = kt_falloc(nx), *dy = kt_falloc(nx), *gam = kt_falloc(s.c), *bet = kt_falloc(s.c);
    int32_t *lab = calloc(nv, sizeof(int32_t));
    kt_fill(&r, x, nx, -2, 2);
    kt_fill(&r, dy, nx, -1, 1);
    kt_fill(&r, gam, s.c, 0.5, 1.5);
    kt_fill(&r, bet, s.c, -0.5, 0.5);
    for (size_t j = 0; j < nv; j++)
        lab[j] = kt_int(&r, 0, s.c - 1);
    float *out[2][5];
    double loss[2];
    for (int t = 0; t < 2; t++) {
        kernels_set_threads(t + 1);
        for (int k = 0; k < 5; k++)
            out[t][k] = kt_falloc(nx);
        float m[64], is[64], rm[8] = {0}, rv[8] = {1, 1, 1, 1, 1, 1, 1, 1}, dg[8], db[8];
        op_batchnorm_forward_train(out[t][0], m, is, rm, rv, x, gam, bet, s.n, s.c, (int)hw, 0.1f,
                                   1e-5f, false);
        op_batchnorm_backward(out[t][1], dg, db, dy, x, gam, m, is, s.n, s.c, (int)hw, NULL, NULL);
        op_groupnorm_forward(out[t][2], m, is, x, gam, bet, s.n, s.c, (int)hw, s.c, 1e-5f, false);
        op_groupnorm_backward(out[t][3], dg, db, dy, x, gam, m, is, s.n, s.c, (int)hw, s.c);
        double sums[2 * (3 * 8 + 1)];
        loss[t] = op_ssce_dice(out[t][4], x, OP_LABELS_I32(lab), s.n, s.c, s.d * s.h, s.w, false,
                               0.5f, sums);
    }
    kernels_set_threads(1);
    ck_assert(loss[0] == loss[1]);
    for (int k = 0; k < 5; k++) {
        ck_assert_msg(memcmp(out[0][k], out[1][k], nx * sizeof(float)) == 0, "output %d", k);
        free(out[0][k]);
        free(out[1][k]);
    }
    free(x); free(dy); free(gam); free(bet); free(lab);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("norm_loss3d");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_batchnorm_volumes);
    tcase_add_test(tc, test_groupnorm_volumes);
    tcase_add_test(tc, test_losses_volumes);
    tcase_add_test(tc, test_threads);
    suite_add_tcase(s, tc);
    return kt_run(s);
}
