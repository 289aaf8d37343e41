/* The BLAS start-up self-check: OpenBLAS's own kernels pass it, a GEMM
 * that is wrong in one element or that dies of SIGILL fails it with a
 * message that says how, and the fallback core types form a chain that
 * never returns the core that failed. */
#include <check.h>
#include <cblas.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "blas_check.h"
#include "kt.h"

/* OpenBLAS, then one element of C off by a part in ten thousand: what a
 * kernel with a wrong edge case gives. */
static void gemm_off_by_a_bit(int ta, int tb, int m, int n, int k, float alpha, const float *a,
                              int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    blas_sgemm_openblas(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (m > 30 && n > 60)
        c[(size_t)30 * ldc + 60] *= 1.0001f;
}

/* What a kernel using instructions the processor does not run does. */
static void gemm_illegal(int ta, int tb, int m, int n, int k, float alpha, const float *a,
                         int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b;
    (void)ldb, (void)beta, (void)c, (void)ldc;
    signal(SIGILL, SIG_DFL);
    raise(SIGILL);
}

START_TEST(test_openblas_passes)
{
    char err[256] = "";
    ck_assert_msg(blas_selfcheck(blas_sgemm_openblas, err, sizeof(err)) == 0, "%s", err);
    ck_assert_msg(blas_selfcheck_isolated(blas_sgemm_openblas, err, sizeof(err)) == 0, "%s", err);
}
END_TEST

START_TEST(test_wrong_element_fails)
{
    char err[256] = "";
    ck_assert_int_eq(blas_selfcheck(gemm_off_by_a_bit, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, "C[30][60]") && strstr(err, "reference"), "%s", err);
    /* the first shape large enough is named, with its transposes */
    ck_assert_msg(strncmp(err, "sgemm NN 64x64x64:", 18) == 0, "%s", err);
    err[0] = 0;
    ck_assert_int_eq(blas_selfcheck_isolated(gemm_off_by_a_bit, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, "C[30][60]"), "%s", err);
}
END_TEST

START_TEST(test_signal_fails)
{
    char err[256] = "";
    ck_assert_int_eq(blas_selfcheck_isolated(gemm_illegal, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, "signal 4"), "%s", err);
}
END_TEST

START_TEST(test_fallback_chain)
{
    __builtin_cpu_init();
    const char *first = blas_fallback_core("SkylakeX");
    ck_assert_ptr_nonnull(first);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        ck_assert_str_eq(first, "Haswell");
    /* each step leaves the core that failed */
    const char *second = blas_fallback_core(first);
    ck_assert_ptr_nonnull(second);
    ck_assert_str_ne(second, first);
    const char *last = blas_fallback_core("Prescott");
    ck_assert(last == NULL || strcmp(last, "Prescott") != 0);
    ck_assert_str_eq(blas_fallback_core(NULL), first);
}
END_TEST

/* The newer cores a processor allows, by its instruction set; none for
 * the newest, and none for a name the table does not know. */
START_TEST(test_better_cores)
{
    const char *out[8];
    int n = blas_better_cores("Prescott", KERNELS_ISA_AVX512_BF16, out, 8);
    ck_assert_int_eq(n, 4);
    ck_assert_str_eq(out[0], "Cooperlake");
    ck_assert_str_eq(out[1], "SkylakeX");
    /* the search keeps the first of these that computes right: Haswell
     * before Zen (their kernels are alike; Haswell is the Intel name) */
    ck_assert_str_eq(out[2], "Haswell");
    ck_assert_str_eq(out[3], "Zen");
    n = blas_better_cores("prescott", KERNELS_ISA_AVX512, out, 8);
    ck_assert_int_eq(n, 3);
    ck_assert_str_eq(out[0], "SkylakeX");
    n = blas_better_cores("Haswell", KERNELS_ISA_AVX512, out, 8);
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(out[0], "SkylakeX");
    ck_assert_int_eq(blas_better_cores("Sandybridge", KERNELS_ISA_AVX2, out, 8), 2);
    ck_assert_int_eq(blas_better_cores("Haswell", KERNELS_ISA_AVX2, out, 8), 0);
    ck_assert_int_eq(blas_better_cores("Cooperlake", KERNELS_ISA_AMX, out, 8), 0);
    ck_assert_int_eq(blas_better_cores("Prescott", KERNELS_ISA_BASE, out, 8), 0);
    ck_assert_int_eq(blas_better_cores("SapphireRapids", KERNELS_ISA_AMX, out, 8), 0);
    ck_assert_int_eq(blas_better_cores("Prescott", KERNELS_ISA_AVX512_BF16, out, 1), 1);
    /* under a cap: the cores it allows, where the named one needs more */
    n = blas_allowed_cores("Cooperlake", KERNELS_ISA_AVX2, out, 8);
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(out[0], "Haswell");
    ck_assert_int_eq(blas_allowed_cores("SkylakeX", KERNELS_ISA_AVX512, out, 8), 0);
    ck_assert_int_eq(blas_allowed_cores("Haswell", KERNELS_ISA_AVX2, out, 8), 0);
    ck_assert_int_eq(blas_allowed_cores("SkylakeX", KERNELS_ISA_BASE, out, 8), 0);
}
END_TEST

/* A probe starts this program again on the core asked for, checks and
 * times it: Prescott's SSE3 kernels run anywhere, and on a processor with
 * AVX2 Haswell's run faster. */
START_TEST(test_probe_times_a_core)
{
    double slow, fast;
    char why[256] = "";
    ck_assert_msg(blas_probe_core("Prescott", &slow, why, sizeof(why)) == 0, "%s", why);
    ck_assert(slow > 0);
    if (kernels_isa_processor() >= KERNELS_ISA_AVX2) {
        ck_assert_msg(blas_probe_core("Haswell", &fast, why, sizeof(why)) == 0, "%s", why);
        printf("sgemm 256^3 on one thread: Prescott %.1f, Haswell %.1f GFLOP/s\n", slow, fast);
        ck_assert_msg(fast > slow, "Haswell %.1f, Prescott %.1f GFLOP/s", fast, slow);
    }
}
END_TEST

START_TEST(test_guard_reports_the_core)
{
    setenv("APPLIANCE_BLAS_SEARCH", "off", 1); /* a search would start this test again */
    blas_status st;
    char err[256] = "";
    char *argv[] = {"test", NULL};
    ck_assert_msg(blas_guard(argv, &st, err, sizeof(err)) == 0, "%s", err);
    ck_assert_str_eq(st.core, openblas_get_corename());
    ck_assert_str_eq(st.failed, "");
    const char *forced = getenv("OPENBLAS_CORETYPE");
    if (forced)
        ck_assert_msg(strcasecmp(forced, st.core) == 0, "forced %s, runs %s", forced, st.core);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("blas_check");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_openblas_passes);
    tcase_add_test(tc, test_wrong_element_fails);
    tcase_add_test(tc, test_signal_fails);
    tcase_add_test(tc, test_fallback_chain);
    tcase_add_test(tc, test_better_cores);
    tcase_add_test(tc, test_probe_times_a_core);
    tcase_add_test(tc, test_guard_reports_the_core);
    suite_add_tcase(s, tc);
    return kt_run(s);
}
