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

/* One GEMM split in column or row blocks over the pool. */
typedef struct gemm_job {
    int ta, tb, m, n, k, split_rows;
    float alpha, beta;
    const float *a, *b;
    float *c;
    int lda, ldb, ldc;
} gemm_job;

/* [lo, hi) of `total` for thread tid of nt, cut at multiples of 16 */
static void gemm_block(int total, int tid, int nt, int *lo, int *hi)
{
    int units = (total + 15) / 16;
    *lo = (int)((long)units * tid / nt) * 16;
    *hi = (int)((long)units * (tid + 1) / nt) * 16;
    if (*hi > total)
        *hi = total;
    if (*lo > total)
        *lo = total;
}

static void gemm_task(void *ctx, int tid, int nt)
{
    const gemm_job *g = ctx;
    int lo, hi;
    const float *a = g->a, *b = g->b;
    float *c = g->c;
    int m = g->m, n = g->n;

    if (g->split_rows) {
        gemm_block(g->m, tid, nt, &lo, &hi);
        a += g->ta ? (size_t)lo : (size_t)lo * g->lda;
        c += (size_t)lo * g->ldc;
        m = hi - lo;
    } else {
        gemm_block(g->n, tid, nt, &lo, &hi);
        b += g->tb ? (size_t)lo * g->ldb : (size_t)lo;
        c += lo;
        n = hi - lo;
    }
    if (m > 0 && n > 0)
        cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans,
                    g->tb ? CblasTrans : CblasNoTrans, m, n, g->k, g->alpha, a,
                    g->lda, b, g->ldb, g->beta, c, g->ldc);
}

/* Rows of C set to a bias. */
typedef struct seed_job {
    float *c;
    const float *bias;
    int ldc, n;
} seed_job;

static void seed_rows(void *ctx, size_t lo, size_t hi)
{
    const seed_job *s = ctx;
    for (size_t i = lo; i < hi; i++)
        memcpy(s->c + i * (size_t)s->ldc, s->bias, sizeof(float) * (size_t)s->n);
}

void kern__seed_rows(float *c, int ldc, const float *bias, int m, int n)
{
    if (m <= 0 || n <= 0)
        return;
    seed_job s = {c, bias, ldc, n};
    size_t grain = 16384 / (size_t)n; /* about 64 KiB a share */
    kernels_for((size_t)m, grain ? grain : 1, seed_rows, &s);
}

void kern__sgemm_bias(int ta, int tb, int m, int n, int k, const float *a, int lda, const float *b,
                      int ldb, const float *bias, float beta, float *c, int ldc)
{
    if (bias) {
        kern__seed_rows(c, ldc, bias, m, n);
        beta = 1.0f;
    }
    kern_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

#ifdef KERN__OMP_TEAM
/* Whether oneDNN's sgemm runs kern_sgemm's large GEMMs: -1 until known. */
static int sgemm_onednn = -1;

void kern__sgemm_set_onednn(int on)
{
    sgemm_onednn = on != 0;
}

/* oneDNN's sgemm, on the operators' team, unless APPLIANCE_SGEMM=openblas
 * (read once) or the shape is one of those it runs slower than OpenBLAS's
 * blocks: B transposed under fewer than 128 rows of C (a convolution's
 * weight gradient on few output channels: 1.1 to 1.8 times the time on the
 * AMD EPYC). The rule depends on the shape alone, never on timing, so that
 * a run and its recovery compute the same bits. */
static int sgemm_on_onednn(int ta, int tb, int m)
{
    if (sgemm_onednn < 0) {
        const char *v = getenv("APPLIANCE_SGEMM");
        sgemm_onednn = !(v && strcmp(v, "openblas") == 0);
    }
    if (!sgemm_onednn || (!ta && tb && m < 128))
        return 0;
    dnnl_engine_t eng; /* sets oneDNN's threads to the operators' */
    dnnl_stream_t stream;
    return kern__dnnl_engine(&eng, &stream);
}
#else
void kern__sgemm_set_onednn(int on)
{
    (void)on;
}
#endif

void kern_sgemm(int ta, int tb, int m, int n, int k, float alpha,
                const float *a, int lda, const float *b, int ldb, float beta,
                float *c, int ldc)
{
    if (m <= 0 || n <= 0)
        return;
    /* a weight gradient on a small batch: written once, without OpenBLAS's
     * pass scaling C and its packing (gemm_small_k.c) */
    if (ta && !tb && beta == 0.0f && k <= 64 && (double)m * n >= 65536 &&
        kern__sgemm_small_k(m, n, k, alpha, a, lda, b, ldb, c, ldc) == 0)
        return;
    /* a thread's share of a small product costs less than waking the pool */
    double flops = 2.0 * m * n * (k > 0 ? k : 1);
    int t = pool.threads;
    if (flops < 4e6 * t)
        t = 1;
#ifdef KERN__OMP_TEAM
    if (flops >= 4e6 && !in_region && sgemm_on_onednn(ta, tb, m) &&
        dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c,
                   ldc) == dnnl_success)
        return;
#endif
    gemm_job g = {
        .ta = ta, .tb = tb, .m = m, .n = n, .k = k, .alpha = alpha,
        .beta = beta, .a = a, .b = b, .c = c, .lda = lda, .ldb = ldb,
        .ldc = ldc, .split_rows = m >= n,
    };
    int units = ((g.split_rows ? m : n) + 15) / 16;
    kern__parallel(gemm_task, &g, units < t ? units : t);
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
