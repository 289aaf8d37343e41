/* wse-node, internal: a replica's job and what the files of the replica
 * share (replica.h is the role's public side). */
#pragma once

#include "wse_node.h"

#include "blas_check.h"
#include "compute.h"
#include "conn_link.h"
#include "exec.h"
#include "jobhost.h"
#include "model.h"
#include "node.h"
#include "optim.h"
#include "spatial.h"
#include "plan.h"
#include "plan_stream.h"
#include "wresident.h"
#include "wslots.h"

/* batches each worker may have in flight to us: the plan's (Plan.feed_credits) */
#define WN_CREDITS(p) ((p)->feed_credits ? (p)->feed_credits : PLAN_FEED_CREDITS)

typedef struct wn_tensor {
    float *w;              /* weights of the current step */
    float *g;              /* gradient of the current step */
    float *rg;             /* Pipelined: the all-reduced gradient (NULL otherwise) */
    uint64_t rg_have;      /* Pipelined: elements of rg received this step */
    optim_state st;        /* Pipelined: the optimizer state of the resident weights */
    uint16_t *w16;         /* Pipelined in mixed precision, a dense layer's weights: w rounded
                              to bfloat16, made before its first forward pass (w16_made, on
                              the compute thread) and again by every update; or NULL */
    bool w16_made;
    bool trainable;        /* false for buffers (running statistics) */
    uint64_t n;            /* elements */
    int sends;             /* gradient sends queued or in flight: g must not change */
    uint64_t send_off;     /* the next element of g to send, while queued */
    uint64_t send_end;     /* where the queued range ends (n, or a part's end) */
    const float *send_base; /* g's element send_from, where the range is (a part's slot) */
    uint64_t send_from;    /* the queued range's first element */
    uint64_t send_step;    /* the step of the gradient queued */
    uint8_t *kept_bits;    /* a sparse tensor whose gradient goes up packed (msgcheck_grads_pack):
                              which elements its weights kept, a bit each (sstream_mark), as
                              the packed weight chunks said; all until they do */
    bool kept_only;        /* a static mask's weight held, computed and sent as its kept
                              values alone (wn__kept_only): its slots hold them in order at
                              their front, kept_bits says where (none until its chunks come) */
    uint64_t land_next, land_k; /* kept_only: the offset the next chunk lands at and the kept
                              values before it */
    uint64_t send_next, send_k; /* ... and the same for the gradient chunks sent */
    struct wn_job *job;    /* the job it belongs to */
} wn_tensor;

/* A weight chunk that arrived while its slot was still in use: the frames
 * already read when reading stopped, or, while the compute thread waits
 * for a collective total that comes behind them (wn__resume_up),
 * what swarmx sends meanwhile (at most its window, PLAN_SWARM_DOWN_MAX,
 * and the ring's). */
typedef struct wn_staged {
    struct wn_staged *next;
    uint32_t tensor;
    bool backward;
    uint64_t step;
    uint64_t offset, count;
    uint32_t packing;      /* as it came (sstream.h): SSTREAM_DENSE, or packed with */
    uint64_t kept;         /* kept elements */
    float data[];
} wn_staged;

typedef struct wn_batch {
    uint64_t step;         /* UINT64_MAX: free */
    bool full;             /* every byte arrived */
    uint64_t got;          /* bytes arrived so far (the frames come in order) */
    uint8_t *data;         /* the batch as it travels (sample.h): inputs, then labels */
    struct wn_feed *from;  /* the worker link it came over */
    double landed;         /* with sim: when it was full (wn__now) */
} wn_batch;

typedef struct wn_feed {
    conn_link link;        /* to the worker */
    uint32_t slot, slots;  /* it sends steps with step % slots == slot */
    bool ready;
    struct wn_job *job;
} wn_feed;

enum wn_stage { WN_FORWARD, WN_LOSS, WN_BACKWARD, WN_UPDATE, WN_EVAL, WN_EVAL_METRICS };

/* An evaluation batch, asked of the first worker feeding the replica. */
typedef struct wn_eval_buf {
    int32_t k;             /* the eval batch it holds or awaits, -1: free */
    bool full;             /* every byte arrived */
    uint32_t n;            /* samples in it */
    uint64_t got;          /* bytes arrived so far */
    uint8_t *data;         /* eval_batch samples: inputs, then labels (sample.h) */
    double landed;         /* with sim: when it was full (wn__now) */
} wn_eval_buf;

/* Spatial partitions (stripes.c). A replica that computes one stripe of its
 * sample group's samples (Plan.spatial_partitions) exchanges halo rows with
 * the stripes above and below over direct links (the lower stripe dials the
 * upper one; both directions share the link), and totals its norms' and
 * loss's sums over its group, or over every wse-node for synchronised batch
 * norm, on the swarmx tree (Collective).
 *
 * The executor calls in from the compute thread (exec_parts) and blocks
 * there until the rows or the totals are in; the event loop does every send
 * and receive. Arriving rows wait in two buffers per direction (a neighbour
 * is at most one exchange ahead: it cannot start the next before this
 * stripe's rows of the current one reached it). */

struct wn_job;

typedef struct wn_halo_in {
    float *buf;         /* room for the largest message */
    uint64_t total;     /* floats of the message it holds */
    uint64_t got;       /* of them arrived */
    uint32_t tag;
    uint64_t step;
    bool eval;
} wn_halo_in;

typedef struct wn_stripes {
    struct wn_job *job;
    uint32_t part, parts;       /* this stripe of its group's */
    uint32_t group;             /* the sample group */
    spatial_plan sp;            /* what crosses the borders, per layer */
    uint64_t msg_max;           /* floats of the largest halo message */
    conn_link above;            /* to the stripe above (part > 0), dialled */
    bool above_ready;
    conn *below;                /* from the stripe below (part < parts - 1), accepted */
    uv_async_t wake;            /* the compute thread has posted something to send */
    bool wake_open;
    /* Shared with the compute thread, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int err;                    /* the job ends: the compute thread gives up with it */
    enum { WNS_IDLE, WNS_HALO, WNS_SUM } want; /* what the compute thread waits for */
    bool sent;                  /* the loop sent what was posted */
    int sends;                  /* frames of it still being written */
    bool sum_done;              /* the total came back */
    uint32_t tag;
    uint64_t step;
    bool eval;
    const exec_halo *h;         /* the exchange posted */
    double *v;                  /* the sum posted: its partial sums, then the totals */
    size_t count;
    bool all;                   /* over every wse-node (synchronised batch norm) */
    wn_halo_in in[2][2];        /* [0: from above, 1: from below][ring] */
    int head[2], nq[2];         /* the ring of each direction */
    double wait_sec;            /* compute thread time blocked on the others, not yet counted */
    uint64_t halo_bytes, sums;  /* sent, for /metrics */
} wn_stripes;

/* Sets up j's stripe (j->m is already the stripe's model, sp its plan, taken
 * over): buffers for n samples at once. Returns 0 or -ENOMEM. */
int wn_stripes_init(struct wn_job *j, spatial_plan *sp, int n, char *err, size_t errlen);
/* The executor's view (exec_set_parts). */
exec_parts wn_stripes_exec(wn_stripes *p, bool sync_batchnorm);
/* Starts the link to the stripe above (on the loop, with the others). */
void wn_stripes_link(wn_stripes *p);
/* Whether the links to the neighbours are up (read on the loop). */
static inline bool wn_stripes_ready(const wn_stripes *p)
{
    return (p->part == 0 || p->above_ready) && (p->part + 1 == p->parts || p->below);
}
/* The job ends: a blocked compute thread gives up with err. */
void wn_stripes_abort(wn_stripes *p, int err);
/* Closes the links to the neighbours; wn__stripes_link_closed(job) follows
 * for each. Returns how many it closes. */
int wn_stripes_stop(wn_stripes *p);
/* Frees what is left (the compute thread no longer uses it). */
void wn_stripes_free(wn_stripes *p);
/* Moves the compute thread's blocked time out to the caller. */
double wn_stripes_take_wait(wn_stripes *p);

/* Role handlers for the link the stripe below dials. */
void wn_stripes_role(node_role *role);
/* Whether the compute thread has sent its partial sum and waits for the
 * total (from the loop). */
bool wn_stripes_awaiting_total(wn_stripes *p);
/* Where a Collective total from swarmx lands, and its frame. */
void *wn_stripes_collective_dest(wn_stripes *p, const Appliance__Envelope *env, uint32_t len, int *err);
void wn_stripes_collective(wn_stripes *p, const Appliance__Envelope *env);

/* The life of a replica's job.
 *
 *   WN_ALLOCATING --buffers allocated on the compute thread (wn__job_allocated)--> WN_LINKING
 *   WN_LINKING --swarmx and every worker linked: JobReady (wn__maybe_ready)--> WN_RUNNING
 *   WN_RUNNING --max_steps trained and evaluated (wn__step_done, wn__eval_next)--> WN_FINISHED
 *   any state --an end (jobhost.h; wn__release)--> WN_RELEASED --links closed, task done--> freed
 *
 * RUNNING: the steps run as weights and batches arrive; stage and layer
 * say where the step is. RELEASED: no longer the wse-node's job; the links
 * close and the compute task in flight finishes before the memory goes.
 * Beside the state, a few flags are independent of it: busy (a compute task
 * is queued, in any state), up_ready and the feeds' ready (links come and
 * go), arrival and up_paused (what the link up brings, and its flow control),
 * ex_ready, ws_ready and res_ready (which buffers an allocation that failed half-way
 * made), pipelined (the mode). */
typedef enum wn_state {
    WN_ALLOCATING,
    WN_LINKING,
    WN_RUNNING,
    WN_FINISHED,
    WN_RELEASED,
} wn_state;

/* A finished step's report to the coordinator and the credit for its
 * batch: the report kept from the step's end until the next task is on its
 * way, the credit until that task starts, or the job waits for a batch
 * (wn__credit). */
typedef struct wn_report {
    bool owed;
    bool credit_owed;
    Appliance__StepReport msg;
    Appliance__StepPhase phase[WN_PHASES], *phases[WN_PHASES]; /* msg's */
    wn_feed *credit_to;        /* the worker that sent the batch */
} wn_report;

/* Where a frame from the link up lands: decided once, as its header is
 * read (links.c's payload_dest), and acted on once it is whole (its
 * on_frame). */
typedef enum wn_arrival {
    WN_ARRIVE_NONE,       /* nothing decided: no payload, or refused */
    WN_ARRIVE_TOTAL,      /* a collective total of the stripes' sums */
    WN_ARRIVE_REDUCED,    /* Pipelined: a chunk of an all-reduced gradient */
    WN_ARRIVE_SLOT,       /* Weight Streaming: weights into their slot, as they are */
    WN_ARRIVE_SLOT_BF16,  /* ... in bfloat16 beside their slot: widened when whole */
    WN_ARRIVE_HELD,       /* ... before their slot is free: held (stage.c) */
    WN_ARRIVE_PACKED,     /* ... packed (a sparse tensor's): in packed_buf, expanded into
                             packed_dst, their slot, once in */
    WN_ARRIVE_RESIDENT,   /* Pipelined: the resident weights or their optimizer state */
} wn_arrival;

typedef struct wn_job {
    node *n;
    char id[40];
    Appliance__Plan *plan;   /* owned */
    model *m;                /* owned */
    uint32_t replica;
    uint32_t batch;          /* our share of each global batch */
    uint32_t mb;             /* samples computed at once: the micro-batch, or the share */
    uint32_t nmicro;         /* micro-batches per step (1: none) */
    uint32_t micro;          /* the micro-batch being computed */
    uint64_t in_elems;       /* input values per sample */
    wn_tensor *t;            /* by plan tensor id */
    uint32_t *gq;            /* tensors whose gradients wait to be sent, a FIFO (wn__grad_pump) */
    size_t gq_head, gq_len;
    /* Pipelined, the first replica: its weights and optimizer state after
     * a step a checkpoint follows, on their way up to memoryx (wn__upload_pump):
     * tensor, state (0: the weights) and element next to send; chunks in
     * flight. The next update waits until all have left. */
    bool up_busy;
    uint64_t up_step;
    size_t up_tensor;
    uint32_t up_state;
    uint64_t up_off;
    unsigned up_sends;
    float **wp, **gp;        /* per tensor: t[i].w and t[i].g, for the executor */
    uint16_t **w16p;         /* per tensor: t[i].w16, for the executor */
    exec ex;                 /* activations and the layers' computation */
    bool ex_ready;           /* ex was initialised */
    int spill_fd;            /* the executor's spill file (model.spill_packed), or -1 */
    wn_batch *batches;       /* ring of nfeeds * WN_CREDITS */
    size_t nbatches;
    size_t batch_bytes;
    wn_feed *feeds;
    size_t nfeeds;
    conn_link up;            /* to the swarmx parent, or to memoryx (a plan without a tree) */
    bool up_ready;           /* the link up is up */
    char up_name[32];        /* "swarmx node 2" or "memoryx", for messages */
    wn_state state;          /* see wn_state */
    uint64_t step;           /* step being computed */
    enum wn_stage stage;
    int layer;               /* layer of the stage */
    uint32_t part;           /* Weight Streaming in parts: the layer's part (wslots_parts) */
    bool busy;               /* a compute task is queued */
    uint32_t batch_offset;   /* first sample of the global batch */
    int32_t swarm_parent;    /* swarmx node it streams from; -1: memoryx shard 0 directly */
    double loss_sum;         /* of the step, over our samples */
    double phase[WN_PHASES]; /* this step's seconds by phase */
    double *layer_sec[2];    /* per layer, the job's forward [0] and backward [1] seconds */
    double *chain_sec;       /* per layer of the running task's chain, its seconds */
    int chain;               /* layers the running task computes: from layer on, up in
                                the forward pass, down in the backward (wn__chain) */
    int grads_ready;         /* a backward chain: the last layer of it whose gradients are
                                complete (written on the compute thread, atomically) */
    int grads_queued;        /* on the loop: the last layer of it whose gradients are queued */
    wn_report report;        /* the last step's, until sent (wn__notify) */
    /* A task runs on into the stage after its own where nothing it needs
     * passes through the loop (wn__fuse): the loss after the forward pass
     * reached the last layer, and (Pipelined, one replica) the update after
     * the backward pass reached the first. Set on the loop before the task;
     * the seconds of each on the compute thread. */
    bool fuse_loss, fuse_update;
    double fused_sec[2];     /* [0] the loss, [1] the update */
    double task_sec;         /* the last task's duration (set on the compute thread) */
    double task_end;         /* when it ended (wn__now) */
    double mark;             /* start of the idle time not yet accounted, 0: computing */
    enum wn_phase wait;      /* what the replica waits for since mark */
    int compute_err;         /* set by a task: the job fails */
    char compute_msg[256];
    int links_open;          /* links still closing at release */
    bool pipelined;          /* weights resident, all-reduced gradients applied here */
    optim_config cfg;        /* Pipelined: the optimizer */
    size_t rg_done;          /* Pipelined: tensors whose reduced gradient is complete */
    wn_eval_buf ebuf[2];     /* evaluation batches: the current one and the next */
    size_t ebuf_bytes;
    uint32_t eval_k;         /* the eval batch being computed */
    exec_metrics metrics;    /* of the evaluation in progress */
    wslots ws;               /* Weight Streaming: the slots weights and gradients pass through */
    plan_stream cur;         /* the weight chunk expected next (plan_stream.h); zero before the first */
    bool ws_ready;           /* ws was initialised */
    bool twin_only;          /* mixed precision computed in bfloat16: a whole dense layer's
                                weights land in their slot's twin alone (wn__land) */
    wresident res;           /* Pipelined: the resident weights (wresident.h) */
    bool res_ready;          /* res was initialised */
    wn_arrival arrival;      /* where the frame being read from the link up lands */
    uint8_t *packed_buf;     /* a packed weight chunk as it comes (a chunk's bytes at most) */
    float *packed_dst;       /* its slot */
    wn_staged *staged, *staged_tail; /* held chunks, in arrival order */
    bool up_paused;          /* reading from swarmx stopped until a slot frees */
    double compute_sec;      /* time in kernels this step */
    const float *x;          /* the float inputs of the batch being computed (exec_take_input) */
    wn_stripes *stripes;       /* spatial partitions: this stripe's links and sums; NULL: whole samples */
    void (*stripes_link_closed)(struct wn_job *j); /* a link to a neighbouring stripe closed
                                                    * after the release (replica.c's) */
    double stripes_wait;     /* the last task's time blocked on the other stripes */
    bool sim;                /* simulated compute (sim.h): no executor (ex_ready stays false),
                                each pass spends sim_times' seconds, gradients are zeros */
    sim_times sim_t;         /* with sim: each layer's seconds per sample */
    double sim_free;         /* with sim: when the simulated wafer's last task ended (its
                              * deadline, not when this process got round to it) */
    double sim_input;        /* with sim: when the last weights landed (wn__sim_landing);
                              * a batch's landing is its own (wn_batch.landed) */
} wn_job;

/* ---- between the replica's files. Each calls only the files below it:
 *   replica.c   its life (start, buffers, links, end) and the role's handlers
 *   links.c     the links up (weights, reduced gradients, totals) and to the workers
 *   step.c      the steps
 *   teardown.c  a released job's memory given back
 *   stage.c     weight chunks held until their slot frees; the link up's flow control
 *   stripes.c   the links to the neighbouring stripes and the sums on the tree
 *   wjob.c      the clock, the abort, the hello, JobReady, reading up again
 * (stripes.c tells replica.c of a closed link through j->stripes_link_closed.)
 * Internal to the wse-node. ---- */

static inline wse_node *wn_of(node *n) { return n->data; }

/* wjob.c: seconds on the monotonic clock; fails the job (a fault: a peer
 * or link lost) and releases it; the hello a replica says on every link it
 * dials; JobReady once every link is up; reading from the link up again
 * (the compute thread waits for a collective total, which swarmx sends down
 * the stream the weight chunks come by: reading goes on, held chunks wait
 * for their slots, until it has come). */
double wn__now(void);
#define wn__abort(n, j, ...) jobhost_abort_job(&wn_of(n)->jobs, j, false, __VA_ARGS__)
#define wn__fault(n, j, ...) jobhost_abort_job(&wn_of(n)->jobs, j, true, __VA_ARGS__)
void wn__hello(conn *c, const wn_job *j);
void wn__hello_slot(conn *c, const wn_job *j, uint32_t slot);
void wn__maybe_ready(wn_job *j);
void wn__resume_up(wn_job *j);

/* stage.c: whether the link up must be read whatever the slots say; stops
 * reading it; holds a chunk that came before its slot was free; lands a
 * chunk's weights as the wire carries them into dst; lands held chunks
 * once a slot frees. */
bool wn__must_read(wn_job *j);
void wn__pause(wn_job *j);
int wn__stage(wn_job *j, const Appliance__WeightChunk *w, const uint8_t *payload);
void wn__land(const wn_job *j, uint32_t t, float *dst, const void *payload, uint64_t count,
              uint32_t packing, uint64_t kept, uint64_t offset);
/* A gradient chunk packed as the weights' index (wn__pack_grad), freed
 * once sent. */
typedef struct wn_packed_grad {
    wn_tensor *t;
    uint8_t data[];
} wn_packed_grad;
wn_packed_grad *wn__pack_grad(const wn_job *j, wn_tensor *t, uint64_t off, uint64_t count,
                              const void *src, Appliance__GradChunk *g, uint32_t *bytes);
void wn__unstage(wn_job *j);

/* teardown.c: frees a released job's memory (the large buffers on the
 * compute thread) and the job. */
void wn__free_buffers(wn_job *j);

/* step.c: sends queued gradients while the link to swarmx has room; sends
 * the upload of a checkpoint's weights on while the link has room (0 or a
 * negative errno); starts the next compute task if what it needs is
 * there; starts an evaluation; the buffer holding (or awaiting) eval batch
 * k; asks for eval batch k. */
int wn__grad_pump(wn_job *j);
int wn__upload_pump(wn_job *j);
void wn__advance(wn_job *j);
void wn__eval_begin(wn_job *j);
wn_eval_buf *wn__eval_buf(wn_job *j, uint32_t k);
void wn__eval_request(wn_job *j, uint32_t k);

/* links.c: the link callbacks of the swarmx parent and of the workers. */
extern const conn_ops wn__up_ops;
extern const conn_ops wn__feed_ops;
