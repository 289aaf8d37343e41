/* What fits a wafer: the largest batch a replica can take at the job's
 * input, and the largest square image it can take at a given batch, in a
 * mode, by the footprint (footprint.h). What `appliance-submit --plan`
 * answers a user's first question with. */
#pragma once

#include <stdint.h>

#include "footprint.h"
#include "toml.h"

/* The largest side a square input can have: the model's limit of a
 * dimension. */
#define FIT_MAX_SIDE 65536

/* Bytes a replica of `batch` samples on `threads` threads needs in mode
 * (footprint_replica_bytes), or UINT64_MAX when out of memory to plan. */
uint64_t fit_replica_bytes(const model *m, int batch, int threads, Appliance__ExecMode mode,
                           unsigned optimizer_states);

/* The largest batch, at most max_batch, whose replica fits in wafer bytes;
 * 0 when not even one sample fits. */
int fit_largest_batch(const model *m, int threads, Appliance__ExecMode mode,
                      unsigned optimizer_states, uint64_t wafer, int max_batch);

/* The largest side S such that the model of model_table compiles on a
 * [C, S, S] input (C the job's channels) and a replica of `batch` samples
 * fits in wafer bytes. Sides are tried in steps of the smallest power of
 * two (at most 256) by which the job's side can grow with the model still
 * compiling, so pooling levels stay whole. Returns S, 0 when none fits, -1 when
 * the model's input is not an image. */
int fit_largest_side(const toml_value *model_table, const model *m, int batch, int threads,
                     Appliance__ExecMode mode, unsigned optimizer_states, uint64_t wafer);
