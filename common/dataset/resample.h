/* Resizing as the Model Zoo's U-Net processors do it: images by PyTorch's
 * antialiased bicubic interpolation (torchvision's Resize on a tensor,
 * antialias=True: Keys' cubic with a = -0.5, widened by the scale when
 * shrinking, like Pillow's), masks by nearest neighbour, in either
 * Pillow's rule (a mask resized as an image) or PyTorch's (a mask resized
 * as a tensor). One axis at a time: the 2D resize is separable. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* The weights that take n values to m along one axis. */
typedef struct resample_axis {
    uint32_t n, m;
    uint32_t taps;            /* the most inputs one output reads */
    uint32_t *first;          /* [m] the first input of each output */
    uint32_t *len;            /* [m] how many inputs it reads (<= taps) */
    float *w;                 /* [m * taps] their weights, summing to 1 */
} resample_axis;

/* Computes the antialiased bicubic weights from n to m (both >= 1), in
 * float32 as PyTorch does: scale s = n / m, support 2 max(s, 1), output k
 * centred at s (k + 0.5). Returns 0 or -ENOMEM. */
int resample_axis_init(resample_axis *a, uint32_t n, uint32_t m);
void resample_axis_deinit(resample_axis *a);

/* Output k: the weighted sum of in[(first + j) * stride], in float32, in
 * the order of j. */
float resample_axis_apply(const resample_axis *a, uint32_t k, const float *in, size_t stride);

/* The input index of each of m outputs from n inputs, nearest neighbour:
 * Pillow's (the input under the output's centre, floor((k + 0.5) n / m),
 * the position stepped in double as Pillow steps it) and PyTorch's
 * ("nearest": floor(k * (float)(n / m)), at most n - 1). */
void resample_nearest_pil(uint32_t n, uint32_t m, uint32_t *src);
void resample_nearest_torch(uint32_t n, uint32_t m, uint32_t *src);
