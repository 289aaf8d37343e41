/* memoryx's optimizer update of a step. A tensor's reduced gradient lands
 * in its buffer (update_grad_dest, update_grad_land) and counts in
 * (update_grad_in); each part of a tensor (mx_part) whose gradient is
 * complete is updated in the thread pool, at most --threads at a time,
 * while the rest still comes; with clipping, or a tensor in the disk tier,
 * the step (the tensor) is one piece of work. Each update's return is
 * reported to the job's driver (mx_job_ops.update_back). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "store.h"

/* The least elements of a part (256 KiB of float32 weights: a part's
 * update costs far more than its piece of work in the pool). */
#define UPDATE_PART_MIN 65536

/* Whether the job updates each tensor as one piece of work: with the disk
 * tier (through its window) or clipping (the step's update is one piece,
 * after every gradient). Then no step streams early either. */
bool update_whole(const mx_job *j);

/* Each tensor's update in parts of whole stream chunks, at least
 * UPDATE_PART_MIN elements; one part a tensor where update_whole. Returns
 * 0 or -ENOMEM (what was made is the job's, freed with it). */
int update_parts(mx_job *j);

/* Whether any part of t over [offset, offset + count) is being updated
 * (its weights must not be read). */
bool update_busy(const mx_tensor *t, uint64_t offset, uint64_t count);

/* A step's gradients start coming: none is in. */
void update_start(mx_job *j);

/* Where a reduced gradient chunk's payload goes in t's gradient: its place
 * (in g16 as it comes), or with bfloat16 on the wire the upper half of its
 * place (widened there by update_grad_land). */
void *update_grad_dest(const mx_job *j, mx_tensor *t, uint64_t offset, uint64_t count);

/* count gradient elements as the wire carries them (payload) into t's
 * gradient at offset (nothing to copy when they landed in place); packed
 * (sstream.h, a payload apart from t's gradient, checked): expanded, zeros
 * where it keeps nothing. A compact tensor's (never in place) takes the
 * kept elements alone, and its index must keep exactly those (a dense
 * payload: its elements there). Returns 0, or -EINVAL with the reason in
 * err (an index that differs from the mask). */
int update_grad_land(const mx_job *j, mx_tensor *t, uint64_t offset, uint64_t count,
                     const void *payload, uint32_t packing, uint64_t kept, char *err,
                     size_t errlen);

/* Elements [offset, offset + count) of t's reduced gradient are in its
 * buffer: the parts they complete are due, and with the last the tensor
 * (with clipping, with the last tensor the step). Returns true when this
 * completed t's gradient and its update goes in parts: the next step's
 * stream may start early (the driver's to decide); false otherwise, or
 * when the job failed (a gradient received twice). */
bool update_grad_in(mx_job *j, mx_tensor *t, uint64_t offset, uint64_t count);

/* The last weight chunk of a tensor being written is: the updates waiting
 * for it go on. (A ring send copies its payload at once, but its header is
 * written later, and a stream's reads come before its writes in a turn of
 * the loop: a gradient of those weights can come back first.) */
void update_writes_done(mx_job *j);

/* Tells the coordinator that `step` is committed in this shard. */
void update_commit(mx_job *j, uint64_t step);
