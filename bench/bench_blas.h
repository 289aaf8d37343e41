/* The kernels the wse-node would run, for the benchmarks that compute:
 * OpenBLAS's choice for this processor, self-checked (blas_check.h). */
#ifndef BENCH_BLAS_H
#define BENCH_BLAS_H

#include <cblas.h>
#include <stdio.h>

#include "blas_check.h"
#include "kernels.h"

/* Runs the guard first thing in main (it may run the program again) and
 * prints the core in use. Returns 0, or -1 after printing why the kernels
 * cannot be used. */
static inline int bench_blas_guard(char **argv)
{
    blas_status blas;
    char err[512];
    if (blas_guard(argv, &blas, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    fprintf(stderr, "blas: OpenBLAS core %s%s%s%s%s%s%s\n", blas.core,
            blas.failed[0] ? ", after core " : "", blas.failed[0] ? blas.failed : "",
            blas.named[0] ? ", where OpenBLAS named " : "", blas.named, blas.tried[0] ? ": " : "",
            blas.tried);
    return 0;
}

/* Around a raw cblas baseline: OpenBLAS on its own threads, as many as the
 * kernels have (kernels_set_threads leaves it on one: the kernels split
 * their GEMMs themselves), then back on one. Time the kernels before a
 * raw baseline, not after: OpenBLAS's workers, once woken, spin for up to
 * a second after their last call and take the cores from the kernels'
 * own threads. */
static inline void bench_blas_raw_begin(void)
{
    openblas_set_num_threads(kernels_threads());
}

static inline void bench_blas_raw_end(void)
{
    openblas_set_num_threads(1);
}

#endif
