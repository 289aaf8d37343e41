/* The weight memory of a wse-node in Weight Streaming mode: two slots of
 * the largest layer's weights and two of its gradients, nothing more.
 * Within a step the weights arrive layer by layer in the order of the
 * static schedule (forward, then the layers whose backward pass needs them
 * again); arrival a lands in slot a % 2 once arrival a - 2 has been
 * consumed by its computation, so the next layer's weights stream in while
 * the current one computes (double buffering). Gradients of the backward
 * pass alternate between two gradient slots in the same way; a slot is
 * reused once the gradients it held have been sent.
 *
 * The backward pass starts where the forward one ended: the first layers
 * it computes (kept, the plan's bwd_kept) read the weights the forward
 * pass's last one or two arrivals left in the slots, and are not streamed
 * again. In a training pass their forward computation does not free their
 * slots; their backward computations do, together once the last of them
 * is done (they run in the reverse of their arrival order).
 *
 * This is a pure state machine over the model and the schedule: the caller
 * feeds it chunk arrivals and compute completions. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "footprint.h"
#include "model.h"

typedef struct wslots {
    const model *m;            /* not owned */
    float *slot[2];            /* weights of an arriving or computing part */
    float *gslot[2];           /* gradients of a part's backward pass */
    uint16_t *slot16[2];       /* mixed precision: a whole layer's weights as they arrive,
                                  in bfloat16 (the GEMMs take them; slot holds them widened) */
    size_t slot16_elems;       /* of each: the largest layer that arrives whole */
    size_t slot_elems;         /* floats of each slot: the largest part's tensors */
    footprint_parts *parts;    /* per layer: how it is split (footprint_ws_parts) */
    int narrivals;             /* parts arriving per training step */
    int nfwd;                  /* of which the forward pass */
    int active;                /* arrivals of the pass in progress */
    int *arr_layer;            /* per arrival: its layer */
    uint32_t *arr_part;        /* per arrival: its part of the layer */
    uint64_t *arr_first;       /* per arrival: where its range starts among the layer's elements */
    uint64_t *arr_elems;       /* per arrival: floats of its range */
    int *fwd_arr;              /* per layer: its first forward arrival, or -1 */
    int *bwd_arr;              /* per layer: its first backward arrival, or -1 */
    int *keep_arr;             /* per layer: kept, the forward arrival its backward pass
                                  reads; or -1 */
    int nkept;                 /* arrivals kept across the turn of a training pass (0..2) */
    int *gseq;                 /* per layer: its first part's place among backward parts with
                                  gradients, or -1 */
    uint64_t *toff;            /* per tensor: its offset among its layer's elements */
    /* The step in progress: */
    int recv;                  /* the arrival being received */
    uint64_t recv_have;        /* floats of it received */
    int consumed;              /* arrivals whose computation finished */
    bool training;             /* the pass has a backward half */
    int kept_done;             /* kept arrivals whose backward computation finished */
    int glayer[2];             /* the layer whose gradients a gradient slot holds, or -1 */
    size_t bytes;              /* allocated: footprint_wslots_bytes */
} wslots;

/* Sets up the slots for a schedule: fwd and bwd list the tensor ids memoryx
 * streams in the forward and backward passes (layer by layer); with
 * part_elems > 0 large dense layers go in parts (footprint_ws_parts, with
 * the plan's chunk_elems); the first `kept` layers with tensors from the
 * last one down are kept across the turn. Returns 0, -EINVAL when the lists
 * do not stream whole layers in order or the kept layers are not the
 * forward pass's last two arrivals, or -ENOMEM. */
int wslots_init(wslots *w, const model *m, const uint32_t *fwd, size_t nfwd, const uint32_t *bwd,
                size_t nbwd, uint32_t kept, uint64_t part_elems, uint64_t chunk_elems);
void wslots_deinit(wslots *w);

/* Parts the layer's passes go in (1: whole), and the weight rows of one. */
uint32_t wslots_parts(const wslots *w, int layer);
void wslots_part_rows(const wslots *w, int layer, uint32_t part, uint64_t *r0, uint64_t *r1);

/* Starts a pass over the weights: a training step (forward and backward
 * arrivals) or an evaluation batch (forward arrivals only). Nothing received,
 * nothing consumed. Chunks of a pass that has not started are held by the
 * caller (wslots_dest says blocked). */
void wslots_new_pass(wslots *w, bool eval);

/* Where a chunk of tensor `tensor` (elements [offset, offset+count)) goes:
 * a pointer into its slot, or NULL. With NULL, *blocked tells whether the
 * chunk is the next one expected but its slot is still in use (the caller
 * holds it and stops reading); otherwise it is out of order or out of
 * range (or crosses two parts). */
float *wslots_dest(wslots *w, uint32_t tensor, bool backward, uint64_t offset, uint64_t count,
                   bool *blocked);

/* Accounts for count floats of the arrival being received. Returns true when
 * the next arrival cannot land yet (both slots are in use). */
bool wslots_received(wslots *w, uint64_t count);

/* Whether a part of a layer's weights for its forward (or backward) pass
 * is all in. */
bool wslots_ready(const wslots *w, int layer, uint32_t part, bool backward);

/* Points wp (per tensor) at the part's weights in its slot for the pass
 * (a weight split in parts: at the part's first row; the other tensors
 * with the last part only), and for a backward pass gp at a gradient slot
 * the same way. w16p (may be NULL): a whole layer's first tensor at its
 * bfloat16 copy (mixed precision), the rest NULL. */
void wslots_bind(const wslots *w, int layer, uint32_t part, bool backward, float **wp, float **gp,
                 uint16_t **w16p);
/* Mixed precision: where the bfloat16 of count weights wslots_dest placed
 * at dst land in the slot's twin, or NULL where the twin does not reach
 * (a layer in parts: its chunks are widened in place); and back. */
uint16_t *wslots_dest16(const wslots *w, const float *dst, uint64_t count);
float *wslots_dest32(const wslots *w, const uint16_t *dst16);
/* Whether p lies in a twin. */
bool wslots_in_twin(const wslots *w, const void *p);

/* The layer whose gradients still occupy the gradient slot a backward pass
 * of the layer's part would use, or -1: its gradients must have been sent
 * first. */
int wslots_grad_blocker(const wslots *w, int layer, uint32_t part);

/* The computation of a layer part's pass finished: its weight slot is
 * free. Returns true when a blocked arrival may now land. */
bool wslots_consume(wslots *w, int layer, uint32_t part, bool backward);

/* Whether layer's pass streams weights at all (a kept layer's backward
 * pass does not: it reads its forward arrival's). */
bool wslots_streams(const wslots *w, int layer, bool backward);
