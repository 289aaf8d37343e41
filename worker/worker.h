/* worker: streams each replica its share of every global batch, ahead of
 * need, as far as the replica's credits allow. Opening the data set and
 * producing batches (reading, decoding, augmenting) run in libuv's thread
 * pool, so heartbeats and flow control keep moving meanwhile. */
#pragma once

#include "dataset.h"
#include "jobhost.h"
#include "node.h"

typedef struct wk_feed {
    conn *c;                  /* the wse-node; NULL until its hello, and after it leaves */
    uint32_t replica;
    uint32_t batch;           /* samples of each step for this replica */
    uint32_t offset;          /* first sample of the global batch */
    uint32_t slot, slots;     /* we serve steps with step % slots == slot */
    uint64_t next_step;       /* the next step to produce */
    uint32_t credits;         /* batches the wse-node has room for, less those in production */
    struct wk_batch *queue;   /* produced, waiting for room on c, oldest first */
    struct wk_batch *queue_tail;
    struct wk_job *job;
} wk_feed;

/* The state of a worker's job.
 *
 *   WK_OPENING --wk__open_done: data sets open, JobReady sent--> WK_FEEDING
 *        |                                                         |
 *        +--------- wk__release (any end: jobhost.h) --------------+
 *                                  |
 *                                  v
 *                             WK_RELEASED --last thread pool request back--> freed
 *
 * OPENING: the data sets open in the thread pool; stream hellos are held
 * (node_defer). FEEDING: batches are produced on credit. RELEASED: no longer
 * the worker's job (w->job is NULL); requests still in the thread pool come
 * back to wk__open_done or wk__batch_done, which free the job with the last. */
typedef enum wk_state {
    WK_OPENING,
    WK_FEEDING,
    WK_RELEASED,
} wk_state;

typedef struct wk_job {
    char id[40];
    struct worker *w;
    Appliance__Plan *plan;    /* owned (jobhost_ops.start) */
    dataset *data;            /* owned; written by the opening thread, read once ready */
    dataset *eval_data;       /* the eval set, or NULL; owned, as data */
    wk_state state;           /* opening, feeding or released (wk_state) */
    wk_feed *feeds;           /* one per replica we serve */
    size_t nfeeds;
    size_t next_feed;         /* where the next round of production starts (fairness) */
    uv_work_t open_req;       /* opens the data set off the loop */
    int open_rc;              /* its result, with open_err */
    char open_err[512];
    unsigned inflight;        /* thread pool requests not yet completed */
    uint64_t batches_sent;
    uint32_t most_parts;      /* the most parts a batch was filled in so far (logged when it grows) */
} wk_job;

/* The worker's own options (its key table: worker_role). */
typedef struct worker_options {
    uint32_t threads;         /* threads producing batches */
} worker_options;

typedef struct worker {
    node *n;
    worker_options opt;       /* filled by node_parse_args */
    jobhost jobs;             /* the job's life cycle (jobhost.h) */
    wk_job *job;              /* the job being fed (jobs.job), or NULL */
    unsigned max_inflight;    /* parts of batches produced at once: the threads */
    metrics_hist batch_hist;  /* producing one batch */
    uint64_t batches;         /* sent, every job */
} worker;

/* Fills the role table of a worker and ties w (cleared) to n: its option
 * keys point into w->opt, set to the defaults; its job life cycle is
 * w->jobs. */
void worker_role(node_role *role, worker *w, node *n);
