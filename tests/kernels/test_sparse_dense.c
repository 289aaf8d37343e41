/* Sparse dense layers (op_sparse_dense): each instruction set's path
 * against a double-precision reference and against the dense layer on the
 * same weights with their zeros, at densities from 1% to 60%, on odd
 * shapes, with empty rows and columns, at density 0; the compressed
 * format's orders; the cost model's choice; and the forward pass over a
 * mostly-zero input.
 *
 * Tolerances: every output is a float32 sum of t products (t kept weights
 * of a row, or the batch), summed in some order of float32 additions and
 * fused multiply-adds. Any such order is within t * u * sum |terms| of
 * the exact sum (u = 2^-24, the recursive-summation bound, which blocked
 * and pairwise orders only tighten), so each element is held to
 * (t + 2) * u * sum |terms| computed in double, plus 1e-30 for exact
 * zeros: a wrong index or a dropped term is far outside it. Against the
 * dense GEMM (another order again), the two bounds add. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "kernels_internal.h"
#include "kt.h"
#include "op_dense.h"
#include "op_sparse_dense.h"

static const int shapes[][3] = {
    /* n, in_f, out_f: single elements, odd widths, more than one panel of
     * columns (256) and of rows, a batch past the 256 of one chunk */
    {1, 1, 1}, {5, 7, 3}, {33, 65, 17}, {64, 300, 70}, {9, 513, 260}, {300, 40, 33},
};
static const double densities[] = {0.0, 0.01, 0.05, 0.10, 0.25, 0.60};

#define U 5.9604644775390625e-08 /* 2^-24 */

/* Check's ck_assert reports every passing check through its pipe, which
 * millions of per-element checks make slow: only failures go to it. */
#define EXPECT(cond, ...)                                                                         \
    do {                                                                                          \
        if (!(cond))                                                                              \
            ck_abort_msg(__VA_ARGS__);                                                            \
    } while (0)

/* the mask: kept with probability d, and (empty) every row r % 5 == 2 and
 * every column c % 7 == 3 pruned entirely */
static void make_mask(kt_rng *r, uint8_t *mask, int out_f, int in_f, double d, int empty)
{
    for (int o = 0; o < out_f; o++)
        for (int k = 0; k < in_f; k++)
            mask[(size_t)o * in_f + k] =
                kt_uniform(r, 0, 1) < d && !(empty && (o % 5 == 2 || k % 7 == 3));
}

/* |got - want| within the bound of t terms whose magnitudes sum to abs */
static int within(double got, double want, double abs, double t)
{
    return fabs(got - want) <= (t + 2.0) * U * abs + 1e-30;
}

static void check_shape(kt_rng *r, int n, int in_f, int out_f, double d, int empty, int isa)
{
    size_t nw = (size_t)out_f * in_f;
    float *x = kt_falloc((size_t)n * in_f), *w = kt_falloc(nw), *b = kt_falloc(out_f);
    float *dy = kt_falloc((size_t)n * out_f), *y = kt_falloc((size_t)n * out_f);
    float *yd = kt_falloc((size_t)n * out_f), *dx = kt_falloc((size_t)n * in_f);
    float *dxd = kt_falloc((size_t)n * in_f), *dwd = kt_falloc(nw), *db = kt_falloc(out_f);
    float *dbd = kt_falloc(out_f), *dkept = kt_falloc(nw + 1);
    uint8_t *mask = malloc(nw);
    kt_fill(r, x, (size_t)n * in_f, -1, 1);
    kt_fill(r, w, nw, -1, 1);
    kt_fill(r, b, out_f, -1, 1);
    kt_fill(r, dy, (size_t)n * out_f, -1, 1);
    make_mask(r, mask, out_f, in_f, d, empty);
    for (size_t i = 0; i < nw; i++)
        if (!mask[i])
            w[i] = 0.0f;
    char err[128];
    sparse_w *sw = sparse_w_new(w, mask, out_f, in_f, err, sizeof(err));
    ck_assert_msg(sw != NULL, "%s", err);
    size_t wsb = op_sparse_dense_workspace(sw, n);
    char *ws = malloc(wsb);
    const char *what = kernels_isa_name((kernels_isa)isa);

    /* forward, against the double sums and the dense layer */
    ck_assert_int_eq(op_sparse_dense_forward(y, x, sw, b, n, ws + 1, wsb - 1), 0);
    op_dense_forward(yd, x, w, b, n, in_f, out_f);
    for (int i = 0; i < n; i++)
        for (int o = 0; o < out_f; o++) {
            double s = b[o], a = fabs(b[o]), t = 1;
            for (int k = 0; k < in_f; k++)
                if (mask[(size_t)o * in_f + k]) {
                    double p = (double)x[(size_t)i * in_f + k] * w[(size_t)o * in_f + k];
                    s += p, a += fabs(p), t++;
                }
            size_t at = (size_t)i * out_f + o;
            EXPECT(within(y[at], s, a, t), "%s %dx%dx%d d %.2f: y[%d][%d] %g, want %g", what,
                          n, in_f, out_f, d, i, o, y[at], s);
            EXPECT(within(y[at], yd[at], 2 * a, in_f + t), "%s: y against dense", what);
        }

    /* backward */
    ck_assert_int_eq(op_sparse_dense_backward(dx, dkept, db, dy, x, sw, n, ws, wsb), 0);
    op_dense_backward(dxd, dwd, dbd, dy, x, w, n, in_f, out_f);
    size_t e = 0;
    for (int o = 0; o < out_f; o++) {
        double sb = 0, ab = 0;
        for (int i = 0; i < n; i++)
            sb += dy[(size_t)i * out_f + o], ab += fabs(dy[(size_t)i * out_f + o]);
        EXPECT(within(db[o], sb, ab, n), "%s: dbias[%d]", what, o);
        for (int k = 0; k < in_f; k++) {
            if (!mask[(size_t)o * in_f + k])
                continue;
            double s = 0, a = 0;
            for (int i = 0; i < n; i++) {
                double p = (double)dy[(size_t)i * out_f + o] * x[(size_t)i * in_f + k];
                s += p, a += fabs(p);
            }
            EXPECT(within(dkept[e], s, a, n), "%s %dx%dx%d d %.2f: dW[%d][%d] %g, want %g",
                          what, n, in_f, out_f, d, o, k, dkept[e], s);
            EXPECT(within(dkept[e], dwd[(size_t)o * in_f + k], 2 * a, 2 * n),
                          "%s: dW against dense", what);
            e++;
        }
    }
    ck_assert_uint_eq(e, sw->nnz);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < in_f; k++) {
            double s = 0, a = 0, t = 0;
            for (int o = 0; o < out_f; o++)
                if (mask[(size_t)o * in_f + k]) {
                    double p = (double)dy[(size_t)i * out_f + o] * w[(size_t)o * in_f + k];
                    s += p, a += fabs(p), t++;
                }
            size_t at = (size_t)i * in_f + k;
            EXPECT(within(dx[at], s, a, t), "%s %dx%dx%d d %.2f: dx[%d][%d] %g, want %g",
                          what, n, in_f, out_f, d, i, k, dx[at], s);
            EXPECT(within(dx[at], dxd[at], 2 * a, out_f + t), "%s: dx against dense",
                          what);
        }

    /* the plain reference functions agree with the same sums */
    op_sparse_dense_forward_ref(yd, x, sw, b, n);
    ck_assert(kt_relerr_ff(y, yd, (size_t)n * out_f) < 1e-5);
    op_sparse_dense_backward_ref(dxd, dwd, dbd, dy, x, sw, n);
    if (sw->nnz)
        ck_assert(kt_relerr_ff(dkept, dwd, sw->nnz) < 1e-5);
    /* and without din or dbias */
    memset(dx, 0x7f, sizeof(float) * n * (size_t)in_f);
    ck_assert_int_eq(op_sparse_dense_backward(NULL, dkept, NULL, dy, x, sw, n, ws, wsb), 0);
    ck_assert_uint_eq(((uint32_t *)dx)[0], 0x7f7f7f7fu);
    free(ws);
    sparse_w_free(sw);
    free(x), free(w), free(b), free(dy), free(y), free(yd), free(dx), free(dxd), free(dwd);
    free(db), free(dbd), free(dkept), free(mask);
}

/* every instruction set this processor runs on 1 thread, its own on 2 */
START_TEST(test_against_dense)
{
    kt_rng r;
    kt_rng_init(&r, 40);
    static const int isas[] = {KERNELS_ISA_BASE, KERNELS_ISA_AVX2, KERNELS_ISA_AVX512};
    for (int th = 1; th <= 2; th++) {
        kernels_set_threads(th);
        for (size_t i = 0; i < 3; i++) {
            /* two threads on the processor's own path only (the split
             * does not depend on the path) */
            if (isas[i] > (int)kernels_isa_level() ||
                (th == 2 && i + 1 < 3 && isas[i + 1] <= (int)kernels_isa_level()))
                continue;
            kern__sparse_set_isa(isas[i]);
            ck_assert_int_eq(kern__sparse_isa(), isas[i]);
            for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
                for (size_t d = 0; d < sizeof(densities) / sizeof(densities[0]); d++)
                    for (int empty = 0; empty < 2; empty++)
                        check_shape(&r, shapes[s][0], shapes[s][1], shapes[s][2], densities[d],
                                    empty, isas[i]);
        }
    }
    kern__sparse_set_isa(-1);
    kernels_set_threads(1);
}
END_TEST

/* the three orders of the kept values, and the format made from the
 * weight's zeros */
START_TEST(test_format)
{
    kt_rng r;
    kt_rng_init(&r, 41);
    int out_f = 300, in_f = 517;
    size_t nw = (size_t)out_f * in_f;
    float *w = kt_falloc(nw), *back = kt_falloc(nw), *kept = kt_falloc(nw);
    uint8_t *mask = malloc(nw);
    kt_fill(&r, w, nw, -1, 1);
    make_mask(&r, mask, out_f, in_f, 0.2, 1);
    for (size_t i = 0; i < nw; i++)
        if (!mask[i])
            w[i] = i % 2 ? 0.0f : -0.0f;
    char err[128];
    sparse_w *a = sparse_w_new(w, mask, out_f, in_f, err, sizeof(err));
    sparse_w *z = sparse_w_new(w, NULL, out_f, in_f, err, sizeof(err));
    ck_assert(a && z);
    ck_assert_uint_eq(a->nnz, z->nnz);
    ck_assert(memcmp(a->col, z->col, sizeof(uint32_t) * a->nnz) == 0);
    /* the same positions from the mask as bits (a compressed stream's
     * index), the values zeros until set */
    uint8_t *bits = calloc((nw + 7) / 8, 1);
    for (size_t i = 0; i < nw; i++)
        bits[i / 8] |= (uint8_t)((mask[i] != 0) << (i % 8));
    sparse_w *b = sparse_w_new_bits(bits, out_f, in_f, err, sizeof(err));
    ck_assert(b);
    ck_assert_uint_eq(b->nnz, a->nnz);
    ck_assert(memcmp(b->col, a->col, sizeof(uint32_t) * a->nnz) == 0);
    ck_assert(memcmp(b->ord, a->ord, sizeof(uint32_t) * a->nnz) == 0);
    ck_assert(memcmp(b->tord, a->tord, sizeof(uint32_t) * a->nnz) == 0);
    for (size_t j = 0; j < b->nnz; j++)
        EXPECT(b->val[j] == 0.0f, "bits: val %zu", j);
    sparse_w_free(b);
    free(bits);
    /* canonical order is row-major */
    size_t e = 0;
    for (size_t i = 0; i < nw; i++)
        if (mask[i])
            kept[e++] = w[i];
    sparse_w_gather(a, w, back);
    ck_assert(memcmp(kept, back, sizeof(float) * e) == 0);
    sparse_w_scatter(a, kept, back);
    for (size_t i = 0; i < nw; i++)
        EXPECT(back[i] == w[i], "scatter %zu", i);
    /* the panel orders carry the same values */
    for (size_t j = 0; j < a->nnz; j++) {
        EXPECT(a->val[j] == kept[a->ord[j]], "val %zu", j);
        EXPECT(a->tval[j] == a->val[a->tord[j]], "tval %zu", j); /* (tval is val permuted) */
    }
    /* new values in canonical order reach both panel orders */
    for (size_t j = 0; j < a->nnz; j++)
        kept[j] = (float)j;
    sparse_w_set_kept(a, kept);
    for (size_t j = 0; j < a->nnz; j++) {
        EXPECT(a->val[j] == (float)a->ord[j], "val %zu", j);
        EXPECT(a->tval[j] == (float)a->ord[a->tord[j]], "tval %zu", j);
    }
    sparse_w_scatter(a, kept, back);
    sparse_w_set_dense(z, back);
    for (size_t j = 0; j < z->nnz; j++)
        EXPECT(z->val[j] == (float)z->ord[j] && z->tval[j] == (float)z->ord[z->tord[j]], "set_dense %zu", j);
    sparse_w_free(a);
    sparse_w_free(z);
    sparse_w_free(NULL);
    free(w), free(back), free(kept), free(mask);
}
END_TEST

START_TEST(test_bad_input)
{
    char err[128];
    float w[4] = {1, 0, 0, 2};
    ck_assert_ptr_null(sparse_w_new(w, NULL, 0, 4, err, sizeof(err)));
    ck_assert_msg(strstr(err, "shape 0 x 4"), "%s", err);
    sparse_w *sw = sparse_w_new(w, NULL, 2, 2, err, sizeof(err));
    ck_assert_uint_eq(sw->nnz, 2);
    float x[2] = {1, 1}, y[2], dk[2];
    size_t wsb = op_sparse_dense_workspace(sw, 1);
    char *ws = malloc(wsb);
    ck_assert_int_eq(op_sparse_dense_forward(y, x, sw, NULL, -1, ws, wsb), -EINVAL);
    ck_assert_int_eq(op_sparse_dense_forward(y, x, sw, NULL, 1, ws, 8), -ENOSPC);
    ck_assert_int_eq(op_sparse_dense_backward(NULL, dk, NULL, x, x, sw, 1, ws, 8), -ENOSPC);
    ck_assert_int_eq(op_sparse_dense_forward(y, x, sw, NULL, 1, ws, wsb), 0);
    ck_assert_float_eq(y[0], 1.0f);
    ck_assert_float_eq(y[1], 2.0f);
    /* a batch of none: the gradients are zero */
    dk[0] = dk[1] = 5;
    ck_assert_int_eq(op_sparse_dense_backward(NULL, dk, NULL, x, x, sw, 0, ws, wsb), 0);
    ck_assert_float_eq(dk[0], 0.0f);
    free(ws);
    sparse_w_free(sw);
}
END_TEST

/* the model's choice, and the masked layer taking either path with the
 * dense layer's results */
START_TEST(test_cost_model_and_masked_layer)
{
    /* the benchmark's layer: sparse at 90%, dense at 40% */
    ck_assert(op_sparse_dense_cost_ratio(4096 * 4096 / 10, 256, 4096, 4096) < 1.0);
    ck_assert(op_sparse_dense_cost_ratio(4096 * 4096 * 6 / 10, 256, 4096, 4096) > 1.0);
    /* the ratio grows with the kept weights */
    double prev = 0;
    for (int k = 1; k <= 10; k++) {
        double q = op_sparse_dense_cost_ratio((size_t)4096 * 4096 * k / 10, 256, 4096, 4096);
        ck_assert(q > prev);
        prev = q;
    }
    kt_rng r;
    kt_rng_init(&r, 42);
    kernels_set_threads(2);
    int n = 128, in_f = 1500, out_f = 1200;
    size_t nw = (size_t)out_f * in_f;
    float *x = kt_falloc((size_t)n * in_f), *w = kt_falloc(nw), *b = kt_falloc(out_f);
    float *dy = kt_falloc((size_t)n * out_f), *y = kt_falloc((size_t)n * out_f);
    float *yd = kt_falloc((size_t)n * out_f), *dx = kt_falloc((size_t)n * in_f);
    float *dxd = kt_falloc((size_t)n * in_f), *dw = kt_falloc(nw), *dwd = kt_falloc(nw);
    float *db = kt_falloc(out_f), *dbd = kt_falloc(out_f);
    uint8_t *mask = malloc(nw);
    kt_fill(&r, x, (size_t)n * in_f, -1, 1);
    kt_fill(&r, b, out_f, -1, 1);
    kt_fill(&r, dy, (size_t)n * out_f, -1, 1);
    int seen[2] = {0, 0};
    static const double ds[] = {0.02, 0.9};
    for (int t = 0; t < 2; t++) {
        kt_fill(&r, w, nw, -1, 1);
        make_mask(&r, mask, out_f, in_f, ds[t], 0);
        for (size_t i = 0; i < nw; i++)
            if (!mask[i])
                w[i] = 0.0f;
        char err[128];
        sparse_w *sw = sparse_w_new(w, mask, out_f, in_f, err, sizeof(err));
        size_t wsb = op_sparse_dense_workspace(sw, n);
        void *ws = malloc(wsb);
        int path = op_masked_dense_forward(y, x, w, sw, b, n, ws, wsb);
        ck_assert_int_eq(path, op_sparse_dense_pays(sw, n));
        seen[path]++;
        op_dense_forward(yd, x, w, b, n, in_f, out_f);
        ck_assert(kt_relerr_ff(y, yd, (size_t)n * out_f) < 1e-5);
        memset(dw, 0x7f, sizeof(float) * nw);
        ck_assert_int_eq(op_masked_dense_backward(dx, dw, db, dy, x, w, sw, n, ws, wsb), path);
        op_dense_backward(dxd, dwd, dbd, dy, x, w, n, in_f, out_f);
        for (size_t i = 0; i < nw; i++)
            if (!mask[i])
                dwd[i] = 0.0f;
        for (size_t i = 0; i < nw; i++)
            EXPECT(mask[i] || dw[i] == 0.0f, "pruned dW[%zu] = %g", i, dw[i]);
        ck_assert(kt_relerr_ff(dw, dwd, nw) < 1e-5);
        ck_assert(kt_relerr_ff(dx, dxd, (size_t)n * in_f) < 1e-5);
        ck_assert(kt_relerr_ff(db, dbd, out_f) < 1e-5);
        free(ws);
        sparse_w_free(sw);
    }
    ck_assert_int_eq(seen[0], 1); /* 90% kept: dense */
    ck_assert_int_eq(seen[1], 1); /* 2% kept: sparse */
    kernels_set_threads(1);
    free(x), free(w), free(b), free(dy), free(y), free(yd), free(dx), free(dxd), free(dw);
    free(dwd), free(db), free(dbd), free(mask);
}
END_TEST

/* natural sparsity: the forward pass over the nonzeros of the input */
START_TEST(test_sparse_input)
{
    kt_rng r;
    kt_rng_init(&r, 43);
    static const int isas[] = {KERNELS_ISA_BASE, KERNELS_ISA_AVX2, KERNELS_ISA_AVX512};
    static const double xd[] = {0.0, 0.03, 0.3, 1.0};
    kernels_set_threads(2);
    for (size_t i = 0; i < 3; i++) {
        if (isas[i] > (int)kernels_isa_level())
            continue;
        kern__sparse_set_isa(isas[i]);
        for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
            for (size_t d = 0; d < 4; d++) {
                int n = shapes[s][0], in_f = shapes[s][1], out_f = shapes[s][2];
                float *x = kt_falloc((size_t)n * in_f), *w = kt_falloc((size_t)out_f * in_f);
                float *wt = kt_falloc((size_t)out_f * in_f), *b = kt_falloc(out_f);
                float *y = kt_falloc((size_t)n * out_f);
                kt_fill(&r, x, (size_t)n * in_f, -1, 1);
                for (size_t k = 0; k < (size_t)n * in_f; k++)
                    if (kt_uniform(&r, 0, 1) >= xd[d])
                        x[k] = 0.0f;
                kt_fill(&r, w, (size_t)out_f * in_f, -1, 1);
                kt_fill(&r, b, out_f, -1, 1);
                sparse_w_transpose(wt, w, out_f, in_f);
                for (int o = 0; o < out_f; o++)
                    for (int k = 0; k < in_f; k++)
                        EXPECT(wt[(size_t)k * out_f + o] == w[(size_t)o * in_f + k], "wt");
                size_t wsb = op_dense_sparse_in_workspace(n, in_f);
                void *ws = malloc(wsb);
                for (int bias = 0; bias < 2; bias++) {
                    ck_assert_int_eq(op_dense_sparse_in_forward(y, x, wt, bias ? b : NULL, n, in_f,
                                                                out_f, ws, wsb),
                                     0);
                    for (int q = 0; q < n; q++)
                        for (int o = 0; o < out_f; o++) {
                            double sum = bias ? b[o] : 0, a = fabs(sum), t = 1;
                            for (int k = 0; k < in_f; k++) {
                                double p = (double)x[(size_t)q * in_f + k] * w[(size_t)o * in_f + k];
                                sum += p, a += fabs(p), t += p != 0;
                            }
                            EXPECT(within(y[(size_t)q * out_f + o], sum, a, t),
                                          "%s %dx%dx%d x density %.2f: y[%d][%d]",
                                          kernels_isa_name((kernels_isa)isas[i]), n, in_f, out_f,
                                          xd[d], q, o);
                        }
                }
                ck_assert_int_eq(op_dense_sparse_in_forward(y, x, wt, b, n, in_f, out_f, ws, 16),
                                 -ENOSPC);
                /* the backward pass: dW over the input's nonzeros */
                float *dy = kt_falloc((size_t)n * out_f), *dw = kt_falloc((size_t)out_f * in_f);
                float *dx = kt_falloc((size_t)n * in_f), *db = kt_falloc(out_f);
                float *dwd = kt_falloc((size_t)out_f * in_f), *dxd = kt_falloc((size_t)n * in_f);
                float *dbd = kt_falloc(out_f);
                kt_fill(&r, dy, (size_t)n * out_f, -1, 1);
                size_t bwb = op_dense_sparse_in_backward_workspace(n, in_f);
                void *bws = malloc(bwb);
                ck_assert_int_eq(op_dense_sparse_in_backward(dx, dw, db, dy, x, w, n, in_f, out_f,
                                                             bws, bwb),
                                 0);
                op_dense_backward(dxd, dwd, dbd, dy, x, w, n, in_f, out_f);
                for (int o = 0; o < out_f; o++)
                    for (int k = 0; k < in_f; k++) {
                        double sum = 0, a = 0, t = 0;
                        for (int q = 0; q < n; q++) {
                            double p = (double)dy[(size_t)q * out_f + o] * x[(size_t)q * in_f + k];
                            sum += p, a += fabs(p), t += p != 0;
                        }
                        EXPECT(within(dw[(size_t)o * in_f + k], sum, a, t),
                               "%s %dx%dx%d x density %.2f: dW[%d][%d] %g, want %g",
                               kernels_isa_name((kernels_isa)isas[i]), n, in_f, out_f, xd[d], o, k,
                               dw[(size_t)o * in_f + k], sum);
                    }
                ck_assert(kt_relerr_ff(dx, dxd, (size_t)n * in_f) < 1e-5);
                ck_assert(kt_relerr_ff(db, dbd, out_f) < 1e-5);
                ck_assert_int_eq(op_dense_sparse_in_backward(dx, dw, db, dy, x, w, n, in_f, out_f,
                                                             bws, 64),
                                 -ENOSPC);
                free(bws);
                free(dy), free(dw), free(dx), free(db), free(dwd), free(dxd), free(dbd);
                free(ws);
                free(x), free(w), free(wt), free(b), free(y);
            }
    }
    /* the density count */
    float v[5] = {0, 1, -0.0f, 2, 0};
    ck_assert_double_eq_tol(op_dense_in_density(v, 5), 0.4, 1e-12);
    ck_assert(op_dense_sparse_in_pays(0.01, 256, 4096, 4096) ==
              (kernels_isa_level() >= KERNELS_ISA_AVX512));
    ck_assert(!op_dense_sparse_in_pays(0.9, 256, 4096, 4096));
    ck_assert(!op_dense_sparse_in_backward_pays(0.5, 256, 4096, 4096));
    ck_assert(op_dense_sparse_in_backward_pays(0.01, 256, 4096, 4096) ==
              (kernels_isa_level() >= KERNELS_ISA_AVX512));
    kern__sparse_set_isa(-1);
    kernels_set_threads(1);
}
END_TEST

/* a row is computed whole by one thread in one order: two threads give
 * the bits of one */
START_TEST(test_threads_same_bits)
{
    kt_rng r;
    kt_rng_init(&r, 44);
    int n = 300, in_f = 513, out_f = 260;
    size_t nw = (size_t)out_f * in_f;
    float *x = kt_falloc((size_t)n * in_f), *w = kt_falloc(nw), *b = kt_falloc(out_f);
    float *dy = kt_falloc((size_t)n * out_f);
    float *y[2], *dx[2], *dk[2], *db[2];
    uint8_t *mask = malloc(nw);
    kt_fill(&r, x, (size_t)n * in_f, -1, 1);
    kt_fill(&r, w, nw, -1, 1);
    kt_fill(&r, b, out_f, -1, 1);
    kt_fill(&r, dy, (size_t)n * out_f, -1, 1);
    make_mask(&r, mask, out_f, in_f, 0.6, 0);
    char err[128];
    sparse_w *sw = sparse_w_new(w, mask, out_f, in_f, err, sizeof(err));
    ck_assert_msg((double)sw->nnz * n >= 1e6, "the shape must be worth two threads");
    size_t wsb = op_sparse_dense_workspace(sw, n);
    void *ws = malloc(wsb);
    for (int t = 0; t < 2; t++) {
        kernels_set_threads(t + 1);
        y[t] = kt_falloc((size_t)n * out_f);
        dx[t] = kt_falloc((size_t)n * in_f);
        dk[t] = kt_falloc(sw->nnz);
        db[t] = kt_falloc(out_f);
        ck_assert_int_eq(op_sparse_dense_forward(y[t], x, sw, b, n, ws, wsb), 0);
        ck_assert_int_eq(op_sparse_dense_backward(dx[t], dk[t], db[t], dy, x, sw, n, ws, wsb), 0);
    }
    ck_assert(memcmp(y[0], y[1], sizeof(float) * n * out_f) == 0);
    ck_assert(memcmp(dx[0], dx[1], sizeof(float) * n * in_f) == 0);
    ck_assert(memcmp(dk[0], dk[1], sizeof(float) * sw->nnz) == 0);
    ck_assert(memcmp(db[0], db[1], sizeof(float) * out_f) == 0);
    kernels_set_threads(1);
    for (int t = 0; t < 2; t++)
        free(y[t]), free(dx[t]), free(dk[t]), free(db[t]);
    free(ws);
    sparse_w_free(sw);
    free(x), free(w), free(b), free(dy), free(mask);
}
END_TEST

/* The panel width (kern__panel_width, by density) changes where a row's
 * entries are cut, not the order they are summed in: every width gives
 * the same bits, on each instruction set, with an odd count of rows (a
 * row pair's kernel and a single row's) and a batch that ends in a
 * masked chunk */
START_TEST(test_panel_widths_same_bits)
{
    ck_assert_int_eq(kern__panel_width(0.60), 64);
    ck_assert_int_eq(kern__panel_width(0.25), 64);
    ck_assert_int_eq(kern__panel_width(0.15), 128);
    ck_assert_int_eq(kern__panel_width(0.10), 256);
    ck_assert_int_eq(kern__panel_width(0.01), 256);
    kt_rng r;
    kt_rng_init(&r, 45);
    int n = 300, in_f = 513, out_f = 261;
    size_t nw = (size_t)out_f * in_f;
    float *x = kt_falloc((size_t)n * in_f), *w = kt_falloc(nw), *b = kt_falloc(out_f);
    float *dy = kt_falloc((size_t)n * out_f);
    float *y[2], *dx[2], *dk[2], *db[2];
    for (int t = 0; t < 2; t++) {
        y[t] = kt_falloc((size_t)n * out_f);
        dx[t] = kt_falloc((size_t)n * in_f);
        dk[t] = kt_falloc(nw);
        db[t] = kt_falloc(out_f);
    }
    uint8_t *mask = malloc(nw);
    kt_fill(&r, x, (size_t)n * in_f, -1, 1);
    kt_fill(&r, b, out_f, -1, 1);
    kt_fill(&r, dy, (size_t)n * out_f, -1, 1);
    static const double dens[] = {0.6, 0.1};
    static const int isas[] = {KERNELS_ISA_BASE, KERNELS_ISA_AVX2, KERNELS_ISA_AVX512};
    char err[128];
    for (size_t d = 0; d < 2; d++) {
        kt_fill(&r, w, nw, -1, 1);
        make_mask(&r, mask, out_f, in_f, dens[d], 0);
        for (size_t i = 0; i < 3; i++) {
            if (isas[i] > (int)kernels_isa_level())
                continue;
            kern__sparse_set_isa(isas[i]);
            for (int pw = 256; pw >= 16; pw /= 2) {
                kern__sparse_set_panel(pw);
                sparse_w *sw = sparse_w_new(w, mask, out_f, in_f, err, sizeof(err));
                kern__sparse_set_panel(0);
                ck_assert_msg(sw != NULL, "%s", err);
                ck_assert_int_eq(sw->pw, pw);
                size_t wsb = op_sparse_dense_workspace(sw, n);
                void *ws = malloc(wsb);
                int t = pw == 256 ? 0 : 1;
                ck_assert_int_eq(op_sparse_dense_forward(y[t], x, sw, b, n, ws, wsb), 0);
                ck_assert_int_eq(
                    op_sparse_dense_backward(dx[t], dk[t], db[t], dy, x, sw, n, ws, wsb), 0);
                if (t == 1) {
                    const char *what = kernels_isa_name((kernels_isa)isas[i]);
                    EXPECT(memcmp(y[0], y[1], sizeof(float) * n * out_f) == 0,
                           "%s, %d wide, density %.1f: y", what, pw, dens[d]);
                    EXPECT(memcmp(dx[0], dx[1], sizeof(float) * n * in_f) == 0,
                           "%s, %d wide: dx", what, pw);
                    EXPECT(memcmp(dk[0], dk[1], sizeof(float) * sw->nnz) == 0,
                           "%s, %d wide: dW", what, pw);
                    EXPECT(memcmp(db[0], db[1], sizeof(float) * out_f) == 0,
                           "%s, %d wide: dbias", what, pw);
                }
                free(ws);
                sparse_w_free(sw);
            }
        }
    }
    kern__sparse_set_isa(-1);
    for (int t = 0; t < 2; t++)
        free(y[t]), free(dx[t]), free(dk[t]), free(db[t]);
    free(x), free(w), free(b), free(dy), free(mask);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sparse_dense");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_format);
    tcase_add_test(tc, test_bad_input);
    tcase_add_test(tc, test_against_dense);
    tcase_add_test(tc, test_threads_same_bits);
    tcase_add_test(tc, test_panel_widths_same_bits);
    tcase_add_test(tc, test_cost_model_and_masked_layer);
    tcase_add_test(tc, test_sparse_input);
    suite_add_tcase(s, tc);
    return kt_run(s);
}
