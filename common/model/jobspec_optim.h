/* The keys of [optimizer] that are more than one number or name: the
 * learning rate as a number, one Model Zoo schedule or a list of them, the
 * optimizer's name in any case, and the Model Zoo's spellings
 * (weight_decay_rate, loss_scaling_factor). jobspec.c reads the plain keys
 * and calls this for the rest; internal to the model library. */
#pragma once

#include <stddef.h>

#include "jobspec.h"
#include "toml.h"

/* Reads the own keys of the [optimizer] table t into j (its plain keys are
 * read already) and checks how they go together. Returns 0, or -EINVAL
 * with "FILE:LINE:COL: message" in err. */
int jobspec_optimizer(const toml_value *t, jobspec *j, char *err, size_t errlen);
