/* InriaAerialDataProcessor: data_dir/train/images/NAME.tif with its mask
 * data_dir/train/gt/NAME.tif (data_dir/val/... for evaluation), in name
 * order, as the Model Zoo lists them. Open lists the split and checks
 * every header, read by hand (imghdr.c), so that the planner needs no
 * libtiff; ds_inria_read.c decodes.
 *
 * Images: 8-bit gray or RGB TIFF of the model input's H x W (the Model Zoo
 * does not resize them); the model's C (1 or 3) decides, Pillow's "L"
 * conversion making gray of RGB. Masks: 8-bit gray, 0 background and any
 * other value building (the Model Zoo's 0/255 scaled to 0/1). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds_inria.h"

static const char *ds_inria__photometric_name(uint32_t p)
{
    switch (p) {
    case 0: return "min-is-white gray";
    case 1: return "min-is-black gray";
    case 2: return "RGB";
    case 3: return "palette";
    case 4: return "transparency mask";
    case 5: return "CMYK";
    case 6: return "YCbCr";
    case 8: return "CIE L*a*b*";
    default: return "unknown";
    }
}

int ds_inria__check(const char *path, enum ds_inria_kind kind, const imghdr_tiff *h,
                    uint32_t H, uint32_t W, char *err, size_t errlen)
{
    uint32_t photometric = h->photometric;
    if (photometric == UINT32_MAX) /* libtiff's guess when the tag is missing */
        photometric = h->samples >= 3 ? IMGHDR_TIFF_RGB : IMGHDR_TIFF_MINISBLACK;
    if (h->bits != 8 || h->bits_differ) {
        snprintf(err, errlen, "%s: %u-bit samples%s; the reader takes 8-bit TIFF (16-bit, "
                 "1-bit and other depths are not converted)", path, h->bits,
                 h->bits_differ ? " (and others)" : "");
        return -EINVAL;
    }
    if (h->sample_format != IMGHDR_TIFF_UINT) {
        snprintf(err, errlen, "%s: %s samples (SampleFormat %u); the reader takes unsigned 8-bit",
                 path, h->sample_format == 2 ? "signed" : h->sample_format == 3 ? "floating-point"
                 : "other", h->sample_format);
        return -EINVAL;
    }
    if (h->planar != IMGHDR_TIFF_CHUNKY && h->planar != IMGHDR_TIFF_SEPARATE) {
        snprintf(err, errlen, "%s: corrupt TIFF: planar configuration %u", path, h->planar);
        return -EINVAL;
    }
    int channels;
    if ((photometric == IMGHDR_TIFF_MINISBLACK || photometric == IMGHDR_TIFF_MINISWHITE) &&
        h->samples >= 1)
        channels = 1;
    else if (photometric == IMGHDR_TIFF_RGB && h->samples >= 3)
        channels = 3;
    else {
        snprintf(err, errlen, "%s: %s (photometric %u) of %u sample%s per pixel; the reader "
                 "takes gray or RGB%s", path, ds_inria__photometric_name(photometric),
                 photometric, h->samples, h->samples == 1 ? "" : "s",
                 photometric == IMGHDR_TIFF_PALETTE ? " (convert palette images to RGB)" : "");
        return -EINVAL;
    }
    if (kind == DS_INRIA_MASK && (channels != 1 || h->samples != 1)) {
        snprintf(err, errlen, "%s: %s of %u samples per pixel; a mask is gray, one sample", path,
                 ds_inria__photometric_name(photometric), h->samples);
        return -EINVAL;
    }
    if (h->width != W || h->height != H) {
        if (kind == DS_INRIA_IMAGE)
            snprintf(err, errlen, "%s: %ux%u pixels (W x H); the model input is %ux%u (its image "
                     "shape's H %u, W %u), and the reader does not resize", path, h->width,
                     h->height, W, H, H, W);
        else
            snprintf(err, errlen, "%s: %ux%u pixels, its image is %ux%u", path, h->width,
                     h->height, W, H);
        return -EINVAL;
    }
    return channels;
}

int ds_inria__path(char *dst, const ds_inria *p, const char *sub, const char *name, char *err,
                   size_t errlen)
{
    int n = snprintf(dst, PATH_MAX, "%s/%s%s%s", p->dir, sub, name ? "/" : "", name ? name : "");
    if (n < 0 || n >= PATH_MAX) {
        snprintf(err, errlen, "%s/%s: path too long", p->dir, sub);
        return -ENAMETOOLONG;
    }
    return 0;
}

void ds_inria__close(dataset *d)
{
    ds_inria *p = d->priv;
    if (!p)
        return;
    dirlist_deinit(&p->names);
    free(p->dir);
    free(p);
    d->priv = NULL;
}

/* Keeps the names of `all` that end in .tif or .tiff. */
static int ds_inria__list(dirlist *out, const char *dir, char *err, size_t errlen)
{
    dirlist tif = {0}, tiff = {0};
    int rc;
    if ((rc = dirlist_read(&tif, dir, DIRLIST_FILES, ".tif", err, errlen)) < 0 ||
        (rc = dirlist_read(&tiff, dir, DIRLIST_FILES, ".tiff", err, errlen)) < 0)
        goto done;
    /* both sorted: merge */
    out->names = malloc((tif.count + tiff.count + 1) * sizeof(*out->names));
    if (!out->names) {
        snprintf(err, errlen, "%s: out of memory listing the directory", dir);
        rc = -ENOMEM;
        goto done;
    }
    size_t i = 0, j = 0;
    while (i < tif.count || j < tiff.count)
        out->names[out->count++] = (j == tiff.count ||
                                    (i < tif.count && strcmp(tif.names[i], tiff.names[j]) < 0))
                                       ? tif.names[i++] : tiff.names[j++];
    free(tif.names);
    free(tiff.names);
    return 0;
done:
    dirlist_deinit(&tif);
    dirlist_deinit(&tiff);
    return rc;
}

int ds_inria__open(dataset *d, const Appliance__PlanInput *in, char *err, size_t errlen)
{
    const char *me = "InriaAerialDataProcessor";
    if (ds_image_input_check(d, me, err, errlen) < 0)
        return -EINVAL;
    if (d->num_classes > 2) {
        snprintf(err, errlen, "%s: masks are building or not: num_classes must be 1 or 2, not %u",
                 me, d->num_classes);
        return -EINVAL;
    }
    ds_inria *p = calloc(1, sizeof(*p));
    if (!p || asprintf(&p->dir, "%s/%s", d->data_dir, d->eval ? "val" : "train") < 0) {
        if (p)
            p->dir = NULL;
        free(p);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    d->priv = p;
    char idir[PATH_MAX], mdir[PATH_MAX], ipath[PATH_MAX], mpath[PATH_MAX];
    dirlist masks = {0};
    int rc;
    if ((rc = ds_inria__path(idir, p, "images", NULL, err, errlen)) < 0 ||
        (rc = ds_inria__path(mdir, p, "gt", NULL, err, errlen)) < 0 ||
        (rc = ds_inria__list(&p->names, idir, err, errlen)) < 0 ||
        (rc = ds_inria__list(&masks, mdir, err, errlen)) < 0)
        goto done;
    if (p->names.count == 0) {
        snprintf(err, errlen, "%s: no .tif files", idir);
        rc = -ENOENT;
        goto done;
    }
    for (size_t i = 0; i < p->names.count; i++) {
        const char *name = p->names.names[i];
        imghdr_tiff hd;
        if (!dirlist_has(&masks, name)) {
            snprintf(err, errlen, "%s/%s: missing (the mask of %s/%s)", mdir, name, idir, name);
            rc = -ENOENT;
            goto done;
        }
        if ((rc = ds_inria__path(ipath, p, "images", name, err, errlen)) < 0 ||
            (rc = ds_inria__path(mpath, p, "gt", name, err, errlen)) < 0 ||
            (rc = imghdr_tiff_read(ipath, &hd, err, errlen)) < 0 ||
            (rc = ds_inria__check(ipath, DS_INRIA_IMAGE, &hd, d->height, d->width, err,
                                  errlen)) < 0 ||
            (rc = imghdr_tiff_read(mpath, &hd, err, errlen)) < 0 ||
            (rc = ds_inria__check(mpath, DS_INRIA_MASK, &hd, d->height, d->width, err,
                                  errlen)) < 0)
            goto done;
    }
    rc = 0;
    ds_image_sizes(d, p->names.count);
done:
    dirlist_deinit(&masks);
    return rc;
}

/* The reader without its decoding: what dataset_probe opens. */
const dataset_reader ds_inria_probe_reader = {
    .name = "InriaAerialDataProcessor",
    .open = ds_inria__open,
    .close = ds_inria__close,
};
