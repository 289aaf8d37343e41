/* The Model Zoo's U-Net losses of the kernels on inputs read from stdin,
 * for bench/seg_loss_vs_torch.py to hold against PyTorch: reads six int32
 * (kind: 0 ssce_dice, 1 multilabel_bce; n, c, h, w; include_background),
 * the float32 logits (n, c, h, w) and the int32 labels (n, h, w); writes
 * the batch-mean loss (float64) and its gradient (float32, the kernels'
 * scale 1/n). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "op_loss.h"

int main(void)
{
    int32_t hd[6];
    if (fread(hd, sizeof(int32_t), 6, stdin) != 6)
        return 2;
    int kind = hd[0], n = hd[1], c = hd[2], h = hd[3], w = hd[4];
    if (n < 1 || c < 2 || h < 1 || w < 1 || (int64_t)n * c * h * w > (1 << 26))
        return 2;
    size_t nx = (size_t)n * c * h * w, ny = (size_t)n * h * w;
    float *x = malloc(nx * sizeof(float)), *d = malloc(nx * sizeof(float));
    int32_t *y = malloc(ny * sizeof(int32_t));
    double *sums = malloc((size_t)n * OP_SSCE_DICE_SUMS(c) * sizeof(double));
    int rc = 2;
    if (!x || !d || !y || !sums || fread(x, sizeof(float), nx, stdin) != nx ||
        fread(y, sizeof(int32_t), ny, stdin) != ny)
        goto out;
    float scale = 1.0f / (float)n;
    double loss = kind == 0 ? op_ssce_dice(d, x, OP_LABELS_I32(y), n, c, h, w, hd[5] != 0, scale,
                                           sums)
                            : op_multilabel_bce(d, x, OP_LABELS_I32(y), n, c, h, w, scale);
    loss /= n;
    if (fwrite(&loss, sizeof(loss), 1, stdout) == 1 && fwrite(d, sizeof(float), nx, stdout) == nx)
        rc = 0;
out:
    free(x);
    free(d);
    free(y);
    free(sums);
    return rc;
}
