/* What every daemon reads the same way off a job's Plan. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "plan.pb-c.h"

/* Whether the job evaluates the weights at the start of `step` (before
 * training it): every eval_frequency steps, and at max_steps (after the
 * last step), when the job has an [eval_input]. */
bool plan_eval_at(const Appliance__Plan *p, uint64_t step);

/* Whether a checkpoint follows the training of `step` (step + 1 steps
 * done): every checkpoint_steps steps, and after the last. */
bool plan_checkpoint_after(const Appliance__Plan *p, uint64_t step);

/* A copy of a plan the caller owns (appliance__plan__free_unpacked), or
 * NULL when out of memory: handlers keep the plan of a JobStart, whose
 * envelope is freed when they return. */
Appliance__Plan *plan_copy(const Appliance__Plan *p);
