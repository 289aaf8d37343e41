/* The compiler's back end: a checked jobspec and the members chosen for it
 * become the Plan every daemon of the job receives (placement, tree,
 * shards, schedule, memory per replica, execution mode). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jobspec.h"
#include "members.h"
#include "plan.pb-c.h"

typedef struct planner_members {
    member **replicas;   /* wse-nodes, replica i = replicas[i] */
    size_t nreplicas;
    member **shards;     /* memoryx */
    size_t nshards;
    member **swarm;      /* swarmx; swarm[0] is the root */
    size_t nswarm;
    member **workers;
    size_t nworkers;
} planner_members;

/* The members a job is placed on: live members of each role in member-id
 * order, idle ones only or (for feasibility and plans to show) any. */
typedef struct planner_place {
    member *reps[1024], *shards[64], *swarm[1024], *workers[256];
    size_t nr, ns, nx, nw;         /* needed: wse-nodes, memoryx, swarmx, workers */
    size_t gr, gs, gx, gw;         /* found */
    size_t real, simulated;        /* live wse-nodes that compute, that simulate (idle or not) */
    bool sim;                      /* reps are simulated wse-nodes */
} planner_place;

/* Which wse-nodes a job may take. */
typedef enum planner_kind {
    PLANNER_ANY,       /* ones that compute when the cluster has enough, else simulated ones */
    PLANNER_REAL,      /* only ones that compute: the job's first attempt ran on them */
    PLANNER_SIMULATED, /* only simulated ones: its first attempt ran on them */
} planner_kind;

/* Places spec on the members of ms. A job's wse-nodes are all of one kind
 * (--simulate-compute or not), never a mix (planner_kinds_refusal says
 * why): with PLANNER_ANY, ones that compute when the cluster has enough of
 * them (idle or not: the job waits for them), else simulated ones when it
 * has enough of those; a later attempt keeps the kind of the first.
 * Returns whether every role has as many as the job needs (pl says how
 * many of each it found either way). */
bool planner_place_members(const members *ms, const jobspec *spec, bool idle, planner_kind kind,
                           planner_place *pl);

/* When pl found too few wse-nodes of either kind although the two kinds
 * together would do: writes into err why the job is refused, naming the
 * live wse-nodes of each kind, and returns true; else false. */
bool planner_kinds_refusal(const members *ms, const planner_place *pl, char *err, size_t errlen);

/* Builds the plan (it carries spec's text to the daemons that compile the
 * model again; spec and its model are only read). chunk_elems is the float32 elements per chunk. On success
 * returns 0 and a packed plan in *out (malloc'd, *outlen bytes); otherwise a
 * negative code and a message naming what does not fit and what to change. */
int planner_build(const jobspec *spec, const char *job_id, const planner_members *pm,
                  uint64_t chunk_elems, uint8_t **out, size_t *outlen, char *err, size_t errlen);

/* SwarmX nodes a tree over `replicas` replicas with fan-out `fanout` needs:
 * leaves of at most fanout replicas, then levels of at most fanout nodes up
 * to one root. */
size_t planner_swarm_nodes(size_t replicas, size_t fanout);

/* Whether spec's one wse-node streams straight from its one memoryx shard
 * (runconfig.swarmx_relay false): a swarmx over a lone replica would only
 * copy every weight and gradient byte once more. */
bool planner_direct(const jobspec *spec);

/* Whether a lone replica of spec's job would (planner_direct with
 * num_csx 1): recovery left with no swarmx may go on with one. */
bool planner_direct_alone(const jobspec *spec);

/* SwarmX nodes spec's job takes: none when direct, else its tree's. */
size_t planner_tree_nodes(const jobspec *spec);

/* Bytes one replica needs for a batch share of `batch` samples in `mode`
 * on a wse-node of `threads` compute threads (0: 1), with an optimizer
 * keeping optimizer_states tensors per parameter: the footprint's
 * (footprint.h), which the wse-node's executor allocates by. */
/* A job's step timeout in milliseconds: runconfig.step_timeout_seconds
 * where given (0: none); else PLANNER_STEP_TIMEOUT_S, or longer where the
 * plan's step is long: PLANNER_STEP_TIMEOUT_WORK times a step's work (3
 * forward passes of a wse-node's samples, or its stripe's) at
 * PLANNER_THREAD_FLOPS a thread, `threads` being the fewest a wse-node of
 * the job has. */
#define PLANNER_STEP_TIMEOUT_S 600
#define PLANNER_STEP_TIMEOUT_WORK 2
#define PLANNER_THREAD_FLOPS 10e9
uint64_t planner_step_timeout_ms(const jobspec *spec, const Appliance__Plan *p, unsigned threads);

uint64_t planner_replica_bytes(const model *m, uint64_t batch, unsigned threads,
                               Appliance__ExecMode mode, unsigned optimizer_states);
/* The same for a share computed in micro-batches of `micro` samples (0:
 * none). */
uint64_t planner_replica_bytes_micro(const model *m, uint64_t batch, uint64_t micro,
                                     unsigned threads, Appliance__ExecMode mode,
                                     unsigned optimizer_states);
/* Of those bytes, what a simulated wse-node (--simulate-compute) does not
 * allocate: the executor (activations, workspace, float inputs) and, in
 * Pipelined mode, the dense layers' weights kept rounded. The rest, its
 * weights or slots and its batches in flight, it holds as a real one. */
uint64_t planner_replica_bytes_unsimulated(const model *m, uint64_t batch, uint64_t micro,
                                           unsigned threads, Appliance__ExecMode mode);
