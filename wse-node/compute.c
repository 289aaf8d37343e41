/* The compute thread. */
#include "compute.h"

#include <errno.h>
#include <stdlib.h>

#include "kernels.h"

struct compute_task {
    compute_fn fn;   /* on the compute thread */
    compute_fn done; /* then on the loop */
    void *arg;
    compute_task *next;
};

static void compute__append(compute_task **list, compute_task *t)
{
    t->next = NULL;
    while (*list)
        list = &(*list)->next;
    *list = t;
}

static void *compute__main(void *arg)
{
    compute *c = arg;
    kernels_set_threads(c->threads);
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->stop && !c->queue)
            pthread_cond_wait(&c->cv, &c->mu);
        if (c->stop)
            break;
        compute_task *t = c->queue;
        c->queue = t->next;
        c->running = t;
        pthread_mutex_unlock(&c->mu);
        t->fn(t->arg);
        pthread_mutex_lock(&c->mu);
        c->running = NULL;
        compute__append(&c->done, t);
        uv_async_send(&c->async);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

void compute_progress(compute *c, compute_fn progress, void *arg)
{
    pthread_mutex_lock(&c->mu);
    c->progress = progress;
    c->progress_arg = arg;
    pthread_mutex_unlock(&c->mu);
    uv_async_send(&c->async);
}

/* Calls the owed callbacks in order: a running task's progress before
 * anything it did after, the done callbacks of the tasks that ran; one
 * may submit the next task. */
static void compute__wake(uv_async_t *a)
{
    compute *c = a->data;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        compute_fn progress = c->progress;
        void *progress_arg = c->progress_arg;
        compute_task *t = NULL;
        c->progress = NULL;
        if (!progress && (t = c->done)) {
            c->done = t->next;
            c->n_tasks--;
        }
        pthread_mutex_unlock(&c->mu);
        if (progress) {
            progress(progress_arg);
            continue;
        }
        if (!t)
            return;
        if (t->done)
            t->done(t->arg);
        free(t);
    }
}

int compute_start(compute *c, uv_loop_t *loop, int threads)
{
    c->threads = threads > 0 ? threads : 1;
    c->queue = c->running = c->done = NULL;
    c->n_tasks = 0;
    c->progress = NULL;
    c->stop = false;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    int rc = uv_async_init(loop, &c->async, compute__wake);
    if (rc < 0)
        return rc;
    c->async.data = c;
    rc = pthread_create(&c->thread, NULL, compute__main, c);
    if (rc != 0) {
        uv_close((uv_handle_t *)&c->async, NULL);
        return -rc;
    }
    c->started = true;
    return 0;
}

int compute_submit(compute *c, compute_fn fn, compute_fn done, void *arg)
{
    compute_task *t = malloc(sizeof(*t));
    if (!t)
        return -ENOMEM;
    t->fn = fn;
    t->done = done;
    t->arg = arg;
    pthread_mutex_lock(&c->mu);
    compute__append(&c->queue, t);
    c->n_tasks++;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return 0;
}

bool compute_busy(const compute *c)
{
    return c->n_tasks > 0;
}

void compute_stop(compute *c)
{
    if (!c->started)
        return;
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    /* The thread is gone: what ran owes its callback, and so does what
     * never ran, for its owner to free what it holds. */
    compute_task **tail = &c->done;
    while (*tail)
        tail = &(*tail)->next;
    *tail = c->queue;
    c->queue = NULL;
    compute__wake(&c->async);
    uv_close((uv_handle_t *)&c->async, NULL);
    c->started = false;
}
