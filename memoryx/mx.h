/* memoryx: the weights and optimizer state of its shard of a job's
 * parameter tensors, the weight stream of every step in the order of the
 * static schedule, the optimizer step as each reduced gradient completes,
 * and checkpoints. A Pipelined job's weights are streamed once; its
 * replicas apply the updates, and the first sends its weights and
 * optimizer state up for each checkpoint. */
#pragma once

#include <limits.h>

#include "jobhost.h"
#include "node.h"
#include "optim.h"
#include "store.h"

/* memoryx's own options (its key table: memoryx_role). */
typedef struct memoryx_options {
    uint64_t memory;              /* bytes for weights and optimizer state; 0: unlimited */
    uint32_t threads;             /* threads for optimizer steps */
    uint64_t disk;                /* room for the disk tier in state_dir; UINT64_MAX: what its
                                     file system has free */
    bool no_disk_tier;            /* --no-disk-tier: a shard must fit memory */
    char state_dir[PATH_MAX];     /* scratch directory, or "" */
} memoryx_options;

typedef struct memoryx {
    node *n;
    memoryx_options opt;          /* filled by node_parse_args */
    jobhost jobs;                 /* the job's life cycle (jobhost.h) */
    mx_job *job;                  /* at most one job at a time (jobs.job) */
    metrics_hist chunk_hist;      /* a weight chunk from queued to written */
    uint64_t steps;               /* steps committed */
    uint64_t early_streams;       /* steps whose stream began before the last update of the
                                     step before was back (mx__maybe_turn) */
    uint64_t checkpoints;         /* checkpoint files written */
} memoryx;

/* Fills the role table of memoryx and ties mx (cleared) to n: its option
 * keys point into mx->opt, set to the defaults; its job life cycle is
 * mx->jobs. */
void memoryx_role(node_role *role, memoryx *mx, node *n);
