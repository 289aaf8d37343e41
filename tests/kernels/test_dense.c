/* Dense layer: the GEMM path against the plain loops, and its gradients
 * against central differences of a double-precision reference. */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include <string.h>

#include "bf16.h"
#include "convplan.h"
#include "kernels.h"
#include "kernels_internal.h"
#include "kt.h"
#include "op_activation.h"
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

/* x rounded to bfloat16 and back */
static void round_bf16(float *out, const float *x, size_t n)
{
    uint16_t *h = malloc(n * sizeof(uint16_t));
    bf16_pack(h, x, n);
    bf16_unpack(out, h, n);
    free(h);
}

/* Mixed precision: forward and both backward GEMMs against the double
 * reference of the operands rounded to bfloat16 (products summed in
 * float32: within 1e-5 of it) where the processor computes in bfloat16,
 * else against the float32 path bit for bit; with the bfloat16 path
 * turned off, or a workspace too small for it, bit for bit float32. */
START_TEST(test_bf16_paths)
{
    enum { N = 67, IN = 300, OUT = 129 };
    kt_rng r;
    kt_rng_init(&r, 21);
    float *x = kt_falloc(N * IN), *w = kt_falloc(OUT * IN), *b = kt_falloc(OUT);
    float *dy = kt_falloc(N * OUT), *y = kt_falloc(N * OUT), *y32 = kt_falloc(N * OUT);
    float *dx = kt_falloc(N * IN), *dw = kt_falloc(OUT * IN), *db = kt_falloc(OUT);
    float *dx32 = kt_falloc(N * IN), *dw32 = kt_falloc(OUT * IN), *db32 = kt_falloc(OUT);
    kt_fill(&r, x, N * IN, -1, 1);
    kt_fill(&r, w, OUT * IN, -0.1, 0.1);
    kt_fill(&r, b, OUT, -0.5, 0.5);
    kt_fill(&r, dy, N * OUT, -1, 1);
    size_t wsb = convplan_dense_bf16_workspace(N, IN, OUT);
    void *ws = aligned_alloc(64, wsb);
    kernels_set_threads(2);
    op_dense_forward_bf16(y, x, w, NULL, 0, b, N, IN, OUT, ws, wsb);
    op_dense_backward_bf16(dx, dw, db, dy, x, w, NULL, 0, N, IN, OUT, ws, wsb);
    op_dense_forward(y32, x, w, b, N, IN, OUT);
    op_dense_backward(dx32, dw32, db32, dy, x, w, N, IN, OUT);
    ck_assert(memcmp(db, db32, sizeof(float) * OUT) == 0); /* the bias's in float32 */
    /* the bias added by the matmul as it writes C: the bits of C seeded
     * with the bias and the product added into it */
    float *ys = kt_falloc(N * OUT);
    for (int i = 0; i < N; i++)
        memcpy(ys + i * OUT, b, sizeof(float) * OUT);
    kern_gemm_bf16_kept_b(0, 1, N, OUT, IN, x, IN, w, IN, NULL, 0, NULL, 1.0f, ys, OUT, ws, wsb, 0);
    ck_assert(memcmp(ys, y, sizeof(float) * N * OUT) == 0);
    free(ys);
    if (kernels_bf16_compute()) {
        float *xr = kt_falloc(N * IN), *wr = kt_falloc(OUT * IN), *dyr = kt_falloc(N * OUT);
        round_bf16(xr, x, N * IN);
        round_bf16(wr, w, OUT * IN);
        round_bf16(dyr, dy, N * OUT);
        double *ry = kt_dalloc(N * OUT), *rdx = kt_dalloc(N * IN), *rdw = kt_dalloc(OUT * IN);
        for (int i = 0; i < N; i++)
            for (int o = 0; o < OUT; o++) {
                double a = b[o];
                for (int k = 0; k < IN; k++)
                    a += (double)xr[i * IN + k] * wr[o * IN + k];
                ry[i * OUT + o] = a;
            }
        for (int i = 0; i < N; i++)
            for (int k = 0; k < IN; k++) {
                double a = 0;
                for (int o = 0; o < OUT; o++)
                    a += (double)dyr[i * OUT + o] * wr[o * IN + k];
                rdx[i * IN + k] = a;
            }
        for (int o = 0; o < OUT; o++)
            for (int k = 0; k < IN; k++) {
                double a = 0;
                for (int i = 0; i < N; i++)
                    a += (double)dyr[i * OUT + o] * xr[i * IN + k];
                rdw[o * IN + k] = a;
            }
        ck_assert_msg(kt_relerr(y, ry, N * OUT) < 1e-5, "forward %g", kt_relerr(y, ry, N * OUT));
        ck_assert_msg(kt_relerr(dx, rdx, N * IN) < 1e-5, "dx %g", kt_relerr(dx, rdx, N * IN));
        ck_assert_msg(kt_relerr(dw, rdw, OUT * IN) < 1e-5, "dw %g", kt_relerr(dw, rdw, OUT * IN));
        /* and it did round: not the float32 result */
        ck_assert(memcmp(y, y32, sizeof(float) * N * OUT) != 0);
        free(xr), free(wr), free(dyr), free(ry), free(rdx), free(rdw);
    } else {
        ck_assert(memcmp(y, y32, sizeof(float) * N * OUT) == 0);
        ck_assert(memcmp(dw, dw32, sizeof(float) * OUT * IN) == 0);
    }
    /* the weights kept rounded by the caller: the same bits; and the GEMMs
     * read that copy (another one gives another result) */
    uint16_t *w16 = malloc(sizeof(uint16_t) * OUT * IN);
    float *yk = kt_falloc(N * OUT), *dxk = kt_falloc(N * IN), *dwk = kt_falloc(OUT * IN);
    float *dbk = kt_falloc(OUT);
    bf16_pack(w16, w, OUT * IN);
    op_dense_forward_bf16(yk, x, w, w16, 0, b, N, IN, OUT, ws, wsb);
    op_dense_backward_bf16(dxk, dwk, dbk, dy, x, w, w16, 0, N, IN, OUT, ws, wsb);
    ck_assert(memcmp(yk, y, sizeof(float) * N * OUT) == 0);
    ck_assert(memcmp(dxk, dx, sizeof(float) * N * IN) == 0);
    ck_assert(memcmp(dwk, dw, sizeof(float) * OUT * IN) == 0);
    ck_assert(memcmp(dbk, db, sizeof(float) * OUT) == 0);
    if (kernels_bf16_compute()) {
        for (int i = 0; i < OUT * IN; i++)
            w16[i] ^= 1; /* the last bit of every mantissa */
        op_dense_forward_bf16(yk, x, w, w16, 0, b, N, IN, OUT, ws, wsb);
        op_dense_backward_bf16(dxk, dwk, dbk, dy, x, w, w16, 0, N, IN, OUT, ws, wsb);
        ck_assert(memcmp(yk, y, sizeof(float) * N * OUT) != 0);
        ck_assert(memcmp(dxk, dx, sizeof(float) * N * IN) != 0);
        ck_assert(memcmp(dwk, dw, sizeof(float) * OUT * IN) == 0); /* dY^T X: no weights */
    }
    /* the weights in bfloat16 alone (w_stale: their float32 place holds
     * NaN): the GEMMs never read that place; one that falls back to
     * float32 (a workspace too small) widens them there first */
    bf16_pack(w16, w, OUT * IN);
    float *wst = kt_falloc(OUT * IN), *wr16 = kt_falloc(OUT * IN), *y16 = kt_falloc(N * OUT);
    for (int i = 0; i < OUT * IN; i++)
        wst[i] = NAN;
    op_dense_forward_bf16(yk, x, wst, w16, 1, b, N, IN, OUT, ws, wsb);
    op_dense_backward_bf16(dxk, dwk, dbk, dy, x, wst, w16, 1, N, IN, OUT, ws, wsb);
    if (kernels_bf16_compute()) {
        ck_assert(memcmp(yk, y, sizeof(float) * N * OUT) == 0);
        ck_assert(memcmp(dxk, dx, sizeof(float) * N * IN) == 0);
        ck_assert(memcmp(dwk, dw, sizeof(float) * OUT * IN) == 0);
        ck_assert(isnan(wst[0]) && isnan(wst[OUT * IN - 1])); /* not read, not written */
    }
    bf16_unpack(wr16, w16, OUT * IN);
    op_dense_forward(y16, x, wr16, b, N, IN, OUT); /* float32 on the widened weights */
    for (int i = 0; i < OUT * IN; i++)
        wst[i] = NAN;
    op_dense_forward_bf16(yk, x, wst, w16, 1, b, N, IN, OUT, ws, 1024);
    ck_assert(memcmp(yk, y16, sizeof(float) * N * OUT) == 0);
    ck_assert(memcmp(wst, wr16, sizeof(float) * OUT * IN) == 0);
    free(wst), free(wr16), free(y16);
    free(w16), free(yk), free(dxk), free(dwk), free(dbk);
    /* a workspace too small, then the path turned off: float32 */
    op_dense_forward_bf16(y, x, w, NULL, 0, b, N, IN, OUT, ws, 1024);
    ck_assert(memcmp(y, y32, sizeof(float) * N * OUT) == 0);
    kernels_bf16_enable(0);
    ck_assert_int_eq(kernels_bf16_compute(), 0);
    op_dense_forward_bf16(y, x, w, NULL, 0, b, N, IN, OUT, ws, wsb);
    op_dense_backward_bf16(dx, dw, db, dy, x, w, NULL, 0, N, IN, OUT, ws, wsb);
    kernels_bf16_enable(1);
    ck_assert(memcmp(y, y32, sizeof(float) * N * OUT) == 0);
    ck_assert(memcmp(dx, dx32, sizeof(float) * N * IN) == 0);
    ck_assert(memcmp(dw, dw32, sizeof(float) * OUT * IN) == 0);
    kernels_set_threads(1);
    free(ws);
    free(x), free(w), free(b), free(dy), free(y), free(y32), free(dx), free(dw), free(db);
    free(dx32), free(dw32), free(db32);
}
END_TEST

/* kern_gemm_bf16_same_a uses the rounded A left in the workspace only when
 * the last GEMM on it rounded that very operand alike; otherwise it rounds
 * A again and gives kern_gemm_bf16's bits. */
START_TEST(test_bf16_same_a)
{
    enum { M = 40, K = 96, N = 72 };
    kt_rng r;
    kt_rng_init(&r, 23);
    float *a = kt_falloc(M * K), *a2 = kt_falloc(M * K), *b = kt_falloc(K * N);
    float *c = kt_falloc(M * N), *want = kt_falloc(M * N);
    kt_fill(&r, a, M * K, -1, 1);
    kt_fill(&r, a2, M * K, -1, 1);
    kt_fill(&r, b, K * N, -1, 1);
    size_t wsb = convplan_gemm_bf16_workspace(M, N, K);
    void *ws = aligned_alloc(64, wsb);
    kernels_set_threads(2);
    /* the same A again: the bits of rounding it anew */
    kern_gemm_bf16(0, 0, M, N, K, a, K, b, N, 0.0f, want, N, ws, wsb);
    kern_gemm_bf16(0, 1, M, M, K, a, K, a2, K, 0.0f, c, M, ws, wsb);
    kern_gemm_bf16_same_a(0, 0, M, N, K, a, K, b, N, 0.0f, c, N, ws, wsb);
    ck_assert(memcmp(c, want, sizeof(float) * M * N) == 0);
    /* another A after it: rounded, not the one in the workspace */
    kern_gemm_bf16(0, 0, M, N, K, a2, K, b, N, 0.0f, want, N, ws, wsb);
    kern_gemm_bf16(0, 0, M, N, K, a, K, b, N, 0.0f, c, N, ws, wsb);
    kern_gemm_bf16_same_a(0, 0, M, N, K, a2, K, b, N, 0.0f, c, N, ws, wsb);
    ck_assert(memcmp(c, want, sizeof(float) * M * N) == 0);
    /* the same pointer over fewer columns (another lda): rounded again */
    kern_gemm_bf16(0, 0, M, N, K / 2, a, K, b, N, 0.0f, want, N, ws, wsb);
    kern_gemm_bf16(0, 0, M, N, K, a, K, b, N, 0.0f, c, N, ws, wsb);
    kern_gemm_bf16_same_a(0, 0, M, N, K / 2, a, K, b, N, 0.0f, c, N, ws, wsb);
    ck_assert(memcmp(c, want, sizeof(float) * M * N) == 0);
    /* after a GEMM that fell back to float32 (workspace too small) */
    kern_gemm_bf16(0, 0, M, N, K, a2, K, b, N, 0.0f, want, N, ws, wsb);
    kern_gemm_bf16(0, 0, M, N, K, a, K, b, N, 0.0f, c, N, ws, 64);
    kern_gemm_bf16_same_a(0, 0, M, N, K, a2, K, b, N, 0.0f, c, N, ws, wsb);
    ck_assert(memcmp(c, want, sizeof(float) * M * N) == 0);
    kernels_set_threads(1);
    free(ws);
    free(a), free(a2), free(b), free(c), free(want);
}
END_TEST

/* A weight gradient's GEMM (A transposed, B not) of 256x256 or more
 * takes oneDNN's blocked layouts, its operands rounded by oneDNN's
 * reorders from strided float32: the product of the rounded operands,
 * for two leading dimensions of the same shape, with C overwritten and
 * with C added to. */
START_TEST(test_bf16_blocked)
{
    enum { M = 300, N = 260, K = 70, LDA = M + 5, LDB = N + 3 };
    kt_rng r;
    kt_rng_init(&r, 29);
    float *a = kt_falloc(K * LDA), *b = kt_falloc(K * LDB), *c = kt_falloc(M * N);
    float *c0 = kt_falloc(M * N);
    double *want = malloc(sizeof(double) * M * N);
    kt_fill(&r, a, K * LDA, -1, 1);
    kt_fill(&r, b, K * LDB, -1, 1);
    kt_fill(&r, c0, M * N, -1, 1);
    /* the operands as bfloat16 rounds them */
    float *ar = kt_falloc(K * LDA), *br = kt_falloc(K * LDB);
    uint16_t *h = malloc(sizeof(uint16_t) * K * (LDA > LDB ? LDA : LDB));
    bf16_pack(h, a, K * LDA);
    bf16_unpack(ar, h, K * LDA);
    bf16_pack(h, b, K * LDB);
    bf16_unpack(br, h, K * LDB);
    size_t wsb = convplan_gemm_bf16_workspace(M, N, K);
    void *ws = aligned_alloc(64, wsb);
    kernels_set_threads(2);
    for (int pass = 0; pass < 3; pass++) {
        int lda = pass == 1 ? M : LDA, ldb = pass == 1 ? N : LDB; /* pass 1: packed */
        float beta = pass == 2 ? 1.0f : 0.0f;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double s = beta != 0.0f ? c0[i * N + j] : 0.0;
                for (int k = 0; k < K; k++)
                    s += (double)ar[k * lda + i] * br[k * ldb + j];
                want[i * N + j] = s;
            }
        memcpy(c, c0, sizeof(float) * M * N);
        int in16 = kern_gemm_bf16(1, 0, M, N, K, a, lda, b, ldb, beta, c, N, ws, wsb);
        ck_assert_int_eq(in16, kernels_bf16_compute());
        double e = kt_relerr(c, want, M * N);
        /* float32 (no bfloat16 here): the rounding is the difference */
        ck_assert_msg(e < (in16 ? 1e-5 : 1e-2), "pass %d: %g", pass, e);
    }
    kernels_set_threads(1);
    free(ws);
    free(a), free(b), free(c), free(c0), free(want), free(ar), free(br), free(h);
}
END_TEST

/* The relu fused after a dense layer, its gradient in mixed precision
 * (op_dense_relu_backward_bf16), three ways: with the one pass over dY and
 * the matmul's B put in its layout by the kernels' own pass, with both
 * turned off (each GEMM rounding and reordering its operands itself), and
 * with a workspace too small for the pass. All three give the same bits
 * (the relu's own pass and then the layer's backward pass), for shapes
 * whose GEMMs read their B plain and in the matmul's layout (sides not in
 * whole blocks; a batch of one, fewer than 16 outputs), with and without
 * the input's gradient; dY masked where
 * the output is not positive (NaN, zero, negative zero); the bias's
 * gradient the float32 path's; the pass left dY's transpose, rounded, in
 * the workspace. */
START_TEST(test_bf16_relu_dy)
{
    static const int dims[][3] = {{130, 72, 129}, {260, 272, 300}, {1, 5, 10}, {33, 17, 16}};
    kt_rng r;
    kt_rng_init(&r, 31);
    kernels_set_threads(2);
    for (int sh = 0; sh < 4; sh++) {
        int n = dims[sh][0], in_f = dims[sh][1], out_f = dims[sh][2];
        size_t ny = (size_t)n * out_f, nx = (size_t)n * in_f, nw = (size_t)out_f * in_f;
        float *x = kt_falloc(nx), *w = kt_falloc(nw), *y = kt_falloc(ny), *dy = kt_falloc(ny);
        float *d[4], *dx[3], *dw[4], *db[4];
        for (int k = 0; k < 4; k++) {
            d[k] = kt_falloc(ny), dw[k] = kt_falloc(nw), db[k] = kt_falloc(out_f);
            if (k < 3)
                dx[k] = kt_falloc(nx);
        }
        kt_fill(&r, x, nx, -1, 1);
        kt_fill(&r, w, nw, -0.1, 0.1);
        kt_fill(&r, y, ny, -1, 1);
        kt_fill(&r, dy, ny, -1, 1);
        y[1] = NAN, y[2] = 0.0f, y[3] = -0.0f, y[ny - 1] = NAN; /* ny >= 10 */
        uint16_t *w16 = malloc(sizeof(uint16_t) * nw);
        bf16_pack(w16, w, nw);
        size_t full = convplan_dense_bf16_workspace(n, in_f, out_f);
        size_t less = convplan_gemm_bf16_workspace(n, out_f, in_f);
        size_t dwb = convplan_gemm_bf16_workspace(out_f, in_f, n);
        size_t dxb = convplan_gemm_bf16_workspace(n, in_f, out_f);
        less = less > dwb ? less : dwb;
        less = less > dxb ? less : dxb;
        ck_assert_uint_ge(full, convplan_dense_bf16_dy_workspace(n, in_f, out_f));
        ck_assert_uint_lt(less, convplan_dense_bf16_dy_workspace(n, in_f, out_f));
        void *ws = aligned_alloc(64, full);
        for (int with_dx = 1; with_dx >= 0; with_dx--) {
            /* 0: the passes; 1: turned off; 2: a workspace too small */
            for (int k = 0; k < 3; k++) {
                memcpy(d[k], dy, sizeof(float) * ny);
                kernels_bf16_own_passes(k != 1);
                op_dense_relu_backward_bf16(with_dx ? dx[k] : NULL, dw[k], db[k], d[k], y, x, w,
                                            w16, 0, n, in_f, out_f, ws, k == 2 ? less : full);
            }
            if (kernels_bf16_compute()) /* what the pass leaves in the workspace */
                op_dense_relu_backward_bf16(NULL, dw[3], db[3], memcpy(d[3], dy, sizeof(float) * ny),
                                            y, x, w, w16, 0, n, in_f, out_f, ws, full);
            memcpy(d[3], dy, sizeof(float) * ny);
            op_relu_backward(d[3], d[3], y, ny);
            for (int k = 0; k < 3; k++) {
                ck_assert(memcmp(d[k], d[3], sizeof(float) * ny) == 0);
                if (with_dx && k)
                    ck_assert(memcmp(dx[k], dx[0], sizeof(float) * nx) == 0);
                if (k)
                    ck_assert(memcmp(dw[k], dw[0], sizeof(float) * nw) == 0);
            }
            ck_assert(d[0][1] == 0.0f && !signbit(d[0][1]) && d[0][2] == 0.0f && d[0][3] == 0.0f);
            op_dense_backward(NULL, dw[3], db[3], d[3], x, w, n, in_f, out_f);
            for (int k = 0; k < 3; k++)
                ck_assert(memcmp(db[k], db[3], sizeof(float) * out_f) == 0);
            if (kernels_bf16_compute()) {
                const uint16_t *tr = ws; /* column c of dY, rounded, as row c */
                uint16_t h;
                for (int c = 0; c < out_f; c += 7)
                    for (int i = 0; i < n; i += 5) {
                        bf16_pack(&h, &d[3][(size_t)i * out_f + c], 1);
                        ck_assert_uint_eq(tr[(size_t)c * n + i], h);
                    }
            }
        }
        free(ws), free(w16), free(x), free(w), free(y), free(dy);
        for (int k = 0; k < 4; k++) {
            free(d[k]), free(dw[k]), free(db[k]);
            if (k < 3)
                free(dx[k]);
        }
    }
    kernels_set_threads(1);
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
    tcase_add_test(tc, test_bf16_paths);
    tcase_add_test(tc, test_bf16_same_a);
    tcase_add_test(tc, test_bf16_blocked);
    tcase_add_test(tc, test_bf16_relu_dy);
    suite_add_tcase(s, tc);
    return kt_run(s);
}
