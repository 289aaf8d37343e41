/* Process-wide settings of the operator library: the thread count. Every
 * op_*.h header is usable on its own; this one holds what is shared. */
#ifndef KERNELS_H
#define KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* Sets the number of threads the operators use (n < 1 means 1): a pool of
 * n - 1 workers plus the calling thread. The convolutions split their row
 * bands over it, each thread running single-threaded GEMMs (a 64-row GEMM
 * split by OpenBLAS over two threads reaches only about two thirds of its
 * square-GEMM rate; two independent single-threaded ones get close to it,
 * and the lowering runs in parallel too); the plain GEMMs split in blocks
 * (kern_sgemm); the elementwise, pooling and normalisation operators in
 * ranges of elements, planes or channels. OpenBLAS itself runs on one
 * thread: its workers spin between calls, taking the cores from the rest
 * of the process and the host's other daemons, where the pool's workers
 * sleep. Also sets the calling thread's floating-point mode (fpmode.h),
 * which the workers inherit. Call it from the one thread that runs the
 * operators, never while one runs; the operators of a process must all be
 * called from that thread. If the workers cannot be started, fewer are
 * used. */
void kernels_set_threads(int n);

/* Returns the thread count set by kernels_set_threads (1 before). */
int kernels_threads(void);

/* Body of a split loop: items [lo, hi). */
typedef void (*kernels_range_fn)(void *ctx, size_t lo, size_t hi);

/* Runs fn over [0, n) in contiguous ranges, one per thread, when each
 * thread gets at least `grain` items; inline in one call otherwise. The
 * items must be independent: which thread computes one never changes its
 * value. From the operators' thread, as the operators. */
void kernels_for(size_t n, size_t grain, kernels_range_fn fn, void *ctx);

/* memcpy and memset to zero of count floats, split over the operators'
 * threads where each gets at least 32 Ki of them (a large activation or
 * gradient: one thread alone leaves the other waiting in its team). The
 * ranges must not overlap. */
void kernels_copy(float *dst, const float *src, size_t count);
void kernels_zero(float *dst, size_t count);

/* C (m x n) = alpha * op(A) * op(B) + beta * C, row-major, op transposing
 * when ta / tb. Where the build has oneDNN on OpenMP, a product of 4
 * MFLOP or more runs on oneDNN's sgemm over the operators' threads, but
 * with B transposed under 128 rows of C (and APPLIANCE_SGEMM=openblas
 * keeps them all off it); otherwise cblas_sgemm split in blocks of 16
 * rows or columns (of the larger side) over the operators' threads, each
 * block a single-threaded OpenBLAS call; inline on one thread when the
 * product is small or the caller already runs in one of the threads'
 * regions. The library is chosen by the shape, and a thread count always
 * splits a shape the same way, so results repeat; another count may
 * differ in the last bit, as with either library's own threads. */
void kern_sgemm(int ta, int tb, int m, int n, int k, float alpha,
                const float *a, int lda, const float *b, int ldb, float beta,
                float *c, int ldc);

/* Mixed precision's GEMM: C (m x n) = op(A) op(B) + beta C with A and B
 * rounded to bfloat16 (to nearest even) and their products summed in
 * float32 (oneDNN's matmul, on AMX or AVX512_BF16), beta 0 or 1. ws holds
 * the rounded operands and oneDNN's scratch (convplan_gemm_bf16_workspace
 * bytes, 64-byte aligned). Runs in float32 instead (kern_sgemm) where the
 * processor or the build has no bfloat16 path, or ws is too small.
 * Returns 1 when it computed in bfloat16, 0 in float32. */
int kern_gemm_bf16(int ta, int tb, int m, int n, int k, const float *a, int lda, const float *b,
                   int ldb, float beta, float *c, int ldc, void *ws, size_t ws_bytes);
/* kern_gemm_bf16 whose A is the A of the last GEMM on ws, unchanged since,
 * stored alike (op(A) of the same rows, columns and lda: dY for a dense
 * layer's dW = dY^T X and then its dX = dY W): when that GEMM ran in
 * bfloat16, the rounded copy still in ws is used again. */
int kern_gemm_bf16_same_a(int ta, int tb, int m, int n, int k, const float *a, int lda,
                          const float *b, int ldb, float beta, float *c, int ldc, void *ws,
                          size_t ws_bytes);
/* kern_gemm_bf16 (kern_gemm_bf16_same_a with same_a) whose B the caller
 * may keep rounded already: b16, unless NULL, holds B's rows rounded
 * (bf16_pack) and packed, (tb ? n : k) rows of (tb ? k : n): a replica's
 * weights, rounded once as they are updated instead of at every GEMM. b is
 * still what a GEMM in float32 reads; b_stale says it holds nothing yet
 * (the weights came in bfloat16 alone): a GEMM that falls back to float32
 * then first widens b16 into b. bias, unless NULL, is added to every
 * row of the product instead of beta C: C = op(A) op(B) + bias, the bits
 * of C seeded with bias and beta 1, without that pass over C and its
 * reading back (oneDNN adds it as it writes C). */
int kern_gemm_bf16_kept_b(int ta, int tb, int m, int n, int k, const float *a, int lda,
                          const float *b, int ldb, const uint16_t *b16, int b_stale,
                          const float *bias, float beta, float *c, int ldc, void *ws,
                          size_t ws_bytes, int same_a);

/* kern_gemm_bf16_kept_b (no bias) whose A the caller rounded already:
 * a16 holds op(A) rounded to bfloat16, m rows of k, packed (a dense
 * layer's dY, or its transpose, made in the pass that also masks it and
 * sums its columns). a, lda and ta still say where A is in float32, which
 * a GEMM in float32 reads. Where B is not kept, m and n are 256 or more
 * and B is not transposed, B goes into the matmul's own layout (oneDNN's
 * reorder, rounding) and A is read where it is. */
int kern_gemm_bf16_rounded_a(int ta, int tb, int m, int n, int k, const uint16_t *a16,
                             const float *a, int lda, const float *b, int ldb, const uint16_t *b16,
                             int b_stale, float beta, float *c, int ldc, void *ws,
                             size_t ws_bytes);

/* 1 when kern_gemm_bf16 computes in bfloat16 on this processor and build. */
int kernels_bf16_compute(void);

/* The instructions it uses: "amx", "avx512_bf16", or "none". */
const char *kernels_bf16_isa(void);

/* The instruction sets the kernels' own vector code chooses between, in
 * order: each includes the ones before it. */
typedef enum kernels_isa {
    KERNELS_ISA_BASE,        /* none of the kernels' own vector code */
    KERNELS_ISA_AVX2,        /* AVX2 and FMA */
    KERNELS_ISA_AVX512,      /* AVX-512 F, BW, VL and DQ */
    KERNELS_ISA_AVX512_BF16, /* and AVX512_BF16 */
    KERNELS_ISA_AMX,         /* and AMX's tiles for bfloat16 */
} kernels_isa;

/* The processor's set, and the set the kernels use: the processor's
 * capped by ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA), the variable that
 * caps oneDNN's own kernels, in its spelling (AVX2, AVX512_CORE,
 * AVX512_CORE_BF16, AVX512_CORE_AMX, ...), so that one setting makes a
 * machine take every path of an older one: the direct convolutions, the
 * packing into aBcd16b and the small GEMMs then run where that machine
 * would run them. Read once. (The elementwise loops built as processor
 * clones by the compiler, whose bits do not depend on the clone, follow
 * the processor.) */
kernels_isa kernels_isa_processor(void);
kernels_isa kernels_isa_level(void);
/* oneDNN's name of a set (lower case: "avx2", "avx512_core_bf16", ...). */
const char *kernels_isa_name(kernels_isa isa);
/* The set a value of ONEDNN_MAX_CPU_ISA allows, into *cap: 0, or -1 for
 * a name oneDNN does not know (oneDNN then ignores it, and so do the
 * kernels). */
int kernels_isa_cap_of(const char *value, kernels_isa *cap);

/* Seconds the kernels have spent in this process moving operands between
 * the executor's plain float32 tensors and what oneDNN computes on: the
 * reorders into and out of its blocked layouts, and the rounding of
 * operands to bfloat16 (each timed around the call on its caller's
 * thread). The rest of a oneDNN convolution or GEMM is its computation. */
double kernels_layout_seconds(void);

/* The kernels' regions and oneDNN's primitives run on one team of OpenMP
 * threads, which libgomp lets spin for GOMP_SPINCOUNT pauses after a
 * region before they sleep (300,000 when unset: a few milliseconds).
 * Spinning, a thread starts the next region at once instead of waiting to
 * be woken (resnet_small's step: 24 ms against 32 with OMP_WAIT_POLICY=
 * PASSIVE); spinning long after a task, it takes a core from the event
 * loop and the host's other daemons (a mixed-precision MLP's step: 0.071 s
 * at 300,000, 0.067 at 3,000). libgomp reads the environment once, when it
 * loads: first thing in main, before any thread, when oneDNN runs on
 * OpenMP and the environment names neither OMP_WAIT_POLICY nor
 * GOMP_SPINCOUNT, sets GOMP_SPINCOUNT to KERNELS_OMP_SPINCOUNT and
 * executes the program again. Returns 1 when the environment names one
 * (the wait in force), 0 when oneDNN does not run on OpenMP, -1 when the
 * program could not start again (it goes on with libgomp's default). */
#define KERNELS_OMP_SPINCOUNT "100000"
int kernels_omp_wait(char **argv);

/* For tests and benchmarks, from the operators' thread between operators:
 * 0 turns off the kernels' own passes for mixed precision's GEMMs (a dense
 * layer's one pass over dY, which masks it, rounds it as it is and
 * transposed; and B put into the matmul's blocked layout by the kernels
 * instead of by oneDNN), leaving each GEMM to round and reorder its
 * operands itself, as before them: the same bits, more time. 1 (the
 * default) turns them on. */
void kernels_bf16_own_passes(int on);

/* For tests: 0 makes kern_gemm_bf16 compute in float32 from now on, 1
 * lets it use bfloat16 again. */
void kernels_bf16_enable(int on);

#endif
