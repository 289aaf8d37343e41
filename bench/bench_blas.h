/* The kernels the wse-node would run, for the benchmarks that compute:
 * OpenBLAS's choice for this processor, self-checked (blas_check.h). */
#ifndef BENCH_BLAS_H
#define BENCH_BLAS_H

#include <stdio.h>

#include "blas_check.h"

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
    fprintf(stderr, "blas: OpenBLAS core %s%s%s\n", blas.core, blas.failed[0] ? ", after core " : "",
           blas.failed[0] ? blas.failed : "");
    return 0;
}

#endif
