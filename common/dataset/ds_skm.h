/* Internal to the SkmDataProcessor reader: what its libhdf5-free part
 * (ds_skm.c: the split's annotations, the file list, each file's HDF5
 * superblock read by hand) and its decoding part (ds_skm_read.c, libhdf5)
 * share. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "dataset_reader.h"

/* The Model Zoo's echo_type: which echoes make the input channels. */
enum ds_skm_echo {
    DS_SKM_ECHO1,             /* "echo1": one channel */
    DS_SKM_ECHO2,             /* "echo2": one channel */
    DS_SKM_ECHO1_ECHO2_MC,    /* "echo1-echo2-mc": two channels, echo1 then echo2 */
    DS_SKM_RSS,               /* "root_sum_of_squares": sqrt(echo1^2 + echo2^2) in float32 */
};

/* seg's one-hot classes: patellar cartilage, femoral cartilage, medial and
 * lateral tibial cartilage, medial and lateral meniscus. */
#define DS_SKM_SEG_CLASSES 6

typedef struct ds_skm {
    char **files;             /* data_dir/image_files/NAME of the split's images, sorted; owned */
    size_t count;
    enum ds_skm_echo echo;    /* the input channels */
    bool aggregate;           /* aggregate_cartilage: 5 classes rather than 7 */
} ds_skm;

/* The echo_type's name as the Model Zoo spells it. */
const char *ds_skm__echo_name(enum ds_skm_echo e);

/* Checks the input (a volume [C, D, H, W], C as echo_type gives it,
 * float32 inputs, num_classes as aggregate_cartilage gives it), reads the
 * split's annotations, lists its files and checks that each is an HDF5
 * file and whole (h5hdr.c); sizes the set. No libhdf5: what dataset_probe
 * opens. Returns 0 or a negative code with a message. */
int ds_skm__open(dataset *d, const Appliance__PlanInput *in, char *err, size_t errlen);
void ds_skm__close(dataset *d);
