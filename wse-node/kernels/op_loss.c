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
                       const int32_t *labels, int n, int classes, float scale)
{
    /* logits (n, classes), labels (n), dlogits (n, classes) or NULL */
    for (int i = 0; i < n; i++) {
        if (labels[i] < 0 || labels[i] >= classes) {
            if (dlogits)
                memset(dlogits, 0, sizeof(float) * n * (size_t)classes);
            return NAN;
        }
    }
    double loss = 0.0;
    for (int i = 0; i < n; i++) {
        size_t off = (size_t)i * classes;
        loss += softmax_xent_row(dlogits ? dlogits + off : NULL, logits + off,
                                 1, classes, labels[i], scale);
    }
    return loss;
}
