/* InriaAerialDataProcessor, decoding: libtiff reads one strip or tile at a
 * time into a buffer of that size, and its pixels go straight into the
 * sample (ds_image, ds_mask): a 7168^2 image is never held twice. Each
 * TIFF gets its own error handler (TIFFOpenExt), so that threads reading
 * at once keep their messages apart. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tiffio.h>

#include "ds_image.h"
#include "ds_inria.h"

/* A strip larger than this (a whole image in one strip, say) is read a row
 * at a time instead (TIFFReadScanline), so that memory stays at a row; the
 * tests lower it to reach that path with small files. */
size_t ds_inria__strip_limit = 16u << 20;

/* libtiff allocates no more than this at once for one file. */
#define DS_INRIA_MAX_ALLOC ((tmsize_t)256 << 20)

/* One TIFF being read: where libtiff's first error message lands. */
typedef struct ds_inria_tiff {
    TIFF *tif;
    const char *path;
    char msg[200];
} ds_inria_tiff;

static int ds_inria__on_error(TIFF *tif, void *user, const char *module, const char *fmt,
                              va_list ap)
{
    ds_inria_tiff *t = user;
    if (!t->msg[0])
        vsnprintf(t->msg, sizeof(t->msg), fmt, ap);
    return 1; /* handled: not printed */
}

static int ds_inria__on_warning(TIFF *tif, void *user, const char *module, const char *fmt,
                                va_list ap)
{
    return 1; /* unknown tags and the like do not stop a sample */
}

static int ds_inria__fail(ds_inria_tiff *t, const char *what, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s: corrupt TIFF: %s%s%s", t->path, what, t->msg[0] ? ": " : "",
             t->msg);
    return -EINVAL;
}

/* Opens path and reads its header fields into *h. */
static int ds_inria__open_tiff(ds_inria_tiff *t, const char *path, imghdr_tiff *h, char *err,
                               size_t errlen)
{
    memset(t, 0, sizeof(*t));
    t->path = path;
    TIFFOpenOptions *o = TIFFOpenOptionsAlloc();
    if (!o) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -ENOMEM;
    }
    TIFFOpenOptionsSetErrorHandlerExtR(o, ds_inria__on_error, t);
    TIFFOpenOptionsSetWarningHandlerExtR(o, ds_inria__on_warning, t);
    TIFFOpenOptionsSetMaxSingleMemAlloc(o, DS_INRIA_MAX_ALLOC);
    /* "m": read(), not a map of the whole file */
    t->tif = TIFFOpenExt(path, "rm", o);
    TIFFOpenOptionsFree(o);
    if (!t->tif) {
        FILE *f = fopen(path, "rb");
        if (!f) {
            int e = errno;
            snprintf(err, errlen, "%s: cannot open: %s", path, strerror(e));
            return -e;
        }
        fclose(f);
        return ds_inria__fail(t, "cannot read the header", err, errlen);
    }
    uint16_t bits = 0, samples = 0, photometric = 0, planar = 0, format = 0, compression = 0;
    uint32_t w = 0, hh = 0;
    TIFFGetField(t->tif, TIFFTAG_IMAGEWIDTH, &w);
    TIFFGetField(t->tif, TIFFTAG_IMAGELENGTH, &hh);
    TIFFGetFieldDefaulted(t->tif, TIFFTAG_BITSPERSAMPLE, &bits);
    TIFFGetFieldDefaulted(t->tif, TIFFTAG_SAMPLESPERPIXEL, &samples);
    TIFFGetFieldDefaulted(t->tif, TIFFTAG_PLANARCONFIG, &planar);
    TIFFGetFieldDefaulted(t->tif, TIFFTAG_SAMPLEFORMAT, &format);
    TIFFGetFieldDefaulted(t->tif, TIFFTAG_COMPRESSION, &compression);
    memset(h, 0, sizeof(*h));
    h->width = w;
    h->height = hh;
    h->bits = bits;
    h->samples = samples;
    h->photometric = TIFFGetField(t->tif, TIFFTAG_PHOTOMETRIC, &photometric) ? photometric
                                                                              : UINT32_MAX;
    h->planar = planar;
    h->sample_format = format;
    h->compression = compression;
    h->tiled = TIFFIsTiled(t->tif);
    return 0;
}

/* Where a span of decoded pixels goes. */
typedef struct ds_inria_dest {
    ds_image *img;            /* an image's pixels, or */
    ds_mask *mask;            /* a mask's: 0 background, anything else 1 */
    uint8_t *cls;             /* mask: one row of classes */
    bool invert;              /* min-is-white: 0 is white */
} ds_inria_dest;

/* Hands over pixels x0 .. x0+n-1 of row y: sample c of pixel i at ch[c][i
 * * stride]. */
static void ds_inria__span(ds_inria_dest *t, uint32_t y, uint32_t x0, uint32_t n,
                           const uint8_t *const *ch, size_t stride)
{
    if (t->img) {
        ds_image_span(t->img, y, x0, n, ch, stride);
        return;
    }
    for (uint32_t i = 0; i < n; i++)
        t->cls[i] = (uint8_t)((t->invert ? 255 - ch[0][i * stride] : ch[0][i * stride]) != 0);
    ds_mask_span(t->mask, y, x0, n, t->cls);
}

static void ds_inria__invert(uint8_t *p, size_t n, bool invert)
{
    if (invert)
        for (size_t i = 0; i < n; i++)
            p[i] = (uint8_t)(255 - p[i]);
}

/* Decodes every strip or tile of the image and hands its rows over: a
 * buffer per plane used (`planes`: 1, or the 3 colour planes of separate
 * RGB), each one strip or tile. */
static int ds_inria__decode(ds_inria_tiff *t, const imghdr_tiff *h, uint32_t channels,
                            ds_inria_dest *dest, char *err, size_t errlen)
{
    TIFF *tif = t->tif;
    const uint32_t W = h->width, H = h->height;
    const bool separate = h->planar == IMGHDR_TIFF_SEPARATE;
    const uint32_t planes = separate ? channels : 1;
    const size_t stride = separate ? 1 : h->samples;
    /* an image's colour rows: min-is-white is inverted in the buffer, a
     * mask inverts as it classes */
    const bool invert_img = dest->img && dest->invert;
    uint8_t *buf[3] = {NULL, NULL, NULL};
    const uint8_t *ch[3];
    int rc = 0;
    if (h->tiled) {
        uint32_t tw = 0, th = 0;
        TIFFGetField(tif, TIFFTAG_TILEWIDTH, &tw);
        TIFFGetField(tif, TIFFTAG_TILELENGTH, &th);
        tmsize_t size = TIFFTileSize(tif);
        if (tw == 0 || th == 0 || size <= 0 ||
            (uint64_t)size < (uint64_t)tw * th * (separate ? 1 : h->samples))
            return ds_inria__fail(t, "bad tile size", err, errlen);
        if (size > DS_INRIA_MAX_ALLOC) { /* a tile's buffer: bounded as libtiff's own */
            snprintf(err, errlen, "%s: tiles of %ux%u pixels take %lld bytes each; the reader "
                     "takes tiles of at most %lld MiB", t->path, tw, th, (long long)size,
                     (long long)(DS_INRIA_MAX_ALLOC >> 20));
            return -EINVAL;
        }
        for (uint32_t p = 0; p < planes; p++)
            if (!(buf[p] = malloc((size_t)size))) {
                rc = -ENOMEM;
                goto oom;
            }
        for (uint32_t ty = 0; ty < H; ty += th)
            for (uint32_t tx = 0; tx < W; tx += tw) {
                for (uint32_t p = 0; p < planes; p++) {
                    uint32_t tile = TIFFComputeTile(tif, tx, ty, 0, (uint16_t)p);
                    if (TIFFReadEncodedTile(tif, tile, buf[p], size) < 0) {
                        char what[64];
                        snprintf(what, sizeof(what), "tile %u", tile);
                        rc = ds_inria__fail(t, what, err, errlen);
                        goto done;
                    }
                    ds_inria__invert(buf[p], (size_t)size, invert_img);
                }
                uint32_t rows = H - ty < th ? H - ty : th, cols = W - tx < tw ? W - tx : tw;
                for (uint32_t r = 0; r < rows; r++) {
                    for (uint32_t c = 0; c < channels; c++)
                        ch[c] = separate ? buf[c] + (size_t)r * tw
                                         : buf[0] + (size_t)r * tw * h->samples + c;
                    ds_inria__span(dest, ty + r, tx, cols, ch, stride);
                }
            }
        goto done;
    }
    uint32_t rps = 0;
    TIFFGetFieldDefaulted(tif, TIFFTAG_ROWSPERSTRIP, &rps);
    if (rps == 0 || rps > H)
        rps = H;
    tmsize_t size = TIFFStripSize(tif), line = TIFFScanlineSize(tif);
    if (size <= 0 || line <= 0 || (uint64_t)line < (uint64_t)W * (separate ? 1 : h->samples))
        return ds_inria__fail(t, "bad strip size", err, errlen);
    if ((size_t)size <= ds_inria__strip_limit) {
        for (uint32_t p = 0; p < planes; p++)
            if (!(buf[p] = malloc((size_t)size))) {
                rc = -ENOMEM;
                goto oom;
            }
        for (uint32_t y0 = 0; y0 < H; y0 += rps) {
            uint32_t rows = H - y0 < rps ? H - y0 : rps;
            for (uint32_t p = 0; p < planes; p++) {
                uint32_t strip = TIFFComputeStrip(tif, y0, (uint16_t)p);
                tmsize_t got = TIFFReadEncodedStrip(tif, strip, buf[p], size);
                if (got < 0 || (uint64_t)got < (uint64_t)rows * line) {
                    char what[64];
                    snprintf(what, sizeof(what), "strip %u", strip);
                    rc = ds_inria__fail(t, what, err, errlen);
                    goto done;
                }
                ds_inria__invert(buf[p], (size_t)got, invert_img);
            }
            for (uint32_t r = 0; r < rows; r++) {
                for (uint32_t c = 0; c < channels; c++)
                    ch[c] = separate ? buf[c] + (size_t)r * line : buf[0] + (size_t)r * line + c;
                ds_inria__span(dest, y0 + r, 0, W, ch, stride);
            }
        }
        goto done;
    }
    /* Strips too large to hold: row by row. Separate planes would be read
     * a plane at a time, and a pixel needs its three at once. */
    if (separate && channels > 1) {
        snprintf(err, errlen, "%s: RGB in separate planes, in strips of %lld bytes (above %zu): "
                 "not supported; rewrite it in smaller strips (tiffcp -r 64) or contiguous "
                 "samples (tiffcp -p contig)", t->path, (long long)size, ds_inria__strip_limit);
        return -EINVAL;
    }
    if (!(buf[0] = malloc((size_t)line))) {
        rc = -ENOMEM;
        goto oom;
    }
    for (uint32_t y = 0; y < H; y++) {
        if (TIFFReadScanline(tif, buf[0], y, 0) < 0) {
            char what[64];
            snprintf(what, sizeof(what), "row %u", y);
            rc = ds_inria__fail(t, what, err, errlen);
            goto done;
        }
        ds_inria__invert(buf[0], (size_t)line, invert_img);
        for (uint32_t c = 0; c < channels; c++)
            ch[c] = buf[0] + c;
        ds_inria__span(dest, y, 0, W, ch, stride);
    }
    goto done;
oom:
    snprintf(err, errlen, "%s: out of memory", t->path);
done:
    for (uint32_t p = 0; p < 3; p++)
        free(buf[p]);
    return rc;
}

/* Reads one file of the sample: its header, checked, then its pixels into
 * the sample's inputs (an image) or labels (a mask). */
static int ds_inria__load(const dataset *d, const char *path, enum ds_inria_kind kind, void *x,
                          void *labels, char *err, size_t errlen)
{
    ds_inria_tiff t;
    imghdr_tiff h;
    ds_image img;
    ds_mask mask;
    bool have_img = false, have_mask = false;
    uint8_t *cls = NULL;
    int rc = ds_inria__open_tiff(&t, path, &h, err, errlen);
    if (rc < 0)
        return rc;
    int channels = ds_inria__check(path, kind, &h, d->height, d->width, err, errlen);
    if (channels < 0) {
        rc = channels;
        goto done;
    }
    ds_inria_dest dest = {.invert = h.photometric == IMGHDR_TIFF_MINISWHITE};
    if (kind == DS_INRIA_IMAGE) {
        if ((rc = ds_image_init(&img, d, x, (uint32_t)channels, h.height, h.width, 0, 0, err,
                                errlen)) < 0)
            goto done;
        have_img = true;
        dest.img = &img;
    } else {
        if ((rc = ds_mask_init(&mask, d, labels, h.height, h.width, 0, 0, DS_NEAREST_PIL, err,
                               errlen)) < 0)
            goto done;
        have_mask = true;
        if (!(cls = malloc(h.width))) {
            snprintf(err, errlen, "%s: out of memory", path);
            rc = -ENOMEM;
            goto done;
        }
        dest.mask = &mask;
        dest.cls = cls;
    }
    if ((rc = ds_inria__decode(&t, &h, (uint32_t)channels, &dest, err, errlen)) < 0)
        goto done;
    if (have_img)
        ds_image_finish(&img);
    if (have_mask)
        ds_mask_finish(&mask);
done:
    if (have_img)
        ds_image_deinit(&img);
    if (have_mask)
        ds_mask_deinit(&mask);
    free(cls);
    TIFFClose(t.tif);
    return rc;
}

static int ds_inria__read(const dataset *d, uint64_t idx, void *x, void *labels, char *err,
                          size_t errlen)
{
    const ds_inria *p = d->priv;
    const char *name = p->names.names[idx];
    char path[PATH_MAX];
    int rc;
    if ((rc = ds_inria__path(path, p, "images", name, err, errlen)) < 0 ||
        (rc = ds_inria__load(d, path, DS_INRIA_IMAGE, x, labels, err, errlen)) < 0 ||
        (rc = ds_inria__path(path, p, "gt", name, err, errlen)) < 0 ||
        (rc = ds_inria__load(d, path, DS_INRIA_MASK, x, labels, err, errlen)) < 0) {
        /* the file's message, with the sample it was for */
        size_t n = strlen(err);
        snprintf(err + n, errlen > n ? errlen - n : 0, " (sample %llu)", (unsigned long long)idx);
        return rc;
    }
    return 0;
}

const dataset_reader ds_inria_reader = {
    .name = "InriaAerialDataProcessor",
    .open = ds_inria__open,
    .close = ds_inria__close,
    .read = ds_inria__read,
};
