/* The weight gradient of a dense layer on a small batch: C = alpha A^T B,
 * A k x m and B k x n (row-major), with k (the batch) small. OpenBLAS
 * first scales C by beta in a pass of its own, packs both operands and then
 * reads C back to add the product: for a 4096 x 16384 weight on a batch of
 * 32 that is three passes over 256 MiB against the product's 4 GFLOP.
 * Here each element of C is written once, from 16 AVX-512 accumulators
 * (4 rows x 64 columns) that sum over k in order. */
#include "kernels.h"
#include "kernels_internal.h"

#include <stdint.h>

#if defined(__x86_64__) && !defined(KERNELS_NO_SMALL_K)
#include <immintrin.h>

enum {
    SK_ROWS = 4,      /* rows of C per block: the 4 broadcasts of A */
    SK_COLS = 64,     /* columns of C per block: 4 vectors of 16 */
    SK_SPAN = 2048,   /* columns of B swept per pass, k x 8 KiB: in L2 */
};

typedef struct sk_job {
    int m, n, k;
    float alpha;
    const float *a, *b;
    float *c;
    int lda, ldb, ldc;
} sk_job;

/* Columns [j0, j1) of `rows` (1..4) rows of C from their k x 4 slice of A,
 * av[p * 4 + r] (unused rows zero), a block of 64 columns at a time and
 * then 16 at a time under a mask. */
__attribute__((target("avx512f")))
static void sk_block(int rows, int k, const float *av, const float *b, int ldb, float *c, int ldc,
                     int j0, int j1, float alpha)
{
    int j = j0;
    for (; j + SK_COLS <= j1; j += SK_COLS) {
        __m512 acc[SK_ROWS][4];
        for (int r = 0; r < SK_ROWS; r++)
            for (int v = 0; v < 4; v++)
                acc[r][v] = _mm512_setzero_ps();
        for (int p = 0; p < k; p++) {
            const float *bp = b + (size_t)p * ldb + j;
            __m512 b0 = _mm512_loadu_ps(bp), b1 = _mm512_loadu_ps(bp + 16);
            __m512 b2 = _mm512_loadu_ps(bp + 32), b3 = _mm512_loadu_ps(bp + 48);
            for (int r = 0; r < SK_ROWS; r++) {
                __m512 x = _mm512_set1_ps(av[p * SK_ROWS + r]);
                acc[r][0] = _mm512_fmadd_ps(x, b0, acc[r][0]);
                acc[r][1] = _mm512_fmadd_ps(x, b1, acc[r][1]);
                acc[r][2] = _mm512_fmadd_ps(x, b2, acc[r][2]);
                acc[r][3] = _mm512_fmadd_ps(x, b3, acc[r][3]);
            }
        }
        __m512 s = _mm512_set1_ps(alpha);
        for (int r = 0; r < rows; r++) {
            float *cr = c + (size_t)r * ldc + j;
            if (((uintptr_t)cr & 63) == 0) /* past the caches: C is not read again soon */
                for (int v = 0; v < 4; v++)
                    _mm512_stream_ps(cr + 16 * v, alpha == 1.0f ? acc[r][v] : _mm512_mul_ps(s, acc[r][v]));
            else
                for (int v = 0; v < 4; v++)
                    _mm512_storeu_ps(cr + 16 * v, alpha == 1.0f ? acc[r][v] : _mm512_mul_ps(s, acc[r][v]));
        }
    }
    for (; j < j1; j += 16) {
        __mmask16 mask = j1 - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (j1 - j)) - 1);
        __m512 acc[SK_ROWS];
        for (int r = 0; r < SK_ROWS; r++)
            acc[r] = _mm512_setzero_ps();
        for (int p = 0; p < k; p++) {
            __m512 bv = _mm512_maskz_loadu_ps(mask, b + (size_t)p * ldb + j);
            for (int r = 0; r < SK_ROWS; r++)
                acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(av[p * SK_ROWS + r]), bv, acc[r]);
        }
        for (int r = 0; r < rows; r++)
            _mm512_mask_storeu_ps(c + (size_t)r * ldc + j, mask,
                                  alpha == 1.0f ? acc[r] : _mm512_mul_ps(_mm512_set1_ps(alpha), acc[r]));
    }
}

/* The streaming stores are ordered before the region ends. */
__attribute__((target("avx512f")))
static void sk_fence(void)
{
    _mm_sfence();
}

/* Rows [lo, hi) of C: a span of B's columns at a time (it stays in L2
 * while every block of rows passes over it). */
static void sk_rows(const sk_job *g, int lo, int hi)
{
    float av[64 * SK_ROWS];
    for (int j0 = 0; j0 < g->n; j0 += SK_SPAN) {
        int j1 = g->n - j0 < SK_SPAN ? g->n : j0 + SK_SPAN;
        for (int i = lo; i < hi; i += SK_ROWS) {
            int rows = hi - i < SK_ROWS ? hi - i : SK_ROWS;
            for (int p = 0; p < g->k; p++)
                for (int r = 0; r < SK_ROWS; r++)
                    av[p * SK_ROWS + r] = r < rows ? g->a[(size_t)p * g->lda + i + r] : 0.0f;
            sk_block(rows, g->k, av, g->b, g->ldb, g->c + (size_t)i * g->ldc, g->ldc, j0, j1,
                     g->alpha);
        }
    }
}

static void sk_task(void *ctx, int tid, int nt)
{
    const sk_job *g = ctx;
    int blocks = (g->m + SK_ROWS - 1) / SK_ROWS;
    int lo = (int)((long)blocks * tid / nt) * SK_ROWS;
    int hi = (int)((long)blocks * (tid + 1) / nt) * SK_ROWS;
    if (hi > g->m)
        hi = g->m;
    if (lo < hi)
        sk_rows(g, lo, hi);
    sk_fence();
}

int kern__sgemm_small_k(int m, int n, int k, float alpha, const float *a, int lda,
                        const float *b, int ldb, float *c, int ldc)
{
    if (kernels_isa_level() < KERNELS_ISA_AVX512 || k < 1 || k > 64 || m < 1 || n < 1)
        return -1;
    sk_job g = {.m = m, .n = n, .k = k, .alpha = alpha, .a = a, .b = b, .c = c,
                .lda = lda, .ldb = ldb, .ldc = ldc};
    int blocks = (m + SK_ROWS - 1) / SK_ROWS;
    /* a thread's share below about a million multiply-adds costs less than
     * waking the pool */
    int want = (double)m * n * k < 2e6 ? 1 : blocks;
    kern__parallel(sk_task, &g, want);
    return 0;
}

#else

int kern__sgemm_small_k(int m, int n, int k, float alpha, const float *a, int lda,
                        const float *b, int ldb, float *c, int ldc)
{
    (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb, (void)c,
        (void)ldc;
    return -1;
}

#endif
