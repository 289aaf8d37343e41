/* Process-wide settings of the operator library: the BLAS thread count.
 * Every op_*.h header is usable on its own; this one holds what is shared. */
#ifndef KERNELS_H
#define KERNELS_H

/* Sets the number of threads OpenBLAS uses for every later GEMM in the
 * process (n < 1 means 1). Not thread-safe against GEMMs in flight. */
void kernels_set_threads(int n);

/* Returns the number of threads OpenBLAS currently uses. */
int kernels_threads(void);

#endif
