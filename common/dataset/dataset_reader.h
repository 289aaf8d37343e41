/* Between dataset.c and the readers (ds_*.c): what a reader implements and
 * the state of an open data set. The worker itself uses dataset.h only. */
#pragma once

#include "dataset.h"
#include "sample.h"

/* How pixels become inputs (PlanInput.normalize). The wse-node applies the
 * ones that keep 8-bit inputs; a standard score needs the whole sample, so
 * the worker makes it (dataset.c) and the inputs travel as float32. */
enum ds_normalize {
    DS_NORM_ZERO_ONE,         /* v / 255 (the default) */
    DS_NORM_ZERO_CENTERED,    /* v / 127.5 - 1 */
    DS_NORM_STANDARD_SCORE,   /* (v - mean) / std over the sample */
    DS_NORM_NONE,             /* v */
};

typedef struct dataset_reader {
    const char *name;         /* the data_processor that selects it */
    /* Checks the input against the data and fills size, sample_elems,
     * label_elems and priv; the common fields are already set. Returns 0 or
     * a negative code with a message. */
    int (*open)(dataset *d, const Appliance__PlanInput *in, char *err, size_t errlen);
    /* Frees priv (also after a failed open). */
    void (*close)(dataset *d);
    /* Writes sample idx (< size) before augmentation, in the data set's
     * encodings (ds_put_*). Must be thread-safe. */
    int (*read)(const dataset *d, uint64_t idx, void *x, void *labels, char *err, size_t errlen);
} dataset_reader;

struct dataset {
    const dataset_reader *reader;
    uint64_t seed;            /* the input's seed: order, augmentation, class looks */
    uint64_t sample_seed;     /* synthetic sets: draws of each sample; differs per split */
    bool eval;                /* the evaluation split (MNIST t10k files, ...) */
    const char *data_dir;     /* owned; "" when not given */
    uint32_t num_classes;     /* labels are in [0, num_classes) */
    uint64_t num_samples;     /* synthetic sets: the requested size */
    double noise;             /* synthetic sets: noise level */
    size_t ndim;              /* of the model's input shape, 1..4 */
    uint64_t shape[4];        /* the model's input shape per sample */
    /* The shape as an image (C, H, W) when ndim == 3 (depth 1), as a volume
     * (C, D, H, W) when ndim == 4; all 0 below 3. */
    uint32_t channels, depth, height, width;
    bool shuffle;             /* a new seeded order every epoch */
    bool flip_h, flip_v;      /* random flips, drawn per (seed, epoch, index) */
    uint32_t crop_pad;        /* random crops from the image padded this much; 0: none */
    bool input_unorm8;        /* inputs as 8-bit values, not float32 (sample.h) */
    enum ds_normalize normalize; /* standard_score: readers store v, dataset_read standardizes */
    bool norm_per_channel;    /* set by the reader's open: a standard score per channel, not
                                 over the whole sample (the Model Zoo's SKM-TEA echoes) */
    bool augment;             /* the Model Zoo's augment_data: flips, quarter turns, brightness */
    double train_test_split;  /* fraction of a single-file set that trains; 0: the reader's default */
    int32_t class_id;         /* the class a binary reader picks; -1: none given */
    bool labels_u8;           /* labels as bytes, not int32 */
    /* Set by the reader's open: */
    uint64_t size;            /* samples per epoch, > 0 */
    uint64_t sample_elems;    /* product of shape */
    uint32_t label_elems;     /* 1, height * width per pixel, depth * height * width per voxel */
    void *priv;               /* the reader's own state */
};

/* Stores input value i of a sample, given as 8 bits (v / 255), in the data
 * set's input encoding. A standard score keeps v itself until the sample is
 * whole (dataset_read): the score does not depend on the scale, and v is
 * exact in a float where v / 255 is rounded. */
static inline void ds_put_unorm8(const dataset *d, void *x, size_t i, uint8_t v)
{
    if (d->input_unorm8)
        ((uint8_t *)x)[i] = v;
    else if (d->normalize == DS_NORM_STANDARD_SCORE)
        ((float *)x)[i] = (float)v;
    else
        ((float *)x)[i] = sample_unorm8(v);
}

/* Stores input value i of a sample given as a number v of the data itself
 * (a 16-bit MRI echo, say: not 8 bits) in float32 inputs, as the
 * normalization asks: v / 255, v / 127.5 - 1, v, or v kept for the
 * standard score. The reader refuses 8-bit inputs before. */
static inline void ds_put_value(const dataset *d, void *x, size_t i, float v)
{
    float *f = x;
    switch (d->normalize) {
    case DS_NORM_ZERO_ONE:
        f[i] = v / 255.0f;
        break;
    case DS_NORM_ZERO_CENTERED:
        f[i] = v / 127.5f - 1.0f;
        break;
    default:
        f[i] = v;
        break;
    }
}

/* Stores label i of a sample (below num_classes, so below 256 when labels
 * are bytes), and reads it back. */
static inline void ds_put_label(const dataset *d, void *labels, size_t i, uint32_t v)
{
    if (d->labels_u8)
        ((uint8_t *)labels)[i] = (uint8_t)v;
    else
        ((int32_t *)labels)[i] = (int32_t)v;
}

static inline uint32_t ds_get_label(const dataset *d, const void *labels, size_t i)
{
    return (uint32_t)sample_label(labels, d->labels_u8, i);
}

extern const dataset_reader ds_synthetic_reader;    /* synthetic_classification */
extern const dataset_reader ds_segmentation_reader; /* synthetic_segmentation */
extern const dataset_reader ds_mnist_reader;        /* mnist */
extern const dataset_reader ds_png_reader;          /* png_segmentation */
extern const dataset_reader ds_png_probe_reader;    /* png_segmentation, headers only (no read) */
/* The Model Zoo U-Net's processors; each *_probe_reader lists and checks
 * without decoding (no libtiff, libjpeg or libpng). */
extern const dataset_reader ds_inria_reader;        /* InriaAerialDataProcessor */
extern const dataset_reader ds_inria_probe_reader;
extern const dataset_reader ds_severstal_reader;    /* SeverstalBinaryClassDataProcessor */
extern const dataset_reader ds_severstal_probe_reader;
extern const dataset_reader ds_cityscapes_reader;   /* CityscapesDataProcessor */
extern const dataset_reader ds_cityscapes_probe_reader;
/* Volumes [C, D, H, W]: a seeded synthetic set, and the Model Zoo's SKM-TEA
 * processor (HDF5: ds_skm_probe_reader lists and checks without libhdf5). */
extern const dataset_reader ds_volume_reader;       /* synthetic_volume */
extern const dataset_reader ds_skm_reader;          /* SkmDataProcessor */
extern const dataset_reader ds_skm_probe_reader;

/* The checks and sizes the readers share (ds_input.c). */

/* What every reader of image files checks of its input first: data_dir
 * set, and a model input [C, H, W] with C = 1 (gray) or 3 (RGB); me names
 * the reader in the message. Returns 0 or -EINVAL. */
int ds_image_input_check(const dataset *d, const char *me, char *err, size_t errlen);

/* A set of count images of the model's input size, one label a pixel. */
void ds_image_sizes(dataset *d, uint64_t count);

/* What a reader of images says of a volume input [C, D, H, W]: returns 0
 * when the input is not 4-D, else -EINVAL with a message naming me and
 * the readers that take volumes. */
int ds_refuse_volume(const dataset *d, const char *me, char *err, size_t errlen);

/* What a reader of volumes checks of its input first: a model input [C, D,
 * H, W]. Returns 0 or -EINVAL with a message naming me. */
int ds_volume_input_check(const dataset *d, const char *me, char *err, size_t errlen);

/* A set of count volumes of the model input's size, one label a voxel. */
void ds_volume_sizes(dataset *d, uint64_t count);

/* dataset_open over a table of readers (probe.c): the one named by the
 * input's data_processor, the checks every reader shares, then its open. */
int dataset__open_with(const dataset_reader *const *readers, size_t nreaders, dataset **out,
                       const Appliance__PlanInput *in, char *err, size_t errlen);
