/* Dense layer forward + backward at batch 256, 1024 -> 1024 against the
 * same three cblas_sgemm calls made raw (on OpenBLAS's own threads), the
 * kernels' repetitions first. The headline ratio compares the best times,
 * a second line the medians. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"
#include "bench_blas.h"
#include "kernels.h"
#include "op_dense.h"

#define N 256
#define IN 1024
#define OUT 1024
#define WARMUP 3
#define REPS 21

int main(int argc, char **argv)
{
    /* two threads, the cores of the machine, unless told otherwise */
    if (bench_blas_guard(argv) < 0)
        return 1;
    kernels_set_threads(argc > 1 ? atoi(argv[1]) : 2);
    float *x = bench_alloc((size_t)N * IN, 1), *w = bench_alloc((size_t)OUT * IN, 2);
    float *b = bench_alloc(OUT, 3), *y = bench_alloc((size_t)N * OUT, 4);
    float *dy = bench_alloc((size_t)N * OUT, 5), *dx = bench_alloc((size_t)N * IN, 6);
    float *dw = bench_alloc((size_t)OUT * IN, 7), *db = bench_alloc(OUT, 8);
    double top[REPS], tbase[REPS];
    double flops = 3.0 * 2.0 * N * IN * OUT;

    /* the kernels' reps first, then the raw ones: OpenBLAS's threads,
     * once woken, spin for up to a second and would take the cores from
     * the kernels' own (interleaved, they halved the kernels' rate) */
    for (int rep = -WARMUP; rep < REPS; rep++) {
        double t0 = bench_now();
        op_dense_forward(y, x, w, b, N, IN, OUT);
        op_dense_backward(dx, dw, db, dy, x, w, N, IN, OUT);
        if (rep >= 0)
            top[rep] = bench_now() - t0;
    }
    bench_blas_raw_begin();
    for (int rep = -WARMUP; rep < REPS; rep++) {
        double t0 = bench_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OUT,
                    IN, 1.0f, x, IN, w, IN, 0.0f, y, OUT);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OUT, IN,
                    N, 1.0f, dy, OUT, x, IN, 0.0f, dw, IN);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IN,
                    OUT, 1.0f, dy, OUT, w, IN, 0.0f, dx, IN);
        if (rep >= 0)
            tbase[rep] = bench_now() - t0;
    }
    bench_blas_raw_end();
    double bop = bench_best(top, REPS), bbase = bench_best(tbase, REPS);
    double mop = bench_median(top, REPS), mbase = bench_median(tbase, REPS);
    printf("BENCH dense_fwd_bwd_b256 %.3f of_sgemm\n", bbase / bop);
    printf("BENCH dense_fwd_bwd_b256_median %.3f of_sgemm\n", mbase / mop);
    printf("BENCH dense_gflops %.1f GFLOP/s\n", flops / bop * 1e-9);
    printf("BENCH dense_sgemm_gflops %.1f GFLOP/s\n", flops / bbase * 1e-9);
    printf("BENCH dense_fwd_bwd_b256_time %.3f ms\n", bop * 1e3);
    free(x); free(w); free(b); free(y); free(dy); free(dx); free(dw); free(db);
    return 0;
}
