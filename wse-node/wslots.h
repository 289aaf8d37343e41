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
 * This is a pure state machine over the model and the schedule: the caller
 * feeds it chunk arrivals and compute completions. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"

typedef struct wslots {
    const model *m;            /* not owned */
    float *slot[2];            /* weights of an arriving or computing layer */
    float *gslot[2];           /* gradients of a layer's backward pass */
    size_t slot_elems;         /* floats of each slot: the largest layer's tensors */
    int narrivals;             /* layers arriving per training step */
    int nfwd;                  /* of which the forward pass */
    int active;                /* arrivals of the pass in progress */
    int *arr_layer;            /* per arrival: its layer */
    uint64_t *arr_elems;       /* per arrival: floats of the layer's tensors */
    int *fwd_arr;              /* per layer: its forward arrival, or -1 */
    int *bwd_arr;              /* per layer: its backward arrival, or -1 */
    int *gseq;                 /* per layer: its place among backward passes with gradients, or -1 */
    uint64_t *toff;            /* per tensor: its offset within its layer's slot */
    /* The step in progress: */
    int recv;                  /* the arrival being received */
    uint64_t recv_have;        /* floats of it received */
    int consumed;              /* arrivals whose computation finished */
    int glayer[2];             /* the layer whose gradients a gradient slot holds, or -1 */
    size_t bytes;              /* allocated: footprint_wslots_bytes */
} wslots;

/* Sets up the slots for a schedule: fwd and bwd list the tensor ids memoryx
 * streams in the forward and backward passes (layer by layer). Returns 0,
 * -EINVAL when the lists do not stream whole layers in order, or -ENOMEM. */
int wslots_init(wslots *w, const model *m, const uint32_t *fwd, size_t nfwd, const uint32_t *bwd,
                size_t nbwd);
void wslots_deinit(wslots *w);

/* Starts a pass over the weights: a training step (forward and backward
 * arrivals) or an evaluation batch (forward arrivals only). Nothing received,
 * nothing consumed. Chunks of a pass that has not started are held by the
 * caller (wslots_dest says blocked). */
void wslots_new_pass(wslots *w, bool eval);

/* Where a chunk of tensor `tensor` (elements [offset, offset+count)) goes:
 * a pointer into its slot, or NULL. With NULL, *blocked tells whether the
 * chunk is the next one expected but its slot is still in use (the caller
 * holds it and stops reading); otherwise it is out of order or out of
 * range. */
float *wslots_dest(wslots *w, uint32_t tensor, bool backward, uint64_t offset, uint64_t count,
                   bool *blocked);

/* Accounts for count floats of the arrival being received. Returns true when
 * the next arrival cannot land yet (both slots are in use). */
bool wslots_received(wslots *w, uint64_t count);

/* Whether a layer's weights for its forward (or backward) pass are all in. */
bool wslots_ready(const wslots *w, int layer, bool backward);

/* Points wp (per tensor) at the layer's weights in its slot for the pass,
 * and for a backward pass gp at a gradient slot. */
void wslots_bind(const wslots *w, int layer, bool backward, float **wp, float **gp);

/* The layer whose gradients still occupy the gradient slot a backward pass
 * of `layer` would use, or -1: its gradients must have been sent first. */
int wslots_grad_blocker(const wslots *w, int layer);

/* The computation of a layer's pass finished: its weight slot is free.
 * Returns true when a blocked arrival may now land. */
bool wslots_consume(wslots *w, int layer, bool backward);

/* Whether layer's pass streams weights at all. */
bool wslots_streams(const wslots *w, int layer, bool backward);
