/* swarmx's collective sums (Plan.spatial_partitions), apart from its links
 * so that they can be tested alone: which of a tree node's children have a
 * replica of a sample group beneath them, one contribution per child in
 * scope for each pending key, and their sum in child order, so that the
 * total does not depend on the order the contributions arrive in. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "plan.pb-c.h"
#include "queue.h"

#define SWX_COLL_ALL UINT32_MAX      /* scope: every wse-node of the job (synchronised batch norm) */
#define SWX_COLL_PENDING_PER_GROUP 4 /* keys pending at once per sample group beneath the node, */
#define SWX_COLL_PENDING_EXTRA 8     /* and this many more (scope all): a wse-node waits for one
                                        total before its next sum, so these are far above need */

/* What a sum is of: the executor's tag at a step (or an evaluation's
 * forward pass at that step) over one sample group's stripes, or over
 * every wse-node. */
typedef struct swx_coll_key {
    uint64_t step;
    uint32_t tag;                /* the executor's (layer << 3 | pass) */
    uint32_t scope;              /* a sample group, or SWX_COLL_ALL */
    bool eval;
} swx_coll_key;

/* One pending key: the contributions in so far. */
typedef struct swx_coll {
    swx_coll_key key;
    size_t need;                 /* children in scope */
    size_t have;                 /* contributions in */
    uint32_t len;                /* payload bytes of every contribution (the first's) */
    swx_buf **parts;             /* a slot per child, in child order; NULL until it contributes */
} swx_coll;

typedef struct swx_colls {
    size_t nkids;
    uint32_t ngroups;            /* sample groups of the plan */
    size_t row;                  /* bytes of a row of beneath */
    uint8_t *beneath;            /* nkids rows: bit g of row k, a replica of group g is beneath child k */
    swx_coll *pending;           /* limit slots, npending in use (in no order) */
    size_t npending;
    size_t limit;                /* SWX_COLL_PENDING_PER_GROUP * groups beneath + SWX_COLL_PENDING_EXTRA */
} swx_colls;

/* The table of tree node `me` of a checked plan with spatial partitions:
 * its children in the order swx_job's are (children_replicas, then
 * children_swarmx), and the replicas beneath each, following
 * children_swarmx down the plan's tree. Returns 0, or -ENOMEM / -EINVAL (a
 * child the plan does not have) with why; t is then empty. */
int swx_colls_init(swx_colls *t, const Appliance__Plan *p, const Appliance__PlanSwarmNode *me,
                   char *why, size_t whylen);

/* Whether child k takes part in sums of scope: every child for
 * SWX_COLL_ALL, else those with a replica of the group beneath them. */
bool swx_colls_in_scope(const swx_colls *t, size_t k, uint32_t scope);

/* Child k's contribution b (b->len bytes of native doubles) to key. The
 * table takes b whatever the outcome. Returns 0 while children in scope
 * have not contributed; 1 when this was the last: *sum holds the children's
 * contributions added element by element in child order (the first child
 * in scope's buffer, which *sum then owns), and the key is no longer
 * pending. Refuses, with why, a child out of scope or one that contributed
 * to the key already, and a length other than the key's first (-EPROTO), a
 * new key past the limit (-ENOBUFS), no memory (-ENOMEM). */
int swx_colls_add(swx_colls *t, const swx_coll_key *key, size_t k, swx_buf *b, swx_buf **sum,
                  char *why, size_t whylen);

/* Releases every pending contribution and the table; t is left empty. An
 * empty (zeroed) table is fine. */
void swx_colls_free(swx_colls *t);
