/* The input workers' data: epochs are permutations of the data set, the
 * same for every run with the same seed, and samples do not depend on who
 * produces them; synthetic segmentation, seeded flips and the batch layout.
 * The readers of files are tested in test_dataset_files.c. */
#include <check.h>
#include <pthread.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "augment.h"
#include "dataset.h"
#include "sample.h"

static dataset *make(uint64_t n, bool shuffle, uint64_t seed)
{
    Appliance__PlanInput in = APPLIANCE__PLAN_INPUT__INIT;
    uint64_t shape[1] = {8};
    in.data_processor = "synthetic_classification";
    in.num_samples = n;
    in.num_classes = 3;
    in.noise = 0.5;
    in.shuffle = shuffle;
    in.seed = seed;
    in.n_sample_shape = 1;
    in.sample_shape = shape;
    dataset *d;
    char err[256];
    ck_assert_msg(dataset_open(&d, &in, err, sizeof(err)) == 0, "%s", err);
    return d;
}

START_TEST(epochs_are_permutations)
{
    const uint64_t sizes[] = {1, 2, 7, 64, 1000, 4099};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        uint64_t n = sizes[s];
        dataset *d = make(n, true, 42);
        unsigned char *seen = calloc(n, 1);
        /* Batch 5 over two epochs: every index once per epoch. */
        for (int epoch = 0; epoch < 2; epoch++) {
            memset(seen, 0, n);
            for (uint64_t g = epoch * n; g < (epoch + 1) * n; g++) {
                uint64_t idx = dataset_index(d, g / 5, 5, g % 5);
                ck_assert_uint_lt(idx, n);
                ck_assert_msg(!seen[idx], "n=%llu: index %llu twice in epoch %d",
                              (unsigned long long)n, (unsigned long long)idx, epoch);
                seen[idx] = 1;
            }
        }
        free(seen);
        dataset_close(d);
    }
}
END_TEST

START_TEST(order_follows_seed_and_epoch)
{
    dataset *a = make(1000, true, 1), *b = make(1000, true, 1), *c = make(1000, true, 2);
    int same_seed = 0, other_seed = 0, next_epoch = 0, identity = 0;
    for (uint64_t i = 0; i < 1000; i++) {
        uint64_t x = dataset_index(a, 0, 1000, i);
        same_seed += x == dataset_index(b, 0, 1000, i);
        other_seed += x == dataset_index(c, 0, 1000, i);
        next_epoch += x == dataset_index(a, 1, 1000, i);
        identity += x == i;
    }
    ck_assert_int_eq(same_seed, 1000);
    ck_assert_int_lt(other_seed, 20); /* about 1 expected by chance */
    ck_assert_int_lt(next_epoch, 20);
    ck_assert_int_lt(identity, 20);
    dataset *plain = make(10, false, 1);
    ck_assert_uint_eq(dataset_index(plain, 3, 4, 1), 3); /* (3 * 4 + 1) % 10 */
    dataset_close(a);
    dataset_close(b);
    dataset_close(c);
    dataset_close(plain);
}
END_TEST

START_TEST(samples_are_pure_functions)
{
    dataset *d = make(100, true, 9);
    float x1[8], x2[8];
    int32_t y1, y2;
    char err[128];
    ck_assert_uint_eq(dataset_size(d), 100);
    ck_assert_uint_eq(dataset_sample_elems(d), 8);
    ck_assert_uint_eq(dataset_label_elems(d), 1);
    ck_assert_int_eq(dataset_read(d, 0, 17, x1, &y1, err, sizeof(err)), 0);
    ck_assert_int_eq(dataset_read(d, 0, 18, x2, &y2, err, sizeof(err)), 0);
    ck_assert_int_eq(dataset_read(d, 3, 17, x2, &y2, err, sizeof(err)), 0);
    ck_assert_int_eq(memcmp(x1, x2, sizeof(x1)), 0);
    ck_assert_int_eq(y1, y2);
    ck_assert(y1 >= 0 && y1 < 3);
    ck_assert_int_lt(dataset_read(d, 0, 100, x2, &y2, err, sizeof(err)), 0);
    dataset_close(d);
}
END_TEST

START_TEST(unknown_processor_refused)
{
    Appliance__PlanInput in = APPLIANCE__PLAN_INPUT__INIT;
    in.data_processor = "imagenet";
    dataset *d;
    char err[128];
    ck_assert_int_lt(dataset_open(&d, &in, err, sizeof(err)), 0);
    ck_assert_ptr_null(d);
    ck_assert_str_eq(err, "data_processor \"imagenet\" is not available");
    dataset_close(NULL);
}
END_TEST

/* A synthetic_segmentation set of (C, H, W) images. */
static dataset *make_seg(uint32_t c, uint32_t h, uint32_t w, uint32_t classes, uint64_t seed,
                         const char *split, bool flip_h, bool flip_v)
{
    Appliance__PlanInput in = APPLIANCE__PLAN_INPUT__INIT;
    uint64_t shape[3] = {c, h, w};
    in.data_processor = "synthetic_segmentation";
    in.num_samples = 1000;
    in.num_classes = classes;
    in.noise = 1.0;
    in.shuffle = true;
    in.seed = seed;
    in.split = (char *)split;
    in.random_flip_horizontal = flip_h;
    in.random_flip_vertical = flip_v;
    in.n_sample_shape = 3;
    in.sample_shape = shape;
    dataset *d;
    char err[256];
    ck_assert_msg(dataset_open(&d, &in, err, sizeof(err)) == 0, "%s", err);
    return d;
}

/* One sample of d, freshly allocated. */
static void read_sample(const dataset *d, uint64_t epoch, uint64_t idx, float **x, int32_t **y)
{
    char err[256];
    *x = malloc(dataset_sample_elems(d) * sizeof(float));
    *y = malloc(dataset_label_elems(d) * sizeof(int32_t));
    ck_assert(*x && *y);
    ck_assert_msg(dataset_read(d, epoch, idx, *x, *y, err, sizeof(err)) == 0, "%s", err);
}

/* The same batch in both encodings (sample.h): 8-bit pixels and byte labels
 * are exactly the float32 and int32 batch, made float as the wse-node
 * does; augmentation moves bytes as it moves floats. */
START_TEST(encodings_agree)
{
    enum { C = 3, H = 20, W = 24, N = 3 };
    uint64_t shape[3] = {C, H, W};
    Appliance__PlanInput in = APPLIANCE__PLAN_INPUT__INIT;
    in.data_processor = "synthetic_segmentation";
    in.num_samples = 50;
    in.num_classes = 3;
    in.noise = 1.0;
    in.shuffle = true;
    in.seed = 4;
    in.random_flip_horizontal = in.random_flip_vertical = true;
    in.random_crop_padding = 3;
    in.n_sample_shape = 3;
    in.sample_shape = shape;
    dataset *f, *b;
    char err[256];
    ck_assert_msg(dataset_open(&f, &in, err, sizeof(err)) == 0, "%s", err);
    in.input_unorm8 = in.labels_uint8 = true;
    ck_assert_msg(dataset_open(&b, &in, err, sizeof(err)) == 0, "%s", err);
    ck_assert(dataset_input_unorm8(b) && dataset_labels_u8(b) && !dataset_input_unorm8(f));
    ck_assert_uint_eq(dataset_batch_bytes(f, N), N * (C * H * W + H * W) * 4);
    ck_assert_uint_eq(dataset_batch_bytes(b, N), N * (C * H * W + H * W));
    float *xf = malloc(dataset_batch_bytes(f, N));
    uint8_t *xb = malloc(dataset_batch_bytes(b, N));
    ck_assert(xf && xb);
    for (uint64_t step = 0; step < 4; step++) {
        ck_assert(dataset_batch(f, step, 8, 2, N, xf, err, sizeof(err)) == 0);
        ck_assert(dataset_batch(b, step, 8, 2, N, xb, err, sizeof(err)) == 0);
        for (size_t i = 0; i < (size_t)N * C * H * W; i++)
            ck_assert_float_eq(xf[i], sample_unorm8(xb[i]));
        const int32_t *yf = (const int32_t *)(xf + (size_t)N * C * H * W);
        const uint8_t *yb = xb + (size_t)N * C * H * W;
        for (size_t i = 0; i < (size_t)N * H * W; i++)
            ck_assert_int_eq(yf[i], yb[i]);
    }
    free(xf);
    free(xb);
    dataset_close(f);
    dataset_close(b);

    /* What cannot travel as bytes is refused. */
    in.num_classes = 300;
    ck_assert_int_eq(dataset_open(&b, &in, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "labels travel as bytes, but num_classes 300 is above 256");
    in.num_classes = 3;
    in.data_processor = "synthetic_classification";
    in.random_flip_horizontal = in.random_flip_vertical = false;
    in.random_crop_padding = 0;
    ck_assert_int_eq(dataset_open(&b, &in, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "synthetic_classification: samples are float32, not 8-bit values");
}
END_TEST

START_TEST(segmentation_is_a_pure_function)
{
    dataset *a = make_seg(3, 24, 40, 4, 5, "train", false, false);
    dataset *b = make_seg(3, 24, 40, 4, 5, "train", false, false);
    dataset *other = make_seg(3, 24, 40, 4, 6, "train", false, false);
    dataset *eval = make_seg(3, 24, 40, 4, 5, "eval", false, false);
    ck_assert_uint_eq(dataset_sample_elems(a), 3 * 24 * 40);
    ck_assert_uint_eq(dataset_label_elems(a), 24 * 40);
    ck_assert_uint_eq(dataset_size(a), 1000);
    size_t xb = 3 * 24 * 40 * sizeof(float), yb = 24 * 40 * sizeof(int32_t);
    float *x1, *x2, *x3, *x4, *x5;
    int32_t *y1, *y2, *y3, *y4, *y5;
    read_sample(a, 0, 7, &x1, &y1);
    read_sample(b, 2, 7, &x2, &y2); /* another data set, another epoch: no augmentation */
    read_sample(a, 0, 8, &x3, &y3);
    read_sample(other, 0, 7, &x4, &y4);
    read_sample(eval, 0, 7, &x5, &y5);
    ck_assert_int_eq(memcmp(x1, x2, xb), 0);
    ck_assert_int_eq(memcmp(y1, y2, yb), 0);
    ck_assert_int_ne(memcmp(x1, x3, xb), 0);
    ck_assert_int_ne(memcmp(x1, x4, xb), 0);
    ck_assert_int_ne(memcmp(x1, x5, xb), 0); /* the evaluation split has its own samples */
    for (size_t i = 0; i < 3 * 24 * 40; i++)
        ck_assert(x1[i] >= 0.0f && x1[i] <= 1.0f);
    free(x1), free(x2), free(x3), free(x4), free(x5);
    free(y1), free(y2), free(y3), free(y4), free(y5);
    dataset_close(a);
    dataset_close(b);
    dataset_close(other);
    dataset_close(eval);
}
END_TEST

/* Over many samples every class shows up, and the pixels of each class are
 * brighter on average than the background (class 0) in every split. */
static void check_classes(uint32_t c, uint32_t classes, const char *split)
{
    const uint32_t H = 32, W = 48;
    dataset *d = make_seg(c, H, W, classes, 11, split, false, false);
    double *sum = calloc(classes, sizeof(double));
    uint64_t *count = calloc(classes, sizeof(uint64_t));
    for (uint64_t idx = 0; idx < 60; idx++) {
        float *x;
        int32_t *y;
        read_sample(d, 0, idx, &x, &y);
        for (size_t p = 0; p < (size_t)H * W; p++) {
            ck_assert(y[p] >= 0 && (uint32_t)y[p] < classes);
            double v = 0;
            for (uint32_t k = 0; k < c; k++)
                v += x[(size_t)k * H * W + p];
            sum[y[p]] += v / c;
            count[y[p]]++;
        }
        free(x);
        free(y);
    }
    for (uint32_t k = 0; k < classes; k++)
        ck_assert_msg(count[k] > 0, "class %u never appears", k);
    ck_assert_msg(count[0] > count[1], "the background should dominate");
    double bg = sum[0] / (double)count[0];
    for (uint32_t k = 1; k < classes; k++) {
        double m = sum[k] / (double)count[k];
        ck_assert_msg(m - bg > 0.15, "class %u mean %.3f, background %.3f", k, m, bg);
    }
    free(sum);
    free(count);
    dataset_close(d);
}

START_TEST(segmentation_classes)
{
    check_classes(1, 2, "train"); /* binary: foreground and background */
    check_classes(1, 5, "train");
    check_classes(3, 4, "eval");
}
END_TEST

START_TEST(segmentation_is_fast_at_512)
{
    dataset *d = make_seg(3, 512, 512, 6, 1, "train", true, true);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    float *x;
    int32_t *y;
    read_sample(d, 0, 3, &x, &y);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    ck_assert_msg(s < 2.0, "one 3x512x512 sample took %.2f s", s); /* a few ms unoptimised */
    free(x);
    free(y);
    dataset_close(d);
}
END_TEST

START_TEST(segmentation_refusals)
{
    Appliance__PlanInput in = APPLIANCE__PLAN_INPUT__INIT;
    uint64_t flat[1] = {64}, img[3] = {1, 8, 8};
    in.data_processor = "synthetic_segmentation";
    in.num_classes = 3;
    in.n_sample_shape = 1;
    in.sample_shape = flat;
    dataset *d;
    char err[256];
    ck_assert_int_lt(dataset_open(&d, &in, err, sizeof(err)), 0);
    ck_assert_str_eq(err, "synthetic_segmentation: the model input must be [C, H, W]");
    in.n_sample_shape = 3;
    in.sample_shape = img;
    in.num_classes = 1;
    ck_assert_int_lt(dataset_open(&d, &in, err, sizeof(err)), 0);
    ck_assert_str_eq(err, "synthetic_segmentation: num_classes 1 is not in [2, 4096] (class 0 is "
                          "the background)");
    in.num_classes = 2;
    in.split = "test";
    ck_assert_int_lt(dataset_open(&d, &in, err, sizeof(err)), 0);
    ck_assert_str_eq(err, "split \"test\" is neither \"train\" nor \"eval\"");
    /* Flips need an image. */
    in.split = "train";
    in.data_processor = "synthetic_classification";
    in.n_sample_shape = 1;
    in.sample_shape = flat;
    in.random_flip_vertical = true;
    ck_assert_int_lt(dataset_open(&d, &in, err, sizeof(err)), 0);
    ck_assert_str_eq(err, "random_flip_vertical needs an image input shape [C, H, W]; the model "
                          "input has 1 dimension(s)");
}
END_TEST

START_TEST(flip_in_place)
{
    /* (C=2, H=2, W=3) and its (2, 3) mask. */
    float x[12] = {0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15};
    int32_t m[6] = {0, 1, 2, 3, 4, 5};
    augment_image img = {x, sizeof(float), 2, 2, 3, m, sizeof(int32_t)};
    augment_apply(AUGMENT_FLIP_H, &img);
    const float xh[12] = {2, 1, 0, 5, 4, 3, 12, 11, 10, 15, 14, 13};
    const int32_t mh[6] = {2, 1, 0, 5, 4, 3};
    ck_assert_int_eq(memcmp(x, xh, sizeof(x)), 0);
    ck_assert_int_eq(memcmp(m, mh, sizeof(m)), 0);
    augment_apply(AUGMENT_FLIP_V, &img);
    const float xhv[12] = {5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10};
    const int32_t mhv[6] = {5, 4, 3, 2, 1, 0};
    ck_assert_int_eq(memcmp(x, xhv, sizeof(x)), 0);
    ck_assert_int_eq(memcmp(m, mhv, sizeof(m)), 0);
    /* The same moves on 8-bit pixels and byte labels. */
    uint8_t x8[12] = {0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15}, m8[6] = {0, 1, 2, 3, 4, 5};
    augment_image img8 = {x8, 1, 2, 2, 3, m8, 1};
    augment_apply(AUGMENT_FLIP_H | AUGMENT_FLIP_V, &img8);
    for (int i = 0; i < 12; i++)
        ck_assert_uint_eq(x8[i], (unsigned)xhv[i]);
    for (int i = 0; i < 6; i++)
        ck_assert_uint_eq(m8[i], (unsigned)mhv[i]);
    ck_assert_uint_eq(augment_draw(1, 2, 3, false, false), 0);
}
END_TEST

/* Whether (x, y) is (x0, y0) mirrored as `flags` say. */
static bool is_flip_of(const float *x, const int32_t *y, const float *x0, const int32_t *y0,
                       uint32_t c, uint32_t h, uint32_t w, unsigned flags)
{
    for (uint32_t k = 0; k < c; k++)
        for (uint32_t r = 0; r < h; r++)
            for (uint32_t q = 0; q < w; q++) {
                uint32_t r0 = flags & AUGMENT_FLIP_V ? h - 1 - r : r;
                uint32_t q0 = flags & AUGMENT_FLIP_H ? w - 1 - q : q;
                if (x[((size_t)k * h + r) * w + q] != x0[((size_t)k * h + r0) * w + q0])
                    return false;
                if (k == 0 && y[(size_t)r * w + q] != y0[(size_t)r0 * w + q0])
                    return false;
            }
    return true;
}

/* With flips on, a sample is the plain sample, mirrored or not, image and
 * mask alike; the choice is the same for the same (epoch, index), and every
 * outcome occurs over many indices and over epochs. */
static void check_flips(bool flip_h, bool flip_v)
{
    const uint32_t C = 2, H = 9, W = 14;
    dataset *plain = make_seg(C, H, W, 3, 21, "train", false, false);
    dataset *aug = make_seg(C, H, W, 3, 21, "train", flip_h, flip_v);
    unsigned want = (flip_h ? AUGMENT_FLIP_H : 0) | (flip_v ? AUGMENT_FLIP_V : 0);
    int seen[4] = {0};
    int changed_with_epoch = 0;
    for (uint64_t idx = 0; idx < 64; idx++) {
        float *x0, *x, *xa, *xe;
        int32_t *y0, *y, *ya, *ye;
        read_sample(plain, 0, idx, &x0, &y0);
        read_sample(aug, 5, idx, &x, &y);
        read_sample(aug, 5, idx, &xa, &ya);
        read_sample(aug, 6, idx, &xe, &ye);
        ck_assert_int_eq(memcmp(x, xa, (size_t)C * H * W * sizeof(float)), 0);
        ck_assert_int_eq(memcmp(y, ya, (size_t)H * W * sizeof(int32_t)), 0);
        unsigned flags = augment_draw(21, 5, idx, flip_h, flip_v);
        ck_assert_uint_eq(flags & ~want, 0);
        ck_assert_msg(is_flip_of(x, y, x0, y0, C, H, W, flags), "sample %llu is not the flip "
                      "its draw says", (unsigned long long)idx);
        seen[flags]++;
        changed_with_epoch += flags != augment_draw(21, 6, idx, flip_h, flip_v);
        ck_assert(is_flip_of(xe, ye, x0, y0, C, H, W, augment_draw(21, 6, idx, flip_h, flip_v)));
        free(x0), free(x), free(xa), free(xe);
        free(y0), free(y), free(ya), free(ye);
    }
    for (unsigned f = 0; f < 4; f++)
        if ((f & ~want) == 0)
            ck_assert_msg(seen[f] > 0, "flips %u never drawn", f);
    ck_assert_int_gt(changed_with_epoch, 0);
    dataset_close(plain);
    dataset_close(aug);
}

START_TEST(flips_are_seeded_and_consistent)
{
    check_flips(true, false);
    check_flips(false, true);
    check_flips(true, true);
}
END_TEST

/* A batch on the wire: n * sample_elems floats, then n * label_elems
 * labels, each sample as dataset_sample gives it. */
START_TEST(batch_layout)
{
    const uint32_t C = 1, H = 4, W = 6, n = 3;
    dataset *d = make_seg(C, H, W, 3, 8, "train", true, false);
    size_t se = C * H * W, le = H * W;
    ck_assert_uint_eq(dataset_batch_bytes(d, n), n * (se * sizeof(float) + le * sizeof(int32_t)));
    uint8_t *buf = malloc(dataset_batch_bytes(d, n));
    char err[256];
    const uint64_t step = 4, global = 10, offset = 7;
    ck_assert_msg(dataset_batch(d, step, global, offset, n, buf, err, sizeof(err)) == 0, "%s", err);
    const float *x = (const float *)buf;
    const int32_t *y = (const int32_t *)(buf + n * se * sizeof(float));
    float xs[24];
    int32_t ys[24];
    for (uint32_t i = 0; i < n; i++) {
        ck_assert_int_eq(dataset_sample(d, step, global, offset + i, xs, ys, err, sizeof(err)), 0);
        ck_assert_int_eq(memcmp(x + i * se, xs, sizeof(xs)), 0);
        ck_assert_int_eq(memcmp(y + i * le, ys, sizeof(ys)), 0);
    }
    free(buf);
    dataset_close(d);
}
END_TEST

/* A batch filled in parts, each on its own thread (as the worker's pool
 * fills one), is byte for byte the batch filled in one call: training
 * batches and evaluation ranges, inputs and per-pixel labels alike. */
typedef struct part_fill {
    const dataset *d;
    bool range;
    uint32_t n, lo, hi;
    uint8_t *buf;
    int rc;
} part_fill;

static void *fill_part(void *arg)
{
    part_fill *p = arg;
    char err[256];
    p->rc = p->range ? dataset_range_part(p->d, 5, p->n, p->lo, p->hi, p->buf, err, sizeof(err))
                     : dataset_batch_part(p->d, 3, 16, 2, p->n, p->lo, p->hi, p->buf, err,
                                          sizeof(err));
    return NULL;
}

START_TEST(parts_on_threads_make_the_batch)
{
    const uint32_t n = 7, cuts[] = {0, 1, 4, 4, 7}; /* an empty part among them */
    dataset *d = make_seg(2, 5, 6, 3, 8, "train", true, true);
    size_t bytes = dataset_batch_bytes(d, n);
    uint8_t *whole = malloc(bytes), *parts = malloc(bytes);
    char err[256];
    for (int range = 0; range < 2; range++) {
        if (range)
            ck_assert_int_eq(dataset_range(d, 5, n, whole, err, sizeof(err)), 0);
        else
            ck_assert_int_eq(dataset_batch(d, 3, 16, 2, n, whole, err, sizeof(err)), 0);
        memset(parts, 0xa5, bytes);
        part_fill pf[4];
        pthread_t th[4];
        for (int k = 3; k >= 0; k--) { /* the last part first */
            pf[k] = (part_fill){d, range, n, cuts[k], cuts[k + 1], parts, -1};
            ck_assert_int_eq(pthread_create(&th[k], NULL, fill_part, &pf[k]), 0);
        }
        for (int k = 0; k < 4; k++) {
            pthread_join(th[k], NULL);
            ck_assert_int_eq(pf[k].rc, 0);
        }
        ck_assert_msg(memcmp(whole, parts, bytes) == 0, "%s: parts differ from the whole",
                      range ? "range" : "batch");
    }
    /* a part beyond the batch writes nothing */
    memset(parts, 0xa5, bytes);
    ck_assert_int_eq(dataset_batch_part(d, 3, 16, 2, n, n, n + 4, parts, err, sizeof(err)), 0);
    for (size_t i = 0; i < bytes; i++)
        ck_assert_uint_eq(parts[i], 0xa5);
    free(whole);
    free(parts);
    dataset_close(d);
}
END_TEST

/* Random crops: image and mask move together by up to pad pixels, the
 * uncovered border is zero (background), and the offset is seeded. */
START_TEST(crops_shift_image_and_mask)
{
    enum { C = 2, H = 5, W = 6, PAD = 2 };
    int seen_dx[2 * PAD + 1] = {0}, seen_dy[2 * PAD + 1] = {0};
    for (uint64_t idx = 0; idx < 200; idx++) {
        float x[C * H * W], x2[C * H * W];
        int32_t m[H * W];
        for (int i = 0; i < C * H * W; i++)
            x[i] = (float)(i + 1);
        for (int i = 0; i < H * W; i++)
            m[i] = i + 1;
        memcpy(x2, x, sizeof(x));
        augment_crop(7, 3, idx, PAD, &(augment_image){x, sizeof(float), C, H, W, m, sizeof(int32_t)});
        /* Find the shift from the mask: the pixel that came to (y, x). */
        int dy = 99, dx = 99;
        for (int y = 0; y < H && dy == 99; y++)
            for (int xx = 0; xx < W; xx++)
                if (m[y * W + xx]) {
                    int src = m[y * W + xx] - 1;
                    dy = y - src / W;
                    dx = xx - src % W;
                    break;
                }
        ck_assert_int_le(abs(dy), PAD);
        ck_assert_int_le(abs(dx), PAD);
        seen_dy[dy + PAD]++;
        seen_dx[dx + PAD]++;
        for (int k = 0; k < C; k++)
            for (int y = 0; y < H; y++)
                for (int xx = 0; xx < W; xx++) {
                    int sy = y - dy, sx = xx - dx;
                    bool in = sy >= 0 && sy < H && sx >= 0 && sx < W;
                    float want = in ? x2[k * H * W + sy * W + sx] : 0.0f;
                    ck_assert_float_eq(x[k * H * W + y * W + xx], want);
                    if (k == 0)
                        ck_assert_int_eq(m[y * W + xx], in ? sy * W + sx + 1 : 0);
                }
        /* Seeded: the same sample, epoch and seed crop the same way. */
        int32_t m2[H * W];
        for (int i = 0; i < H * W; i++)
            m2[i] = i + 1;
        augment_crop(7, 3, idx, PAD, &(augment_image){x2, sizeof(float), C, H, W, m2, sizeof(int32_t)});
        ck_assert_int_eq(memcmp(m, m2, sizeof(m)), 0);
    }
    for (int i = 0; i <= 2 * PAD; i++) {
        ck_assert_int_gt(seen_dy[i], 0);
        ck_assert_int_gt(seen_dx[i], 0);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("dataset");
    TCase *t = tcase_create("synthetic");
    tcase_add_test(t, epochs_are_permutations);
    tcase_add_test(t, order_follows_seed_and_epoch);
    tcase_add_test(t, samples_are_pure_functions);
    tcase_add_test(t, unknown_processor_refused);
    suite_add_tcase(s, t);
    TCase *seg = tcase_create("segmentation");
    tcase_set_timeout(seg, 30);
    tcase_add_test(seg, segmentation_is_a_pure_function);
    tcase_add_test(seg, encodings_agree);
    tcase_add_test(seg, segmentation_classes);
    tcase_add_test(seg, segmentation_is_fast_at_512);
    tcase_add_test(seg, segmentation_refusals);
    tcase_add_test(seg, flip_in_place);
    tcase_add_test(seg, flips_are_seeded_and_consistent);
    tcase_add_test(seg, batch_layout);
    tcase_add_test(seg, parts_on_threads_make_the_batch);
    tcase_add_test(seg, crops_shift_image_and_mask);
    suite_add_tcase(s, seg);
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
