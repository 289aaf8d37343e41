/* Losses: softmax cross-entropy over classes and per pixel, binary
 * cross-entropy with logits, soft Dice. Sums in double, gradients in float.
 * The per-pixel losses compute their samples over the kernels' threads,
 * each sample whole by one thread, and add the samples' losses in order
 * afterwards: the same bits on any thread count. */
#include "op_loss.h"

#include <math.h>
#include <string.h>

#include "kernels.h"

/* One sample's loss (and its gradient, where the context asks). */
typedef double (*loss_sample_fn)(const void *ctx, int i);

/* Samples per block: their losses wait on the stack to be added in order. */
#define LOSS_BLOCK 64

typedef struct loss_job {
    loss_sample_fn fn;
    const void *ctx;
    int i0;
    double *part;
} loss_job;

static void loss_range(void *ctx, size_t lo, size_t hi)
{
    const loss_job *j = ctx;
    for (size_t u = lo; u < hi; u++)
        j->part[u] = j->fn(j->ctx, j->i0 + (int)u);
}

/* The sum over n samples of fn, each of per elements, in sample order. */
static double loss_samples(int n, size_t per, loss_sample_fn fn, const void *ctx)
{
    double part[LOSS_BLOCK], loss = 0.0;
    size_t grain = per >= 16384 ? 1 : 16384 / (per ? per : 1);
    for (int i0 = 0; i0 < n; i0 += LOSS_BLOCK) {
        int m = n - i0 < LOSS_BLOCK ? n - i0 : LOSS_BLOCK;
        loss_job j = {fn, ctx, i0, part};
        kernels_for((size_t)m, grain, loss_range, &j);
        for (int u = 0; u < m; u++)
            loss += part[u];
    }
    return loss;
}

/* Writes scale * (softmax(x) - onehot(label)) for one row of `classes`
 * values read with stride `stride` (1 for a row, H*W for a pixel of NCHW)
 * and returns -log softmax(x)[label]. d may be NULL. */
static double softmax_xent_row(float *d, const float *x, size_t stride,
                               int classes, int32_t label, float scale)
{
    float mx = x[0];
    for (int c = 1; c < classes; c++)
        if (x[c * stride] > mx)
            mx = x[c * stride];
    double sum = 0.0;
    for (int c = 0; c < classes; c++)
        sum += exp((double)x[c * stride] - mx);
    double lse = mx + log(sum);
    if (d) {
        double k = scale / sum;
        for (int c = 0; c < classes; c++)
            d[c * stride] = (float)(exp((double)x[c * stride] - mx) * k);
        d[label * stride] -= scale;
    }
    return lse - x[label * stride];
}

double op_softmax_xent(float *dlogits, const float *logits,
                       op_labels labels, int n, int classes, float scale)
{
    /* logits (n, classes), labels (n), dlogits (n, classes) or NULL */
    for (int i = 0; i < n; i++) {
        if (op_label(labels, (size_t)i) < 0 || op_label(labels, (size_t)i) >= classes) {
            if (dlogits)
                memset(dlogits, 0, sizeof(float) * n * (size_t)classes);
            return NAN;
        }
    }
    double loss = 0.0;
    for (int i = 0; i < n; i++) {
        size_t off = (size_t)i * classes;
        loss += softmax_xent_row(dlogits ? dlogits + off : NULL, logits + off,
                                 1, classes, op_label(labels, (size_t)i), scale);
    }
    return loss;
}

typedef struct xent_pixels {
    float *dlogits;
    const float *logits;
    op_labels labels;
    int classes;
    size_t hw;
    float pscale;
} xent_pixels;

static double xent_pixels_sample(const void *ctx, int i)
{
    const xent_pixels *c = ctx;
    size_t off = (size_t)i * c->classes * c->hw, lab = (size_t)i * c->hw;
    double sample = 0.0;
    for (size_t j = 0; j < c->hw; j++)
        sample += softmax_xent_row(c->dlogits ? c->dlogits + off + j : NULL, c->logits + off + j,
                                   c->hw, c->classes, op_label(c->labels, lab + j), c->pscale);
    return c->hw ? sample / (double)c->hw : 0.0;
}

double op_softmax_xent_pixels(float *dlogits, const float *logits,
                              op_labels labels, int n, int classes,
                              int h, int w, float scale)
{
    /* logits (n, classes, h, w), labels (n, h, w),
     * dlogits (n, classes, h, w) or NULL */
    size_t hw = (size_t)h * w, total = (size_t)n * hw;
    for (size_t j = 0; j < total; j++) {
        if (op_label(labels, j) < 0 || op_label(labels, j) >= classes) {
            if (dlogits)
                memset(dlogits, 0, sizeof(float) * total * classes);
            return NAN;
        }
    }
    xent_pixels c = {dlogits, logits, labels, classes, hw,
                     hw ? (float)(scale / (double)hw) : 0.0f};
    return loss_samples(n, hw * (size_t)classes, xent_pixels_sample, &c);
}

/* sigmoid in double without overflow */
static double sigmoid(double x)
{
    if (x >= 0.0)
        return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

/* The per-sample calls of the sigmoid losses. */
typedef struct sig_loss {
    float *dlogits;
    const float *logits, *targets;
    int per;
    float scale, eps;
} sig_loss;

static double bce_sample(const void *ctx, int i)
{
    const sig_loss *c = ctx;
    const float *x = c->logits + (size_t)i * c->per;
    const float *t = c->targets + (size_t)i * c->per;
    float *d = c->dlogits ? c->dlogits + (size_t)i * c->per : NULL;
    double k = c->per ? (double)c->scale / c->per : 0.0, sample = 0.0;
    for (int j = 0; j < c->per; j++) {
        double v = x[j], tv = t[j];
        sample += (v > 0.0 ? v : 0.0) - v * tv + log1p(exp(-fabs(v)));
        if (d)
            d[j] = (float)(k * (sigmoid(v) - tv));
    }
    return c->per ? sample / c->per : 0.0;
}

double op_bce_logits(float *dlogits, const float *logits,
                     const float *targets, int n, int per, float scale)
{
    /* logits, targets, dlogits (n, per) */
    sig_loss c = {dlogits, logits, targets, per, scale, 0.0f};
    return loss_samples(n, (size_t)(per > 0 ? per : 0), bce_sample, &c);
}

/* sum(p*t) and sum(p) + sum(t) of one sample's logits x and targets t. */
static void dice_sums(const float *x, const float *t, int per, double *inter, double *sum)
{
    double a = 0.0, b = 0.0;
    for (int j = 0; j < per; j++) {
        double p = sigmoid(x[j]);
        a += p * t[j];
        b += p + t[j];
    }
    *inter = a;
    *sum = b;
}

/* One sample's Dice loss from its sums, and its gradient into d (NULL:
 * none). */
static double dice_apply(float *d, const float *x, const float *t, int per, float eps,
                         float scale, double inter, double sum)
{
    /* With I = sum(p*t), S = sum(p) + sum(t): loss = 1 - (2I + eps)/(S + eps)
     * and dloss/dp_j = ((2I + eps) - 2 t_j (S + eps)) / (S + eps)^2,
     * dp/dx = p (1 - p) */
    double num = 2.0 * inter + eps, den = sum + eps;
    if (d) {
        double k = scale / (den * den);
        for (int j = 0; j < per; j++) {
            double p = sigmoid(x[j]);
            d[j] = (float)(k * (num - 2.0 * t[j] * den) * p * (1.0 - p));
        }
    }
    return 1.0 - num / den;
}

static double dice_sample(const void *ctx, int i)
{
    const sig_loss *c = ctx;
    const float *x = c->logits + (size_t)i * c->per;
    const float *t = c->targets + (size_t)i * c->per;
    double inter, sum;
    dice_sums(x, t, c->per, &inter, &sum);
    return dice_apply(c->dlogits ? c->dlogits + (size_t)i * c->per : NULL, x, t, c->per, c->eps,
                      c->scale, inter, sum);
}

double op_dice_logits(float *dlogits, const float *logits,
                      const float *targets, int n, int per, float eps,
                      float scale)
{
    /* logits, targets, dlogits (n, per) */
    sig_loss c = {dlogits, logits, targets, per, scale, eps};
    return loss_samples(n, (size_t)(per > 0 ? per : 0), dice_sample, &c);
}

double op_dice_logits_parts(float *dlogits, const float *logits, const float *targets, int n,
                            int per, float eps, float scale, const op_reduce *r, double *red)
{
    for (int i = 0; i < n; i++)
        dice_sums(logits + (size_t)i * per, targets + (size_t)i * per, per, &red[i], &red[n + i]);
    if (op_reduce_sum(r, red, 2 * (size_t)n) < 0)
        return NAN;
    double loss = 0.0;
    for (int i = 0; i < n; i++)
        loss += dice_apply(dlogits ? dlogits + (size_t)i * per : NULL, logits + (size_t)i * per,
                           targets + (size_t)i * per, per, eps, scale, red[i], red[n + i]);
    return loss;
}
