/* The keys of [optimizer] that are more than one number or name: the
 * learning rate as a number, one Model Zoo schedule or a list of them, the
 * optimizer's name in any case, and the Model Zoo's spellings
 * (weight_decay_rate, loss_scaling_factor). jobspec.c reads the plain keys
 * and calls this for the rest; internal to the model library. */
#pragma once

#include <stddef.h>

#include <stdbool.h>

#include "optim.h"
#include "toml.h"

/* Where the keys read here go: the job spec's fields (jobspec.h), given
 * by the caller, so that this reader needs nothing of the spec but them. */
typedef struct jobspec_optim_dest {
    char *optimizer_type;         /* type_size bytes */
    size_t type_size;
    double *learning_rate;
    size_t *n_lr_segments;
    optim_segment *lr_segments;   /* OPTIM_MAX_SEGMENTS of them */
    double *weight_decay;
    const bool *correct_bias;     /* read: correct_bias is a plain key */
    double *loss_scaling_factor;
} jobspec_optim_dest;

/* Reads the own keys of the [optimizer] table t into j (its plain keys are
 * read already) and checks how they go together. Returns 0, or -EINVAL
 * with "FILE:LINE:COL: message" in err. */
int jobspec_optimizer(const toml_value *t, const jobspec_optim_dest *j, char *err, size_t errlen);
