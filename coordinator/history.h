/* The coordinator keeps a bounded number of finished jobs in memory: past
 * --max-job-history the oldest are evicted, and status, logs and list answer
 * for them from the journal. */
#pragma once

#include <stddef.h>

#include "coordinator.h"

/* Evicts the oldest finished jobs once more than max_job_history + slack are
 * in memory, down to max_job_history. Queued and running jobs stay. */
void history_evict(coordinator *co, size_t slack);

/* A finished job read back from the journal for one answer, without its
 * log; NULL when the journal does not hold it (or there is none). Not one of
 * co->jobs: give it back with history_release. */
job *history_load(coordinator *co, const char *id);

/* The newest job of owner only the journal still holds, read back like
 * history_load; NULL when there is none. */
job *history_load_newest(coordinator *co, const char *owner);

/* Reads the log of a job history_load made from the journal. */
void history_load_log(coordinator *co, job *j);

/* Frees j if history_load made it; any other job is left alone. */
void history_release(job *j);

/* Replies to a JobListQuery on c: the jobs the client may see (jobs_visible)
 * in memory and those only the journal still holds, oldest first, in as many
 * JobList frames as they take (JobList.more). When they are too many for one
 * reply, the newest, with the count of the rest left out (JobList.omitted). */
void history_list(coordinator *co, conn *c);
