/* Every byte a replica holds, computed from the job alone: the model, the
 * replica's batch share and the thread count of the wse-node that runs it
 * (its convolution workspace grows with the threads). The coordinator
 * plans with it and the wse-node's executor allocates by it, so the plan
 * and the process cannot disagree. Pure functions, no allocation but the
 * table's own rows. */
#pragma once

#include <stdint.h>

#include "convplan.h"
#include "memplan.h"
#include "model.h"
#include "plan.pb-c.h"

/* model.spill_packed: the executor writes and reads its bfloat16 copies
 * through a staging buffer of this many bytes, each copy at an offset of
 * the file rounded up to FOOTPRINT_SPILL_ALIGN (direct I/O's alignment). */
#define FOOTPRINT_SPILL_STAGE (32u << 20)
#define FOOTPRINT_SPILL_ALIGN 4096u
#define FOOTPRINT_SPILL_ROUND(b) \
    (((b) + FOOTPRINT_SPILL_ALIGN - 1) / FOOTPRINT_SPILL_ALIGN * FOOTPRINT_SPILL_ALIGN)

/* What the executor holds for one layer, in bytes. */
typedef struct footprint_layer {
    uint64_t act;        /* its output (0 for a flatten: a view) */
    bool kept;           /* the output is kept for the backward pass, else recomputed there */
    bool packed;         /* kept as bfloat16 (activation_dtype), half of act */
    uint64_t dact;       /* the gradient of its output, while it is alive (0 for a flatten) */
    uint64_t aux;        /* saved state: max-pool argmax indices, norm statistics */
    uint64_t workspace;  /* convolution workspace on the wse-node's threads */
    uint64_t scratch;    /* the gradients of all its inputs, computed at once */
} footprint_layer;

/* A replica's memory table. The activations, gradients, saved state and
 * temporaries of a step live in one arena laid out by the lean memory plan
 * (memplan.h); the sums say what keeping every buffer would take. */
typedef struct footprint {
    int n;                    /* samples computed at once: the micro-batch (the share without) */
    int share;                /* samples of the replica's batch share */
    int threads;              /* of the wse-node */
    int nlayers;
    footprint_layer *layers;  /* per layer; owned (footprint_free) */
    memplan plan;             /* the step's buffers; owned */
    uint64_t act, dact, aux;  /* sums over the layers */
    uint64_t kept;            /* of act, the outputs kept for the backward pass */
    uint64_t workspace;       /* one workspace: the largest, rounded up to 64 bytes */
    uint64_t scratch;         /* the largest layer's input gradients at once */
    uint64_t loss;            /* the loss's scratch (memplan_loss_bytes) */
    uint64_t arena;           /* the plan's arena: every buffer above but the workspace */
    uint64_t input;           /* the float inputs made from 8-bit ones (sample.h); 0 for float32 */
    uint64_t accum;           /* micro-batches: one layer's weight gradients, added into the step's */
    uint64_t again;           /* the weights of the convolutions the backward pass makes again
                                 (memplan_weights_again), copied as their forward pass used
                                 them */
    uint64_t spill;           /* model.spill_packed: the staging buffer of the spill file */
    uint64_t spilled;         /* model.spill_packed: the bytes of the spill file */
    uint64_t exec;            /* what the executor allocates: arena, workspace, input, accum,
                                 again, spill */
    uint64_t eager;           /* what it would allocate keeping every buffer for the step */
    uint32_t label_elems;     /* labels per sample */
    uint64_t batches;         /* the batches in flight, as they travel (sample.h): two of the
                                 share, or one (model.feed_one), and as many evaluation
                                 batches where the job evaluates (model.eval_batch) */
    uint64_t weights;         /* every parameter and buffer once, float32 */
    uint64_t rounded;         /* mixed precision: the dense layers' weights in bfloat16, which a
                                 Pipelined replica keeps rounded for its GEMMs */
    uint64_t wslots;          /* Weight Streaming: two slots of the largest layer's weights, two of its gradients */
} footprint;

/* Fills f for model m, n samples and a wse-node of `threads` threads (at
 * least 1). Returns 0, or -ENOMEM (f is then empty). */
int footprint_init(footprint *f, const model *m, int n, int threads);
/* The same for a share of `share` samples computed in micro-batches of
 * `micro` (micro >= share, or < 1: no micro-batches): the executor holds
 * one micro-batch, the batch buffers the whole share. */
int footprint_init_micro(footprint *f, const model *m, int share, int micro, int threads);
/* The largest layer's trainable tensors, in bytes: where a micro-batch's
 * weight gradients are made before they are added to the step's. */
uint64_t footprint_accum_bytes(const model *m);
/* The tensors of the convolutions plan p makes again in the backward pass
 * (memplan_weights_again), each rounded up to 64 bytes: the copy of the
 * weights their forward pass used, which the executor keeps. */
uint64_t footprint_again_bytes(const model *m, const memplan *p);
void footprint_free(footprint *f);

/* int32 labels per sample the model's loss needs: 1 for classification, a
 * class per pixel for segmentation, a 0/1 target per logit otherwise. */
uint32_t footprint_label_elems(const model *m);

/* Bytes of one batch in flight to a replica of `share` samples: a
 * training batch and, where the job evaluates (model.eval_batch), an
 * evaluation batch of at most the share; footprint.batches holds one or
 * two of these (model.feed_one). */
uint64_t footprint_batch_bytes(const model *m, int share);

/* Whether a Pipelined replica keeps the layer's weights rounded to
 * bfloat16 for n samples at once: a dense layer of a mixed-precision
 * model whose GEMMs run in bfloat16 (a workspace planned for them). */
bool footprint_keeps_rounded(const model *m, int layer, int n);
uint64_t footprint_workspace_bytes(const model_layer *l, int n, int threads);
/* Workspace bytes of a conv3d or conv_transpose3d (0 for any other layer)
 * on n samples and `threads` threads, in float32 or (bf16) mixed
 * precision: vol2col's bands exactly, and oneDNN's operands in its
 * blocked layouts with an estimate from above of its scratchpad (whose
 * size only oneDNN knows); the larger of the two. */
uint64_t footprint_vol_workspace(const model_layer *l, int n, int threads, bool bf16);

/* The kernels' parameters of a conv_transpose2d layer at n samples
 * (a conv2d's: memplan_conv2d_params). */
op_conv_transpose2d_params footprint_convt_params(const model_layer *l, int n);

/* Weight Streaming in parts. With part_elems > 0, a dense layer whose
 * weight has more elements than that streams and computes in parts of
 * whole rows of its weight (output units): each part but the last has
 * `rows` rows, a multiple of both the row length and chunk_elems in
 * elements (so no chunk crosses two parts), the largest such that is at
 * most part_elems; the layer's other tensors (the bias) come with its last
 * part. A layer that cannot be split so (not dense, or one aligned part is
 * already above part_elems) goes whole. */
typedef struct footprint_parts {
    uint64_t rows;            /* weight rows per part; the layer's units when whole */
    uint32_t count;           /* parts, 1 when whole */
    uint64_t row_elems;       /* elements per row (the dense layer's inputs); 0 when whole */
} footprint_parts;
footprint_parts footprint_ws_parts(const model *m, int layer, uint64_t part_elems,
                                   uint64_t chunk_elems);
/* Elements of the part's range of the layer's tensors (its weight rows,
 * and the bias with the last), and where it starts among them. */
uint64_t footprint_ws_part_elems(const model *m, int layer, const footprint_parts *pt,
                                 uint32_t part, uint64_t *first);

/* Bytes of the Weight Streaming slots (wslots.h) for a model: two of the
 * largest part's weights, two of its gradients (part_elems 0: whole
 * layers), and in mixed precision two bfloat16 twins of the weight slots
 * as large as the largest layer that arrives whole. */
uint64_t footprint_wslots_bytes(const model *m, uint64_t part_elems, uint64_t chunk_elems);
/* Elements of the largest arrival (part or whole layer), and in *whole
 * (may be NULL) of the largest layer that arrives whole (0: none). */
uint64_t footprint_wslots_elems(const model *m, uint64_t part_elems, uint64_t chunk_elems,
                                uint64_t *whole);

/* The part_elems for Weight Streaming slots of at most slot_bytes in all
 * (footprint_wslots_bytes), or 0 when whole layers fit or no split does. */
uint64_t footprint_ws_part_fit(const model *m, uint64_t slot_bytes, uint64_t chunk_elems);

/* Optimizer state tensors kept per parameter tensor: 0 for plain SGD, 1
 * with momentum, 2 for Adam and AdamW (the optimizer library's
 * optim_state_count says the same). */
unsigned footprint_optimizer_states(const char *optimizer_type, double momentum);

/* Bytes memoryx holds for one parameter tensor of `elems` elements: its
 * weights, with `gradient` its reduced gradient (Weight Streaming; a
 * Pipelined job's gradients never reach memoryx), and for a trainable
 * tensor its optimizer_states tensors of state (memoryx allocates by it). */
uint64_t footprint_shard_tensor_bytes(uint64_t elems, bool trainable, unsigned optimizer_states,
                                      bool gradient);

/* A job's [sparsity] as memoryx holds it: each tensor's level (one a
 * tensor of the model, 0 dense), and whether the pruned tensors are held
 * compact (a static mask streamed packed: their kept elements alone, with
 * a bit an element of mask and a rank every FOOTPRINT_RANK_BLOCK
 * elements; memoryx/mxsparse.c) or dense with a byte an element of mask. */
typedef struct footprint_sparse {
    const float *level;
    bool compact;
} footprint_sparse;

/* Elements of a compact tensor a rank counts the kept ones before. */
#define FOOTPRINT_RANK_BLOCK 4096u

/* Bytes memoryx holds for a tensor of elems elements pruned to level (0:
 * dense, footprint_shard_tensor_bytes), compact or with its byte mask. */
uint64_t footprint_shard_sparse_bytes(uint64_t elems, double level, bool compact, bool trainable,
                                      unsigned optimizer_states, bool gradient);

/* The bits and ranks beside a compact tensor of elems elements. */
uint64_t footprint_compact_index_bytes(uint64_t elems);

/* The same for tensor i of m, pruned as sp says (NULL: a dense model). */
uint64_t footprint_shard_bytes_of(const model *m, size_t i, unsigned optimizer_states,
                                  bool gradient, const footprint_sparse *sp);

/* The tensors of m over nshards memoryx shards, balanced by bytes: largest
 * first to the least loaded shard, ids breaking ties. owner[i] gets tensor
 * i's shard (m->ntensors entries), need[s] what shard s holds by
 * footprint_shard_bytes_of (nshards entries; may be NULL). Returns the
 * most a shard holds, or UINT64_MAX when out of memory. */
uint64_t footprint_shards(const model *m, unsigned optimizer_states, bool gradient,
                          const footprint_sparse *sp, size_t nshards, uint32_t *owner,
                          uint64_t *need);

/* The fewest shards of `have` bytes each that hold m as footprint_shards
 * balances it; 0 when 1024 do not. */
size_t footprint_shards_needed(const model *m, unsigned optimizer_states, bool gradient,
                               const footprint_sparse *sp, uint64_t have);

/* Bytes a replica needs in `mode`: the executor, the batches in flight,
 * and the weights (Pipelined: resident, with their gradients, the reduced
 * gradients and optimizer_states tensors of state each, and in mixed
 * precision the dense layers' weights rounded; Weight Streaming:
 * the slots, the batch-norm statistics and a chunk held while a slot
 * frees). */
uint64_t footprint_replica_bytes(const footprint *f, const model *m, Appliance__ExecMode mode,
                                 unsigned optimizer_states);
