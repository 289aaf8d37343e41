/* The optimizer configuration a plan carries, for memoryx and for the
 * wse-nodes of a Pipelined job, which apply the same updates. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "optim.h"
#include "sparse.h"
#include "plan.pb-c.h"

/* Fills cfg from the plan's optimizer. Returns 0, or -EINVAL for an
 * unknown type or schedule or a configuration optim_config_check refuses. */
int optim_from_plan(const Appliance__PlanOptimizer *po, optim_config *cfg);

/* Puts the schedule seg (n segments) into po's lr_segments: store and ptrs
 * (n each, the caller's, as long as po is used) hold the messages; their
 * scheduler names are static strings. Returns 0, or -EINVAL when n is over
 * OPTIM_MAX_SEGMENTS. */
int optim_segments_to_plan(const optim_segment *seg, size_t n, Appliance__PlanOptimizer *po,
                           Appliance__PlanLrSegment *store, Appliance__PlanLrSegment **ptrs);

/* One tensor's update at `step` with its reduced gradient g: the optimizer
 * for a parameter (gradient times grad_scale, the learning rate of the
 * schedule), plain assignment for a buffer such as batch-norm running
 * statistics (the replicas' average). */
void optim_update(const optim_config *cfg, optim_state *st, float *w, const float *g, size_t n,
                  bool trainable, float grad_scale, int64_t step);

/* One tensor of a step as its keeper holds it. */
typedef struct optim_param {
    float *w;            /* the weights (or a buffer's values) */
    const float *g;      /* the step's reduced gradient (or the buffer's average) */
    size_t n;            /* elements */
    bool trainable;      /* false: a buffer, assigned g */
    optim_state *st;     /* its optimizer state (trainable tensors) */
    uint16_t *w16;       /* or NULL: a bfloat16 copy of w, rounded as each range is updated
                            (a mixed-precision replica's GEMM operand) */
    const uint16_t *g16; /* or NULL: the gradient in bfloat16 instead of g (as the wire
                            brought it), widened a block at a time as each is updated; a
                            trainable tensor's, not with max_gradient_norm */
} optim_param;

/* Fills *out with tensor i (< the count given to optim_apply_step). */
typedef void (*optim_param_fn)(void *ctx, size_t i, optim_param *out);

/* The optimizer step over every tensor of a step at once, when all their
 * reduced gradients are in: with cfg->max_gradient_norm, the gradients are
 * scaled by the clipping factor of their global norm (over the trainable
 * tensors, in index order), then each tensor is updated (optim_update).
 * memoryx and a Pipelined wse-node both run this, so their weights agree
 * bit for bit. */
void optim_apply_step(const optim_config *cfg, size_t count, optim_param_fn get, void *ctx,
                      int64_t step);

/* A parallel loop: fn over ranges covering [0, n), each of at least grain
 * items where it splits (kernels_for). */
typedef void (*optim_range_fn)(void *ctx, size_t lo, size_t hi);
typedef void (*optim_for_fn)(size_t n, size_t grain, optim_range_fn fn, void *ctx);

/* optim_apply_step with each tensor's elements updated in ranges through
 * `par`: every element is updated as on one thread (the rules are
 * elementwise), so the weights are bit for bit those of optim_apply_step.
 * A tensor with a w16 gets it rounded (bf16_pack) a block at a time right
 * after the block's update, while the weights are still in cache; one with
 * a g16 has its gradient widened a block at a time right before (no pass
 * over the tensor widening all of it first). The bits are the same. */
void optim_apply_step_split(const optim_config *cfg, size_t count, optim_param_fn get, void *ctx,
                            int64_t step, optim_for_fn par);

/* Elements [lo, hi) of one tensor's update at `step`, without clipping:
 * what optim_apply_step does to them, bit for bit (the rules are
 * elementwise), for a keeper that updates a tensor in parts as their
 * gradients come. The tensor's step count is left as it is: once every part
 * of the step is updated, optim_update_finish advances it. */
void optim_update_range(const optim_config *cfg, const optim_param *p, size_t lo, size_t hi,
                        int64_t step);

/* After every range of a tensor's step is updated (optim_update_range):
 * its step count advances, once (a trainable tensor's; a buffer has none). */
void optim_update_finish(const optim_param *p);

/* The sparsity of a plan (NULL: dense, SPARSE_NONE). Returns 0, or -EINVAL
 * for an unknown type, init method or value kind, or a bad schedule. */
int sparse_from_plan(const Appliance__PlanSparsity *ps, sparse_config *out);

/* h into v (its kind a static string). */
void sparse_value_to_plan(const sparse_hp *h, Appliance__PlanSparseValue *v);

/* v into h (v NULL: a constant 0). Returns 0, or -EINVAL for an unknown
 * kind or a value that is not finite. */
int sparse_value_from_plan(const Appliance__PlanSparseValue *v, sparse_hp *h);
