/* Losses with their gradients. Each returns the loss SUMMED over the samples
 * it is given (so that sums over data-parallel replicas are exact) and writes
 * the gradient multiplied by the caller's `scale` (typically 1/global_batch). */
#ifndef OP_LOSS_H
#define OP_LOSS_H

#include <stdint.h>

/* logits is (n, classes), labels is (n) in [0, classes).
 * Returns sum over samples of -log softmax(logits)[label], accumulated in
 * double. Writes dlogits (n, classes) = scale * (softmax(logits) -
 * onehot(label)) unless dlogits is NULL; dlogits must not alias logits.
 * A label out of range returns NAN and zeroes dlogits. */
double op_softmax_xent(float *dlogits, const float *logits,
                       const int32_t *labels, int n, int classes, float scale);

#endif
