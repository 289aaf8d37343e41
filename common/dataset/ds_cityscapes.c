/* CityscapesDataProcessor: data_dir/leftImg8bit/SPLIT/CITY/NAME_leftImg8bit.png
 * with data_dir/gtFine/SPLIT/CITY/NAME_gtFine_labelIds.png (SPLIT train, or
 * val for evaluation), sorted by path as the Model Zoo sorts torchvision's
 * listing. Images of any size are resized to the model input (antialiased
 * bicubic; masks by nearest neighbour), as the Model Zoo does. Label ids
 * become the Model Zoo's 20 train ids: the 19 classes evaluated, 1 to 19,
 * and 0 for everything cityscapesScripts ignores in evaluation (void,
 * ego vehicle, caravan, trailer, ...). Open lists and checks every PNG
 * header by hand (ds_png.c): no libpng. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dirlist.h"
#include "ds_cityscapes.h"

#define DS_CITYSCAPES_IMAGE_SUFFIX "_leftImg8bit.png"
#define DS_CITYSCAPES_MASK_SUFFIX "_gtFine_labelIds.png"

/* cityscapesScripts' labels by id, those evaluated numbered in id order
 * from 1 (its trainId + 1), the rest 0. */
const uint8_t ds_cityscapes__train_id[DS_CITYSCAPES_IDS] = {
    0, 0, 0, 0, 0, 0, 0, /* unlabeled, ego vehicle, rectification border, out of roi,
                            static, dynamic, ground */
    1, 2,                /* road, sidewalk */
    0, 0,                /* parking, rail track */
    3, 4, 5,             /* building, wall, fence */
    0, 0, 0,             /* guard rail, bridge, tunnel */
    6,                   /* pole */
    0,                   /* polegroup */
    7, 8, 9, 10, 11, 12, 13, 14, 15, 16, /* traffic light, traffic sign, vegetation,
                            terrain, sky, person, rider, car, truck, bus */
    0, 0,                /* caravan, trailer */
    17, 18, 19,          /* train, motorcycle, bicycle */
};

int ds_cityscapes__path(char *dst, const ds_cityscapes *p, enum ds_png_kind kind, size_t i,
                        char *err, size_t errlen)
{
    const char *dir = kind == DS_PNG_IMAGE ? p->images : p->masks;
    const char *suffix = kind == DS_PNG_IMAGE ? DS_CITYSCAPES_IMAGE_SUFFIX : DS_CITYSCAPES_MASK_SUFFIX;
    int n = snprintf(dst, PATH_MAX, "%s/%s%s", dir, p->names[i], suffix);
    if (n < 0 || n >= PATH_MAX) {
        snprintf(err, errlen, "%s/%s: path too long", dir, p->names[i]);
        return -ENAMETOOLONG;
    }
    return 0;
}

int ds_cityscapes__check_mask(const char *path, const ds_png_header *hd, uint32_t h, uint32_t w,
                              char *err, size_t errlen)
{
    if ((hd->color_type != DS_PNG_GRAY && hd->color_type != DS_PNG_PALETTE) || hd->bit_depth > 8) {
        snprintf(err, errlen, "%s: %s, %d bits; a label id mask is gray (or palette) of at most "
                 "8 bits", path, ds_png__color_name(hd->color_type), hd->bit_depth);
        return -EINVAL;
    }
    if (hd->width != w || hd->height != h) {
        snprintf(err, errlen, "%s: %ux%u pixels, its image is %ux%u", path, hd->width, hd->height,
                 w, h);
        return -EINVAL;
    }
    return 0;
}

void ds_cityscapes__close(dataset *d)
{
    ds_cityscapes *p = d->priv;
    if (!p)
        return;
    for (size_t i = 0; i < p->count; i++)
        free(p->names[i]);
    free(p->names);
    free(p->images);
    free(p->masks);
    free(p);
    d->priv = NULL;
}

/* Adds "CITY/PREFIX" for every *_leftImg8bit.png of each city. Cities in
 * name order and files in name order within them give the order of whole
 * paths: they share everything before the city. */
static int ds_cityscapes__list(ds_cityscapes *p, char *err, size_t errlen)
{
    dirlist cities = {0}, files = {0};
    size_t cap = 0;
    int rc = dirlist_read(&cities, p->images, DIRLIST_DIRS, "", err, errlen);
    for (size_t c = 0; rc == 0 && c < cities.count; c++) {
        char dir[PATH_MAX];
        int n = snprintf(dir, sizeof(dir), "%s/%s", p->images, cities.names[c]);
        if (n < 0 || (size_t)n >= sizeof(dir)) {
            snprintf(err, errlen, "%s/%s: path too long", p->images, cities.names[c]);
            rc = -ENAMETOOLONG;
            break;
        }
        if ((rc = dirlist_read(&files, dir, DIRLIST_FILES, DS_CITYSCAPES_IMAGE_SUFFIX, err,
                               errlen)) < 0)
            break;
        for (size_t i = 0; i < files.count; i++) {
            if (p->count == cap) {
                size_t ncap = cap ? 2 * cap : 256;
                char **nn = realloc(p->names, ncap * sizeof(*nn));
                if (!nn) {
                    rc = -ENOMEM;
                    break;
                }
                p->names = nn;
                cap = ncap;
            }
            const char *f = files.names[i];
            int plen = (int)(strlen(f) - strlen(DS_CITYSCAPES_IMAGE_SUFFIX));
            if (asprintf(&p->names[p->count], "%s/%.*s", cities.names[c], plen, f) < 0) {
                rc = -ENOMEM;
                break;
            }
            p->count++;
        }
        dirlist_deinit(&files);
        if (rc == -ENOMEM)
            snprintf(err, errlen, "%s: out of memory listing the images", p->images);
    }
    /* "a-b/..." sorts before "a/..." by whole path but after "a" by city */
    for (size_t i = 1; rc == 0 && i < p->count; i++)
        for (size_t k = i; k > 0 && strcmp(p->names[k - 1], p->names[k]) > 0; k--) {
            char *t = p->names[k];
            p->names[k] = p->names[k - 1];
            p->names[k - 1] = t;
        }
    dirlist_deinit(&cities);
    return rc;
}

int ds_cityscapes__open(dataset *d, const Appliance__PlanInput *in, char *err, size_t errlen)
{
    const char *me = "CityscapesDataProcessor";
    if (ds_image_input_check(d, me, err, errlen) < 0)
        return -EINVAL;
    if (d->num_classes != DS_CITYSCAPES_CLASSES) {
        snprintf(err, errlen, "%s: the labels are the %u train ids (0: ignored in evaluation): "
                 "num_classes must be %u, not %u", me, DS_CITYSCAPES_CLASSES,
                 DS_CITYSCAPES_CLASSES, d->num_classes);
        return -EINVAL;
    }
    ds_cityscapes *p = calloc(1, sizeof(*p));
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    d->priv = p;
    const char *split = d->eval ? "val" : "train";
    if (asprintf(&p->images, "%s/leftImg8bit/%s", d->data_dir, split) < 0 ||
        asprintf(&p->masks, "%s/gtFine/%s", d->data_dir, split) < 0) {
        p->images = p->masks = NULL;
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    int rc = ds_cityscapes__list(p, err, errlen);
    if (rc < 0)
        return rc;
    if (p->count == 0) {
        snprintf(err, errlen, "%s: no CITY/*%s files", p->images, DS_CITYSCAPES_IMAGE_SUFFIX);
        return -ENOENT;
    }
    for (size_t i = 0; i < p->count; i++) {
        char ipath[PATH_MAX], mpath[PATH_MAX];
        ds_png_header ih, mh;
        if ((rc = ds_cityscapes__path(ipath, p, DS_PNG_IMAGE, i, err, errlen)) < 0 ||
            (rc = ds_cityscapes__path(mpath, p, DS_PNG_MASK, i, err, errlen)) < 0 ||
            (rc = ds_png__header(ipath, &ih, err, errlen)) < 0)
            return rc;
        if ((rc = ds_png__header(mpath, &mh, err, errlen)) < 0) {
            if (rc == -ENOENT)
                snprintf(err, errlen, "%s: missing (the mask of %s)", mpath, ipath);
            return rc;
        }
        if ((rc = ds_cityscapes__check_mask(mpath, &mh, ih.height, ih.width, err, errlen)) < 0)
            return rc;
    }
    ds_image_sizes(d, p->count);
    return 0;
}

/* The reader without its decoding: what dataset_probe opens. */
const dataset_reader ds_cityscapes_probe_reader = {
    .name = "CityscapesDataProcessor",
    .open = ds_cityscapes__open,
    .close = ds_cityscapes__close,
};
