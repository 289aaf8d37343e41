/* SeverstalBinaryClassDataProcessor, decoding: libjpeg(-turbo) decodes the
 * image a row at a time into the resize (ds_image), and the row's runs
 * (rle.c) make the mask. libjpeg's errors, and the warnings that mean
 * damaged data (a truncated file above all, which libjpeg would otherwise
 * fill with gray), leave the decoding by longjmp with a message: a bad
 * file fails its sample, never the process. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "ds_image.h"
#include "ds_severstal.h"

/* libjpeg's error manager, extended with the way out and the message. */
typedef struct ds_severstal_jerr {
    struct jpeg_error_mgr pub;
    jmp_buf out;
    char msg[JMSG_LENGTH_MAX];
} ds_severstal_jerr;

static void ds_severstal__error_exit(j_common_ptr cinfo)
{
    ds_severstal_jerr *e = (ds_severstal_jerr *)cinfo->err;
    cinfo->err->format_message(cinfo, e->msg);
    longjmp(e->out, 1);
}

/* Warnings (level -1) that mean the data is damaged stop the decoding as
 * errors do; the others (an unknown JFIF version, ...) and the trace
 * messages are dropped. */
static void ds_severstal__emit(j_common_ptr cinfo, int level)
{
    if (level >= 0)
        return;
    switch (cinfo->err->msg_code) {
    case JWRN_JPEG_EOF:
    case JWRN_HIT_MARKER:
    case JWRN_HUFF_BAD_CODE:
    case JWRN_ARITH_BAD_CODE:
    case JWRN_MUST_RESYNC:
    case JWRN_NOT_SEQUENTIAL:
    case JWRN_BOGUS_PROGRESSION:
        ds_severstal__error_exit(cinfo);
        break;
    default:
        cinfo->err->num_warnings++;
        break;
    }
}

static void ds_severstal__output(j_common_ptr cinfo)
{
    /* nothing on stderr: the message goes back to the caller */
}

/* Decodes the JPEG at path into the sample's inputs. */
static int ds_severstal__image(const dataset *d, const char *path, void *x, char *err,
                               size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(e));
        return -e;
    }
    struct jpeg_decompress_struct cinfo;
    ds_severstal_jerr jerr;
    ds_image img;
    volatile bool have_img = false;
    uint8_t *volatile row = NULL;
    volatile int rc = 0;
    memset(&img, 0, sizeof(img));
    cinfo.err = jpeg_std_error(&jerr.pub);
    jerr.pub.error_exit = ds_severstal__error_exit;
    jerr.pub.emit_message = ds_severstal__emit;
    jerr.pub.output_message = ds_severstal__output;
    jerr.msg[0] = '\0';
    if (setjmp(jerr.out)) {
        snprintf(err, errlen, "%s: corrupt JPEG: %s", path, jerr.msg);
        rc = -EINVAL;
        goto done;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_stdio_src(&cinfo, f);
    jpeg_read_header(&cinfo, TRUE);
    imghdr_jpeg hd = {cinfo.image_width, cinfo.image_height, (uint32_t)cinfo.num_components,
                      (uint32_t)cinfo.data_precision};
    int channels = ds_severstal__check(path, &hd, err, errlen);
    if (channels < 0) {
        rc = channels;
        goto done;
    }
    /* as Pillow opens it: gray stays gray, colour becomes RGB */
    cinfo.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_start_decompress(&cinfo);
    if (cinfo.output_components != channels) {
        snprintf(err, errlen, "%s: decodes to %d components, not %d", path,
                 cinfo.output_components, channels);
        rc = -EINVAL;
        goto done;
    }
    int irc = ds_image_init(&img, d, x, (uint32_t)channels, hd.height, hd.width,
                            DS_SEVERSTAL_MAX_H, DS_SEVERSTAL_MAX_W, err, errlen);
    if (irc < 0) {
        rc = irc;
        goto done;
    }
    have_img = true;
    if (!(row = malloc((size_t)hd.width * (size_t)channels))) {
        snprintf(err, errlen, "%s: out of memory", path);
        rc = -ENOMEM;
        goto done;
    }
    while (cinfo.output_scanline < cinfo.output_height) {
        uint32_t y = cinfo.output_scanline;
        JSAMPROW rows[1] = {row};
        jpeg_read_scanlines(&cinfo, rows, 1);
        const uint8_t *ch[3] = {row, row + 1, row + 2};
        ds_image_span(&img, y, 0, hd.width, ch, (size_t)channels);
    }
    jpeg_finish_decompress(&cinfo);
    ds_image_finish(&img);
done:
    if (have_img)
        ds_image_deinit(&img);
    free(row);
    jpeg_destroy_decompress(&cinfo);
    fclose(f);
    return rc;
}

/* The row's runs, decoded at the image's size, into the sample's labels. */
static int ds_severstal__mask(const dataset *d, const ds_severstal *p, const rle_row *r,
                              uint32_t h, uint32_t w, void *labels, char *err, size_t errlen)
{
    uint8_t *mask = malloc((size_t)h * w);
    if (!mask) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    char why[256];
    int rc = rle_decode(r->runs, h, w, mask, why, sizeof(why));
    if (rc < 0) {
        snprintf(err, errlen, "%s: line %u (%s): %s", p->csv, r->line, r->image, why);
        free(mask);
        return rc;
    }
    ds_mask m;
    rc = ds_mask_init(&m, d, labels, h, w, DS_SEVERSTAL_MAX_H, DS_SEVERSTAL_MAX_W,
                      DS_NEAREST_TORCH, err, errlen);
    if (rc == 0) {
        for (uint32_t y = 0; y < h; y++)
            ds_mask_span(&m, y, 0, w, mask + (size_t)y * w);
        ds_mask_finish(&m);
        ds_mask_deinit(&m);
    }
    free(mask);
    return rc;
}

static int ds_severstal__read(const dataset *d, uint64_t idx, void *x, void *labels, char *err,
                              size_t errlen)
{
    const ds_severstal *p = d->priv;
    const rle_row *r = &p->table.rows[p->rows[idx]];
    char path[PATH_MAX];
    imghdr_jpeg hd;
    int rc;
    /* the header first, for the mask's size, so that a bad mask fails
     * before the image is decoded */
    if ((rc = ds_severstal__path(path, p, r, err, errlen)) < 0 ||
        (rc = imghdr_jpeg_read(path, &hd, err, errlen)) < 0 ||
        (rc = ds_severstal__check(path, &hd, err, errlen)) < 0 ||
        (rc = ds_severstal__mask(d, p, r, hd.height, hd.width, labels, err, errlen)) < 0 ||
        (rc = ds_severstal__image(d, path, x, err, errlen)) < 0) {
        size_t n = strlen(err);
        snprintf(err + n, errlen > n ? errlen - n : 0, " (sample %llu)", (unsigned long long)idx);
        return rc;
    }
    return 0;
}

const dataset_reader ds_severstal_reader = {
    .name = "SeverstalBinaryClassDataProcessor",
    .open = ds_severstal__open,
    .close = ds_severstal__close,
    .read = ds_severstal__read,
};
