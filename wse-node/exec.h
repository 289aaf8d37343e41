/* The layer executor of a wse-node: runs one layer's forward or backward
 * pass, or the loss, over this replica's share of the batch, with buffers
 * carved once from the model when the job starts (no allocation per step).
 * It owns activations, their gradients and the layers' saved state; the
 * weights and weight gradients belong to the caller, which streams them. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memplan.h"
#include "sparse.h"
#include "model.h"
#include "spatial.h"

/* One halo exchange of a stripe (exec_parts): rows to send to the stripes
 * above and below, and room for what they send. A direction is NULL with
 * count 0 at the image's edge, or where nothing crosses that way. */
typedef struct exec_halo {
    const float *up, *down;
    size_t n_up, n_down;
    float *from_up, *from_down;
    size_t n_from_up, n_from_down;
} exec_halo;

/* Spatial partitions: the executor computes one horizontal stripe of every
 * sample (common/memplan/spatial.h), its model being the stripe's, and
 * reaches the other stripes through these calls, which block until done
 * and return 0 or a negative code (the step is then abandoned:
 * exec_parts_error). Every stripe makes the same calls in the same order;
 * tag names the call (layer and pass) so that a transport can check it. */
typedef struct exec_parts {
    int part, parts;              /* this stripe, top first, of parts */
    const spatial_plan *sp;       /* per layer, what crosses the borders; not owned */
    bool sync_batchnorm;          /* batch norm's statistics over the replicas too (also with
                                   * parts 1: then sum is the only call) */
    /* An exchange in two halves, so that a layer computes the rows that
     * need none of the neighbours' while theirs travel: begin sends h's
     * rows and returns; end waits until the neighbours' rows are in h's
     * room and h's own rows are sent (h stays unchanged in between). */
    int (*exchange_begin)(void *ctx, uint32_t tag, const exec_halo *h);
    int (*exchange_end)(void *ctx, uint32_t tag, const exec_halo *h);
    /* Replaces v[0 .. count) by its sums over the stripes of the samples;
     * batch: over every replica's stripes as well (synchronised batch norm). */
    int (*sum)(void *ctx, uint32_t tag, bool batch, double *v, size_t count);
    void *ctx;
} exec_parts;

struct exec_dense_path; /* exec_sparse.c: how one dense layer computes */

/* The paths a dense layer's pass takes (exec.dense_passes) */
enum {
    EXEC_PATH_GEMM,      /* the dense GEMMs */
    EXEC_PATH_SPARSE_W,  /* the sparse kernels on the weight's kept positions */
    EXEC_PATH_SPARSE_IN, /* the dense weight over the input's nonzero entries (after a relu) */
    EXEC_PATHS
};

typedef struct exec {
    const model *m;         /* not owned */
    int n;                  /* samples per step on this replica */
    uint32_t label_elems;   /* labels per sample */
    bool input_unorm8;      /* batches bring 8-bit inputs, made float here (sample.h) */
    bool labels_u8;         /* batches bring byte labels, not int32 */
    uint64_t seed;          /* the job seed: dropout masks */
    uint64_t sample_offset; /* first global sample of this replica's share */
    float replica_share;    /* 1 / replicas: running statistics are averaged */
    float **w;              /* per tensor: weights (not owned) */
    float **g;              /* per tensor: gradients, or running statistics (not owned) */
    uint16_t **w16;         /* NULL, or per tensor: NULL or its weights kept rounded to
                               bfloat16 by the caller (mixed precision's GEMMs use them;
                               not owned) */
    bool w16_stale;         /* the float32 weights of a tensor with w16 are not written
                               (Weight Streaming lands them in bfloat16 alone) */
    float **wa;             /* per tensor: NULL, or the copy of its weights that the forward
                               pass of a convolution the plan makes again used
                               (memplan_weights_again: Weight Streaming's slots have moved
                               on when the backward pass makes it); in `again` */
    float *again;
    memplan plan;           /* the step's buffers (memplan.h); owned */
    uint8_t *arena;         /* where they live */
    uint64_t arena_bytes;
    int *res;               /* per layer: the layer whose buffers it uses (flatten: a view) */
    /* Where each buffer is now, as the plan's events place them: */
    float **act;            /* per layer: output (batch x out) */
    float **dact;           /* per layer: gradient of the output, accumulated */
    void **aux;             /* per layer: argmax indices or saved statistics */
    uint16_t **packed;      /* per layer: its output kept as bfloat16 (activation_dtype) */
    /* model.spill_packed: those copies in a file (exec_set_spill) */
    bool spill;
    int spill_fd;
    uint64_t *spill_off;    /* per layer: where its copy lies in the file */
    uint16_t *spill_stage;  /* FOOTPRINT_SPILL_STAGE bytes, aligned for direct I/O */
    int spill_err;          /* the first failed read or write, or 0 */
    uint64_t spill_bytes;   /* written and read since exec_set_spill */
    uint64_t spill_file;    /* the file's size: every copy at its offset */
    bool packing;           /* the forward pass in training: MEMPLAN_PACK rounds */
    bool *direct;           /* per layer: this operation writes its gradient whole */
    bool *blk;              /* per layer: its output and gradient in oneDNN's aBcd16b
                             * layout (a blocked group, exec.c) */
    int blk_n;              /* the batch they were chosen for (exec_set_batch) */
    bool *in_kept;          /* per layer: its saved state (aux) holds its input as its
                             * training forward pass rounded it (a mixed-precision
                             * convolution, memplan_aux_bytes) */
    float *scratch;         /* the input gradients of one layer */
    float *targets;         /* float targets of bce and dice (n x per) */
    float *lossgrad;        /* the second gradient of bce_dice */
    double *losssums;       /* ssce_dice's per-sample sums (op_ssce_dice), where targets are */
    void *ws;               /* convolution workspace, outside the arena */
    size_t ws_bytes;
    float *input;           /* the float inputs of 8-bit batches (n x input) */
    float *gtmp;            /* micro-batches: one layer's weight gradients */
    bool accumulate;        /* backward: add the weight gradients to the step's (a later
                             * micro-batch), rather than write them */
    bool micro_later;       /* forward: a later micro-batch of the step (batch-norm running
                             * statistics go on from the earlier ones) */
    bool micro_more;        /* forward: more micro-batches follow in the step (running
                             * statistics are scaled by replica_share after the last) */
    exec_parts parts;       /* spatial partitions (exec_set_parts); parts 0: whole samples */
    float *hx, *hd;         /* a stripe's extended buffers: input (or output) rows with their
                             * halos, and their gradients or the rows in flight */
    float **kept;           /* per layer: the halo rows its forward pass received */
    double *red;            /* the sums a norm or the loss totals over the stripes */
    int parts_err;          /* the first failed exchange or sum, or 0 */
    exec_halo pending;      /* the exchange begun and not yet ended */
    size_t bytes;           /* allocated: the footprint's exec bytes */
    uint64_t recomputed;    /* layer outputs recomputed, every step so far */
    uint64_t inputs_kept;   /* convolutions' backward passes that took their input as
                             * the forward pass rounded it (in_kept), every step so far */
    int blocked;            /* layers whose output is in aBcd16b for the batch size now */
    struct exec_dense_path *dp; /* per layer (exec_set_sparsity): a dense layer's choice
                                 * of path; NULL: every dense layer on the GEMMs */
    void *sws;              /* the sparse kernels' workspace (exec_set_sparsity) */
    size_t sws_bytes;
    sparse_config masks;    /* when the pruned positions change (exec_set_mask_schedule);
                             * type SPARSE_NONE: unknown, each pass's weight counted */
    uint64_t weights_counted; /* passes that counted a pruned weight's zeros, so far */
    /* Told, on the compute thread, each time a dense layer's path is chosen
     * anew (its first pass, and when the choice changes): one line such as
     * "sparse path, density 0.10, predicted 0.31 of dense". NULL: nobody. */
    void (*path_note)(void *ctx, int layer, const char *line);
    void *path_ctx;
    uint64_t dense_passes[EXEC_PATHS]; /* dense layers' passes (forward or backward) by
                                        * path, every step so far */
} exec;

/* Allocates the buffers of n samples as the footprint of (m, n, threads)
 * sizes them (footprint.h: threads are the wse-node's, which the
 * convolution workspace grows with): one arena laid out by the lean memory
 * plan (memplan.h), whose events each call below replays, the workspace
 * and the float inputs. w and g are arrays over the model's tensors. A
 * step must call exec_forward for every layer in order, exec_loss, then
 * exec_backward for every layer last first (an evaluation: the forward
 * passes and exec_eval). Returns 0, or a negative code with a message. */
int exec_init(exec *e, const model *m, int n, int threads, float **w, float **g, char *err,
              size_t errlen);
/* exec_init for a share of `share` samples computed in micro-batches of
 * `micro` (footprint_init_micro): the buffers hold one micro-batch, and
 * later micro-batches add their weight gradients to the step's
 * (accumulate). */
int exec_init_micro(exec *e, const model *m, int share, int micro, int threads, float **w,
                    float **g, char *err, size_t errlen);
/* exec_init with the reference plan (memplan_build_as keep_all): every
 * buffer kept for the whole step, nothing recomputed; what the lean plan is
 * tested against. */
int exec_init_reference(exec *e, const model *m, int n, int threads, float **w, float **g,
                        char *err, size_t errlen);
void exec_deinit(exec *e);

/* Makes the executor compute stripe p->part of p->parts of every sample:
 * e was initialised with the stripe's model. Allocates the halo buffers
 * (spatial_extra_bytes) and grows the convolution workspace for the
 * extended rows. Returns 0 or -ENOMEM with a message. */
int exec_set_parts(exec *e, const exec_parts *p, char *err, size_t errlen);

/* A model that spills its bfloat16 copies (model.spill_packed): their file,
 * open for reading and writing (O_DIRECT or not), which the executor
 * uses from now on (the caller closes it after exec_deinit); its size
 * comes from the plan (footprint.spilled). Returns 0, or -ENOMEM with a
 * message. */
int exec_set_spill(exec *e, int fd, char *err, size_t errlen);

/* The first failed write or read of the spill file, or 0: the step's
 * results are then meaningless. */
static inline int exec_spill_error(const exec *e)
{
    return e->spill_err;
}

/* The first error of an exchange or a sum since exec_set_parts, or 0: the
 * step's results are then meaningless. */
static inline int exec_parts_error(const exec *e)
{
    return e->parts_err;
}

/* The float inputs of samples first .. first+n-1 of a batch as it arrived
 * (its inputs first, sample.h): in the batch itself when it brings floats,
 * else converted into the executor's input buffer. The layers read these
 * until the next call. */
const float *exec_take_input(exec *e, const void *batch, int first);

/* Where the labels of sample `first` of a batch of nbatch samples are. */
const void *exec_labels(const exec *e, const void *batch, int nbatch, int first);

/* The output of layer (-1: the input x). */
const float *exec_output(const exec *e, int layer, const float *x);

/* Nothing to do: the plan zeroes each output gradient as it places it.
 * Kept for callers that mark a step's start. */
void exec_zero_grads(exec *e);

/* Forward pass of one layer. training selects batch statistics and dropout;
 * in training, batch norm leaves its updated running statistics, times
 * replica_share, in the g buffers of its running_mean and running_var. */
void exec_forward(exec *e, int layer, const float *x, int64_t step, bool training);

/* The loss of the step, summed over this replica's samples, and its gradient
 * (times scale) in the last layer's output gradient. NAN for a label out of
 * range. */
double exec_loss(exec *e, const float *x, const void *labels, float scale);

/* Backward pass of one layer: its weight gradients into g, its input
 * gradients added to the output gradients of the layers it reads. */
void exec_backward(exec *e, int layer, const float *x, int64_t step);

/* A dense layer's pass over rows [r0, r1) of its weight (output units),
 * for Weight Streaming in parts (wslots.h): its w (and in the backward
 * pass its g) points at the part's first row, and with the last part also
 * at the bias. The parts of a pass run in order, first to last, with
 * nothing of the same replica between them; together they make the
 * layer's pass (the input gradient summed over the parts). */
void exec_forward_part(exec *e, int layer, uint64_t r0, uint64_t r1, bool first, bool last,
                       const float *x, int64_t step, bool training);
void exec_backward_part(exec *e, int layer, uint64_t r0, uint64_t r1, bool first, bool last,
                        const float *x, int64_t step);

#define EXEC_MAX_CLASSES 256 /* classes whose IoU an evaluation counts */

/* What an evaluation counts over its batches. */
typedef struct exec_metrics {
    uint64_t samples;
    uint64_t correct;                     /* classification: argmax equals the label */
    double loss;                          /* summed over the samples */
    uint32_t classes;                     /* segmentation: classes counted, else 0 */
    uint64_t inter[EXEC_MAX_CLASSES];     /* pixels predicted and labelled c */
    uint64_t uni[EXEC_MAX_CLASSES];       /* pixels predicted or labelled c */
} exec_metrics;

/* Lets the dense layers leave the GEMMs where that is expected to pay
 * (exec_sparse.c, docs/sparsity.md): level, per model tensor (or NULL: none
 * pruned), is the plan's sparsity of each; a dense layer whose weight has
 * a level above 0 and zeros_pruned (the masks keep a pruned weight at an
 * exact zero and no kept weight at zero: static and gmp masks, not set's
 * or rigl's, which regrow weights at zero) has its weight's zeros counted
 * at its first pass of each step (or where exec_set_mask_schedule says the
 * masks may have changed), and runs on the sparse kernels over the
 * kept weights when the cost model predicts them faster at that density
 * and shape (the weight gradient then zero at the pruned positions). A
 * dense layer that reads a relu's output skips the input's zeros where
 * they are many enough. Mixed precision and layers streamed in parts stay
 * on the GEMMs. Allocates the workspace and per-layer state; returns 0 or
 * -ENOMEM with a message. Without this call every dense layer runs on the
 * GEMMs. */
int exec_set_sparsity(exec *e, const float *level, bool zeros_pruned, char *err, size_t errlen);
/* What the masks' schedule says (sparse.h; NULL: nothing): a pass whose
 * weights come after no mask change since the last count (a static mask
 * after its first pass; gmp between its updates) gathers its kept values
 * at the positions counted then and does not count the weight again.
 * Step numbers are the job's step indexes, from 0, as memoryx's (the
 * mask changes after the update of index s when
 * sparse_config_updates(c, s + 1)). Call after exec_set_sparsity. */
void exec_set_mask_schedule(exec *e, const sparse_config *c);

/* Dense layer li's weight held as its kept values alone, a static mask's
 * (after exec_set_sparsity, which must prune it): its weight slot (e->w)
 * holds them in canonical order (row-major, as a packed stream carries
 * them) and its weight gradient slot gets the gradient at them alone
 * (op_sparse_dense_backward's dkept), in the same order; bits (out_f x
 * in_f, bit i%8 of byte i/8: 1 kept; the caller's, filled before the
 * layer's first pass and unchanged after) says where. The layer always
 * runs on the sparse kernels. Returns 0, or -EINVAL with the reason (no
 * pruned dense layer, mixed precision). */
int exec_set_kept_only(exec *e, int li, const uint8_t *bits, char *err, size_t errlen);

/* How dense layer `layer` computed its last pass, in words (its path, the
 * weight's and input's densities, the cost model's prediction), into out.
 * Returns its EXEC_PATH_*, or -1 for a layer that is no dense layer or
 * one not yet run. */
int exec_dense_path(const exec *e, int layer, char *out, size_t len);

/* Internal, for exec.c: the dense layers off the GEMMs (exec_sparse.c).
 * exec__sparse_forward computes layer li's forward pass on the sparse
 * kernels where they pay and returns true, or returns false for the
 * caller to run the GEMMs (the choice counted and noted either way);
 * exec__sparse_backward likewise writes dw (zero at the pruned positions
 * on the sparse weight path), db (or NULL) and din (or NULL) whole. A
 * layer streamed in parts is noted as on the GEMMs (exec__sparse_part). */
bool exec__sparse_forward(exec *e, int li, float *out, const float *in, int64_t step,
                          bool training);
bool exec__sparse_backward(exec *e, int li, float *din, float *dw, float *db, const float *dout,
                           const float *in, int64_t step);
void exec__sparse_part(exec *e, int li);
void exec__sparse_deinit(exec *e);

/* How convolution layer `layer` computes for the batch size now, in
 * words (op_conv2d_describe's: oneDNN's implementation and layouts on
 * this processor, or why it runs on the plain path), with whether its
 * output is in a blocked group: into out (len bytes). Returns
 * op_conv2d_describe's bits, or -1 for a layer that is no convolution. */
int exec_conv_path(const exec *e, int layer, char *out, size_t len);

/* Uses the first n samples of the buffers from now on (n <= the n of
 * exec_init): evaluation batches may be smaller. */
void exec_set_batch(exec *e, int n);

/* After a forward pass in evaluation mode: adds the batch's loss and its
 * accuracy (classification) or per-class intersections and unions
 * (segmentation: argmax over channels, or logit > 0 for one channel) to mt.
 * With pixel_softmax_cross_entropy, ssce_dice and multilabel_bce the
 * classes of model.eval_ignore count nothing (their union stays 0, which
 * leaves them out of the mean IoU); pixel accuracy counts every pixel.
 * Returns -EINVAL for a label out of range. */
int exec_eval(exec *e, const float *x, const void *labels, exec_metrics *mt);
