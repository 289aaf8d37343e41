/* png_segmentation: data_dir/images/NAME.png with data_dir/masks/NAME.png,
 * sorted by name. Open lists both directories and checks every PNG header
 * (sizes and colour types), read by hand: this file needs no libpng, so a
 * data set can be sized and checked (dataset_probe) without it. Pixels are
 * decoded on demand, one sample at a time, in ds_png_read.c.
 *
 * Images: 8-bit gray (1 channel) or RGB (3 channels: RGB, RGBA without its
 * alpha, palette); 16-bit and low bit depths are converted to 8 bits;
 * x = v / 255, planar (C, H, W).
 * Masks: gray of any bit depth (b bits, largest value M = 2^b - 1), with or
 * without alpha, or palette. A gray value v gives the label v > M / 2 when
 * num_classes <= 2 (so 0/255 and 0/1 masks both work), else v itself; a
 * palette index is the label. A label must be below num_classes. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "ds_png.h"

/* Channels an image gives after the transforms: 1 for gray, 3 for colour. */
uint32_t ds_png__image_channels(int color_type)
{
    return (color_type & 2) ? 3 : 1;
}

const char *ds_png__color_name(int color_type)
{
    switch (color_type) {
    case DS_PNG_GRAY:
        return "gray";
    case DS_PNG_GRAY_ALPHA:
        return "gray with alpha";
    case DS_PNG_RGB:
        return "RGB";
    case DS_PNG_RGBA:
        return "RGBA";
    case DS_PNG_PALETTE:
        return "palette";
    default:
        return "unknown colour type";
    }
}

int ds_png__check(const char *path, enum ds_png_kind kind, uint32_t C, uint32_t H, uint32_t W,
                  const ds_png_header *hd, char *err, size_t errlen)
{
    uint32_t channels = ds_png__image_channels(hd->color_type);
    if (kind == DS_PNG_IMAGE && (hd->width != W || hd->height != H || channels != C)) {
        snprintf(err, errlen, "%s: %ux%u pixels, %s (%u channel%s); the model input is "
                 "[%u, %u, %u] (C, H, W)", path, hd->width, hd->height,
                 ds_png__color_name(hd->color_type), channels, channels == 1 ? "" : "s", C, H, W);
        return -EINVAL;
    }
    if (kind == DS_PNG_MASK && (hd->width != W || hd->height != H)) {
        snprintf(err, errlen, "%s: %ux%u pixels, its image is %ux%u", path, hd->width,
                 hd->height, W, H);
        return -EINVAL;
    }
    if (kind == DS_PNG_MASK && channels != 1 && hd->color_type != DS_PNG_PALETTE) {
        snprintf(err, errlen, "%s: %s; a mask must be gray or palette (one class per pixel)",
                 path, ds_png__color_name(hd->color_type));
        return -EINVAL;
    }
    return 0;
}

/* CRC-32 of the PNG specification (ISO 3309: reflected, 0xEDB88320). */
static uint32_t ds_png__crc(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    }
    return c ^ 0xffffffffu;
}

static uint32_t ds_png__be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Whether a PNG allows bit depth with colour type. */
static bool ds_png__depth_ok(int color_type, int depth)
{
    switch (color_type) {
    case DS_PNG_GRAY: return depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16;
    case DS_PNG_PALETTE: return depth == 1 || depth == 2 || depth == 4 || depth == 8;
    case DS_PNG_RGB:
    case DS_PNG_GRAY_ALPHA:
    case DS_PNG_RGBA: return depth == 8 || depth == 16;
    default: return false;
    }
}

int ds_png__header(const char *path, ds_png_header *hd, char *err, size_t errlen)
{
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    uint8_t b[33];
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(e));
        return -e;
    }
    size_t n = fread(b, 1, sizeof(b), f);
    fclose(f);
    if (n < sizeof(sig) || memcmp(b, sig, sizeof(sig)) != 0) {
        snprintf(err, errlen, "%s: not a PNG file", path);
        return -EINVAL;
    }
    if (n < sizeof(b) || ds_png__be32(b + 8) != 13 || memcmp(b + 12, "IHDR", 4) != 0) {
        snprintf(err, errlen, "%s: corrupt PNG: no IHDR chunk first", path);
        return -EINVAL;
    }
    if (ds_png__crc(b + 12, 17) != ds_png__be32(b + 29)) {
        snprintf(err, errlen, "%s: corrupt PNG: IHDR: CRC error", path);
        return -EINVAL;
    }
    hd->width = ds_png__be32(b + 16);
    hd->height = ds_png__be32(b + 20);
    hd->bit_depth = b[24];
    hd->color_type = b[25];
    if (hd->width == 0 || hd->height == 0 || hd->width > DS_PNG_MAX_SIDE ||
        hd->height > DS_PNG_MAX_SIDE) {
        snprintf(err, errlen, "%s: corrupt PNG: %ux%u pixels (1 to %u a side)", path, hd->width,
                 hd->height, DS_PNG_MAX_SIDE);
        return -EINVAL;
    }
    if (!ds_png__depth_ok(hd->color_type, hd->bit_depth) || b[26] != 0 || b[27] != 0 || b[28] > 1) {
        snprintf(err, errlen, "%s: corrupt PNG: IHDR: colour type %d, bit depth %d, compression "
                 "%d, filter %d, interlace %d", path, hd->color_type, hd->bit_depth, b[26], b[27],
                 b[28]);
        return -EINVAL;
    }
    return 0;
}

int ds_png__path(char *dst, const dataset *d, const char *sub, const char *name, char *err,
                        size_t errlen)
{
    int n = snprintf(dst, PATH_MAX, "%s/%s%s%s", d->data_dir, sub, name ? "/" : "",
                     name ? name : "");
    if (n < 0 || n >= PATH_MAX) {
        snprintf(err, errlen, "%s/%s: path too long", d->data_dir, sub);
        return -ENAMETOOLONG;
    }
    return 0;
}

static int ds_png__cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void ds_png__free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* The regular files named *.png in dir (not hidden), sorted by name. */
static int ds_png__list(const char *dir, char ***out, size_t *count, char *err, size_t errlen)
{
    *out = NULL;
    *count = 0;
    DIR *dh = opendir(dir);
    if (!dh) {
        int e = errno;
        snprintf(err, errlen, "%s: cannot open the directory: %s", dir, strerror(e));
        return -e;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(dh)) != NULL) {
        size_t len = strlen(de->d_name);
        if (de->d_name[0] == '.' || len < 5 || strcasecmp(de->d_name + len - 4, ".png") != 0)
            continue;
        char path[PATH_MAX];
        struct stat st;
        int pn = snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        if (pn < 0 || (size_t)pn >= sizeof(path) || stat(path, &st) < 0 || !S_ISREG(st.st_mode))
            continue;
        if (n == cap) {
            size_t ncap = cap ? 2 * cap : 64;
            char **nn = realloc(names, ncap * sizeof(*nn));
            if (!nn) {
                rc = -ENOMEM;
                break;
            }
            names = nn;
            cap = ncap;
        }
        if (!(names[n] = strdup(de->d_name))) {
            rc = -ENOMEM;
            break;
        }
        n++;
    }
    closedir(dh);
    if (rc < 0) {
        snprintf(err, errlen, "%s: out of memory listing the directory", dir);
        ds_png__free_names(names, n);
        return rc;
    }
    if (n > 1)
        qsort(names, n, sizeof(*names), ds_png__cmp);
    *out = names;
    *count = n;
    return 0;
}

static bool ds_png__has(char **names, size_t n, const char *name)
{
    return n && bsearch(&name, names, n, sizeof(*names), ds_png__cmp) != NULL;
}

void ds_png__close(dataset *d)
{
    ds_png *p = d->priv;
    if (!p)
        return;
    ds_png__free_names(p->names, p->count);
    free(p);
    d->priv = NULL;
}

int ds_png__open(dataset *d, const Appliance__PlanInput *in, char *err, size_t errlen)
{
    if (!d->data_dir[0]) {
        snprintf(err, errlen, "png_segmentation: data_dir is not set");
        return -EINVAL;
    }
    if (ds_refuse_volume(d, "png_segmentation", err, errlen) < 0)
        return -EINVAL;
    if (d->ndim != 3 || (d->channels != 1 && d->channels != 3)) {
        snprintf(err, errlen, "png_segmentation: the model input must be [C, H, W] with C = 1 "
                 "(gray) or 3 (RGB)");
        return -EINVAL;
    }
    ds_png *p = calloc(1, sizeof(*p));
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    d->priv = p;
    char idir[PATH_MAX], mdir[PATH_MAX], ipath[PATH_MAX], mpath[PATH_MAX];
    char **masks = NULL;
    size_t nmasks = 0;
    int rc;
    if ((rc = ds_png__path(idir, d, "images", NULL, err, errlen)) < 0 ||
        (rc = ds_png__path(mdir, d, "masks", NULL, err, errlen)) < 0 ||
        (rc = ds_png__list(idir, &p->names, &p->count, err, errlen)) < 0 ||
        (rc = ds_png__list(mdir, &masks, &nmasks, err, errlen)) < 0)
        goto done;
    if (p->count == 0) {
        snprintf(err, errlen, "%s: no .png files", idir);
        rc = -ENOENT;
        goto done;
    }
    for (size_t i = 0; i < p->count; i++)
        if (!ds_png__has(masks, nmasks, p->names[i])) {
            snprintf(err, errlen, "%s/%s: missing (the mask of %s/%s)", mdir, p->names[i], idir,
                     p->names[i]);
            rc = -ENOENT;
            goto done;
        }
    for (size_t i = 0; i < nmasks; i++)
        if (!ds_png__has(p->names, p->count, masks[i])) {
            snprintf(err, errlen, "%s/%s: a mask without an image (%s/%s is missing)", mdir,
                     masks[i], idir, masks[i]);
            rc = -ENOENT;
            goto done;
        }
    for (size_t i = 0; i < p->count; i++) {
        ds_png_header hd;
        if ((rc = ds_png__path(ipath, d, "images", p->names[i], err, errlen)) < 0 ||
            (rc = ds_png__path(mpath, d, "masks", p->names[i], err, errlen)) < 0 ||
            (rc = ds_png__header(ipath, &hd, err, errlen)) < 0 ||
            (rc = ds_png__check(ipath, DS_PNG_IMAGE, d->channels, d->height, d->width, &hd, err,
                                errlen)) < 0 ||
            (rc = ds_png__header(mpath, &hd, err, errlen)) < 0 ||
            (rc = ds_png__check(mpath, DS_PNG_MASK, 1, d->height, d->width, &hd, err, errlen)) < 0)
            goto done;
    }
    d->size = p->count;
    d->sample_elems = (uint64_t)d->channels * d->height * d->width;
    d->label_elems = d->height * d->width;
done:
    ds_png__free_names(masks, nmasks);
    return rc;
}

/* The reader without its decoding: what dataset_probe opens. */
const dataset_reader ds_png_probe_reader = {
    .name = "png_segmentation",
    .open = ds_png__open,
    .close = ds_png__close,
};
