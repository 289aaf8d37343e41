/* wse-node: the node's state (the role's options, its job, its compute
 * thread, what /metrics shows) and where a replica's time goes: the types
 * main.c, replica.h's role and the replica's files (wjob.h) share. */
#pragma once

#include "blas_check.h"
#include "compute.h"
#include "jobhost.h"
#include "metrics.h"
#include "model.h"
#include "node.h"
#include "sim.h"

typedef struct wn_job wn_job;

/* Where a replica's time goes, step by step (StepReport.phases, /metrics):
 * computing in a stage, or waiting with the compute thread idle for what
 * wn__advance found missing; "other" is the time between a task's end and
 * the loop's next decision. */
enum wn_phase {
    WN_PH_FORWARD, WN_PH_LOSS, WN_PH_BACKWARD, WN_PH_UPDATE, WN_PH_EVAL,
    WN_PH_WAIT_BATCH, WN_PH_WAIT_WEIGHTS, WN_PH_WAIT_GRADS_SENT, WN_PH_WAIT_REDUCED,
    WN_PH_WAIT_STRIPES, WN_PH_WAIT_CHECKPOINT, WN_PH_OTHER,
    WN_PHASES
};
extern const char *const wn_phase_names[WN_PHASES];

/* The wse-node's own options (its key table: wse_node_role). */
typedef struct wse_node_options {
    uint64_t wafer_memory;   /* declared on-wafer memory, bytes; 0: the default */
    char wafer_share[32];    /* or this share of the host's memory (host_share_parse); "": none */
    uint32_t threads;        /* kernel threads */
    char simulate[300];      /* --simulate-compute as given; "": the kernels compute */
    char spill_dir[512];     /* where a job's bfloat16 copies may spill (model.spill_packed);
                                "": nowhere */
} wse_node_options;

typedef struct wse_node {
    node *n;
    wse_node_options opt;    /* filled by node_parse_args */
    jobhost jobs;            /* the job's life cycle (jobhost.h) */
    wn_job *job;             /* the replica's job (jobs.job), or NULL */
    compute comp;            /* the thread that runs the kernels */
    metrics_hist step_hist;  /* compute time per training step */
    uint64_t steps;          /* training steps computed */
    uint64_t staged;         /* weight chunks held while their slot was busy */
    blas_status blas;        /* the BLAS core in use and its self-check */
    sim_config sim;          /* simulated compute (sim.h), parsed from opt.simulate; mode
                                SIM_OFF: the kernels compute */
    double phase_total[WN_PHASES]; /* seconds by phase over every job (wn_phase) */
    /* The compute time by layer of the running job, or else of the last:
     * nlayers names and forward then backward seconds (wn__keep_layers). */
    int nlayers;
    char (*layer_names)[MODEL_NAME_MAX];
    double *layer_sec;
} wse_node;

