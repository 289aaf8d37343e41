/* The readers of files: MNIST IDX files and directories of PNG images and
 * masks, on small files the tests write themselves; every kind of damage
 * gets a message naming the file and the problem. When data/mnist exists
 * (scripts/fetch-mnist), it is checked too. */
#include <check.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset.h"

static char dir[256];        /* a fresh directory per test, removed after it */
static const char *mnist_dir = dir; /* where open_mnist reads */
static char err[1024];

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static void setup(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/dataset-test.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    err[0] = 0;
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

static void write_file(const char *name, const void *data, size_t len)
{
    FILE *f = fopen(path_of(name), "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* ---- MNIST IDX ---- */

enum { N = 5, ROWS = 2, COLS = 3 };

/* Writes an images file of N images of ROWS x COLS with pixel (i, k) = 10 i
 * + k, its header fields as given; `trim` bytes cut off the end (negative:
 * added). */
static void write_images(const char *name, uint32_t magic, uint32_t count, uint32_t rows,
                         uint32_t cols, int trim)
{
    uint8_t buf[16 + N * ROWS * COLS + 8] = {0};
    put_be32(buf, magic);
    put_be32(buf + 4, count);
    put_be32(buf + 8, rows);
    put_be32(buf + 12, cols);
    for (int i = 0; i < N; i++)
        for (int k = 0; k < ROWS * COLS; k++)
            buf[16 + i * ROWS * COLS + k] = (uint8_t)(10 * i + k);
    buf[16] = 255; /* pixel 0 of image 0 is white */
    write_file(name, buf, (size_t)(16 + N * ROWS * COLS - trim));
}

/* Writes a labels file of `count` labels i % 3, the last one `last`. */
static void write_labels(const char *name, uint32_t magic, uint32_t count, uint8_t last, int trim)
{
    uint8_t buf[8 + 16] = {0};
    put_be32(buf, magic);
    put_be32(buf + 4, count);
    for (uint32_t i = 0; i < count && i < 16; i++)
        buf[8 + i] = (uint8_t)(i % 3);
    if (count && count <= 16)
        buf[8 + count - 1] = last;
    write_file(name, buf, (size_t)(8 + (int)count - trim));
}

static void write_mnist(const char *prefix)
{
    char a[64], b[64];
    snprintf(a, sizeof(a), "%s-images-idx3-ubyte", prefix);
    snprintf(b, sizeof(b), "%s-labels-idx1-ubyte", prefix);
    write_images(a, 0x803, N, ROWS, COLS, 0);
    write_labels(b, 0x801, N, 1, 0);
}

/* Opens data_dir = dir as "mnist" with the input shape given. */
static int open_mnist(dataset **d, const char *split, size_t ndim, uint64_t d0, uint64_t d1,
                      uint64_t d2, uint32_t classes)
{
    Appliance__PlanInput in = APPLIANCE__PLAN_INPUT__INIT;
    uint64_t shape[3] = {d0, d1, d2};
    in.data_processor = "mnist";
    in.data_dir = (char *)mnist_dir;
    in.split = (char *)split;
    in.num_classes = classes;
    in.seed = 1;
    in.n_sample_shape = ndim;
    in.sample_shape = shape;
    return dataset_open(d, &in, err, sizeof(err));
}

START_TEST(mnist_reads)
{
    write_mnist("train");
    dataset *d;
    ck_assert_msg(open_mnist(&d, "train", 3, 1, ROWS, COLS, 3) == 0, "%s", err);
    ck_assert_uint_eq(dataset_size(d), N);
    ck_assert_uint_eq(dataset_sample_elems(d), ROWS * COLS);
    ck_assert_uint_eq(dataset_label_elems(d), 1);
    float x[ROWS * COLS];
    int32_t y;
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(dataset_read(d, 0, (uint64_t)i, x, &y, err, sizeof(err)), 0);
        ck_assert_int_eq(y, i == N - 1 ? 1 : i % 3);
        for (int k = 0; k < ROWS * COLS; k++)
            ck_assert_float_eq(x[k], (float)(i == 0 && k == 0 ? 255 : 10 * i + k) / 255.0f);
    }
    ck_assert_float_eq(x[0], 40.0f / 255.0f);
    dataset_close(d);
    /* The flat shape works too; the evaluation split reads t10k files. */
    ck_assert_msg(open_mnist(&d, "train", 1, ROWS * COLS, 0, 0, 3) == 0, "%s", err);
    dataset_close(d);
    ck_assert_int_lt(open_mnist(&d, "eval", 1, ROWS * COLS, 0, 0, 3), 0);
    ck_assert_str_eq(err + strlen(dir), "/t10k-images-idx3-ubyte: cannot open: No such file or "
                                        "directory");
    write_images("t10k-images-idx3-ubyte", 0x803, 3, ROWS, COLS, 2 * ROWS * COLS);
    write_labels("t10k-labels-idx1-ubyte", 0x801, 3, 2, 0);
    ck_assert_msg(open_mnist(&d, "eval", 1, ROWS * COLS, 0, 0, 3) == 0, "%s", err);
    ck_assert_uint_eq(dataset_size(d), 3);
    ck_assert_int_eq(dataset_read(d, 0, 2, x, &y, err, sizeof(err)), 0);
    ck_assert_int_eq(y, 2);
    dataset_close(d);
}
END_TEST

/* Opening fails with "DIR/FILE: message". */
static void mnist_refused(const char *file, const char *msg)
{
    dataset *d = (dataset *)1;
    ck_assert_int_lt(open_mnist(&d, "train", 3, 1, ROWS, COLS, 3), 0);
    ck_assert_ptr_null(d);
    char want[2048];
    snprintf(want, sizeof(want), "%s/%s%s", dir, file, msg);
    ck_assert_str_eq(err, want);
}

START_TEST(mnist_damage)
{
    const char *img = "train-images-idx3-ubyte", *lab = "train-labels-idx1-ubyte";
    mnist_refused(img, ": cannot open: No such file or directory");
    write_images(img, 0x803, N, ROWS, COLS, 0);
    mnist_refused(lab, ": cannot open: No such file or directory");
    write_labels(lab, 0x801, N, 1, 0);
    dataset *d;
    ck_assert_msg(open_mnist(&d, "train", 3, 1, ROWS, COLS, 3) == 0, "%s", err);
    dataset_close(d);

    write_images(img, 0x803, N, ROWS, COLS, 16 + N * ROWS * COLS - 10);
    mnist_refused(img, ": 10 bytes, too short for the 16-byte header of an IDX image file");
    write_images(img, 0x801, N, ROWS, COLS, 0);
    mnist_refused(img, ": magic number 0x00000801, expected 0x00000803 (unsigned bytes in 3 "
                       "dimensions): not an IDX image file");
    write_images(img, 0x00000d03, N, ROWS, COLS, 0); /* a float IDX file */
    mnist_refused(img, ": magic number 0x00000d03, expected 0x00000803 (unsigned bytes in 3 "
                       "dimensions): not an IDX image file");
    write_images(img, 0x803, N, 0, COLS, 0);
    mnist_refused(img, ": the header gives 5 images of 0x3 pixels; none may be zero");
    write_images(img, 0x803, N, ROWS, COLS, 1);
    mnist_refused(img, ": 45 bytes, but the header's 5 images of 2x3 pixels need 46");
    write_images(img, 0x803, N, ROWS, COLS, -3);
    mnist_refused(img, ": 49 bytes, but the header's 5 images of 2x3 pixels need 46");
    write_images(img, 0x803, N + 1, ROWS, COLS, 0);
    mnist_refused(img, ": 46 bytes, but the header's 6 images of 2x3 pixels need 52");
    write_images(img, 0x803, N * ROWS, 1, COLS, 0);
    mnist_refused(img, ": images of 1x3 pixels do not fit the model input; give input_shape = "
                       "[1, 1, 3] or [3]");
    write_images(img, 0x803, N, ROWS, COLS, 0);

    write_labels(lab, 0x803, N, 1, 0);
    mnist_refused(lab, ": magic number 0x00000803, expected 0x00000801 (unsigned bytes in 1 "
                       "dimension): not an IDX label file");
    write_labels(lab, 0x801, N, 1, N + 4);
    mnist_refused(lab, ": 4 bytes, too short for the 8-byte header of an IDX label file");
    write_labels(lab, 0x801, N, 1, 2);
    mnist_refused(lab, ": 11 bytes, but the header's 5 labels need 13");
    write_labels(lab, 0x801, N - 1, 1, 0);
    char msg[1024];
    snprintf(msg, sizeof(msg), " has 4 labels but %s/%s has 5 images", dir, img);
    mnist_refused(lab, msg);
    write_labels(lab, 0x801, N, 3, 0);
    mnist_refused(lab, ": label 3 of sample 4 is not below num_classes 3");

    /* Above the size limit (a sparse file: no disk is used). */
    write_labels(lab, 0x801, N, 1, 0);
    ck_assert_int_eq(truncate(path_of(img), (off_t)(129u << 20)), 0);
    mnist_refused(img, ": 135266304 bytes, above the limit of 134217728 bytes for an IDX file");
    unlink(path_of(img));
    ck_assert_int_eq(mkdir(path_of(img), 0700), 0);
    mnist_refused(img, ": not a regular file");
}
END_TEST

START_TEST(mnist_needs_data_dir)
{
    Appliance__PlanInput in = APPLIANCE__PLAN_INPUT__INIT;
    uint64_t shape[1] = {784};
    in.data_processor = "mnist";
    in.num_classes = 10;
    in.n_sample_shape = 1;
    in.sample_shape = shape;
    dataset *d;
    ck_assert_int_lt(dataset_open(&d, &in, err, sizeof(err)), 0);
    ck_assert_str_eq(err, "mnist: data_dir is not set");
}
END_TEST

/* The real thing, when scripts/fetch-mnist has been run. */
START_TEST(mnist_fetched)
{
    const char *src = getenv("SOURCE_ROOT");
    char mdir[PATH_MAX];
    snprintf(mdir, sizeof(mdir), "%s/data/mnist", src ? src : ".");
    if (access(mdir, F_OK) != 0)
        return; /* not fetched: nothing to check */
    mnist_dir = mdir;
    dataset *tr, *ev;
    ck_assert_msg(open_mnist(&tr, "train", 3, 1, 28, 28, 10) == 0, "%s", err);
    ck_assert_msg(open_mnist(&ev, "eval", 1, 784, 0, 0, 10) == 0, "%s", err);
    ck_assert_uint_gt(dataset_size(tr), 0);
    ck_assert_uint_gt(dataset_size(ev), 0);
    float x[784];
    int32_t y;
    int counts[10] = {0};
    for (uint64_t i = 0; i < dataset_size(tr); i++) {
        ck_assert_int_eq(dataset_read(tr, 0, i, x, &y, err, sizeof(err)), 0);
        counts[y]++;
    }
    for (int k = 0; k < 10; k++)
        ck_assert_int_gt(counts[k], 0);
    dataset_close(tr);
    dataset_close(ev);
}
END_TEST

/* ---- PNG ---- */

/* write_png writes Adam7-interlaced files while this is set (the reader
 * decodes those whole, not row by row). */
static bool write_interlaced;

/* Writes a w x h PNG of the colour type and depth given; data holds the
 * samples row by row as libpng takes them (16 bits big-endian). A palette
 * image gets a 16-entry gray palette. */
static void write_png(const char *name, uint32_t w, uint32_t h, int color_type, int depth,
                      const uint8_t *data)
{
    FILE *f = fopen(path_of(name), "wb");
    ck_assert_ptr_nonnull(f);
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    ck_assert(png && info);
    if (setjmp(png_jmpbuf(png)))
        ck_abort_msg("libpng failed writing %s", name);
    png_init_io(png, f);
    png_set_IHDR(png, info, w, h, depth, color_type,
                 write_interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    if (color_type == PNG_COLOR_TYPE_PALETTE) {
        png_color pal[16];
        for (int i = 0; i < 16; i++)
            pal[i].red = pal[i].green = pal[i].blue = (png_byte)(i * 17);
        png_set_PLTE(png, info, pal, 16);
    }
    png_write_info(png, info);
    int channels = color_type == PNG_COLOR_TYPE_RGB ? 3 : color_type == PNG_COLOR_TYPE_RGBA ? 4
                 : color_type == PNG_COLOR_TYPE_GRAY_ALPHA ? 2 : 1;
    size_t rowbytes = ((size_t)w * channels * depth + 7) / 8;
    int passes = png_set_interlace_handling(png);
    for (int pass = 0; pass < passes; pass++)
        for (uint32_t y = 0; y < h; y++)
            png_write_row(png, data + y * rowbytes);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    ck_assert_int_eq(fclose(f), 0);
}

enum { PH = 3, PW = 4 };

/* A gray image (value 20 p + 1 at pixel p) and its binary mask (0 or 255,
 * the left half set). */
static void write_gray_pair(const char *name)
{
    uint8_t img[PH * PW], mask[PH * PW];
    for (int p = 0; p < PH * PW; p++) {
        img[p] = (uint8_t)(20 * p + 1);
        mask[p] = p % PW < PW / 2 ? 255 : 0;
    }
    char a[64], b[64];
    snprintf(a, sizeof(a), "images/%s", name);
    snprintf(b, sizeof(b), "masks/%s", name);
    write_png(a, PW, PH, PNG_COLOR_TYPE_GRAY, 8, img);
    write_png(b, PW, PH, PNG_COLOR_TYPE_GRAY, 8, mask);
}

static void make_dirs(void)
{
    ck_assert_int_eq(mkdir(path_of("images"), 0700), 0);
    ck_assert_int_eq(mkdir(path_of("masks"), 0700), 0);
}

static int open_png_as(dataset **d, uint32_t c, uint32_t classes, bool probe)
{
    Appliance__PlanInput in = APPLIANCE__PLAN_INPUT__INIT;
    uint64_t shape[3] = {c, PH, PW};
    in.data_processor = "png_segmentation";
    in.data_dir = dir;
    in.num_classes = classes;
    in.seed = 1;
    in.n_sample_shape = 3;
    in.sample_shape = shape;
    return probe ? dataset_probe(d, &in, err, sizeof(err)) : dataset_open(d, &in, err, sizeof(err));
}

static int open_png(dataset **d, uint32_t c, uint32_t classes)
{
    return open_png_as(d, c, classes, false);
}

/* Gray images with binary masks, sorted by name; a 16-bit image and a
 * gray+alpha one become the same 8-bit gray. */
START_TEST(png_gray_binary)
{
    make_dirs();
    write_gray_pair("b.png");
    write_gray_pair("a.png");
    /* c.png: 16-bit gray (v * 257 scales back to v) with a 1-bit mask. */
    uint8_t img16[PH * PW * 2], alpha[PH * PW * 2], mask1[PH * 1] = {0};
    for (int p = 0; p < PH * PW; p++) {
        img16[2 * p] = img16[2 * p + 1] = (uint8_t)(20 * p + 1);
        alpha[2 * p] = (uint8_t)(20 * p + 1);
        alpha[2 * p + 1] = 7;
    }
    for (int r = 0; r < PH; r++)
        mask1[r] = 0xc0; /* the two left pixels of each row */
    write_png("images/c.png", PW, PH, PNG_COLOR_TYPE_GRAY, 16, img16);
    write_png("masks/c.png", PW, PH, PNG_COLOR_TYPE_GRAY, 1, mask1);
    write_png("images/d.png", PW, PH, PNG_COLOR_TYPE_GRAY_ALPHA, 8, alpha);
    write_png("masks/d.png", PW, PH, PNG_COLOR_TYPE_GRAY_ALPHA, 8, alpha); /* >127 from p 7 on */
    write_file("images/notes.txt", "x", 1); /* not a .png: ignored */
    /* e.png: the same as b.png, interlaced (Adam7) */
    write_interlaced = true;
    write_gray_pair("e.png");
    write_interlaced = false;

    dataset *d;
    ck_assert_msg(open_png(&d, 1, 2) == 0, "%s", err);
    ck_assert_uint_eq(dataset_size(d), 5);
    ck_assert_uint_eq(dataset_sample_elems(d), PH * PW);
    ck_assert_uint_eq(dataset_label_elems(d), PH * PW);
    float x[PH * PW];
    int32_t y[PH * PW];
    for (uint64_t i = 0; i < 5; i++) {
        ck_assert_msg(dataset_read(d, 0, i, x, y, err, sizeof(err)) == 0, "%s", err);
        for (int p = 0; p < PH * PW; p++) {
            ck_assert_float_eq(x[p], (float)(20 * p + 1) / 255.0f);
            int32_t want = i == 3 ? (20 * p + 1 > 127) : (p % PW < PW / 2);
            ck_assert_msg(y[p] == want, "sample %llu pixel %d: label %d", (unsigned long long)i,
                          p, y[p]);
        }
    }
    dataset_close(d);
}
END_TEST

/* RGB (and RGBA, palette) images become planar (C, H, W); gray masks of
 * class ids, and palette masks whose index is the class. */
START_TEST(png_rgb_classes)
{
    make_dirs();
    uint8_t rgb[PH * PW * 3], rgba[PH * PW * 4], mask[PH * PW], pal[PH * PW];
    for (int p = 0; p < PH * PW; p++) {
        for (int c = 0; c < 3; c++)
            rgb[3 * p + c] = rgba[4 * p + c] = (uint8_t)(60 * c + p);
        rgba[4 * p + 3] = 0; /* fully transparent: dropped, not blended */
        mask[p] = (uint8_t)(p % 4);
        pal[p] = (uint8_t)((p + 1) % 4);
    }
    write_png("images/1.png", PW, PH, PNG_COLOR_TYPE_RGB, 8, rgb);
    write_png("masks/1.png", PW, PH, PNG_COLOR_TYPE_GRAY, 8, mask);
    write_png("images/2.png", PW, PH, PNG_COLOR_TYPE_RGBA, 8, rgba);
    write_png("masks/2.png", PW, PH, PNG_COLOR_TYPE_PALETTE, 8, pal);
    /* 3.png: a 4-bit palette image (gray entries 17 i), expanded to RGB. */
    uint8_t pal4[PH * PW / 2];
    for (int p = 0; p < PH * PW; p += 2)
        pal4[p / 2] = (uint8_t)((p % 16) << 4 | ((p + 1) % 16));
    write_png("images/3.png", PW, PH, PNG_COLOR_TYPE_PALETTE, 4, pal4);
    write_png("masks/3.png", PW, PH, PNG_COLOR_TYPE_GRAY, 8, mask);
    dataset *d;
    ck_assert_msg(open_png(&d, 3, 4) == 0, "%s", err);
    ck_assert_uint_eq(dataset_size(d), 3);
    float x[3 * PH * PW];
    int32_t y[PH * PW];
    ck_assert_msg(dataset_read(d, 0, 2, x, y, err, sizeof(err)) == 0, "%s", err);
    for (int p = 0; p < PH * PW; p++)
        for (int c = 0; c < 3; c++)
            ck_assert_float_eq(x[c * PH * PW + p], (float)(17 * (p % 16)) / 255.0f);
    for (uint64_t i = 0; i < 2; i++) {
        ck_assert_msg(dataset_read(d, 0, i, x, y, err, sizeof(err)) == 0, "%s", err);
        for (int p = 0; p < PH * PW; p++) {
            for (int c = 0; c < 3; c++)
                ck_assert_float_eq(x[c * PH * PW + p], (float)(60 * c + p) / 255.0f);
            ck_assert_int_eq(y[p], i == 0 ? p % 4 : (p + 1) % 4);
        }
    }
    dataset_close(d);
    /* A class id beyond num_classes is found when the sample is read. */
    mask[6] = 9;
    write_png("masks/1.png", PW, PH, PNG_COLOR_TYPE_GRAY, 8, mask);
    ck_assert_msg(open_png(&d, 3, 4) == 0, "%s", err);
    ck_assert_int_lt(dataset_read(d, 0, 0, x, y, err, sizeof(err)), 0);
    char want[2048];
    snprintf(want, sizeof(want), "%s/masks/1.png: pixel (x 2, y 1) has value 9, not below "
             "num_classes 4", dir);
    ck_assert_str_eq(err, want);
    /* The order of a batch is the sorted order: 1.png, then 2.png. */
    ck_assert_int_eq(dataset_read(d, 0, 1, x, y, err, sizeof(err)), 0);
    dataset_close(d);
}
END_TEST

/* Refused with msg by dataset_open and, with the same words, by
 * dataset_probe (which reads the PNG headers without libpng). */
static void png_refused(uint32_t c, uint32_t classes, const char *file, const char *msg)
{
    dataset *d;
    char want[2048];
    snprintf(want, sizeof(want), "%s/%s%s", dir, file, msg);
    ck_assert_int_lt(open_png(&d, c, classes), 0);
    ck_assert_str_eq(err, want);
    ck_assert_int_lt(open_png_as(&d, c, classes, true), 0);
    ck_assert_str_eq(err, want);
}

/* dataset_probe sizes and checks a PNG set as dataset_open does, reads
 * the headers itself (a damaged IHDR is refused) and decodes nothing. */
START_TEST(png_probe)
{
    make_dirs();
    write_gray_pair("a.png");
    write_gray_pair("b.png");
    uint8_t img16[PH * PW * 2] = {0};
    write_png("images/c.png", PW, PH, PNG_COLOR_TYPE_GRAY, 16, img16);
    write_png("masks/c.png", PW, PH, PNG_COLOR_TYPE_GRAY, 8, img16);
    dataset *d, *p;
    ck_assert_msg(open_png(&d, 1, 2) == 0, "%s", err);
    ck_assert_msg(open_png_as(&p, 1, 2, true) == 0, "%s", err);
    ck_assert_uint_eq(dataset_size(p), 3);
    ck_assert_uint_eq(dataset_size(p), dataset_size(d));
    ck_assert_uint_eq(dataset_sample_elems(p), dataset_sample_elems(d));
    ck_assert_uint_eq(dataset_label_elems(p), dataset_label_elems(d));
    float x[PH * PW];
    int32_t y[PH * PW];
    ck_assert_int_eq(dataset_read(d, 0, 0, x, y, err, sizeof(err)), 0);
    ck_assert_int_eq(dataset_read(p, 0, 0, x, y, err, sizeof(err)), -ENOTSUP);
    ck_assert_str_eq(err, "png_segmentation: opened to be sized only (dataset_probe): no samples");
    dataset_close(d);
    dataset_close(p);
    /* a flipped bit in the IHDR's width: libpng and the probe both refuse it */
    FILE *f = fopen(path_of("images/b.png"), "rb");
    uint8_t buf[4096];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    buf[19] ^= 0x01;
    write_file("images/b.png", buf, n);
    ck_assert_int_lt(open_png_as(&p, 1, 2, true), 0);
    char want[2048];
    snprintf(want, sizeof(want), "%s/images/b.png: corrupt PNG: IHDR: CRC error", dir);
    ck_assert_str_eq(err, want);
    ck_assert_int_lt(open_png(&d, 1, 2), 0);
    ck_assert_msg(strstr(err, "/images/b.png: corrupt PNG: ") != NULL, "%s", err);
    /* a decompression bomb: a header claiming 100000x100000 pixels is
     * refused from its 33 bytes, before anything is allocated or decoded */
    uint8_t bomb[33] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R'};
    put_be32(bomb + 16, 100000);
    put_be32(bomb + 20, 100000);
    bomb[24] = 8; /* 8-bit gray */
    uint32_t crc = 0xffffffffu;
    for (int i = 12; i < 29; i++) {
        crc ^= bomb[i];
        for (int b = 0; b < 8; b++)
            crc = crc & 1 ? 0xedb88320u ^ (crc >> 1) : crc >> 1;
    }
    put_be32(bomb + 29, crc ^ 0xffffffffu);
    write_file("images/b.png", bomb, sizeof(bomb));
    ck_assert_int_lt(open_png_as(&p, 1, 2, true), 0);
    snprintf(want, sizeof(want), "%s/images/b.png: corrupt PNG: 100000x100000 pixels (1 to 65536 a side)",
             dir);
    ck_assert_str_eq(err, want);
    ck_assert_int_lt(open_png(&d, 1, 2), 0);
    ck_assert_msg(strstr(err, "/images/b.png") != NULL, "%s", err);
    /* a truncated header */
    write_file("images/b.png", buf, 20);
    ck_assert_int_lt(open_png_as(&p, 1, 2, true), 0);
    snprintf(want, sizeof(want), "%s/images/b.png: corrupt PNG: no IHDR chunk first", dir);
    ck_assert_str_eq(err, want);
}
END_TEST

START_TEST(png_damage)
{
    png_refused(1, 2, "images", ": cannot open the directory: No such file or directory");
    make_dirs();
    png_refused(1, 2, "images", ": no .png files");
    write_gray_pair("a.png");
    dataset *d;
    ck_assert_msg(open_png(&d, 1, 2) == 0, "%s", err);
    dataset_close(d);

    /* The model wants RGB; the image is gray. */
    png_refused(3, 2, "images/a.png", ": 4x3 pixels, gray (1 channel); the model input is "
                                      "[3, 3, 4] (C, H, W)");
    /* An image of another size. */
    uint8_t big[5 * 4 * 3] = {0};
    write_png("images/b.png", 5, 4, PNG_COLOR_TYPE_GRAY, 8, big);
    write_png("masks/b.png", 5, 4, PNG_COLOR_TYPE_GRAY, 8, big);
    png_refused(1, 2, "images/b.png", ": 5x4 pixels, gray (1 channel); the model input is "
                                      "[1, 3, 4] (C, H, W)");
    /* A mask of another size than its image. */
    write_png("images/b.png", PW, PH, PNG_COLOR_TYPE_GRAY, 8, big);
    png_refused(1, 2, "masks/b.png", ": 5x4 pixels, its image is 4x3");
    /* An RGB mask. */
    write_png("masks/b.png", PW, PH, PNG_COLOR_TYPE_RGB, 8, big);
    png_refused(1, 2, "masks/b.png", ": RGB; a mask must be gray or palette (one class per "
                                     "pixel)");
    /* A missing mask, and a mask without an image. */
    unlink(path_of("masks/b.png"));
    char msg[2048];
    snprintf(msg, sizeof(msg), ": missing (the mask of %s/images/b.png)", dir);
    png_refused(1, 2, "masks/b.png", msg);
    unlink(path_of("images/b.png"));
    write_png("masks/c.png", PW, PH, PNG_COLOR_TYPE_GRAY, 8, big);
    snprintf(msg, sizeof(msg), ": a mask without an image (%s/images/c.png is missing)", dir);
    png_refused(1, 2, "masks/c.png", msg);
    unlink(path_of("masks/c.png"));
    /* Not a PNG at all, and a truncated one. */
    write_file("images/a.png", "GIF89a not a png", 16);
    png_refused(1, 2, "images/a.png", ": not a PNG file");
    write_gray_pair("a.png");
    ck_assert_msg(open_png(&d, 1, 2) == 0, "%s", err);
    FILE *f = fopen(path_of("images/a.png"), "rb");
    uint8_t buf[4096];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    write_file("images/a.png", buf, n - 20); /* header intact, image data cut */
    float x[PH * PW];
    int32_t y[PH * PW];
    ck_assert_int_lt(dataset_read(d, 0, 0, x, y, err, sizeof(err)), 0);
    ck_assert_msg(strstr(err, "/images/a.png: corrupt PNG: ") != NULL, "%s", err);
    /* A file changed after the job started. */
    write_png("images/a.png", 5, 4, PNG_COLOR_TYPE_GRAY, 8, big);
    ck_assert_int_lt(dataset_read(d, 0, 0, x, y, err, sizeof(err)), 0);
    ck_assert_msg(strstr(err, "/images/a.png: 5x4 pixels, gray (1 channel); the model input is "
                              "[1, 3, 4] (C, H, W)") != NULL, "%s", err);
    dataset_close(d);
}
END_TEST

START_TEST(png_needs_an_image_shape)
{
    Appliance__PlanInput in = APPLIANCE__PLAN_INPUT__INIT;
    uint64_t shape[3] = {2, 4, 4};
    in.data_processor = "png_segmentation";
    in.data_dir = dir;
    in.num_classes = 2;
    in.n_sample_shape = 3;
    in.sample_shape = shape;
    dataset *d;
    ck_assert_int_lt(dataset_open(&d, &in, err, sizeof(err)), 0);
    ck_assert_str_eq(err, "png_segmentation: the model input must be [C, H, W] with C = 1 (gray) "
                          "or 3 (RGB)");
}
END_TEST

/* Flips move an image read from files and its mask together. */
START_TEST(png_flips)
{
    make_dirs();
    write_gray_pair("a.png");
    Appliance__PlanInput in = APPLIANCE__PLAN_INPUT__INIT;
    uint64_t shape[3] = {1, PH, PW};
    in.data_processor = "png_segmentation";
    in.data_dir = dir;
    in.num_classes = 2;
    in.seed = 3;
    in.random_flip_horizontal = true;
    in.n_sample_shape = 3;
    in.sample_shape = shape;
    dataset *d;
    ck_assert_msg(dataset_open(&d, &in, err, sizeof(err)) == 0, "%s", err);
    int flipped = 0, plain = 0;
    for (uint64_t epoch = 0; epoch < 32; epoch++) {
        float x[PH * PW];
        int32_t y[PH * PW];
        ck_assert_int_eq(dataset_read(d, epoch, 0, x, y, err, sizeof(err)), 0);
        bool f = x[0] == (float)(20 * (PW - 1) + 1) / 255.0f;
        for (int p = 0; p < PH * PW; p++) {
            int q = f ? (p / PW) * PW + (PW - 1 - p % PW) : p;
            ck_assert_float_eq(x[p], (float)(20 * q + 1) / 255.0f);
            ck_assert_int_eq(y[p], q % PW < PW / 2);
        }
        flipped += f;
        plain += !f;
    }
    ck_assert_int_gt(flipped, 0);
    ck_assert_int_gt(plain, 0);
    dataset_close(d);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("dataset-files");
    TCase *m = tcase_create("mnist");
    tcase_add_checked_fixture(m, setup, teardown);
    tcase_add_test(m, mnist_reads);
    tcase_add_test(m, mnist_damage);
    tcase_add_test(m, mnist_needs_data_dir);
    tcase_add_test(m, mnist_fetched);
    suite_add_tcase(s, m);
    TCase *p = tcase_create("png");
    tcase_add_checked_fixture(p, setup, teardown);
    tcase_add_test(p, png_gray_binary);
    tcase_add_test(p, png_rgb_classes);
    tcase_add_test(p, png_damage);
    tcase_add_test(p, png_probe);
    tcase_add_test(p, png_needs_an_image_shape);
    tcase_add_test(p, png_flips);
    suite_add_tcase(s, p);
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
