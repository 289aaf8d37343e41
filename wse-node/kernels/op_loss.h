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

#endif
