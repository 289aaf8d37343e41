/* The Model Zoo U-Net's readers (Inria TIFF, Severstal JPEG + run lengths,
 * Cityscapes PNG) on small sets written by tools/mkmzdata's writer, whose
 * pixels the tests compute rather than read back; every kind of damage
 * gets its message. Also the standard score and augment_data, which
 * dataset_read applies for them. */
#include <check.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <tiffio.h>
#include <unistd.h>

#include <jpeglib.h>

#include "dataset.h"
#include "ds_cityscapes.h"
#include "ds_image.h"
#include "mzdata.h"
#include "rle.h"

/* ds_inria_read.c's strip size above which it reads row by row. */
extern size_t ds_inria__strip_limit;

static char dir[256];        /* a fresh directory per test, removed after it */
static char err[2048];

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static void setup(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/dataset-mz-test.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    err[0] = 0;
    ds_inria__strip_limit = 16u << 20;
}

static void teardown(void)
{
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static const char *path_of(const char *name)
{
    static char p[PATH_MAX + 64];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return p;
}

static void write_set(const mzdata_opts *o)
{
    ck_assert_msg(mzdata_write(o, dir, err, sizeof(err)) == 0, "%s", err);
}

/* The input of a reader: 8-bit inputs and byte labels unless said. */
typedef struct input {
    Appliance__PlanInput in;
    uint64_t shape[3];
} input;

static void input_init(input *t, const char *processor, uint32_t C, uint32_t H, uint32_t W,
                       uint32_t classes)
{
    Appliance__PlanInput in = APPLIANCE__PLAN_INPUT__INIT;
    t->in = in;
    t->shape[0] = C;
    t->shape[1] = H;
    t->shape[2] = W;
    t->in.data_processor = (char *)processor;
    t->in.data_dir = dir;
    t->in.num_classes = classes;
    t->in.seed = 7;
    t->in.sample_shape = t->shape;
    t->in.n_sample_shape = 3;
    t->in.input_unorm8 = true;
    t->in.labels_uint8 = true;
    t->in.class_id = -1;
}

static dataset *open_ok(input *t)
{
    dataset *d = NULL;
    ck_assert_msg(dataset_open(&d, &t->in, err, sizeof(err)) == 0, "%s", err);
    return d;
}

/* Opening fails with a message that contains `want`. */
static void open_fails(input *t, const char *want)
{
    dataset *d = (dataset *)1;
    err[0] = 0;
    ck_assert_int_lt(dataset_open(&d, &t->in, err, sizeof(err)), 0);
    ck_assert_ptr_null(d);
    ck_assert_msg(strstr(err, want) != NULL, "\"%s\" does not say \"%s\"", err, want);
}

/* A sample's buffers, as bytes. */
typedef struct sample {
    uint8_t *x, *y;
} sample;

static sample read_ok(dataset *d, uint64_t epoch, uint64_t idx)
{
    sample s = {malloc(dataset_sample_elems(d) * (dataset_input_unorm8(d) ? 1 : 4)),
                malloc(dataset_label_elems(d) * (dataset_labels_u8(d) ? 1 : 4))};
    ck_assert_msg(dataset_read(d, epoch, idx, s.x, s.y, err, sizeof(err)) == 0, "%s", err);
    return s;
}

static void sample_free(sample *s)
{
    free(s->x);
    free(s->y);
}

/* The value channel c of the model input takes from pixel (y, x) as
 * written: a gray file holds the mean of the colour, converted to gray as
 * Pillow's "L" or spread over three channels. */
static uint8_t expect_value(const mzdata_scene *sc, uint32_t file_channels, uint32_t C,
                            uint32_t c, uint32_t y, uint32_t x)
{
    uint8_t rgb[3];
    mzdata_rgb(sc, y, x, rgb);
    if (file_channels == 1)
        return mzdata_gray(rgb);
    return C == 3 ? rgb[c] : ds_image_luma(rgb[0], rgb[1], rgb[2]);
}

/* ---- Inria Aerial: TIFF ---- */

/* Every sample of the split against the scenes written. */
static void inria_check_all(const mzdata_opts *o, uint32_t C, bool eval)
{
    input t;
    input_init(&t, "InriaAerialDataProcessor", C, o->height, o->width, 2);
    t.in.split = eval ? "eval" : "train";
    dataset *d = open_ok(&t);
    ck_assert_uint_eq(dataset_size(d), mzdata_count(o, eval));
    const uint32_t H = o->height, W = o->width;
    for (uint32_t i = 0; i < dataset_size(d); i++) {
        /* names sort as austinN for N = 1..9: index order */
        mzdata_scene sc;
        mzdata_scene_make(&sc, o, eval, i);
        sample s = read_ok(d, 0, i);
        for (uint32_t c = 0; c < C; c++)
            for (uint32_t y = 0; y < H; y++)
                for (uint32_t x = 0; x < W; x++) {
                    uint8_t want = expect_value(&sc, o->channels, C, c, y, x);
                    uint8_t got = s.x[((size_t)c * H + y) * W + x];
                    ck_assert_msg(got == want, "image %u (%u, %u, %u): %u, written %u", i, c, y,
                                  x, got, want);
                }
        for (uint32_t y = 0; y < H; y++)
            for (uint32_t x = 0; x < W; x++)
                ck_assert_uint_eq(s.y[(size_t)y * W + x], mzdata_label(&sc, y, x) != 0);
        sample_free(&s);
    }
    dataset_close(d);
}

START_TEST(inria_reads)
{
    mzdata_opts o;
    mzdata_defaults(&o, MZDATA_INRIA);
    o.height = 40;
    o.width = 56;
    o.count = 5;
    write_set(&o);
    inria_check_all(&o, 3, false);
    inria_check_all(&o, 3, true);
    /* RGB read as gray: Pillow's "L" of the written colours */
    inria_check_all(&o, 1, false);
}
END_TEST

/* The layouts libtiff decodes: strips of several rows, tiles (the last
 * ones cut by the image's edge), LZW, deflate and PackBits, planar RGB,
 * and a strip read row by row when it is above the limit. */
START_TEST(inria_layouts)
{
    static const struct {
        uint32_t tile, rows;
        uint16_t compression;
        bool planar;
        size_t limit;
    } layouts[] = {
        {0, 5, COMPRESSION_NONE, false, 16u << 20},
        {16, 0, COMPRESSION_NONE, false, 16u << 20},
        {0, 0, COMPRESSION_LZW, false, 16u << 20},
        {32, 0, COMPRESSION_LZW, false, 16u << 20},
        {0, 7, COMPRESSION_ADOBE_DEFLATE, false, 16u << 20},
        {0, 0, COMPRESSION_PACKBITS, false, 16u << 20},
        {0, 3, COMPRESSION_NONE, true, 16u << 20},
        {16, 0, COMPRESSION_LZW, true, 16u << 20},
        {0, 1000, COMPRESSION_LZW, false, 100},   /* one strip, read by rows */
        {0, 1000, COMPRESSION_NONE, false, 100},
    };
    for (size_t k = 0; k < sizeof(layouts) / sizeof(layouts[0]); k++) {
        teardown();
        setup();
        mzdata_opts o;
        mzdata_defaults(&o, MZDATA_INRIA);
        o.height = 37;
        o.width = 50;
        o.count = 2;
        o.seed = 3 + k;
        o.tiff.tile = layouts[k].tile;
        o.tiff.rows_per_strip = layouts[k].rows;
        o.tiff.compression = layouts[k].compression;
        o.tiff.planar = layouts[k].planar;
        write_set(&o);
        ds_inria__strip_limit = layouts[k].limit;
        inria_check_all(&o, 3, false);
        inria_check_all(&o, 1, false);
    }
    /* separate planes in strips too large to hold: refused, with the way out */
    teardown();
    setup();
    mzdata_opts o;
    mzdata_defaults(&o, MZDATA_INRIA);
    o.count = 1;
    o.tiff.planar = true;
    o.tiff.rows_per_strip = 1000;
    write_set(&o);
    ds_inria__strip_limit = 100;
    input t;
    input_init(&t, "InriaAerialDataProcessor", 3, o.height, o.width, 2);
    dataset *d = open_ok(&t);
    uint8_t x[3 * 64 * 64], y[64 * 64];
    ck_assert_int_lt(dataset_read(d, 0, 0, x, y, err, sizeof(err)), 0);
    ck_assert_msg(strstr(err, "/train/images/austin1.tif: RGB in separate planes, in strips of "
                              "4096 bytes (above 100): not supported") != NULL, "%s", err);
    ck_assert_msg(strstr(err, "(sample 0)") != NULL, "%s", err);
    dataset_close(d);
}
END_TEST

/* Gray files read as RGB: the gray in every channel. */
START_TEST(inria_gray_to_rgb)
{
    mzdata_opts o;
    mzdata_defaults(&o, MZDATA_INRIA);
    o.channels = 1;
    o.count = 3;
    o.tiff.tile = 16;
    write_set(&o);
    inria_check_all(&o, 3, false);
    inria_check_all(&o, 1, false);
}
END_TEST

START_TEST(luma_as_pillow)
{
    /* Pillow's L = R 299/1000 + G 587/1000 + B 114/1000, rounded */
    ck_assert_uint_eq(ds_image_luma(255, 0, 0), 76);   /* 76.245 */
    ck_assert_uint_eq(ds_image_luma(0, 255, 0), 150);  /* 149.685 */
    ck_assert_uint_eq(ds_image_luma(0, 0, 255), 29);   /* 29.07 */
    ck_assert_uint_eq(ds_image_luma(255, 255, 255), 255);
    ck_assert_uint_eq(ds_image_luma(10, 20, 30), 18);  /* 18.15 */
    ck_assert_uint_eq(ds_image_luma(0, 0, 0), 0);
}
END_TEST

/* Writes a TIFF of one sample per pixel and the given bits (8 or 16) and
 * photometric, all pixels v. */
static void write_tiff(const char *name, uint32_t h, uint32_t w, uint16_t bits, uint16_t spp,
                       uint16_t photometric, uint16_t format, uint8_t v)
{
    TIFF *tif = TIFFOpen(path_of(name), "w");
    ck_assert_ptr_nonnull(tif);
    TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, w);
    TIFFSetField(tif, TIFFTAG_IMAGELENGTH, h);
    TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, bits);
    TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, spp);
    TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, photometric);
    TIFFSetField(tif, TIFFTAG_SAMPLEFORMAT, format);
    TIFFSetField(tif, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
    TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP, 4);
    if (photometric == PHOTOMETRIC_PALETTE) {
        static uint16_t map[256];
        TIFFSetField(tif, TIFFTAG_COLORMAP, map, map, map);
    }
    size_t line = (size_t)w * spp * bits / 8;
    uint8_t *row = malloc(line);
    memset(row, v, line);
    for (uint32_t y = 0; y < h; y++)
        ck_assert_int_ge(TIFFWriteScanline(tif, row, y, 0), 0);
    free(row);
    TIFFClose(tif);
}

/* A gray 48x32 TIFF in one tile of 32768x32768 pixels (1 GiB), written
 * byte by byte: the header, one directory of ten entries, the tile. */
static void write_huge_tile(const char *name)
{
    static const uint16_t tags[10][2] = { /* tag, type (3 SHORT, 4 LONG) */
        {256, 4}, {257, 4}, {258, 3}, {259, 3}, {262, 3},
        {277, 3}, {322, 4}, {323, 4}, {324, 4}, {325, 4}};
    const uint32_t values[10] = {48, 32, 8, 1, 1, 1, 32768, 32768, 136, 16};
    uint8_t b[152] = {'I', 'I', 42, 0, 8, 0, 0, 0, 10, 0};
    for (int i = 0; i < 10; i++) {
        uint8_t *e = b + 10 + 12 * i;
        e[0] = (uint8_t)tags[i][0];
        e[1] = (uint8_t)(tags[i][0] >> 8);
        e[2] = (uint8_t)tags[i][1];
        e[4] = 1; /* one value, in the entry */
        for (int k = 0; k < 4; k++)
            e[8 + k] = (uint8_t)(values[i] >> (8 * k));
    }
    FILE *f = fopen(path_of(name), "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(b, 1, sizeof(b), f), sizeof(b));
    fclose(f);
}

START_TEST(inria_damage)
{
    mzdata_opts o;
    mzdata_defaults(&o, MZDATA_INRIA);
    o.height = 32;
    o.width = 48;
    o.count = 2;
    write_set(&o);
    input t;
    input_init(&t, "InriaAerialDataProcessor", 3, 32, 40, 2);
    open_fails(&t, "/train/images/austin1.tif: 48x32 pixels (W x H); the model input is 40x32 "
                   "(its image shape's H 32, W 40), and the reader does not resize");
    input_init(&t, "InriaAerialDataProcessor", 3, 32, 48, 3);
    open_fails(&t, "InriaAerialDataProcessor: masks are building or not: num_classes must be 1 "
                   "or 2, not 3");
    input_init(&t, "InriaAerialDataProcessor", 2, 32, 48, 2);
    open_fails(&t, "C = 1 (gray) or 3 (RGB)");
    input_init(&t, "InriaAerialDataProcessor", 3, 32, 48, 2);
    t.in.data_dir = "";
    open_fails(&t, "InriaAerialDataProcessor: data_dir is not set");

    input_init(&t, "InriaAerialDataProcessor", 3, 32, 48, 2);
    dataset *d = open_ok(&t);
    dataset_close(d);
    /* a mask of another size */
    write_tiff("train/gt/austin2.tif", 16, 48, 8, 1, PHOTOMETRIC_MINISBLACK, SAMPLEFORMAT_UINT, 0);
    open_fails(&t, "/train/gt/austin2.tif: 48x16 pixels, its image is 48x32");
    /* a mask that is RGB */
    write_tiff("train/gt/austin2.tif", 32, 48, 8, 3, PHOTOMETRIC_RGB, SAMPLEFORMAT_UINT, 0);
    open_fails(&t, "/train/gt/austin2.tif: RGB of 3 samples per pixel; a mask is gray, one sample");
    /* 16-bit, floating-point and palette images */
    write_tiff("train/gt/austin2.tif", 32, 48, 8, 1, PHOTOMETRIC_MINISBLACK, SAMPLEFORMAT_UINT, 0);
    write_tiff("train/images/austin2.tif", 32, 48, 16, 3, PHOTOMETRIC_RGB, SAMPLEFORMAT_UINT, 9);
    open_fails(&t, "/train/images/austin2.tif: 16-bit samples; the reader takes 8-bit TIFF (16-bit, "
                   "1-bit and other depths are not converted)");
    write_tiff("train/images/austin2.tif", 32, 48, 32, 1, PHOTOMETRIC_MINISBLACK,
               SAMPLEFORMAT_IEEEFP, 0);
    open_fails(&t, "/train/images/austin2.tif: 32-bit samples");
    write_tiff("train/images/austin2.tif", 32, 48, 8, 1, PHOTOMETRIC_MINISBLACK, SAMPLEFORMAT_INT, 0);
    open_fails(&t, "/train/images/austin2.tif: signed samples (SampleFormat 2); the reader takes "
                   "unsigned 8-bit");
    write_tiff("train/images/austin2.tif", 32, 48, 8, 1, PHOTOMETRIC_PALETTE, SAMPLEFORMAT_UINT, 0);
    open_fails(&t, "/train/images/austin2.tif: palette (photometric 3) of 1 sample per pixel; the "
                   "reader takes gray or RGB (convert palette images to RGB)");
    /* min-is-white gray: inverted as it is read */
    write_tiff("train/images/austin2.tif", 32, 48, 8, 1, PHOTOMETRIC_MINISWHITE, SAMPLEFORMAT_UINT,
               200);
    d = open_ok(&t);
    sample s = read_ok(d, 0, 1);
    for (size_t i = 0; i < 3 * 32 * 48; i++)
        ck_assert_uint_eq(s.x[i], 55);
    sample_free(&s);
    /* tiles too large to hold (a fuzzed file asked 2 GiB): refused when
     * the sample is read */
    dataset_close(d);
    write_tiff("train/gt/austin2.tif", 32, 48, 8, 1, PHOTOMETRIC_MINISBLACK, SAMPLEFORMAT_UINT, 0);
    write_huge_tile("train/images/austin2.tif");
    input_init(&t, "InriaAerialDataProcessor", 1, 32, 48, 2);
    d = open_ok(&t);
    s.x = malloc(32 * 48);
    s.y = malloc(32 * 48);
    ck_assert_int_lt(dataset_read(d, 0, 1, s.x, s.y, err, sizeof(err)), 0);
    ck_assert_msg(strstr(err, "/train/images/austin2.tif: tiles of 32768x32768 pixels take "
                              "1073741824 bytes each; the reader takes tiles of at most 256 MiB") !=
                      NULL, "%s", err);
    ck_assert_msg(strstr(err, "(sample 1)") != NULL, "%s", err);
    sample_free(&s);
    dataset_close(d);
    input_init(&t, "InriaAerialDataProcessor", 3, 32, 48, 2);
    d = open_ok(&t);
    /* a file cut short: refused when the sample is read */
    write_tiff("train/images/austin2.tif", 32, 48, 8, 3, PHOTOMETRIC_RGB, SAMPLEFORMAT_UINT, 1);
    ck_assert_int_eq(truncate(path_of("train/images/austin2.tif"), 2000), 0);
    s.x = malloc(3 * 32 * 48);
    s.y = malloc(32 * 48);
    ck_assert_int_lt(dataset_read(d, 0, 1, s.x, s.y, err, sizeof(err)), 0);
    ck_assert_msg(strstr(err, "/train/images/austin2.tif: corrupt TIFF: ") != NULL, "%s", err);
    ck_assert_msg(strstr(err, "(sample 1)") != NULL, "%s", err);
    sample_free(&s);
    dataset_close(d);
    /* a missing mask; not a TIFF */
    write_tiff("train/images/austin2.tif", 32, 48, 8, 3, PHOTOMETRIC_RGB, SAMPLEFORMAT_UINT, 1);
    ck_assert_int_eq(unlink(path_of("train/gt/austin2.tif")), 0);
    open_fails(&t, "/train/gt/austin2.tif: missing (the mask of ");
    FILE *f = fopen(path_of("train/gt/austin2.tif"), "w");
    fputs("not a tiff", f);
    fclose(f);
    open_fails(&t, "/train/gt/austin2.tif: not a TIFF file");
    /* no validation directory */
    t.in.split = "eval";
    nftw(path_of("val"), rm_one, 16, FTW_DEPTH | FTW_PHYS);
    open_fails(&t, "/val/images: cannot open the directory: No such file or directory");
}
END_TEST

/* ---- Severstal: run lengths, train.csv, JPEG ---- */

START_TEST(rle_cases)
{
    /* a 3 x 2 image (h 3, w 2): pixel k is row k % 3 of column k / 3 */
    uint8_t m[6];
    ck_assert_int_eq(rle_decode("1 2", 3, 2, m, err, sizeof(err)), 0);
    ck_assert_mem_eq(m, ((uint8_t[]){1, 0, 1, 0, 0, 0}), 6);
    ck_assert_int_eq(rle_decode("3 2", 3, 2, m, err, sizeof(err)), 0);
    ck_assert_mem_eq(m, ((uint8_t[]){0, 1, 0, 0, 1, 0}), 6);
    ck_assert_int_eq(rle_decode(" 6 1  1 1 ", 3, 2, m, err, sizeof(err)), 0);
    ck_assert_mem_eq(m, ((uint8_t[]){1, 0, 0, 0, 0, 1}), 6);
    ck_assert_int_eq(rle_decode("1 6", 3, 2, m, err, sizeof(err)), 0);
    ck_assert_mem_eq(m, ((uint8_t[]){1, 1, 1, 1, 1, 1}), 6);
    ck_assert_int_eq(rle_decode("-1", 3, 2, m, err, sizeof(err)), 0);
    ck_assert_mem_eq(m, ((uint8_t[]){0, 0, 0, 0, 0, 0}), 6);
    ck_assert_int_eq(rle_decode("", 3, 2, m, err, sizeof(err)), 0);
    ck_assert_int_eq(rle_decode("2 0", 3, 2, m, err, sizeof(err)), 0);
    ck_assert_mem_eq(m, ((uint8_t[]){0, 0, 0, 0, 0, 0}), 6);
    /* malformed */
    ck_assert_int_eq(rle_decode("1 2 5", 3, 2, m, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "EncodedPixels: 3 numbers; runs are pairs (start, length)");
    ck_assert_int_eq(rle_decode("1 x2", 3, 2, m, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "EncodedPixels: \"x2\" (number 2) is not a whole number");
    ck_assert_int_eq(rle_decode("1 2 -3 1", 3, 2, m, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "EncodedPixels: \"-3\" (number 3) is not a whole number");
    ck_assert_int_eq(rle_decode("1 2.5", 3, 2, m, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "EncodedPixels: \"2.5\" (number 2) is not a whole number");
    ck_assert_int_eq(rle_decode("5 3", 3, 2, m, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "EncodedPixels: run 1 (start 5, length 3) passes the 2x3 image's 6 pixels");
    ck_assert_int_eq(rle_decode("1 1 0 1", 3, 2, m, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "EncodedPixels: run 2 (start 0, length 1) passes the 2x3 image's 6 pixels");
    ck_assert_int_eq(rle_decode("1 99999999999999999999", 3, 2, m, err, sizeof(err)), -EINVAL);
}
END_TEST

START_TEST(csv_parse)
{
    rle_table t;
    const char *text = "\xef\xbb\xbfImageId,ClassId,EncodedPixels\r\n"
                       "a.jpg,3,1 2 5 1\r\n"
                       "\r\n"
                       "\"b,c.jpg\",1,\"7 \"\"8\"\"\"\n"
                       "d.jpg,4,\n";
    ck_assert_int_eq(rle_table_parse(&t, text, strlen(text), "train.csv", err, sizeof(err)), 0);
    ck_assert_uint_eq(t.count, 3);
    ck_assert_str_eq(t.rows[0].image, "a.jpg");
    ck_assert_uint_eq(t.rows[0].class_id, 3);
    ck_assert_str_eq(t.rows[0].runs, "1 2 5 1");
    ck_assert_uint_eq(t.rows[0].line, 2);
    ck_assert_str_eq(t.rows[1].image, "b,c.jpg");
    ck_assert_str_eq(t.rows[1].runs, "7 \"8\"");
    ck_assert_uint_eq(t.rows[1].line, 4);
    ck_assert_str_eq(t.rows[2].runs, "");
    rle_table_deinit(&t);
    /* the columns in another order */
    text = "EncodedPixels,ImageId,ClassId\n1 1,x.jpg,2\n";
    ck_assert_int_eq(rle_table_parse(&t, text, strlen(text), "train.csv", err, sizeof(err)), 0);
    ck_assert_str_eq(t.rows[0].image, "x.jpg");
    ck_assert_uint_eq(t.rows[0].class_id, 2);
    rle_table_deinit(&t);
    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"ImageId_ClassId,EncodedPixels\na.jpg_1,1 1\n",
         "train.csv: line 1: the header does not name the columns ImageId, ClassId and "
         "EncodedPixels (the older ImageId_ClassId layout is not read)"},
        {"ImageId,ClassId,EncodedPixels\na.jpg,1\n", "train.csv: line 2: 2 fields; the header has 3"},
        {"ImageId,ClassId,EncodedPixels\na.jpg,x,1 1\n",
         "train.csv: line 2: ClassId \"x\" is not a whole number"},
        {"ImageId,ClassId,EncodedPixels\n,1,1 1\n", "train.csv: line 2: no ImageId"},
        {"ImageId,ClassId,EncodedPixels\n\"a.jpg,1,1 1\n",
         "train.csv: line 2: a quote that does not end"},
        {"", "train.csv: empty: no header (ImageId,ClassId,EncodedPixels)"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_int_eq(rle_table_parse(&t, bad[i].text, strlen(bad[i].text), "train.csv", err,
                                         sizeof(err)), -EINVAL);
        ck_assert_str_eq(err, bad[i].msg);
    }
}
END_TEST

/* Decodes a JPEG with libjpeg's defaults as the reader does: gray or RGB. */
static uint8_t *decode_jpeg(const char *path, uint32_t *h, uint32_t *w, uint32_t *comps)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    struct jpeg_decompress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e);
    jpeg_create_decompress(&c);
    jpeg_stdio_src(&c, f);
    jpeg_read_header(&c, TRUE);
    c.out_color_space = c.num_components == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_start_decompress(&c);
    *h = c.output_height;
    *w = c.output_width;
    *comps = (uint32_t)c.output_components;
    uint8_t *pix = malloc((size_t)*h * *w * *comps);
    while (c.output_scanline < c.output_height) {
        JSAMPROW row = pix + (size_t)c.output_scanline * *w * *comps;
        jpeg_read_scanlines(&c, &row, 1);
    }
    jpeg_finish_decompress(&c);
    jpeg_destroy_decompress(&c);
    fclose(f);
    return pix;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The images of class 3 in train.csv's order (by name), as indices. */
static uint32_t severstal_class3(const mzdata_opts *o, uint32_t *order)
{
    char *names[64];
    uint32_t n = 0;
    for (uint32_t i = 0; i < o->count; i++) {
        mzdata_scene sc;
        mzdata_scene_make(&sc, o, false, i);
        if (sc.severstal_class != 3)
            continue;
        names[n] = malloc(32);
        mzdata_name(o, false, i, names[n], 32);
        n++;
    }
    qsort(names, n, sizeof(*names), cmp_str);
    for (uint32_t k = 0; k < n; k++) {
        for (uint32_t i = 0; i < o->count; i++) {
            char name[32];
            mzdata_name(o, false, i, name, sizeof(name));
            if (strcmp(name, names[k]) == 0)
                order[k] = i;
        }
        free(names[k]);
    }
    return n;
}

static void severstal_check(uint32_t file_channels, uint32_t C)
{
    mzdata_opts o;
    mzdata_defaults(&o, MZDATA_SEVERSTAL);
    o.height = 24;
    o.width = 80;
    o.channels = file_channels;
    o.count = 12;
    write_set(&o);
    uint32_t order[64];
    uint32_t n = severstal_class3(&o, order);
    ck_assert_uint_eq(n, 6);
    input t;
    input_init(&t, "SeverstalBinaryClassDataProcessor", C, 24, 80, 2);
    t.in.class_id = 3;
    dataset *d = open_ok(&t);
    ck_assert_uint_eq(dataset_size(d), 5); /* floor(0.85 * 6) */
    for (int split = 0; split < 2; split++) {
        if (split == 1) {
            dataset_close(d);
            t.in.split = "eval";
            d = open_ok(&t);
            ck_assert_uint_eq(dataset_size(d), 1);
        }
        for (uint32_t k = 0; k < dataset_size(d); k++) {
            uint32_t i = order[split ? 5 + k : k];
            mzdata_scene sc;
            char name[32], path[PATH_MAX];
            mzdata_scene_make(&sc, &o, false, i);
            mzdata_name(&o, false, i, name, sizeof(name));
            snprintf(path, sizeof(path), "%s/train_images/%s", dir, name);
            uint32_t h, w, comps;
            uint8_t *ref = decode_jpeg(path, &h, &w, &comps);
            ck_assert_uint_eq(comps, file_channels);
            sample s = read_ok(d, 0, k);
            for (uint32_t c = 0; c < C; c++)
                for (uint32_t p = 0; p < h * w; p++) {
                    const uint8_t *px = ref + (size_t)p * comps;
                    uint8_t want = comps == C ? px[c] : comps == 1 ? px[0]
                                                     : ds_image_luma(px[0], px[1], px[2]);
                    ck_assert_uint_eq(s.x[(size_t)c * h * w + p], want);
                }
            for (uint32_t y = 0; y < 24; y++)
                for (uint32_t x = 0; x < 80; x++)
                    ck_assert_uint_eq(s.y[y * 80 + x], mzdata_label(&sc, y, x));
            sample_free(&s);
            free(ref);
        }
    }
    dataset_close(d);
}

START_TEST(severstal_reads)
{
    severstal_check(3, 1);
}
END_TEST

START_TEST(severstal_reads_gray_and_rgb)
{
    severstal_check(1, 1);
    teardown();
    setup();
    severstal_check(1, 3);
    teardown();
    setup();
    severstal_check(3, 3);
}
END_TEST

START_TEST(severstal_split)
{
    mzdata_opts o;
    mzdata_defaults(&o, MZDATA_SEVERSTAL);
    o.count = 30; /* 15 of class 3, 5 of class 1, 5 of class 4, 5 without defects */
    write_set(&o);
    input t;
    input_init(&t, "SeverstalBinaryClassDataProcessor", 1, 64, 64, 2);
    static const struct {
        int class_id;
        double split;
        uint64_t train, eval;
    } cases[] = {
        {3, 0, 12, 3},      /* floor(0.85 * 15) */
        {3, 0.5, 7, 8},
        {3, 1.0 / 3.0, 5, 10},
        {1, 0, 4, 1},
        {4, 0.6, 3, 2},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        t.in.class_id = cases[i].class_id;
        t.in.train_test_split = cases[i].split;
        t.in.split = "train";
        dataset *d = open_ok(&t);
        ck_assert_uint_eq(dataset_size(d), cases[i].train);
        dataset_close(d);
        t.in.split = "eval";
        d = open_ok(&t);
        ck_assert_uint_eq(dataset_size(d), cases[i].eval);
        dataset_close(d);
    }
    t.in.class_id = 3;
    t.in.train_test_split = 1;
    t.in.split = "eval";
    open_fails(&t, "/train.csv: train_test_split 1 of the 15 rows of ClassId 3 leaves the "
                   "evaluation split empty");
    t.in.class_id = 2;
    open_fails(&t, "/train.csv: no rows of ClassId 2");
    t.in.class_id = -1;
    open_fails(&t, "SeverstalBinaryClassDataProcessor: class_id is not set: the defect class (1 "
                   "to 4) whose runs form the mask");
    t.in.class_id = 5;
    open_fails(&t, "SeverstalBinaryClassDataProcessor: class_id 5: Severstal's defect classes are "
                   "1 to 4");
}
END_TEST

/* Rewrites train.csv with one more row. */
static void append_csv(const char *row)
{
    FILE *f = fopen(path_of("train.csv"), "a");
    ck_assert_ptr_nonnull(f);
    fputs(row, f);
    fclose(f);
}

START_TEST(severstal_damage)
{
    mzdata_opts o;
    mzdata_defaults(&o, MZDATA_SEVERSTAL);
    o.height = 32;
    o.width = 40;
    o.count = 6; /* 3 of class 3 */
    write_set(&o);
    uint32_t order[8];
    ck_assert_uint_eq(severstal_class3(&o, order), 3);
    char name[32], path[PATH_MAX];
    mzdata_name(&o, false, order[1], name, sizeof(name));
    snprintf(path, sizeof(path), "%s/train_images/%s", dir, name);
    input t;
    input_init(&t, "SeverstalBinaryClassDataProcessor", 1, 32, 40, 2);
    t.in.class_id = 3;
    t.in.train_test_split = 0.99;
    dataset *d = open_ok(&t);
    ck_assert_uint_eq(dataset_size(d), 2);
    /* a truncated JPEG fails its sample with libjpeg's reason */
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(truncate(path, st.st_size / 2), 0);
    uint8_t x[32 * 40], y[32 * 40];
    ck_assert_int_eq(dataset_read(d, 0, 0, x, y, err, sizeof(err)), 0);
    ck_assert_int_eq(dataset_read(d, 0, 1, x, y, err, sizeof(err)), -EINVAL);
    char want[2 * PATH_MAX + 512];
    snprintf(want, sizeof(want), "%s: corrupt JPEG: Premature end of JPEG file (sample 1)", path);
    ck_assert_str_eq(err, want);
    /* garbage after the header */
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, 400, SEEK_SET), 0);
    for (int i = 0; i < 200; i++)
        fputc(0xff - i, f);
    fclose(f);
    ck_assert_int_eq(dataset_read(d, 0, 1, x, y, err, sizeof(err)), -EINVAL);
    snprintf(want, sizeof(want), "%s: corrupt JPEG: ", path);
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "%s", err);
    dataset_close(d);
    /* not a JPEG at all: refused at open, naming the row */
    f = fopen(path, "wb");
    fputs("GIF89a", f);
    fclose(f);
    snprintf(want, sizeof(want), "%s: not a JPEG file (%s/train.csv line ", path, dir);
    open_fails(&t, want);
    unlink(path);
    snprintf(want, sizeof(want), "%s: cannot open: No such file or directory (%s/train.csv line ",
             path, dir);
    open_fails(&t, want);

    /* malformed runs fail the sample that reads them */
    teardown();
    setup();
    write_set(&o);
    mzdata_name(&o, false, order[0], name, sizeof(name));
    char row[128];
    snprintf(row, sizeof(row), "%s,3,1 2 3\n%s,3,1 x\n%s,3,1280 2\n", name, name, name);
    append_csv(row);
    t.in.train_test_split = 1;
    d = open_ok(&t);
    ck_assert_uint_eq(dataset_size(d), 6);
    ck_assert_int_eq(dataset_read(d, 0, 2, x, y, err, sizeof(err)), 0);
    static const char *const why[] = {
        "line 7 (%s): EncodedPixels: 3 numbers; runs are pairs (start, length) (sample 3)",
        "line 8 (%s): EncodedPixels: \"x\" (number 2) is not a whole number (sample 4)",
        "line 9 (%s): EncodedPixels: run 1 (start 1280, length 2) passes the 40x32 image's 1280 "
        "pixels (sample 5)",
    };
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(dataset_read(d, 0, 3 + (uint64_t)k, x, y, err, sizeof(err)), -EINVAL);
        char tail[256];
        snprintf(tail, sizeof(tail), why[k], name);
        snprintf(want, sizeof(want), "%s/train.csv: %s", dir, tail);
        ck_assert_str_eq(err, want);
    }
    dataset_close(d);
}
END_TEST

/* The tiles of a sample larger than the Model Zoo's largest resize repeat
 * it: Severstal's images resize to at most 256 rows. */
START_TEST(severstal_resize_and_tile)
{
    mzdata_opts o;
    mzdata_defaults(&o, MZDATA_SEVERSTAL);
    o.height = 32;
    o.width = 48;
    o.count = 1;
    write_set(&o);
    input t;
    input_init(&t, "SeverstalBinaryClassDataProcessor", 1, 300, 24, 2);
    t.in.class_id = 3;
    t.in.train_test_split = 1;
    dataset *d = open_ok(&t);
    sample s = read_ok(d, 0, 0);
    mzdata_scene sc;
    mzdata_scene_make(&sc, &o, false, 0);
    /* rows 256.. are rows 0..; the mask is nearest as PyTorch takes it:
     * column floor(x * 2), row floor(y * 32 / 256) = y / 8 */
    for (uint32_t y = 0; y < 300; y++)
        for (uint32_t x = 0; x < 24; x++) {
            uint32_t my = y % 256;
            if (y >= 256)
                ck_assert_uint_eq(s.x[y * 24 + x], s.x[(y - 256) * 24 + x]);
            ck_assert_uint_eq(s.y[y * 24 + x], mzdata_label(&sc, my * 32 / 256, 2 * x));
        }
    sample_free(&s);
    dataset_close(d);
}
END_TEST

/* ---- Cityscapes: PNG label ids ---- */

START_TEST(cityscapes_train_ids)
{
    static const uint8_t want[34] = {0, 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 5, 0, 0, 0,
                                     6, 0, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 0, 0, 17, 18, 19};
    ck_assert_mem_eq(ds_cityscapes__train_id, want, 34);
}
END_TEST

START_TEST(cityscapes_reads)
{
    mzdata_opts o;
    mzdata_defaults(&o, MZDATA_CITYSCAPES);
    o.height = 32;
    o.width = 64;
    o.count = 5;
    write_set(&o);
    for (int split = 0; split < 2; split++) {
        input t;
        input_init(&t, "CityscapesDataProcessor", 3, 32, 64, 20);
        t.in.split = split ? "eval" : "train";
        dataset *d = open_ok(&t);
        ck_assert_uint_eq(dataset_size(d), split ? 2 : 5);
        /* sorted by path: aachen 0, 2, 4, then bochum 1, 3 */
        static const uint32_t train_order[] = {0, 2, 4, 1, 3};
        for (uint32_t k = 0; k < dataset_size(d); k++) {
            mzdata_scene sc;
            mzdata_scene_make(&sc, &o, split, split ? k : train_order[k]);
            sample s = read_ok(d, 0, k);
            for (uint32_t c = 0; c < 3; c++)
                for (uint32_t y = 0; y < 32; y++)
                    for (uint32_t x = 0; x < 64; x++)
                        ck_assert_uint_eq(s.x[(c * 32 + y) * 64 + x],
                                          expect_value(&sc, 3, 3, c, y, x));
            for (uint32_t y = 0; y < 32; y++)
                for (uint32_t x = 0; x < 64; x++)
                    ck_assert_uint_eq(s.y[y * 64 + x],
                                      ds_cityscapes__train_id[mzdata_label(&sc, y, x)]);
            sample_free(&s);
        }
        dataset_close(d);
    }
}
END_TEST

/* PyTorch's antialiased bicubic, written out plainly in double for one
 * output value: the reference the reader's float32 resize must meet
 * within one level. */
static double ref_cubic(double x)
{
    x = fabs(x);
    if (x < 1)
        return (1.5 * x - 2.5) * x * x + 1;
    if (x < 2)
        return ((-0.5 * x + 2.5) * x - 4) * x + 2;
    return 0;
}

static void ref_weights(uint32_t n, uint32_t m, uint32_t k, int *lo, int *len, double *w)
{
    double s = (double)n / m, support = s >= 1 ? 2 * s : 2, center = s * (k + 0.5);
    double inv = s >= 1 ? 1 / s : 1;
    int a = (int)(center - support + 0.5), b = (int)(center + support + 0.5);
    if (a < 0)
        a = 0;
    if (b > (int)n)
        b = (int)n;
    double total = 0;
    for (int j = a; j < b; j++)
        total += w[j - a] = ref_cubic((j - center + 0.5) * inv);
    for (int j = a; j < b; j++)
        w[j - a] /= total;
    *lo = a;
    *len = b - a;
}

START_TEST(cityscapes_resized)
{
    mzdata_opts o;
    mzdata_defaults(&o, MZDATA_CITYSCAPES);
    o.height = 64;
    o.width = 128;
    o.count = 1;
    write_set(&o);
    input t;
    input_init(&t, "CityscapesDataProcessor", 3, 16, 40, 20);
    dataset *d = open_ok(&t);
    sample s = read_ok(d, 0, 0);
    mzdata_scene sc;
    mzdata_scene_make(&sc, &o, false, 0);
    for (uint32_t c = 0; c < 3; c++)
        for (uint32_t y = 0; y < 16; y++)
            for (uint32_t x = 0; x < 40; x++) {
                int ylo, ylen, xlo, xlen;
                double wy[64], wx[64], v = 0;
                ref_weights(64, 16, y, &ylo, &ylen, wy);
                ref_weights(128, 40, x, &xlo, &xlen, wx);
                for (int j = 0; j < ylen; j++)
                    for (int i = 0; i < xlen; i++)
                        v += wy[j] * wx[i] * expect_value(&sc, 3, 3, c, (uint32_t)(ylo + j),
                                                          (uint32_t)(xlo + i));
                v = v < 0 ? 0 : v > 255 ? 255 : v;
                int got = s.x[(c * 16 + y) * 40 + x];
                ck_assert_msg(fabs(got - v) <= 1.0, "(%u, %u, %u): %d, reference %.3f", c, y, x,
                              got, v);
            }
    /* masks by Pillow's nearest: the pixel under each output's centre, the
     * position stepped by in / out from half a step (Pillow's ScaleAffine) */
    double py = 0.5 * 64 / 16;
    for (uint32_t y = 0; y < 16; y++, py += 64.0 / 16) {
        double px = 0.5 * 128 / 40;
        for (uint32_t x = 0; x < 40; x++, px += 128.0 / 40)
            ck_assert_uint_eq(s.y[y * 40 + x],
                              ds_cityscapes__train_id[mzdata_label(&sc, (uint32_t)py, (uint32_t)px)]);
    }
    sample_free(&s);
    dataset_close(d);
}
END_TEST

/* Writes a gray 8-bit PNG of h x w, all v but pixel (1, 2) = odd. */
static void write_png_gray(const char *name, uint32_t h, uint32_t w, uint8_t v, uint8_t odd)
{
    png_image img;
    memset(&img, 0, sizeof(img));
    img.version = PNG_IMAGE_VERSION;
    img.width = w;
    img.height = h;
    img.format = PNG_FORMAT_GRAY;
    uint8_t *pix = malloc((size_t)h * w);
    memset(pix, v, (size_t)h * w);
    pix[1 * w + 2] = odd;
    ck_assert(png_image_write_to_file(&img, path_of(name), 0, pix, 0, NULL));
    free(pix);
}

START_TEST(cityscapes_damage)
{
    mzdata_opts o;
    mzdata_defaults(&o, MZDATA_CITYSCAPES);
    o.height = 16;
    o.width = 32;
    o.count = 2;
    write_set(&o);
    input t;
    input_init(&t, "CityscapesDataProcessor", 3, 16, 32, 19);
    open_fails(&t, "CityscapesDataProcessor: the labels are the 20 train ids (0: ignored in "
                   "evaluation): num_classes must be 20, not 19");
    input_init(&t, "CityscapesDataProcessor", 3, 16, 32, 20);
    const char *mask = "gtFine/train/aachen/aachen_000000_000019_gtFine_labelIds.png";
    /* a label id beyond Cityscapes' */
    write_png_gray(mask, 16, 32, 7, 40);
    dataset *d = open_ok(&t);
    uint8_t x[3 * 16 * 32], y[16 * 32];
    ck_assert_int_lt(dataset_read(d, 0, 0, x, y, err, sizeof(err)), 0);
    char want[PATH_MAX + 256];
    snprintf(want, sizeof(want), "%s/%s: pixel (x 2, y 1) has label id 40; Cityscapes' ids are 0 "
             "to 33 (sample 0)", dir, mask);
    ck_assert_str_eq(err, want);
    dataset_close(d);
    /* a mask of another size than its image */
    write_png_gray(mask, 8, 32, 7, 7);
    snprintf(want, sizeof(want), "%s/%s: 32x8 pixels, its image is 32x16", dir, mask);
    open_fails(&t, want);
    /* a missing mask */
    unlink(path_of(mask));
    snprintf(want, sizeof(want), "%s/%s: missing (the mask of %s/leftImg8bit/train/aachen/"
             "aachen_000000_000019_leftImg8bit.png)", dir, mask, dir);
    open_fails(&t, want);
    /* no images */
    t.in.split = "eval";
    nftw(path_of("leftImg8bit/val"), rm_one, 16, FTW_DEPTH | FTW_PHYS);
    ck_assert_int_eq(mkdir(path_of("leftImg8bit/val"), 0755), 0);
    open_fails(&t, "/leftImg8bit/val: no CITY/*_leftImg8bit.png files");
}
END_TEST

/* ---- the standard score, augment_data, the probe ---- */

START_TEST(standard_score)
{
    mzdata_opts o;
    mzdata_defaults(&o, MZDATA_INRIA);
    o.height = 20;
    o.width = 30;
    o.count = 1;
    write_set(&o);
    input t;
    input_init(&t, "InriaAerialDataProcessor", 3, 20, 30, 2);
    t.in.normalize = "standard_score";
    open_fails(&t, "normalize \"standard_score\" sends float32 inputs, but the plan asks for "
                   "8-bit inputs (input_unorm8)");
    t.in.input_unorm8 = false;
    dataset *d = open_ok(&t);
    ck_assert(!dataset_input_unorm8(d));
    sample s = read_ok(d, 0, 0);
    const float *x = (const float *)s.x;
    mzdata_scene sc;
    mzdata_scene_make(&sc, &o, false, 0);
    const size_t n = 3 * 20 * 30;
    double sum = 0, ss = 0, v[3 * 20 * 30];
    for (uint32_t c = 0; c < 3; c++)
        for (uint32_t yy = 0; yy < 20; yy++)
            for (uint32_t xx = 0; xx < 30; xx++)
                sum += v[(c * 20 + yy) * 30 + xx] = expect_value(&sc, 3, 3, c, yy, xx);
    double mean = sum / n;
    for (size_t i = 0; i < n; i++)
        ss += (v[i] - mean) * (v[i] - mean);
    double sd = sqrt(ss / (n - 1)), xs = 0, xss = 0;
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(fabs(x[i] - (v[i] - mean) / sd) < 1e-6, "%zu: %g, want %g", i, x[i],
                      (v[i] - mean) / sd);
        xs += x[i];
        xss += (double)x[i] * x[i];
    }
    /* mean 0 and unbiased variance 1 */
    ck_assert(fabs(xs / n) < 1e-6);
    ck_assert(fabs(xss / (n - 1) - 1) < 1e-5);
    sample_free(&s);
    dataset_close(d);
    /* a flat image has std 0: zeros, not NaN */
    write_tiff("train/images/austin1.tif", 20, 30, 8, 3, PHOTOMETRIC_RGB, SAMPLEFORMAT_UINT, 77);
    d = open_ok(&t);
    s = read_ok(d, 0, 0);
    for (size_t i = 0; i < n; i++)
        ck_assert_float_eq(((const float *)s.x)[i], 0.0f);
    sample_free(&s);
    dataset_close(d);
    t.in.normalize = "unit";
    open_fails(&t, "normalize \"unit\" is none of zero_one, zero_centered, standard_score, none");
}
END_TEST

/* The plane (h, w) of p transformed: a left-right flip, then `turns`
 * quarter turns counter-clockwise (torch.rot90). */
static uint8_t at_transformed(const uint8_t *p, uint32_t h, uint32_t w, bool flip, int turns,
                              uint32_t y, uint32_t x)
{
    /* undo the turns on the output position, then the flip */
    for (int k = 0; k < turns; k++) { /* out[y][x] = in[x][n-1-y] for a square */
        uint32_t ny = x, nx = (turns % 2 ? h : w) - 1 - y;
        if (h != w) /* two turns of a rectangle: the half turn */
            ny = h - 1 - y, nx = w - 1 - x, k++;
        y = ny;
        x = nx;
    }
    if (flip)
        x = w - 1 - x;
    return p[(size_t)y * w + x];
}

static void check_augment(uint32_t H, uint32_t W, int ncombos)
{
    mzdata_opts o;
    mzdata_defaults(&o, MZDATA_INRIA);
    o.height = H;
    o.width = W;
    o.count = 2;
    write_set(&o);
    input t;
    input_init(&t, "InriaAerialDataProcessor", 3, H, W, 2);
    dataset *plain = open_ok(&t);
    t.in.augment = true;
    dataset *aug = open_ok(&t);
    int seen[2][3] = {{0}};
    for (uint64_t epoch = 0; epoch < 30; epoch++)
        for (uint64_t i = 0; i < 2; i++) {
            sample a = read_ok(plain, 0, i), b = read_ok(aug, epoch, i), b2 = read_ok(aug, epoch, i);
            ck_assert_mem_eq(b.x, b2.x, 3 * H * W);
            int found = -1;
            for (int flip = 0; flip < 2 && found < 0; flip++)
                for (int turns = 0; turns < 3 && found < 0; turns += H == W ? 1 : 2) {
                    bool same = true;
                    for (uint32_t c = 0; c < 3 && same; c++)
                        for (uint32_t y = 0; y < H && same; y++)
                            for (uint32_t x = 0; x < W && same; x++)
                                same = b.x[(c * H + y) * W + x] ==
                                       at_transformed(a.x + c * H * W, H, W, flip, turns, y, x);
                    for (uint32_t y = 0; y < H && same; y++)
                        for (uint32_t x = 0; x < W && same; x++)
                            same = b.y[y * W + x] == at_transformed(a.y, H, W, flip, turns, y, x);
                    if (same)
                        found = flip * 3 + turns, seen[flip][turns]++;
                }
            ck_assert_msg(found >= 0, "epoch %llu sample %llu: not a flip and turns of the image",
                          (unsigned long long)epoch, (unsigned long long)i);
            sample_free(&a);
            sample_free(&b);
            sample_free(&b2);
        }
    int combos = 0;
    for (int f = 0; f < 2; f++)
        for (int k = 0; k < 3; k++)
            combos += seen[f][k] > 0;
    ck_assert_int_eq(combos, ncombos);
    dataset_close(plain);
    dataset_close(aug);
}

START_TEST(augment_square)
{
    check_augment(24, 24, 6); /* flips and 0, 1 or 2 quarter turns */
}
END_TEST

START_TEST(augment_rectangle)
{
    check_augment(16, 28, 4); /* flips and 0 or 2 quarter turns */
}
END_TEST

START_TEST(probe_sizes_without_decoding)
{
    mzdata_opts o;
    mzdata_defaults(&o, MZDATA_INRIA);
    o.count = 3;
    write_set(&o);
    input t;
    input_init(&t, "InriaAerialDataProcessor", 3, 64, 64, 2);
    dataset *d;
    ck_assert_msg(dataset_probe(&d, &t.in, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(dataset_size(d), 3);
    uint8_t x[3 * 64 * 64], y[64 * 64];
    ck_assert_int_eq(dataset_read(d, 0, 0, x, y, err, sizeof(err)), -ENOTSUP);
    dataset_close(d);

    teardown();
    setup();
    mzdata_defaults(&o, MZDATA_SEVERSTAL);
    o.count = 12;
    write_set(&o);
    input_init(&t, "SeverstalBinaryClassDataProcessor", 1, 256, 1600, 2);
    t.in.class_id = 3;
    ck_assert_msg(dataset_probe(&d, &t.in, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(dataset_size(d), 5);
    dataset_close(d);

    teardown();
    setup();
    mzdata_defaults(&o, MZDATA_CITYSCAPES);
    o.count = 4;
    write_set(&o);
    input_init(&t, "CityscapesDataProcessor", 3, 256, 512, 20);
    ck_assert_msg(dataset_probe(&d, &t.in, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(dataset_size(d), 4);
    dataset_close(d);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("dataset-mz");
    TCase *i = tcase_create("inria");
    tcase_add_checked_fixture(i, setup, teardown);
    tcase_set_timeout(i, 60);
    tcase_add_test(i, inria_reads);
    tcase_add_test(i, inria_layouts);
    tcase_add_test(i, inria_gray_to_rgb);
    tcase_add_test(i, luma_as_pillow);
    tcase_add_test(i, inria_damage);
    suite_add_tcase(s, i);
    TCase *v = tcase_create("severstal");
    tcase_add_checked_fixture(v, setup, teardown);
    tcase_set_timeout(v, 60);
    tcase_add_test(v, rle_cases);
    tcase_add_test(v, csv_parse);
    tcase_add_test(v, severstal_reads);
    tcase_add_test(v, severstal_reads_gray_and_rgb);
    tcase_add_test(v, severstal_split);
    tcase_add_test(v, severstal_damage);
    tcase_add_test(v, severstal_resize_and_tile);
    suite_add_tcase(s, v);
    TCase *c = tcase_create("cityscapes");
    tcase_add_checked_fixture(c, setup, teardown);
    tcase_set_timeout(c, 60);
    tcase_add_test(c, cityscapes_train_ids);
    tcase_add_test(c, cityscapes_reads);
    tcase_add_test(c, cityscapes_resized);
    tcase_add_test(c, cityscapes_damage);
    suite_add_tcase(s, c);
    TCase *n = tcase_create("common");
    tcase_add_checked_fixture(n, setup, teardown);
    tcase_set_timeout(n, 60);
    tcase_add_test(n, standard_score);
    tcase_add_test(n, augment_square);
    tcase_add_test(n, augment_rectangle);
    tcase_add_test(n, probe_sizes_without_decoding);
    suite_add_tcase(s, n);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
