/* The compute thread. */
#include "compute.h"

#include <errno.h>

#include "kernels.h"

static void *compute__main(void *arg)
{
    compute *c = arg;
    kernels_set_threads(c->threads);
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->stop && !(c->pending && !c->finished))
            pthread_cond_wait(&c->cv, &c->mu);
        if (c->stop)
            break;
        compute_fn fn = c->fn;
        void *a = c->arg;
        pthread_mutex_unlock(&c->mu);
        fn(a);
        pthread_mutex_lock(&c->mu);
        c->finished = true;
        uv_async_send(&c->async);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static void compute__wake(uv_async_t *a)
{
    compute *c = a->data;
    pthread_mutex_lock(&c->mu);
    bool done = c->pending && c->finished;
    compute_fn fn = c->done;
    void *arg = c->arg;
    if (done) {
        c->pending = false;
        c->finished = false;
    }
    pthread_mutex_unlock(&c->mu);
    if (done && fn)
        fn(arg);
}

int compute_start(compute *c, uv_loop_t *loop, int threads)
{
    c->threads = threads > 0 ? threads : 1;
    c->pending = c->finished = c->stop = false;
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
    pthread_mutex_lock(&c->mu);
    if (c->pending) {
        pthread_mutex_unlock(&c->mu);
        return -EBUSY;
    }
    c->fn = fn;
    c->done = done;
    c->arg = arg;
    c->pending = true;
    c->finished = false;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return 0;
}

bool compute_busy(const compute *c)
{
    return c->pending;
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
    uv_close((uv_handle_t *)&c->async, NULL);
    c->started = false;
}
