/* swarmx: one node of the broadcast/reduce tree. Weight chunks from above
 * are forwarded to every child as they arrive (cut-through); gradient chunks
 * from the children are summed in child-index order, so the sum does not
 * depend on arrival order, and sent up to the memoryx shard that owns the
 * tensor (or to the parent swarmx). With spatial partitions, collective
 * sums go the same way, up to the root and their totals back down. */
#pragma once

#include "collective.h"
#include "jobhost.h"
#include "plan_stream.h"
#include "queue.h"
#include "node.h"

/* The life of a tree node's job.
 *
 *   SWX_LINKING --every link up and every child's hello: JobReady (swx__maybe_ready)--> SWX_STREAMING
 *   any state --an end (jobhost.h; swx__release, swx__job_free)--> SWX_RELEASED --links closed--> freed
 *
 * LINKING: the links up (every memoryx shard at the root, else the parent)
 * dial and the children say hello. STREAMING: weights go down as they
 * arrive (merged by seq at a root over several shards) and gradients go up
 * summed in child order, as do collective sums (their totals come down).
 * RELEASED: no longer the node's job; chunks still arriving are dropped
 * while the links up close. */
typedef enum swx_state {
    SWX_LINKING,
    SWX_STREAMING,
    SWX_RELEASED,
} swx_state;

typedef struct swx_job {
    node *n;                     /* the daemon */
    char id[40];
    Appliance__Plan *plan;       /* owned (jobhost_ops.start) */
    uint32_t index;              /* our tree node index */
    bool root;                   /* fed by memoryx */
    swx_up *up;                  /* shards (root) or the parent (one) */
    size_t nup;
    size_t stopping_up;          /* links still closing at release */
    swx_child *kids;             /* in child-index order */
    size_t nkids;
    size_t pending_down;         /* bytes of weight chunks not yet written to all children */
    uint64_t next_seq;           /* the weight chunk to forward next (merging several shards) */
    plan_stream cur;             /* what the next weight chunk down must be (plan_stream.h);
                                    zero until the first */
    struct shm_ring *shared;     /* the ring the children on this host read what goes
                                    down to all of them from (one copy), or NULL */
    uint64_t shared_bytes;       /* bytes sent down through it, once each */
    swx_colls colls;             /* collective sums waiting for children (collective.h);
                                    empty without spatial partitions */
    swx_state state;             /* see swx_state */
    uint64_t chunks_down, chunks_up;
    uint64_t collectives;        /* collective sums completed here */
} swx_job;

typedef struct swarmx {
    node *n;
    jobhost jobs;                /* the job's life cycle (jobhost.h) */
    swx_job *job;                /* the job (jobs.job), or NULL */
    uint64_t chunks_down;        /* forwarded to the children, every job */
    uint64_t chunks_up;          /* reduced and sent on, every job */
    uint64_t collectives;        /* collective sums completed, every job */
} swarmx;

/* Fills the role table of a swarmx and ties s (cleared) to n: its job life
 * cycle is s->jobs. */
void swarmx_role(node_role *role, swarmx *s, node *n);
