/* Process-wide settings of the operator library and the pool of worker
 * threads the convolutions run their bands on. Workers wait on a condition
 * variable between regions so that they never compete with OpenBLAS's own
 * threads for the cores. */
#include "kernels.h"

#include <cblas.h>
#include <pthread.h>
#include <stdint.h>

#include "kernels_internal.h"

#define MAX_THREADS 64

/* The pool. One region runs at a time; all fields are under mu. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t start;          /* signalled when a region is posted */
    pthread_cond_t done;           /* signalled when a worker finishes */
    pthread_t workers[MAX_THREADS];
    int nworkers;                  /* workers running (threads - 1) */
    int threads;                   /* kernels_set_threads value, >= 1 */
    uint64_t generation;           /* bumped once per posted region */
    uint64_t born;                 /* generation when the workers were
                                      started: a worker that first runs after
                                      a region was posted still joins it */
    int stop;                      /* workers exit when set */
    kern__task_fn fn;              /* the region's body */
    void *ctx;                     /* its argument */
    int active;                    /* threads in the region, caller included */
    int pending;                   /* workers yet to finish the region */
} pool = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .start = PTHREAD_COND_INITIALIZER,
    .done = PTHREAD_COND_INITIALIZER,
    .threads = 1,
};

static void *worker_main(void *arg)
{
    int tid = (int)(intptr_t)arg;
    uint64_t seen = 0;

    pthread_mutex_lock(&pool.mu);
    seen = pool.born;
    for (;;) {
        while (!pool.stop && pool.generation == seen)
            pthread_cond_wait(&pool.start, &pool.mu);
        if (pool.stop)
            break;
        seen = pool.generation;
        if (tid >= pool.active)
            continue;
        kern__task_fn fn = pool.fn;
        void *ctx = pool.ctx;
        int active = pool.active;
        pthread_mutex_unlock(&pool.mu);
        fn(ctx, tid, active);
        pthread_mutex_lock(&pool.mu);
        if (--pool.pending == 0)
            pthread_cond_signal(&pool.done);
    }
    pthread_mutex_unlock(&pool.mu);
    return NULL;
}

static void stop_workers(void)
{
    pthread_mutex_lock(&pool.mu);
    pool.stop = 1;
    pthread_cond_broadcast(&pool.start);
    pthread_mutex_unlock(&pool.mu);
    for (int i = 0; i < pool.nworkers; i++)
        pthread_join(pool.workers[i], NULL);
    pool.nworkers = 0;
    pool.stop = 0;
}

void kernels_set_threads(int n)
{
    if (n < 1)
        n = 1;
    if (n > MAX_THREADS)
        n = MAX_THREADS;
    stop_workers();
    pthread_mutex_lock(&pool.mu);
    pool.born = pool.generation;
    pthread_mutex_unlock(&pool.mu);
    while (pool.nworkers < n - 1) {
        /* worker i runs as tid i + 1 */
        intptr_t tid = pool.nworkers + 1;
        if (pthread_create(&pool.workers[pool.nworkers], NULL, worker_main,
                           (void *)tid) != 0)
            break;
        pool.nworkers++;
    }
    pool.threads = pool.nworkers + 1;
    openblas_set_num_threads(pool.threads);
}

int kernels_threads(void)
{
    return pool.threads;
}

void kern__parallel(kern__task_fn fn, void *ctx, int want)
{
    int t = want < pool.threads ? want : pool.threads;
    if (t <= 1) {
        fn(ctx, 0, 1);
        return;
    }
    openblas_set_num_threads(1);
    pthread_mutex_lock(&pool.mu);
    pool.fn = fn;
    pool.ctx = ctx;
    pool.active = t;
    pool.pending = t - 1;
    pool.generation++;
    pthread_cond_broadcast(&pool.start);
    pthread_mutex_unlock(&pool.mu);

    fn(ctx, 0, t);

    pthread_mutex_lock(&pool.mu);
    while (pool.pending > 0)
        pthread_cond_wait(&pool.done, &pool.mu);
    pthread_mutex_unlock(&pool.mu);
    openblas_set_num_threads(pool.threads);
}
