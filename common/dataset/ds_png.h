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

/* Reads the signature and the IHDR chunk of path into *hd, as the PNG
 * specification lays them out, without decoding anything: the first 33
 * bytes of the file. Returns 0, or a negative code with a message naming
 * path. Thread-safe. */
int ds_png__header(const char *path, ds_png_header *hd, char *err, size_t errlen);

/* data_dir/sub/name into dst (PATH_MAX bytes). Returns 0 or -ENAMETOOLONG. */
int ds_png__path(char *dst, const dataset *d, const char *sub, const char *name, char *err,
                 size_t errlen);

/* The reader's open (lists both directories, checks every header) and
 * close; no decoding. */
int ds_png__open(dataset *d, const Appliance__PlanInput *in, char *err, size_t errlen);
void ds_png__close(dataset *d);

/* Decides, from its header, whether a file decodes: returns 0, or a
 * negative code with a message naming path. */
typedef int (*ds_png_check_fn)(void *arg, const char *path, const ds_png_header *hd, char *err,
                               size_t errlen);
/* Takes decoded row y: for an image W * C bytes, C the channels
 * ds_png__image_channels gives (gray, or RGB: alpha dropped, palettes
 * expanded, 16 bits scaled to 8, low depths widened); for a mask W bytes
 * of values not rescaled (2 * W big-endian for 16 bits). Returns 0, or a
 * negative code with a message in err that stops the decoding. */
typedef int (*ds_png_row_fn)(void *arg, const ds_png_header *hd, uint32_t y, const uint8_t *row,
                             char *err, size_t errlen);

/* Reads the header of path, asks check(arg, ...) whether to go on, then
 * decodes the pixels and hands each row to row(arg, ...): row by row
 * through one row buffer, so that a large image is not held twice (an
 * interlaced PNG, whose passes revisit every row, is decoded whole first).
 * Returns 0 or a negative code with a message naming path. Thread-safe
 * (ds_png_read.c: libpng). */
int ds_png__decode(const char *path, enum ds_png_kind kind, ds_png_check_fn check,
                   ds_png_row_fn row, void *arg, char *err, size_t errlen);
