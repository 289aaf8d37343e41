/* synthetic_classification: Gaussian clusters around seeded class centres
 * (float32 normals, rng_normal_f32_n).
 * The centres come from the seed; a sample's class and noise from the
 * split's sample seed and its index. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset_reader.h"
#include "rng.h"

/* Centres of at most this many values in all are drawn once, at open, and
 * kept (8 MiB); larger ones are drawn again for every sample. Either way
 * a sample is the same. */
#define CENTRES_KEPT_MAX (UINT64_C(2) << 20)

/* Normals are drawn this many at a time (rng_normal_f32_n vectorizes):
 * float32 ones, a fifth of the time of rng_normal's doubles (a batch of
 * 1024 MNIST-sized samples: 0.9 against 4.6 ms on one core), time the
 * worker takes from the wse-node when they share a host. */
#define CHUNK 512

static int ds_synthetic__open(dataset *d, const Appliance__PlanInput *in, char *err, size_t errlen)
{
    if (d->input_unorm8) {
        snprintf(err, errlen, "synthetic_classification: samples are float32, not 8-bit values");
        return -EINVAL;
    }
    d->size = d->num_samples;
    d->sample_elems = 1;
    for (size_t i = 0; i < d->ndim; i++)
        d->sample_elems *= d->shape[i];
    d->label_elems = 1;
    uint64_t n = d->sample_elems * d->num_classes;
    if (d->sample_elems && n / d->sample_elems == d->num_classes && n <= CENTRES_KEPT_MAX) {
        float *kept = malloc(n * sizeof(float));
        if (kept)
            rng_normal_f32_n(d->seed, 3, 0, n, kept);
        d->priv = kept; /* NULL: drawn per sample */
    }
    return 0;
}

static void ds_synthetic__close(dataset *d)
{
    free(d->priv);
    d->priv = NULL;
}

/* x = c + noise n, each element in double and rounded once, eight at a
 * time (a vector extension: the plain loop was not vectorised at -O2;
 * the bits are the same either way, and no product is fused). */
typedef float ds_f8 __attribute__((vector_size(32)));
typedef double ds_d8 __attribute__((vector_size(64)));

static void ds_synthetic__mix(float *restrict x, const float *restrict c,
                              const float *restrict n, double noise, size_t len)
{
    size_t k = 0;
    for (; k + 8 <= len; k += 8) {
        ds_f8 a, b;
        memcpy(&a, c + k, sizeof(a));
        memcpy(&b, n + k, sizeof(b));
        ds_d8 p = noise * __builtin_convertvector(b, ds_d8);
        ds_f8 r = __builtin_convertvector(__builtin_convertvector(a, ds_d8) + p, ds_f8);
        memcpy(x + k, &r, sizeof(r));
    }
    for (; k < len; k++)
        x[k] = (float)((double)c[k] + noise * (double)n[k]);
}

static int ds_synthetic__read(const dataset *d, uint64_t idx, void *out, void *labels, char *err,
                              size_t errlen)
{
    float *x = out;
    uint32_t y = (uint32_t)(rng_hash(d->sample_seed, 1, idx) % d->num_classes);
    ds_put_label(d, labels, 0, y);
    const float *kept = d->priv;
    float noise[CHUNK], centre[CHUNK];
    for (uint64_t k0 = 0; k0 < d->sample_elems; k0 += CHUNK) {
        size_t len = (size_t)(d->sample_elems - k0 < CHUNK ? d->sample_elems - k0 : CHUNK);
        const float *c = centre;
        if (kept)
            c = kept + (uint64_t)y * d->sample_elems + k0;
        else
            rng_normal_f32_n(d->seed, 3, (uint64_t)y * d->sample_elems + k0, len, centre);
        rng_normal_f32_n(d->sample_seed, 2, idx * d->sample_elems + k0, len, noise);
        ds_synthetic__mix(x + k0, c, noise, d->noise, len);
    }
    return 0;
}

const dataset_reader ds_synthetic_reader = {
    .name = "synthetic_classification",
    .open = ds_synthetic__open,
    .close = ds_synthetic__close,
    .read = ds_synthetic__read,
};
