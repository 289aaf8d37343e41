/* The daemon side of a job's life, the same in every role: one job at a
 * time; it starts with the coordinator's JobStart (the plan checked and
 * copied); it ends with the JobEnd or JobAbort that names it, with a failure
 * or a fault the role reports, with the loss of the coordinator, or with
 * shutdown. The role says how its job starts and how it is released; the
 * jobhost keeps the id and the plan, matches the end messages and tells the
 * coordinator why a job stopped here.
 *
 *   no job --JobStart, start() gives a job--> job --any end--> no job
 *
 * Every end calls the role's release() exactly once. */
#pragma once

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include "msgcheck.h"
#include "node.h"

typedef struct jobhost jobhost;

/* Why a job ended here. */
typedef enum jobhost_end {
    JOBHOST_RELEASED,          /* the coordinator's JobEnd or JobAbort named it */
    JOBHOST_FAILED,            /* the role failed it: an error of the job itself */
    JOBHOST_FAULT,             /* the role lost a peer or a link: the job may be recovered */
    JOBHOST_COORDINATOR_LOST,  /* the coordinator owns the job; a restarted one recovers it */
    JOBHOST_SHUTDOWN,          /* the daemon stops */
} jobhost_end;

typedef struct jobhost_ops {
    /* Builds the role's job for plan. Returns the job, which then owns the
     * plan (free with appliance__plan__free_unpacked when the job is
     * freed: that may be after release, once work on threads is done), or
     * NULL with why filled: the job fails, the jobhost frees the plan, and
     * whatever start built is freed by start itself. */
    void *(*start)(jobhost *h, Appliance__Plan *plan, char *why, size_t whylen);
    /* Lets the role's job go; why says what ended it in words ("released",
     * "lost the coordinator", or the failure). The job may not be used
     * after; work still in flight on threads is the role's to finish. */
    void (*release)(jobhost *h, void *job, jobhost_end end, const char *why);
} jobhost_ops;

/* How long a stream peer's closed link waits for the coordinator's end of
 * the job before it is a fault (jobhost_peer_lost). */
#define JOBHOST_PEER_GRACE_MS 500

struct jobhost {
    node *n;
    const jobhost_ops *ops;
    void *job;                       /* the role's job, or NULL: none */
    char id[MSGCHECK_JOB_ID_MAX];    /* the job's id; "" without a job */
    const Appliance__Plan *plan;     /* the job's plan (the role's job owns it); NULL without a job */
    uv_timer_t grace;                /* a lost peer waiting to be called a fault */
    bool grace_init, grace_armed;
    char lost[512];                  /* what was lost, while grace_armed */
};

/* Attaches h to node n (n->jobs) and installs the JobStart, JobEnd and
 * JobAbort handlers in role. */
void jobhost_init(jobhost *h, node *n, node_role *role, const jobhost_ops *ops);

/* The jobhost of a node (NULL before jobhost_init). */
jobhost *jobhost_of(node *n);

/* The message handlers jobhost_init installs. */
void jobhost_handle_start(node *n, conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len);
void jobhost_handle_end(node *n, conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len);

/* Ends the job, if any, with end (RELEASED, COORDINATOR_LOST or SHUTDOWN:
 * nothing is reported to the coordinator). */
void jobhost_end_job(jobhost *h, jobhost_end end, const char *why);

/* Fails the job (an error of the job: bad data, a diverging loss) or
 * reports a fault (a peer or link lost): logs why with the flight
 * recorder, tells the coordinator (JobAbort, fault set for a fault) and
 * releases the job. Nothing happens without a job. */
void jobhost_fail(jobhost *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void jobhost_fault(jobhost *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void jobhost_vabort(jobhost *h, bool fault, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
/* The same for `job` only while it is the host's job: a job already let go
 * (a callback of its links or of a task after its release) is left alone.
 * The roles' fail and fault macros call this. */
void jobhost_abort_job(jobhost *h, const void *job, bool fault, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A stream peer closed its link. At the end of a job the peers take the
 * coordinator's JobEnd in any order, and one that takes it first closes
 * its links to the others: so the loss is a fault (jobhost_fault with the
 * message) only when the job has not ended JOBHOST_PEER_GRACE_MS later;
 * when it ends meanwhile the loss is logged as part of its end. */
void jobhost_peer_lost(jobhost *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The name of an end, for logs ("released", "failed", ...). */
const char *jobhost_end_name(jobhost_end end);
