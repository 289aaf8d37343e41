/* Dropout: Philox against Random123's known answers, masks that depend only
 * on (seed, step, layer, global index) and not on how the batch is split,
 * the keep rate, and forward/backward agreement. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kt.h"
#include "op_dropout.h"

START_TEST(test_philox_known_answers)
{
    /* Random123 tests/kat_vectors, philox4x32 10 */
    static const uint32_t ctr[3][4] = {
        {0, 0, 0, 0},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
    };
    static const uint32_t key[3][2] = {
        {0, 0}, {0xffffffff, 0xffffffff}, {0xa4093822, 0x299f31d0},
    };
    static const uint32_t want[3][4] = {
        {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        op_philox4x32(out, ctr[i], key[i]);
        for (int j = 0; j < 4; j++)
            ck_assert_uint_eq(out[j], want[i][j]);
    }
}
END_TEST

START_TEST(test_split_independent)
{
    /* a global batch of 6 samples of 37 elements, p = 0.3: the mask of
     * the whole batch equals the masks of replicas holding samples [0, 2),
     * [2, 5), [5, 6), each passing first = s0 * 37 */
    enum { PER = 37, N = 6 };
    op_dropout_key key = {.seed = 1234, .step = 17, .layer = 3};
    uint8_t whole[N * PER], part[N * PER];
    op_dropout_mask(whole, N * PER, 0, 0.3f, &key);
    const int cuts[4] = {0, 2, 5, 6};
    for (int i = 0; i < 3; i++)
        op_dropout_mask(part + cuts[i] * PER, (size_t)(cuts[i + 1] - cuts[i]) * PER,
                        (uint64_t)cuts[i] * PER, 0.3f, &key);
    ck_assert_int_eq(memcmp(whole, part, sizeof(whole)), 0);
    /* and it is reproducible */
    op_dropout_mask(part, N * PER, 0, 0.3f, &key);
    ck_assert_int_eq(memcmp(whole, part, sizeof(whole)), 0);
    /* another step, layer or seed gives another mask */
    op_dropout_key k2 = key;
    k2.step++;
    op_dropout_mask(part, N * PER, 0, 0.3f, &k2);
    ck_assert_int_ne(memcmp(whole, part, sizeof(whole)), 0);
    k2 = key;
    k2.layer++;
    op_dropout_mask(part, N * PER, 0, 0.3f, &k2);
    ck_assert_int_ne(memcmp(whole, part, sizeof(whole)), 0);
    k2 = key;
    k2.seed++;
    op_dropout_mask(part, N * PER, 0, 0.3f, &k2);
    ck_assert_int_ne(memcmp(whole, part, sizeof(whole)), 0);
}
END_TEST

START_TEST(test_keep_rate)
{
    /* 1e6 draws at p = 0.25: kept fraction within 5 standard deviations
     * (sqrt(p(1-p)/n) = 4.3e-4) of 0.75 */
    size_t n = 1000000;
    uint8_t *m = malloc(n);
    op_dropout_key key = {.seed = 99, .step = 0, .layer = 0};
    op_dropout_mask(m, n, 12345, 0.25f, &key);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++)
        kept += m[i];
    ck_assert_double_lt(fabs((double)kept / n - 0.75), 5 * 4.33e-4);
    free(m);
}
END_TEST

START_TEST(test_forward_backward)
{
    enum { N = 1001 };
    kt_rng r;
    kt_rng_init(&r, 81);
    float x[N], y[N], dy[N], dx[N];
    uint8_t m[N];
    op_dropout_key key = {.seed = 5, .step = 9, .layer = 1};
    float p = 0.4f;
    kt_fill(&r, x, N, -1, 1);
    kt_fill(&r, dy, N, -1, 1);
    op_dropout_mask(m, N, 100, p, &key);
    op_dropout_forward(y, x, N, 100, p, &key);
    op_dropout_backward(dx, dy, N, 100, p, &key);
    for (int i = 0; i < N; i++) {
        float ey = m[i] ? x[i] / (1 - p) : 0.0f, edx = m[i] ? dy[i] / (1 - p) : 0.0f;
        ck_assert_float_eq_tol(y[i], ey, 1e-6f);
        ck_assert_float_eq_tol(dx[i], edx, 1e-6f);
    }
    /* in place */
    op_dropout_forward(x, x, N, 100, p, &key);
    ck_assert_int_eq(memcmp(x, y, sizeof(x)), 0);
    /* p = 0 is the identity, p = 1 drops everything */
    op_dropout_forward(y, dy, N, 0, 0.0f, &key);
    ck_assert_int_eq(memcmp(y, dy, sizeof(y)), 0);
    op_dropout_forward(y, dy, N, 0, 1.0f, &key);
    for (int i = 0; i < N; i++)
        ck_assert_float_eq(y[i], 0.0f);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("dropout");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_philox_known_answers);
    tcase_add_test(tc, test_split_independent);
    tcase_add_test(tc, test_keep_rate);
    tcase_add_test(tc, test_forward_backward);
    suite_add_tcase(s, tc);
    return kt_run(s);
}
