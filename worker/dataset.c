/* synthetic_classification: Gaussian clusters around seeded class centres. */
#include "dataset.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "rng.h"

int dataset_open(dataset *d, const Appliance__PlanInput *in, char *err, size_t errlen)
{
    memset(d, 0, sizeof(*d));
    if (!in || strcmp(in->data_processor, "synthetic_classification") != 0) {
        snprintf(err, errlen, "data_processor \"%s\" is not available",
                 in ? in->data_processor : "");
        return -EINVAL;
    }
    d->seed = in->seed;
    d->num_samples = in->num_samples ? in->num_samples : 1;
    d->num_classes = in->num_classes ? in->num_classes : 1;
    d->noise = in->noise;
    d->sample_elems = 1;
    for (size_t i = 0; i < in->n_sample_shape; i++)
        d->sample_elems *= in->sample_shape[i];
    return 0;
}

uint64_t dataset_index(const dataset *d, uint64_t step, uint64_t batch, uint64_t pos)
{
    return (step * batch + pos) % d->num_samples;
}

void dataset_sample(const dataset *d, uint64_t idx, float *x, int32_t *label)
{
    uint32_t y = (uint32_t)(rng_hash(d->seed, 1, idx) % d->num_classes);
    *label = (int32_t)y;
    for (uint64_t k = 0; k < d->sample_elems; k++) {
        double centre = rng_normal(d->seed, 3, (uint64_t)y * d->sample_elems + k);
        x[k] = (float)(centre + d->noise * rng_normal(d->seed, 2, idx * d->sample_elems + k));
    }
}
