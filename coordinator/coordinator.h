/* The coordinator's state: membership, jobs, and the handlers of its role. */
#pragma once

#include "members.h"
#include "node.h"

typedef struct job job;

typedef struct coordinator {
    node *n;
    members members;
    uv_timer_t sweep;             /* checks heartbeats */
    job **jobs;                   /* every job of this run, oldest first */
    size_t njobs, capjobs;
    job *running;                 /* the job driving the cluster, or NULL */
    uint64_t next_job;            /* sequence for job ids */
} coordinator;

/* Fills the role table of the coordinator. */
void coordinator_role(node_role *role);

/* Sets up state on the node's loop; the node's data must point to c. */
void coordinator_init(coordinator *c, node *n);

/* A member's control connection or heartbeats are gone. */
void coordinator_member_lost(coordinator *co, member *mb, const char *why);

/* Jobs (jobs.c). */
void jobs_handle_submit(node *n, conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len);
void jobs_handle_status(node *n, conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len);
void jobs_handle_ready(node *n, conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len);
void jobs_handle_step_report(node *n, conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len);
void jobs_handle_step_committed(node *n, conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len);
void jobs_handle_eval_report(node *n, conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len);
void jobs_handle_finished(node *n, conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len);
void jobs_handle_abort(node *n, conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len);
/* A member the running job uses is lost: the job fails. */
void jobs_member_lost(coordinator *co, member *mb);
/* A client connection closed: stop streaming progress to it. */
void jobs_client_closed(coordinator *co, conn *c);
/* Frees every job (at exit). */
void jobs_shutdown(coordinator *co);
