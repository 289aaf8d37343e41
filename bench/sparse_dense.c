/* Sparse dense layers against the dense path in the same process: a
 * 4096 x 4096 layer at batch 256, forward + backward (op_dense_forward +
 * op_dense_backward against op_sparse_dense_forward + _backward, the kept
 * values refreshed from the stream's order each step as Weight Streaming
 * delivers them), at 50%, 75%, 90% and 95% sparsity (random masks); the
 * cost model's prediction beside each; and the forward pass over a
 * mostly-zero input (natural sparsity after a relu) at input densities
 * from 50% to 2%. Best of a few rounds each (the host is shared). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_blas.h"
#include "bench_util.h"
#include "kernels.h"
#include "kernels_internal.h"
#include "op_dense.h"
#include "op_sparse_dense.h"

/* The process's processor time over all its threads: on a shared host
 * the time the others take is not in it (the threads' spinning at the
 * regions' ends is, on either path). */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define N 256
#define IN 4096
#define OUT 4096
#define REPS 4

static double dense_step(float *y, float *x, float *w, float *b, float *dy, float *dx, float *dw,
                         float *db)
{
    double t0 = bench_now();
    op_dense_forward(y, x, w, b, N, IN, OUT);
    op_dense_backward(dx, dw, db, dy, x, w, N, IN, OUT);
    return bench_now() - t0;
}

/* The activations and gradients one sparse step reads and writes */
typedef struct sparse_io {
    float *y, *x, *b, *dy, *dx, *dkept, *db;
    void *ws;
    size_t wsb;
} sparse_io;

/* The best of reps sparse steps (the values set from kept, forward,
 * backward) of sw */
static double sparse_best(sparse_w *sw, const float *kept, const sparse_io *io, int reps)
{
    double best = 1e9;
    for (int rep = 0; rep < reps; rep++) {
        double t0 = bench_now();
        sparse_w_set_kept(sw, kept);
        op_sparse_dense_forward(io->y, io->x, sw, io->b, N, io->ws, io->wsb);
        op_sparse_dense_backward(io->dx, io->dkept, io->db, io->dy, io->x, sw, N, io->ws, io->wsb);
        double t = bench_now() - t0;
        best = t < best ? t : best;
    }
    return best;
}

int main(int argc, char **argv)
{
    if (bench_blas_guard(argv) < 0)
        return 1;
    kernels_set_threads(argc > 1 ? atoi(argv[1]) : 2);
    fprintf(stderr, "kernels isa: %s\n", kernels_isa_name(kernels_isa_level()));
    float *x = bench_alloc((size_t)N * IN, 1), *w = bench_alloc((size_t)OUT * IN, 2);
    float *b = bench_alloc(OUT, 3), *y = bench_alloc((size_t)N * OUT, 4);
    float *dy = bench_alloc((size_t)N * OUT, 5), *dx = bench_alloc((size_t)N * IN, 6);
    float *dw = bench_alloc((size_t)OUT * IN, 7), *db = bench_alloc(OUT, 8);
    float *wp = bench_alloc((size_t)OUT * IN, 9);
    uint8_t *mask = malloc((size_t)OUT * IN);

    /* the dense baseline: forward, backward, together */
    double tf = 1e9, tb = 1e9, tdense = 1e9, cdense = 1e9;
    for (int rep = -1; rep < REPS; rep++) {
        double c0 = cpu_now(), t0 = bench_now();
        op_dense_forward(y, x, w, b, N, IN, OUT);
        double t1 = bench_now();
        op_dense_backward(dx, dw, db, dy, x, w, N, IN, OUT);
        double t2 = bench_now(), c2 = cpu_now();
        if (rep >= 0) {
            cdense = c2 - c0 < cdense ? c2 - c0 : cdense;
            tf = t1 - t0 < tf ? t1 - t0 : tf;
            tb = t2 - t1 < tb ? t2 - t1 : tb;
            tdense = t2 - t0 < tdense ? t2 - t0 : tdense;
        }
    }
    printf("BENCH dense_layer_4096_b256_fwd_bwd_ms %.2f ms\n", tdense * 1e3);
    printf("BENCH dense_layer_4096_b256_gflops %.1f GFLOP/s\n",
           3.0 * 2.0 * N * IN * OUT / tdense * 1e-9);
    fprintf(stderr, "dense: forward %.2f ms, backward %.2f ms\n", tf * 1e3, tb * 1e3);

    static const double sparsity[] = {0.50, 0.75, 0.90, 0.95};
    for (size_t s = 0; s < sizeof(sparsity) / sizeof(sparsity[0]); s++) {
        unsigned seed = 12345u + (unsigned)s;
        for (size_t i = 0; i < (size_t)OUT * IN; i++) {
            seed = seed * 1664525u + 1013904223u;
            mask[i] = (double)(seed >> 8) / 16777216.0 >= sparsity[s];
            wp[i] = mask[i] ? w[i] : 0.0f;
        }
        char err[256];
        sparse_w *sw = sparse_w_new(wp, mask, OUT, IN, err, sizeof(err));
        if (!sw) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        size_t wsb = op_sparse_dense_workspace(sw, N);
        void *ws = aligned_alloc(64, (wsb + 63) / 64 * 64);
        float *kept = malloc(sizeof(float) * (sw->nnz ? sw->nnz : 1));
        float *dkept = malloc(sizeof(float) * (sw->nnz ? sw->nnz : 1));
        sparse_w_gather(sw, wp, kept);
        sparse_io io = {y, x, b, dy, dx, dkept, db, ws, wsb};
        double ts = 1e9, tsf = 1e9, tsb = 1e9, tset = 1e9, cs = 1e9;
        for (int rep = -1; rep < REPS; rep++) {
            double c0 = cpu_now(), t0 = bench_now();
            sparse_w_set_kept(sw, kept);
            double t1 = bench_now();
            op_sparse_dense_forward(y, x, sw, b, N, ws, wsb);
            double t2 = bench_now();
            op_sparse_dense_backward(dx, dkept, db, dy, x, sw, N, ws, wsb);
            double t3 = bench_now(), c3 = cpu_now();
            if (rep >= 0) {
                cs = c3 - c0 < cs ? c3 - c0 : cs;
                ts = t3 - t0 < ts ? t3 - t0 : ts;
                tset = t1 - t0 < tset ? t1 - t0 : tset;
                tsf = t2 - t1 < tsf ? t2 - t1 : tsf;
                tsb = t3 - t2 < tsb ? t3 - t2 : tsb;
            }
        }
        /* the dense path again, after: the host's load changes */
        for (int rep = 0; rep < 2; rep++) {
            double c0 = cpu_now();
            double t = dense_step(y, x, w, b, dy, dx, dw, db);
            double c = cpu_now() - c0;
            tdense = t < tdense ? t : tdense;
            cdense = c < cdense ? c : cdense;
        }
        int pct = (int)(sparsity[s] * 100 + 0.5);
        /* the other instruction sets' paths at 90%: their factors in the
         * cost model */
        for (int isa = KERNELS_ISA_AVX2; pct == 90 && isa >= KERNELS_ISA_BASE; isa--) {
            if (isa >= (int)kernels_isa_level())
                continue;
            kern__sparse_set_isa(isa);
            double ti = sparse_best(sw, kept, &io, 2);
            kern__sparse_set_isa(-1);
            printf("BENCH sparse_dense_layer_%s_90 %.2f of_avx512_path\n", kernels_isa_name(isa),
                   ti / ts);
        }
        printf("BENCH sparse_dense_layer_speedup_%d %.2f of_dense\n", pct, tdense / ts);
        printf("BENCH sparse_dense_layer_cpu_speedup_%d %.2f of_dense_cpu\n", pct, cdense / cs);
        printf("BENCH sparse_dense_layer_model_ratio_%d %.2f predicted_sparse_over_dense\n", pct,
               op_sparse_dense_cost_ratio(sw->nnz, N, IN, OUT));
        fprintf(stderr,
                "sparsity %.2f: nnz %zu, values %.2f ms, forward %.2f ms, backward %.2f ms, "
                "total %.2f ms (dense %.2f): %.4f ns per kept weight and sample\n",
                sparsity[s], sw->nnz, tset * 1e3, tsf * 1e3, tsb * 1e3, ts * 1e3, tdense * 1e3,
                ts * 1e9 / ((double)sw->nnz * N));
        /* the panel widths side by side (kern__panel_width's choice is
         * the one above) */
        for (int pw = 64; pw <= KERN__PANEL; pw *= 2) {
            kern__sparse_set_panel(pw);
            sparse_w *sp = sparse_w_new(NULL, mask, OUT, IN, err, sizeof(err));
            kern__sparse_set_panel(0);
            if (!sp)
                break;
            double tp = sparse_best(sp, kept, &io, 3);
            fprintf(stderr, "  panels of %d%s: %.2f ms\n", pw, pw == sw->pw ? " (chosen)" : "",
                    tp * 1e3);
            sparse_w_free(sp);
        }
        free(kept);
        free(dkept);
        free(ws);
        sparse_w_free(sw);
    }

    if (argc > 2 && strcmp(argv[2], "layer") == 0)
        return 0;
    /* natural sparsity: the forward pass over an input with a fraction of
     * nonzeros, the weight kept transposed (and with its transpose made in
     * the pass, for the case where it is not kept) */
    float *wt = bench_alloc((size_t)OUT * IN, 10), *xs = bench_alloc((size_t)N * IN, 11);
    size_t xwsb = op_dense_sparse_in_workspace(N, IN);
    size_t bwsb = op_dense_sparse_in_backward_workspace(N, IN);
    void *bws = aligned_alloc(64, (bwsb + 63) / 64 * 64);
    void *xws = aligned_alloc(64, (xwsb + 63) / 64 * 64);
    sparse_w_transpose(wt, w, OUT, IN);
    static const double dens[] = {0.50, 0.25, 0.10, 0.05, 0.02};
    for (size_t d = 0; d < sizeof(dens) / sizeof(dens[0]); d++) {
        unsigned seed = 777u + (unsigned)d;
        for (size_t i = 0; i < (size_t)N * IN; i++) {
            seed = seed * 1664525u + 1013904223u;
            xs[i] = (double)(seed >> 8) / 16777216.0 < dens[d] ? x[i] + 0.6f : 0.0f;
        }
        double td = 1e9, tsp = 1e9, tspt = 1e9, tdb = 1e9, tsb = 1e9;
        for (int rep = -1; rep < REPS; rep++) {
            double t0 = bench_now();
            op_dense_forward(y, xs, w, b, N, IN, OUT);
            double t1 = bench_now();
            op_dense_sparse_in_forward(y, xs, wt, b, N, IN, OUT, xws, xwsb);
            double t2 = bench_now();
            sparse_w_transpose(wt, w, OUT, IN);
            op_dense_sparse_in_forward(y, xs, wt, b, N, IN, OUT, xws, xwsb);
            double t3 = bench_now();
            op_dense_backward(dx, dw, db, dy, xs, w, N, IN, OUT);
            double t4 = bench_now();
            op_dense_sparse_in_backward(dx, dw, db, dy, xs, w, N, IN, OUT, bws, bwsb);
            double t5 = bench_now();
            if (rep >= 0) {
                tdb = t4 - t3 < tdb ? t4 - t3 : tdb;
                tsb = t5 - t4 < tsb ? t5 - t4 : tsb;
                td = t1 - t0 < td ? t1 - t0 : td;
                tsp = t2 - t1 < tsp ? t2 - t1 : tsp;
                tspt = t3 - t2 < tspt ? t3 - t2 : tspt;
            }
        }
        int pct = (int)(dens[d] * 100 + 0.5);
        printf("BENCH dense_sparse_input_fwd_speedup_%d %.2f of_dense\n", pct, td / tsp);
        printf("BENCH dense_sparse_input_fwd_transposing_speedup_%d %.2f of_dense\n", pct,
               td / tspt);
        printf("BENCH dense_sparse_input_bwd_speedup_%d %.2f of_dense\n", pct, tdb / tsb);
        fprintf(stderr,
                "input density %.2f: forward dense %.2f ms, sparse %.2f ms, with transpose %.2f "
                "ms; backward dense %.2f ms, sparse %.2f ms\n",
                dens[d], td * 1e3, tsp * 1e3, tspt * 1e3, tdb * 1e3, tsb * 1e3);
    }
    free(wt);
    free(xs);
    free(xws);
    free(bws);
    free(x), free(w), free(b), free(y), free(dy), free(dx), free(dw), free(db), free(wp);
    free(mask);
    return 0;
}
