/* CityscapesDataProcessor, decoding: libpng (ds_png__decode) hands over
 * rows, which are resized into the sample as they come (ds_image,
 * ds_mask); a label id becomes its train id on the way. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds_cityscapes.h"
#include "ds_image.h"

/* One sample being decoded. */
typedef struct ds_cityscapes_dest {
    const dataset *d;
    void *x, *labels;
    ds_image img;
    ds_mask mask;
    bool have_img, have_mask;
    uint32_t h, w;            /* the image's size, which its mask must have */
    uint8_t *cls;             /* one row of train ids */
} ds_cityscapes_dest;

static int ds_cityscapes__image_check(void *arg, const char *path, const ds_png_header *hd,
                                      char *err, size_t errlen)
{
    ds_cityscapes_dest *t = arg;
    t->h = hd->height;
    t->w = hd->width;
    int rc = ds_image_init(&t->img, t->d, t->x, ds_png__image_channels(hd->color_type),
                           hd->height, hd->width, DS_CITYSCAPES_MAX_H, DS_CITYSCAPES_MAX_W, err,
                           errlen);
    t->have_img = rc == 0;
    return rc;
}

static int ds_cityscapes__image_row(void *arg, const ds_png_header *hd, uint32_t y,
                                    const uint8_t *row, char *err, size_t errlen)
{
    ds_cityscapes_dest *t = arg;
    const uint8_t *ch[3] = {row, row + 1, row + 2};
    ds_image_span(&t->img, y, 0, hd->width, ch, t->img.fc);
    return 0;
}

static int ds_cityscapes__mask_check(void *arg, const char *path, const ds_png_header *hd,
                                     char *err, size_t errlen)
{
    ds_cityscapes_dest *t = arg;
    int rc = ds_cityscapes__check_mask(path, hd, t->h, t->w, err, errlen);
    if (rc < 0)
        return rc;
    if (!(t->cls = malloc(hd->width))) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -ENOMEM;
    }
    rc = ds_mask_init(&t->mask, t->d, t->labels, hd->height, hd->width, DS_CITYSCAPES_MAX_H,
                      DS_CITYSCAPES_MAX_W, DS_NEAREST_PIL, err, errlen);
    t->have_mask = rc == 0;
    return rc;
}

static int ds_cityscapes__mask_row(void *arg, const ds_png_header *hd, uint32_t y,
                                   const uint8_t *row, char *err, size_t errlen)
{
    ds_cityscapes_dest *t = arg;
    for (uint32_t i = 0; i < hd->width; i++) {
        if (row[i] >= DS_CITYSCAPES_IDS) {
            snprintf(err, errlen, "pixel (x %u, y %u) has label id %u; Cityscapes' ids are 0 to %u",
                     i, y, row[i], DS_CITYSCAPES_IDS - 1);
            return -EINVAL;
        }
        t->cls[i] = ds_cityscapes__train_id[row[i]];
    }
    ds_mask_span(&t->mask, y, 0, hd->width, t->cls);
    return 0;
}

static int ds_cityscapes__read(const dataset *d, uint64_t idx, void *x, void *labels, char *err,
                               size_t errlen)
{
    const ds_cityscapes *p = d->priv;
    char path[PATH_MAX];
    ds_cityscapes_dest t = {.d = d, .x = x, .labels = labels};
    int rc;
    if ((rc = ds_cityscapes__path(path, p, DS_PNG_IMAGE, idx, err, errlen)) < 0 ||
        (rc = ds_png__decode(path, DS_PNG_IMAGE, ds_cityscapes__image_check,
                             ds_cityscapes__image_row, &t, err, errlen)) < 0)
        goto done;
    ds_image_finish(&t.img);
    if ((rc = ds_cityscapes__path(path, p, DS_PNG_MASK, idx, err, errlen)) < 0)
        goto done;
    if ((rc = ds_png__decode(path, DS_PNG_MASK, ds_cityscapes__mask_check,
                             ds_cityscapes__mask_row, &t, err, errlen)) < 0) {
        /* a row's message names no file */
        if (strncmp(err, path, strlen(path)) != 0) {
            char why[512];
            snprintf(why, sizeof(why), "%s", err);
            snprintf(err, errlen, "%s: %s", path, why);
        }
        goto done;
    }
    ds_mask_finish(&t.mask);
done:
    if (rc < 0) {
        size_t n = strlen(err);
        snprintf(err + n, errlen > n ? errlen - n : 0, " (sample %llu)", (unsigned long long)idx);
    }
    if (t.have_img)
        ds_image_deinit(&t.img);
    if (t.have_mask)
        ds_mask_deinit(&t.mask);
    free(t.cls);
    return rc;
}

const dataset_reader ds_cityscapes_reader = {
    .name = "CityscapesDataProcessor",
    .open = ds_cityscapes__open,
    .close = ds_cityscapes__close,
    .read = ds_cityscapes__read,
};
