/* Sums over the parts of a partitioned sample. A wse-node that computes
 * one horizontal stripe of every sample (spatial partitions) holds only a
 * share of the elements that a norm's statistics or a loss's sums run
 * over: the operators that need such sums compute this stripe's partial
 * sums and hand them to an op_reduce, which replaces them by the totals
 * over every stripe (and, for synchronised batch norm, every replica). A
 * NULL op_reduce means nothing is partitioned: the partial sums are the
 * totals, and the operators compute exactly what their plain forms do. */
#ifndef OP_REDUCE_H
#define OP_REDUCE_H

#include <stddef.h>

typedef struct op_reduce {
    /* Replaces v[0 .. count) by its sums over the parts; returns 0, or a
     * negative code when the parts could not be reached (the operator then
     * returns it and its outputs are meaningless). */
    int (*sum)(void *ctx, double *v, size_t count);
    void *ctx;
} op_reduce;

static inline int op_reduce_sum(const op_reduce *r, double *v, size_t count)
{
    return r ? r->sum(r->ctx, v, count) : 0;
}

#endif
