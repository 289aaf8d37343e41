/* Internal: the worker pool the convolutions split their bands over. */
#ifndef KERNELS_INTERNAL_H
#define KERNELS_INTERNAL_H

/* Body of a parallel region: runs once per thread with its index tid in
 * [0, nthreads). */
typedef void (*kern__task_fn)(void *ctx, int tid, int nthreads);

/* Runs fn on min(want, kernels_threads()) threads (the caller being tid 0)
 * and returns when all have finished. With more than one thread, OpenBLAS
 * is switched to one thread for the region so that every thread's GEMMs
 * run on its own core. With one, fn runs inline and GEMMs keep their
 * threads. */
void kern__parallel(kern__task_fn fn, void *ctx, int want);

#endif
