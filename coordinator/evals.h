/* Evaluation totals: each replica reports its sums over the eval batches it
 * ran; an evaluation's result is ready once every replica reported it. The
 * totals are kept per step, since one replica's report of a later
 * evaluation may arrive before another's of an earlier one. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EVALS_PENDING 4   /* evaluations whose reports may be in flight at once */
#define EVALS_CLASSES 256 /* classes counted for IoU */

/* One replica's report. */
typedef struct evals_report {
    uint64_t step;
    uint64_t samples, correct;
    double loss_sum;
    size_t nclasses;              /* entries of inter and uni; 0: classification */
    const uint64_t *inter, *uni;  /* per class: pixels in both, in either */
} evals_report;

/* A finished evaluation. */
typedef struct evals_result {
    uint64_t step;
    uint64_t samples;
    double loss;       /* mean over the samples */
    double accuracy;   /* classification; -1 for segmentation */
    double iou;        /* segmentation: mean IoU over the counted classes; -1 otherwise */
    double dice;       /* segmentation: mean Dice (the Model Zoo's DSC: 2 |A and B| /
                        * (|A| + |B|) = 2 I / (I + U)) over the same classes; -1 otherwise */
    uint64_t dropped_step; /* nonzero: an older evaluation, still incomplete, was dropped */
    uint32_t dropped_reports;
} evals_result;

typedef struct evals_slot {
    uint64_t step;
    uint32_t reports; /* 0: free */
    uint64_t samples, correct;
    double loss_sum;
    uint32_t classes;
    uint64_t inter[EVALS_CLASSES], uni[EVALS_CLASSES];
} evals_slot;

typedef struct evals {
    evals_slot slot[EVALS_PENDING];
} evals;

void evals_reset(evals *e);

/* Adds one replica's report; `need` reports make an evaluation. Returns 1
 * and fills *out when this report completed its evaluation, else 0 (out's
 * dropped_* still say whether an older evaluation had to give up its slot).
 * With `count_background` class 0 counts in the mean IoU (the Model Zoo's
 * eval_ignore_classes: the wse-nodes count nothing for ignored classes);
 * otherwise the mean is over the foreground classes 1.. that occur. */
int evals_add(evals *e, const evals_report *r, uint32_t need, bool count_background, evals_result *out);
