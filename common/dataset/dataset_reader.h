/* Between dataset.c and the readers (ds_*.c): what a reader implements and
 * the state of an open data set. The worker itself uses dataset.h only. */
#pragma once

#include "dataset.h"

typedef struct dataset_reader {
    const char *name;         /* the data_processor that selects it */
    /* Checks the input against the data and fills size, sample_elems,
     * label_elems and priv; the common fields are already set. Returns 0 or
     * a negative code with a message. */
    int (*open)(dataset *d, const Appliance__PlanInput *in, char *err, size_t errlen);
    /* Frees priv (also after a failed open). */
    void (*close)(dataset *d);
    /* Writes sample idx (< size) before augmentation. Must be thread-safe. */
    int (*read)(const dataset *d, uint64_t idx, float *x, int32_t *labels, char *err,
                size_t errlen);
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
    size_t ndim;              /* of the model's input shape, 1..3 */
    uint64_t shape[3];        /* the model's input shape per sample */
    uint32_t channels, height, width; /* shape as an image (C, H, W) when ndim == 3, else 0 */
    bool shuffle;             /* a new seeded order every epoch */
    bool flip_h, flip_v;      /* random flips, drawn per (seed, epoch, index) */
    uint32_t crop_pad;        /* random crops from the image padded this much; 0: none */
    /* Set by the reader's open: */
    uint64_t size;            /* samples per epoch, > 0 */
    uint64_t sample_elems;    /* product of shape */
    uint32_t label_elems;     /* 1, or height * width for per-pixel labels */
    void *priv;               /* the reader's own state */
};

extern const dataset_reader ds_synthetic_reader;    /* synthetic_classification */
extern const dataset_reader ds_segmentation_reader; /* synthetic_segmentation */
extern const dataset_reader ds_mnist_reader;        /* mnist */
extern const dataset_reader ds_png_reader;          /* png_segmentation */
extern const dataset_reader ds_png_probe_reader;    /* png_segmentation, headers only (no read) */

/* dataset_open over a table of readers (probe.c): the one named by the
 * input's data_processor, the checks every reader shares, then its open. */
int dataset__open_with(const dataset_reader *const *readers, size_t nreaders, dataset **out,
                       const Appliance__PlanInput *in, char *err, size_t errlen);
