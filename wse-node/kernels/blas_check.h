/* The BLAS start-up self-check. OpenBLAS picks its kernels for the
 * processor it detects when the library loads; a build that misreads a
 * processor (a virtual CPU that reports AVX-512 its hypervisor does not
 * enable, a core newer than the library) computes wrong numbers or dies of
 * SIGILL. Rather than pin every machine to one slow core type, a process
 * that computes checks the chosen kernels once against a reference and
 * falls back to a named core type only when they fail. */
#ifndef BLAS_CHECK_H
#define BLAS_CHECK_H

#include <stddef.h>

#include "kernels.h"

/* A row-major single-precision GEMM, C = alpha op(A) op(B) + beta C, with
 * ta/tb nonzero for a transposed operand (cblas_sgemm's contract). */
typedef void (*blas_sgemm_fn)(int ta, int tb, int m, int n, int k, float alpha, const float *a,
                              int lda, const float *b, int ldb, float beta, float *c, int ldc);

/* OpenBLAS's cblas_sgemm behind that signature. */
void blas_sgemm_openblas(int ta, int tb, int m, int n, int k, float alpha, const float *a,
                         int lda, const float *b, int ldb, float beta, float *c, int ldc);

/* Runs gemm on a few shapes that reach its packing and edge kernels (every
 * transpose, odd sizes, accumulation into C) against a double-precision
 * reference. Returns 0, or -1 with err naming the shape, the element and
 * both values. */
int blas_selfcheck(blas_sgemm_fn gemm, char *err, size_t errlen);

/* The same in a child process, so that a kernel that dies (SIGILL, SIGSEGV)
 * is a failed check, not a dead program: -1 with err saying which signal
 * or which value. Call it before the process starts threads of its own. */
int blas_selfcheck_isolated(blas_sgemm_fn gemm, char *err, size_t errlen);

/* The core type to fall back to on this processor when core `failed` does
 * not pass: Haswell with AVX2 and FMA, else Sandybridge with AVX, else
 * Prescott; never `failed` itself. NULL when none is left. */
const char *blas_fallback_core(const char *failed);

/* The core types newer than `named` that the instruction set isa allows
 * (kernels_isa_level: the processor's, capped), the newest first, into
 * out (at most max): Cooperlake with AVX512_BF16, SkylakeX with AVX-512,
 * Haswell and Zen with AVX2. None for a core the table does not know. */
int blas_better_cores(const char *named, kernels_isa isa, const char **out, int max);

/* Where `named` needs more than isa allows (Cooperlake under a cap of
 * AVX2): every core isa allows, the newest first, into out (at most max);
 * else none. */
int blas_allowed_cores(const char *named, kernels_isa isa, const char **out, int max);

/* Starts this program again with OpenBLAS on core type `core`: before its
 * main it checks that core's sgemm (blas_selfcheck) and times it (square
 * single-threaded GEMMs of 256). 0 with *gflops, or -1 with why (a wrong
 * value, a signal). */
int blas_probe_core(const char *core, double *gflops, char *why, size_t whylen);

/* What the guard found. */
typedef struct blas_status {
    char core[32];        /* the core type OpenBLAS runs (its corename) */
    char failed[32];      /* the core that failed before a fallback, or "" */
    char why[256];        /* how it failed */
    char named[32];       /* the core OpenBLAS named, where a search chose another, or "" */
    char tried[512];      /* the search's findings ("Haswell 38, SkylakeX 71 GFLOP/s"), or "" */
} blas_status;

/* The guard, first thing in a program's main, before any thread starts:
 * checks OpenBLAS's kernels in a child. When they pass but OpenBLAS named
 * a core older than the processor allows (Prescott on an AVX-512 machine
 * whose model the library does not know), and neither OPENBLAS_CORETYPE
 * nor APPLIANCE_BLAS_SEARCH=off is set, probes the named core and each
 * newer one the processor allows (blas_probe_core) and executes the
 * program again on the newest that computes right, unless it runs at
 * under half the named one's speed: a rule of the processor, so that every
 * start picks the same core and computes the same bits (st->named and
 * st->tried then say what was found, for the log). Where the named core
 * needs more than kernels_isa_level allows (a processor's paths run as an
 * older one's: ONEDNN_MAX_CPU_ISA), the newest core the cap allows runs
 * instead. When they fail, sets
 * OPENBLAS_CORETYPE to blas_fallback_core and executes the program again
 * (OpenBLAS reads it only when it loads), noting the failure in the
 * environment so that the new image reports it in *st. Returns 0 with *st
 * filled (the caller logs it), or -1 with err when no core type passes: the
 * program must not compute. */
int blas_guard(char **argv, blas_status *st, char *err, size_t errlen);

#endif
