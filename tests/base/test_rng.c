/* Counter-based normals: the polynomial Box-Muller against libm's, the
 * vectorized draw against the scalar one bit for bit, fixed bits for fixed
 * counters (the data and the initial weights of a job do not depend on
 * the machine), and the moments of a standard normal; the same for the
 * float32 normals of the synthetic data. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../check_loop.h"
#include "rng.h"

/* Box-Muller as libm computes it: the definition the polynomials replace. */
static double libm_normal(uint64_t seed, uint64_t stream, uint64_t i)
{
    double u1 = rng_uniform(seed, stream, 2 * i), u2 = rng_uniform(seed, stream, 2 * i + 1);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

START_TEST(near_libm)
{
    /* libm rounds 2 pi u2 before its cosine: up to 8.9e-16 off in the
     * argument, times sqrt(-2 log u1) <= 8.6 */
    const uint64_t n = 400000;
    uint64_t floats_differ = 0;
    for (uint64_t i = 0; i < n; i++) {
        double a = rng_normal(7, 2, i), b = libm_normal(7, 2, i);
        ck_check(fabs(a - b) <= 1e-14 * fmax(1.0, fabs(b)), "index %llu: %.17g against libm's %.17g",
                      (unsigned long long)i, a, b);
        floats_differ += (float)(0.25 + 0.5 * a) != (float)(0.25 + 0.5 * b);
    }
    /* as a float sample the two agree but for a rare last bit */
    ck_assert_uint_le(floats_differ, 2);
}
END_TEST

START_TEST(vector_is_scalar)
{
    const size_t lens[] = {1, 2, 7, 8, 9, 63, 64, 513, 4099};
    const uint64_t firsts[] = {0, 1, 3, UINT64_C(1) << 33};
    double *v = malloc(4099 * sizeof(double));
    for (size_t f = 0; f < sizeof(firsts) / sizeof(firsts[0]); f++)
        for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
            rng_normal_n(11, 5, firsts[f], lens[l], v);
            for (size_t i = 0; i < lens[l]; i++) {
                double s = rng_normal(11, 5, firsts[f] + i);
                ck_check(memcmp(&s, &v[i], sizeof(s)) == 0, "first %llu, element %zu of %zu: %.17g, scalar %.17g",
                              (unsigned long long)firsts[f], i, lens[l], v[i], s);
            }
        }
    free(v);
}
END_TEST

START_TEST(fixed_bits)
{
    const struct {
        uint64_t index, bits;
    } want[] = {
        {0, UINT64_C(0x3fe7a1ca5fe0453d)},     {1, UINT64_C(0x3ff8242ffe777650)},
        {2, UINT64_C(0x3ffbb29197820e62)},     {12345, UINT64_C(0xbfdb4c986846162a)},
        {UINT64_C(1) << 40, UINT64_C(0xbfc7142d03d75b22)},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        double v = rng_normal(42, 2, want[i].index);
        uint64_t b;
        memcpy(&b, &v, sizeof(b));
        ck_assert_msg(b == want[i].bits, "index %llu: 0x%016llx (%.17g), want 0x%016llx",
                      (unsigned long long)want[i].index, (unsigned long long)b, v,
                      (unsigned long long)want[i].bits);
    }
}
END_TEST

START_TEST(moments)
{
    const size_t n = 1 << 20;
    double *v = malloc(n * sizeof(double)), s1 = 0, s2 = 0, s4 = 0;
    size_t beyond2 = 0;
    rng_normal_n(3, 9, 0, n, v);
    for (size_t i = 0; i < n; i++) {
        s1 += v[i];
        s2 += v[i] * v[i];
        s4 += v[i] * v[i] * v[i] * v[i];
        beyond2 += fabs(v[i]) > 2.0;
    }
    free(v);
    /* standard errors: 1e-3 for the mean, 1.4e-3 for the variance, 1e-2
     * for the fourth moment (3), 2.1e-4 for P(|x| > 2) = 0.0455 */
    ck_assert_double_lt(fabs(s1 / n), 5e-3);
    ck_assert_double_lt(fabs(s2 / n - 1.0), 7e-3);
    ck_assert_double_lt(fabs(s4 / n - 3.0), 5e-2);
    ck_assert_double_lt(fabs((double)beyond2 / n - 0.0455), 1.1e-3);
}
END_TEST

/* rng_normal_f32 against the same draw in double with libm: normal 2p and
 * 2p + 1 are sqrt(-2 log u1) cos t and ... sin t of hash p's uniforms. */
static uint64_t ref_mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

START_TEST(f32_near_libm)
{
    const uint64_t n = 1 << 20;
    uint64_t h = ref_mix(ref_mix(7) ^ 2);
    double worst = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t k = ref_mix(h ^ (i >> 1));
        double u1 = (double)((k >> 40) + 1) / 16777216.0;
        double t = 6.283185307179586 * ((double)(k & 0xffffff) / 16777216.0);
        double want = sqrt(-2.0 * log(u1)) * (i & 1 ? sin(t) : cos(t));
        double err = fabs(rng_normal_f32(7, 2, i) - want);
        ck_check(err <= 1e-6, "index %llu: %.9g against %.9g", (unsigned long long)i,
                      rng_normal_f32(7, 2, i), want);
        worst = err > worst ? err : worst;
    }
    ck_assert_double_gt(worst, 0); /* it is float32: not the double's bits */
}
END_TEST

START_TEST(f32_vector_is_scalar)
{
    const size_t lens[] = {1, 2, 3, 7, 511, 512, 513, 4099};
    const uint64_t firsts[] = {0, 1, 2, 3, (UINT64_C(1) << 33) + 1};
    float *v = malloc(4099 * sizeof(float));
    for (size_t f = 0; f < sizeof(firsts) / sizeof(firsts[0]); f++)
        for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
            memset(v, 0xff, 4099 * sizeof(float));
            rng_normal_f32_n(11, 5, firsts[f], lens[l], v);
            for (size_t i = 0; i < lens[l]; i++) {
                float s = rng_normal_f32(11, 5, firsts[f] + i);
                ck_check(memcmp(&s, &v[i], sizeof(s)) == 0,
                              "first %llu, element %zu of %zu: %.9g, scalar %.9g",
                              (unsigned long long)firsts[f], i, lens[l], v[i], s);
            }
            if (lens[l] < 4099) /* nothing written past the end */
                ck_assert_uint_eq(((uint32_t *)v)[lens[l]], 0xffffffffu);
        }
    free(v);
}
END_TEST

START_TEST(f32_fixed_bits)
{
    const struct {
        uint64_t index;
        uint32_t bits;
    } want[] = {
        {0, 0xc009f6bbu},     {1, 0x3fd2193eu},
        {2, 0x3f1e3b41u},     {3, 0xbe90554au},
        {12345, 0xbf851cd4u}, {UINT64_C(1) << 40, 0xbfcfa220u},
        {(UINT64_C(1) << 40) + 1, 0x3e41e587u},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        float v = rng_normal_f32(42, 2, want[i].index);
        uint32_t b;
        memcpy(&b, &v, sizeof(b));
        ck_assert_msg(b == want[i].bits, "index %llu: 0x%08x (%.9g), want 0x%08x",
                      (unsigned long long)want[i].index, b, v, want[i].bits);
    }
}
END_TEST

START_TEST(f32_moments)
{
    const size_t n = 1 << 20;
    float *v = malloc(n * sizeof(float));
    double s1 = 0, s2 = 0, s4 = 0, odd2 = 0, cross = 0;
    size_t beyond2 = 0;
    rng_normal_f32_n(3, 9, 0, n, v);
    for (size_t i = 0; i < n; i++) {
        double x = v[i];
        s1 += x;
        s2 += x * x;
        s4 += x * x * x * x;
        beyond2 += fabs(x) > 2.0;
        ck_check(fabs(x) <= 5.78, "|%g| beyond the tail", x); /* the 24-bit uniforms' tail */
        if (i & 1) {
            odd2 += x * x;
            cross += x * v[i - 1]; /* the two parts of a draw are uncorrelated */
        }
    }
    free(v);
    ck_assert_double_lt(fabs(s1 / n), 5e-3);
    ck_assert_double_lt(fabs(s2 / n - 1.0), 7e-3);
    ck_assert_double_lt(fabs(odd2 / (n / 2) - 1.0), 1e-2);
    ck_assert_double_lt(fabs(cross / (n / 2)), 7e-3);
    ck_assert_double_lt(fabs(s4 / n - 3.0), 5e-2);
    ck_assert_double_lt(fabs((double)beyond2 / n - 0.0455), 1.1e-3);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("rng");
    TCase *t = tcase_create("normal");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, near_libm);
    tcase_add_test(t, vector_is_scalar);
    tcase_add_test(t, fixed_bits);
    tcase_add_test(t, moments);
    tcase_add_test(t, f32_near_libm);
    tcase_add_test(t, f32_vector_is_scalar);
    tcase_add_test(t, f32_fixed_bits);
    tcase_add_test(t, f32_moments);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
