/* The order of a job's weight stream, defined once: which chunks memoryx
 * sends for a step, in which order, with which job-wide sequence numbers.
 * memoryx's pump sends what the cursor yields; swarmx checks every chunk it
 * forwards against a cursor over all shards; its unit test holds the two to
 * the same numbering.
 *
 * A step's stream: in Weight Streaming, first one forward pass of the
 * fwd_stream list per evaluation batch when the job evaluates at that step
 * (plan_eval_at), then, if the step trains (step < max_steps), the forward
 * list and the bwd_stream list; in Pipelined, the weights once, at the
 * job's first step (with the optimizer state of trainable tensors when a
 * resumed job must give the replicas their state), and nothing after.
 * Each tensor goes in chunks of plan->chunk_elems elements; a shard sends
 * its own tensors only, but every shard counts every chunk in seq, so the
 * chunks of all shards merge into one order by seq. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "plan.pb-c.h"
#include "stream.pb-c.h"

#define PLAN_STREAM_ALL_SHARDS UINT32_MAX /* a cursor over every shard's chunks */

/* One chunk: what a WeightChunk header says of it. */
typedef struct plan_chunk {
    uint64_t step;            /* the step whose stream it belongs to */
    uint32_t tensor;          /* plan tensor id */
    uint64_t offset, count;   /* elements [offset, offset + count) */
    uint64_t total;           /* elements of the tensor */
    uint32_t state;           /* 0: weights; i > 0: optimizer state tensor i - 1 */
    uint64_t seq;             /* its place in the job's stream, every shard's chunks counted */
    uint32_t eval_pass;       /* the evaluation batch it is streamed for, 1-based; 0: training */
    Appliance__Pass pass;     /* forward, backward, or resident (Pipelined) */
} plan_chunk;

/* A cursor over one step's stream. Plain data: copy it to look ahead. */
typedef struct plan_stream {
    const Appliance__Plan *plan; /* not owned */
    uint32_t shard;           /* whose chunks it yields, or PLAN_STREAM_ALL_SHARDS */
    uint32_t states;          /* optimizer state tensors per trainable tensor */
    uint64_t step;            /* the step being streamed */
    bool training;            /* the step's stream has the training passes */
    bool done;                /* nothing left of the step's stream */
    uint32_t eval_pass;       /* the evaluation batch being streamed, 1-based; 0: training */
    int list;                 /* 0: fwd_stream, 1: bwd_stream */
    size_t pos;               /* index in the list */
    uint64_t off;             /* element offset in the tensor */
    uint32_t sidx;            /* 0: weights; i > 0: optimizer state i - 1 */
    uint64_t seq;             /* the seq of the chunk at the cursor */
} plan_stream;

/* Optimizer state tensors per trainable tensor of the plan's optimizer:
 * 0 for plain SGD, 1 with momentum, 2 for Adam and AdamW (what the
 * optimizer library keeps, optim_state_count). */
uint32_t plan_stream_states(const Appliance__Plan *p);

/* Elements of plan tensor id. */
uint64_t plan_stream_tensor_elems(const Appliance__Plan *p, uint32_t id);

/* Positions s at the start of step's stream for shard (or all shards) of
 * plan p, whose optimizer keeps `states` state tensors per trainable
 * tensor; seq is the job's stream position (0 at the job's first step, then
 * where the previous step's stream ended). A step that streams nothing
 * (Pipelined after the first step) starts done. */
void plan_stream_start(plan_stream *s, const Appliance__Plan *p, uint32_t shard, uint32_t states,
                       uint64_t step, uint64_t seq);

/* The chunk at the cursor, the cursor moved past what is not the shard's
 * (other shards' tensors, counted in seq) and past the end of lists and
 * passes. Returns false when the step's stream is done (s->done; s->seq is
 * then where the next step's stream starts). Calling it again without
 * plan_stream_take gives the same chunk. */
bool plan_stream_next(plan_stream *s, plan_chunk *c);

/* Moves past the chunk plan_stream_next gave (it was sent, or checked). */
void plan_stream_take(plan_stream *s);

/* For a receiver of the whole stream in seq order (swarmx, a wse-node):
 * checks that w is the next chunk of plan p's stream (every shard's; the
 * first chunk of a step opens that step's stream, zero s before the first)
 * and moves past it. Returns 0, or -EPROTO with what was expected in why. */
int plan_stream_expect(plan_stream *s, const Appliance__Plan *p, const Appliance__WeightChunk *w,
                       char *why, size_t whylen);
