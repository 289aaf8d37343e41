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

/* The life of memoryx's job.
 *
 *   MX_LOADING --tensors initialised or loaded in the thread pool (mx__load_done)--> MX_STARTED
 *   MX_STARTED --root swarmx's hello: JobReady (mx__maybe_ready)--> MX_READY
 *   MX_READY --the coordinator's JobGo (mx__job_go)--> MX_RUNNING
 *   MX_RUNNING --the last step committed, JobFinished (mx__step_done)--> MX_FINISHED
 *   any state --an end (jobhost.h: JobEnd/JobAbort, failure, fault,
 *                coordinator lost, shutdown; mx__release)--> freed
 *
 * LOADING: the shard's weights are made from the seed, or read from the
 * checkpoint the job resumes from, off the event loop (heartbeats go on);
 * a job released meanwhile is freed when the load comes back.
 * RUNNING: each step streams its weights (cur, the stream cursor, says how
 * far: mx__pump) while reduced gradients come back and the optimizer runs
 * (mx__grad_chunk); a step is done when every tensor is updated and the
 * stream is over (mx__step_done), and the next starts (mx__start_step).
 * FINISHED: the final evaluation's weights may still stream; no step runs. */
typedef enum mx_state {
    MX_LOADING,
    MX_STARTED,
    MX_READY,
    MX_RUNNING,
    MX_FINISHED,
} mx_state;

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
    mx_state state;               /* see mx_state */
    plan_stream cur;              /* where this step's weight stream stands (plan_stream.h);
                                     zero before the first step; cur.seq runs on over steps */
    size_t states;                /* optimizer state tensors per trainable tensor */
    size_t updated;               /* tensors updated this step */
    optim_config cfg;             /* the optimizer of the job */
    struct memoryx *mx;           /* its memoryx */
    uv_work_t load_req;           /* LOADING: the tensors made in the thread pool */
    int load_rc;                  /* its result, with load_err */
    char load_err[512];
    uint64_t load_bytes;          /* weights, gradients and optimizer state held */
    bool released;                /* released while loading: freed when the load comes back */
} mx_job;
