/* The compute thread of a wse-node: one dedicated thread runs the kernels,
 * one task at a time, so the event loop keeps serving heartbeats and
 * streams while a layer computes, and the kernels always run on the same
 * thread (their thread pool and BLAS settings are set up there once). */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <uv.h>

typedef void (*compute_fn)(void *arg);

typedef struct compute {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uv_async_t async;      /* wakes the loop when a task is done */
    int threads;           /* kernel threads, set on the compute thread */
    compute_fn fn;         /* the task, run on the compute thread */
    compute_fn done;       /* then this, on the loop */
    void *arg;
    bool pending;          /* a task is queued or running */
    bool finished;         /* the task ran; done is owed */
    bool stop;             /* the thread should exit */
    bool started;
} compute;

/* Starts the thread. Returns 0 or a negative errno. */
int compute_start(compute *c, uv_loop_t *loop, int threads);
/* Runs fn(arg) on the compute thread, then done(arg) on the loop. Returns
 * 0, or -EBUSY while another task is pending. */
int compute_submit(compute *c, compute_fn fn, compute_fn done, void *arg);
bool compute_busy(const compute *c);
/* Joins the thread (after the current task) and closes the async handle. */
void compute_stop(compute *c);
