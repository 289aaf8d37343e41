/* memoryx's job: the weights and optimizer state of its shard of the
 * tensors, and the position of the weight stream. The types the daemon
 * (mx.c) and its checkpoints (checkpoint.c) share. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "conn.h"
#include "optim.h"
#include "plan.pb-c.h"
#include "plan_stream.h"

struct memoryx;

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
    plan_stream cur;              /* where this step's weight stream stands (plan_stream.h);
                                     zero before the first step; cur.seq runs on over steps */
    size_t states;                /* optimizer state tensors per trainable tensor */
    size_t updated;               /* tensors updated this step */
    optim_config cfg;             /* the optimizer of the job */
    bool ready_sent;
} mx_job;
