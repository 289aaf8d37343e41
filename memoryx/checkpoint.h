/* Checkpoints of a memoryx shard: at step S, shard k of n writes
 *   checkpoint_S-shardk-of-n.safetensors   the weights (and buffers) by name
 *   optimizer_S-shardk-of-n.safetensors    the optimizer state, "<tensor>.<state>"
 * each to a temporary name, fsynced and renamed, the optimizer state first,
 * so a weights file always has its optimizer state beside it. A job resumes
 * by loading its tensors by name from every shard file of a checkpoint, so
 * the shard count may change between runs.
 *
 * A running job's checkpoint is written in the thread pool (ckpt_start):
 * from memory (ckpt_write) or from the disk tier's files (tier_checkpoint);
 * once it is, the coordinator is told (CheckpointWritten) and the job's
 * driver goes on with what it was for (mx_job_ops.checkpoint_written). */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "store.h"

/* Writes the shard's checkpoint of `step` into the plan's model_dir; the
 * weights file's path goes to path. Returns 0 or a negative errno with a
 * message in err. */
int ckpt_write(const mx_job *j, uint64_t step, char *path, size_t pathlen, char *err, size_t errlen);

/* Removes this shard's partial checkpoint files ("<name>.tmp-<pid>") that
 * a memoryx killed during a write left in model_dir, when that process is
 * gone. Returns how many it removed; each is logged. */
int ckpt_clean_partial(const mx_job *j);

/* Loads every tensor of the shard, and its optimizer state, from the plan's
 * resume files (read a tensor at a time, or copied into the disk tier's
 * files). Returns 0 or a negative errno with a message in err. */
int ckpt_load(mx_job *j, char *err, size_t errlen);

/* Writes the checkpoint of `step` in the thread pool (kind: what follows
 * it; j->ckpt_kind says one is being written until it is). A checkpoint
 * that cannot start fails the job. */
void ckpt_start(mx_job *j, uint64_t step, mx_ckpt_kind kind);

/* The checkpoint that follows the training of `step` (step + 1 steps
 * done): the final one after the last step. */
void ckpt_after(mx_job *j, uint64_t step);
