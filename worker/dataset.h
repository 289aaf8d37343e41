/* Data sets the input workers serve. A sample is a pure function of the
 * data set's seed and the sample index, so any worker can produce any
 * replica's share of any step. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "plan.pb-c.h"

typedef struct dataset {
    uint64_t seed;
    uint64_t num_samples;
    uint32_t num_classes;
    uint64_t sample_elems;   /* floats per sample (the model's input size) */
    double noise;
    bool shuffle;            /* a new order every epoch, from the seed */
} dataset;

/* Sets up the training set of a job. Returns 0 or -EINVAL with a message. */
int dataset_open(dataset *d, const Appliance__PlanInput *in, char *err, size_t errlen);

/* The sample at position pos (0..B-1) of step `step`: the data set is read
 * in epochs; with shuffle, each epoch in its own seeded order. */
uint64_t dataset_index(const dataset *d, uint64_t step, uint64_t batch, uint64_t pos);

/* Writes sample idx: sample_elems floats into x, its class into *label. */
void dataset_sample(const dataset *d, uint64_t idx, float *x, int32_t *label);
