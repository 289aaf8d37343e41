/* Data sets the input workers serve. A sample is a pure function of (data
 * set, seed, epoch, index), so any worker can produce any replica's share of
 * any step. This is the interface the worker uses; dataset.c picks the
 * reader a PlanInput names (dataset_reader.h) and applies what every reader
 * shares: the order of each epoch and the augmentation.
 *
 * After dataset_open returns, a data set is only read: everything but
 * dataset_close may run on several threads at once. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "plan.pb-c.h"

typedef struct dataset dataset;

/* Opens the data set `in` describes (data_processor, data_dir, split, the
 * model's sample shape: [C, H, W] for images, [C, D, H, W] for volumes, ...): checks it and reads what must be read once
 * (MNIST files; the listing and PNG headers of an image directory). Returns 0
 * with *out owned by the caller (dataset_close), or a negative errno-style
 * code with a message naming the file and the problem in err. */
int dataset_open(dataset **out, const Appliance__PlanInput *in, char *err, size_t errlen);
/* Opens the data set as dataset_open does, checking and sizing it, but
 * without the means to decode its samples (no image library nor libhdf5:
 * image headers and HDF5 superblocks are read by hand): what a planner
 * needs. dataset_size and the element counts
 * work; dataset_read and what builds on it return -ENOTSUP. */
int dataset_probe(dataset **out, const Appliance__PlanInput *in, char *err, size_t errlen);

/* Releases a data set; NULL is fine. */
void dataset_close(dataset *d);

/* Samples in one epoch. */
uint64_t dataset_size(const dataset *d);
/* Inputs per sample (the model's input size). */
uint64_t dataset_sample_elems(const dataset *d);
/* Labels per sample: 1 for classification, H*W for segmentation, D*H*W for
 * the segmentation of volumes. */
uint32_t dataset_label_elems(const dataset *d);

/* The encodings the samples come in (sample.h), as the input asked:
 * 8-bit inputs rather than float32, byte labels rather than int32. */
bool dataset_input_unorm8(const dataset *d);
bool dataset_labels_u8(const dataset *d);

/* The sample at position pos (0..batch-1) of step `step` with a global batch
 * of `batch`: the data set is read in epochs; with shuffle, each epoch in its
 * own seeded order (a Feistel permutation), without it in file order. */
uint64_t dataset_index(const dataset *d, uint64_t step, uint64_t batch, uint64_t pos);

/* Writes sample `idx` as seen in epoch `epoch` (augmentation is drawn from
 * (seed, epoch, idx)): sample_elems inputs into x, label_elems labels into
 * labels, in the data set's encodings (float32 and int32 unless the input
 * asked for 8 bits). Returns 0, or a negative code with a message in err (a
 * file that went missing or is corrupt, a label out of range). */
int dataset_read(const dataset *d, uint64_t epoch, uint64_t idx, void *x, void *labels,
                 char *err, size_t errlen);

/* dataset_read of the sample at (step, batch, pos), as dataset_index orders
 * them. */
int dataset_sample(const dataset *d, uint64_t step, uint64_t batch, uint64_t pos, void *x,
                   void *labels, char *err, size_t errlen);

/* Bytes of a batch of n samples as it goes on the wire (sample.h). */
size_t dataset_batch_bytes(const dataset *d, uint32_t n);

/* Fills buf (dataset_batch_bytes(d, n) bytes) with positions offset ..
 * offset+n-1 of step `step` (global batch `batch`) in the wire layout of a
 * Batch frame: n * sample_elems float32 inputs, then n * label_elems int32
 * labels, in the data set's encodings (sample.h). Returns 0 or
 * dataset_read's error. */
int dataset_batch(const dataset *d, uint64_t step, uint64_t batch, uint64_t offset, uint32_t n,
                  void *buf, char *err, size_t errlen);

/* Fills buf (dataset_batch_bytes(d, n) bytes) with samples first ..
 * first+n-1 in the order of the data set (no shuffling; augmentation as in
 * epoch 0), in the wire layout of a Batch frame: evaluation batches. */
int dataset_range(const dataset *d, uint64_t first, uint32_t n, void *buf, char *err, size_t errlen);

/* dataset_batch and dataset_range of positions lo .. hi-1 only, each in
 * its place in the layout of all n: threads that fill the parts of one
 * buffer between them make the bytes the whole call makes (the samples
 * are pure functions of their index; the readers keep no state between
 * reads). */
int dataset_batch_part(const dataset *d, uint64_t step, uint64_t batch, uint64_t offset,
                       uint32_t n, uint32_t lo, uint32_t hi, void *buf, char *err, size_t errlen);
int dataset_range_part(const dataset *d, uint64_t first, uint32_t n, uint32_t lo, uint32_t hi,
                       void *buf, char *err, size_t errlen);
