/* Losses: softmax cross-entropy over classes and per pixel, binary
 * cross-entropy with logits, soft Dice. Sums in double, gradients in float. */
#include "op_loss.h"

#include <math.h>
#include <string.h>

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
    double loss = 0.0;
    float pscale = hw ? (float)(scale / (double)hw) : 0.0f;
    for (int i = 0; i < n; i++) {
        size_t off = (size_t)i * classes * hw;
        size_t lab = (size_t)i * hw;
        double sample = 0.0;
        for (size_t j = 0; j < hw; j++)
            sample += softmax_xent_row(dlogits ? dlogits + off + j : NULL,
                                       logits + off + j, hw, classes,
                                       op_label(labels, lab + j), pscale);
        if (hw)
            loss += sample / (double)hw;
    }
    return loss;
}

/* sigmoid in double without overflow */
static double sigmoid(double x)
{
    if (x >= 0.0)
        return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

double op_bce_logits(float *dlogits, const float *logits,
                     const float *targets, int n, int per, float scale)
{
    /* logits, targets, dlogits (n, per) */
    double loss = 0.0;
    double k = per ? (double)scale / per : 0.0;
    for (int i = 0; i < n; i++) {
        const float *x = logits + (size_t)i * per;
        const float *t = targets + (size_t)i * per;
        float *d = dlogits ? dlogits + (size_t)i * per : NULL;
        double sample = 0.0;
        for (int j = 0; j < per; j++) {
            double v = x[j], tv = t[j];
            sample += (v > 0.0 ? v : 0.0) - v * tv + log1p(exp(-fabs(v)));
            if (d)
                d[j] = (float)(k * (sigmoid(v) - tv));
        }
        if (per)
            loss += sample / per;
    }
    return loss;
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

double op_dice_logits(float *dlogits, const float *logits,
                      const float *targets, int n, int per, float eps,
                      float scale)
{
    /* logits, targets, dlogits (n, per) */
    double loss = 0.0;
    for (int i = 0; i < n; i++) {
        const float *x = logits + (size_t)i * per;
        const float *t = targets + (size_t)i * per;
        double inter, sum;
        dice_sums(x, t, per, &inter, &sum);
        loss += dice_apply(dlogits ? dlogits + (size_t)i * per : NULL, x, t, per, eps, scale,
                           inter, sum);
    }
    return loss;
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
