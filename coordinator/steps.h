/* Step accounting of a running job: the steps in flight, each with the
 * loss its replicas reported and the commits of its memoryx shards. A step
 * counts once every replica reported it and every shard committed it, and
 * steps count in order. Replicas report a step as they finish it and
 * memoryx commits it once updated; in Pipelined mode the replicas may run
 * ahead of the commits by as many steps as the gradient queues hold, so
 * the window of steps in flight grows (up to STEPS_WINDOW). Pure data: no
 * daemon, no clock; jobs.c acts on what it says. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define STEPS_WINDOW (1u << 20) /* steps whose reports may be in flight at most */

typedef struct job_step {
    uint64_t step;        /* which step this slot holds, UINT64_MAX if none */
    double loss_sum;      /* sum over replicas of their loss sums */
    double compute_max;   /* the slowest replica's compute time */
    uint32_t reports;     /* replicas that reported */
    uint32_t commits;     /* shards that committed */
} job_step;

typedef struct steps {
    job_step *ring;       /* steps in flight, by step % cap; owned */
    size_t cap;           /* a power of two, or 0 before the first */
    uint64_t done;        /* steps counted so far: the next to count is `done` */
    uint32_t replicas;    /* reports a step needs */
    uint32_t shards;      /* commits a step needs */
} steps;

/* Starts counting from step `first` for a job of `replicas` replicas and
 * `shards` memoryx shards. */
void steps_init(steps *s, uint64_t first, uint32_t replicas, uint32_t shards);
void steps_free(steps *s);

/* A replica's report of `step`: its loss sum and compute time. Returns 0,
 * -ERANGE for a step already counted or beyond the window, -ENOMEM. */
int steps_report(steps *s, uint64_t step, double loss_sum, double compute_sec);

/* A shard's commit of `step`. Returns as steps_report. */
int steps_commit(steps *s, uint64_t step);

/* The next step, if complete: copied to *out, counted (done + 1) and its
 * slot freed. Returns 1, or 0 when the next step is not complete. Call
 * until 0: completes may be waiting behind the one just counted. */
int steps_next(steps *s, job_step *out);

/* Samples per second of a run that trained `samples` between two moments
 * (milliseconds apart); 0 before a second step. */
double steps_rate(uint64_t samples, uint64_t first_ms, uint64_t last_ms);
