/* Fully connected layer on GEMMs (kern_sgemm): one forward, two backward. */
#include "op_dense.h"

#include <string.h>

#include "convplan.h"
#include "kernels.h"
#include "kernels_internal.h"
#include "op_activation.h"

/* One GEMM of the layer: in float32, or with a workspace in bfloat16 */
typedef struct dense_ws {
    void *ws;            /* NULL: float32 */
    size_t bytes;
    const uint16_t *w16; /* the weights kept rounded, or NULL */
    int w_stale;         /* only w16 holds them (kern_gemm_bf16_kept_b's b_stale) */
} dense_ws;

/* b16: B kept rounded (the weights), or NULL; bias (beta 0): added to
 * every row of C */
static void dense_gemm(const dense_ws *w, int ta, int tb, int m, int n, int k, const float *a,
                       int lda, const float *b, int ldb, const uint16_t *b16, const float *bias,
                       float beta, float *c, int ldc, int same_a)
{
    if (w->ws) {
        kern_gemm_bf16_kept_b(ta, tb, m, n, k, a, lda, b, ldb, b16, b16 && w->w_stale, bias,
                              beta, c, ldc, w->ws, w->bytes, same_a);
        return;
    }
    kern__sgemm_bias(ta, tb, m, n, k, a, lda, b, ldb, bias, beta, c, ldc);
}

/* A layer's bias gradient summed over the rows, split over the kernels'
 * threads. */
typedef struct dense_rows {
    float *out;
    const float *bias; /* dY */
    int out_f, n;
} dense_rows;

/* Columns [lo, hi) of dbias: each the sum of its column of dY from the
 * first row to the last, as one thread adds them. */
static void dense_sum_columns(void *ctx, size_t lo, size_t hi)
{
    const dense_rows *r = ctx;
    memcpy(r->out + lo, r->bias + lo, sizeof(float) * (hi - lo));
    for (int i = 1; i < r->n; i++) {
        const float *row = r->bias + (size_t)i * (size_t)r->out_f;
        for (size_t o = lo; o < hi; o++)
            r->out[o] += row[o];
    }
}

static void dense_forward(const dense_ws *w, float *out, const float *in, const float *weight,
                          const float *bias, int n, int in_f, int out_f)
{
    /* in (n, in_f), weight (out_f, in_f), bias (out_f) or NULL,
     * out (n, out_f) = in * weight^T + bias */
    if (n <= 0 || out_f <= 0)
        return;
    if (in_f <= 0) {
        if (bias)
            kern__seed_rows(out, out_f, bias, n, out_f);
        else
            memset(out, 0, sizeof(float) * n * (size_t)out_f);
        return;
    }
    dense_gemm(w, 0, 1, n, out_f, in_f, in, in_f, weight, in_f, w->w16, bias, 0.0f, out, out_f, 0);
}

/* The backward pass in bfloat16 with one pass over dY (kern__bf16_dy):
 * dY masked where y (the fused relu's output) is given and rounded both
 * as it is (dX's A) and transposed (dW's A) into the workspace, where the
 * GEMMs read it; its columns summed into dbias; then dX (the rounded copy
 * is overwritten by dW's operand after) and dW. The same bits as the
 * relu's pass, the columns' sums and the GEMMs rounding dY themselves.
 * 0 where it cannot (no bfloat16 here, a workspace too small): nothing
 * was done. */
static int dense_backward_dy(const dense_ws *w, float *din, float *dweight, float *dbias,
                             float *dout, const float *y, const float *in, const float *weight,
                             int n, int in_f, int out_f)
{
    if (!w->ws || n <= 0 || in_f <= 0 || out_f <= 0 || ((uintptr_t)w->ws & 63) ||
        w->bytes < convplan_dense_bf16_dy_workspace(n, in_f, out_f) || !kernels_bf16_compute() ||
        !kern__bf16_own_passes_on())
        return 0;
    size_t dy = ((size_t)n * out_f * 2 + 63) / 64 * 64, plain = din ? dy : 0;
    uint16_t *tr = w->ws, *pl = din ? (uint16_t *)((char *)w->ws + dy) : NULL;
    uint64_t t0 = kern__now_ns();
    if (!kern__bf16_dy(dout, y, pl, tr, n, out_f))
        return 0;
    kern__layout_since(t0);
    if (dbias) { /* as dense_backward sums them */
        dense_rows r = {.out = dbias, .bias = dout, .out_f = out_f, .n = n};
        kernels_for((size_t)out_f, 256, dense_sum_columns, &r);
    }
    if (din)
        kern_gemm_bf16_rounded_a(0, 0, n, in_f, out_f, pl, dout, out_f, weight, in_f, w->w16,
                                 w->w16 && w->w_stale, 0.0f, din, in_f,
                                 (char *)w->ws + dy + plain, w->bytes - dy - plain);
    kern_gemm_bf16_rounded_a(1, 0, out_f, in_f, n, tr, dout, out_f, in, in_f, NULL, 0, 0.0f,
                             dweight, in_f, (char *)w->ws + dy, w->bytes - dy);
    return 1;
}

static void dense_backward(const dense_ws *w, float *din, float *dweight, float *dbias,
                           const float *dout, const float *in, const float *weight, int n,
                           int in_f, int out_f)
{
    /* dout (n, out_f), in (n, in_f), weight (out_f, in_f);
     * dweight (out_f, in_f) = dout^T * in, dbias (out_f) = sum_n dout,
     * din (n, in_f) = dout * weight */
    if (out_f <= 0 || in_f < 0 || n < 0)
        return;
    if (n == 0) {
        memset(dweight, 0, sizeof(float) * out_f * (size_t)in_f);
        if (dbias)
            memset(dbias, 0, sizeof(float) * out_f);
        return;
    }
    /* dY is only read there (no y given) */
    if (dense_backward_dy(w, din, dweight, dbias, (float *)(uintptr_t)dout, NULL, in, weight, n,
                          in_f, out_f))
        return;
    if (in_f > 0)
        dense_gemm(w, 1, 0, out_f, in_f, n, dout, out_f, in, in_f, NULL, NULL, 0.0f, dweight, in_f,
                   0);
    if (dbias) { /* in float32 either way, each column summed down the rows in order */
        dense_rows r = {.out = dbias, .bias = dout, .out_f = out_f, .n = n};
        kernels_for((size_t)out_f, 256, dense_sum_columns, &r);
    }
    /* dY as the weight gradient's GEMM rounded it: the same rows of out_f */
    if (din && in_f > 0)
        dense_gemm(w, 0, 0, n, in_f, out_f, dout, out_f, weight, in_f, w->w16, NULL, 0.0f, din,
                   in_f, 1);
}

void op_dense_forward(float *out, const float *in, const float *weight,
                      const float *bias, int n, int in_f, int out_f)
{
    dense_ws w = {NULL, 0, NULL, 0};
    dense_forward(&w, out, in, weight, bias, n, in_f, out_f);
}

void op_dense_backward(float *din, float *dweight, float *dbias,
                       const float *dout, const float *in,
                       const float *weight, int n, int in_f, int out_f)
{
    dense_ws w = {NULL, 0, NULL, 0};
    dense_backward(&w, din, dweight, dbias, dout, in, weight, n, in_f, out_f);
}

void op_dense_forward_bf16(float *out, const float *in, const float *weight, const uint16_t *w16,
                           int w_stale, const float *bias, int n, int in_f, int out_f, void *ws,
                           size_t ws_bytes)
{
    dense_ws w = {ws, ws_bytes, w16, w_stale};
    dense_forward(&w, out, in, weight, bias, n, in_f, out_f);
}

void op_dense_backward_bf16(float *din, float *dweight, float *dbias, const float *dout,
                            const float *in, const float *weight, const uint16_t *w16,
                            int w_stale, int n, int in_f, int out_f, void *ws, size_t ws_bytes)
{
    dense_ws w = {ws, ws_bytes, w16, w_stale};
    dense_backward(&w, din, dweight, dbias, dout, in, weight, n, in_f, out_f);
}

void op_dense_relu_backward_bf16(float *din, float *dweight, float *dbias, float *dout,
                                 const float *y, const float *in, const float *weight,
                                 const uint16_t *w16, int w_stale, int n, int in_f, int out_f,
                                 void *ws, size_t ws_bytes)
{
    dense_ws w = {ws, ws_bytes, w16, w_stale};
    if (dense_backward_dy(&w, din, dweight, dbias, dout, y, in, weight, n, in_f, out_f))
        return;
    if (n > 0 && out_f > 0)
        op_relu_backward(dout, dout, y, (size_t)n * (size_t)out_f);
    dense_backward(&w, din, dweight, dbias, dout, in, weight, n, in_f, out_f);
}

void op_dense_forward_ref(float *out, const float *in, const float *weight,
                          const float *bias, int n, int in_f, int out_f)
{
    /* in (n, in_f), weight (out_f, in_f), bias (out_f) or NULL,
     * out (n, out_f) */
    for (int i = 0; i < n; i++) {
        const float *x = in + (size_t)i * in_f;
        for (int o = 0; o < out_f; o++) {
            const float *w = weight + (size_t)o * in_f;
            double acc = bias ? bias[o] : 0.0;
            for (int k = 0; k < in_f; k++)
                acc += (double)x[k] * w[k];
            out[(size_t)i * out_f + o] = (float)acc;
        }
    }
}

void op_dense_backward_ref(float *din, float *dweight, float *dbias,
                           const float *dout, const float *in,
                           const float *weight, int n, int in_f, int out_f)
{
    /* dout (n, out_f), in (n, in_f), weight (out_f, in_f);
     * dweight (out_f, in_f), dbias (out_f) or NULL, din (n, in_f) or NULL */
    for (int o = 0; o < out_f; o++) {
        for (int k = 0; k < in_f; k++) {
            double acc = 0.0;
            for (int i = 0; i < n; i++)
                acc += (double)dout[(size_t)i * out_f + o] *
                       in[(size_t)i * in_f + k];
            dweight[(size_t)o * in_f + k] = (float)acc;
        }
        if (dbias) {
            double acc = 0.0;
            for (int i = 0; i < n; i++)
                acc += dout[(size_t)i * out_f + o];
            dbias[o] = (float)acc;
        }
    }
    if (!din)
        return;
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < in_f; k++) {
            double acc = 0.0;
            for (int o = 0; o < out_f; o++)
                acc += (double)dout[(size_t)i * out_f + o] *
                       weight[(size_t)o * in_f + k];
            din[(size_t)i * in_f + k] = (float)acc;
        }
    }
}
