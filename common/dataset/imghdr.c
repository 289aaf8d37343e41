/* TIFF and JPEG headers read by hand (the TIFF 6.0 and BigTIFF layouts;
 * the JPEG markers of ITU T.81), so that sizing a data set needs neither
 * libtiff nor libjpeg. Every offset and count comes from the file and is
 * checked against its size before it is followed. */
#include "imghdr.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* An open TIFF file and its byte order. */
typedef struct imghdr__file {
    FILE *f;
    uint64_t size;
    bool big_endian;
    bool bigtiff;             /* 64-bit offsets and counts */
} imghdr__file;

/* Reads n bytes at off. Returns 0, or -1 when they are not all in the file. */
static int imghdr__at(imghdr__file *t, uint64_t off, void *buf, size_t n)
{
    if (off > t->size || n > t->size - off || fseeko(t->f, (off_t)off, SEEK_SET) != 0 ||
        fread(buf, 1, n, t->f) != n)
        return -1;
    return 0;
}

static uint64_t imghdr__uint(const imghdr__file *t, const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)p[t->big_endian ? n - 1 - i : i] << (8 * i);
    return v;
}

/* The TIFF field types a header field may have, and their sizes. */
static size_t imghdr__type_size(uint32_t type)
{
    switch (type) {
    case 1: /* BYTE */
        return 1;
    case 3: /* SHORT */
        return 2;
    case 4: /* LONG */
        return 4;
    case 16: /* LONG8 */
        return 8;
    default:
        return 0;
    }
}

/* Value k of a directory entry whose value field (4 or 8 bytes) is at
 * `field`: in the field when the values fit there, else at the offset it
 * holds. Returns 0, or -1 when the entry is of no integer type or points
 * outside the file. */
static int imghdr__value(imghdr__file *t, const uint8_t *field, uint32_t type, uint64_t count,
                         uint64_t k, uint64_t *v)
{
    size_t size = imghdr__type_size(type), inline_size = t->bigtiff ? 8 : 4;
    if (!size || k >= count)
        return -1;
    uint8_t b[8];
    if (count * size <= inline_size) {
        memcpy(b, field + k * size, size);
    } else {
        uint64_t off = imghdr__uint(t, field, inline_size);
        if (off > UINT64_MAX - k * size || imghdr__at(t, off + k * size, b, size) < 0)
            return -1;
    }
    *v = imghdr__uint(t, b, size);
    return 0;
}

int imghdr_tiff_read(const char *path, imghdr_tiff *h, char *err, size_t errlen)
{
    imghdr__file t = {0};
    struct stat st;
    uint8_t b[20];
    int rc = -EINVAL;
    memset(h, 0, sizeof(*h));
    h->photometric = UINT32_MAX;
    h->planar = IMGHDR_TIFF_CHUNKY;
    h->sample_format = IMGHDR_TIFF_UINT;
    h->samples = 1;
    h->bits = 1;
    h->compression = 1;
    if (!(t.f = fopen(path, "rb")) || fstat(fileno(t.f), &st) < 0) {
        int e = errno;
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(e));
        if (t.f)
            fclose(t.f);
        return -e;
    }
    t.size = (uint64_t)st.st_size;
    if (imghdr__at(&t, 0, b, 8) < 0 || !((b[0] == 'I' && b[1] == 'I') || (b[0] == 'M' && b[1] == 'M'))) {
        snprintf(err, errlen, "%s: not a TIFF file", path);
        goto done;
    }
    t.big_endian = b[0] == 'M';
    uint64_t magic = imghdr__uint(&t, b + 2, 2), ifd;
    if (magic == 42) {
        ifd = imghdr__uint(&t, b + 4, 4);
    } else if (magic == 43 && imghdr__uint(&t, b + 4, 2) == 8 && imghdr__at(&t, 8, b + 8, 8) == 0) {
        t.bigtiff = true;
        ifd = imghdr__uint(&t, b + 8, 8);
    } else {
        snprintf(err, errlen, "%s: not a TIFF file", path);
        goto done;
    }
    size_t count_size = t.bigtiff ? 8 : 2, entry_size = t.bigtiff ? 20 : 12;
    if (imghdr__at(&t, ifd, b, count_size) < 0) {
        snprintf(err, errlen, "%s: corrupt TIFF: the first directory (at %llu) is outside the file",
                 path, (unsigned long long)ifd);
        goto done;
    }
    uint64_t n = imghdr__uint(&t, b, count_size);
    if (n == 0 || n > (t.size - ifd - count_size) / entry_size) {
        snprintf(err, errlen, "%s: corrupt TIFF: the first directory has %llu entries, beyond the "
                 "file", path, (unsigned long long)n);
        goto done;
    }
    bool have_w = false, have_h = false;
    for (uint64_t i = 0; i < n; i++) {
        if (imghdr__at(&t, ifd + count_size + i * entry_size, b, entry_size) < 0)
            goto corrupt;
        uint32_t tag = (uint32_t)imghdr__uint(&t, b, 2), type = (uint32_t)imghdr__uint(&t, b + 2, 2);
        uint64_t count = imghdr__uint(&t, b + 4, t.bigtiff ? 8 : 4), v;
        const uint8_t *field = b + (t.bigtiff ? 12 : 8);
        switch (tag) {
        case 256: /* ImageWidth */
        case 257: /* ImageLength */
        case 259: /* Compression */
        case 262: /* PhotometricInterpretation */
        case 277: /* SamplesPerPixel */
        case 284: /* PlanarConfiguration */
        case 339: /* SampleFormat: each sample's; the first decides */
            if (imghdr__value(&t, field, type, count, 0, &v) < 0 || v > UINT32_MAX)
                goto corrupt;
            if (tag == 256)
                h->width = (uint32_t)v, have_w = true;
            else if (tag == 257)
                h->height = (uint32_t)v, have_h = true;
            else if (tag == 259)
                h->compression = (uint32_t)v;
            else if (tag == 262)
                h->photometric = (uint32_t)v;
            else if (tag == 277)
                h->samples = (uint32_t)v;
            else if (tag == 284)
                h->planar = (uint32_t)v;
            else
                h->sample_format = (uint32_t)v;
            break;
        case 258: /* BitsPerSample, one per sample */
            for (uint64_t k = 0; k < count && k < 16; k++) {
                if (imghdr__value(&t, field, type, count, k, &v) < 0 || v > UINT32_MAX)
                    goto corrupt;
                if (k == 0)
                    h->bits = (uint32_t)v;
                else if (v != h->bits)
                    h->bits_differ = true;
            }
            break;
        case 322: /* TileWidth */
            h->tiled = true;
            break;
        default:
            break;
        }
    }
    if (!have_w || !have_h || h->width == 0 || h->height == 0 || h->width > IMGHDR_MAX_SIDE ||
        h->height > IMGHDR_MAX_SIDE) {
        snprintf(err, errlen, "%s: corrupt TIFF: %ux%u pixels (1 to %u a side)", path, h->width,
                 h->height, IMGHDR_MAX_SIDE);
        goto done;
    }
    if (h->samples == 0 || h->bits == 0) {
        snprintf(err, errlen, "%s: corrupt TIFF: %u samples per pixel of %u bits", path,
                 h->samples, h->bits);
        goto done;
    }
    rc = 0;
    goto done;
corrupt:
    snprintf(err, errlen, "%s: corrupt TIFF: a field of the first directory is outside the file "
             "or not an integer", path);
done:
    fclose(t.f);
    return rc;
}

/* The frame header markers: SOF0..SOF15 but DHT (C4), JPG (C8) and DAC (CC). */
static bool imghdr__is_sof(int m)
{
    return m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc;
}

int imghdr_jpeg_read(const char *path, imghdr_jpeg *h, char *err, size_t errlen)
{
    memset(h, 0, sizeof(*h));
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(e));
        return -e;
    }
    int rc = -EINVAL;
    if (getc(f) != 0xff || getc(f) != 0xd8) {
        snprintf(err, errlen, "%s: not a JPEG file", path);
        goto done;
    }
    for (;;) {
        int c = getc(f);
        if (c == EOF)
            goto truncated;
        if (c != 0xff) {
            snprintf(err, errlen, "%s: corrupt JPEG: 0x%02x where a marker should be", path, c);
            goto done;
        }
        int m;
        while ((m = getc(f)) == 0xff) /* fill bytes */
            ;
        if (m == EOF)
            goto truncated;
        if (m == 0x01 || (m >= 0xd0 && m <= 0xd7)) /* no length */
            continue;
        if (m == 0xd9 || m == 0xda) {
            snprintf(err, errlen, "%s: corrupt JPEG: %s before the frame header", path,
                     m == 0xd9 ? "the end of the image" : "scan data");
            goto done;
        }
        int hi = getc(f), lo = getc(f);
        if (hi == EOF || lo == EOF)
            goto truncated;
        long len = (long)hi << 8 | lo;
        if (len < 2) {
            snprintf(err, errlen, "%s: corrupt JPEG: a segment of length %ld", path, len);
            goto done;
        }
        if (imghdr__is_sof(m)) {
            uint8_t s[6];
            if (len < 8 || fread(s, 1, sizeof(s), f) != sizeof(s))
                goto truncated;
            h->precision = s[0];
            h->height = (uint32_t)s[1] << 8 | s[2];
            h->width = (uint32_t)s[3] << 8 | s[4];
            h->components = s[5];
            if (h->width == 0 || h->height == 0) {
                /* a height of 0 is defined later (DNL), which nobody writes */
                snprintf(err, errlen, "%s: JPEG of %ux%u pixels: the frame header gives no size",
                         path, h->width, h->height);
                goto done;
            }
            rc = 0;
            goto done;
        }
        if (fseek(f, len - 2, SEEK_CUR) != 0)
            goto truncated;
    }
truncated:
    snprintf(err, errlen, "%s: truncated JPEG: the file ends before the frame header", path);
done:
    fclose(f);
    return rc;
}
