/* swarmx's chunk queues, apart from its links so that they can be tested
 * alone: the reference-counted chunk buffers, the children's gradient
 * queues and their sum in child order, and the ordered merge of several
 * memoryx shards' weight chunks by seq. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conn.h"
#include "conn_link.h"
#include "plan.h"
#include "stream.pb-c.h"

struct swx_job;

typedef struct swx_buf {
    int refs;                    /* sends in flight + the holder */
    uint32_t len;
    struct swx_buf *next;        /* in a child's gradient queue */
    Appliance__GradChunk hdr;    /* for gradient chunks: what it is */
    Appliance__WeightChunk whdr; /* for weight chunks held for the ordered merge */
    uint8_t data[];
} swx_buf;

typedef struct swx_child {
    conn *c;                     /* NULL until it says hello */
    bool replica;                /* a wse-node (else a child swarmx) */
    uint32_t index;              /* replica or swarmx index */
    swx_buf *head, *tail;        /* gradient chunks waiting for the others */
    size_t queued;
} swx_child;

typedef struct swx_up {
    conn_link link;              /* to a memoryx shard or the parent swarmx */
    uint32_t shard;              /* shard index, for routing gradients */
    bool ready;
    struct swx_job *job;
    swx_buf *qhead, *qtail;      /* weight chunks that came before their turn */
    size_t qlen;
} swx_up;

#define SWX_CHILD_QUEUE_MAX PLAN_SWARM_CHILD_QUEUE /* gradient chunks buffered per child before it is paused */
#define SWX_MERGE_QUEUE PLAN_SWARM_MERGE_QUEUE     /* weight chunks held per shard before it is paused */

/* A chunk buffer of len payload bytes, one reference; NULL when out of
 * memory. */
swx_buf *swx_buf_new(uint32_t len);
/* Drops a reference; the last frees the buffer. NULL is fine. */
void swx_buf_unref(swx_buf *b);

/* dst[i] += src[i] for count floats, four at a time: the same sum, element
 * by element, as the plain loop. */
void swx_add(float *restrict dst, const float *restrict src, uint64_t count);

/* Appends gradient chunk b (its hdr filled) to child k's queue. Returns
 * true when the queue reached SWX_CHILD_QUEUE_MAX (pause the child). */
bool swx_child_push(swx_child *k, swx_buf *b);

/* When every child has a chunk at the head of its queue: takes them,
 * checks they are the same piece of the same tensor and step, and sums
 * them in child order (child 0's buffer + child 1's + ...) into child 0's
 * buffer, which *sum then owns; the others are released. popped(k, arg)
 * is called for each child whose queue fell below SWX_CHILD_QUEUE_MAX
 * (resume it). Returns 1 with *sum, 0 when a child's queue is empty, or
 * -EPROTO (the streams diverge) with why. With bf16 the chunks carry
 * bfloat16: they are widened and summed in float32 in child order, and the
 * sum rounded once (-ENOMEM when the float32 sum finds no memory). */
int swx_reduce_take(swx_child *kids, size_t nkids, swx_buf **sum, bool bf16,
                    void (*popped)(swx_child *k, void *arg), void *arg, char *why, size_t whylen);

/* Appends weight chunk b (its whdr filled) to shard u's merge queue.
 * Returns true when it reached SWX_MERGE_QUEUE (pause the shard). */
bool swx_merge_push(swx_up *u, swx_buf *b);

/* The chunk numbered seq at the head of one of the shards' queues, taken
 * off it (*from says which shard; its queue falls below SWX_MERGE_QUEUE
 * when *unpause), or NULL when it has not arrived. */
swx_buf *swx_merge_take(swx_up *ups, size_t nup, uint64_t seq, size_t *from, bool *unpause);
