/* A misdetecting BLAS, for tests/wse-node/blas_fallback.sh: preloaded
 * into a wse-node, it interposes cblas_sgemm and, unless OPENBLAS_CORETYPE
 * is set (the guard's fallback and its probes set it), gives what a kernel
 * of the wrong core type gives. BLAS_SHIM decides how it fails:
 *   wrong     C[0][0] off by one (the default)
 *   sigill    the process dies of SIGILL, as on an instruction it lacks
 *   always    wrong whatever the core type: the fallback fails too
 *   old       right, but OpenBLAS names core Prescott and is four times
 *             slower, as a library that does not know a new processor
 *   old-newer as old, and the AVX-512 cores (SkylakeX, Cooperlake) give
 *             wrong values where they are asked for */
#include <cblas.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef void (*sgemm_fn)(const enum CBLAS_ORDER, const enum CBLAS_TRANSPOSE,
                         const enum CBLAS_TRANSPOSE, const blasint, const blasint, const blasint,
                         const float, const float *, const blasint, const float *, const blasint,
                         const float, float *, const blasint);
typedef char *(*corename_fn)(void);

static int mode_is(const char *m)
{
    const char *mode = getenv("BLAS_SHIM");
    return mode && strcmp(mode, m) == 0;
}

static int old_mode(void)
{
    return mode_is("old") || mode_is("old-newer");
}

char *openblas_get_corename(void)
{
    corename_fn real = (corename_fn)dlsym(RTLD_NEXT, "openblas_get_corename");
    if (old_mode() && !getenv("OPENBLAS_CORETYPE"))
        return (char *)"Prescott";
    return real();
}

void cblas_sgemm(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE ta,
                 const enum CBLAS_TRANSPOSE tb, const blasint m, const blasint n, const blasint k,
                 const float alpha, const float *a, const blasint lda, const float *b,
                 const blasint ldb, const float beta, float *c, const blasint ldc)
{
    sgemm_fn real = (sgemm_fn)dlsym(RTLD_NEXT, "cblas_sgemm");
    const char *forced = getenv("OPENBLAS_CORETYPE");
    if (old_mode() && !forced && beta == 0.0f) /* three more times the work, into C alike */
        for (int i = 0; i < 3; i++)
            real(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    real(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (old_mode()) {
        if (mode_is("old-newer") && forced &&
            (strcasecmp(forced, "SkylakeX") == 0 || strcasecmp(forced, "Cooperlake") == 0))
            c[0] += 1.0f;
        return;
    }
    if (forced && !mode_is("always"))
        return;
    if (mode_is("sigill")) {
        signal(SIGILL, SIG_DFL);
        raise(SIGILL);
    }
    c[0] += 1.0f;
}
