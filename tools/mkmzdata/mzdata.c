/* Writing the synthetic Model Zoo data sets (mzdata.h): the scenes, and
 * the TIFF (libtiff), JPEG (libjpeg) and PNG (libpng) files of each
 * layout. */
#include "mzdata.h"

#include <errno.h>
#include <limits.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <tiffio.h>

#include <jpeglib.h>

#include "rng.h"

#define MZDATA_STREAM 0x6d7a6474u /* "mzdt" */

/* Cityscapes label ids the scenes use, with a colour each. */
static const struct {
    uint32_t id;
    uint8_t rgb[3];
} mzdata__city_colours[] = {
    {0, {0, 0, 0}},          /* unlabeled */
    {1, {20, 20, 20}},       /* ego vehicle */
    {7, {128, 64, 128}},     /* road */
    {8, {244, 35, 232}},     /* sidewalk */
    {11, {70, 70, 70}},      /* building */
    {17, {153, 153, 153}},   /* pole */
    {21, {107, 142, 35}},    /* vegetation */
    {23, {70, 130, 180}},    /* sky */
    {24, {220, 20, 60}},     /* person */
    {26, {0, 0, 142}},       /* car */
    {29, {0, 0, 90}},        /* caravan: a train id of 0 */
};

void mzdata_defaults(mzdata_opts *o, enum mzdata_kind kind)
{
    memset(o, 0, sizeof(*o));
    o->kind = kind;
    o->height = 64;
    o->width = 64;
    o->channels = 3;
    o->count = 8;
    o->seed = 1;
    o->tiff.compression = COMPRESSION_NONE;
    o->tiff.bits = 8;
    o->jpeg_quality = 95;
    if (kind == MZDATA_SKM) {
        o->depth = 16;
        o->height = o->width = 32;
        o->channels = 1;
    }
    o->hdf5.seg_classes = 6;
}

uint32_t mzdata_count(const mzdata_opts *o, bool eval)
{
    if (o->kind == MZDATA_SEVERSTAL) /* one directory: the processor splits it */
        return eval ? 0 : o->count;
    return eval ? (o->count + 3) / 4 : o->count;
}

static uint32_t mzdata__draw(uint64_t seed, uint64_t k, uint32_t lo, uint32_t hi)
{
    return lo + (uint32_t)(rng_hash(seed, MZDATA_STREAM, k) % (uint64_t)(hi - lo + 1));
}

void mzdata_scene_make(mzdata_scene *s, const mzdata_opts *o, bool eval, uint32_t index)
{
    memset(s, 0, sizeof(*s));
    s->kind = o->kind;
    s->seed = rng_hash(o->seed, eval ? 2 : 1, index);
    s->height = o->height;
    s->width = o->width;
    const int32_t H = (int32_t)o->height, W = (int32_t)o->width;
    const int32_t m = H < W ? H : W;
    uint64_t k = 0;
    if (o->kind == MZDATA_SKM) {
        /* six to eight solids, tissues in turn from a drawn first one:
         * every tissue in every knee */
        const int32_t D = (int32_t)o->depth;
        s->depth = o->depth;
        uint32_t n = mzdata__draw(s->seed, k++, 6, 8), first = mzdata__draw(s->seed, k++, 0, 5);
        for (uint32_t i = 0; i < n; i++) {
            mzdata_shape *sh = &s->shapes[s->nshapes++];
            sh->kind = (int)mzdata__draw(s->seed, k++, 0, 1);
            sh->cz = (int32_t)mzdata__draw(s->seed, k++, 0, (uint32_t)D - 1);
            sh->cy = (int32_t)mzdata__draw(s->seed, k++, 0, (uint32_t)H - 1);
            sh->cx = (int32_t)mzdata__draw(s->seed, k++, 0, (uint32_t)W - 1);
            sh->rz = (int32_t)mzdata__draw(s->seed, k++, (uint32_t)(D / 10 + 1), (uint32_t)(D / 4 + 2));
            sh->ry = (int32_t)mzdata__draw(s->seed, k++, (uint32_t)(H / 10 + 1), (uint32_t)(H / 4 + 2));
            sh->rx = (int32_t)mzdata__draw(s->seed, k++, (uint32_t)(W / 10 + 1), (uint32_t)(W / 4 + 2));
            sh->label = (first + i) % 6;
        }
        return;
    }
    if (o->kind == MZDATA_SEVERSTAL) {
        /* two in three images have class-3 defects, the rest class 1, 4, or
         * none; defects are long bright streaks or spots */
        uint32_t r = index % 6;
        s->severstal_class = r == 1 ? 1 : r == 3 ? 4 : r == 5 ? 0 : 3;
        if (!s->severstal_class)
            return;
    }
    uint32_t n = o->kind == MZDATA_CITYSCAPES ? 4 : mzdata__draw(s->seed, k++, 1, 3);
    for (uint32_t i = 0; i < n; i++) {
        mzdata_shape *sh = &s->shapes[s->nshapes++];
        sh->kind = (int)mzdata__draw(s->seed, k++, 0, 1);
        sh->cy = (int32_t)mzdata__draw(s->seed, k++, 0, (uint32_t)H - 1);
        sh->cx = (int32_t)mzdata__draw(s->seed, k++, 0, (uint32_t)W - 1);
        sh->ry = (int32_t)mzdata__draw(s->seed, k++, (uint32_t)(m / 12 + 1), (uint32_t)(m / 5 + 2));
        sh->rx = (int32_t)mzdata__draw(s->seed, k++, (uint32_t)(m / 12 + 1), (uint32_t)(m / 5 + 2));
        sh->label = 1;
        if (o->kind == MZDATA_SEVERSTAL && sh->kind == 1) /* a streak along the strip */
            sh->rx = sh->rx * 3, sh->ry = sh->ry / 3 + 1;
        if (o->kind == MZDATA_CITYSCAPES) {
            static const uint32_t things[] = {26, 26, 24, 17, 29, 0};
            sh->label = things[mzdata__draw(s->seed, k++, 0, 5)];
            if (sh->label == 24 || sh->label == 17) /* people and poles stand up */
                sh->kind = 1, sh->ry = sh->ry * 2, sh->rx = sh->label == 17 ? 1 : sh->rx / 2 + 1;
        }
    }
}

static bool mzdata__inside(const mzdata_shape *sh, uint32_t y, uint32_t x)
{
    int64_t dy = (int64_t)y - sh->cy, dx = (int64_t)x - sh->cx;
    if (sh->kind == 1)
        return dy >= -sh->ry && dy <= sh->ry && dx >= -sh->rx && dx <= sh->rx;
    return dy * dy * sh->rx * sh->rx + dx * dx * sh->ry * sh->ry <=
           (int64_t)sh->ry * sh->ry * sh->rx * sh->rx;
}

uint32_t mzdata_label(const mzdata_scene *s, uint32_t y, uint32_t x)
{
    for (uint32_t i = s->nshapes; i-- > 0;)
        if (mzdata__inside(&s->shapes[i], y, x))
            return s->shapes[i].label;
    if (s->kind != MZDATA_CITYSCAPES)
        return 0;
    /* a street: sky, buildings, vegetation, sidewalk, road, the car's bonnet */
    uint32_t H = s->height, band = y * 16 / H;
    if (band < 4)
        return 23;
    if (band < 8)
        return (x * 8 / s->width) % 3 == 2 ? 21 : 11;
    if (band < 10)
        return 8;
    if (band < 15)
        return 7;
    return (x * 4 / s->width) % 4 == 0 ? 0 : 1;
}

/* Whether voxel (h, w, d) is inside solid sh: an ellipsoid in integers,
 * (dz/rz)^2 + (dy/ry)^2 + (dx/rx)^2 <= 1, or a box. */
static bool mzdata__inside3(const mzdata_shape *sh, uint32_t h, uint32_t w, uint32_t d)
{
    int64_t dz = (int64_t)d - sh->cz, dy = (int64_t)h - sh->cy, dx = (int64_t)w - sh->cx;
    int64_t z2 = (int64_t)sh->rz * sh->rz, y2 = (int64_t)sh->ry * sh->ry;
    int64_t x2 = (int64_t)sh->rx * sh->rx;
    if (sh->kind == 1)
        return dz * dz <= z2 && dy * dy <= y2 && dx * dx <= x2;
    return dz * dz * y2 * x2 + dy * dy * z2 * x2 + dx * dx * z2 * y2 <= z2 * y2 * x2;
}

void mzdata_skm_voxel(const mzdata_scene *s, uint32_t h, uint32_t w, uint32_t d, int16_t echo[2],
                      unsigned *tissues)
{
    /* the background, then tissues 0..5: echo1 bright for the meniscus
     * (above 2^14: squares of 29 bits), echo2 of another contrast */
    static const int e1[7] = {300, 1200, 2600, 4100, 5200, 9000, 21000};
    static const int e2[7] = {250, 1800, 1500, 900, 3000, 12000, 700};
    unsigned bits = 0;
    int top = -1;
    for (uint32_t i = 0; i < s->nshapes; i++)
        if (mzdata__inside3(&s->shapes[i], h, w, d)) {
            bits |= 1u << s->shapes[i].label;
            top = (int)s->shapes[i].label;
        }
    uint64_t r = rng_hash(s->seed, MZDATA_STREAM + 3, ((uint64_t)d * s->height + h) * s->width + w);
    int tex = top < 0 ? ((d / 3 + h / 4) & 1 ? 40 : -40) : 0;
    echo[0] = (int16_t)(e1[top + 1] + tex + (int)(r & 255) - 128);
    echo[1] = (int16_t)(e2[top + 1] + tex / 2 + (int)((r >> 8) & 255) - 128);
    *tissues = bits;
}

uint8_t mzdata_gray(const uint8_t rgb[3])
{
    return (uint8_t)((rgb[0] + rgb[1] + rgb[2]) / 3);
}

void mzdata_rgb(const mzdata_scene *s, uint32_t y, uint32_t x, uint8_t rgb[3])
{
    uint32_t label = mzdata_label(s, y, x);
    uint64_t r = rng_hash(s->seed, MZDATA_STREAM + 1, (uint64_t)y * s->width + x);
    int base[3];
    if (s->kind == MZDATA_CITYSCAPES) {
        for (size_t i = 0; i < sizeof(mzdata__city_colours) / sizeof(mzdata__city_colours[0]); i++)
            if (mzdata__city_colours[i].id == label)
                for (int c = 0; c < 3; c++)
                    base[c] = mzdata__city_colours[i].rgb[c];
    } else if (label) { /* buildings and defects: bright, a little warm */
        base[0] = 205, base[1] = 195, base[2] = 180;
    } else { /* ground and steel: darker */
        base[0] = 80, base[1] = 95, base[2] = 85;
    }
    for (int c = 0; c < 3; c++) {
        int v = base[c] + (int)((r >> (8 * c)) & 31) - 16; /* texture, +-16 */
        rgb[c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
}

void mzdata_name(const mzdata_opts *o, bool eval, uint32_t index, char *dst, size_t len)
{
    switch (o->kind) {
    case MZDATA_INRIA:
        snprintf(dst, len, "%s%u.tif", eval ? "vienna" : "austin", index + 1);
        break;
    case MZDATA_SEVERSTAL: /* Kaggle's names are 9 hex digits, in no order of their own */
        snprintf(dst, len, "%09llx.jpg",
                 (unsigned long long)(rng_hash(o->seed, MZDATA_STREAM + 2, index) & 0xfffffffffull));
        break;
    case MZDATA_CITYSCAPES: {
        const char *city = eval ? "frankfurt" : index % 2 ? "bochum" : "aachen";
        snprintf(dst, len, "%s/%s_%06u_%06u", city, city, index / 2, 19 + index);
        break;
    }
    case MZDATA_SKM:
        snprintf(dst, len, "MTR_%03u.h5", 2 * index + (eval ? 2 : 1));
        break;
    }
}

/* mkdir -p of path. */
static int mzdata__mkdirs(const char *path, char *err, size_t errlen)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s", path);
    for (char *s = p + 1;; s++) {
        if (*s == '/' || !*s) {
            char c = *s;
            *s = '\0';
            if (mkdir(p, 0755) < 0 && errno != EEXIST) {
                snprintf(err, errlen, "%s: cannot make the directory: %s", p, strerror(errno));
                return -1;
            }
            *s = c;
            if (!c)
                return 0;
        }
    }
}

/* The image's pixels, interleaved (channels per pixel), and its mask. */
static void mzdata__render(const mzdata_scene *s, uint32_t channels, uint8_t *pix, uint8_t *mask,
                           uint8_t mask_on)
{
    for (uint32_t y = 0; y < s->height; y++)
        for (uint32_t x = 0; x < s->width; x++) {
            uint8_t rgb[3];
            size_t at = (size_t)y * s->width + x;
            mzdata_rgb(s, y, x, rgb);
            if (channels == 1)
                pix[at] = mzdata_gray(rgb);
            else
                memcpy(pix + 3 * at, rgb, 3);
            uint32_t l = mzdata_label(s, y, x);
            if (mask)
                mask[at] = (uint8_t)(mask_on ? (l ? mask_on : 0) : l);
        }
}

static int mzdata__tiff(const char *path, const mzdata_tiff *t, uint32_t h, uint32_t w,
                        uint32_t channels, const uint8_t *pix, char *err, size_t errlen)
{
    TIFF *tif = TIFFOpen(path, "w");
    if (!tif) {
        snprintf(err, errlen, "%s: cannot create", path);
        return -1;
    }
    uint16_t bits = t->bits ? t->bits : 8;
    bool planar = t->planar && channels > 1;
    TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, w);
    TIFFSetField(tif, TIFFTAG_IMAGELENGTH, h);
    TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, bits);
    TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, (uint16_t)channels);
    TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, channels == 3 ? PHOTOMETRIC_RGB : PHOTOMETRIC_MINISBLACK);
    TIFFSetField(tif, TIFFTAG_PLANARCONFIG, planar ? PLANARCONFIG_SEPARATE : PLANARCONFIG_CONTIG);
    TIFFSetField(tif, TIFFTAG_COMPRESSION, t->compression ? t->compression : COMPRESSION_NONE);
    if (t->compression == COMPRESSION_LZW || t->compression == COMPRESSION_ADOBE_DEFLATE)
        TIFFSetField(tif, TIFFTAG_PREDICTOR, PREDICTOR_HORIZONTAL);
    uint32_t bps = bits / 8, spp = planar ? 1 : channels, planes = planar ? channels : 1;
    int rc = 0;
    if (t->tile) {
        TIFFSetField(tif, TIFFTAG_TILEWIDTH, t->tile);
        TIFFSetField(tif, TIFFTAG_TILELENGTH, t->tile);
        size_t tsize = (size_t)t->tile * t->tile * spp * bps;
        uint8_t *buf = malloc(tsize);
        for (uint32_t p = 0; p < planes && buf && rc == 0; p++)
            for (uint32_t ty = 0; ty < h && rc == 0; ty += t->tile)
                for (uint32_t tx = 0; tx < w && rc == 0; tx += t->tile) {
                    memset(buf, 0, tsize);
                    for (uint32_t r = 0; r < t->tile && ty + r < h; r++)
                        for (uint32_t c = 0; c < t->tile && tx + c < w; c++)
                            for (uint32_t k = 0; k < spp; k++) {
                                uint8_t v = pix[((size_t)(ty + r) * w + tx + c) * channels +
                                                (planar ? p : k)];
                                size_t at = (((size_t)r * t->tile + c) * spp + k) * bps;
                                for (uint32_t b = 0; b < bps; b++) /* 16 bits: v * 257 */
                                    buf[at + b] = v;
                            }
                    if (TIFFWriteTile(tif, buf, tx, ty, 0, (uint16_t)p) < 0)
                        rc = -1;
                }
        if (!buf)
            rc = -1;
        free(buf);
    } else {
        TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP,
                     t->rows_per_strip ? t->rows_per_strip : TIFFDefaultStripSize(tif, 0));
        size_t line = (size_t)w * spp * bps;
        uint8_t *buf = malloc(line);
        for (uint32_t p = 0; p < planes && buf && rc == 0; p++)
            for (uint32_t y = 0; y < h && rc == 0; y++) {
                for (uint32_t x = 0; x < w; x++)
                    for (uint32_t k = 0; k < spp; k++)
                        for (uint32_t b = 0; b < bps; b++)
                            buf[((size_t)x * spp + k) * bps + b] =
                                pix[((size_t)y * w + x) * channels + (planar ? p : k)];
                if (TIFFWriteScanline(tif, buf, y, (uint16_t)p) < 0)
                    rc = -1;
            }
        if (!buf)
            rc = -1;
        free(buf);
    }
    TIFFClose(tif);
    if (rc < 0)
        snprintf(err, errlen, "%s: cannot write", path);
    return rc;
}

static int mzdata__jpeg(const char *path, uint32_t h, uint32_t w, uint32_t channels,
                        const uint8_t *pix, int quality, char *err, size_t errlen)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        return -1;
    }
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    c.err = jpeg_std_error(&jerr); /* writing our own pixels: errors are bugs, exit is fine */
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = w;
    c.image_height = h;
    c.input_components = (int)channels;
    c.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, quality, TRUE);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < h) {
        JSAMPROW row = (JSAMPROW)(pix + (size_t)c.next_scanline * w * channels);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    if (fclose(f) != 0) {
        snprintf(err, errlen, "%s: cannot write", path);
        return -1;
    }
    return 0;
}

static int mzdata__png(const char *path, uint32_t h, uint32_t w, uint32_t channels,
                       const uint8_t *pix, char *err, size_t errlen)
{
    png_image img;
    memset(&img, 0, sizeof(img));
    img.version = PNG_IMAGE_VERSION;
    img.width = w;
    img.height = h;
    img.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
    if (!png_image_write_to_file(&img, path, 0, pix, 0, NULL)) {
        snprintf(err, errlen, "%s: %s", path, img.message);
        return -1;
    }
    return 0;
}

/* Kaggle's run-length encoding of a mask: 1-based starts and lengths of
 * the runs of 1, the pixels numbered down each column, then across. */
static int mzdata__rle(FILE *f, const uint8_t *mask, uint32_t h, uint32_t w)
{
    uint64_t total = (uint64_t)h * w, start = 0;
    bool first = true, in = false;
    for (uint64_t k = 0; k <= total; k++) {
        bool on = k < total && mask[(k % h) * w + k / h];
        if (on && !in)
            start = k;
        if (!on && in) {
            fprintf(f, "%s%llu %llu", first ? "" : " ", (unsigned long long)start + 1,
                    (unsigned long long)(k - start));
            first = false;
        }
        in = on;
    }
    return 0;
}

static int mzdata__cmp_row(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int mzdata_write(const mzdata_opts *o, const char *dir, char *err, size_t errlen)
{
    if (o->kind == MZDATA_SKM)
        return mzdata_skm_write(o, dir, err, errlen);
    const uint32_t H = o->height, W = o->width, C = o->channels;
    uint8_t *pix = malloc((size_t)H * W * 3), *mask = malloc((size_t)H * W);
    char **rows = NULL;
    size_t nrows = 0;
    int rc = -1;
    if (!pix || !mask) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    if (o->kind == MZDATA_SEVERSTAL && !(rows = calloc(o->count, sizeof(*rows)))) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    for (int split = 0; split < 2; split++) {
        bool eval = split == 1;
        for (uint32_t i = 0; i < mzdata_count(o, eval); i++) {
            mzdata_scene s;
            char name[128], path[PATH_MAX + 256], sub[PATH_MAX];
            mzdata_scene_make(&s, o, eval, i);
            mzdata_name(o, eval, i, name, sizeof(name));
            const char *sp = eval ? "val" : "train";
            switch (o->kind) {
            case MZDATA_INRIA: {
                mzdata__render(&s, C, pix, mask, 255);
                mzdata_tiff mt = o->tiff;
                snprintf(sub, sizeof(sub), "%s/%s/images", dir, sp);
                if (mzdata__mkdirs(sub, err, errlen) < 0)
                    goto done;
                snprintf(path, sizeof(path), "%s/%s", sub, name);
                if (mzdata__tiff(path, &mt, H, W, C, pix, err, errlen) < 0)
                    goto done;
                snprintf(sub, sizeof(sub), "%s/%s/gt", dir, sp);
                if (mzdata__mkdirs(sub, err, errlen) < 0)
                    goto done;
                snprintf(path, sizeof(path), "%s/%s", sub, name);
                mt.planar = false;
                mt.bits = 8;
                if (mzdata__tiff(path, &mt, H, W, 1, mask, err, errlen) < 0)
                    goto done;
                break;
            }
            case MZDATA_SEVERSTAL: {
                mzdata__render(&s, C, pix, mask, 1);
                snprintf(sub, sizeof(sub), "%s/train_images", dir);
                if (mzdata__mkdirs(sub, err, errlen) < 0)
                    goto done;
                snprintf(path, sizeof(path), "%s/%s", sub, name);
                if (mzdata__jpeg(path, H, W, C, pix, o->jpeg_quality, err, errlen) < 0)
                    goto done;
                if (!s.severstal_class)
                    break;
                char *line = NULL;
                size_t len = 0;
                FILE *mf = open_memstream(&line, &len);
                if (!mf) {
                    snprintf(err, errlen, "out of memory");
                    goto done;
                }
                fprintf(mf, "%s,%u,", name, s.severstal_class);
                mzdata__rle(mf, mask, H, W);
                fclose(mf);
                rows[nrows++] = line;
                break;
            }
            case MZDATA_CITYSCAPES: {
                mzdata__render(&s, C, pix, mask, 0);
                char city[64];
                snprintf(city, sizeof(city), "%.*s", (int)(strchr(name, '/') - name), name);
                snprintf(sub, sizeof(sub), "%s/leftImg8bit/%s/%s", dir, sp, city);
                if (mzdata__mkdirs(sub, err, errlen) < 0)
                    goto done;
                snprintf(path, sizeof(path), "%s/leftImg8bit/%s/%s_leftImg8bit.png", dir, sp, name);
                if (mzdata__png(path, H, W, C, pix, err, errlen) < 0)
                    goto done;
                snprintf(sub, sizeof(sub), "%s/gtFine/%s/%s", dir, sp, city);
                if (mzdata__mkdirs(sub, err, errlen) < 0)
                    goto done;
                snprintf(path, sizeof(path), "%s/gtFine/%s/%s_gtFine_labelIds.png", dir, sp, name);
                if (mzdata__png(path, H, W, 1, mask, err, errlen) < 0)
                    goto done;
                break;
            }
            case MZDATA_SKM: /* mzdata_skm_write */
                break;
            }
        }
    }
    if (o->kind == MZDATA_SEVERSTAL) {
        /* Kaggle's order: by ImageId */
        qsort(rows, nrows, sizeof(*rows), mzdata__cmp_row);
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/train.csv", dir);
        FILE *f = fopen(path, "w");
        if (!f) {
            snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
            goto done;
        }
        fprintf(f, "ImageId,ClassId,EncodedPixels\n");
        for (size_t i = 0; i < nrows; i++)
            fprintf(f, "%s\n", rows[i]);
        if (fclose(f) != 0) {
            snprintf(err, errlen, "%s: cannot write", path);
            goto done;
        }
    }
    rc = 0;
done:
    for (size_t i = 0; i < nrows; i++)
        free(rows[i]);
    free(rows);
    free(pix);
    free(mask);
    return rc;
}
