/* Seeded augmentation of image samples: which transforms a sample gets is a
 * pure function of (seed, epoch, index), so every worker makes the same
 * choice, and an image and its mask always move together. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    AUGMENT_FLIP_H = 1u << 0, /* mirror left-right */
    AUGMENT_FLIP_V = 1u << 1, /* mirror top-bottom */
    /* Quarter turns counter-clockwise (torch.rot90 over (H, W)), after the
     * flips: AUGMENT_TURNS(flags) of them. One or three need a square image. */
    AUGMENT_TURN_SHIFT = 2,
    AUGMENT_TURN_MASK = 3u << AUGMENT_TURN_SHIFT,
    /* Not geometric: the Model Zoo's brightness step (+0.2 on the
     * normalized inputs), which augment_apply leaves to its caller. */
    AUGMENT_BRIGHTEN = 1u << 4,
};

#define AUGMENT_TURNS(flags) (((flags) & AUGMENT_TURN_MASK) >> AUGMENT_TURN_SHIFT)

/* The transforms sample idx gets in epoch `epoch`: a subset of the enabled
 * flips, each with probability 1/2. */
unsigned augment_draw(uint64_t seed, uint64_t epoch, uint64_t idx, bool flip_h, bool flip_v);

/* The Model Zoo U-Net processors' augment_data for sample idx in epoch
 * `epoch`: a left-right flip with probability 1/2, then 0, 1 or 2 quarter
 * turns, each with probability 1/3 (its randint(0, 3)), doubled for an
 * image that is not square (0 or 2 turns; 4 is none), and AUGMENT_BRIGHTEN
 * with probability 1/2. Draws of their own, independent of augment_draw's. */
unsigned augment_draw_mz(uint64_t seed, uint64_t epoch, uint64_t idx, bool square);

/* An image (C, H, W) of values of x_size bytes, and optionally its (H, W)
 * per-pixel labels of mask_size bytes (1 or 4 each: 8-bit or 32-bit
 * values, floats included; a transform only moves them). */
typedef struct augment_image {
    void *x;
    size_t x_size;
    uint32_t c, h, w;
    void *mask;               /* NULL: no per-pixel labels */
    size_t mask_size;
} augment_image;

/* Applies the transforms in `flags` in place to an image and its mask:
 * the flips, then the quarter turns (an odd number only when h == w). */
void augment_apply(unsigned flags, const augment_image *img);

/* A random crop from the image padded by `pad` pixels on every side (zeros;
 * background, class 0, in the mask), back to (H, W): the content moves by
 * up to pad pixels each way. The offset is a pure function of (seed, epoch,
 * idx). pad 0 leaves the sample as it is. */
void augment_crop(uint64_t seed, uint64_t epoch, uint64_t idx, uint32_t pad,
                  const augment_image *img);
