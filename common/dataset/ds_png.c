/* png_segmentation: data_dir/images/NAME.png with data_dir/masks/NAME.png,
 * sorted by name. Open lists both directories and checks every PNG header
 * (sizes and colour types); pixels are decoded on demand, one sample at a
 * time, since images may be large.
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
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "dataset_reader.h"

/* Images wider or taller than this are refused before decoding. */
#define DS_PNG_MAX_SIDE 65536u

typedef struct ds_png {
    char **names;             /* file names common to images/ and masks/, sorted; owned */
    size_t count;
} ds_png;

/* What a PNG header says. */
typedef struct ds_png_header {
    uint32_t width, height;
    int color_type;           /* PNG_COLOR_TYPE_* */
    int bit_depth;            /* 1, 2, 4, 8 or 16 */
} ds_png_header;

enum ds_png_kind { DS_PNG_IMAGE, DS_PNG_MASK };

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

/* Channels an image gives after the transforms: 1 for gray, 3 for colour. */
static uint32_t ds_png__image_channels(int color_type)
{
    return (color_type & PNG_COLOR_MASK_COLOR) ? 3 : 1;
}

static const char *ds_png__color_name(int color_type)
{
    switch (color_type) {
    case PNG_COLOR_TYPE_GRAY:
        return "gray";
    case PNG_COLOR_TYPE_GRAY_ALPHA:
        return "gray with alpha";
    case PNG_COLOR_TYPE_RGB:
        return "RGB";
    case PNG_COLOR_TYPE_RGB_ALPHA:
        return "RGBA";
    case PNG_COLOR_TYPE_PALETTE:
        return "palette";
    default:
        return "unknown colour type";
    }
}

/* Reads the header of path into *hd and checks it against the model input
 * (C, H, W) for an image, or against the image's (H, W) and a class per
 * pixel for a mask. Then, when out is not NULL, decodes the pixels into
 * out: H rows of W * C bytes for an image; W bytes (2 * W, big-endian, for
 * 16 bits) for a mask. Returns 0 or a negative code with a message naming
 * path. Thread-safe. */
static int ds_png__load(const char *path, enum ds_png_kind kind, uint32_t C, uint32_t H, uint32_t W,
                        ds_png_header *hd, uint8_t *out, char *err, size_t errlen)
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
    hd->width = png_get_image_width(png, info);
    hd->height = png_get_image_height(png, info);
    hd->color_type = png_get_color_type(png, info);
    hd->bit_depth = png_get_bit_depth(png, info);
    uint32_t channels = ds_png__image_channels(hd->color_type);
    if (kind == DS_PNG_IMAGE && (hd->width != W || hd->height != H || channels != C)) {
        snprintf(err, errlen, "%s: %ux%u pixels, %s (%u channel%s); the model input is "
                 "[%u, %u, %u] (C, H, W)", path, hd->width, hd->height,
                 ds_png__color_name(hd->color_type), channels, channels == 1 ? "" : "s", C, H, W);
        goto done;
    }
    if (kind == DS_PNG_MASK && (hd->width != W || hd->height != H)) {
        snprintf(err, errlen, "%s: %ux%u pixels, its image is %ux%u", path, hd->width,
                 hd->height, W, H);
        goto done;
    }
    if (kind == DS_PNG_MASK && channels != 1 && hd->color_type != PNG_COLOR_TYPE_PALETTE) {
        snprintf(err, errlen, "%s: %s; a mask must be gray or palette (one class per pixel)",
                 path, ds_png__color_name(hd->color_type));
        goto done;
    }
    rc = 0;
    if (!out)
        goto done;

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
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_rowbytes(png, info) != rowbytes) {
        snprintf(err, errlen, "%s: %s, %d bits: decodes to %zu bytes per row, not %zu", path,
                 ds_png__color_name(hd->color_type), hd->bit_depth,
                 (size_t)png_get_rowbytes(png, info), rowbytes);
        rc = -EINVAL;
        goto done;
    }
    rows = malloc(H * sizeof(*rows));
    if (!rows) {
        snprintf(err, errlen, "%s: out of memory", path);
        rc = -ENOMEM;
        goto done;
    }
    for (uint32_t y = 0; y < H; y++)
        rows[y] = out + (size_t)y * rowbytes;
    png_read_image(png, rows);
    png_read_end(png, NULL);
done:
    free(rows);
    png_destroy_read_struct(&png, &info, NULL);
    fclose(f);
    return rc;
}

static int ds_png__path(char *dst, const dataset *d, const char *sub, const char *name, char *err,
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

static void ds_png__close(dataset *d)
{
    ds_png *p = d->priv;
    if (!p)
        return;
    ds_png__free_names(p->names, p->count);
    free(p);
    d->priv = NULL;
}

static int ds_png__open(dataset *d, const Appliance__PlanInput *in, char *err, size_t errlen)
{
    if (!d->data_dir[0]) {
        snprintf(err, errlen, "png_segmentation: data_dir is not set");
        return -EINVAL;
    }
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
            (rc = ds_png__load(ipath, DS_PNG_IMAGE, d->channels, d->height, d->width, &hd, NULL,
                               err, errlen)) < 0 ||
            (rc = ds_png__load(mpath, DS_PNG_MASK, 1, d->height, d->width, &hd, NULL, err,
                               errlen)) < 0)
            goto done;
    }
    d->size = p->count;
    d->sample_elems = (uint64_t)d->channels * d->height * d->width;
    d->label_elems = d->height * d->width;
done:
    ds_png__free_names(masks, nmasks);
    return rc;
}

static int ds_png__read(const dataset *d, uint64_t idx, float *x, int32_t *labels, char *err,
                        size_t errlen)
{
    const ds_png *p = d->priv;
    const uint32_t C = d->channels, H = d->height, W = d->width;
    const size_t hw = (size_t)H * W;
    char path[PATH_MAX];
    ds_png_header hd;
    int rc = -ENOMEM;
    uint8_t *buf = malloc(hw * (C > 2 ? C : 2)); /* the image, then the mask */
    if (!buf) {
        snprintf(err, errlen, "out of memory for a %ux%u image", W, H);
        return rc;
    }
    if ((rc = ds_png__path(path, d, "images", p->names[idx], err, errlen)) < 0 ||
        (rc = ds_png__load(path, DS_PNG_IMAGE, C, H, W, &hd, buf, err, errlen)) < 0)
        goto done;
    for (uint32_t c = 0; c < C; c++) /* interleaved HWC bytes -> planar CHW floats */
        for (size_t i = 0; i < hw; i++)
            x[c * hw + i] = (float)buf[i * C + c] / 255.0f;

    if ((rc = ds_png__path(path, d, "masks", p->names[idx], err, errlen)) < 0 ||
        (rc = ds_png__load(path, DS_PNG_MASK, 1, H, W, &hd, buf, err, errlen)) < 0)
        goto done;
    bool wide = hd.bit_depth == 16;
    bool palette = hd.color_type == PNG_COLOR_TYPE_PALETTE;
    bool binary = !palette && d->num_classes <= 2;
    uint32_t half = ((1u << hd.bit_depth) - 1) / 2;
    for (size_t i = 0; i < hw; i++) {
        uint32_t v = wide ? (uint32_t)buf[2 * i] << 8 | buf[2 * i + 1] : buf[i];
        if (binary)
            v = v > half;
        else if (v >= d->num_classes) {
            snprintf(err, errlen, "%s: pixel (x %zu, y %zu) has value %u, not below num_classes "
                     "%u", path, i % W, i / W, v, d->num_classes);
            rc = -EINVAL;
            goto done;
        }
        labels[i] = (int32_t)v;
    }
    rc = 0;
done:
    free(buf);
    return rc;
}

const dataset_reader ds_png_reader = {
    .name = "png_segmentation",
    .open = ds_png__open,
    .close = ds_png__close,
    .read = ds_png__read,
};
