/* The kernels' GEMM (kern_sgemm): a small K written once
 * (gemm_small_k.c), oneDNN's sgemm on the operators' team for the large
 * products, else OpenBLAS on one thread per block of rows or columns over
 * the kernels' threads (pool.c); bias rows seeded first where a layer has
 * one. */
#include "kernels.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "kernels_internal.h"

#if defined(KERNELS_HAVE_DNNL) && DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
#define KERN__OMP_TEAM 1
#endif

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
    int t = kernels_threads();
    if (flops < 4e6 * t)
        t = 1;
#ifdef KERN__OMP_TEAM
    if (flops >= 4e6 && !kern__in_region() && sgemm_on_onednn(ta, tb, m) &&
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

