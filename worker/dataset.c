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
    d->shuffle = in->shuffle;
    d->sample_elems = 1;
    for (size_t i = 0; i < in->n_sample_shape; i++)
        d->sample_elems *= in->sample_shape[i];
    return 0;
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
    uint64_t epoch = g / d->num_samples, i = g % d->num_samples;
    return d->shuffle ? dataset__permute(d->seed ^ 0x5eed, epoch, i, d->num_samples) : i;
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
