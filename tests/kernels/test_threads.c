/* The operators split over threads: every split operator on two threads
 * against the same call on one, bit for bit, at sizes above the point
 * where they split; kern_sgemm in each transposition against a double
 * reference, and the small-batch weight gradient's own kernel; the 2x2
 * pooling path with NaNs as the general one treats
 * them; and the subnormal flush the operators' threads run with. Batch
 * and group norm, a dense layer's bias rows and bias gradient, and the
 * per-pixel losses are among the split operators. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "kernels_internal.h"
#include "kt.h"
#include "op_activation.h"
#include "op_dense.h"
#include "op_elementwise.h"
#include "op_loss.h"
#include "op_norm.h"
#include "op_pool.h"

/* Runs `body` on one thread into out1 and on two into out2 (each `n`
 * floats) and checks they are the same bits. */
#define SAME_ON_1_AND_2(n, out1, out2, body)                                       \
    do {                                                                           \
        kernels_set_threads(1);                                                    \
        { float *out = (out1); body; }                                             \
        kernels_set_threads(2);                                                    \
        { float *out = (out2); body; }                                             \
        kernels_set_threads(1);                                                    \
        ck_assert_msg(memcmp((out1), (out2), sizeof(float) * (n)) == 0,            \
                      "%s differs on two threads", #body);                         \
    } while (0)

enum { N = 3, C = 7, H = 96, W = 80, HW = H * W, NX = N * C * HW };

START_TEST(test_activations_split_same)
{
    kt_rng r;
    kt_rng_init(&r, 11);
    float *x = kt_falloc(NX), *dy = kt_falloc(NX), *a = kt_falloc(NX), *b = kt_falloc(NX);
    kt_fill(&r, x, NX, -2, 2);
    kt_fill(&r, dy, NX, -1, 1);
    SAME_ON_1_AND_2(NX, a, b, op_relu_forward(out, x, NX));
    SAME_ON_1_AND_2(NX, a, b, op_relu_backward(out, dy, x, NX));
    SAME_ON_1_AND_2(NX, a, b, op_leaky_relu_forward(out, x, NX, 0.1f));
    SAME_ON_1_AND_2(NX, a, b, op_leaky_relu_backward(out, dy, x, NX, 0.1f));
    SAME_ON_1_AND_2(NX, a, b, op_gelu_forward(out, x, NX));
    SAME_ON_1_AND_2(NX, a, b, op_gelu_backward(out, dy, x, NX));
    SAME_ON_1_AND_2(NX, a, b, op_sigmoid_forward(out, x, NX));
    SAME_ON_1_AND_2(NX, a, b, op_sigmoid_backward(out, dy, x, NX));
    SAME_ON_1_AND_2(NX, a, b, op_tanh_forward(out, x, NX));
    SAME_ON_1_AND_2(NX, a, b, op_tanh_backward(out, dy, x, NX));
    /* and the values: relu's backward passes dy where x > 0 */
    op_relu_backward(a, dy, x, NX);
    for (size_t i = 0; i < NX; i++)
        ck_assert_float_eq(a[i], x[i] > 0 ? dy[i] : 0.0f);
    /* additions (skip connections, gradients added into their buffers) */
    SAME_ON_1_AND_2(NX, a, b, op_add_forward(out, x, dy, NX));
    for (size_t i = 0; i < NX; i++)
        ck_assert_float_eq(a[i], x[i] + dy[i]);
    SAME_ON_1_AND_2(NX, a, b, (memcpy(out, dy, sizeof(float) * NX), op_add_into(out, x, NX)));
    for (size_t i = 0; i < NX; i++)
        ck_assert_float_eq(b[i], dy[i] + x[i]);
    free(x), free(dy), free(a), free(b);
}
END_TEST

/* A dense layer's bias rows and bias gradient, split over rows and
 * columns: the same bits on two threads, every row the bias, and the bias
 * gradient each column's sum down the rows in order. No inputs (in_f 0),
 * so no GEMM runs: its bits may depend on how OpenBLAS's kernels block a
 * thread's share. */
START_TEST(test_dense_bias_split_same)
{
    enum { B = 300, OUT = 1100 };
    kt_rng r;
    kt_rng_init(&r, 13);
    float *b = kt_falloc(OUT), *dy = kt_falloc(B * OUT), *y1 = kt_falloc(B * OUT);
    float *y2 = kt_falloc(B * OUT), *db1 = kt_falloc(OUT), *db2 = kt_falloc(OUT);
    kt_fill(&r, b, OUT, -1, 1);
    kt_fill(&r, dy, B * OUT, -1, 1);
    SAME_ON_1_AND_2(B * OUT, y1, y2, op_dense_forward(out, NULL, NULL, b, B, 0, OUT));
    SAME_ON_1_AND_2(OUT, db1, db2, op_dense_backward(NULL, NULL, out, dy, NULL, NULL, B, 0, OUT));
    for (int i = 0; i < B; i++)
        ck_assert(memcmp(y1 + (size_t)i * OUT, b, OUT * sizeof(float)) == 0);
    for (int o = 0; o < OUT; o++) {
        float s = dy[o];
        for (int i = 1; i < B; i++)
            s += dy[(size_t)i * OUT + o];
        ck_assert_float_eq(db1[o], s);
    }
    free(b), free(dy), free(y1), free(y2), free(db1), free(db2);
}
END_TEST

/* The per-pixel losses, a sample per thread: the gradients and the loss
 * the same bits on two threads as on one. */
START_TEST(test_losses_split_same)
{
    enum { S = 5, PER = 20000, CL = 3 };
    kt_rng r;
    kt_rng_init(&r, 17);
    float *x = kt_falloc(S * CL * PER), *t = kt_falloc(S * PER);
    float *d1 = kt_falloc((2 + CL) * S * PER), *d2 = kt_falloc((2 + CL) * S * PER);
    int32_t *lab = malloc(S * PER * sizeof(int32_t));
    kt_fill(&r, x, S * CL * PER, -4, 4);
    for (int i = 0; i < S * PER; i++) {
        t[i] = (float)(i % 3 == 0);
        lab[i] = i % CL;
    }
    double l[2][3];
    float *d[2] = {d1, d2};
    for (int k = 0; k < 2; k++) {
        kernels_set_threads(k + 1);
        l[k][0] = op_bce_logits(d[k], x, t, S, PER, 0.5f);
        l[k][1] = op_dice_logits(d[k] + S * PER, x, t, S, PER, 1.0f, 0.5f);
        op_labels labels = OP_LABELS_I32(lab);
        l[k][2] = op_softmax_xent_pixels(d[k] + 2 * S * PER, x, labels, S, CL, 100, 200, 0.5f);
    }
    kernels_set_threads(1);
    ck_assert(memcmp(d1, d2, sizeof(float) * (2 + CL) * S * PER) == 0);
    for (int q = 0; q < 3; q++)
        ck_assert_msg(memcmp(&l[0][q], &l[1][q], sizeof(double)) == 0, "loss %d: %.17g and %.17g", q,
                      l[0][q], l[1][q]);
    free(x), free(t), free(d1), free(d2), free(lab);
}
END_TEST

START_TEST(test_pooling_split_same)
{
    kt_rng r;
    kt_rng_init(&r, 12);
    const op_pool2d_params shapes[] = {
        {.n = N, .c = C, .h = H, .w = W, .kh = 2, .kw = 2},
        {.n = N, .c = C, .h = H, .w = W, .kh = 3, .kw = 3, .stride_h = 2, .stride_w = 2,
         .pad_h = 1, .pad_w = 1},
    };
    float *x = kt_falloc(NX), *a = kt_falloc(NX), *b = kt_falloc(NX);
    float *dy = kt_falloc(NX);
    uint8_t *am = malloc(NX);
    kt_fill(&r, x, NX, -2, 2);
    kt_fill(&r, dy, NX, -1, 1);
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        const op_pool2d_params *p = &shapes[s];
        size_t ny = (size_t)N * C * op_pool2d_out_h(p) * op_pool2d_out_w(p);
        SAME_ON_1_AND_2(ny, a, b, op_maxpool2d_forward(out, am, x, p));
        SAME_ON_1_AND_2(NX, a, b, op_maxpool2d_backward(out, dy, am, p));
        SAME_ON_1_AND_2(ny, a, b, op_avgpool2d_forward(out, x, p));
        SAME_ON_1_AND_2(NX, a, b, op_avgpool2d_backward(out, dy, p));
    }
    free(x), free(a), free(b), free(dy), free(am);
}
END_TEST

START_TEST(test_maxpool_2x2_nan)
{
    /* the 2x2 path keeps the first NaN of a window, as the general path
     * (and PyTorch) does; a window without one keeps its first maximum */
    const float x[8] = {1, NAN, 3, 3, NAN, 2, 1, 0};
    op_pool2d_params p = {.n = 1, .c = 1, .h = 2, .w = 4, .kh = 2, .kw = 2};
    float y[2];
    uint8_t am[2];
    op_maxpool2d_forward(y, am, x, &p);
    ck_assert(isnan(y[0]));
    ck_assert_int_eq(am[0], 1);
    ck_assert_float_eq(y[1], 3.0f);
    ck_assert_int_eq(am[1], 0);
    /* the same windows through the general path (a 2x2 window at stride 1
     * on the same rows reads windows 0 and 2 alike) */
    op_pool2d_params q = {.n = 1, .c = 1, .h = 2, .w = 4, .kh = 2, .kw = 2, .stride_h = 1,
                          .stride_w = 1};
    float z[3];
    uint8_t bm[3];
    op_maxpool2d_forward(z, bm, x, &q);
    ck_assert(isnan(z[0]));
    ck_assert_int_eq(bm[0], am[0]);
    ck_assert_float_eq(z[2], y[1]);
    ck_assert_int_eq(bm[2], am[1]);
}
END_TEST

START_TEST(test_norms_split_same)
{
    kt_rng r;
    kt_rng_init(&r, 13);
    float *x = kt_falloc(NX), *dy = kt_falloc(NX), *a = kt_falloc(NX), *b = kt_falloc(NX);
    float g[C], be[C], sm[C], si[C], rm[C], rv[C], dg1[C], dg2[C], db1[C], db2[C];
    kt_fill(&r, x, NX, -2, 3);
    kt_fill(&r, dy, NX, -1, 1);
    kt_fill(&r, g, C, 0.5, 1.5);
    kt_fill(&r, be, C, -1, 1);
    float sm1[C], si1[C], rm1[C], rv1[C];
    for (int t = 1; t <= 2; t++) {
        for (int i = 0; i < C; i++)
            rm[i] = 0, rv[i] = 1;
        kernels_set_threads(t);
        op_batchnorm_forward_train(t == 1 ? a : b, sm, si, rm, rv, x, g, be, N, C, HW, 0.1f,
                                   1e-5f, false);
        if (t == 1) {
            memcpy(sm1, sm, sizeof(sm)), memcpy(si1, si, sizeof(si));
            memcpy(rm1, rm, sizeof(rm)), memcpy(rv1, rv, sizeof(rv));
        }
    }
    kernels_set_threads(1);
    ck_assert(memcmp(a, b, sizeof(float) * NX) == 0);
    ck_assert(memcmp(sm, sm1, sizeof(sm)) == 0 && memcmp(si, si1, sizeof(si)) == 0);
    ck_assert(memcmp(rm, rm1, sizeof(rm)) == 0 && memcmp(rv, rv1, sizeof(rv)) == 0);
    /* the statistics against a double reference */
    for (int ch = 0; ch < C; ch++) {
        double s = 0, q = 0, m = (double)N * HW;
        for (int i = 0; i < N; i++)
            for (int k = 0; k < HW; k++)
                s += x[((size_t)i * C + ch) * HW + k];
        for (int i = 0; i < N; i++)
            for (int k = 0; k < HW; k++) {
                double d = x[((size_t)i * C + ch) * HW + k] - s / m;
                q += d * d;
            }
        ck_assert_double_eq_tol(sm[ch], s / m, 1e-6);
        ck_assert_double_eq_tol(si[ch], 1.0 / sqrt(q / m + 1e-5), 1e-5);
    }
    SAME_ON_1_AND_2(NX, a, b, op_batchnorm_forward_eval(out, x, g, be, rm, rv, N, C, HW, 1e-5f, false));
    SAME_ON_1_AND_2(NX, a, b, op_norm_affine(out, x, sm, si, N, C, HW, false, false));
    /* group norm, one channel a group: (sample, group) items split */
    float gm[N * C], gs[N * C], gm1[N * C], gs1[N * C];
    kernels_set_threads(1);
    op_groupnorm_forward(a, gm1, gs1, x, g, be, N, C, HW, C, 1e-5f, false);
    kernels_set_threads(2);
    op_groupnorm_forward(b, gm, gs, x, g, be, N, C, HW, C, 1e-5f, false);
    ck_assert(memcmp(a, b, sizeof(float) * NX) == 0);
    ck_assert(memcmp(gm, gm1, sizeof(gm)) == 0 && memcmp(gs, gs1, sizeof(gs)) == 0);
    kernels_set_threads(1);
    op_groupnorm_backward(a, dg1, db1, dy, x, g, gm, gs, N, C, HW, C);
    kernels_set_threads(2);
    op_groupnorm_backward(b, dg2, db2, dy, x, g, gm, gs, N, C, HW, C);
    ck_assert(memcmp(a, b, sizeof(float) * NX) == 0);
    ck_assert(memcmp(dg1, dg2, sizeof(dg1)) == 0 && memcmp(db1, db2, sizeof(db1)) == 0);
    kernels_set_threads(1);
    op_batchnorm_backward(a, dg1, db1, dy, x, g, sm, si, N, C, HW, NULL, NULL);
    kernels_set_threads(2);
    op_batchnorm_backward(b, dg2, db2, dy, x, g, sm, si, N, C, HW, NULL, NULL);
    kernels_set_threads(1);
    ck_assert(memcmp(a, b, sizeof(float) * NX) == 0);
    ck_assert(memcmp(dg1, dg2, sizeof(dg1)) == 0 && memcmp(db1, db2, sizeof(db1)) == 0);
    free(x), free(dy), free(a), free(b);
}
END_TEST

START_TEST(test_sgemm_split)
{
    /* every transposition, shapes split by rows (m >= n) and by columns,
     * sizes not multiples of the 16-wide blocks. Not bit for bit against
     * one thread: OpenBLAS's edge kernels may differ from its full ones in
     * the last bit, and a split moves the edges */
    const int shapes[][3] = {{301, 77, 129}, {45, 530, 211}, {1, 4000, 600}};
    kt_rng r;
    kt_rng_init(&r, 14);
    for (size_t s = 0; s < 3; s++) {
        int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                float *A = kt_falloc((size_t)m * k), *B = kt_falloc((size_t)k * n);
                float *c1 = kt_falloc((size_t)m * n), *c2 = kt_falloc((size_t)m * n);
                kt_fill(&r, A, (size_t)m * k, -1, 1);
                kt_fill(&r, B, (size_t)k * n, -1, 1);
                kt_fill(&r, c1, (size_t)m * n, -1, 1);
                memcpy(c2, c1, sizeof(float) * m * n);
                int lda = ta ? m : k, ldb = tb ? k : n;
                double *ref = kt_dalloc((size_t)m * n);
                for (int i = 0; i < m; i++)
                    for (int j = 0; j < n; j++) {
                        double acc = 0.5 * c1[(size_t)i * n + j];
                        for (int q = 0; q < k; q++)
                            acc += 1.5 * (double)(ta ? A[(size_t)q * lda + i] : A[(size_t)i * lda + q]) *
                                   (tb ? B[(size_t)j * ldb + q] : B[(size_t)q * ldb + j]);
                        ref[(size_t)i * n + j] = acc;
                    }
                kernels_set_threads(1);
                kern_sgemm(ta, tb, m, n, k, 1.5f, A, lda, B, ldb, 0.5f, c1, n);
                kernels_set_threads(2);
                kern_sgemm(ta, tb, m, n, k, 1.5f, A, lda, B, ldb, 0.5f, c2, n);
                kernels_set_threads(1);
                ck_assert_msg(kt_relerr(c2, ref, (size_t)m * n) < 1e-5,
                              "%dx%dx%d ta=%d tb=%d: %g", m, n, k, ta, tb,
                              kt_relerr(c2, ref, (size_t)m * n));
                ck_assert(kt_relerr(c1, ref, (size_t)m * n) < 1e-5);
                free(A), free(B), free(c1), free(c2), free(ref);
            }
    }
}
END_TEST

/* kern_sgemm's two libraries for its large GEMMs (oneDNN's sgemm, where
 * the build has it, and OpenBLAS's blocks): each against a double
 * reference in every transposition, with strides wider than the matrices,
 * beta 0.5 (C read) and 0 (C's NaNs never read); neither writes C's
 * padding, and a second call gives the first one's bits. B transposed
 * under 128 rows of C stays on OpenBLAS: the same bits either way. */
START_TEST(test_sgemm_libraries)
{
    const int shapes[][3] = {{300, 517, 129}, {45, 1030, 211}};
    kt_rng r;
    kt_rng_init(&r, 16);
    kernels_set_threads(2);
    for (size_t s = 0; s < 2; s++)
        for (int t = 0; t < 4; t++)
            for (int bz = 0; bz < 2; bz++) {
                int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2], ta = t >> 1, tb = t & 1;
                int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 7;
                float beta = bz ? 0.0f : 0.5f;
                size_t na = (size_t)(ta ? k : m) * lda, nb = (size_t)(tb ? n : k) * ldb;
                size_t nc = (size_t)m * ldc;
                float *A = kt_falloc(na), *B = kt_falloc(nb), *c0 = kt_falloc(nc);
                float *c[3] = {kt_falloc(nc), kt_falloc(nc), kt_falloc(nc)};
                kt_fill(&r, A, na, -1, 1);
                kt_fill(&r, B, nb, -1, 1);
                kt_fill(&r, c0, nc, -1, 1);
                for (size_t i = 0; i < nc; i++)
                    if (bz || (int)(i % (size_t)ldc) >= n)
                        c0[i] = NAN;
                double *ref = kt_dalloc((size_t)m * n);
                for (int i = 0; i < m; i++)
                    for (int j = 0; j < n; j++) {
                        double acc = bz ? 0.0 : 0.5 * c0[(size_t)i * ldc + j];
                        for (int q = 0; q < k; q++)
                            acc += 1.5 * (double)(ta ? A[(size_t)q * lda + i] : A[(size_t)i * lda + q]) *
                                   (tb ? B[(size_t)j * ldb + q] : B[(size_t)q * ldb + j]);
                        ref[(size_t)i * n + j] = acc;
                    }
                /* c[0] and c[1] on the default library, c[2] on OpenBLAS */
                for (int v = 0; v < 3; v++) {
                    memcpy(c[v], c0, sizeof(float) * nc);
                    kern__sgemm_set_onednn(v < 2);
                    kern_sgemm(ta, tb, m, n, k, 1.5f, A, lda, B, ldb, beta, c[v], ldc);
                }
                kern__sgemm_set_onednn(1);
                float *packed = kt_falloc((size_t)m * n);
                for (int v = 0; v < 3; v += 2) {
                    for (int i = 0; i < m; i++)
                        for (int j = 0; j < ldc; j++) {
                            float x = c[v][(size_t)i * ldc + j];
                            if (j < n)
                                packed[(size_t)i * n + j] = x;
                            else
                                ck_assert_msg(isnan(x), "%dx%dx%d ta=%d tb=%d: padding written",
                                              m, n, k, ta, tb);
                        }
                    double err = kt_relerr(packed, ref, (size_t)m * n);
                    ck_assert_msg(err < 1e-5, "%dx%dx%d ta=%d tb=%d beta %g, %s: relative error %g",
                                  m, n, k, ta, tb, beta, v ? "OpenBLAS" : "default", err);
                }
                ck_assert_msg(memcmp(c[0], c[1], sizeof(float) * nc) == 0,
                              "%dx%dx%d ta=%d tb=%d: a second call differs", m, n, k, ta, tb);
                if (!ta && tb && m < 128)
                    ck_assert_msg(memcmp(c[0], c[2], sizeof(float) * nc) == 0,
                                  "%dx%dx%d: B transposed under 128 rows left OpenBLAS", m, n, k);
                free(packed), free(A), free(B), free(c0), free(ref);
                free(c[0]), free(c[1]), free(c[2]);
            }
    kernels_set_threads(1);
}
END_TEST

/* The weight gradient on a small batch (C = alpha A^T B, k <= 64, beta 0:
 * gemm_small_k.c where the processor has AVX-512): against a double
 * reference, with row and column tails, two spans of B, strides wider than
 * the matrices, C aligned to a cache line or not; C's old values (NaN) are
 * not read, its padding is not written, and two threads give one thread's
 * bits (a row is always one thread's). */
START_TEST(test_sgemm_small_k)
{
    const int shapes[][3] = {{301, 1000, 32}, {37, 2100, 1}, {130, 777, 64}};
    const float alphas[] = {1.0f, 0.75f};
    kt_rng r;
    kt_rng_init(&r, 15);
    for (size_t s = 0; s < 3; s++)
        for (int al = 0; al < 2; al++)
            for (int off = 0; off < 2; off++) {
                int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
                int lda = m + 3, ldb = n + 5, ldc = n + 7;
                float alpha = alphas[al];
                float *A = kt_falloc((size_t)k * lda), *B = kt_falloc((size_t)k * ldb);
                float *c1 = kt_falloc((size_t)m * ldc + 16), *c2 = kt_falloc((size_t)m * ldc + 16);
                kt_fill(&r, A, (size_t)k * lda, -1, 1);
                kt_fill(&r, B, (size_t)k * ldb, -1, 1);
                for (size_t i = 0; i < (size_t)m * ldc + 16; i++)
                    c1[i] = c2[i] = NAN;
                double *ref = kt_dalloc((size_t)m * n);
                for (int i = 0; i < m; i++)
                    for (int j = 0; j < n; j++) {
                        double acc = 0;
                        for (int q = 0; q < k; q++)
                            acc += (double)A[(size_t)q * lda + i] * B[(size_t)q * ldb + j];
                        ref[(size_t)i * n + j] = alpha * acc;
                    }
                kernels_set_threads(1);
                kern_sgemm(1, 0, m, n, k, alpha, A, lda, B, ldb, 0.0f, c1 + off, ldc);
                kernels_set_threads(2);
                kern_sgemm(1, 0, m, n, k, alpha, A, lda, B, ldb, 0.0f, c2 + off, ldc);
                kernels_set_threads(1);
                float *packed = kt_falloc((size_t)m * n);
                for (int i = 0; i < m; i++)
                    for (int j = 0; j < ldc; j++) {
                        float v = c2[off + (size_t)i * ldc + j];
                        if (j < n)
                            packed[(size_t)i * n + j] = v;
                        else
                            ck_assert_msg(isnan(v), "%dx%dx%d: padding (%d, %d) written", m, n, k, i, j);
                    }
                double err = kt_relerr(packed, ref, (size_t)m * n);
                ck_assert_msg(err < 1e-6, "%dx%dx%d alpha %g offset %d: relative error %g", m, n, k,
                              alpha, off, err);
                free(packed);
                ck_assert_msg(memcmp(c1, c2, sizeof(float) * ((size_t)m * ldc + 16)) == 0,
                              "%dx%dx%d: two threads differ from one", m, n, k);
                free(A), free(B), free(c1), free(c2), free(ref);
            }
}
END_TEST

START_TEST(test_subnormals_flushed)
{
    /* the operators' threads read subnormals as zero and write zero for
     * them: a GEMM over subnormal operands gives exact zeros (and does
     * not take a microcode assist on every one) */
    kernels_set_threads(2);
    enum { M = 64, K = 64, NN = 512 };
    float *A = kt_falloc(M * K), *B = kt_falloc(K * NN), *c = kt_falloc(M * NN);
    for (int i = 0; i < M * K; i++)
        A[i] = 1e-39f * (1 + i % 3);
    for (int i = 0; i < K * NN; i++)
        B[i] = 1.0f;
    kern_sgemm(0, 0, M, NN, K, 1.0f, A, K, B, NN, 0.0f, c, NN);
    for (int i = 0; i < M * NN; i++)
        ck_assert_float_eq(c[i], 0.0f);
    volatile float tiny = 1e-30f;
    ck_assert_float_eq(tiny * tiny, 0.0f); /* flushed, not 1e-60's subnormal */
    kernels_set_threads(1);
    free(A), free(B), free(c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("threads");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_activations_split_same);
    tcase_add_test(tc, test_dense_bias_split_same);
    tcase_add_test(tc, test_losses_split_same);
    tcase_add_test(tc, test_pooling_split_same);
    tcase_add_test(tc, test_maxpool_2x2_nan);
    tcase_add_test(tc, test_norms_split_same);
    tcase_add_test(tc, test_sgemm_split);
    tcase_add_test(tc, test_sgemm_libraries);
    tcase_add_test(tc, test_sgemm_small_k);
    tcase_add_test(tc, test_subnormals_flushed);
    suite_add_tcase(s, tc);
    return kt_run(s);
}
