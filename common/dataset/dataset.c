/* The dispatch to the data set readers, the order of every epoch, the
 * augmentation and the standard score, which every reader shares. */
#include "dataset_reader.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment.h"
#include "rng.h"
#include "util.h"

static const dataset_reader *const dataset__readers[] = {
    &ds_synthetic_reader,
    &ds_segmentation_reader,
    &ds_mnist_reader,
    &ds_png_reader,
    &ds_inria_reader,
    &ds_severstal_reader,
    &ds_cityscapes_reader,
    &ds_volume_reader,
    &ds_skm_reader,
};

/* The Model Zoo's brightness step: +0.2 on the normalized inputs. */
#define DATASET_BRIGHTEN 0.2f

int dataset_open(dataset **out, const Appliance__PlanInput *in, char *err, size_t errlen)
{
    return dataset__open_with(dataset__readers, ARRAY_SIZE(dataset__readers), out, in, err, errlen);
}

/* A seeded bijection of [0, n): a four-round Feistel network on the
 * smallest even number of bits that covers n, walking the cycle until the
 * value falls inside [0, n). */
static uint64_t dataset__permute(uint64_t seed, uint64_t epoch, uint64_t x, uint64_t n)
{
    unsigned bits = 2;
    while (bits < 64 && (1ull << bits) < n)
        bits += 2;
    unsigned half = bits / 2;
    uint64_t mask = (1ull << half) - 1;
    do {
        uint64_t l = x >> half, r = x & mask;
        for (uint64_t round = 0; round < 4; round++) {
            uint64_t f = rng_hash(seed, (epoch << 2) | round, r) & mask;
            uint64_t t = l ^ f;
            l = r;
            r = t;
        }
        x = (l << half) | r;
    } while (x >= n);
    return x;
}

uint64_t dataset_index(const dataset *d, uint64_t step, uint64_t batch, uint64_t pos)
{
    uint64_t g = step * batch + pos;
    uint64_t epoch = g / d->size, i = g % d->size;
    return d->shuffle ? dataset__permute(d->seed ^ 0x5eed, epoch, i, d->size) : i;
}

/* normalize = "standard_score": x = (v - mean) / std over the whole sample
 * (every channel and pixel), or over each channel when the reader says so
 * (norm_per_channel), std the unbiased one (n - 1, as torch.std).
 * The sums are taken in double, so the scores are the exact ones rounded to
 * float (PyTorch sums in float32 and may differ in the last bits). A sample
 * of one value, or of one value repeated, has std 0: it becomes zeros
 * rather than NaN. */
static void dataset__standardize(float *x, uint64_t n)
{
    double sum = 0;
    for (uint64_t i = 0; i < n; i++)
        sum += x[i];
    double mean = sum / (double)n, ss = 0;
    for (uint64_t i = 0; i < n; i++)
        ss += ((double)x[i] - mean) * ((double)x[i] - mean);
    double sd = n > 1 ? sqrt(ss / (double)(n - 1)) : 0.0;
    for (uint64_t i = 0; i < n; i++)
        x[i] = sd > 0 ? (float)(((double)x[i] - mean) / sd) : 0.0f;
}

int dataset_read(const dataset *d, uint64_t epoch, uint64_t idx, void *x, void *labels,
                 char *err, size_t errlen)
{
    if (!d->reader->read) {
        snprintf(err, errlen, "%s: opened to be sized only (dataset_probe): no samples",
                 d->reader->name);
        return -ENOTSUP;
    }
    if (idx >= d->size) {
        snprintf(err, errlen, "sample %llu is beyond the %llu of the data set",
                 (unsigned long long)idx, (unsigned long long)d->size);
        return -EINVAL;
    }
    int rc = d->reader->read(d, idx, x, labels, err, errlen);
    if (rc < 0)
        return rc;
    bool standard = d->normalize == DS_NORM_STANDARD_SCORE && !d->input_unorm8;
    if (standard && d->norm_per_channel) {
        uint64_t per = d->sample_elems / d->channels;
        for (uint32_t c = 0; c < d->channels; c++)
            dataset__standardize((float *)x + c * per, per);
    } else if (standard)
        dataset__standardize(x, d->sample_elems);
    bool mask = d->ndim == 3 && d->label_elems == (uint64_t)d->height * d->width;
    augment_image img = {x, sample_input_size(d->input_unorm8), d->channels, d->height, d->width,
                         mask ? labels : NULL, sample_label_size(d->labels_u8)};
    if (d->augment) {
        /* The Model Zoo normalizes, flips, turns, then brightens. Its +0.2
         * on inputs already normalized needs values past 255 in 8 bits, so
         * only float32 inputs (the standard score) get it. */
        unsigned mz = augment_draw_mz(d->seed, epoch, idx, d->height == d->width);
        augment_apply(mz, &img);
        if ((mz & AUGMENT_BRIGHTEN) && standard)
            for (uint64_t i = 0; i < d->sample_elems; i++)
                ((float *)x)[i] += DATASET_BRIGHTEN;
    }
    unsigned flags = augment_draw(d->seed, epoch, idx, d->flip_h, d->flip_v);
    if (flags)
        augment_apply(flags, &img);
    augment_crop(d->seed, epoch, idx, d->crop_pad, &img);
    return 0;
}

int dataset_sample(const dataset *d, uint64_t step, uint64_t batch, uint64_t pos, void *x,
                   void *labels, char *err, size_t errlen)
{
    uint64_t epoch = (step * batch + pos) / d->size;
    return dataset_read(d, epoch, dataset_index(d, step, batch, pos), x, labels, err, errlen);
}

/* Where sample i of a batch of n goes in its wire layout. */
static void dataset__slot(const dataset *d, void *buf, uint32_t n, uint32_t i, void **x, void **y)
{
    size_t xs = sample_input_size(d->input_unorm8), ys = sample_label_size(d->labels_u8);
    uint8_t *b = buf;
    *x = b + (size_t)i * d->sample_elems * xs;
    *y = b + (size_t)n * d->sample_elems * xs + (size_t)i * d->label_elems * ys;
}

int dataset_batch(const dataset *d, uint64_t step, uint64_t batch, uint64_t offset, uint32_t n,
                  void *buf, char *err, size_t errlen)
{
    return dataset_batch_part(d, step, batch, offset, n, 0, n, buf, err, errlen);
}

int dataset_batch_part(const dataset *d, uint64_t step, uint64_t batch, uint64_t offset,
                       uint32_t n, uint32_t lo, uint32_t hi, void *buf, char *err, size_t errlen)
{
    for (uint32_t i = lo; i < hi && i < n; i++) {
        void *x, *y;
        dataset__slot(d, buf, n, i, &x, &y);
        int rc = dataset_sample(d, step, batch, offset + i, x, y, err, errlen);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int dataset_range(const dataset *d, uint64_t first, uint32_t n, void *buf, char *err, size_t errlen)
{
    return dataset_range_part(d, first, n, 0, n, buf, err, errlen);
}

int dataset_range_part(const dataset *d, uint64_t first, uint32_t n, uint32_t lo, uint32_t hi,
                       void *buf, char *err, size_t errlen)
{
    for (uint32_t i = lo; i < hi && i < n; i++) {
        void *x, *y;
        dataset__slot(d, buf, n, i, &x, &y);
        int rc = dataset_read(d, 0, first + i, x, y, err, errlen);
        if (rc < 0)
            return rc;
    }
    return 0;
}
