/* A job's plan against the model a daemon compiled from the same job file. */
#pragma once

#include <stddef.h>

#include "model.h"
#include "plan.pb-c.h"

/* A plan checked by msgcheck_plan against the model a daemon compiled from
 * its job_toml: the same tensors, each of the same size. Returns 0 or
 * -EINVAL with a one-line message in err. */
int model_plan_check(const Appliance__Plan *p, const model *m, char *err, size_t errlen);
