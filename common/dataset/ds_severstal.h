/* Internal to the SeverstalBinaryClassDataProcessor reader: what its
 * libjpeg-free part (ds_severstal.c: train.csv, the split, the JPEG
 * headers) and its decoding part (ds_severstal_read.c, libjpeg) share. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "dataset_reader.h"
#include "imghdr.h"
#include "rle.h"

/* The Model Zoo's max_image_shape for Severstal: (H, W) images are resized
 * to at most this, then tiled. */
#define DS_SEVERSTAL_MAX_H 256u
#define DS_SEVERSTAL_MAX_W 1600u

typedef struct ds_severstal {
    rle_table table;          /* every row of train.csv */
    uint32_t *rows;           /* the split's rows of the class (indices into table), file order */
    size_t count;
    char *images;             /* data_dir/train_images; owned */
    char *csv;                /* data_dir/train.csv, for messages; owned */
} ds_severstal;

/* Checks a JPEG header against what the reader takes: 8-bit gray or
 * colour (3 components), not above IMGHDR_MAX_SIDE. Returns the channels
 * it decodes to (1 or 3) or -EINVAL with a message naming path. */
int ds_severstal__check(const char *path, const imghdr_jpeg *h, char *err, size_t errlen);

/* data_dir/train_images/<ImageId of row> into dst (PATH_MAX bytes). */
int ds_severstal__path(char *dst, const ds_severstal *p, const rle_row *r, char *err,
                       size_t errlen);

int ds_severstal__open(dataset *d, const Appliance__PlanInput *in, char *err, size_t errlen);
void ds_severstal__close(dataset *d);
