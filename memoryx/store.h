/* memoryx's job: the weights and optimizer state of its shard of the
 * tensors, and the position of the weight stream; memoryx itself. The
 * types the daemon (mx.c) and its modules share. */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "conn.h"
#include "jobhost.h"
#include "node.h"
#include "optim.h"
#include "plan.pb-c.h"
#include "plan_stream.h"
#include "sparse.h"

struct memoryx;

/* A range of a tensor whose update is one piece of work, started as soon
 * as the range's gradient is in (update_grad_in): a tensor of many stream
 * chunks updates in parts (UPDATE_PART_MIN), so its first parts are updated
 * while the rest of its gradient still comes, and the next step's stream
 * sends them while the last ones update. */
typedef struct mx_part {
    uv_work_t req;        /* its update */
    struct mx_tensor *t;
    uint64_t lo, hi;      /* elements [lo, hi) of t */
    uint64_t have;        /* its gradient elements in, of the step being received */
    uint64_t step;        /* the step its update applies */
    bool busy;            /* its update is due or runs: w[lo, hi) must not be read */
} mx_part;

typedef struct mx_tensor {
    uint32_t id;          /* plan tensor id */
    char name[128];
    uint64_t n;           /* elements */
    float *w;             /* weights, owned */
    uint16_t *w16;        /* bfloat16 on the wire, in memory and room for it: w rounded as
                             each block is updated, what the stream sends; owned, or NULL */
    float *g;             /* reduced gradient of the current step, owned; or NULL: */
    uint16_t *g16;        /* in bfloat16 as the wire brings it, widened a block at a time
                             by the update (optim_param), owned: a trainable tensor's
                             where the job has grad16 */
    bool trainable;       /* false: a buffer (running statistics), assigned the reduced value */
    optim_state st;       /* optimizer state (trainable tensors) */
    uint64_t grad_have;   /* gradient elements received this step */
    int writes;           /* weight writes in flight (w must not change) */
    uint64_t sent_at;     /* uv_now when its last chunk was queued */
    struct memoryx *mx;   /* for the chunk latency */
    uv_loop_t *loop;
    bool updated;         /* its gradient of this step is complete (its update is due) */
    mx_part *parts;       /* its update's parts, in order, owned (one with clipping, whose
                             step's update marks it busy too) */
    uint32_t nparts;
    uint32_t parts_left;  /* parts of the step being updated not yet back */
    uint64_t part_elems;  /* elements of each part but the last */
    struct mx_job *job;   /* its job, for the update */
    uint64_t up_off[1 + OPTIM_MAX_STATE]; /* Pipelined: the next element of the weights (0)
                                             and of each state (1..) the upload brings */
    uint8_t *mask;        /* [sparsity]: 1 kept, 0 pruned (w and its state exact zeros there),
                             owned; NULL: dense */
    bool compact;         /* [sparsity] with a static mask streamed packed: w, w16, g, g16 and
                             the optimizer state hold the kept elements alone, nk of them, in
                             order, once the shard is loaded (mxsparse_compact); bits says
                             which, mask is NULL */
    uint64_t nk;          /* compact: the kept elements (the level's sparse_keep_count) */
    uint8_t *bits;        /* compact: the mask, bit i%8 of byte i/8 (1 kept), owned */
    uint64_t *rank;       /* compact: the kept elements before each FOOTPRINT_RANK_BLOCK
                             elements, owned */
    float level;          /* the plan's level for it (PlanTensor.sparsity) */
    sparse_hp level_hp;   /* gmp: its level over steps (PlanTensor.sparsity_level, else the
                             section's PlanSparsity.level) */
    bool mask_loaded;     /* the mask came from the checkpoint resumed from */
    uint64_t w_at, g_at;  /* disk tier: byte offsets of the weights and gradient in their files */
    uint64_t s_at[OPTIM_MAX_STATE]; /* and of the optimizer state */
} mx_tensor;

/* Elements of t's weights, gradient and state in memory: the kept ones of
 * a compact tensor, else all. */
static inline uint64_t mx_len(const mx_tensor *t)
{
    return t->compact ? t->nk : t->n;
}

/* A reduced gradient chunk of a later step that came while this step's
 * updates still ran, held until its step; or (Pipelined) a chunk of the
 * first replica's upload that came while the last one's checkpoint was
 * written, held until it is. */
typedef struct mx_held {
    struct mx_held *next;
    uint64_t step;
    mx_tensor *tensor;
    uint64_t offset, count;
    uint32_t state;       /* Pipelined: an upload's chunk held while a checkpoint is written */
    uint32_t packing;     /* a gradient chunk's packing (sstream.h) and kept elements */
    uint64_t kept;
    float data[];
} mx_held;

/* A checkpoint being written in the thread pool, and what follows it. */
typedef enum mx_ckpt_kind {
    MX_CKPT_NONE,         /* none is being written */
    MX_CKPT_INITIAL,      /* save_initial_checkpoint: the first step follows */
    MX_CKPT_STEP,         /* checkpoint_steps: the next step follows */
    MX_CKPT_FINAL,        /* after the last step: JobFinished follows */
} mx_ckpt_kind;

/* The life of memoryx's job.
 *
 *   MX_LOADING --tensors initialised or loaded in the thread pool (mx__load_done)--> MX_STARTED
 *   MX_STARTED --root swarmx's hello: JobReady (mx__maybe_ready)--> MX_READY
 *   MX_READY --the coordinator's JobGo (mx__job_go)--> MX_RUNNING
 *   MX_RUNNING --the final checkpoint written, JobFinished (mx__checkpoint_written)--> MX_FINISHED
 *   any state --an end (jobhost.h: JobEnd/JobAbort, failure, fault,
 *                coordinator lost, shutdown; mx__release)--> freed
 *
 * LOADING: the shard's weights are made from the seed, or read from the
 * checkpoint the job resumes from, off the event loop (heartbeats go on).
 * A job released while the thread pool has any of its work (pool_work) is
 * freed when the last piece comes back.
 * RUNNING (Pipelined: the weights stream once, then each upload of the
 * first replica's weights is written as a checkpoint: mx__upload_chunk;
 * the rest of this is Weight Streaming's):
 * each step streams its weights (cur, the stream cursor, says how
 * far: pump_send) while reduced gradients come back (mx__grad_chunk) and
 * the optimizer updates each part of a tensor (mx_part) whose gradient is
 * complete in the thread pool, at most --threads at a time
 * (update.c; with clipping, every tensor in one piece of work once
 * all are in); a step is done when every tensor is updated and the stream
 * is over (mx__step_done), and the next starts (mx__start_step). Where no
 * checkpoint follows, the next step's stream starts as soon as the last
 * gradient is in (mx__maybe_turn): its chunks wait for their parts'
 * updates, and the step is committed when the last is back. A checkpoint
 * due then (or before the first step, or
 * after the last) is written in the thread pool first (ckpt_kind says which
 * and what follows it: mx__checkpoint_written). The event loop only moves
 * bytes: heartbeats and flow control go on while a large tensor updates or
 * a checkpoint is written.
 * FINISHED: the final evaluation's weights may still stream; no step runs. */
typedef enum mx_state {
    MX_LOADING,
    MX_STARTED,
    MX_READY,
    MX_RUNNING,
    MX_FINISHED,
} mx_state;

/* What a job's modules (update.c, tierio.c, checkpoint.c) report back up
 * to the daemon that drives its steps (mx.c) when their work comes back
 * from the thread pool: mx.c calls down into them, they call it through
 * these only, so calls go one way (the pump only returns: pump_send).
 * Each is called on the loop, with the job still memoryx's. */
typedef struct mx_job_ops {
    /* the update of parts or of the whole step came back (update.c): the
     * stream may go on with their weights, and the step may be done */
    void (*update_back)(struct mx_job *j);
    /* a chunk of the stream was read ahead (tierio.c): it may be sent */
    void (*chunk_read)(struct mx_job *j);
    /* elements [offset, offset + count) of t's reduced gradient are in the
     * disk tier's gradients file (tierio.c): their update may be due */
    void (*grad_written)(struct mx_job *j, mx_tensor *t, uint64_t offset, uint64_t count);
    /* the checkpoint of step (kind says why) is written and reported
     * (checkpoint.c): what it was for follows */
    void (*checkpoint_written)(struct mx_job *j, mx_ckpt_kind kind, uint64_t step);
} mx_job_ops;

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
    size_t grads_in;              /* tensors whose gradient of this step is complete */
    bool turned;                  /* the stream of `step` started before the update of
                                     turn_step was done (mx__maybe_turn) */
    uint64_t turn_step;           /* that step: committed when its last update is back */
    size_t turn_left;             /* its tensors still updating */
    optim_config cfg;             /* the optimizer of the job */
    sparse_config sparse;         /* its sparsity (type SPARSE_NONE: dense; mxsparse.h) */
    struct memoryx *mx;           /* its memoryx */
    const mx_job_ops *ops;        /* how its modules call back (mx.c's) */
    uv_work_t load_req;           /* LOADING: the tensors made in the thread pool */
    uv_work_t free_req;           /* released: the tensors freed in the thread pool */
    unsigned pool_work;           /* pieces of work of this job in the thread pool */
    mx_part **ready;              /* parts whose gradient is complete, to update (a FIFO) */
    size_t ready_head, ready_len, nparts;
    unsigned updating;            /* parts' updates in the thread pool */
    mx_held *held, **held_tail;   /* next step's gradient chunks that came early, in order */
    uv_work_t step_req;           /* with clipping: the whole step's update */
    bool step_due;                /* with clipping: every gradient is in, the update waits
                                     for weight chunks still being written */
    mx_ckpt_kind ckpt_kind;       /* the checkpoint being written, or MX_CKPT_NONE */
    uv_work_t ckpt_req;
    uint64_t ckpt_step;
    uint64_t work_start;          /* when the load or the checkpoint began (uv_hrtime) */
    int ckpt_rc;
    char ckpt_err[512];
    char ckpt_path[PATH_MAX];
    int load_rc;                  /* its result, with load_err */
    char load_err[512];
    uint64_t load_bytes;          /* weights, gradients and optimizer state held */
    bool released;                /* released with work in the pool: freed when it comes back */
    /* Pipelined: the replicas apply the updates; the first one uploads its
     * weights and optimizer state after each step a checkpoint follows
     * (PASS_CHECKPOINT chunks), which memoryx writes */
    bool pipelined;
    bool twins;                   /* the tensors have their w16 (mx_tensor) */
    bool grad16;                  /* the trainable tensors have their g16 for their g */
    uint64_t up_step;             /* the step of the upload coming in, UINT64_MAX: none */
    uint64_t up_have, up_need;    /* its elements in, and in all */
    const void *up_dest;          /* where the frame being read lands in place, or NULL */
    uint8_t *gpack;               /* a packed gradient chunk as it comes (a chunk's bytes) */
    struct mx_tier *tier;         /* the disk tier (tier.h), or NULL: the tensors are in RAM */
    uint64_t tier_window;         /* > 0: the shard goes to the disk tier, with this much RAM */
} mx_job;

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
    uint64_t checkpoint_failures; /* checkpoints that could not be written (the job failed) */
    uint64_t stream_bytes;        /* weight chunks' payload bytes sent down (packed or not) */
    uint64_t stream_dense_bytes;  /* what they would have been dense */
    uint64_t grad_bytes;          /* gradient chunks' payload bytes received (packed or not) */
    uint64_t grad_dense_bytes;    /* what they would have been dense */
} memoryx;
