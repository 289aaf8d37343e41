/* The files of a memoryx shard: the names of its checkpoint files and
 * their safetensors layout, shared by the checkpoints written from memory
 * (checkpoint.c) and the disk tier's files, which are laid out the same
 * way (tier.c). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "safetensors.h"
#include "store.h"

/* Adds the shard's tensors to the writers of its weights file (ww) and
 * optimizer file (ow) with their data (with_data) or without (a layout),
 * and the metadata of step: the job, the step, the optimizer and its
 * update count; widest: the longest values these can take (a header that
 * any later metadata fits in). Returns 0 or a negative errno. */
int shardfile_layout(const mx_job *j, uint64_t step, bool widest, bool with_data,
                     st_writer *ww, st_writer *ow);

/* The paths of the shard's checkpoint files of step (len bytes each). */
void shardfile_paths(const mx_job *j, uint64_t step, char *wpath, char *opath, size_t len);
