/* Opening a data set, the checks every reader shares, and dataset_probe:
 * a data set opened to be sized and checked, without the means to decode
 * samples (the planner's view: no libpng). */
#include "dataset_reader.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "util.h"

/* A sample of at most this many values (a 26000^2 RGB image) keeps every
 * size computation far from overflow. */
#define DATASET_MAX_SAMPLE_ELEMS (1ull << 31)

/* The readers as the planner opens them: the PNG reader without its
 * decoding (libpng), since sizing and checking reads headers only. */
static const dataset_reader *const dataset__probe_readers[] = {
    &ds_synthetic_reader,
    &ds_segmentation_reader,
    &ds_mnist_reader,
    &ds_png_probe_reader,
    &ds_inria_probe_reader,
    &ds_severstal_probe_reader,
    &ds_cityscapes_probe_reader,
    &ds_volume_reader,
    &ds_skm_probe_reader,
};

/* PlanInput.normalize by name; "" is the default. Returns -1 for a name
 * that is none of them. */
static int dataset__normalize(const char *name)
{
    static const char *const names[] = {
        [DS_NORM_ZERO_ONE] = "zero_one",
        [DS_NORM_ZERO_CENTERED] = "zero_centered",
        [DS_NORM_STANDARD_SCORE] = "standard_score",
        [DS_NORM_NONE] = "none",
    };
    if (!name || !name[0])
        return DS_NORM_ZERO_ONE;
    for (size_t i = 0; i < ARRAY_SIZE(names); i++)
        if (strcmp(name, names[i]) == 0)
            return (int)i;
    return -1;
}

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
    d->input_unorm8 = in->input_unorm8;
    int norm = dataset__normalize(in->normalize);
    if (norm < 0) {
        snprintf(err, errlen, "normalize \"%s\" is none of zero_one, zero_centered, "
                 "standard_score, none", in->normalize);
        return -EINVAL;
    }
    d->normalize = (enum ds_normalize)norm;
    if (d->normalize == DS_NORM_STANDARD_SCORE && d->input_unorm8) {
        /* the score is a float per value; 8 bits cannot carry it */
        snprintf(err, errlen, "normalize \"standard_score\" sends float32 inputs, but the plan "
                 "asks for 8-bit inputs (input_unorm8)");
        return -EINVAL;
    }
    d->augment = in->augment;
    d->train_test_split = in->train_test_split;
    if (!(d->train_test_split >= 0.0 && d->train_test_split <= 1.0)) {
        snprintf(err, errlen, "train_test_split %g is not between 0 and 1", in->train_test_split);
        return -EINVAL;
    }
    d->class_id = in->class_id;
    d->labels_u8 = in->labels_uint8;
    if (d->labels_u8 && d->num_classes > 256) {
        snprintf(err, errlen, "labels travel as bytes, but num_classes %u is above 256",
                 d->num_classes);
        return -EINVAL;
    }
    if (in->n_sample_shape < 1 || in->n_sample_shape > 4) {
        snprintf(err, errlen, "the model input has %zu dimensions; a sample has 1 to 4",
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
    if (d->ndim >= 3) {
        d->channels = (uint32_t)d->shape[0];
        d->depth = d->ndim == 4 ? (uint32_t)d->shape[1] : 1;
        d->height = (uint32_t)d->shape[d->ndim - 2];
        d->width = (uint32_t)d->shape[d->ndim - 1];
    }
    if (d->ndim != 3 && (d->flip_h || d->flip_v || d->crop_pad || d->augment)) {
        snprintf(err, errlen, "%s needs an image input shape [C, H, W]; the model input has %zu "
                 "dimension(s)", d->flip_h ? "random_flip_horizontal" : d->flip_v ? "random_flip_vertical" : d->crop_pad ? "random_crop_padding" : "augment_data",
                 d->ndim);
        return -EINVAL;
    }
    return 0;
}

int dataset__open_with(const dataset_reader *const *readers, size_t nreaders, dataset **out,
                        const Appliance__PlanInput *in, char *err, size_t errlen)
{
    *out = NULL;
    if (!in) {
        snprintf(err, errlen, "the plan describes no input");
        return -EINVAL;
    }
    const char *name = in->data_processor ? in->data_processor : "";
    const dataset_reader *r = NULL;
    for (size_t i = 0; i < nreaders; i++)
        if (strcmp(readers[i]->name, name) == 0)
            r = readers[i];
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
bool dataset_input_unorm8(const dataset *d) { return d->input_unorm8; }
bool dataset_labels_u8(const dataset *d) { return d->labels_u8; }

size_t dataset_batch_bytes(const dataset *d, uint32_t n)
{
    return (size_t)sample_batch_bytes(n, d->sample_elems, d->label_elems, d->input_unorm8,
                                      d->labels_u8);
}

int dataset_probe(dataset **out, const Appliance__PlanInput *in, char *err, size_t errlen)
{
    return dataset__open_with(dataset__probe_readers, ARRAY_SIZE(dataset__probe_readers), out, in,
                              err, errlen);
}
