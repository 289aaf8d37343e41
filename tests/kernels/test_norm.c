/* Batch and group normalisation: running statistics and evaluation mode by
 * hand, and gradients against central differences of double references. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kt.h"
#include "kernels.h"
#include "op_activation.h"
#include "op_norm.h"

START_TEST(test_batchnorm_hand_values)
{
    /* n = 2, c = 1, hw = 2: values 1 2 3 6. mean 3, biased variance
     * (4 + 1 + 0 + 9)/4 = 3.5, unbiased 14/3 = 4.6666667.
     * momentum 0.1 from running (0, 1): mean 0.3, var 0.9 + 0.4666667 =
     * 1.3666667. gamma 2, beta 1, eps 0: y = 2 (x - 3)/sqrt(3.5) + 1,
     * sqrt(3.5) = 1.8708287: y(1) = -1.1380899, y(6) = 4.2071349. */
    const float x[4] = {1, 2, 3, 6}, gamma = 2, beta = 1;
    float y[4], mean, invstd, rm = 0, rv = 1;
    op_batchnorm_forward_train(y, &mean, &invstd, &rm, &rv, x, &gamma, &beta,
                               2, 1, 2, 0.1f, 0.0f, false);
    ck_assert_float_eq_tol(mean, 3.0f, 1e-6f);
    ck_assert_float_eq_tol(invstd, 1.0f / 1.8708287f, 1e-6f);
    ck_assert_float_eq_tol(rm, 0.3f, 1e-6f);
    ck_assert_float_eq_tol(rv, 1.3666667f, 1e-6f);
    ck_assert_float_eq_tol(y[0], -1.1380899f, 1e-5f);
    ck_assert_float_eq_tol(y[3], 4.2071349f, 1e-5f);
    /* eval with running mean 0.3, var 1.3666667 (eps 0):
     * y(1) = 2 * 0.7/1.1690452 + 1 = 2.1975585 */
    op_batchnorm_forward_eval(y, x, &gamma, &beta, &rm, &rv, 2, 1, 2, 0.0f, false);
    ck_assert_float_eq_tol(y[0], 2.1975585f, 1e-5f);
}
END_TEST

struct norm_fd {
    int n, c, hw, groups;    /* groups 0: batch norm */
    double eps;
    double *x, *gamma, *beta, *y;
    const float *r;
};

static double norm_fd_loss(void *ctx)
{
    struct norm_fd *f = ctx;
    int n = f->n, c = f->c, hw = f->hw;
    if (f->groups == 0) {
        for (int ch = 0; ch < c; ch++) {
            double s = 0, sq = 0;
            for (int i = 0; i < n; i++)
                for (int j = 0; j < hw; j++)
                    s += f->x[(i * c + ch) * hw + j];
            double mean = s / (n * hw);
            for (int i = 0; i < n; i++)
                for (int j = 0; j < hw; j++) {
                    double d = f->x[(i * c + ch) * hw + j] - mean;
                    sq += d * d;
                }
            double inv = 1.0 / sqrt(sq / (n * hw) + f->eps);
            for (int i = 0; i < n; i++)
                for (int j = 0; j < hw; j++) {
                    size_t k = ((size_t)i * c + ch) * hw + j;
                    f->y[k] = (f->x[k] - mean) * inv * f->gamma[ch] + f->beta[ch];
                }
        }
    } else {
        int cg = c / f->groups;
        for (int i = 0; i < n; i++)
            for (int g = 0; g < f->groups; g++) {
                size_t off = ((size_t)i * c + g * cg) * hw, m = (size_t)cg * hw;
                double s = 0, sq = 0;
                for (size_t j = 0; j < m; j++)
                    s += f->x[off + j];
                double mean = s / m;
                for (size_t j = 0; j < m; j++)
                    sq += (f->x[off + j] - mean) * (f->x[off + j] - mean);
                double inv = 1.0 / sqrt(sq / m + f->eps);
                for (size_t j = 0; j < m; j++) {
                    int ch = g * cg + (int)(j / hw);
                    f->y[off + j] = (f->x[off + j] - mean) * inv * f->gamma[ch] + f->beta[ch];
                }
            }
    }
    return kt_dot(f->y, f->r, (size_t)n * c * hw);
}

static void check_norm(int n, int c, int hw, int groups, kt_rng *r)
{
    size_t nx = (size_t)n * c * hw;
    int ns = groups ? n * groups : c;
    float *x = kt_falloc(nx), *y = kt_falloc(nx), *R = kt_falloc(nx);
    float *gamma = kt_falloc(c), *beta = kt_falloc(c), *dx = kt_falloc(nx);
    float *dg = kt_falloc(c), *db = kt_falloc(c);
    float *mean = kt_falloc(ns), *invstd = kt_falloc(ns);
    float eps = 1e-5f;
    kt_fill(r, x, nx, -2, 3);
    kt_fill(r, R, nx, -1, 1);
    kt_fill(r, gamma, c, 0.5, 1.5);
    kt_fill(r, beta, c, -1, 1);
    if (groups) {
        op_groupnorm_forward(y, mean, invstd, x, gamma, beta, n, c, hw, groups, eps, false);
        op_groupnorm_backward(dx, dg, db, R, x, gamma, mean, invstd, n, c, hw, groups);
    } else {
        op_batchnorm_forward_train(y, mean, invstd, NULL, NULL, x, gamma, beta,
                                   n, c, hw, 0.1f, eps, false);
        op_batchnorm_backward(dx, dg, db, R, x, gamma, mean, invstd, n, c, hw, NULL, NULL);
    }
    struct norm_fd f = {n, c, hw, groups, eps, kt_dalloc(nx), kt_dalloc(c),
                        kt_dalloc(c), kt_dalloc(nx), R};
    kt_to_double(f.x, x, nx);
    kt_to_double(f.gamma, gamma, c);
    kt_to_double(f.beta, beta, c);
    norm_fd_loss(&f);
    ck_assert_msg(kt_relerr(y, f.y, nx) < 1e-5, "g%d forward", groups);
    double *g = kt_dalloc(nx);
    kt_fd_grad(g, f.x, nx, norm_fd_loss, &f, 1e-4);
    ck_assert_msg(kt_relerr(dx, g, nx) < 1e-3, "g%d dx %g", groups, kt_relerr(dx, g, nx));
    kt_fd_grad(g, f.gamma, c, norm_fd_loss, &f, 1e-4);
    ck_assert_msg(kt_relerr(dg, g, c) < 1e-3, "g%d dgamma", groups);
    kt_fd_grad(g, f.beta, c, norm_fd_loss, &f, 1e-4);
    ck_assert_msg(kt_relerr(db, g, c) < 1e-3, "g%d dbeta", groups);
    { /* in place (the memory plan's): the input's gradient over the output's */
        float *inplace = kt_falloc(nx), *dg2 = kt_falloc(c), *db2 = kt_falloc(c);
        memcpy(inplace, R, nx * sizeof(float));
        if (groups)
            op_groupnorm_backward(inplace, dg2, db2, inplace, x, gamma, mean, invstd, n, c, hw,
                                  groups);
        else
            op_batchnorm_backward(inplace, dg2, db2, inplace, x, gamma, mean, invstd, n, c, hw,
                                  NULL, NULL);
        ck_assert(memcmp(inplace, dx, nx * sizeof(float)) == 0);
        ck_assert(memcmp(dg2, dg, c * sizeof(float)) == 0 && memcmp(db2, db, c * sizeof(float)) == 0);
        free(inplace), free(dg2), free(db2);
    }
    /* NULL gamma/beta mean 1 and 0 */
    float *y2 = kt_falloc(nx);
    for (int i = 0; i < c; i++) {
        gamma[i] = 1;
        beta[i] = 0;
    }
    if (groups) {
        op_groupnorm_forward(y, mean, invstd, x, gamma, beta, n, c, hw, groups, eps, false);
        op_groupnorm_forward(y2, mean, invstd, x, NULL, NULL, n, c, hw, groups, eps, false);
    } else {
        op_batchnorm_forward_train(y, mean, invstd, NULL, NULL, x, gamma, beta, n, c, hw, 0.1f, eps,
                                   false);
        op_batchnorm_forward_train(y2, mean, invstd, NULL, NULL, x, NULL, NULL, n, c, hw, 0.1f, eps,
                                   false);
    }
    ck_assert_double_lt(kt_relerr_ff(y2, y, nx), 1e-6);
    free(x); free(y); free(y2); free(R); free(gamma); free(beta); free(dx);
    free(dg); free(db); free(mean); free(invstd); free(f.x); free(f.gamma);
    free(f.beta); free(f.y); free(g);
}

START_TEST(test_batchnorm_gradients_fd)
{
    kt_rng r;
    kt_rng_init(&r, 51);
    check_norm(3, 4, 7, 0, &r);
    check_norm(1, 2, 9, 0, &r);
    check_norm(5, 3, 1, 0, &r);
}
END_TEST

START_TEST(test_groupnorm_gradients_fd)
{
    kt_rng r;
    kt_rng_init(&r, 52);
    check_norm(2, 6, 5, 3, &r);   /* 2 channels per group */
    check_norm(2, 4, 9, 1, &r);   /* one group: layer norm over c, h, w */
    check_norm(3, 5, 4, 5, &r);   /* a group per channel: instance norm */
}
END_TEST


/* An input and output gradient, a scale, shift and running statistics */
static void norm_case_fill(kt_rng *r, float *x, float *dy, size_t nx, float *g, float *b,
                           float *rm, float *rv, int c)
{
    kt_fill(r, x, nx, -2, 3);
    kt_fill(r, dy, nx, -1, 1);
    kt_fill(r, g, c, 0.5, 1.5);
    kt_fill(r, b, c, -0.5, 0.5);
    kt_fill(r, rm, c, -0.2, 0.2);
    kt_fill(r, rv, c, 0.5, 2);
}

/* A batch norm with the relu that follows it fused (model_fuse) against
 * the two layers one after the other: the same bits in every pass, on one
 * thread and two, whole and as a stripe (no reduction partner). */
static void check_fused(int n, int c, int hw, int threads, kt_rng *r)
{
    size_t nx = (size_t)n * c * hw;
    float *x = kt_falloc(nx), *dy = kt_falloc(nx), *ybn = kt_falloc(nx), *ref = kt_falloc(nx);
    float *got = kt_falloc(nx), *dz = kt_falloc(nx), *dxr = kt_falloc(nx), *dxf = kt_falloc(nx);
    float *g = kt_falloc(c), *b = kt_falloc(c), *rm = kt_falloc(c), *rv = kt_falloc(c);
    float *sm = kt_falloc(c), *si = kt_falloc(c), *sm2 = kt_falloc(c), *si2 = kt_falloc(c);
    float *ra = kt_falloc(c), *rb = kt_falloc(c), *dg1 = kt_falloc(c), *db1 = kt_falloc(c);
    float *dg2 = kt_falloc(c), *db2 = kt_falloc(c);
    double *red = malloc((2 * (size_t)c + 1) * sizeof(double));
    norm_case_fill(r, x, dy, nx, g, b, rm, rv, c);
    kernels_set_threads(threads);
    /* training forward */
    op_batchnorm_forward_train(ybn, sm, si, NULL, NULL, x, g, b, n, c, hw, 0.1f, 1e-5f, false);
    op_relu_forward(ref, ybn, nx);
    op_batchnorm_forward_train(got, sm2, si2, NULL, NULL, x, g, b, n, c, hw, 0.1f, 1e-5f, true);
    ck_assert(memcmp(ref, got, nx * sizeof(float)) == 0);
    ck_assert(memcmp(sm, sm2, (size_t)c * sizeof(float)) == 0);
    size_t zeros = 0;
    for (size_t i = 0; i < nx; i++)
        zeros += got[i] == 0.0f;
    ck_assert_msg(zeros > nx / 10 && zeros < nx - nx / 10, "the relu cut %zu of %zu", zeros, nx);
    /* the same again from the saved scale and shift (a recomputation) */
    for (int k = 0; k < c; k++)
        op_norm_coeffs(si[k], sm[k], g[k], b[k], &ra[k], &rb[k]);
    memset(got, 0, nx * sizeof(float));
    op_norm_affine(got, x, ra, rb, n, c, hw, false, true);
    ck_assert(memcmp(ref, got, nx * sizeof(float)) == 0);
    /* a stripe alone: the same statistics and output */
    memset(got, 0, nx * sizeof(float));
    ck_assert_int_eq(op_batchnorm_forward_train_parts(got, sm2, si2, NULL, NULL, x, g, b, n, c, hw,
                                                      0.1f, 1e-5f, true, NULL, red),
                     0);
    ck_assert(memcmp(ref, got, nx * sizeof(float)) == 0);
    /* evaluation */
    op_batchnorm_forward_eval(ybn, x, g, b, rm, rv, n, c, hw, 1e-5f, false);
    op_relu_forward(ref, ybn, nx);
    op_batchnorm_forward_eval(got, x, g, b, rm, rv, n, c, hw, 1e-5f, true);
    ck_assert(memcmp(ref, got, nx * sizeof(float)) == 0);
    /* backward: the relu's, then the norm's, against the fused one */
    op_batchnorm_forward_train(ybn, sm, si, NULL, NULL, x, g, b, n, c, hw, 0.1f, 1e-5f, false);
    op_relu_backward(dz, dy, ybn, nx);
    op_batchnorm_backward(dxr, dg1, db1, dz, x, g, sm, si, n, c, hw, NULL, NULL);
    op_batchnorm_backward(dxf, dg2, db2, dy, x, g, sm, si, n, c, hw, ra, rb);
    ck_assert(memcmp(dxr, dxf, nx * sizeof(float)) == 0);
    ck_assert(memcmp(dg1, dg2, (size_t)c * sizeof(float)) == 0);
    ck_assert(memcmp(db1, db2, (size_t)c * sizeof(float)) == 0);
    /* unmasked it would differ: the mask is what makes these equal */
    op_batchnorm_backward(dxf, dg2, db2, dy, x, g, sm, si, n, c, hw, NULL, NULL);
    ck_assert(memcmp(dxr, dxf, nx * sizeof(float)) != 0);
    ck_assert_int_eq(op_batchnorm_backward_parts(dxf, dg2, db2, dy, x, g, sm, si, n, c, hw, ra, rb,
                                                 NULL, red),
                     0);
    ck_assert(memcmp(dxr, dxf, nx * sizeof(float)) == 0);
    ck_assert(memcmp(dg1, dg2, (size_t)c * sizeof(float)) == 0);
    kernels_set_threads(1);
    free(x), free(dy), free(ybn), free(ref), free(got), free(dz), free(dxr), free(dxf);
    free(g), free(b), free(rm), free(rv), free(sm), free(si), free(sm2), free(si2);
    free(ra), free(rb), free(dg1), free(db1), free(dg2), free(db2), free(red);
}

START_TEST(test_batchnorm_relu_fused)
{
    kt_rng r;
    kt_rng_init(&r, 53);
    check_fused(3, 4, 37, 1, &r);     /* a tail shorter than the lanes */
    check_fused(2, 8, 4096, 2, &r);   /* channels over two threads */
    check_fused(1, 3, 5, 2, &r);
}
END_TEST

static void same_bits(const float *a, const float *b, size_t count, const char *what, int n, int c,
                      int hw, int threads, int B)
{
    ck_assert_msg(memcmp(a, b, count * sizeof(float)) == 0,
                  "%s differs on aBcd%db (n %d, c %d, hw %d, %d threads)", what, B, n, c, hw,
                  threads);
}

/* The passes over tensors in aBcd16b or aBcd8b (B, between blocked
 * convolutions) give the plain passes' bits: every output, statistic and
 * gradient, with and without a fused relu, on one thread and two. */
static void check_blocked_in(int n, int c, int hw, int threads, bool relu, kt_rng *r, int B)
{
    size_t nx = (size_t)n * c * hw;
    float *x = kt_falloc(nx), *xb = kt_falloc(nx), *dy = kt_falloc(nx), *dyb = kt_falloc(nx);
    float *ref = kt_falloc(nx), *got = kt_falloc(nx), *gotb = kt_falloc(nx);
    float *g = kt_falloc(c), *b = kt_falloc(c), *rm = kt_falloc(c), *rv = kt_falloc(c);
    float *rm2 = kt_falloc(c), *rv2 = kt_falloc(c), *sm = kt_falloc(c), *si = kt_falloc(c);
    float *sm2 = kt_falloc(c), *si2 = kt_falloc(c), *ra = kt_falloc(c), *rb = kt_falloc(c);
    float *dg1 = kt_falloc(c), *db1 = kt_falloc(c), *dg2 = kt_falloc(c), *db2 = kt_falloc(c);
    norm_case_fill(r, x, dy, nx, g, b, rm, rv, c);
    memcpy(rm2, rm, (size_t)c * sizeof(float));
    memcpy(rv2, rv, (size_t)c * sizeof(float));
    kt_blk(xb, x, n, c, hw, true, B);
    kt_blk(dyb, dy, n, c, hw, true, B);
    kernels_set_threads(threads);
#define SAME_BLOCKED(what)                                                                         \
    do {                                                                                           \
        kt_blk(gotb, got, n, c, hw, false, B);                                                     \
        same_bits(ref, got, nx, what, n, c, hw, threads, B);                                       \
    } while (0)
    op_batchnorm_forward_train(ref, sm, si, rm, rv, x, g, b, n, c, hw, 0.1f, 1e-5f, relu);
    op_batchnorm_forward_train_blk(gotb, sm2, si2, rm2, rv2, xb, g, b, n, c, hw, 0.1f, 1e-5f,
                                   relu, B);
    SAME_BLOCKED("the training output");
    same_bits(sm, sm2, c, "the mean", n, c, hw, threads, B);
    same_bits(si, si2, c, "the inverse deviation", n, c, hw, threads, B);
    same_bits(rm, rm2, c, "the running mean", n, c, hw, threads, B);
    same_bits(rv, rv2, c, "the running variance", n, c, hw, threads, B);
    for (int k = 0; k < c; k++)
        op_norm_coeffs(si[k], sm[k], g[k], b[k], &ra[k], &rb[k]);
    memset(gotb, 0, nx * sizeof(float));
    op_norm_affine_blk(gotb, xb, ra, rb, n, c, hw, relu, B);
    SAME_BLOCKED("the output made again");
    op_batchnorm_forward_eval(ref, x, g, b, rm, rv, n, c, hw, 1e-5f, relu);
    op_batchnorm_forward_eval_blk(gotb, xb, g, b, rm, rv, n, c, hw, 1e-5f, relu, B);
    SAME_BLOCKED("the evaluation output");
    const float *ma = relu ? ra : NULL, *mb = relu ? rb : NULL;
    op_batchnorm_backward(ref, dg1, db1, dy, x, g, sm, si, n, c, hw, ma, mb);
    op_batchnorm_backward_blk(gotb, dg2, db2, dyb, xb, g, sm, si, n, c, hw, ma, mb, B);
    SAME_BLOCKED("the input gradient");
    same_bits(dg1, dg2, c, "the scale's gradient", n, c, hw, threads, B);
    same_bits(db1, db2, c, "the shift's gradient", n, c, hw, threads, B);
    memcpy(gotb, dyb, nx * sizeof(float)); /* in place, as the memory plan has it */
    op_batchnorm_backward_blk(gotb, dg2, db2, gotb, xb, g, sm, si, n, c, hw, ma, mb, B);
    SAME_BLOCKED("the input gradient in place");
#undef SAME_BLOCKED
    kernels_set_threads(1);
    free(x), free(xb), free(dy), free(dyb), free(ref), free(got), free(gotb), free(g), free(b);
    free(rm), free(rv), free(rm2), free(rv2), free(sm), free(si), free(sm2), free(si2);
    free(ra), free(rb), free(dg1), free(db1), free(dg2), free(db2);
}

/* in both blocked layouts (the norm's passes are the same C on any
 * processor) */
static void check_blocked(int n, int c, int hw, int threads, bool relu, kt_rng *r)
{
    check_blocked_in(n, c, hw, threads, relu, r, 16);
    check_blocked_in(n, c, hw, threads, relu, r, 8);
}

START_TEST(test_batchnorm_blocked)
{
    kt_rng r;
    kt_rng_init(&r, 71);
    check_blocked(3, 16, 49, 1, true, &r);    /* 7 x 7 */
    check_blocked(2, 32, 64, 2, false, &r);
    check_blocked(2, 32, 64, 2, true, &r);
    check_blocked(1, 48, 5, 2, true, &r);     /* an odd number of blocks */
    check_blocked(2, 64, 1100, 2, true, &r);  /* blocks over two threads, chunks of pixels */
    check_blocked(4, 16, 4096, 2, false, &r); /* one block: one thread */
    check_blocked_in(2, 8, 300, 2, true, &r, 8);   /* one block of 8: one thread */
    check_blocked_in(2, 24, 1100, 2, true, &r, 8); /* three blocks of 8 on two threads */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("norm");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_batchnorm_hand_values);
    tcase_add_test(tc, test_batchnorm_gradients_fd);
    tcase_add_test(tc, test_groupnorm_gradients_fd);
    tcase_add_test(tc, test_batchnorm_relu_fused);
    tcase_add_test(tc, test_batchnorm_blocked);
    suite_add_tcase(s, tc);
    return kt_run(s);
}
