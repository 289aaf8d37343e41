/* conv2d 3x3, 64 -> 64 channels, 256x256, batch 1, stride 1, padding 1:
 * forward + backward (din, dweight, dbias) against one square cblas_sgemm
 * of about the same FLOP count (square, m = cbrt(flops/2)) on OpenBLAS's
 * own threads, the kernels' repetitions first. The headline ratio compares
 * the FLOP rates of the best runs, a second line those of the medians. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"
#include "bench_blas.h"
#include "kernels.h"
#include "op_conv2d.h"

#define WARMUP 2
#define REPS 15

int main(int argc, char **argv)
{
    /* two threads, the cores of the machine, unless told otherwise */
    if (bench_blas_guard(argv) < 0)
        return 1;
    kernels_set_threads(argc > 1 ? atoi(argv[1]) : 2);
    op_conv2d_params p = {.n = 1, .c = 64, .h = 256, .w = 256, .k = 64,
                          .r = 3, .s = 3, .stride_h = 1, .stride_w = 1,
                          .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1};
    int oh = op_conv2d_out_h(&p), ow = op_conv2d_out_w(&p);
    size_t nx = (size_t)p.n * p.c * p.h * p.w, nw = (size_t)p.k * p.c * p.r * p.s;
    size_t ny = (size_t)p.n * p.k * oh * ow;
    size_t wsb = op_conv2d_workspace(&p);
    float *x = bench_alloc(nx, 1), *w = bench_alloc(nw, 2), *b = bench_alloc(p.k, 3);
    float *y = bench_alloc(ny, 4), *dy = bench_alloc(ny, 5), *dx = bench_alloc(nx, 6);
    float *dw = bench_alloc(nw, 7), *db = bench_alloc(p.k, 8);
    float *ws = bench_alloc(wsb / sizeof(float) + 1, 9);
    /* forward, weight gradient, data gradient: one GEMM-sized product each */
    double flops = 3.0 * 2.0 * p.k * (double)p.c * p.r * p.s * oh * ow;
    int m = (int)lround(cbrt(flops / 2.0));
    double base_flops = 2.0 * m * (double)m * m;
    float *a = bench_alloc((size_t)m * m, 10), *bb = bench_alloc((size_t)m * m, 11);
    float *c = bench_alloc((size_t)m * m, 12);
    double tf[REPS], tb[REPS], top[REPS], tbase[REPS];

    /* the kernels' reps first, then the raw ones (bench_dense.c says why) */
    for (int rep = -WARMUP; rep < REPS; rep++) {
        double t0 = bench_now();
        op_conv2d_forward(y, x, w, b, &p, ws, wsb);
        double t1 = bench_now();
        op_conv2d_backward(dx, dw, db, dy, x, w, &p, ws, wsb);
        double t2 = bench_now();
        if (rep >= 0) {
            tf[rep] = t1 - t0;
            tb[rep] = t2 - t1;
            top[rep] = t2 - t0;
        }
    }
    bench_blas_raw_begin();
    for (int rep = -WARMUP; rep < REPS; rep++) {
        double t0 = bench_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, m,
                    m, 1.0f, a, m, bb, m, 0.0f, c, m);
        if (rep >= 0)
            tbase[rep] = bench_now() - t0;
    }
    bench_blas_raw_end();
    double bop = bench_best(top, REPS), bbase = bench_best(tbase, REPS);
    double rate = flops / bop, base_rate = base_flops / bbase;
    double mrate = flops / bench_median(top, REPS);
    double mbase_rate = base_flops / bench_median(tbase, REPS);
    printf("BENCH conv3x3_64_256_fwd_bwd %.3f of_sgemm_same_flops\n", rate / base_rate);
    printf("BENCH conv3x3_64_256_fwd_bwd_median %.3f of_sgemm_same_flops\n",
           mrate / mbase_rate);
    printf("BENCH conv_gflops %.1f GFLOP/s\n", rate * 1e-9);
    printf("BENCH conv_fwd_gflops %.1f GFLOP/s\n", flops / 3.0 / bench_best(tf, REPS) * 1e-9);
    printf("BENCH conv_bwd_gflops %.1f GFLOP/s\n",
           flops * 2.0 / 3.0 / bench_best(tb, REPS) * 1e-9);
    printf("BENCH conv_sgemm_%d_gflops %.1f GFLOP/s\n", m, base_rate * 1e-9);
    printf("BENCH conv_batch %d images\n", p.n);
    printf("BENCH conv_workspace %.2f MiB\n", wsb / 1048576.0);
    free(x); free(w); free(b); free(y); free(dy); free(dx); free(dw); free(db);
    free(ws); free(a); free(bb); free(c);
    return 0;
}
