/* The optimizer configuration a plan carries, for memoryx and for the
 * wse-nodes of a Pipelined job, which apply the same updates. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "optim.h"
#include "plan.pb-c.h"

/* Fills cfg from the plan's optimizer. Returns 0, or -EINVAL for an
 * unknown type or schedule or a configuration optim_config_check refuses. */
int optim_from_plan(const Appliance__PlanOptimizer *po, optim_config *cfg);

/* One tensor's update at `step` with its reduced gradient g: the optimizer
 * for a parameter (gradient times grad_scale, the learning rate of the
 * schedule), plain assignment for a buffer such as batch-norm running
 * statistics (the replicas' average). */
void optim_update(const optim_config *cfg, optim_state *st, float *w, const float *g, size_t n,
                  bool trainable, float grad_scale, int64_t step);
