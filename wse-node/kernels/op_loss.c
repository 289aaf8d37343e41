/* Losses: softmax cross-entropy over classes and per pixel, binary
 * cross-entropy with logits (also against one-hot labels), soft Dice, and
 * the Model Zoo's softmax cross entropy plus per-class Dice. Sums in
 * double, gradients in float.
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

/* ---- multilabel BCE: one sigmoid per class against the one-hot labels ---- */

typedef struct multilabel {
    float *dlogits;
    const float *logits;
    op_labels labels;
    int classes;
    size_t hw;
    double k;      /* the gradient's factor: scale / (classes * hw) */
} multilabel;

static double multilabel_sample(const void *ctx, int i)
{
    const multilabel *c = ctx;
    size_t per = (size_t)c->classes * c->hw, lab = (size_t)i * c->hw;
    double sample = 0.0;
    for (int k = 0; k < c->classes; k++) {
        size_t off = (size_t)i * per + (size_t)k * c->hw;
        const float *x = c->logits + off;
        float *d = c->dlogits ? c->dlogits + off : NULL;
        for (size_t j = 0; j < c->hw; j++) {
            double v = x[j], t = op_label(c->labels, lab + j) == k ? 1.0 : 0.0;
            sample += (v > 0.0 ? v : 0.0) - v * t + log1p(exp(-fabs(v)));
            if (d)
                d[j] = (float)(c->k * (sigmoid(v) - t));
        }
    }
    return per ? sample / (double)per : 0.0;
}

/* Whether every one of the count labels is in [0, classes). */
static bool labels_in_range(op_labels labels, size_t count, int classes)
{
    for (size_t j = 0; j < count; j++)
        if (op_label(labels, j) < 0 || op_label(labels, j) >= classes)
            return false;
    return true;
}

double op_multilabel_bce(float *dlogits, const float *logits, op_labels labels, int n,
                         int classes, int h, int w, float scale)
{
    /* logits (n, classes, h, w), labels (n, h, w), dlogits (n, classes, h, w) or NULL */
    size_t hw = (size_t)h * w, per = hw * (size_t)classes;
    if (!labels_in_range(labels, (size_t)n * hw, classes)) {
        if (dlogits)
            memset(dlogits, 0, sizeof(float) * (size_t)n * per);
        return NAN;
    }
    multilabel c = {dlogits, logits, labels, classes, hw, per ? (double)scale / (double)per : 0.0};
    return loss_samples(n, per, multilabel_sample, &c);
}

/* ---- ssce_dice: softmax cross entropy plus the per-class soft Dice ---- */

#define SSCE_DICE_EPS 1e-6 /* the Model Zoo's Dice: added to the denominator only */

typedef struct ssce_dice {
    float *dlogits;
    const float *logits;
    op_labels labels;
    int classes;
    size_t hw;
    double *sums;  /* per sample OP_SSCE_DICE_SUMS(classes) */
    float scale;
} ssce_dice;

typedef void (*sample_fn)(const ssce_dice *c, int i);

typedef struct sample_job {
    sample_fn fn;
    const ssce_dice *c;
} sample_job;

static void sample_range(void *ctx, size_t lo, size_t hi)
{
    const sample_job *j = ctx;
    for (size_t i = lo; i < hi; i++)
        j->fn(j->c, (int)i);
}

/* fn for each of n samples of per elements, over the kernels' threads:
 * each writes only its own sample's sums and gradient. */
static void each_sample(int n, size_t per, sample_fn fn, const ssce_dice *c)
{
    sample_job j = {fn, c};
    kernels_for((size_t)n, per >= 16384 ? 1 : 16384 / (per ? per : 1), sample_range, &j);
}

/* The largest of a pixel's classes logits (stride apart). */
static float pixel_max(const float *x, size_t stride, int classes)
{
    float mx = x[0];
    for (int k = 1; k < classes; k++)
        if (x[k * stride] > mx)
            mx = x[k * stride];
    return mx;
}

/* Sample i's sums over its pixels: sum p*t, sum p and sum t per class,
 * and the cross entropy's sum. */
static void ssce_sums(const ssce_dice *c, int i)
{
    int C = c->classes;
    size_t hw = c->hw, lab = (size_t)i * hw;
    double *s = c->sums + (size_t)i * OP_SSCE_DICE_SUMS(C);
    double *inter = s, *psum = s + C, *tsum = s + 2 * C, xent = 0.0;
    memset(s, 0, OP_SSCE_DICE_SUMS(C) * sizeof(double));
    const float *x = c->logits + (size_t)i * C * hw;
    for (size_t j = 0; j < hw; j++) {
        const float *xj = x + j;
        float mx = pixel_max(xj, hw, C);
        double sum = 0.0;
        for (int k = 0; k < C; k++)
            sum += exp((double)xj[k * hw] - mx);
        int32_t y = op_label(c->labels, lab + j);
        for (int k = 0; k < C; k++) {
            double p = exp((double)xj[k * hw] - mx) / sum;
            psum[k] += p;
            if (k == y)
                inter[k] += p;
        }
        tsum[y] += 1.0;
        xent += mx + log(sum) - xj[(size_t)y * hw];
    }
    s[3 * C] = xent;
}

/* One sample's loss from its sums over the whole sample. The sums become
 * the gradient's coefficients: with K the classes in the Dice's mean and
 * den_c = sum t_c + sum p_c + eps, dloss/dp_c at a pixel is
 * a_c + t_c b_c, a_c = I_c / (|K| den_c^2) in place of I_c = sum p_c t_c,
 * b_c = -1 / (|K| den_c) in place of sum p_c (both 0 outside K), and the
 * sample's pixel count in place of sum t_0. */
static double ssce_apply(double *s, int C, bool include_background)
{
    double *inter = s, *psum = s + C, *tsum = s + 2 * C, pixels = 0.0, dice = 0.0;
    int first = include_background || C < 2 ? 0 : 1;
    double kk = C - first;
    for (int k = 0; k < C; k++)
        pixels += tsum[k];
    for (int k = 0; k < C; k++) {
        double den = tsum[k] + psum[k] + SSCE_DICE_EPS;
        if (k >= first) {
            dice += 2.0 * inter[k] / den;
            inter[k] = inter[k] / (kk * den * den);
            psum[k] = -1.0 / (kk * den);
        } else {
            inter[k] = psum[k] = 0.0;
        }
    }
    double xent = pixels > 0.0 ? s[3 * C] / pixels : 0.0;
    tsum[0] = pixels;
    return 0.5 * xent + 0.5 * (1.0 - dice / kk);
}

/* Sample i's gradient from its coefficients (ssce_apply): at each pixel,
 * with g_c = dloss/dp_c, dloss/dx_k = 0.5/pixels (p_k - t_k) +
 * p_k (g_k - sum_c p_c g_c). */
static void ssce_grad(const ssce_dice *c, int i)
{
    int C = c->classes;
    size_t hw = c->hw, lab = (size_t)i * hw, off = (size_t)i * C * hw;
    const double *s = c->sums + (size_t)i * OP_SSCE_DICE_SUMS(C), *a = s, *b = s + C;
    double kx = s[2 * C] > 0.0 ? 0.5 / s[2 * C] : 0.0;
    const float *x = c->logits + off;
    float *d = c->dlogits + off;
    for (size_t j = 0; j < hw; j++) {
        const float *xj = x + j;
        float mx = pixel_max(xj, hw, C);
        double sum = 0.0, sum_a = 0.0;
        for (int k = 0; k < C; k++) {
            double e = exp((double)xj[k * hw] - mx);
            sum += e;
            sum_a += e * a[k];
        }
        int32_t y = op_label(c->labels, lab + j);
        double py = exp((double)xj[(size_t)y * hw] - mx) / sum;
        double pg = sum_a / sum + py * b[y]; /* sum_c p_c g_c */
        for (int k = 0; k < C; k++) {
            double p = exp((double)xj[k * hw] - mx) / sum;
            double g = kx * p + p * (a[k] - pg);
            if (k == y)
                g += p * b[k] - kx;
            d[k * hw + j] = (float)(c->scale * g);
        }
    }
}

double op_ssce_dice_parts(float *dlogits, const float *logits, op_labels labels, int n,
                          int classes, int h, int w, bool include_background, float scale,
                          const op_reduce *r, double *sums)
{
    /* logits (n, classes, h, w), labels (n, h, w), dlogits (n, classes, h, w)
     * or NULL, sums (n, OP_SSCE_DICE_SUMS(classes)) */
    size_t hw = (size_t)h * w, per = hw * (size_t)classes, S = OP_SSCE_DICE_SUMS(classes);
    ssce_dice c = {dlogits, logits, labels, classes, hw, sums, scale};
    /* a bad label makes every stripe's totals NAN: each then knows */
    if (labels_in_range(labels, (size_t)n * hw, classes)) {
        each_sample(n, per, ssce_sums, &c);
    } else {
        for (size_t k = 0; k < (size_t)n * S; k++)
            sums[k] = NAN;
    }
    if (op_reduce_sum(r, sums, (size_t)n * S) < 0)
        return NAN;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < classes; k++)
            if (isnan(sums[(size_t)i * S + 2 * (size_t)classes + (size_t)k])) {
                if (dlogits)
                    memset(dlogits, 0, sizeof(float) * (size_t)n * per);
                return NAN;
            }
    double loss = 0.0;
    for (int i = 0; i < n; i++)
        loss += ssce_apply(sums + (size_t)i * S, classes, include_background);
    if (dlogits)
        each_sample(n, per, ssce_grad, &c);
    return loss;
}

double op_ssce_dice(float *dlogits, const float *logits, op_labels labels, int n, int classes,
                    int h, int w, bool include_background, float scale, double *sums)
{
    return op_ssce_dice_parts(dlogits, logits, labels, n, classes, h, w, include_background,
                              scale, NULL, sums);
}
