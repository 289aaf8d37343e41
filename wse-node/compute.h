/* The compute thread of a wse-node: one dedicated thread runs the kernels,
 * one task at a time and in the order they were submitted, so the event
 * loop keeps serving heartbeats and streams while a layer computes, and the
 * kernels always run on the same thread (their thread pool and BLAS
 * settings are set up there once).
 *
 * Tasks queue: a job that was released while its task runs does not hold
 * up the next job, whose first task simply runs after it. */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <uv.h>

typedef void (*compute_fn)(void *arg);

typedef struct compute_task compute_task;

typedef struct compute {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uv_async_t async;      /* wakes the loop when a task is done */
    int threads;           /* kernel threads, set on the compute thread */
    compute_task *queue;   /* waiting to run, oldest first */
    compute_task *running; /* on the compute thread now */
    compute_task *done;    /* ran; their done callbacks are owed, oldest first */
    unsigned n_tasks;      /* queued, running or owed */
    compute_fn progress;   /* owed: the progress callback of a task (compute_progress) */
    void *progress_arg;
    bool stop;             /* the thread should exit */
    bool started;
} compute;

/* Starts the thread. Returns 0 or a negative errno. */
int compute_start(compute *c, uv_loop_t *loop, int threads);
/* Queues fn(arg) for the compute thread; done(arg) then runs on the loop.
 * Returns 0, or -ENOMEM. */
int compute_submit(compute *c, compute_fn fn, compute_fn done, void *arg);
/* From a task, on the compute thread: asks the loop to call progress(arg)
 * while the task runs on (calls asked for before the loop came coalesce
 * into one; it runs before the task's done). The task says what it got to
 * in its own state, written before this call: the call takes the mutex
 * the loop takes before progress runs. */
void compute_progress(compute *c, compute_fn progress, void *arg);
/* Whether any task is queued, running or owes its done callback. */
bool compute_busy(const compute *c);
/* Joins the thread after the task it runs, then calls the done callback of
 * every task, run or not (so their owners can free what they hold: by then
 * every owner is released), and closes the async handle. */
void compute_stop(compute *c);
