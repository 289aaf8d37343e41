/* A misdetecting BLAS, for tests/wse-node/blas_fallback.sh: preloaded
 * into a wse-node, it interposes cblas_sgemm and, unless OPENBLAS_CORETYPE
 * is set (the guard's fallback sets it), gives what a kernel of the wrong
 * core type gives. BLAS_SHIM decides how it fails:
 *   wrong   C[0][0] off by one (the default)
 *   sigill  the process dies of SIGILL, as on an instruction it lacks
 *   always  wrong whatever the core type: the fallback fails too */
#include <cblas.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

typedef void (*sgemm_fn)(const enum CBLAS_ORDER, const enum CBLAS_TRANSPOSE,
                         const enum CBLAS_TRANSPOSE, const blasint, const blasint, const blasint,
                         const float, const float *, const blasint, const float *, const blasint,
                         const float, float *, const blasint);

void cblas_sgemm(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE ta,
                 const enum CBLAS_TRANSPOSE tb, const blasint m, const blasint n, const blasint k,
                 const float alpha, const float *a, const blasint lda, const float *b,
                 const blasint ldb, const float beta, float *c, const blasint ldc)
{
    sgemm_fn real = (sgemm_fn)dlsym(RTLD_NEXT, "cblas_sgemm");
    real(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    const char *mode = getenv("BLAS_SHIM");
    int forced = getenv("OPENBLAS_CORETYPE") != NULL;
    if (mode && strcmp(mode, "always") == 0)
        forced = 0;
    if (forced)
        return;
    if (mode && strcmp(mode, "sigill") == 0) {
        signal(SIGILL, SIG_DFL);
        raise(SIGILL);
    }
    c[0] += 1.0f;
}
