/* The lean memory plan of one training step on a replica: which buffers
 * exist when, and where each lives in one arena.
 *
 * A step runs 2L + 1 operations for a model of L layers: the forward pass
 * of each layer (op i for layer i), the loss (op L), and the backward pass
 * of each layer, last first (op 2L - i for layer i). The plan decides:
 *
 *  - what is kept for the backward pass: the outputs of the layers whose
 *    output is costly to make again (dense, convolutions, transposed
 *    convolutions, and the model's last layer; not the cheap convolutions,
 *    memplan_cheap_conv, which are made again as the cheap layers are),
 *    each until its last reader
 *    in the backward pass is done. The outputs of the cheap layers (norms,
 *    activations, pooling, upsampling, concatenation, dropout) live in the
 *    forward pass only until their last reader there, and are recomputed
 *    from what was kept when the backward pass reads them (a batch norm
 *    from its convolution's output and the per-channel scale and shift it
 *    saved), and dropped again unless the very next operation reads them
 *    too;
 *  - gradients by liveness: the gradient of a layer's output exists from
 *    its first writer in the backward pass to the end of the layer's own
 *    backward pass; the first writer writes it whole when it is the only
 *    gradient the operation makes (or a concatenation's, all new; an add
 *    copies its output's gradient into its inputs' when both are new),
 *    else adds into zeros through a scratch buffer;
 *  - a 3-D convolution whose input is not needed after its backward pass
 *    computes its weight gradient first, and its input's gradient only
 *    after its input is freed (memplan_op.mid): the two never live at once;
 *  - a concatenation of one sample made again in the backward pass makes
 *    the inputs it alone needs in its own slices (they are not copied and
 *    take no room of their own);
 *  - what the backward pass recomputes for one operation goes as soon as
 *    the recomputations that read it are done, unless the operation or the
 *    next one reads it;
 *  - saved state (max-pool indices, norm statistics, and with every
 *    output kept in mixed precision a convolution's input as its forward
 *    pass rounded it to bfloat16) from the layer's forward pass to its
 *    backward pass; temporaries (the input gradients
 *    of one layer, the loss's targets) for one operation.
 *
 * Every buffer then gets an offset in one arena, greedily (largest first,
 * at the lowest offset free for its whole life), so the arena is what the
 * executor allocates and what the plan reports: the executor replays the
 * plan's events and cannot need more. Flatten layers, and relus fused into
 * their norms or dense layers (model_fuse), are views: their output and gradient are
 * their input's. Pure function of (model, n).
 *
 * Then the plan lightens itself: it makes costly convolution outputs
 * again rather than keep them, one at a time, each time the one whose
 * absence lowers the arena most, while that lowers it by at least 2% and
 * all that a step makes again costs at most a tenth of the step's work.
 * Such an output, once made again in the backward pass, stays until its
 * last reader there. On a U-Net over a volume these are the encoder's
 * full-resolution outputs, which would otherwise wait through the whole
 * decoder.
 *
 * With the model's keep_outputs (chosen by the plan where the wafer holds
 * it) every output is kept like a costly one, until its last reader in the
 * backward pass, and nothing is recomputed: the same values, fewer passes.
 *
 * With the model's activation_dtype = "bfloat16" (act_bf16), a costly kept output
 * (but the last layer's) is kept as a bfloat16 copy made right after its
 * forward pass; its float output then lives as a cheap layer's does, and
 * the backward pass makes it again from the copy when it reads it. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "convplan.h"
#include "model.h"

/* What an event concerns. */
enum memplan_kind {
    MEMPLAN_OUT,        /* a layer's output: from here on at offset */
    MEMPLAN_DOUT,       /* the gradient of a layer's output (zero it when `zero`) */
    MEMPLAN_AUX,        /* a layer's saved state */
    MEMPLAN_SCRATCH,    /* the input gradients of the operation's layer */
    MEMPLAN_LOSS,       /* the loss's scratch (memplan_loss_bytes) */
    MEMPLAN_RECOMPUTE,  /* run the layer's forward again into its output, placed before */
    MEMPLAN_PACKED,     /* a layer's output kept as bfloat16: from here on at offset */
    MEMPLAN_UNPACK,     /* make the layer's output, placed before, from its bfloat16 copy */
    MEMPLAN_PACK,       /* round the layer's output (training) into its bfloat16 copy, placed
                         * before: in the next layer's forward operation, the layer's input
                         * gone by then */
};

typedef struct memplan_event {
    uint8_t kind;       /* memplan_kind */
    bool zero;          /* MEMPLAN_DOUT: the first writer accumulates into zeros */
    bool direct;        /* MEMPLAN_DOUT: the operation, its first writer, writes it whole (no
                         * zeros, no scratch) */
    int32_t layer;
    uint64_t offset;    /* in the arena */
} memplan_event;

/* The events that come before one operation runs, in order. */
typedef struct memplan_op {
    uint32_t first, count;
    /* A 3-D convolution's backward pass in two: its weight gradient after
     * the first `count` events, then `mid` events (its input freed, the
     * input's gradient placed, maybe where the input was), then its input
     * gradient. 0: one pass. */
    uint32_t mid;
} memplan_op;

typedef struct memplan {
    int nlayers;
    int n;                  /* samples the buffers are sized for */
    memplan_op *ops;        /* 2 * nlayers + 1; owned */
    memplan_event *events;  /* owned */
    uint32_t nevents;
    uint64_t arena;         /* bytes of the arena, 64-byte aligned */
    uint64_t peak_live;     /* the most bytes alive at once (the arena holds at least this) */
    bool *kept;             /* per layer: its output is kept for the backward pass; owned */
    bool *packed;           /* per layer: kept as bfloat16 (model act_bf16); owned */
    uint32_t recomputes;    /* layer outputs recomputed in one step's backward pass */
} memplan;

/* Operation numbers. */
static inline int memplan_forward_op(const memplan *p, int layer) { return layer; }
static inline int memplan_loss_op(const memplan *p) { return p->nlayers; }
static inline int memplan_backward_op(const memplan *p, int layer) { return 2 * p->nlayers - layer; }

/* A convolution (or transposed convolution) whose output costs at most
 * MEMPLAN_CHEAP_MACS multiply-adds an element: a first convolution over a
 * few input channels, a transposed convolution whose windows do not
 * overlap (kernel <= stride on every axis) over few channels. Its output is
 * not kept but made again in the backward pass, as a norm's is. */
#define MEMPLAN_CHEAP_MACS 64
bool memplan_cheap_conv(const model_layer *l);
/* Whether plan p makes the output of a layer with weights (a convolution:
 * a cheap one, or a costly one the plan chose not to keep) again in the
 * backward pass: from its input and the weights its forward pass used, of
 * which the executor keeps a copy (Weight Streaming's slots have moved on
 * by then). */
bool memplan_weights_again(const memplan *p, const model *m, int layer);

/* Sizes of a layer's buffers for n samples, as the plan allocates them. */
uint64_t memplan_out_bytes(const model *m, int layer, int n);
uint64_t memplan_packed_bytes(const model *m, int layer, int n);
uint64_t memplan_aux_bytes(const model *m, const model_layer *l, int n);
/* The kernels' parameters of a conv2d layer at n samples. */
op_conv2d_params memplan_conv2d_params(const model_layer *l, int n);
/* The input gradients of a layer's backward pass, computed at once (0: it
 * needs none: it adds its output gradient to its inputs' directly). */
uint64_t memplan_scratch_bytes(const model *m, int layer, int n);
/* The loss's scratch: a sigmoid loss's float targets and second gradient,
 * ssce_dice's per-sample sums (totalled over the stripes of partitioned
 * samples); 0 for the others. */
uint64_t memplan_loss_bytes(const model *m, int n);

/* The layer whose buffers a layer's output and gradient are (through
 * flatten views); -1 for the model input. */
int memplan_resolve(const model *m, int layer);

/* Builds the plan of model m for n samples. Returns 0 or -ENOMEM. */
int memplan_build(memplan *p, const model *m, int n);
/* memplan_build, or with keep_all the reference the lean plan is tested
 * against: every output, gradient and saved state kept for the whole step
 * (no buffer shares memory with another, nothing is recomputed). */
int memplan_build_as(memplan *p, const model *m, int n, bool keep_all);
void memplan_free(memplan *p);
