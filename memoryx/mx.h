/* memoryx: the weights and optimizer state of its shard of a job's
 * parameter tensors, the weight stream of every step in the order of the
 * static schedule, the optimizer step as each reduced gradient completes,
 * and checkpoints. */
#pragma once

#include <limits.h>

#include "node.h"
#include "optim.h"

typedef struct mx_tensor {
    uint32_t id;          /* plan tensor id */
    char name[128];
    uint64_t n;           /* elements */
    float *w;             /* weights, owned */
    float *g;             /* reduced gradient of the current step, owned */
    bool trainable;       /* false: a buffer (running statistics), assigned the reduced value */
    optim_state st;       /* optimizer state (trainable tensors) */
    uint64_t grad_have;   /* gradient elements received this step */
    int writes;           /* weight writes in flight (w must not change) */
    uint64_t sent_at;     /* uv_now when its last chunk was queued */
    struct memoryx *mx;   /* for the chunk latency */
    uv_loop_t *loop;
    bool updated;         /* optimizer applied this step */
} mx_tensor;

typedef struct mx_job {
    char id[40];
    Appliance__Plan *plan;        /* owned (unpacked copy) */
    uint32_t shard;               /* our shard index */
    mx_tensor *t;                 /* our tensors */
    size_t nt;
    mx_tensor **by_id;            /* plan tensor id -> ours or NULL */
    size_t nids;
    conn *down;                   /* the root swarmx */
    uint64_t step;                /* step being run */
    bool running;                 /* JobGo received */
    bool streaming;               /* the weight stream of this step is not finished */
    int phase;                    /* 0: forward list, 1: backward list */
    size_t pos;                   /* index in the current list */
    uint64_t off;                 /* element offset in the current tensor */
    uint32_t sidx;                /* 0: sending weights, i > 0: optimizer state i-1 */
    uint32_t eval_pass;           /* Weight Streaming: the eval batch being streamed, 1-based; 0: training */
    uint64_t seq;                 /* chunks of the job's weight stream so far, every shard's */
    size_t states;                /* optimizer state tensors per trainable tensor */
    size_t updated;               /* tensors updated this step */
    optim_config cfg;             /* the optimizer of the job */
    bool ready_sent;
} mx_job;

/* memoryx's own options (its key table: memoryx_role). */
typedef struct memoryx_options {
    uint64_t memory;              /* bytes for weights and optimizer state; 0: unlimited */
    uint32_t threads;             /* threads for optimizer steps */
    char state_dir[PATH_MAX];     /* scratch directory, or "" */
} memoryx_options;

typedef struct memoryx {
    node *n;
    memoryx_options opt;          /* filled by node_parse_args */
    mx_job *job;                  /* at most one job at a time */
    metrics_hist chunk_hist;      /* a weight chunk from queued to written */
    uint64_t steps;               /* steps committed */
    uint64_t checkpoints;         /* checkpoint files written */
} memoryx;

/* Fills the role table of memoryx, its option keys pointing into opt, which
 * it sets to the defaults. */
void memoryx_role(node_role *role, memoryx_options *opt);
