/* Volumes [C, D, H, W]: the SKM-TEA reader (SkmDataProcessor, HDF5) on
 * sets tools/mkmzdata's writer makes, whose voxels the tests compute
 * rather than read back (every echo_type, aggregate_cartilage on and off,
 * the normalizations, slabs of any thickness, chunked files, damage with
 * its message); the seeded synthetic_volume set; 4-D samples through
 * dataset_read and dataset_batch; the image readers' refusal of volumes;
 * and the two hand-made parsers the probe uses (jsonscan, h5hdr). */
#include <check.h>
#include <errno.h>
#include <ftw.h>
#include <hdf5.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset.h"
#include "h5hdr.h"
#include "jsonscan.h"
#include "mzdata.h"

/* ds_skm_read.c's slab thickness and the largest slab it has held. */
extern size_t ds_skm__slab_rows;
extern _Atomic size_t ds_skm__largest_slab;

static char dir[256];        /* a fresh directory per test, removed after it */
static char err[2048];

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static void setup(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/dataset-vol-test.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    err[0] = 0;
    ds_skm__slab_rows = 4;
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

/* An SKM set of D x H x W volumes: 3 training, 1 evaluation. */
static void skm_opts(mzdata_opts *o, uint32_t D, uint32_t H, uint32_t W)
{
    mzdata_defaults(o, MZDATA_SKM);
    o->depth = D;
    o->height = H;
    o->width = W;
    o->count = 3;
}

static void write_set(const mzdata_opts *o)
{
    ck_assert_msg(mzdata_write(o, dir, err, sizeof(err)) == 0, "%s", err);
}

/* The input of a reader: a model input [C, D, H, W], float32 inputs and
 * byte labels unless said. */
typedef struct input {
    Appliance__PlanInput in;
    uint64_t shape[4];
} input;

static void input_init(input *t, const char *processor, uint32_t C, uint32_t D, uint32_t H,
                       uint32_t W, uint32_t classes)
{
    Appliance__PlanInput in = APPLIANCE__PLAN_INPUT__INIT;
    t->in = in;
    t->shape[0] = C;
    t->shape[1] = D;
    t->shape[2] = H;
    t->shape[3] = W;
    t->in.data_processor = (char *)processor;
    t->in.data_dir = dir;
    t->in.num_classes = classes;
    t->in.seed = 7;
    t->in.sample_shape = t->shape;
    t->in.n_sample_shape = 4;
    t->in.labels_uint8 = true;
    t->in.class_id = -1;
}

/* SkmDataProcessor with the Model Zoo's configuration: echo1, aggregated. */
static void skm_input(input *t, uint32_t C, uint32_t D, uint32_t H, uint32_t W)
{
    input_init(t, "SkmDataProcessor", C, D, H, W, 5);
    t->in.echo_type = "echo1";
    t->in.aggregate_cartilage = true;
    t->in.normalize = "none";
}

static dataset *open_ok(input *t)
{
    dataset *d = NULL;
    ck_assert_msg(dataset_open(&d, &t->in, err, sizeof(err)) == 0, "%s", err);
    return d;
}

/* Opening (or probing) fails with exactly the message `want`. */
static void fails_with(int (*opener)(dataset **, const Appliance__PlanInput *, char *, size_t),
                       input *t, const char *want)
{
    dataset *d = (dataset *)1;
    err[0] = 0;
    ck_assert_int_lt(opener(&d, &t->in, err, sizeof(err)), 0);
    ck_assert_ptr_null(d);
    ck_assert_str_eq(err, want);
}

static void open_fails(input *t, const char *want)
{
    fails_with(dataset_open, t, want);
}

/* A sample's buffers. */
typedef struct sample {
    uint8_t *x, *y;
} sample;

static sample read_ok(const dataset *d, uint64_t epoch, uint64_t idx)
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

/* ---- SkmDataProcessor ---- */

enum echo { ECHO1, ECHO2, MC, RSS };
static const char *const echo_names[] = {"echo1", "echo2", "echo1-echo2-mc",
                                         "root_sum_of_squares"};

/* The Model Zoo's label of a voxel of tissues `bits`: aggregate_classes
 * (patellar, femoral, tibial = medial | lateral, meniscus = medial |
 * lateral), then to_categorical: a background column of False in front,
 * and np.argmax, the first of the largest. */
static uint32_t mz_label(unsigned bits, bool aggregate)
{
    bool col[7] = {false};
    int n;
    if (aggregate) {
        col[1] = bits & 1;
        col[2] = bits & 2;
        col[3] = (bits & 4) || (bits & 8);
        col[4] = (bits & 16) || (bits & 32);
        n = 5;
    } else {
        for (int t = 0; t < 6; t++)
            col[t + 1] = bits & (1u << t);
        n = 7;
    }
    int best = 0;
    for (int i = 1; i < n; i++)
        if (col[i] > col[best])
            best = i;
    return (uint32_t)best;
}

/* The Model Zoo's input value of channel c at a voxel, before
 * normalizing: an echo as float32, or the root sum of squares in float32
 * steps (numpy's astype(np.float32) ** 2, +, ** 0.5). */
static float mz_value(enum echo e, uint32_t c, const int16_t echo[2])
{
    if (e == RSS) {
        float a = (float)echo[0] * (float)echo[0], b = (float)echo[1] * (float)echo[1];
        float s = a + b;
        return sqrtf(s);
    }
    if (e == MC)
        return (float)echo[c];
    return (float)echo[e == ECHO2];
}

/* Every voxel of sample idx of a split against what was written: the
 * input x[c][z][h][w] = the file's [h, w, z] (the Model Zoo's permute(3,
 * 2, 0, 1)), unnormalized ("none"), and the labels. */
static void check_skm_sample(const mzdata_opts *o, bool eval, uint32_t idx, enum echo e,
                             bool aggregate, const sample *s)
{
    const uint32_t D = o->depth, H = o->height, W = o->width, C = e == MC ? 2 : 1;
    const float *x = (const float *)s->x;
    mzdata_scene sc;
    mzdata_scene_make(&sc, o, eval, idx);
    for (uint32_t z = 0; z < D; z++)
        for (uint32_t h = 0; h < H; h++)
            for (uint32_t w = 0; w < W; w++) {
                int16_t echo[2];
                unsigned bits;
                mzdata_skm_voxel(&sc, h, w, z, echo, &bits);
                size_t at = ((size_t)z * H + h) * W + w;
                for (uint32_t c = 0; c < C; c++) {
                    float want = mz_value(e, c, echo);
                    ck_assert_msg(x[c * D * H * W + at] == want,
                                  "%s sample %u, channel %u, voxel (z %u, h %u, w %u): %.9g, "
                                  "want %.9g", echo_names[e], idx, c, z, h, w,
                                  x[c * D * H * W + at], want);
                }
                ck_assert_msg(s->y[at] == mz_label(bits, aggregate),
                              "sample %u, voxel (z %u, h %u, w %u) of tissues 0x%x: label %u, "
                              "want %u", idx, z, h, w, bits, s->y[at], mz_label(bits, aggregate));
            }
}

START_TEST(skm_reads)
{
    mzdata_opts o;
    skm_opts(&o, 8, 12, 10);
    write_set(&o);
    for (int e = ECHO1; e <= RSS; e++)
        for (int agg = 0; agg < 2; agg++) {
            input t;
            skm_input(&t, e == MC ? 2 : 1, 8, 12, 10);
            t.in.echo_type = (char *)echo_names[e];
            t.in.aggregate_cartilage = agg;
            t.in.num_classes = agg ? 5 : 7;
            for (int split = 0; split < 2; split++) {
                t.in.split = split ? "eval" : "train";
                dataset *d = open_ok(&t);
                ck_assert_uint_eq(dataset_size(d), split ? 1 : 3);
                ck_assert_uint_eq(dataset_sample_elems(d), (e == MC ? 2 : 1) * 8 * 12 * 10);
                ck_assert_uint_eq(dataset_label_elems(d), 8 * 12 * 10);
                for (uint32_t i = 0; i < dataset_size(d); i++) {
                    sample s = read_ok(d, 0, i);
                    check_skm_sample(&o, split, i, (enum echo)e, agg, &s);
                    sample_free(&s);
                }
                dataset_close(d);
            }
        }
}
END_TEST

/* The fixture has what the test means to test: overlapping tissues (where
 * the argmax rule decides), every tissue, and echoes whose squares round
 * in float32. */
START_TEST(skm_fixture_has_structure)
{
    mzdata_opts o;
    skm_opts(&o, 8, 12, 10);
    unsigned seen = 0, overlaps = 0, big = 0;
    for (uint32_t i = 0; i < 4; i++) {
        mzdata_scene sc;
        mzdata_scene_make(&sc, &o, i == 3, i % 3); /* both splits */
        for (uint32_t z = 0; z < 8; z++)
            for (uint32_t h = 0; h < 12; h++)
                for (uint32_t w = 0; w < 10; w++) {
                    int16_t echo[2];
                    unsigned bits;
                    mzdata_skm_voxel(&sc, h, w, z, echo, &bits);
                    seen |= bits;
                    overlaps += (bits & (bits - 1)) != 0;
                    float sq = (float)echo[0] * (float)echo[0];
                    big += (double)sq != (double)echo[0] * echo[0];
                }
    }
    ck_assert_uint_eq(seen, 0x3f);
    ck_assert_uint_gt(overlaps, 0);
    ck_assert_uint_gt(big, 0);
}
END_TEST

START_TEST(skm_normalize)
{
    mzdata_opts o;
    skm_opts(&o, 6, 10, 8);
    o.count = 1;
    write_set(&o);
    input t;
    skm_input(&t, 2, 6, 10, 8);
    t.in.echo_type = "echo1-echo2-mc";
    const size_t n = 6 * 10 * 8;
    dataset *raw_d = open_ok(&t);
    sample raw = read_ok(raw_d, 0, 0);
    const float *r = (const float *)raw.x;
    /* zero_one and zero_centered: in float32, as torch.div */
    const char *const methods[] = {"zero_one", "zero_centered"};
    for (int m = 0; m < 2; m++) {
        t.in.normalize = (char *)methods[m];
        dataset *d = open_ok(&t);
        ck_assert(!dataset_input_unorm8(d));
        sample s = read_ok(d, 0, 0);
        const float *x = (const float *)s.x;
        for (size_t i = 0; i < 2 * n; i++) {
            float want = m == 0 ? r[i] / 255.0f : r[i] / 127.5f - 1.0f;
            ck_assert_msg(x[i] == want, "%s %zu: %.9g, want %.9g", methods[m], i, x[i], want);
        }
        sample_free(&s);
        dataset_close(d);
    }
    /* standard_score: each echo channel on its own, std unbiased */
    t.in.normalize = "standard_score";
    dataset *d = open_ok(&t);
    sample s = read_ok(d, 0, 0);
    const float *x = (const float *)s.x;
    for (int c = 0; c < 2; c++) {
        double sum = 0, ss = 0;
        for (size_t i = 0; i < n; i++)
            sum += r[c * n + i];
        double mean = sum / n;
        for (size_t i = 0; i < n; i++)
            ss += (r[c * n + i] - mean) * (r[c * n + i] - mean);
        double sd = sqrt(ss / (n - 1)), xs = 0, xss = 0;
        for (size_t i = 0; i < n; i++) {
            double want = (r[c * n + i] - mean) / sd;
            ck_assert_msg(fabs(x[c * n + i] - want) < 1e-6 * (1 + fabs(want)),
                          "channel %d, %zu: %.9g, want %.9g", c, i, x[c * n + i], want);
            xs += x[c * n + i];
            xss += (double)x[c * n + i] * x[c * n + i];
        }
        ck_assert(fabs(xs / n) < 1e-6);
        ck_assert(fabs(xss / (n - 1) - 1) < 1e-5);
    }
    sample_free(&s);
    dataset_close(d);
    /* the Model Zoo normalizes each channel: the whole-sample score of an
     * image would differ here, the echoes being of other scales */
    sample_free(&raw);
    dataset_close(raw_d);
}
END_TEST

/* Reads every sample of both splits and compares it with the first read. */
static void check_same_reads(input *t, const mzdata_opts *o, size_t max_slab)
{
    for (int split = 0; split < 2; split++) {
        t->in.split = split ? "eval" : "train";
        dataset *d = open_ok(t);
        for (uint32_t i = 0; i < dataset_size(d); i++) {
            atomic_store(&ds_skm__largest_slab, 0);
            sample s = read_ok(d, 0, i);
            check_skm_sample(o, split, i, RSS, true, &s);
            size_t largest = atomic_load(&ds_skm__largest_slab);
            ck_assert_msg(largest <= max_slab, "a slab of %zu bytes, above %zu", largest,
                          max_slab);
            sample_free(&s);
        }
        dataset_close(d);
    }
}

START_TEST(skm_slabs)
{
    const uint32_t D = 7, H = 13, W = 9;
    const size_t plane = (size_t)W * D * 6; /* an X plane of seg: the largest per row */
    mzdata_opts o;
    skm_opts(&o, D, H, W);
    o.count = 2;
    write_set(&o);
    input t;
    skm_input(&t, 1, D, H, W);
    t.in.echo_type = "root_sum_of_squares"; /* reads both echoes */
    const size_t rows[] = {1, 2, 3, 5, 13, 100};
    for (size_t k = 0; k < sizeof(rows) / sizeof(rows[0]); k++) {
        ds_skm__slab_rows = rows[k];
        check_same_reads(&t, &o, (rows[k] < H ? rows[k] : H) * plane);
    }
    /* 0 reads a row at a time */
    ds_skm__slab_rows = 0;
    check_same_reads(&t, &o, plane);

    /* chunked and deflated: slabs of whole chunk rows (3 or 4: the
     * smallest multiple of the chunk at or above the slab of 2) */
    teardown();
    setup();
    o.hdf5.chunk = 3;
    write_set(&o);
    ds_skm__slab_rows = 2;
    check_same_reads(&t, &o, 3 * plane);
    ds_skm__slab_rows = 5;
    check_same_reads(&t, &o, 6 * plane);
    teardown();
    setup();
    o.hdf5.chunk = 32; /* one chunk of the whole volume (13 rows): read whole */
    write_set(&o);
    ds_skm__slab_rows = 2;
    check_same_reads(&t, &o, 13 * plane);
    teardown();
    setup();
    mzdata_opts tall;
    skm_opts(&tall, D, 20, W);
    tall.count = 1;
    tall.hdf5.chunk = 20; /* chunks of 20 rows, more than a slab may hold: slabs of 2 */
    write_set(&tall);
    ds_skm__slab_rows = 2;
    input t20;
    skm_input(&t20, 1, D, 20, W);
    t20.in.echo_type = "root_sum_of_squares";
    check_same_reads(&t20, &tall, 2 * plane);

    /* libhdf5's latest format (superblock 3, new-style groups) */
    teardown();
    setup();
    o.hdf5.chunk = 0;
    o.hdf5.latest = true;
    write_set(&o);
    ds_skm__slab_rows = 4;
    check_same_reads(&t, &o, 4 * plane);
}
END_TEST

/* Readers on threads at once: libhdf5 through the reader's lock. */
typedef struct reader_arg {
    const dataset *d;
    const mzdata_opts *o;
    int fails;
} reader_arg;

static void *reader_thread(void *p)
{
    reader_arg *a = p;
    char e[512];
    size_t n = dataset_sample_elems(a->d), m = dataset_label_elems(a->d);
    for (int round = 0; round < 4; round++)
        for (uint32_t i = 0; i < dataset_size(a->d); i++) {
            float *x = malloc(n * sizeof(float));
            uint8_t *y = malloc(m);
            if (dataset_read(a->d, 0, i, x, y, e, sizeof(e)) < 0)
                a->fails++;
            else {
                mzdata_scene sc;
                mzdata_scene_make(&sc, a->o, false, i);
                int16_t echo[2];
                unsigned bits;
                mzdata_skm_voxel(&sc, 3, 2, 1, echo, &bits); /* (z 1, h 3, w 2) */
                size_t at = ((size_t)1 * a->o->height + 3) * a->o->width + 2;
                a->fails += x[at] != (float)echo[0] || y[at] != mz_label(bits, true);
            }
            free(x);
            free(y);
        }
    return NULL;
}

START_TEST(skm_threads)
{
    mzdata_opts o;
    skm_opts(&o, 6, 8, 8);
    write_set(&o);
    input t;
    skm_input(&t, 1, 6, 8, 8);
    dataset *d = open_ok(&t);
    pthread_t th[3];
    reader_arg a[3];
    for (int i = 0; i < 3; i++) {
        a[i] = (reader_arg){d, &o, 0};
        ck_assert_int_eq(pthread_create(&th[i], NULL, reader_thread, &a[i]), 0);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(a[i].fails, 0);
    }
    dataset_close(d);
}
END_TEST

/* The planner's view: the set sized from the annotations and superblocks,
 * no libhdf5; a missing dataset is found when a worker opens the set. */
START_TEST(skm_probe)
{
    mzdata_opts o;
    skm_opts(&o, 8, 12, 10);
    o.count = 5;
    o.hdf5.leave_out = MZDATA_SKM_NO_ECHO2;
    write_set(&o);
    input t;
    skm_input(&t, 1, 8, 12, 10);
    t.in.echo_type = "echo2";
    dataset *d;
    ck_assert_msg(dataset_probe(&d, &t.in, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(dataset_size(d), 5);
    ck_assert_uint_eq(dataset_sample_elems(d), 8 * 12 * 10);
    ck_assert_uint_eq(dataset_label_elems(d), 8 * 12 * 10);
    ck_assert(!dataset_input_unorm8(d));
    ck_assert_uint_eq(dataset_batch_bytes(d, 2), 2 * (8 * 12 * 10 * 4 + 8 * 12 * 10));
    float x[8 * 12 * 10];
    uint8_t y[8 * 12 * 10];
    ck_assert_int_eq(dataset_read(d, 0, 0, x, y, err, sizeof(err)), -ENOTSUP);
    dataset_close(d);
    t.in.split = "eval";
    ck_assert_msg(dataset_probe(&d, &t.in, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(dataset_size(d), 2);
    dataset_close(d);
    t.in.split = "train";
    char want[8192];
    snprintf(want, sizeof(want), "%s/image_files/MTR_001.h5: no dataset \"echo2\" (echo_type "
             "\"echo2\" reads it)", dir);
    open_fails(&t, want);
}
END_TEST

/* Writes text into dir/name. */
static void write_text(const char *name, const char *text)
{
    FILE *f = fopen(path_of(name), "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static long file_size(const char *path)
{
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    return (long)st.st_size;
}

/* Both the probe and the reader refuse the set with `want` (dir first). */
static void both_fail(input *t, const char *fmt_after_dir)
{
    char want[16384];
    snprintf(want, sizeof(want), "%s%s", dir, fmt_after_dir);
    fails_with(dataset_probe, t, want);
    fails_with(dataset_open, t, want);
}

START_TEST(skm_input_refusals)
{
    mzdata_opts o;
    skm_opts(&o, 4, 6, 6);
    write_set(&o);
    input t;
    skm_input(&t, 1, 4, 6, 6);
    t.in.echo_type = "echo3";
    open_fails(&t, "SkmDataProcessor: echo_type \"echo3\" is none of echo1, echo2, "
                   "echo1-echo2-mc, root_sum_of_squares");
    t.in.echo_type = "echo1-echo2-mc";
    open_fails(&t, "SkmDataProcessor: echo_type \"echo1-echo2-mc\" gives 2 channels (echo1, "
                   "echo2); the model input [1, 4, 6, 6] has 1");
    skm_input(&t, 2, 4, 6, 6);
    t.in.echo_type = "root_sum_of_squares";
    open_fails(&t, "SkmDataProcessor: echo_type \"root_sum_of_squares\" gives 1 channel; the "
                   "model input [2, 4, 6, 6] has 2");
    skm_input(&t, 1, 4, 6, 6);
    t.in.echo_type = ""; /* the Model Zoo's default: echo1 */
    dataset_close(open_ok(&t));
    t.in.num_classes = 7;
    open_fails(&t, "SkmDataProcessor: with aggregate_cartilage the labels are 5 classes "
                   "(background, patellar cartilage, femoral cartilage, tibial cartilage, "
                   "meniscus): num_classes must be 5, not 7");
    t.in.aggregate_cartilage = false;
    t.in.num_classes = 5;
    open_fails(&t, "SkmDataProcessor: without aggregate_cartilage the labels are 7 classes "
                   "(background and seg's 6): num_classes must be 7, not 5");
    skm_input(&t, 1, 4, 6, 6);
    t.in.input_unorm8 = true;
    open_fails(&t, "SkmDataProcessor: the echoes are 16-bit values: the inputs travel as "
                   "float32, not as 8 bits (input_unorm8)");
    skm_input(&t, 1, 4, 6, 6);
    t.in.n_sample_shape = 3;
    open_fails(&t, "SkmDataProcessor: the model input has 3 dimension(s); the reader makes "
                   "volumes [C, D, H, W]");
    skm_input(&t, 1, 4, 6, 6);
    t.in.data_dir = "";
    open_fails(&t, "SkmDataProcessor: data_dir is not set");
    skm_input(&t, 1, 4, 6, 6);
    t.in.random_flip_horizontal = true;
    open_fails(&t, "random_flip_horizontal needs an image input shape [C, H, W]; the model "
                   "input has 4 dimension(s)");
}
END_TEST

START_TEST(skm_annotation_damage)
{
    mzdata_opts o;
    skm_opts(&o, 4, 6, 6);
    write_set(&o);
    input t;
    skm_input(&t, 1, 4, 6, 6);
    const char *json = "annotations/v1.0.0/train.json";
    write_text(json, "{\"images\": [{\"file_name\": \"MTR_001.h5\"} {}]}");
    both_fail(&t, "/annotations/v1.0.0/train.json: not JSON at line 1, column 41: expected ',' "
                  "or ']'");
    write_text(json, "{\"images\": {}}");
    both_fail(&t, "/annotations/v1.0.0/train.json: \"images\" is not an array");
    write_text(json, "{\"info\": {}, \"images\": [{\"file_name\": \"MTR_001.h5\"}, {\"id\": 3}]}");
    both_fail(&t, "/annotations/v1.0.0/train.json: images[1] has no \"file_name\" string");
    write_text(json, "{\"annotations\": []}");
    both_fail(&t, "/annotations/v1.0.0/train.json: no \"images\" array in its top-level object");
    write_text(json, "{\"images\": []}");
    both_fail(&t, "/annotations/v1.0.0/train.json: no images (its \"images\" is empty)");
    write_text(json, "{\"images\": [{\"file_name\": \"../MTR_001.h5\"}]}");
    both_fail(&t, "/annotations/v1.0.0/train.json: images[0].file_name \"../MTR_001.h5\" is not "
                  "the name of a file in image_files/");
    write_text(json, "{\"images\": [{\"file_name\": \"MTR_001.h5\"}, {\"file_name\": "
                     "\"MTR_009.h5\"}]}");
    both_fail(&t, "/image_files/MTR_009.h5: cannot open: No such file or directory");
    remove(path_of(json));
    both_fail(&t, "/annotations/v1.0.0/train.json: cannot open: No such file or directory");
    /* in another order, with a name twice: sorted, both kept (the Model Zoo's) */
    write_text(json, "{\"images\": [{\"file_name\": \"MTR_005.h5\"}, {\"file_name\": "
                     "\"MTR_001.h5\", \"file_name\": \"MTR_003.h5\"}, {\"file_name\": "
                     "\"MTR_001.h5\"}]}");
    dataset *d = open_ok(&t);
    ck_assert_uint_eq(dataset_size(d), 3);
    sample s = read_ok(d, 0, 1); /* MTR_003: training image 1 */
    check_skm_sample(&o, false, 1, ECHO1, true, &s);
    sample_free(&s);
    dataset_close(d);
}
END_TEST

START_TEST(skm_file_damage)
{
    mzdata_opts o;
    skm_opts(&o, 8, 12, 10);
    write_set(&o);
    input t;
    skm_input(&t, 1, 8, 12, 10);
    char want[8192];
    /* truncated: the superblock's end of file is past the end */
    const char *f3 = path_of("image_files/MTR_003.h5");
    long size = file_size(f3);
    ck_assert_int_eq(truncate(f3, size / 2), 0);
    snprintf(want, sizeof(want), "/image_files/MTR_003.h5: truncated HDF5 file: %ld bytes, its "
             "superblock says %ld", size / 2, size);
    both_fail(&t, want);
    ck_assert_int_eq(truncate(f3, 20), 0);
    both_fail(&t, "/image_files/MTR_003.h5: truncated HDF5 file: 20 bytes, cut inside its "
                  "superblock");
    write_text("image_files/MTR_003.h5", "a text file, not HDF5");
    both_fail(&t, "/image_files/MTR_003.h5: not an HDF5 file: no HDF5 signature (at byte 0, "
                  "512, 1024, ...) in its 21 bytes");
    remove(f3);
    both_fail(&t, "/image_files/MTR_003.h5: cannot open: No such file or directory");
    ck_assert_int_eq(mkdir(f3, 0755), 0);
    both_fail(&t, "/image_files/MTR_003.h5: not a regular file");
    rmdir(f3);

    /* datasets: found by the reader's open, not by the probe */
    teardown();
    setup();
    o.hdf5.leave_out = MZDATA_SKM_NO_ECHO2;
    write_set(&o);
    dataset *d = open_ok(&t); /* echo1 needs no echo2 */
    dataset_close(d);
    const char *const two[] = {"echo2", "echo1-echo2-mc", "root_sum_of_squares"};
    for (int i = 0; i < 3; i++) {
        skm_input(&t, i == 1 ? 2 : 1, 8, 12, 10);
        t.in.echo_type = (char *)two[i];
        snprintf(want, sizeof(want), "%s/image_files/MTR_001.h5: no dataset \"echo2\" (echo_type "
                 "\"%s\" reads it)", dir, two[i]);
        open_fails(&t, want);
        ck_assert_int_eq(dataset_probe(&d, &t.in, err, sizeof(err)), 0);
        dataset_close(d);
    }
    teardown();
    setup();
    o.hdf5.leave_out = MZDATA_SKM_NO_SEG;
    write_set(&o);
    skm_input(&t, 1, 8, 12, 10);
    snprintf(want, sizeof(want), "%s/image_files/MTR_001.h5: no dataset \"seg\" (the "
             "segmentation)", dir);
    open_fails(&t, want);

    /* another shape than the model's */
    teardown();
    setup();
    o.hdf5.leave_out = 0;
    write_set(&o);
    skm_input(&t, 1, 8, 12, 12);
    snprintf(want, sizeof(want), "%s/image_files/MTR_001.h5: echo1 is [12, 10, 8]; the model "
             "input [1, 8, 12, 12] (C, D, H, W) needs [H, W, D] = [12, 12, 8]", dir);
    open_fails(&t, want);
    skm_input(&t, 1, 10, 12, 8); /* D and W swapped */
    snprintf(want, sizeof(want), "%s/image_files/MTR_001.h5: echo1 is [12, 10, 8]; the model "
             "input [1, 10, 12, 8] (C, D, H, W) needs [H, W, D] = [12, 8, 10]", dir);
    open_fails(&t, want);
    teardown();
    setup();
    o.hdf5.seg_classes = 4;
    write_set(&o);
    skm_input(&t, 1, 8, 12, 10);
    snprintf(want, sizeof(want), "%s/image_files/MTR_001.h5: seg is [12, 10, 8, 4]; the model "
             "input [1, 8, 12, 10] (C, D, H, W) needs [H, W, D, 6 tissues] = [12, 10, 8, 6]",
             dir);
    open_fails(&t, want);

    /* damage after the open: the sample's read fails, naming file and sample */
    teardown();
    setup();
    o.hdf5.seg_classes = 6;
    write_set(&o);
    d = open_ok(&t);
    const char *f5 = path_of("image_files/MTR_005.h5");
    size = file_size(f5);
    ck_assert_int_eq(truncate(f5, size - 100), 0);
    float x[8 * 12 * 10];
    uint8_t y[8 * 12 * 10];
    ck_assert_int_lt(dataset_read(d, 0, 2, x, y, err, sizeof(err)), 0);
    snprintf(want, sizeof(want), "%s/image_files/MTR_005.h5: truncated HDF5 file: %ld bytes, its "
             "superblock says %ld (sample 2)", dir, size - 100, size);
    ck_assert_str_eq(err, want);
    remove(path_of("image_files/MTR_001.h5"));
    ck_assert_int_lt(dataset_read(d, 0, 0, x, y, err, sizeof(err)), 0);
    snprintf(want, sizeof(want), "%s/image_files/MTR_001.h5: cannot open: No such file or "
             "directory (sample 0)", dir);
    ck_assert_str_eq(err, want);
    sample s = read_ok(d, 0, 1); /* the others still read */
    check_skm_sample(&o, false, 1, ECHO1, true, &s);
    sample_free(&s);
    dataset_close(d);
}
END_TEST

/* Damage inside the data (the superblock whole): libhdf5's reason. */
START_TEST(skm_corrupt_inside)
{
    mzdata_opts o;
    skm_opts(&o, 8, 12, 10);
    o.count = 1;
    write_set(&o);
    input t;
    skm_input(&t, 1, 8, 12, 10);
    const char *f1 = path_of("image_files/MTR_001.h5");
    /* the root group's symbol table entry and what follows, overwritten */
    FILE *f = fopen(f1, "r+b");
    ck_assert_ptr_nonnull(f);
    char junk[200];
    memset(junk, 0x5a, sizeof(junk));
    fseek(f, 96, SEEK_SET);
    fwrite(junk, 1, sizeof(junk), f);
    fclose(f);
    char want[8192];
    snprintf(want, sizeof(want), "%s/image_files/MTR_001.h5: corrupt HDF5 file: ", dir);
    dataset *d = (dataset *)1;
    ck_assert_int_lt(dataset_open(&d, &t.in, err, sizeof(err)), 0);
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "%s", err);
    ck_assert_uint_gt(strlen(err), strlen(want)); /* and libhdf5's reason */
    ck_assert_int_eq(dataset_probe(&d, &t.in, err, sizeof(err)), 0); /* whole, to the probe */
    dataset_close(d);
}
END_TEST

/* 4-D samples through the layer: batches of volumes, in order. */
START_TEST(skm_batches)
{
    mzdata_opts o;
    skm_opts(&o, 4, 6, 5);
    o.count = 5;
    write_set(&o);
    input t;
    skm_input(&t, 2, 4, 6, 5);
    t.in.echo_type = "echo1-echo2-mc";
    t.in.shuffle = true;
    t.in.labels_uint8 = false;
    t.in.normalize = "standard_score";
    dataset *d = open_ok(&t);
    const size_t n = 2 * 4 * 6 * 5, m = 4 * 6 * 5;
    const uint32_t B = 3;
    ck_assert_uint_eq(dataset_batch_bytes(d, B), B * (n * 4 + m * 4));
    uint8_t *buf = malloc(dataset_batch_bytes(d, B));
    float x[2 * 4 * 6 * 5];
    int32_t y[4 * 6 * 5];
    for (uint64_t step = 0; step < 4; step++) {
        ck_assert_msg(dataset_batch(d, step, B, 0, B, buf, err, sizeof(err)) == 0, "%s", err);
        for (uint32_t i = 0; i < B; i++) {
            ck_assert_msg(dataset_sample(d, step, B, i, x, y, err, sizeof(err)) == 0, "%s", err);
            ck_assert_mem_eq(buf + i * n * 4, x, n * 4);
            ck_assert_mem_eq(buf + B * n * 4 + i * m * 4, y, m * 4);
            for (size_t k = 0; k < m; k++)
                ck_assert_int_lt(y[k], 5);
        }
    }
    /* an epoch of shuffled samples is each sample once */
    unsigned seen = 0;
    for (uint64_t pos = 0; pos < 5; pos++)
        seen |= 1u << dataset_index(d, 0, 5, pos);
    ck_assert_uint_eq(seen, 0x1f);
    ck_assert_msg(dataset_range(d, 1, B, buf, err, sizeof(err)) == 0, "%s", err);
    for (uint32_t i = 0; i < B; i++) {
        ck_assert_msg(dataset_read(d, 0, 1 + i, x, y, err, sizeof(err)) == 0, "%s", err);
        ck_assert_mem_eq(buf + i * n * 4, x, n * 4);
        ck_assert_mem_eq(buf + B * n * 4 + i * m * 4, y, m * 4);
    }
    free(buf);
    dataset_close(d);
}
END_TEST

/* ---- synthetic_volume ---- */

START_TEST(volume_determinism)
{
    input t;
    input_init(&t, "synthetic_volume", 2, 6, 20, 24, 4);
    t.in.num_samples = 6;
    t.in.noise = 1.0;
    t.in.input_unorm8 = true;
    dataset *a = open_ok(&t), *b = open_ok(&t);
    ck_assert_uint_eq(dataset_size(a), 6);
    ck_assert_uint_eq(dataset_sample_elems(a), 2 * 6 * 20 * 24);
    ck_assert_uint_eq(dataset_label_elems(a), 6 * 20 * 24);
    t.in.split = "eval";
    dataset *ev = open_ok(&t);
    t.in.split = "train";
    t.in.seed = 8;
    dataset *other = open_ok(&t);
    const size_t n = 2 * 6 * 20 * 24, m = 6 * 20 * 24;
    for (uint64_t i = 0; i < 6; i++) {
        sample s1 = read_ok(a, 0, i), s2 = read_ok(b, 3, i), s3 = read_ok(a, 0, i);
        sample se = read_ok(ev, 0, i), so = read_ok(other, 0, i);
        ck_assert_mem_eq(s1.x, s2.x, n); /* any open, any epoch: the same */
        ck_assert_mem_eq(s1.y, s2.y, m);
        ck_assert_mem_eq(s1.x, s3.x, n);
        ck_assert(memcmp(s1.x, se.x, n) != 0); /* the evaluation split: other volumes */
        ck_assert(memcmp(s1.x, so.x, n) != 0); /* another seed: another set */
        if (i > 0) {
            sample p = read_ok(a, 0, i - 1);
            ck_assert(memcmp(s1.x, p.x, n) != 0);
            sample_free(&p);
        }
        sample_free(&s1);
        sample_free(&s2);
        sample_free(&s3);
        sample_free(&se);
        sample_free(&so);
    }
    dataset_close(a);
    dataset_close(b);
    dataset_close(ev);
    dataset_close(other);
}
END_TEST

/* Each class looks as its own: per channel, the voxels of a class lie in
 * a band of the stripes and the noise around its level, and the levels
 * rise with the class; the solids are there. */
START_TEST(volume_classes)
{
    const uint32_t C = 3, D = 10, H = 16, W = 18, K = 4;
    input t;
    input_init(&t, "synthetic_volume", C, D, H, W, K);
    t.in.num_samples = 8;
    t.in.noise = 1.0;
    t.in.input_unorm8 = true;
    dataset *d = open_ok(&t);
    const size_t m = (size_t)D * H * W;
    uint8_t lo[4][3], hi[4][3];
    double sum[4][3] = {{0}};
    size_t count[4] = {0};
    memset(lo, 255, sizeof(lo));
    memset(hi, 0, sizeof(hi));
    unsigned samples_with_solids = 0;
    for (uint64_t i = 0; i < 8; i++) {
        sample s = read_ok(d, 0, i);
        size_t fg = 0;
        for (size_t p = 0; p < m; p++) {
            uint32_t k = s.y[p];
            ck_assert_uint_lt(k, K);
            count[k]++;
            fg += k != 0;
            for (uint32_t c = 0; c < C; c++) {
                uint8_t v = s.x[c * m + p];
                lo[k][c] = v < lo[k][c] ? v : lo[k][c];
                hi[k][c] = v > hi[k][c] ? v : hi[k][c];
                sum[k][c] += v;
            }
        }
        samples_with_solids += fg > 0;
        sample_free(&s);
    }
    ck_assert_uint_ge(samples_with_solids, 6);
    /* stripes +-0.06 and uniform noise of half-width 0.05 sqrt(3): a band
     * of at most 2 (0.06 + 0.0866) 255 + 1 */
    for (uint32_t k = 0; k < K; k++) {
        ck_assert_msg(count[k] > 0, "class %u never drawn", k);
        for (uint32_t c = 0; c < C; c++) {
            ck_assert_msg(hi[k][c] - lo[k][c] <= 76, "class %u channel %u spans %u..%u", k, c,
                          lo[k][c], hi[k][c]);
            if (k > 0)
                ck_assert_msg(sum[k][c] / count[k] > sum[k - 1][c] / count[k - 1],
                              "class %u is not brighter than %u in channel %u", k, k - 1, c);
        }
    }
    /* float32 inputs are the 8-bit values / 255, int32 labels the bytes */
    t.in.input_unorm8 = false;
    t.in.labels_uint8 = false;
    dataset *f = open_ok(&t);
    sample a = read_ok(d, 0, 5), b = read_ok(f, 0, 5);
    for (size_t i = 0; i < C * m; i++)
        ck_assert_float_eq(((float *)b.x)[i], (float)a.x[i] / 255.0f);
    for (size_t p = 0; p < m; p++)
        ck_assert_int_eq(((int32_t *)b.y)[p], a.y[p]);
    sample_free(&a);
    sample_free(&b);
    dataset_close(f);
    dataset_close(d);
}
END_TEST

/* A volume as thin as one slice and as small as one voxel still reads. */
START_TEST(volume_small)
{
    const uint64_t shapes[][4] = {{1, 1, 8, 8}, {1, 1, 1, 1}, {2, 3, 1, 7}};
    for (size_t i = 0; i < 3; i++) {
        input t;
        input_init(&t, "synthetic_volume", (uint32_t)shapes[i][0], (uint32_t)shapes[i][1],
                   (uint32_t)shapes[i][2], (uint32_t)shapes[i][3], 2);
        t.in.num_samples = 3;
        t.in.input_unorm8 = true;
        dataset *d = open_ok(&t);
        for (uint64_t k = 0; k < 3; k++) {
            sample s = read_ok(d, 0, k);
            sample_free(&s);
        }
        dataset_close(d);
    }
}
END_TEST

START_TEST(volume_standard_score)
{
    input t;
    input_init(&t, "synthetic_volume", 2, 4, 8, 8, 3);
    t.in.num_samples = 2;
    t.in.input_unorm8 = true;
    dataset *u8 = open_ok(&t);
    t.in.input_unorm8 = false;
    t.in.normalize = "standard_score";
    dataset *d = open_ok(&t);
    const size_t n = 2 * 4 * 8 * 8;
    sample a = read_ok(u8, 0, 1), b = read_ok(d, 0, 1);
    /* over the whole sample, as for images */
    double sum = 0, ss = 0;
    for (size_t i = 0; i < n; i++)
        sum += a.x[i];
    double mean = sum / n;
    for (size_t i = 0; i < n; i++)
        ss += (a.x[i] - mean) * (a.x[i] - mean);
    double sd = sqrt(ss / (n - 1));
    for (size_t i = 0; i < n; i++)
        ck_assert(fabs(((float *)b.x)[i] - (a.x[i] - mean) / sd) < 1e-6);
    sample_free(&a);
    sample_free(&b);
    dataset_close(u8);
    dataset_close(d);
}
END_TEST

START_TEST(volume_refusals)
{
    input t;
    input_init(&t, "synthetic_volume", 1, 4, 8, 8, 1);
    t.in.num_samples = 2;
    open_fails(&t, "synthetic_volume: num_classes 1 is not in [2, 4096] (class 0 is the "
                   "background)");
    t.in.num_classes = 2;
    t.in.n_sample_shape = 3;
    open_fails(&t, "synthetic_volume: the model input has 3 dimension(s); the reader makes "
                   "volumes [C, D, H, W]");
    uint64_t five[5] = {1, 2, 3, 4, 5};
    t.in.sample_shape = five;
    t.in.n_sample_shape = 5;
    open_fails(&t, "the model input has 5 dimensions; a sample has 1 to 4");
    input_init(&t, "synthetic_volume", 1, 4, 8, 8, 2);
    t.in.augment = true;
    open_fails(&t, "augment_data needs an image input shape [C, H, W]; the model input has 4 "
                   "dimension(s)");
    input_init(&t, "synthetic_volume", 1, 4, 8, 8, 2);
    t.in.random_crop_padding = 2;
    open_fails(&t, "random_crop_padding needs an image input shape [C, H, W]; the model input "
                   "has 4 dimension(s)");
    /* classification of any shape takes a volume as it takes a vector */
    input_init(&t, "synthetic_classification", 1, 4, 8, 8, 3);
    t.in.labels_uint8 = false;
    t.in.num_samples = 4;
    dataset *d = open_ok(&t);
    ck_assert_uint_eq(dataset_sample_elems(d), 4 * 8 * 8);
    ck_assert_uint_eq(dataset_label_elems(d), 1);
    dataset_close(d);
}
END_TEST

/* Every reader of images refuses a volume, naming itself. */
START_TEST(image_readers_refuse_volumes)
{
    const char *const readers[] = {"synthetic_segmentation", "mnist", "png_segmentation",
                                   "InriaAerialDataProcessor",
                                   "SeverstalBinaryClassDataProcessor",
                                   "CityscapesDataProcessor"};
    for (size_t i = 0; i < sizeof(readers) / sizeof(readers[0]); i++) {
        input t;
        input_init(&t, readers[i], 1, 4, 8, 8, 2);
        t.in.input_unorm8 = true;
        t.in.class_id = 3;
        char want[512];
        snprintf(want, sizeof(want), "%s: the model input [1, 4, 8, 8] is a volume [C, D, H, W]; "
                 "the reader takes images [C, H, W] (volumes: synthetic_volume, "
                 "SkmDataProcessor)", readers[i]);
        fails_with(dataset_open, &t, want);
        fails_with(dataset_probe, &t, want);
    }
}
END_TEST

/* ---- the probe's own parsers ---- */

static int scan(const char *text, char ***out, size_t *n)
{
    return jsonscan_strings(text, strlen(text), "images", "file_name", out, n, err, sizeof(err));
}

static void scan_fails(const char *text, const char *want)
{
    char **out;
    size_t n;
    ck_assert_int_lt(scan(text, &out, &n), 0);
    ck_assert_ptr_null(out);
    ck_assert_str_eq(err, want);
}

START_TEST(jsonscan_cases)
{
    char **out;
    size_t n;
    /* escapes, a surrogate pair, other keys and values of every kind, a
     * duplicate key (the last counts) */
    const char *text =
        "{\"info\": {\"a\": [1, -2.5e+3, 0, true, false, null, NaN, -Infinity, \"\\ud800\"]},\n"
        " \"images\": [{\"file_name\": \"old\"}],\n"
        " \"images\": [ {\"id\": 1, \"file_name\": \"a\\\"b\\\\c\\/d\\u00e9\\ud83d\\ude00\", "
        "\"x\": {\"file_name\": 3}},\n"
        "   {\"file_name\": 5, \"file_name\": \"t\\tn\\n\"} ] }  \n";
    ck_assert_msg(scan(text, &out, &n) == 0, "%s", err);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(out[0], "a\"b\\c/d\xc3\xa9\xf0\x9f\x98\x80");
    ck_assert_str_eq(out[1], "t\tn\n");
    jsonscan_free(out, n);
    ck_assert_int_eq(scan("{\"images\": []}", &out, &n), 0);
    ck_assert_uint_eq(n, 0);
    jsonscan_free(out, n);

    scan_fails("", "not JSON: expected a value, found the end of the file (line 1, column 1)");
    scan_fails("[{\"file_name\": \"a\"}]", "not a JSON object with an \"images\" array");
    scan_fails("{\"images\": [], }", "not JSON at line 1, column 16: expected a string");
    scan_fails("{\"images\": []} x", "not JSON at line 1, column 16: extra data after the "
                                     "top-level object");
    scan_fails("{\n  \"images\": [\n    {\"file_name\": 01}]}",
               "not JSON at line 3, column 19: a leading zero in a number");
    scan_fails("{\"images\": [{\"file_name\": \"a\\u0000b\"}]}",
               "not JSON at line 1, column 29: \\u0000 in a name");
    scan_fails("{\"images\": [{\"file_name\": \"\\udc00\"}]}",
               "not JSON at line 1, column 28: a lone surrogate (\\ud800 to \\udfff) in a name");
    scan_fails("{\"images\": [{\"file_name\": \"\xc3\"}]}",
               "not JSON at line 1, column 28: invalid UTF-8 in a string");
    scan_fails("{\"images\": [{\"file_name\": \"a\x01\"}]}",
               "not JSON at line 1, column 29: control character in a string");
    scan_fails("{\"images\": [{\"file_name\": \"a\\x\"}]}",
               "not JSON at line 1, column 29: unknown escape in a string");
    scan_fails("{\"images\": [3]}", "images[0] is not an object");
    scan_fails("{\"images\": [{\"file_name\": [\"a\"]}]}",
               "images[0] has no \"file_name\" string");
    scan_fails("{\"images\": \"x\"}", "\"images\" is not an array");
    scan_fails("{\"image\": []}", "no \"images\" array in its top-level object");
    scan_fails("\xef\xbb\xbf{\"images\": []}",
               "not JSON at line 1, column 1: expected a value");
    scan_fails("{\"images\": [], \"x\": tru}", "not JSON at line 1, column 21: expected a value");
    char nul[] = "{\"images\": []}";
    nul[3] = 0;
    char **o2;
    size_t n2;
    ck_assert_int_eq(jsonscan_strings(nul, sizeof(nul) - 1, "images", "file_name", &o2, &n2, err,
                                      sizeof(err)),
                     -EINVAL);
    ck_assert_str_eq(err, "not JSON at line 1, column 4: a NUL byte");
    /* nesting: 64 deep is fine, 65 is not */
    char deep[400];
    size_t k = 0;
    k += (size_t)snprintf(deep + k, sizeof(deep) - k, "{\"x\": ");
    for (int i = 0; i < 63; i++)
        deep[k++] = '[';
    for (int i = 0; i < 63; i++)
        deep[k++] = ']';
    snprintf(deep + k, sizeof(deep) - k, ", \"images\": []}");
    ck_assert_msg(scan(deep, &out, &n) == 0, "%s", err);
    jsonscan_free(out, n);
    k = (size_t)snprintf(deep, sizeof(deep), "{\"x\": ");
    for (int i = 0; i < 64; i++)
        deep[k++] = '[';
    deep[k] = 0;
    scan_fails(deep, "not JSON at line 1, column 70: nested deeper than 64");
}
END_TEST

START_TEST(h5hdr_cases)
{
    /* a user block of 512 bytes: the signature after it, addresses from it */
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    H5Pset_userblock(fcpl, 512);
    hid_t f = H5Fcreate(path_of("ub.h5"), H5F_ACC_TRUNC, fcpl, H5P_DEFAULT);
    ck_assert_int_ge(f, 0);
    H5Fclose(f);
    h5hdr h;
    ck_assert_msg(h5hdr_read(path_of("ub.h5"), &h, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(h.sig_offset, 512);
    ck_assert_uint_eq(h.version, 0);
    ck_assert_uint_eq(h.offset_size, 8);
    ck_assert_uint_eq(h.base, 512);
    ck_assert_uint_eq(h.eof, h.file_size);
    /* the latest format: superblock 3 */
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
    f = H5Fcreate(path_of("v3.h5"), H5F_ACC_TRUNC, fcpl, fapl);
    ck_assert_int_ge(f, 0);
    H5Fclose(f);
    H5Pclose(fapl);
    H5Pclose(fcpl);
    ck_assert_msg(h5hdr_read(path_of("v3.h5"), &h, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(h.version, 3);
    ck_assert_uint_eq(h.sig_offset, 512);
    ck_assert_uint_eq(h.eof, h.file_size);
    /* a superblock version no libhdf5 writes */
    FILE *fp = fopen(path_of("v9.h5"), "wb");
    fwrite("\x89HDF\r\n\x1a\n\x09", 1, 9, fp);
    fclose(fp);
    char want[8192];
    snprintf(want, sizeof(want), "%s: HDF5 superblock version 9; libhdf5 writes 0 to 3",
             path_of("v9.h5"));
    ck_assert_int_eq(h5hdr_read(path_of("v9.h5"), &h, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, want);
    /* 16-byte addresses */
    uint8_t sb[64] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n', 2, 16, 8};
    fp = fopen(path_of("a16.h5"), "wb");
    fwrite(sb, 1, sizeof(sb), fp);
    fclose(fp);
    snprintf(want, sizeof(want), "%s: HDF5 superblock with 16-byte addresses; the reader takes "
             "2, 4 or 8", path_of("a16.h5"));
    ck_assert_int_eq(h5hdr_read(path_of("a16.h5"), &h, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, want);
    /* an undefined end of file (all ones) is not a truncation */
    uint8_t sb2[64] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n', 2, 4, 4};
    memset(sb2 + 12, 0, 4);
    memset(sb2 + 16, 0xff, 8);
    fp = fopen(path_of("undef.h5"), "wb");
    fwrite(sb2, 1, sizeof(sb2), fp);
    fclose(fp);
    ck_assert_msg(h5hdr_read(path_of("undef.h5"), &h, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(h.eof, UINT64_MAX);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("dataset-vol");
    TCase *k = tcase_create("skm");
    tcase_add_checked_fixture(k, setup, teardown);
    tcase_set_timeout(k, 60);
    tcase_add_test(k, skm_reads);
    tcase_add_test(k, skm_fixture_has_structure);
    tcase_add_test(k, skm_normalize);
    tcase_add_test(k, skm_slabs);
    tcase_add_test(k, skm_threads);
    tcase_add_test(k, skm_probe);
    tcase_add_test(k, skm_input_refusals);
    tcase_add_test(k, skm_annotation_damage);
    tcase_add_test(k, skm_file_damage);
    tcase_add_test(k, skm_corrupt_inside);
    tcase_add_test(k, skm_batches);
    suite_add_tcase(s, k);
    TCase *v = tcase_create("volume");
    tcase_add_checked_fixture(v, setup, teardown);
    tcase_add_test(v, volume_determinism);
    tcase_add_test(v, volume_classes);
    tcase_add_test(v, volume_small);
    tcase_add_test(v, volume_standard_score);
    tcase_add_test(v, volume_refusals);
    tcase_add_test(v, image_readers_refuse_volumes);
    suite_add_tcase(s, v);
    TCase *p = tcase_create("parsers");
    tcase_add_checked_fixture(p, setup, teardown);
    tcase_add_test(p, jsonscan_cases);
    tcase_add_test(p, h5hdr_cases);
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
