/* Process-wide settings of the operator library and the threads its
 * parallel regions run on. Where oneDNN runs on OpenMP, the regions are
 * OpenMP's too: one team of threads serves the kernels' operators and
 * oneDNN's primitives, so that no two pools take turns waking each other
 * up or fight for the cores (resnet_small's step: 34 ms on two pools that
 * sleep between regions, 24 on one team that waits a while first).
 * Elsewhere a pool of our own, whose workers wait on a condition variable
 * between regions so that they never compete with OpenBLAS's own threads
 * for the cores. */
#include "kernels.h"

#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fpmode.h"
#include "kernels_internal.h"

#if defined(KERNELS_HAVE_DNNL) && DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
#include <omp.h>
#define KERN__OMP_TEAM 1
#endif

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

/* set on a thread while it runs its share of a region: a GEMM inside
 * runs on that thread alone */
static _Thread_local int in_region;

#ifndef KERN__OMP_TEAM /* OpenMP runs the regions */
static void *worker_main(void *arg)
{
    int tid = (int)(intptr_t)arg;
    uint64_t seen = 0;

    in_region = 1; /* a worker only ever runs shares of regions */
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
#endif

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
    /* the workers below inherit the mode */
    fpmode_flush_subnormals();
    stop_workers();
#ifdef KERN__OMP_TEAM
    /* OpenMP's threads, as many as each region asks for (oneDNN's:
     * conv_path.c's set_dnnl_threads); each of the kernels' regions sets
     * their floating-point mode, and this one sets it for oneDNN's regions
     * (its sgemm, kern_sgemm's large GEMMs) where it does not */
    pool.threads = n;
#pragma omp parallel num_threads(n)
    fpmode_flush_subnormals();
#else
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
#endif
    /* OpenBLAS stays on one thread: its own workers spin between calls and
     * were started before the process could set their floating-point
     * mode; kern_sgemm splits the large GEMMs over this pool instead */
    openblas_set_num_threads(1);
}

int kernels_threads(void)
{
    return pool.threads;
}

void kern__parallel(kern__task_fn fn, void *ctx, int want)
{
    int t = want < pool.threads ? want : pool.threads;
    if (t <= 1 || in_region) {
        fn(ctx, 0, 1);
        return;
    }
#ifdef KERN__OMP_TEAM
#pragma omp parallel num_threads(t)
    {
        fpmode_flush_subnormals();
        in_region = 1;
        fn(ctx, omp_get_thread_num(), omp_get_num_threads());
        in_region = 0;
    }
    return;
#endif
    pthread_mutex_lock(&pool.mu);
    pool.fn = fn;
    pool.ctx = ctx;
    pool.active = t;
    pool.pending = t - 1;
    pool.generation++;
    pthread_cond_broadcast(&pool.start);
    pthread_mutex_unlock(&pool.mu);

    in_region = 1;
    fn(ctx, 0, t);
    in_region = 0;

    pthread_mutex_lock(&pool.mu);
    while (pool.pending > 0)
        pthread_cond_wait(&pool.done, &pool.mu);
    pthread_mutex_unlock(&pool.mu);
}

typedef struct range_job {
    size_t n;
    kernels_range_fn fn;
    void *ctx;
} range_job;

static void range_task(void *ctx, int tid, int nt)
{
    const range_job *r = ctx;
    size_t lo = r->n * (size_t)tid / (size_t)nt, hi = r->n * (size_t)(tid + 1) / (size_t)nt;
    if (lo < hi)
        r->fn(r->ctx, lo, hi);
}

void kernels_for(size_t n, size_t grain, kernels_range_fn fn, void *ctx)
{
    size_t t = (size_t)pool.threads;
    if (grain < 1)
        grain = 1;
    if (n / grain < t)
        t = n / grain;
    if (t <= 1 || in_region) {
        if (n)
            fn(ctx, 0, n);
        return;
    }
    range_job r = {.n = n, .fn = fn, .ctx = ctx};
    kern__parallel(range_task, &r, (int)t);
}

/* A copy (src) or a clearing (src NULL) of floats, for its ranges. */
typedef struct copy_job {
    float *dst;
    const float *src;
} copy_job;

static void copy_range(void *ctx, size_t lo, size_t hi)
{
    const copy_job *j = ctx;
    if (j->src)
        memcpy(j->dst + lo, j->src + lo, (hi - lo) * sizeof(float));
    else
        memset(j->dst + lo, 0, (hi - lo) * sizeof(float));
}

/* Floats a thread copies or clears at the least: 128 KiB. */
#define COPY_GRAIN (32 * 1024)

void kernels_copy(float *dst, const float *src, size_t count)
{
    copy_job j = {dst, src};
    kernels_for(count, COPY_GRAIN, copy_range, &j);
}

void kernels_zero(float *dst, size_t count)
{
    copy_job j = {dst, NULL};
    kernels_for(count, COPY_GRAIN, copy_range, &j);
}

/* Whether the calling thread runs its share of a region (kern_sgemm then
 * computes on it alone). */
int kern__in_region(void)
{
    return in_region;
}

/* kernels_layout_seconds' nanoseconds: conversions may run on any thread */
static _Atomic uint64_t kern__layout_ns;

uint64_t kern__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void kern__layout_since(uint64_t t0)
{
    atomic_fetch_add_explicit(&kern__layout_ns, kern__now_ns() - t0, memory_order_relaxed);
}

double kernels_layout_seconds(void)
{
    return (double)atomic_load_explicit(&kern__layout_ns, memory_order_relaxed) * 1e-9;
}
