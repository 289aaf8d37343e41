/* Internal to the CityscapesDataProcessor reader: what its libpng-free
 * part (ds_cityscapes.c: the listing, the headers) and its decoding part
 * (ds_cityscapes_read.c, through ds_png_read.c) share. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "dataset_reader.h"
#include "ds_png.h"

/* The Model Zoo's max_image_shape for Cityscapes: images are resized to at
 * most (1024, 2048), then tiled. */
#define DS_CITYSCAPES_MAX_H 1024u
#define DS_CITYSCAPES_MAX_W 2048u
/* Label ids are 0..33 (cityscapesScripts' labels with an id >= 0). */
#define DS_CITYSCAPES_IDS 34u
/* The train ids: 0 for everything ignored in evaluation, 1..19 the rest. */
#define DS_CITYSCAPES_CLASSES 20u

typedef struct ds_cityscapes {
    char **names;             /* "CITY/PREFIX" of every image, sorted; owned */
    size_t count;
    char *images;             /* data_dir/leftImg8bit/SPLIT; owned */
    char *masks;              /* data_dir/gtFine/SPLIT; owned */
} ds_cityscapes;

/* The train id of each label id, as the Model Zoo maps them. */
extern const uint8_t ds_cityscapes__train_id[DS_CITYSCAPES_IDS];

/* The image (DS_PNG_IMAGE) or the mask of sample i into dst (PATH_MAX). */
int ds_cityscapes__path(char *dst, const ds_cityscapes *p, enum ds_png_kind kind, size_t i,
                        char *err, size_t errlen);
/* Checks a mask's header: one value per pixel (gray or palette, at most 8
 * bits), of its image's size. Returns 0 or -EINVAL with a message. */
int ds_cityscapes__check_mask(const char *path, const ds_png_header *hd, uint32_t h, uint32_t w,
                              char *err, size_t errlen);

int ds_cityscapes__open(dataset *d, const Appliance__PlanInput *in, char *err, size_t errlen);
void ds_cityscapes__close(dataset *d);
