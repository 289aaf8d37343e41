/* Internal to the InriaAerialDataProcessor reader: what its libtiff-free
 * part (ds_inria.c: the listing and the headers, read by hand) and its
 * decoding part (ds_inria_read.c, libtiff) share. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "dataset_reader.h"
#include "dirlist.h"
#include "imghdr.h"

typedef struct ds_inria {
    dirlist names;            /* the split's images/ that have a mask in gt/, sorted */
    char *dir;                /* data_dir/train or data_dir/val; owned */
} ds_inria;

enum ds_inria_kind { DS_INRIA_IMAGE, DS_INRIA_MASK };

/* Checks what a TIFF header says against what the reader takes: 8-bit
 * unsigned samples, gray (min-is-black or min-is-white; extra samples such
 * as alpha are dropped) or RGB for an image, gray of one sample for a mask;
 * an image of the model input's H x W, a mask of its image's size (H x W
 * too). A missing photometric interpretation is guessed as libtiff does.
 * Returns the channels the file gives (1 or 3) or -EINVAL with a message
 * naming path. */
int ds_inria__check(const char *path, enum ds_inria_kind kind, const imghdr_tiff *h,
                    uint32_t H, uint32_t W, char *err, size_t errlen);

/* dir/sub/name into dst (PATH_MAX bytes). Returns 0 or -ENAMETOOLONG. */
int ds_inria__path(char *dst, const ds_inria *p, const char *sub, const char *name, char *err,
                   size_t errlen);

int ds_inria__open(dataset *d, const Appliance__PlanInput *in, char *err, size_t errlen);
void ds_inria__close(dataset *d);
