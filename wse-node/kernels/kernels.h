/* Process-wide settings of the operator library: the thread count. Every
 * op_*.h header is usable on its own; this one holds what is shared. */
#ifndef KERNELS_H
#define KERNELS_H

/* Sets the number of threads the operators use (n < 1 means 1): OpenBLAS
 * runs the plain GEMMs (dense) on n threads, and the convolutions split
 * their row bands over a pool of n - 1 workers plus the calling thread,
 * each running single-threaded GEMMs (a 64-row GEMM split by OpenBLAS over
 * two threads reaches only about two thirds of its square-GEMM rate; two
 * independent single-threaded ones get close to it, and the lowering runs
 * in parallel too). The pool's workers sleep between calls. Call it from
 * the one thread that runs the operators, never while one runs; the
 * operators of a process must all be called from that thread. If the
 * workers cannot be started, fewer are used. */
void kernels_set_threads(int n);

/* Returns the thread count set by kernels_set_threads (1 before). */
int kernels_threads(void);

#endif
