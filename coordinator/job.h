/* A job on the coordinator, shared by the job driver (jobs.c) and the
 * client commands (jobctl.c). */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "coordinator.h"
#include "evals.h"
#include "jobspec.h"
#include "steps.h"
#include "summaries.h"

/* A client reading a job's log as it grows. */
typedef struct job_reader {
    conn *c;
    uint64_t next;        /* the next line it gets */
} job_reader;

#define JOB_PHASES 16 /* step phases kept per replica */

/* A committed step as the web page plots it (jobview.h). */
typedef struct job_point {
    uint64_t step;
    double loss;            /* the step's mean loss over the global batch */
    double samples_per_sec; /* since training started, as the status says */
    double compute_sec;     /* the slowest replica's compute time */
} job_point;

/* An evaluation's result. */
typedef struct job_eval_point {
    uint64_t step;
    double loss;
    double accuracy;        /* classification; -1 for segmentation */
    double iou;             /* segmentation: mean IoU; -1 for classification */
} job_eval_point;

struct job {
    uint64_t seq;         /* submission order, from 1, unique across restarts */
    char id[40];          /* "job-<seq>" */
    Appliance__JobState state;
    uint32_t priority;    /* 1 (p1) to 3 (p3) */
    char file[256];       /* the job file's name as submitted */
    char owner[64];       /* the user who submitted it (users file); "" for an operator */
    char *toml;           /* its text, owned, for the journal */
    jobspec *spec;        /* ... parsed and checked once, where it entered (owned), while
                           * queued or running; NULL for a journaled job whose text no
                           * longer compiles (spec_error says why) */
    char spec_error[512];
    char base_dir[PATH_MAX];
    char model_dir[PATH_MAX];
    char message[1024];   /* why it failed, or the final word */
    char phase[32];       /* queued, compiling, loading weights, training, evaluating, ... */
    double submitted_at;  /* Unix time */
    /* Recovery (every attempt of the job): */
    char run_id[64];       /* the id the daemons know this attempt by: id, then id.rN; "" between attempts */
    uint32_t restarts;    /* recoveries so far */
    uint8_t kind;         /* planner_kind of its wse-nodes: set by its first attempt, kept after */
    uint32_t max_restarts; /* runconfig.max_num_restarts */
    uint64_t shard_ckpt[64]; /* per shard: 1 + the newest step it checkpointed, 0 none */
    bool have_ckpt;       /* every shard wrote the checkpoint of ckpt_step */
    uint64_t ckpt_step;
    bool recovering;      /* between attempts: waiting for members */
    uint64_t recover_at;  /* uv_now from which to try the next attempt */
    uint64_t full_until;  /* until then, wait for a full complement of replicas */
    uint64_t give_up_at;  /* the members needed have not come back by then: the job fails */
    char fault[512];      /* what the last fault was */
    uint64_t summarized;  /* the last step written to the summaries */
    uint64_t progress_at; /* uv_now of the attempt's last progress (start, ready, step, evaluation) */
    uint64_t step_at;     /* uv_now of the attempt's last step, or of its start: /metrics, for
                           * the alert on a stalled job */
    uint64_t step_timeout_ms; /* runconfig.step_timeout_seconds, 0: none */
    /* While running: */
    uint8_t *plan_bytes;  /* packed plan, owned */
    size_t plan_len;
    Appliance__Plan *plan; /* unpacked from plan_bytes, owned */
    uint32_t *members;    /* member ids the job uses */
    size_t nmembers;
    size_t ready;         /* members that reported ready */
    size_t ready_wse;     /* of them, wse-nodes: all ready ends the phase "compiling" */
    size_t finished;      /* shards that wrote their final checkpoint */
    steps flight;         /* the steps in flight and their reports (steps.h) */
    uint64_t t_start, t_train; /* uv_now at start and at the first step */
    uint64_t t_end;       /* uv_now when it ended, 0 before */
    uint64_t t_step;      /* uv_now when its last step was committed */
    uint64_t samples;     /* trained */
    uint64_t first_step;  /* the step training started from */
    uint64_t log_steps;   /* progress every log_steps steps */
    summaries *sum;       /* TensorBoard event file, or NULL */
    /* Progress: */
    uint64_t steps_done;
    uint64_t max_steps;
    double last_loss;
    double last_lr;
    double replica_sec[64]; /* each replica's compute time in its last reported step */
    /* Where each replica's time went in its last reported step (its
     * StepReport.phases; the names are the first replica's to report). */
    double replica_phase[64][JOB_PHASES];
    char phase_name[JOB_PHASES][32];
    size_t nphases;
    /* Evaluation: the reports of those in progress, totalled per step (one
     * replica's report of a later evaluation may come before another's of
     * an earlier one), and the last result. */
    evals pending_evals;
    bool have_eval;
    uint64_t last_eval_step;
    double last_eval_loss, last_eval_accuracy, last_eval_iou;
    /* History for the web page (jobview.h), kept until the job is freed: */
    job_point *points;    /* committed steps, in step order; every point_stride-th once thinned */
    size_t npoints, cappoints;
    uint64_t point_stride; /* 1, doubled each time the points are thinned to half */
    job_eval_point *evals; /* evaluations, in step order */
    size_t nevals, capevals;
    uint32_t view_replicas; /* replicas of the last attempt (its phases), at most 64 */
    char *plan_json;      /* the memory plan of each wse-node of the last attempt, JSON; owned */
    /* Clients: */
    conn **followers;     /* get every progress status until the end */
    size_t nfollowers;
    job_reader *readers;  /* follow the log */
    size_t nreaders;
    char **log;           /* the log lines, owned */
    size_t nlog, caplog;
    /* Admission and history (admission.c, history.c): */
    char submitter[96];   /* whose queue slots it takes: the user, else "HOST/NAME" of the
                           * client (admission_submitter, ADMISSION_SUBMITTER_LEN) */
    bool from_journal;    /* read back from the journal for one answer; not one of co->jobs */
    uint32_t sending;     /* its log is being sent to clients (jobctl.c): not evicted meanwhile */
};

job *job_find(coordinator *co, const char *id);
/* Fills s from j; its strings point into j. */
void job_status(coordinator *co, job *j, Appliance__JobStatus *s);
/* Sends the status to every follower. */
void job_notify(coordinator *co, job *j);
/* Appends a timestamped line to the job's log (journal and readers too). */
void job_log(coordinator *co, job *j, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Writes the job's row to the journal. */
void job_save(coordinator *co, job *j);
/* Writes what recovering it needs (restarts, checkpoint, kind of wse-nodes). */
void job_save_recovery(coordinator *co, const job *j);
/* Frees a job and everything it owns (not its place in co->jobs). */
void job_free(job *j);
/* A new job, registered with the coordinator; NULL when out of memory. */
job *job_new(coordinator *co, uint64_t seq);
/* Ends a running or queued job: members told, clients told, journal. */
void job_end(coordinator *co, job *j, Appliance__JobState state, const char *why);
/* Starts queued jobs while the cluster has room, by priority then age. */
void jobs_schedule(coordinator *co);
/* Compiles spec on idle (or, for a plan to show, any live) members, its
 * wse-nodes of `kind` (a planner_kind): the packed plan in *plan; with
 * used, the members it places (calloc'd). */
int jobs_plan(coordinator *co, const jobspec *spec, const char *id, bool idle, int kind,
              uint8_t **plan, size_t *len, member ***used, size_t *nused, char *err,
              size_t errlen);
/* Sends a job's log lines from `from` on to c. */
void job_send_log(job *j, conn *c, uint64_t from, bool end);
/* Fills j (its seq set) from its journal row; not its log. Returns 0 or
 * -ENOMEM. */
int job_from_journal(coordinator *co, job *j, const journal_job *jj);
/* Adds a log line without journaling it (loading). */
void job_append_log(job *j, const char *line);
/* A fault hit the running job (a member or a link lost): it restarts from
 * its newest complete checkpoint when restarts remain, else fails. */
void job_fault(coordinator *co, job *j, const char *why);
/* A job the journal says was running when the coordinator stopped: it
 * recovers like after a fault (0), or fails when it cannot (-1). */
int job_recover_loaded(coordinator *co, job *j);
/* The members idle now, by role, for a recovering job's next attempt. */
typedef struct recovery_idle {
    size_t wse_nodes, memoryx, swarmx, workers;
} recovery_idle;

typedef enum recovery_verdict {
    RECOVERY_WAIT,    /* not enough yet: try again shortly */
    RECOVERY_GIVE_UP, /* ... and the time to wait for them is over: the job fails */
    RECOVERY_GO,      /* the attempt goes on the members idle now */
} recovery_verdict;

/* What a recovering job's next attempt does when its full complement of
 * members is not idle (recovery.c): it waits for them until
 * full_wait_over, then goes on with what is left (the replicas idle, whole
 * groups of stripes, down to runconfig.min_num_csx; with no swarmx left, a
 * lone replica straight from its shard), with the memoryx shards and a
 * worker it needs; until give_up, when it fails. On RECOVERY_GO the
 * attempt's spec has the replicas left (num_csx) and a SwarmX tree as wide
 * as the swarmx nodes left need (swarmx_fanout). */
recovery_verdict recovery_decide(jobspec *spec, const recovery_idle *idle, bool full_wait_over,
                                 bool give_up);
/* Drives a recovering job: tries the next attempt when its time has come
 * (called from the sweep timer and when members register). */
void jobs_tick(coordinator *co);
/* Whether the cluster's live members could ever run the spec; err says what
 * is missing when not. */
bool jobs_feasible(coordinator *co, const jobspec *spec, char *err, size_t errlen);

/* ---- between the coordinator's job files: jobs.c (the job object, its
 * launch and its end) and recovery.c ---- */

/* Sends env to every member of the job's attempt. */
void job__send_all(coordinator *co, job *j, const Appliance__Envelope *env);
/* Frees the members the job's attempt held. */
void job__release(coordinator *co, job *j);
/* Drops what an attempt held (plan, members, steps in flight); ending:
 * the summaries too. */
void job__drop_run(job *j, bool ending);
/* Plans an attempt of job j from spec (the job's, or an attempt's copy of
 * it with fewer replicas or a checkpoint to resume) on idle members and
 * sends them the plan. Returns 1 when started, 0 when the cluster has no
 * room for it now, -1 when it failed (it has ended). */
int job__launch(coordinator *co, job *j, const jobspec *spec);
/* Starts a queued job on idle members (job__launch). */
int job__start(coordinator *co, job *j);
