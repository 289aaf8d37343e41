/* Building a sample from the decoded pixels of its files, as the Model
 * Zoo's processors build theirs: an image's channels converted to the
 * model's C (Pillow's "L" for gray), resized to (min(H, max_h), min(W,
 * max_w)) by antialiased bicubic, then tiled to (H, W); a mask resized by
 * nearest neighbour and tiled the same way. The decoders hand over pixels
 * in spans of a row, so that no image is held whole beyond what a resize
 * needs (one float per channel, input row and output column). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dataset_reader.h"
#include "resample.h"

/* Gray from 8-bit RGB as Pillow converts to "L": the ITU-R 601-2 luma
 * R 299/1000 + G 587/1000 + B 114/1000, rounded to nearest as Pillow
 * computes it in 16-bit fixed point. */
static inline uint8_t ds_image_luma(uint8_t r, uint8_t g, uint8_t b)
{
    return (uint8_t)((r * 19595u + g * 38470u + b * 7471u + 0x8000u) >> 16);
}

/* An image's pixels on their way into sample x (C, H, W). */
typedef struct ds_image {
    const dataset *d;
    void *x;                  /* the sample's inputs, (C, H, W) in d's encoding */
    uint32_t fc, fh, fw;      /* the file's colour channels (1 or 3) and size */
    uint32_t mh, mw;          /* the size it is resized to, at the top left of x */
    bool resize;              /* (mh, mw) differs from (fh, fw) */
    resample_axis ax, ay;     /* resize: weights across and down */
    float *tmp;               /* resize: [C][fh][mw], each row resized across */
    float *row;               /* resize: one channel of one input row, fw values */
} ds_image;

/* Starts an image of fc channels (1: gray, 3: RGB) and fh x fw pixels
 * that becomes a (min(H, max_h), min(W, max_w)) image tiled to (H, W);
 * max 0: no limit. A reader that does not resize (Inria) checks that the
 * file has the sample's size before. Returns 0, or -ENOMEM with a message;
 * ds_image_deinit after either. */
int ds_image_init(ds_image *s, const dataset *d, void *x, uint32_t fc, uint32_t fh, uint32_t fw,
                  uint32_t max_h, uint32_t max_w, char *err, size_t errlen);

/* Pixels x0 .. x0+n-1 of file row y: channel c of pixel i at ch[c][i *
 * stride]. Without resizing any span in any order; with it, whole rows
 * (x0 = 0, n = fw) in order. */
void ds_image_span(ds_image *s, uint32_t y, uint32_t x0, uint32_t n, const uint8_t *const *ch,
                   size_t stride);

/* After the last row: resizes down and tiles. */
void ds_image_finish(ds_image *s);
void ds_image_deinit(ds_image *s);

/* How a mask is resized. */
enum ds_nearest { DS_NEAREST_PIL, DS_NEAREST_TORCH };

/* A mask's classes on their way into the sample's labels (H, W). */
typedef struct ds_mask {
    const dataset *d;
    void *labels;             /* (H, W) in d's label encoding */
    uint32_t fh, fw, mh, mw;  /* the file's size; the size it is resized to */
    bool resize;
    uint32_t *sx, *sy;        /* resize: the file column of each of mw, row of each of mh */
    uint32_t next;            /* resize: the first output row not yet written */
} ds_mask;

int ds_mask_init(ds_mask *m, const dataset *d, void *labels, uint32_t fh, uint32_t fw,
                 uint32_t max_h, uint32_t max_w, enum ds_nearest rule, char *err, size_t errlen);
/* Classes (below num_classes) of pixels x0 .. x0+n-1 of file row y; the
 * same rules of order as ds_image_span. */
void ds_mask_span(ds_mask *m, uint32_t y, uint32_t x0, uint32_t n, const uint8_t *cls);
void ds_mask_finish(ds_mask *m);
void ds_mask_deinit(ds_mask *m);
