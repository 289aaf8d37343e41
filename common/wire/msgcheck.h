/* Checks of an incoming message on its own, or against the job's plan, made
 * before a handler acts on it: lengths, indices and ranges a peer could get
 * wrong. Pure functions, so that they can be tested and fuzzed apart from the
 * daemons; what depends on a daemon's state (the current step, which tensors
 * a shard holds, free buffers) stays in the handler.
 *
 * Each returns 0, or a negative errno-style code with a one-line message in
 * err (always NUL-terminated when errlen > 0). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "envelope.pb-c.h"
#include "plan.pb-c.h"

/* Elements of a tensor the plan may declare (a bound far above any real
 * model that keeps byte counts of a tensor and its optimizer state far from
 * overflow). */
#define MSGCHECK_MAX_TENSOR_ELEMS (1ull << 40)
/* Dimensions of a plan tensor. */
#define MSGCHECK_MAX_DIMS 8
/* Credits a worker accepts outstanding per replica. */
#define MSGCHECK_MAX_CREDITS 64
/* Classes of a segmentation evaluation report. */
#define MSGCHECK_MAX_EVAL_CLASSES 256
/* Bytes of a job id (with its NUL): the daemons keep it in char[40]. */
#define MSGCHECK_JOB_ID_MAX 40

/* Hello: the protocol version and a nonce of AUTH_NONCE_LEN bytes.
 * -EPROTONOSUPPORT for another version, -EPROTO otherwise. */
int msgcheck_hello(const Appliance__Hello *h, char *err, size_t errlen);

/* Register from a peer that authenticated as peer_role: a daemon role equal
 * to peer_role, a name of 1..63 bytes, an address under 128 bytes. -EINVAL. */
int msgcheck_register(const Appliance__Register *r, Appliance__Role peer_role, char *err,
                      size_t errlen);

/* A plan (JobStart): everything a daemon indexes with is in range. Tensor
 * ids are their positions, dims multiply to at most
 * MSGCHECK_MAX_TENSOR_ELEMS, shards are owned by a shard of the plan; the
 * schedules name tensors of the plan; the tree's parents and children, the
 * replicas' swarmx parents and the workers' replicas exist (a plan without a
 * tree has one replica, parent -1, streaming from its one shard); a chunk
 * fits a frame. NULL (a JobStart without a plan) is refused too. -EINVAL. */
int msgcheck_plan(const Appliance__Plan *p, char *err, size_t errlen);

/* The elements of plan tensor t (after msgcheck_plan: at most
 * MSGCHECK_MAX_TENSOR_ELEMS; before, saturated at UINT64_MAX). */
uint64_t msgcheck_tensor_elems(const Appliance__PlanTensor *t);

/* Bytes per element of the plan's weight and gradient chunks: 2 with
 * mixed precision (bfloat16 on the wire), else 4. */
uint32_t msgcheck_wire_elem(const Appliance__Plan *p);

/* A weight chunk of len payload bytes against a checked plan: a tensor of
 * the plan, total its size, [offset, offset + count) inside it, len ==
 * count * msgcheck_wire_elem. Packed (a sparse tensor's forward or backward
 * weights, sstream.h): len is what its packing of kept elements takes, less
 * than dense. -EINVAL. */
int msgcheck_weight_chunk(const Appliance__WeightChunk *w, const Appliance__Plan *p, uint32_t len,
                          char *err, size_t errlen);

/* The payload of a weight chunk that passed msgcheck_weight_chunk, once it
 * is in: a packed one's index (sstream_check: a bitmask setting kept bits
 * within the chunk, positions within it and rising). Dense: nothing to
 * check. -EINVAL, naming the tensor and range. */
int msgcheck_weight_payload(const Appliance__WeightChunk *w, const Appliance__Plan *p,
                            const void *payload, uint32_t len, char *err, size_t errlen);

/* A gradient chunk, as msgcheck_weight_chunk; packed only where
 * msgcheck_grads_pack. -EINVAL. */
int msgcheck_grad_chunk(const Appliance__GradChunk *g, const Appliance__Plan *p, uint32_t len,
                        char *err, size_t errlen);

/* The payload of a gradient chunk, as msgcheck_weight_payload. -EINVAL. */
int msgcheck_grad_payload(const Appliance__GradChunk *g, const Appliance__Plan *p,
                          const void *payload, uint32_t len, char *err, size_t errlen);

/* Whether tensor id's gradient chunks may travel packed: a sparse tensor
 * streamed packed, of a type whose update reads the gradient at kept
 * positions only (static, gmp, set; rigl's regrowth reads it dense). */
bool msgcheck_grads_pack(const Appliance__Plan *p, uint32_t id);

/* A frame of a batch, with len payload bytes, against a checked plan: the
 * batch (total bytes) is n samples of sample_elems inputs and label_elems
 * labels in the encodings of the plan's input (sample.h); the frame is the
 * range [offset, offset + len) of it, at most one chunk (chunk_elems * 4
 * bytes) and not empty unless the batch is; a training batch is for a
 * replica of the plan and has its batch share of samples; an eval batch is
 * one of the plan's eval_batches and has at most eval_batch samples. That
 * the frames of a batch come in order is the receiver's to check.
 * -EINVAL. */
int msgcheck_batch(const Appliance__Batch *b, const Appliance__Plan *p, uint32_t len, char *err,
                   size_t errlen);

/* A credit against a checked plan: at most MSGCHECK_MAX_CREDITS batches, or
 * the request of one of the plan's eval batches. -EINVAL. */
int msgcheck_credit(const Appliance__Credit *c, const Appliance__Plan *p, char *err, size_t errlen);

/* A stream hello: a job id, and the role the receiver takes data links from
 * (want; ROLE_UNKNOWN: a swarmx or a wse-node). With a checked plan, its
 * index names a tree node (swarmx) or a replica (wse-node) of the plan.
 * -EPROTO for the role, -EINVAL otherwise. */
int msgcheck_stream_hello(const Appliance__StreamHello *h, Appliance__Role want,
                          const Appliance__Plan *p, char *err, size_t errlen);

/* An evaluation report against a checked plan: a replica of the plan, as
 * many intersections as unions, at most MSGCHECK_MAX_EVAL_CLASSES. -EINVAL. */
#define MSGCHECK_MAX_PARTS 64          /* stripes of one sample */
#define MSGCHECK_MAX_COLLECTIVE (1 << 20) /* doubles of one collective sum */

/* The stripes of every sample: the plan's spatial_partitions, at least 1. */
uint32_t msgcheck_parts(const Appliance__Plan *p);

/* A frame of halo rows: in a partitioned job, len bytes of count floats
 * within the exchange's total, no more than a chunk. */
int msgcheck_halo(const Appliance__Halo *h, const Appliance__Plan *p, uint32_t len, char *err,
                  size_t errlen);

/* A collective sum: in a partitioned job, of a group the plan has, len
 * bytes of 1 to MSGCHECK_MAX_COLLECTIVE doubles. */
int msgcheck_collective(const Appliance__Collective *c, const Appliance__Plan *p, uint32_t len,
                        char *err, size_t errlen);

int msgcheck_eval_report(const Appliance__EvalReport *r, const Appliance__Plan *p, char *err,
                         size_t errlen);
