/* worker: streams each replica its share of every global batch, ahead of
 * need, as far as the replica's credits allow. */
#pragma once

#include "dataset.h"
#include "node.h"

typedef struct wk_feed {
    conn *c;                  /* the wse-node */
    uint32_t replica;
    uint32_t batch;           /* samples of each step for this replica */
    uint32_t offset;          /* first sample of the global batch */
    uint32_t slot, slots;     /* we serve steps with step % slots == slot */
    uint64_t next_step;
    uint32_t credits;
    struct wk_job *job;
} wk_feed;

typedef struct wk_job {
    char id[40];
    Appliance__Plan *plan;    /* owned */
    dataset data;
    wk_feed *feeds;           /* one per replica we serve */
    size_t nfeeds;
    bool ready_sent;
    uint64_t batches_sent;
} wk_job;

typedef struct worker {
    node *n;
    wk_job *job;
} worker;

void worker_role(node_role *role);
