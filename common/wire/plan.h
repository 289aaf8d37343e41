/* What every daemon reads the same way off a job's Plan. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "plan.pb-c.h"

/* What the stream's daemons hold beside the plan's tensors, at most: the
 * daemons keep to these bounds and the planner counts them against the
 * memory of the host they run on (coordinator/hosts.c). */
#define PLAN_FEED_CREDITS 2                /* batches each worker may have in flight to a wse-node
                                            * (Plan.feed_credits 0; 1 where the plan says) */
#define PLAN_SWARM_CHILD_QUEUE 32          /* gradient chunks a swarmx node buffers per child */
#define PLAN_SWARM_MERGE_QUEUE 32          /* weight chunks it holds per upstream before pausing it */
#define PLAN_SWARM_DOWN_MAX (64u << 20)    /* weight bytes it buffers for slow children */

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
