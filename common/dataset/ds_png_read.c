/* png_segmentation, decoding: libpng reads the pixels of one sample at a
 * time (ds_png.c lists the files and checks their headers). */
#include <errno.h>
#include <limits.h>
#include <png.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds_png.h"

/* One decoding: libpng reports errors through longjmp; the message lands
 * here. */
typedef struct ds_png_ctx {
    char msg[160];
} ds_png_ctx;

static void ds_png__error(png_structp png, png_const_charp msg)
{
    ds_png_ctx *ctx = png_get_error_ptr(png);
    snprintf(ctx->msg, sizeof(ctx->msg), "%s", msg);
    png_longjmp(png, 1);
}

static void ds_png__warning(png_structp png, png_const_charp msg)
{
    /* Warnings (unknown chunks, bad gamma) do not stop a sample. */
}

int ds_png__decode(const char *path, enum ds_png_kind kind, ds_png_check_fn check,
                   ds_png_row_fn row, void *arg, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(e));
        return -e;
    }
    uint8_t sig[8];
    if (fread(sig, 1, sizeof(sig), f) != sizeof(sig) || png_sig_cmp(sig, 0, sizeof(sig)) != 0) {
        fclose(f);
        snprintf(err, errlen, "%s: not a PNG file", path);
        return -EINVAL;
    }
    ds_png_ctx ctx = {{0}};
    png_infop info = NULL;
    png_bytep *volatile rows = NULL;
    uint8_t *volatile pix = NULL; /* one row, or the whole interlaced image */
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &ctx, ds_png__error,
                                             ds_png__warning);
    if (png)
        info = png_create_info_struct(png);
    if (!png || !info) {
        png_destroy_read_struct(png ? &png : NULL, NULL, NULL);
        fclose(f);
        snprintf(err, errlen, "%s: out of memory", path);
        return -ENOMEM;
    }
    int rc = -EINVAL;
    if (setjmp(png_jmpbuf(png))) {
        snprintf(err, errlen, "%s: corrupt PNG: %s", path, ctx.msg);
        rc = -EINVAL;
        goto done;
    }
    png_init_io(png, f);
    png_set_sig_bytes(png, sizeof(sig));
    png_set_user_limits(png, DS_PNG_MAX_SIDE, DS_PNG_MAX_SIDE);
    png_read_info(png, info);
    ds_png_header hdr = {png_get_image_width(png, info), png_get_image_height(png, info),
                         png_get_color_type(png, info), png_get_bit_depth(png, info)};
    const ds_png_header *hd = &hdr;
    rc = check(arg, path, hd, err, errlen);
    if (rc < 0)
        goto done;
    const uint32_t W = hd->width, H = hd->height, C = ds_png__image_channels(hd->color_type);

    size_t rowbytes;
    if (kind == DS_PNG_IMAGE) {
        if (hd->color_type == PNG_COLOR_TYPE_PALETTE)
            png_set_palette_to_rgb(png);
        if (hd->color_type == PNG_COLOR_TYPE_GRAY && hd->bit_depth < 8)
            png_set_expand_gray_1_2_4_to_8(png);
        if (hd->bit_depth == 16)
            png_set_scale_16(png);
        png_set_strip_alpha(png);
        rowbytes = (size_t)W * C;
    } else {
        if (hd->bit_depth < 8)
            png_set_packing(png); /* one byte per value, not rescaled */
        png_set_strip_alpha(png);
        rowbytes = (size_t)W * (hd->bit_depth == 16 ? 2 : 1);
    }
    int passes = png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_rowbytes(png, info) != rowbytes) {
        snprintf(err, errlen, "%s: %s, %d bits: decodes to %zu bytes per row, not %zu", path,
                 ds_png__color_name(hd->color_type), hd->bit_depth,
                 (size_t)png_get_rowbytes(png, info), rowbytes);
        rc = -EINVAL;
        goto done;
    }
    if (passes > 1) { /* interlaced: every pass revisits every row */
        pix = malloc((size_t)H * rowbytes);
        rows = malloc(H * sizeof(*rows));
        if (!pix || !rows) {
            snprintf(err, errlen, "%s: out of memory", path);
            rc = -ENOMEM;
            goto done;
        }
        for (uint32_t y = 0; y < H; y++)
            rows[y] = pix + (size_t)y * rowbytes;
        png_read_image(png, rows);
        for (uint32_t y = 0; y < H && rc == 0; y++)
            rc = row(arg, hd, y, rows[y], err, errlen);
    } else {
        if (!(pix = malloc(rowbytes))) {
            snprintf(err, errlen, "%s: out of memory", path);
            rc = -ENOMEM;
            goto done;
        }
        for (uint32_t y = 0; y < H && rc == 0; y++) {
            png_read_row(png, pix, NULL);
            rc = row(arg, hd, y, pix, err, errlen);
        }
    }
    if (rc == 0)
        png_read_end(png, NULL);
done:
    free(rows);
    free(pix);
    png_destroy_read_struct(&png, &info, NULL);
    fclose(f);
    return rc;
}

/* Where decoded rows go: the sample's planar inputs, or its labels (in the
 * data set's encodings). */
typedef struct ds_png_dest {
    const dataset *d;
    const char *path;         /* for messages */
    void *x;                  /* (C, H, W) */
    void *labels;             /* (H, W) */
} ds_png_dest;

/* The headers png_segmentation takes: images of the model input's shape,
 * masks of their size (ds_png__check). */
static int ds_png__check_image(void *arg, const char *path, const ds_png_header *hd, char *err,
                               size_t errlen)
{
    const dataset *d = ((const ds_png_dest *)arg)->d;
    return ds_png__check(path, DS_PNG_IMAGE, d->channels, d->height, d->width, hd, err, errlen);
}

static int ds_png__check_mask(void *arg, const char *path, const ds_png_header *hd, char *err,
                              size_t errlen)
{
    const dataset *d = ((const ds_png_dest *)arg)->d;
    return ds_png__check(path, DS_PNG_MASK, 1, d->height, d->width, hd, err, errlen);
}

/* An image row: interleaved bytes to planar inputs. */
static int ds_png__image_row(void *ctx, const ds_png_header *hd, uint32_t y, const uint8_t *row,
                             char *err, size_t errlen)
{
    const ds_png_dest *t = ctx;
    const uint32_t C = t->d->channels, W = t->d->width;
    const size_t hw = (size_t)t->d->height * W;
    for (uint32_t c = 0; c < C; c++) {
        size_t at = c * hw + (size_t)y * W;
        for (uint32_t i = 0; i < W; i++)
            ds_put_unorm8(t->d, t->x, at + i, row[i * C + c]);
    }
    return 0;
}

/* A mask row: a class per pixel (binary masks: above half the range). */
static int ds_png__mask_row(void *ctx, const ds_png_header *hd, uint32_t y, const uint8_t *row,
                            char *err, size_t errlen)
{
    const ds_png_dest *t = ctx;
    const dataset *d = t->d;
    const uint32_t W = d->width;
    bool wide = hd->bit_depth == 16;
    bool palette = hd->color_type == PNG_COLOR_TYPE_PALETTE;
    bool binary = !palette && d->num_classes <= 2;
    uint32_t half = ((1u << hd->bit_depth) - 1) / 2;
    size_t at = (size_t)y * W;
    for (uint32_t i = 0; i < W; i++) {
        uint32_t v = wide ? (uint32_t)row[2 * i] << 8 | row[2 * i + 1] : row[i];
        if (binary)
            v = v > half;
        else if (v >= d->num_classes) {
            snprintf(err, errlen, "%s: pixel (x %u, y %u) has value %u, not below num_classes %u",
                     t->path, i, y, v, d->num_classes);
            return -EINVAL;
        }
        ds_put_label(d, t->labels, at + i, v);
    }
    return 0;
}

static int ds_png__read(const dataset *d, uint64_t idx, void *x, void *labels, char *err,
                        size_t errlen)
{
    const ds_png *p = d->priv;
    char path[PATH_MAX];
    ds_png_dest t = {d, path, x, labels};
    int rc;
    if ((rc = ds_png__path(path, d, "images", p->names[idx], err, errlen)) < 0 ||
        (rc = ds_png__decode(path, DS_PNG_IMAGE, ds_png__check_image, ds_png__image_row, &t, err,
                             errlen)) < 0 ||
        (rc = ds_png__path(path, d, "masks", p->names[idx], err, errlen)) < 0 ||
        (rc = ds_png__decode(path, DS_PNG_MASK, ds_png__check_mask, ds_png__mask_row, &t, err,
                             errlen)) < 0)
        return rc;
    return 0;
}

const dataset_reader ds_png_reader = {
    .name = "png_segmentation",
    .open = ds_png__open,
    .close = ds_png__close,
    .read = ds_png__read,
};
