/* Admission of submitted jobs: the limits that keep the coordinator's memory
 * bounded however many clients submit and poll (jobs waiting in the queue,
 * in total and per submitter; the size of a job file; replies a client
 * leaves unread). Each limit is a coordinator option (docs/cli.md). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "coordinator.h"

#define ADMISSION_SUBMITTER_LEN 96 /* bytes of a submitter key, with its NUL */

/* The submitter of jobs sent on connection c, whose queue slots they take:
 * the user's name when the client authenticated with a user key (users
 * file), else the client's host and the name its Hello gave, as
 * "HOST/NAME" (appliance-submit calls itself "appliance-submit", so its jobs
 * count per host). User names have no '/': the two never meet. */
void admission_submitter(const conn *c, char *out, size_t outlen);

/* Whether the job file `file` of toml_len bytes from submitter may be
 * accepted; a plan-only request is held only to the file size. Returns 0,
 * or -EFBIG (the file) or -EBUSY (the queue) with the reason, naming the
 * limit, in err. */
int admission_check(coordinator *co, const char *submitter, const char *file, size_t toml_len,
                    bool plan_only, char *err, size_t errlen);

/* Closes client connections whose unread replies passed the backlog limit
 * (they stopped reading; the coordinator does not buffer for them). */
void admission_sweep_clients(coordinator *co);
