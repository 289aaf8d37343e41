/* The weight memory of a wse-node in Pipelined mode: every tensor resident
 * for the whole job, streamed in once at the job's first step (with the
 * optimizer state of its trainable tensors when a resumed job must give the
 * replica its state), then updated in place by the replica itself. The
 * counterpart of wslots.h, with the same shape of interface: where a chunk
 * goes, what arrived, whether a layer's weights are all in. A pure state
 * machine over the caller's buffers: it allocates only its own table. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "optim.h"

/* One resident tensor. */
typedef struct wresident_tensor {
    float *w;            /* its weights (the caller's) */
    optim_state *st;     /* its optimizer state (the caller's), or NULL */
    uint64_t n;          /* elements */
    uint32_t states;     /* state tensors streamed in after the weights (resumed jobs) */
    uint64_t have;       /* elements received, weights and states */
} wresident_tensor;

typedef struct wresident {
    const model *m;      /* not owned */
    wresident_tensor *t; /* per model tensor; owned */
    size_t nt;
} wresident;

/* Sets up the table for model m: tensors bound with wresident_bind_tensor.
 * Returns 0 or -ENOMEM. */
int wresident_init(wresident *r, const model *m);
void wresident_deinit(wresident *r);

/* Binds tensor i to its buffer w of n elements and, when states > 0, its
 * optimizer state st whose first `states` tensors stream in after it. */
void wresident_bind_tensor(wresident *r, size_t i, float *w, uint64_t n, optim_state *st,
                           uint32_t states);

/* Where a chunk of tensor `tensor` goes: state 0 its weights, state k > 0
 * its optimizer state tensor k - 1, elements [offset, offset + count) of
 * total. NULL when the chunk does not fit (an unknown tensor or state, a
 * total that is not the tensor's, a range outside it). */
float *wresident_dest(wresident *r, uint32_t tensor, uint32_t state, uint64_t offset,
                      uint64_t count, uint64_t total);

/* Accounts for count elements of tensor `tensor` received. */
void wresident_received(wresident *r, uint32_t tensor, uint64_t count);

/* Whether every tensor of layer has all its weights (and streamed states). */
bool wresident_ready(const wresident *r, int layer);
