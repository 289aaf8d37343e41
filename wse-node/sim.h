/* wse-node: simulated compute (--simulate-compute). The replica does
 * everything but the kernels: weights stream into their slots, batches
 * arrive, gradients of the real sizes (zeros) go up, losses are reported;
 * each layer's pass spends the time a model of it says (sleeping on the
 * compute thread), and no activation is allocated. So many replicas run on
 * a small host and the fabric alone is measured. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"

/* Where a layer's time comes from. */
typedef enum sim_mode {
    SIM_OFF,        /* the kernels compute */
    SIM_CS2,        /* forward FLOPs over a nominal rate, backward twice that */
    SIM_PER_SAMPLE, /* a step's seconds per sample, split over the layers by FLOPs */
    SIM_MEASURED,   /* a table of each layer's seconds per sample, measured on real kernels */
} sim_mode;

#define SIM_CS2_FLOPS 1e15 /* the nominal rate of `cs2`: an assumption, not a published figure */

/* One line of a measured table. */
typedef struct sim_entry {
    char name[MODEL_NAME_MAX]; /* the layer */
    double fwd, bwd;           /* seconds per sample of its forward and backward pass */
} sim_entry;

/* The option parsed once, at start-up. */
typedef struct sim_config {
    sim_mode mode;
    double rate;        /* SIM_CS2: FLOP/s */
    double per_sample;  /* SIM_PER_SAMPLE: seconds of a training step per sample */
    sim_entry *table;   /* SIM_MEASURED: the table (owned) */
    size_t n;           /* its lines */
    char source[256];   /* SIM_MEASURED: the file, for messages */
} sim_config;

/* Parses --simulate-compute's value: "off", "cs2", "cs2:TFLOPS", a number
 * of seconds per sample, or "measured:FILE" (lines "LAYER FWD_SEC BWD_SEC",
 * seconds per sample; '#' starts a comment). Reads the file now. Returns 0,
 * or -EINVAL (-errno for the file) with a message naming the problem. */
int sim_config_parse(sim_config *c, const char *arg, char *err, size_t errlen);
void sim_config_deinit(sim_config *c);
/* The mode in words (log lines): into out, returned. */
const char *sim_config_describe(const sim_config *c, char *out, size_t len);

/* A job's times: per layer, seconds per sample of each pass. */
typedef struct sim_times {
    int nlayers;
    double *fwd, *bwd;  /* owned (one allocation) */
    double loss;        /* the loss reported per sample: ln(classes), a uniform prediction's */
} sim_times;

/* The times of model m under c. A measured table must name every layer
 * that computes (views take none), and no layer m lacks. Returns 0,
 * -ENOMEM or -EINVAL with a message. */
int sim_times_init(sim_times *t, const sim_config *c, const model *m, char *err, size_t errlen);
void sim_times_deinit(sim_times *t);
/* Seconds of layer's pass over `samples` samples. */
double sim_layer_sec(const sim_times *t, int layer, bool backward, uint32_t samples);

