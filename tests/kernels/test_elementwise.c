/* Concatenation along channels (on one and two threads), elementwise
 * addition and flatten: exact copies, checked element by element. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "kt.h"
#include "op_concat.h"
#include "op_elementwise.h"

/* Three inputs of 2, 1 and 3 channels: every element where it belongs,
 * and back. */
static void concat_case(int N, int HW)
{
    const int ch[3] = {2, 1, 3};
    kt_rng r;
    kt_rng_init(&r, 71);
    float *in[3], *din[3];
    for (int j = 0; j < 3; j++) {
        in[j] = kt_falloc((size_t)N * ch[j] * HW);
        din[j] = kt_falloc((size_t)N * ch[j] * HW);
        kt_fill(&r, in[j], (size_t)N * ch[j] * HW, -1, 1);
    }
    float *out = kt_falloc((size_t)N * 6 * HW);
    op_concat_forward(out, (const float *const *)in, ch, 3, N, HW);
    /* a plane at a time (an assertion per element took longer than the
     * test's time under the sanitizers) */
    for (int i = 0; i < N; i++)
        for (int c = 0; c < 6; c++) {
            int j = c < 2 ? 0 : c < 3 ? 1 : 2;
            int cj = c < 2 ? c : c < 3 ? c - 2 : c - 3;
            ck_assert_msg(memcmp(out + ((size_t)i * 6 + c) * HW,
                                 in[j] + ((size_t)i * ch[j] + cj) * HW, sizeof(float) * HW) == 0,
                          "sample %d channel %d is not input %d's channel %d", i, c, j, cj);
        }
    /* backward splits dout back; a NULL gradient is skipped */
    float *keep = din[1];
    din[1] = NULL;
    op_concat_backward(din, out, ch, 3, N, HW);
    din[1] = keep;
    for (int j = 0; j < 3; j += 2)
        ck_assert_msg(memcmp(din[j], in[j], sizeof(float) * (size_t)N * ch[j] * HW) == 0,
                      "input %d's gradient is not its part of dout", j);
    for (int j = 0; j < 3; j++) {
        free(in[j]);
        free(din[j]);
    }
    free(out);
}

START_TEST(test_concat)
{
    concat_case(2, 5);
    /* copies large enough to be shared out over two threads */
    kernels_set_threads(2);
    concat_case(3, 70000);
    kernels_set_threads(1);
}
END_TEST

START_TEST(test_add_and_flatten)
{
    const float a[3] = {1, 2, 3}, b[3] = {0.5f, -2, 4}, dy[3] = {7, 8, 9};
    float y[3], da[3], db[3], f[3];
    op_add_forward(y, a, b, 3);
    ck_assert_float_eq(y[0], 1.5f);
    ck_assert_float_eq(y[1], 0);
    ck_assert_float_eq(y[2], 7);
    op_add_backward(da, db, dy, 3);
    op_add_backward(NULL, NULL, dy, 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_float_eq(da[i], dy[i]);
        ck_assert_float_eq(db[i], dy[i]);
    }
    op_flatten_forward(f, a, 3);
    op_flatten_forward(f, f, 3);
    op_flatten_backward(f, f, 3);
    for (int i = 0; i < 3; i++)
        ck_assert_float_eq(f[i], a[i]);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("elementwise");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_concat);
    tcase_add_test(tc, test_add_and_flatten);
    suite_add_tcase(s, tc);
    return kt_run(s);
}
