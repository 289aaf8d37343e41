/* Fully connected layer on GEMMs (kern_sgemm): one forward, two backward. */
#include "op_dense.h"

#include <string.h>

#include "kernels.h"
#include "kernels_internal.h"

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
