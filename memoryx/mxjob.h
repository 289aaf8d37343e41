/* The lifetime of memoryx's job, which every module may end: freed now or
 * off the loop, kept while the thread pool has some of its work, failed. */
#pragma once

#include <stdbool.h>

#include "store.h"

/* Frees a job that has nothing in the thread pool, now: its tensors (unless
 * the disk tier's files hold them), its tier, parts and held chunks, and
 * its plan when it has one. j may be NULL. */
void mxjob_free(mx_job *j);

/* Frees a released job that has nothing in the thread pool, its tensors
 * off the loop (gigabytes take a noticeable time to give back). */
void mxjob_free_later(mx_job *j);

/* Whether the thread pool's return for job j (one of j->pool_work) finds
 * it released: then the caller lets it be, and the last piece of work back
 * frees it. */
bool mxjob_pool_back(mx_job *j);

/* Fails the job j (or reports a fault): memoryx's jobhost tells the
 * coordinator and releases it; nothing happens when j is no longer
 * memoryx's job. */
#define mxjob_abort(j, ...) jobhost_abort_job(&(j)->mx->jobs, j, false, __VA_ARGS__)
#define mxjob_fault(j, ...) jobhost_abort_job(&(j)->mx->jobs, j, true, __VA_ARGS__)

/* Who the job's stream goes to, for messages: the root of the swarmx tree,
 * or the one replica of a plan without a tree. */
const char *mxjob_down_name(const mx_job *j);
