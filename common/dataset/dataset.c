/* The dispatch to the data set readers, the order of every epoch and the
 * augmentation, which every reader shares. */
#include "dataset_reader.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment.h"
#include "rng.h"
#include "util.h"

/* Above this many floats a sample cannot travel in one frame anyway; the
 * bound keeps every size computation far from overflow. */
#define DATASET_MAX_SAMPLE_ELEMS (1ull << 28)

static const dataset_reader *const dataset__readers[] = {
    &ds_synthetic_reader,
    &ds_segmentation_reader,
    &ds_mnist_reader,
    &ds_png_reader,
};

/* What every reader needs from the input, checked once here. */
static int dataset__common(dataset *d, const Appliance__PlanInput *in, char *err, size_t errlen)
{
    const char *split = in->split ? in->split : "";
    if (!split[0] || strcmp(split, "train") == 0)
        d->eval = false;
    else if (strcmp(split, "eval") == 0)
        d->eval = true;
    else {
        snprintf(err, errlen, "split \"%s\" is neither \"train\" nor \"eval\"", split);
        return -EINVAL;
    }
    d->seed = in->seed;
    /* The training split keeps the seed as it is; the evaluation split of a
     * synthetic set draws other samples from the same classes. */
    d->sample_seed = d->eval ? rng_hash(in->seed, 0x6576616cu /* "eval" */, 0) : in->seed;
    d->data_dir = strdup(in->data_dir ? in->data_dir : "");
    if (!d->data_dir) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    d->num_classes = in->num_classes ? in->num_classes : 1;
    d->num_samples = in->num_samples ? in->num_samples : 1;
    d->noise = in->noise;
    d->shuffle = in->shuffle;
    d->flip_h = in->random_flip_horizontal;
    d->flip_v = in->random_flip_vertical;
    d->crop_pad = in->random_crop_padding;
    if (in->n_sample_shape < 1 || in->n_sample_shape > 3) {
        snprintf(err, errlen, "the model input has %zu dimensions; a sample has 1 to 3",
                 in->n_sample_shape);
        return -EINVAL;
    }
    d->ndim = in->n_sample_shape;
    uint64_t elems = 1;
    for (size_t i = 0; i < d->ndim; i++) {
        d->shape[i] = in->sample_shape[i];
        if (d->shape[i] == 0 || d->shape[i] > DATASET_MAX_SAMPLE_ELEMS ||
            elems * d->shape[i] > DATASET_MAX_SAMPLE_ELEMS) {
            snprintf(err, errlen, "the model input shape is empty or above %llu values per sample",
                     (unsigned long long)DATASET_MAX_SAMPLE_ELEMS);
            return -EINVAL;
        }
        elems *= d->shape[i];
    }
    if (d->ndim == 3) {
        d->channels = (uint32_t)d->shape[0];
        d->height = (uint32_t)d->shape[1];
        d->width = (uint32_t)d->shape[2];
    } else if (d->flip_h || d->flip_v || d->crop_pad) {
        snprintf(err, errlen, "%s needs an image input shape [C, H, W]; the model input has %zu "
                 "dimension(s)", d->flip_h ? "random_flip_horizontal" : d->flip_v ? "random_flip_vertical" : "random_crop_padding",
                 d->ndim);
        return -EINVAL;
    }
    return 0;
}

int dataset_open(dataset **out, const Appliance__PlanInput *in, char *err, size_t errlen)
{
    *out = NULL;
    if (!in) {
        snprintf(err, errlen, "the plan describes no input");
        return -EINVAL;
    }
    const char *name = in->data_processor ? in->data_processor : "";
    const dataset_reader *r = NULL;
    for (size_t i = 0; i < ARRAY_SIZE(dataset__readers); i++)
        if (strcmp(dataset__readers[i]->name, name) == 0)
            r = dataset__readers[i];
    if (!r) {
        snprintf(err, errlen, "data_processor \"%s\" is not available", name);
        return -EINVAL;
    }
    dataset *d = calloc(1, sizeof(*d));
    if (!d) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    int rc = dataset__common(d, in, err, errlen);
    if (rc < 0)
        goto fail;
    d->reader = r;
    rc = r->open(d, in, err, errlen);
    if (rc < 0)
        goto fail;
    /* The readers keep these; a reader that does not is a bug. */
    if (d->size == 0 || d->sample_elems == 0 || d->label_elems == 0) {
        snprintf(err, errlen, "%s: the data set is empty", name);
        rc = -EINVAL;
        goto fail;
    }
    *out = d;
    return 0;
fail:
    dataset_close(d);
    return rc;
}

void dataset_close(dataset *d)
{
    if (!d)
        return;
    if (d->reader && d->reader->close)
        d->reader->close(d);
    free((char *)d->data_dir);
    free(d);
}

uint64_t dataset_size(const dataset *d) { return d->size; }
uint64_t dataset_sample_elems(const dataset *d) { return d->sample_elems; }
uint32_t dataset_label_elems(const dataset *d) { return d->label_elems; }

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

int dataset_read(const dataset *d, uint64_t epoch, uint64_t idx, float *x, int32_t *labels,
                 char *err, size_t errlen)
{
    if (idx >= d->size) {
        snprintf(err, errlen, "sample %llu is beyond the %llu of the data set",
                 (unsigned long long)idx, (unsigned long long)d->size);
        return -EINVAL;
    }
    int rc = d->reader->read(d, idx, x, labels, err, errlen);
    if (rc < 0)
        return rc;
    unsigned flags = augment_draw(d->seed, epoch, idx, d->flip_h, d->flip_v);
    bool mask = d->ndim == 3 && d->label_elems == (uint64_t)d->height * d->width;
    if (flags)
        augment_apply(flags, x, d->channels, d->height, d->width, mask ? labels : NULL);
    augment_crop(d->seed, epoch, idx, d->crop_pad, x, d->channels, d->height, d->width,
                 mask ? labels : NULL);
    return 0;
}

int dataset_sample(const dataset *d, uint64_t step, uint64_t batch, uint64_t pos, float *x,
                   int32_t *labels, char *err, size_t errlen)
{
    uint64_t epoch = (step * batch + pos) / d->size;
    return dataset_read(d, epoch, dataset_index(d, step, batch, pos), x, labels, err, errlen);
}

size_t dataset_batch_bytes(const dataset *d, uint32_t n)
{
    return (size_t)n * (d->sample_elems * sizeof(float) + d->label_elems * sizeof(int32_t));
}

int dataset_batch(const dataset *d, uint64_t step, uint64_t batch, uint64_t offset, uint32_t n,
                  void *buf, char *err, size_t errlen)
{
    float *x = buf;
    int32_t *y = (int32_t *)(x + (size_t)n * d->sample_elems);
    for (uint32_t i = 0; i < n; i++) {
        int rc = dataset_sample(d, step, batch, offset + i, x + (size_t)i * d->sample_elems,
                                y + (size_t)i * d->label_elems, err, errlen);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int dataset_range(const dataset *d, uint64_t first, uint32_t n, void *buf, char *err, size_t errlen)
{
    float *x = buf;
    int32_t *y = (int32_t *)(x + (size_t)n * d->sample_elems);
    for (uint32_t i = 0; i < n; i++) {
        int rc = dataset_read(d, 0, first + i, x + (size_t)i * d->sample_elems,
                              y + (size_t)i * d->label_elems, err, errlen);
        if (rc < 0)
            return rc;
    }
    return 0;
}
