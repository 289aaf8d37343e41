/* Internal to the png_segmentation reader: what its libpng-free part (the
 * listing and the headers, ds_png.c: enough to size and check a data set)
 * and its decoding part (ds_png_read.c, libpng) share. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "dataset_reader.h"

/* Images wider or taller than this are refused before decoding. */
#define DS_PNG_MAX_SIDE 65536u

/* The colour types of the PNG specification (libpng's PNG_COLOR_TYPE_*). */
enum {
    DS_PNG_GRAY = 0,
    DS_PNG_RGB = 2,
    DS_PNG_PALETTE = 3,
    DS_PNG_GRAY_ALPHA = 4,
    DS_PNG_RGBA = 6,
};

typedef struct ds_png {
    char **names;             /* file names common to images/ and masks/, sorted; owned */
    size_t count;
} ds_png;

/* What a PNG header says. */
typedef struct ds_png_header {
    uint32_t width, height;
    int color_type;           /* DS_PNG_* */
    int bit_depth;            /* 1, 2, 4, 8 or 16 */
} ds_png_header;

enum ds_png_kind { DS_PNG_IMAGE, DS_PNG_MASK };

/* Channels an image gives after the transforms: 1 for gray, 3 for colour. */
uint32_t ds_png__image_channels(int color_type);
const char *ds_png__color_name(int color_type);

/* Checks a header against the model input (C, H, W) for an image, or
 * against the image's (H, W) and a class per pixel for a mask. Returns 0
 * or -EINVAL with a message naming path. */
int ds_png__check(const char *path, enum ds_png_kind kind, uint32_t C, uint32_t H, uint32_t W,
                  const ds_png_header *hd, char *err, size_t errlen);

/* data_dir/sub/name into dst (PATH_MAX bytes). Returns 0 or -ENAMETOOLONG. */
int ds_png__path(char *dst, const dataset *d, const char *sub, const char *name, char *err,
                 size_t errlen);

/* The reader's open (lists both directories, checks every header) and
 * close; no decoding. */
int ds_png__open(dataset *d, const Appliance__PlanInput *in, char *err, size_t errlen);
void ds_png__close(dataset *d);
