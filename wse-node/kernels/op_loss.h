/* Losses with their gradients. Each returns the loss SUMMED over the samples
 * it is given (so that sums over data-parallel replicas are exact) and writes
 * the gradient multiplied by the caller's `scale` (typically 1/global_batch). */
#ifndef OP_LOSS_H
#define OP_LOSS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "op_reduce.h"

/* Class labels as they arrive: int32, or one byte each. */
typedef struct op_labels {
    const void *p;
    bool u8;
} op_labels;

#define OP_LABELS_I32(ptr) ((op_labels){(ptr), false})
#define OP_LABELS_U8(ptr) ((op_labels){(ptr), true})

static inline int32_t op_label(op_labels l, size_t i)
{
    return l.u8 ? (int32_t)((const uint8_t *)l.p)[i] : ((const int32_t *)l.p)[i];
}

/* logits is (n, classes), labels is (n) in [0, classes).
 * Returns sum over samples of -log softmax(logits)[label], accumulated in
 * double. Writes dlogits (n, classes) = scale * (softmax(logits) -
 * onehot(label)) unless dlogits is NULL; dlogits must not alias logits.
 * A label out of range returns NAN and zeroes dlogits. */
double op_softmax_xent(float *dlogits, const float *logits,
                       op_labels labels, int n, int classes, float scale);

/* logits is (n, classes, h, w), labels is (n, h, w) in [0, classes).
 * Returns the sum over samples of the per-sample MEAN over the h*w pixels of
 * -log softmax over classes. Writes dlogits (n, classes, h, w) =
 * scale/(h*w) * (softmax - onehot) unless NULL; must not alias logits.
 * A label out of range returns NAN and zeroes dlogits. */
double op_softmax_xent_pixels(float *dlogits, const float *logits,
                              op_labels labels, int n, int classes,
                              int h, int w, float scale);

/* logits and targets are (n, per), targets in [0, 1]. Returns the sum over
 * samples of the per-sample mean over the `per` elements of
 * max(x, 0) - x*t + log(1 + exp(-|x|)). Writes dlogits (n, per) =
 * scale/per * (sigmoid(x) - t) unless NULL; may alias logits. */
double op_bce_logits(float *dlogits, const float *logits,
                     const float *targets, int n, int per, float scale);

/* logits and targets are (n, per). Soft Dice per sample with
 * p = sigmoid(logit): 1 - (2*sum(p*t) + eps) / (sum(p) + sum(t) + eps),
 * summed over samples. Writes dlogits (n, per) = scale * dloss/dlogit
 * unless NULL; may alias logits. */
double op_dice_logits(float *dlogits, const float *logits,
                      const float *targets, int n, int per, float eps,
                      float scale);

/* op_dice_logits over one stripe of partitioned samples: each sample's sums
 * totalled over its stripes by r (op_reduce.h), so that the loss and the
 * gradient are those of the whole sample. Returns the whole samples' loss
 * (the same on every stripe), or NAN when r fails. red is room for 2n
 * doubles. */
double op_dice_logits_parts(float *dlogits, const float *logits, const float *targets, int n,
                            int per, float eps, float scale, const op_reduce *r, double *red);

/* logits is (n, classes, h, w), labels is (n, h, w) in [0, classes).
 * The Model Zoo's "multilabel_bce": BCE with logits against the one-hot
 * labels (channel c's target is 1 where the label is c). Returns the sum
 * over samples of the per-sample mean over the classes*h*w elements of
 * max(x, 0) - x*t + log(1 + exp(-|x|)). Writes dlogits (n, classes, h, w)
 * = scale/(classes*h*w) * (sigmoid(x) - t) unless NULL; may alias logits.
 * A label out of range returns NAN and zeroes dlogits. */
double op_multilabel_bce(float *dlogits, const float *logits, op_labels labels, int n,
                         int classes, int h, int w, float scale);

/* The doubles op_ssce_dice keeps per sample: for each class the sums over
 * the pixels of p*t, of p and of t, then the cross entropy's sum. */
#define OP_SSCE_DICE_SUMS(classes) (3 * (size_t)(classes) + 1)

/* logits is (n, classes, h, w), labels is (n, h, w) in [0, classes),
 * classes >= 2. The Model Zoo's "ssce_dice" (DiceCELoss, both weights
 * 0.5): with p = softmax over the classes and t = onehot(label), per
 * sample
 *   0.5 * mean_hw(-log p[label]) + 0.5 * (1 - mean_{c in K} dice_c),
 *   dice_c = 2 sum_hw(p_c t_c) / (sum_hw t_c + sum_hw p_c + 1e-6),
 * K every class when include_background, else 1 .. classes-1 (the Model
 * Zoo zeroes class 0 of p and t and corrects the mean over all classes by
 * classes/(classes-1): the same). Returns the sum over samples. Writes
 * dlogits (n, classes, h, w) = scale * dloss/dlogits unless NULL; must not
 * alias logits. sums is room for n * OP_SSCE_DICE_SUMS(classes) doubles.
 * A label out of range returns NAN and zeroes dlogits. */
double op_ssce_dice(float *dlogits, const float *logits, op_labels labels, int n, int classes,
                    int h, int w, bool include_background, float scale, double *sums);

/* op_ssce_dice over one stripe of partitioned samples (h its rows): each
 * sample's sums, the pixel count and the cross entropy's among them,
 * totalled over its stripes by r (op_reduce.h), so that the loss and the
 * gradient are those of the whole sample. Returns the whole samples' loss
 * (the same on every stripe), or NAN when r fails or a label of any
 * stripe is out of range (every stripe then zeroes its dlogits: a stripe
 * with a bad label still takes its part in the sum). */
double op_ssce_dice_parts(float *dlogits, const float *logits, op_labels labels, int n,
                          int classes, int h, int w, bool include_background, float scale,
                          const op_reduce *r, double *sums);

#endif
