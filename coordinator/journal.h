/* The coordinator's job journal: every job it accepted, its state and its
 * log, in SQLite (WAL mode) in the state directory, so that status, list
 * and logs answer for old jobs, and a restarted coordinator knows what was
 * queued or running when it stopped. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct journal journal;

/* A job as the journal keeps it. Strings are borrowed (put) or valid only
 * during the load callback (load). */
typedef struct journal_job {
    const char *id;
    uint64_t seq;              /* submission order */
    int state;                 /* Appliance__JobState */
    uint32_t priority;         /* 1..3 */
    const char *file;          /* the job file's name */
    const char *toml;          /* its text */
    const char *base_dir;      /* where relative paths resolve */
    const char *model_dir;
    const char *message;
    double submitted_at;       /* Unix time */
    uint64_t steps;            /* committed */
    uint64_t max_steps;
    double loss;
    uint64_t eval_step;        /* 0: no evaluation yet */
    double eval_loss, eval_accuracy, eval_iou;
    const char *owner;         /* read back: the user who submitted it, "" for an operator */
} journal_job;

/* Opens (creating) dir/journal.sqlite. Returns NULL with a message in err. */
journal *journal_open(const char *dir, char *err, size_t errlen);
void journal_close(journal *jn);

/* Inserts or replaces a job's row. Returns 0 or -EIO (the message is logged). */
int journal_put(journal *jn, const journal_job *jj);

/* Records who submitted a job: a user's name, "" for an operator. Jobs of
 * journals from before users existed have no owner: operators see them. */
int journal_set_owner(journal *jn, const char *job_id, const char *owner);

/* Appends line number `line` of a job's log. */
int journal_log(journal *jn, const char *job_id, uint64_t line, const char *text);

/* What recovering a job needs: its restarts so far, the newest step
 * every shard checkpointed (have_ckpt false: none yet), and the kind of
 * wse-nodes its first attempt ran on (a planner_kind; PLANNER_ANY before
 * it started), which its later attempts keep. */
typedef struct journal_recovery {
    uint32_t restarts;
    bool have_ckpt;
    uint64_t ckpt_step;
    int kind;
} journal_recovery;

int journal_put_recovery(journal *jn, const char *job_id, const journal_recovery *r);
/* Reads it back; 0 with everything zero (no restarts, no checkpoint, any
 * kind) when none. Journals from before kinds were kept read PLANNER_ANY. */
int journal_get_recovery(journal *jn, const char *job_id, journal_recovery *r);

/* Calls cb for every job, oldest first; a nonzero return stops. */
int journal_load(journal *jn, int (*cb)(void *arg, const journal_job *jj), void *arg);

/* Calls cb with the job named id. Returns 0, -ENOENT when the journal does
 * not hold it, or -EIO. */
int journal_get(journal *jn, const char *id, int (*cb)(void *arg, const journal_job *jj), void *arg);

/* Calls cb for the newest `limit` jobs, newest first; a nonzero return stops.
 * With owner, only that owner's jobs ("" an operator's); NULL: every job.
 * *total (may be NULL) gets how many of those the journal holds. */
int journal_recent(journal *jn, const char *owner, size_t limit, uint64_t *total,
                   int (*cb)(void *arg, const journal_job *jj), void *arg);

/* Calls cb for every log line of a job, in order. */
int journal_load_log(journal *jn, const char *job_id,
                     int (*cb)(void *arg, uint64_t line, const char *text), void *arg);
