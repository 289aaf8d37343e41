/* Admission of submitted jobs: the limits that keep the coordinator's memory
 * bounded however many clients submit and poll (jobs waiting in the queue,
 * in total and per submitter; the size of a job file; replies a client
 * leaves unread). Each limit is a coordinator option (docs/cli.md). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <stdint.h>

#include "node.h"

struct job;

#define ADMISSION_SUBMITTER_LEN 96 /* bytes of a submitter key, with its NUL */

/* The limits (coordinator options, docs/cli.md). */
typedef struct admission_limits {
    uint64_t max_job_file;             /* bytes of a submitted job file */
    uint32_t max_queued_jobs;          /* jobs waiting in the queue at most */
    uint32_t max_queued_per_submitter; /* of those, from one submitter */
    uint64_t max_client_backlog;       /* unread reply bytes a client may leave */
} admission_limits;

/* The submitter of jobs sent on connection c, whose queue slots they take:
 * the user's name when the client authenticated with a user key (users
 * file), else the client's host and the name its Hello gave, as
 * "HOST/NAME" (appliance-submit calls itself "appliance-submit", so its jobs
 * count per host). User names have no '/': the two never meet. */
void admission_submitter(const conn *c, char *out, size_t outlen);

/* Whether the job file `file` of toml_len bytes from submitter may be
 * accepted beside the njobs jobs the coordinator holds; a plan-only request
 * is held only to the file size. Returns 0, or -EFBIG (the file) or -EBUSY
 * (the queue) with the reason, naming the limit, in err. */
int admission_check(const admission_limits *lim, struct job *const *jobs, size_t njobs,
                    const char *submitter, const char *file, size_t toml_len, bool plan_only,
                    char *err, size_t errlen);

/* Closes the client connections of n whose unread replies passed the
 * backlog limit (they stopped reading; the coordinator does not buffer for
 * them). Returns how many it closed. */
unsigned admission_sweep_clients(node *n, const admission_limits *lim);
