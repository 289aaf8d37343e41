/* The coordinator's state: membership, jobs, and the handlers of its role. */
#pragma once

#include <limits.h>

#include "admission.h"
#include "journal.h"
#include "members.h"
#include "node.h"

typedef struct job job;
/* A job's log on its way to a client (jobctl.c). */
typedef struct jobctl_send jobctl_send;

/* The coordinator's own options (its key table: coordinator_role). */
typedef struct coordinator_options {
    char state_dir[PATH_MAX];       /* the journal's directory, or "" (jobs not kept) */
    uint32_t heartbeat_timeout_ms;  /* a member silent this long is lost */
    char users_file[PATH_MAX];      /* users and their keys, or "" (every client an operator) */
    admission_limits admission;     /* job files, the queue, clients' unread replies */
    uint64_t max_model_params;      /* trainable parameters of a submitted model */
    uint64_t max_steps;             /* runconfig.max_steps of a submitted job */
    uint32_t max_job_history;       /* finished jobs kept in memory */
    uint64_t chunk_bytes;           /* of a frame of weights, gradients or a batch */
    char http[128];                 /* IPv4:PORT of the web page and its API (web.h), or "" */
} coordinator_options;

#define COORDINATOR_DEFAULT_MAX_JOB_FILE (256u * 1024)
/* max_model_params 0: what the memoryx members registered can hold */
#define COORDINATOR_DEFAULT_MAX_MODEL_PARAMS 0
#define COORDINATOR_DEFAULT_MAX_STEPS UINT64_C(100000000)
#define COORDINATOR_DEFAULT_CHUNK (1u << 20)

typedef struct coordinator {
    node *n;
    coordinator_options opt;      /* its options, filled by node_parse_args */
    members members;
    uv_timer_t sweep;             /* checks heartbeats */
    job **jobs;                   /* every job of this run, oldest first */
    size_t njobs, capjobs;
    job *running;                 /* the job driving the cluster, or NULL */
    uint64_t next_seq;            /* the next job's sequence number */
    journal *journal;             /* jobs and their logs, or NULL without a state directory */
    uint64_t heartbeats_missed;   /* members lost to silence */
    uint64_t last_commit;         /* uv_now of the last committed step */
    metrics_hist step_hist;       /* time between committed steps */
    uint64_t jobs_refused;        /* submissions refused by an admission limit (admission.c) */
    uint64_t jobs_evicted;        /* finished jobs evicted from memory (history.c) */
    uint64_t clients_dropped;     /* clients closed for leaving replies unread */
    jobctl_send *log_sends;       /* logs still being sent to clients, in request order (jobctl.c) */
    size_t nlog_sends;
} coordinator;

/* Fills the role table of the coordinator, its option keys pointing into
 * opt, which it sets to the defaults. */
void coordinator_role(node_role *role, coordinator_options *opt);

/* Sets up state on the node's loop, keeping c->opt; the node's data must point to c. */
void coordinator_init(coordinator *c, node *n);

/* A member's control connection or heartbeats are gone. */
void coordinator_member_lost(coordinator *co, member *mb, const char *why);

/* Jobs (jobs.c, jobctl.c). */
/* Loads the journal: old jobs for status and logs; queued jobs queue again;
 * jobs that were running when the coordinator stopped are failed. */
void jobctl_load(coordinator *co);
void jobctl_handle_cancel(node *n, conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len);
void jobctl_handle_list(node *n, conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len);
void jobctl_handle_logs(node *n, conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len);
void jobctl_handle_submit(node *n, conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len);
void jobctl_handle_status(node *n, conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len);
/* A client connection closed: stop streaming progress to it. */
void jobs_client_closed(coordinator *co, conn *c);
/* Whether the client on c may see job j: an operator (the cluster secret,
 * or an insecure cluster) sees every job, a user only their own. */
bool jobs_visible(const conn *c, const job *j);
/* A client's connection drained: the log being sent to it goes on. */
void jobctl_client_drain(coordinator *co, conn *c);
/* A client's connection closed: the logs being sent to it are dropped. */
void jobctl_client_forget(coordinator *co, conn *c);
/* Frees every job (at exit). */
void jobs_shutdown(coordinator *co);
