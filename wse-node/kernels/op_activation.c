/* Elementwise activations and their derivatives, split in ranges over the
 * operators' threads (kern__for) when the arrays are large. */
#include "op_activation.h"

#include <math.h>

#include "kernels.h"

/* Elements a thread takes at the least: below, one thread does it all. */
#define GRAIN (64 * 1024)

typedef struct act {
    float *out;        /* y, or dx */
    const float *a;    /* x, or dy */
    const float *b;    /* the backward pass's x or y */
    float slope;
} act;

static void relu_fwd(void *ctx, size_t lo, size_t hi)
{
    const act *p = ctx;
    for (size_t i = lo; i < hi; i++)
        p->out[i] = p->a[i] > 0.0f ? p->a[i] : 0.0f;
}

static void relu_bwd(void *ctx, size_t lo, size_t hi)
{
    /* both sides loaded, so that the select vectorizes instead of
     * branching on each sign */
    const act *p = ctx;
    for (size_t i = lo; i < hi; i++) {
        float d = p->a[i];
        p->out[i] = p->b[i] > 0.0f ? d : 0.0f;
    }
}

static void leaky_fwd(void *ctx, size_t lo, size_t hi)
{
    const act *p = ctx;
    for (size_t i = lo; i < hi; i++)
        p->out[i] = p->a[i] > 0.0f ? p->a[i] : p->slope * p->a[i];
}

static void leaky_bwd(void *ctx, size_t lo, size_t hi)
{
    const act *p = ctx;
    for (size_t i = lo; i < hi; i++) {
        float d = p->a[i];
        p->out[i] = p->b[i] > 0.0f ? d : p->slope * d;
    }
}

static void gelu_fwd(void *ctx, size_t lo, size_t hi)
{
    const act *p = ctx;
    for (size_t i = lo; i < hi; i++)
        p->out[i] = 0.5f * p->a[i] * (1.0f + erff(p->a[i] * (float)M_SQRT1_2));
}

static void gelu_bwd(void *ctx, size_t lo, size_t hi)
{
    const act *p = ctx;
    const float inv_sqrt_2pi = 0.3989422804014327f;
    for (size_t i = lo; i < hi; i++) {
        float v = p->b[i];
        float cdf = 0.5f * (1.0f + erff(v * (float)M_SQRT1_2));
        float pdf = inv_sqrt_2pi * expf(-0.5f * v * v);
        p->out[i] = p->a[i] * (cdf + v * pdf);
    }
}

static void sigmoid_fwd(void *ctx, size_t lo, size_t hi)
{
    /* exp of a non-positive number only, no overflow */
    const act *p = ctx;
    for (size_t i = lo; i < hi; i++) {
        float v = p->a[i];
        if (v >= 0.0f) {
            p->out[i] = 1.0f / (1.0f + expf(-v));
        } else {
            float e = expf(v);
            p->out[i] = e / (1.0f + e);
        }
    }
}

static void sigmoid_bwd(void *ctx, size_t lo, size_t hi)
{
    const act *p = ctx;
    for (size_t i = lo; i < hi; i++)
        p->out[i] = p->a[i] * p->b[i] * (1.0f - p->b[i]);
}

static void tanh_fwd(void *ctx, size_t lo, size_t hi)
{
    const act *p = ctx;
    for (size_t i = lo; i < hi; i++)
        p->out[i] = tanhf(p->a[i]);
}

static void tanh_bwd(void *ctx, size_t lo, size_t hi)
{
    const act *p = ctx;
    for (size_t i = lo; i < hi; i++)
        p->out[i] = p->a[i] * (1.0f - p->b[i] * p->b[i]);
}

/* The transcendental ones cost more an element: smaller ranges pay. */
static void run(kernels_range_fn fn, size_t count, size_t grain, float *out, const float *a,
                const float *b, float slope)
{
    act p = {.out = out, .a = a, .b = b, .slope = slope};
    kernels_for(count, grain, fn, &p);
}

void op_relu_forward(float *out, const float *in, size_t count)
{
    run(relu_fwd, count, GRAIN, out, in, NULL, 0.0f);
}

void op_relu_backward(float *din, const float *dout, const float *x, size_t count)
{
    run(relu_bwd, count, GRAIN, din, dout, x, 0.0f);
}

void op_leaky_relu_forward(float *out, const float *in, size_t count, float slope)
{
    run(leaky_fwd, count, GRAIN, out, in, NULL, slope);
}

void op_leaky_relu_backward(float *din, const float *dout, const float *x, size_t count,
                            float slope)
{
    run(leaky_bwd, count, GRAIN, din, dout, x, slope);
}

void op_gelu_forward(float *out, const float *in, size_t count)
{
    run(gelu_fwd, count, GRAIN / 8, out, in, NULL, 0.0f);
}

void op_gelu_backward(float *din, const float *dout, const float *x, size_t count)
{
    run(gelu_bwd, count, GRAIN / 8, din, dout, x, 0.0f);
}

void op_sigmoid_forward(float *out, const float *in, size_t count)
{
    run(sigmoid_fwd, count, GRAIN / 8, out, in, NULL, 0.0f);
}

void op_sigmoid_backward(float *din, const float *dout, const float *y, size_t count)
{
    run(sigmoid_bwd, count, GRAIN, din, dout, y, 0.0f);
}

void op_tanh_forward(float *out, const float *in, size_t count)
{
    run(tanh_fwd, count, GRAIN / 8, out, in, NULL, 0.0f);
}

void op_tanh_backward(float *din, const float *dout, const float *y, size_t count)
{
    run(tanh_bwd, count, GRAIN, din, dout, y, 0.0f);
}
